"""Recall ranking (actors/store/recall.py): the query builder
(stopwords, prefix rule, safety), BM25 pool + coverage + same-session context, filters
with pool widening, the Python matcher against FTS5 itself, and a LoCoMo regression
guard.

Rules: each test opens its own in-memory or ``tmp_path`` database; hypothesis tests are
derandomised, open a fresh ``:memory:`` database per example or only read a shared one
(``bump=False``); the LoCoMo guard reads ``bench/data/locomo-dev.json`` and is skipped
when that file is absent.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.store.notes import _COLS, MemoryStore
from actors.store.recall import (
    POOL_MIN,
    STOPWORDS,
    build_recall_query,
    matches_text,
    ranked_search,
    register_recall_functions,
)
from actors.store.schema import open_database
from tests.conftest import sqlite_only


@pytest.fixture
def conn(engine_conn):
    """Every test here runs on each engine (SQLite, PostgreSQL)."""
    return engine_conn


@pytest.fixture
def store(conn):
    return MemoryStore(conn, max_entries=10_000)


def ids(hits):
    return [n.id for n in hits]


# -- query builder ----------------------------------------------------------------------


def test_stopwords_are_dropped_from_queries():
    rq = build_recall_query("When did Caroline go to the LGBTQ support group?")
    assert rq.match == '"caroline" OR "go" OR "lgbtq" OR "support" OR "group"'
    assert not rq.all_stopwords
    assert {"when", "did", "to", "the", "didn", "t"} <= STOPWORDS


def test_all_stopword_query_keeps_its_words(store):
    rq = build_recall_query("to be or not to be")
    assert rq.all_stopwords and rq.match == '"to" OR "be" OR "or" OR "not"'
    hamlet = store.store("To be, or not to be, that is the question")
    store.store("Completely different")
    assert ids(store.recall("to be or not to be")) == [hamlet.id]


def test_prefix_only_for_non_ascii_words_of_four_chars():
    # English words rely on Porter (FTS5 stems the quoted term too): no prefix.
    rq = build_recall_query("going camping Caroline like pytest")
    assert rq.match == '"going" OR "camping" OR "caroline" OR "like" OR "pytest"'
    # Porter leaves other scripts alone: prefix from 4 chars on, never shorter. Latin
    # diacritics are folded first (fts.fold_latin), so "café" is the English "cafe".
    rq = build_recall_query("ёжик ёж café v2 zoo")
    assert rq.match == '"ёжик"* OR "ёж" OR "cafe" OR "v2" OR "zoo"'


def test_a_search_without_accents_finds_what_was_written_with_them(store):
    pho = store.store("The user had phở in Hà Nội")
    lodz = store.store("The user studied in Łódź, near the Straße")
    store.store("Completely different")
    assert ids(store.recall("pho ha noi")) == [pho.id]
    assert ids(store.recall("lodz")) == [lodz.id] and ids(store.recall("strasse")) == [lodz.id]
    assert ids(store.recall("PHỞ")) == [pho.id]  # and the accents still find it


def test_prefix_still_finds_unstemmed_inflections(store):
    hedgehogs = store.store("пользователь предпочитает ёжиков")
    store.store("We went going gone good goal")  # "go*" noise must not matter
    cats = store.store("My cats like the likely story")
    assert ids(store.recall("cat")) == [cats.id]  # Porter: cats -> cat
    assert ids(store.recall("ёжик")) == [hedgehogs.id]
    camp = store.store("We camped by the lake")
    assert camp.id in ids(store.recall("camping trip"))


def test_cjk_query_terms():
    assert build_recall_query("喝咖啡").match == '"喝咖 咖啡"'
    assert build_recall_query("部署v2").match == '"部署" OR "v2"'
    assert build_recall_query("茶").match == '"茶"*'


_TERM = r'"[^"*():^{}+\-\s][^"*():^{}+\-]*"\*?'
_MATCH_SHAPE = re.compile(f"{_TERM}(?: OR {_TERM})*")
_HOSTILE_PIECES = ['"', "*", "-", ":", "^", "(", ")", "{", "}", "+", "NEAR", "AND", "OR", "NOT",
                   "NEAR(", "\x00", "\u200b", "\ufeff", "🙂", "👨‍👩‍👧", "咖啡", "ёжик", "e\u0301",
                   "content:", "rank", "'", "\\", "\n", "\t", " "]
_ANY_TEXT = st.one_of(
    st.text(max_size=300),
    st.lists(st.sampled_from(_HOSTILE_PIECES) | st.text(max_size=5), max_size=60).map("".join),
)


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory):
    c = open_database(str(tmp_path_factory.mktemp("quality") / "memory.sqlite"))
    s = MemoryStore(c)
    texts = ["green tea every morning", "我喜欢喝咖啡", "部署v2版本后再测试",
             "Sister lives in Lyon", "пользователь предпочитает ёжиков",
             "NEAR AND OR NOT are words here",
             "emoji 🙂 and zero\u200bwidth", "to be or not to be"]
    for i, text in enumerate(texts):
        s.store(text, session_id="s1" if i % 2 else None)
    yield s, {n.id for n in s.list(limit=200, archived="all")}
    c.close()


@settings(derandomize=True, max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_ANY_TEXT)
def test_any_unicode_text_is_a_safe_recall_query(shared_store, text):
    """Property: any text -> no exception, results are stored notes with
    scores in [0, 1] (best first, first = 1.0); the MATCH string holds only quoted
    terms joined by OR."""
    store, stored = shared_store
    query = text.strip()[:500]
    hits = store.recall(query, k=8, bump=False)
    assert {n.id for n in hits} <= stored
    scores = [n.score for n in hits]
    assert all(0.0 <= s <= 1.0 for s in scores) and scores == sorted(scores, reverse=True)
    assert not hits or scores[0] == 1.0
    rq = build_recall_query(query)
    if rq is None:
        assert hits == []
    else:
        assert _MATCH_SHAPE.fullmatch(rq.match), rq.match


_WORDS = ["tea", "teas", "teapot", "coffee", "lyon", "ёжиков", "ёжик", "run", "running",
          "喝咖啡", "咖啡", "v2", "版本", "the", "and"]


@pytest.mark.slow
@settings(derandomize=True, max_examples=100, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_WORDS), min_size=1, max_size=6), min_size=1,
                max_size=8),
       st.lists(st.sampled_from(_WORDS), min_size=1, max_size=3))
def test_python_matcher_agrees_with_fts5(notes, query_words):
    """``matches_text`` (used for same-session neighbours) selects exactly the notes
    that ``memories_fts MATCH`` selects."""
    c = open_database(":memory:")
    try:
        s = MemoryStore(c, dedup=False)
        texts = {s.store(" ".join(words)).id: " ".join(words) for words in notes}
        rq = build_recall_query(" ".join(query_words))
        fts = {r[0] for r in c.execute(
            "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?", (rq.match,))}
        assert fts == {i for i, t in texts.items() if matches_text(rq, t)}
    finally:
        c.close()


# -- ranking ------------------------------------------------------------------------------


def test_coverage_prefers_notes_with_more_query_terms(store):
    filler = [store.store(f"Gina said something about the weather {i}") for i in range(6)]
    one = store.store("Contemporary dance is so expressive")
    both = store.store("Gina loves contemporary dance")
    hits = store.recall("What is Gina's favourite dance?", k=3)
    assert ids(hits)[0] == both.id and one.id in ids(hits)
    assert filler  # the name alone is common: nearly no BM25 weight, coverage still counts


@pytest.mark.parametrize("reactions", [0, 1])
def test_same_session_context_lifts_the_answer_turn(store, reactions):
    """The question turn names the topic; the answer turn, right after it or two turns
    away (a reaction in between: ``CONTEXT_RADIUS`` 2, LoCoMo dev recall@10 68.2 ->
    71.1 %), shares one word with the query and is lifted; the same speaker in another
    session gets nothing."""
    for i in range(10):
        store.store(f"Jon: random chat about the office {i}", session_id="x")
    store.store("Jon: Gina, which dance style is your favourite?", session_id="s")
    for _ in range(reactions):
        store.store("Jon: sorry, I ask everybody that", session_id="s")
    answer = store.store("Gina: Contemporary, it is so expressive, I love it", session_id="s")
    store.store("Jon: totally different subject now", session_id="s")
    other = store.store("Gina: my Sunday was quiet", session_id="t")
    hits = store.recall("Gina favourite dance style", k=2)
    assert answer.id in ids(hits) and other.id not in ids(hits)
    # The context never returns a neighbour that matches no query word.
    assert all(matches_text(build_recall_query("Gina favourite dance style"), n.content)
               for n in store.recall("Gina favourite dance style", k=20))


def test_context_needs_the_same_session(store):
    store.store("Jon: Gina, which dance style is your favourite?", session_id="s")
    answer = store.store("Gina: Contemporary, it is so expressive", session_id="t")
    solo = store.recall("Gina dance style", k=5)
    assert ids(solo)[0] != answer.id


def test_a_turn_that_asks_ranks_below_its_reply(store):
    """Step 5: two notes with the same query words, one ending in a question mark (in
    any script's question mark), one stating; the statement comes first, and the
    question still lifts its reply through the context step. Without the factor
    (``asking_weight=1.0``) the shorter question wins on BM25 alone."""
    for i in range(10):
        store.store(f"Jon: random chat about the office {i}", session_id="x")
    asks = store.store("Jon: what kind of yoga do you do?", session_id="s")
    store.store("Gina: hmm, let me think", session_id="s")
    says = store.store("Gina: mostly aerial yoga, that kind is so good for my back after a "
                       "long day at work", session_id="s")
    for mark in ("？", "؟"):
        store.store(f"Jon: yoga kind{mark}", session_id="t")
    hits = store.recall("What kind of yoga?", k=4)
    assert ids(hits)[0] == says.id and asks.id in ids(hits)
    rq = build_recall_query("What kind of yoga?")
    plain = ranked_search(store.conn, rq, 4, cols=_COLS, asking_weight=1.0)
    assert plain[0][0][0] != says.id
    ranked = ranked_search(store.conn, rq, 4, cols=_COLS)
    assert [r[0] for r, _s in ranked] == ids(hits)

def test_scores_normalised_best_first(store):
    """Normalised BM25 scores, best first, through the full ranking."""
    n1 = store.store("My sister works as a nurse at the hospital in Lyon")
    n2 = store.store("We visited Lyon once")
    store.store("Bought new running shoes")
    store.store("Dentist appointment on Tuesday")
    hits = store.recall("Lyon hospital")
    assert ids(hits) == [n1.id, n2.id]
    assert hits[0].score == 1.0 and 0.0 <= hits[1].score < 1.0


def test_filters_widen_the_pool(store):
    """Scope / tag filters are applied after the BM25 pool; the pool grows until enough
    notes survive, so a filtered recall is exact however many notes outrank them."""
    for i in range(3 * POOL_MIN):
        store.store(f"deploy deploy deploy checklist {i}", scope="project", working_dir="/other")
    mine = store.store("deploy notes for this repo, long text lowers bm25 a lot " * 3,
                       scope="project", working_dir="/mine")
    tagged = store.store("deploy runbook " + "padding words " * 20, tags=["ops"])
    assert ids(store.recall("deploy", scope="project", working_dir="/mine")) == [mine.id]
    assert ids(store.recall("deploy", tags=["ops"])) == [tagged.id]
    visible = ids(store.recall("deploy", working_dir="/mine", k=5))
    assert set(visible) == {mine.id, tagged.id}


def test_recall_functions_register_idempotently(conn):
    register_recall_functions(conn)
    register_recall_functions(conn)
    MemoryStore(conn).store("hello world")
    assert [n.content for n in MemoryStore(conn).recall("hello")] == ["hello world"]


# -- LoCoMo regression guard --------------------------------------------------------------

_LOCOMO = Path(__file__).resolve().parents[1] / "bench" / "data" / "locomo-dev.json"


@pytest.mark.slow
@pytest.mark.skipif(not _LOCOMO.exists(), reason="LoCoMo dev data not present")
def test_locomo_recall_beats_the_stopword_baseline():
    """Two LoCoMo dev conversations through ``bench.locomo``: recall@10 of
    ``MemoryStore.recall`` stays well above plain FTS5 with stopwords removed (full run:
    71.1 % vs 60.2 %, bench/RESULTS.md)."""
    import json

    from bench.locomo import evaluate, memory_recall, stopword_fts

    convs = json.loads(_LOCOMO.read_text(encoding="utf-8"))[:2]
    table, _ms, n = evaluate(convs, {"stop": stopword_fts, "recall": memory_recall},
                             defaultdict(int))
    assert n["all"] > 100
    assert table["recall"]["all"]["R@10"] >= 0.65
    assert table["recall"]["all"]["R@10"] >= table["stop"]["all"]["R@10"] + 0.04


@settings(derandomize=True, max_examples=500, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127)))
def test_ascii_fast_path_of_query_terms_is_exact(text):
    """``fts.query_terms`` takes a regex shortcut for ASCII text; an em dash (a
    separator) appended forces the general path, which must give the same words."""
    from actors.store.fts import query_terms

    assert query_terms(text) == query_terms(text + "\u2014")


def test_common_term_split_adds_exactly_fts5_bm25(conn, monkeypatch):
    """On large indexes common words only score the notes the rare words pooled; their
    share is computed in Python and must equal what FTS5's bm25() gives them."""
    sqlite_only(conn, "compares with FTS5's own bm25() (tests/test_pg_engine.py compares "
                      "the engines' rankings)")
    from actors.store import recall

    store = MemoryStore(conn, dedup=False)
    words = ["alpha", "bravo", "common", "shared", "zulu", "yankee", "xray"]
    for i in range(60):
        extra = " ".join(words[j] for j in range(len(words)) if (i >> j) & 1)
        store.store(f"common shared filler {i} {extra}")
    rq = build_recall_query("common shared zulu yankee")
    monkeypatch.setattr(recall, "COMMON_MIN_NOTES", 1)
    monkeypatch.setattr(recall, "COMMON_DF", 0.5)
    common = recall._common_terms(conn, rq)
    assert set(common) == {"common", "share"}  # in every note; zulu/yankee in half
    full = dict(conn.execute("SELECT rowid, bm25(memories_fts) FROM memories_fts"
                             " WHERE memories_fts MATCH ?", (rq.match,)))
    rare = conn.execute("SELECT f.rowid, bm25(memories_fts), aa_corpus(memories_fts),"
                        " m.content FROM memories_fts AS f JOIN memories AS m"
                        " ON m.id = f.rowid WHERE memories_fts MATCH ?",
                        ('"zulu" OR "yankee"',)).fetchall()
    assert rare
    for rowid, raw, corpus, content in rare:
        extra, held = recall._common_score(content, corpus, common)
        assert held == 2
        assert -raw + extra == pytest.approx(-full[rowid], rel=1e-9)
    split = ids(store.recall("common shared zulu yankee", k=10, bump=False))
    monkeypatch.setattr(recall, "COMMON_MIN_NOTES", 10**9)
    plain = ids(store.recall("common shared zulu yankee", k=10, bump=False))
    assert split == plain  # same ranking when every note holds the common words
    monkeypatch.setattr(recall, "COMMON_MIN_NOTES", 1)
    assert len(store.recall("common shared", k=10, bump=False)) == 10  # AND plan
