"""Keyword recall over ``memories_fts``: query building and ranking.

``MemoryStore.recall`` (and so ``memory.notes.recall`` and the ``### recalled`` section)
ranks notes in five steps, each measured on LoCoMo dev with ``python -m bench.locomo
--ablation`` (evidence recall@10, categories 1-4, one note per dialog turn; figures in
``bench/RESULTS.md``). A plain query (every word, prefix ``*``) over the same
BM25 pool scores 56.1 %:

1. **Query** (:func:`build_recall_query`): the words of the user text (``fts.query_terms``:
   NFKC, lower-cased, Unicode letter/digit runs, so no FTS5 syntax survives) minus
   English function words (:data:`STOPWORDS`: question words, auxiliaries, pronouns,
   determiners, the fragments of ``didn't``/``I'm``); when nothing but stopwords is left
   the original words are kept, so "to be or not to be" still finds itself. Each word is
   a quoted term; it is also a prefix term (``"word"*``) only when it has at least
   :data:`PREFIX_MIN_CHARS` characters and is not plain ASCII. FTS5's Porter stemmer
   already joins English inflections (``camping``/``camped`` -> ``camp``), and an
   English prefix is costly noise (``going`` -> ``go*``: go, good, goal, google;
   ``like*``: likely) that read a third of a 100k index; Porter leaves every other
   script alone, so those words keep the prefix (``ёжик`` finds ``ёжиков``).
   CJK words become the phrase of their bigrams. Terms are OR-joined.
   56.1 % -> 60.2 %.
2. **Pool**: ``ORDER BY bm25() LIMIT n`` on ``memories_fts`` (SQLite's top-n sorter;
   ``memories`` is joined for the n pooled rows only), with ``n`` =
   ``max(POOL_PER_K * k, POOL_MIN)``; scope / tag filters are applied to the pool and the
   pool is widened (x4) until enough rows survive or FTS5 has no more hits, so filtered
   results are exact. FTS5 computes ``bm25()`` for every hit, so cost follows the
   postings of the query's words: from :data:`COMMON_MIN_NOTES` notes on, words held by
   more than :data:`COMMON_DF` of them (``fts5vocab`` counts) only score notes that the
   rare words found, as Lucene's CommonTermsQuery does -- their exact FTS5 ``bm25()``
   share is added in Python (:func:`_common_score`); a query of common words only pools
   the notes holding all of them (every hit if too few). 100k notes: p95 ~38 -> ~18 ms.
3. **Coverage** (coordination level): each pooled note's ``-bm25`` is multiplied by the
   fraction of query terms it contains (the FTS5 auxiliary function ``aa_coverage``).
   BM25 gives a word in more than half of the notes an IDF of ~1e-6, so a name that
   starts half of a conversation's turns adds nothing; coverage still prefers the note
   that has it. 60.2 % -> 61.4 %.
4. **Session context**: a note written up to :data:`CONTEXT_RADIUS` (2) notes before or
   after a pooled note in the same context (the same session, or for a note written
   outside one the same writer's batch: ``COALESCE(session_id, batch_id)`` equal, ids
   that close) gets
   :data:`CONTEXT_WEIGHT` times each such neighbour's score added, *if it matches the
   query itself* (a note without any query word is never returned). Answers follow the
   remark that names their topic, often with a reaction in between: "Got any favourite
   styles?" -> "Contemporary dance is so expressive". Notes that one reflection pass or
   one conversation writes in a row share their context the same way. 61.4 % -> 68.2 %
   with the direct neighbours only (with the older prefix rule, weights 0.25 / 0.5 /
   0.75 / 1.0 gave 66.8 / 68.5 / 68.7 / 67.8 %), 71.1 % with two either side (three:
   71.0 %; every dev conversation gained).
5. **Turns that hand the floor back**: a note whose text ends in a question mark
   ("... What about you?", "What kind of yoga is it?") is multiplied by
   :data:`ASKING_WEIGHT` after step 4. It names the topic but holds the answer less
   often than the turn that replies; its full score still lifts its neighbours in step 4,
   so the reply gains while the question drops. 71.1 % -> 72.2 % (0.5: 71.4 %; 0.8
   scored 0.4 below 0.7 in a scratch scorer, and penalising only notes that are nothing
   but questions gained 0.4). Both halves of the dev split gained (conversations 1-3:
   +1.2, 4-6: +1.0).

Measured and not kept: pseudo-relevance feedback (RM3-style: the five rarest new words
of the first three hits added to the query at weight 0.1) gained 0.3 points scored on the
pool and 0.8 on every matching note, for a second scoring pass; BM25's ``b`` 0.3-0.9 and
``k1`` 0.9-2.0 (FTS5 fixes 0.75 / 1.2), a larger pool (x8, x16), context weights
0.35-1.0 and neighbours that match no query word all moved it by -1.2 to +0.5.

Final scores are divided by the best one, so the strongest hit is exactly 1.0 and a
higher relevance never gets a lower score. Everything here is read-only.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Sequence
from typing import Any, NamedTuple, cast

import apsw
import msgspec
import structlog

from .fts import STOPWORDS, index_text, query_terms, quote_terms
from .sql import Connection, dialect, ids_binding, in_ids

__all__ = [
    "COMMON_DF",
    "COMMON_MIN_NOTES",
    "ASKING_WEIGHT",
    "CONTEXT_WEIGHT",
    "POOL_MIN",
    "POOL_PER_K",
    "PREFIX_MIN_CHARS",
    "STOPWORDS",
    "RecallQuery",
    "build_recall_query",
    "compile_terms",
    "doc_freqs",
    "MAX_QUERY_TERMS",
    "RECALL_BUDGET_MS",
    "cap_terms",
    "index_terms",
    "matches_text",
    "ranked_search",
    "register_recall_functions",
]


#: Non-ASCII words of at least this many characters are prefix terms (``"word"*``);
#: all others must match a whole (Porter-stemmed) token.
PREFIX_MIN_CHARS = 4
#: The BM25 pool is ``max(POOL_PER_K * k, POOL_MIN)`` rows (k*4, at least 32).
POOL_PER_K = 4
POOL_MIN = 32
#: Share of a same-session neighbour's score a matching note inherits (step 4).
CONTEXT_WEIGHT = 0.5
#: How far (in note ids) a same-session neighbour may be for step 4: 2 lets the answer
#: two turns after the question inherit too (LoCoMo dev recall@10: 1 -> 68.2 %,
#: 2 -> 71.1 %, 3 -> 71.0 %).
CONTEXT_RADIUS = 2
#: Step 5: the share of its score a note keeps when its text ends in a question mark.
ASKING_WEIGHT = 0.7
_QUESTION_MARKS = ("?", "\uff1f", "\u061f")  # ASCII, full-width (CJK), Arabic
#: From this many notes on, terms in more than COMMON_DF of them are "common" (step 2).
#: 5 %: forced onto LoCoMo dev it scores 71.7 % (unsplit 71.1 %; with context radius 1:
#: 68.4 % vs 68.2 %, and 3 %: 67.5, 2 %: 65.0)
#: and keeps recall p95 at 100k notes ~18 ms (2 %: ~11 ms, 10 %: ~28 ms).
COMMON_MIN_NOTES = 20_000
COMMON_DF = 0.05
MAX_QUERY_TERMS = 24
"""Terms one recall query ORs at most (a long paste must not OR hundreds of terms; the
longest are kept)."""
RECALL_BUDGET_MS = 150
"""A keyword recall that runs longer is interrupted and returns nothing; the
design's p95 target at 100,000 notes is 25 ms."""
_PROGRESS_STEPS = 10_000  # SQLite VM steps between two looks at the clock
LIMITED = {"terms": 0, "budget": 0}
"""Recalls limited in this process: term lists capped, searches over the budget."""

_IDS = msgspec.json.Encoder()
log = structlog.get_logger("actors.store.recall")


class _Tokenizer:
    """FTS5's own ``porter unicode61`` tokenizer (the one ``memories_fts`` uses), on a
    private in-memory connection behind a lock (apsw connections refuse concurrent
    use from two threads). Created on first use; a call costs a few microseconds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tok: apsw.FTS5Tokenizer | None = None
        self._conn: apsw.Connection | None = None

    def __call__(self, text: str, *, query: bool) -> list[str]:
        """The index terms of ``text`` (``query``: tokenized as a query string)."""
        mode = apsw.FTS5_TOKENIZE_QUERY if query else apsw.FTS5_TOKENIZE_DOCUMENT
        with self._lock:
            if self._tok is None:
                self._conn = apsw.Connection(":memory:")
                self._tok = self._conn.fts5_tokenizer("porter", ["unicode61"])
            # apsw types the result for every flag combination (an iterable of strings or
            # tuples); without offsets and colocated tokens it is a list of strings
            return cast(list[str], self._tok(text.encode("utf-8"), mode, None,
                                             include_offsets=False, include_colocated=False))


_TOKENIZE = _Tokenizer()


@functools.lru_cache(maxsize=8192)
def index_terms(text: str) -> tuple[str, ...]:
    """The index terms (Porter stems) FTS5 makes of ``text`` in a query (memoised)."""
    return tuple(_TOKENIZE(text, query=True))


def _prefix_ok(word: str) -> bool:
    return len(word) >= PREFIX_MIN_CHARS and not word.isascii()


class RecallQuery(NamedTuple):
    """A safe FTS5 MATCH expression and what it matches.

    Attributes:
        match: quoted terms joined by ``OR`` (never any other FTS5 syntax).
        parts: those quoted terms, in order.
        phrases: per part, its index terms (stemmed; empty if FTS5 finds none) and
            whether it is a prefix term -- what FTS5 itself makes of it, used to test
            a note's text in Python.
        all_stopwords: True when every word was a stopword and all were kept.
    """

    match: str
    parts: tuple[str, ...]
    phrases: tuple[tuple[tuple[str, ...], bool], ...]
    all_stopwords: bool = False


def compile_terms(parts: Sequence[str], all_stopwords: bool = False) -> RecallQuery | None:
    """Make a :class:`RecallQuery` of quoted terms from ``fts.quote_terms``."""
    if not parts:
        return None
    phrases = tuple((index_terms(p.rstrip("*").strip('"')), p.endswith("*")) for p in parts)
    return RecallQuery(" OR ".join(parts), tuple(parts), phrases, all_stopwords)


def build_recall_query(text: object) -> RecallQuery | None:
    """Build the recall MATCH expression for any user text (step 1 above).

    ``None`` when nothing indexable remains (empty, whitespace, punctuation, emoji, a
    non-string): the caller returns no hits. Never raises.

    Example: ``"What did Caroline research?"`` -> ``'"caroline" OR "research"'``;
    ``"to be or not"`` -> ``'"to" OR "be" OR "or" OR "not"'``.
    """
    if not isinstance(text, str) or not text:
        return None
    words = query_terms(text)
    kept = [(w, cjk) for w, cjk in words if cjk or w not in STOPWORDS]
    all_stop = not kept
    return compile_terms(quote_terms(kept or words, prefix=_prefix_ok), all_stop)


def _matches(phrases: Sequence[tuple[tuple[str, ...], bool]], tokens: Sequence[str]) -> bool:
    """True when any phrase occurs in ``tokens`` as FTS5 would match it: the tokens in
    sequence, the last one as a prefix for a prefix term."""
    vocab = set(tokens)
    words = {t[0] for t, star in phrases if len(t) == 1 and not star}
    if not words.isdisjoint(vocab):
        return True
    starts = tuple(t[0] for t, star in phrases if len(t) == 1 and star)
    if starts and any(v.startswith(starts) for v in vocab):
        return True
    for terms, star in phrases:
        n = len(terms)
        if n < 2:  # single terms are done above, empty phrases never match
            continue
        for i in range(len(tokens) - n + 1):
            if all(tokens[i + j] == terms[j] for j in range(n - 1)) and (
                tokens[i + n - 1].startswith(terms[-1]) if star
                else tokens[i + n - 1] == terms[-1]
            ):
                return True
    return False


def document_terms(text: str) -> list[str]:
    """The tokens FTS5 indexes for a note of ``text`` (``porter unicode61`` over
    :func:`~actors.store.fts.index_text`), in order: what both engines search."""
    return _TOKENIZE(index_text(text), query=False)


def index_note(conn: Connection, note_id: int, content: str) -> None:
    """Keep a note's keyword index after its text is written: on SQLite the FTS5
    triggers already did; on PostgreSQL its ``search`` tokens are written
    (:func:`actors.store.pg.search.index_note`)."""
    if dialect(conn) == "postgres":
        from .pg.search import index_row

        index_row(conn, "memories", note_id, [document_terms(content)])


def matches_text(query: RecallQuery, text: str) -> bool:
    """True when ``memories_fts MATCH query.match`` would select a note of ``text``."""
    return _matches(query.phrases, _TOKENIZE(index_text(text), query=False))


def _coverage(api: apsw.FTS5ExtensionApi, *_args: object) -> float:
    """FTS5 auxiliary function: the fraction of the query's phrases found in this row
    (``memories_fts`` has one column, so a matching row holds a lone phrase)."""
    n = api.phrase_count
    if n <= 1:
        return float(n)
    # a phrase found in no column of this row has no columns (an empty tuple)
    return (n - sum(1 for i in range(n) if not api.phrase_columns(i))) / n


def _corpus(api: apsw.FTS5ExtensionApi, *_args: object) -> str:
    """FTS5 auxiliary function: ``"<rows> <tokens> <tokens in this row>"``, the
    figures FTS5's own ``bm25()`` uses (N, total length, document length)."""
    return f"{api.row_count} {api.column_total_size(-1)} {api.column_size(-1)}"


def register_recall_functions(conn: Connection) -> None:
    """Register the FTS5 auxiliary functions ``aa_coverage`` and ``aa_corpus`` on
    ``conn`` (idempotent; nothing to do on PostgreSQL, where :mod:`.pg.search` scores)."""
    if dialect(conn) == "postgres":
        return
    sqlite = cast(apsw.Connection, conn)
    sqlite.register_fts5_function("aa_coverage", _coverage)
    sqlite.register_fts5_function("aa_corpus", _corpus)


_SQL_VOCAB = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.aa_memories_vocab"
    " USING fts5vocab(main, 'memories_fts', 'row')"
)
_SQL_DF = (
    "SELECT j.value, v.doc FROM json_each(?) AS j"
    " CROSS JOIN temp.aa_memories_vocab AS v ON v.term = j.value"
)


def doc_freqs(conn: Connection, terms: Sequence[str]) -> dict[str, int]:
    """Return how many notes hold each index term (terms no note holds are absent).

    Reads an ``fts5vocab`` table that this creates in the connection's temp schema
    (nothing is written to the file); on PostgreSQL a GIN index count per term
    (:func:`actors.store.pg.search.doc_freqs`). FTS5 counts the term's doclist: ~0.7 ms for a
    term held by 10,000 notes on the 2-core bench machine.
    """
    if not terms:
        return {}
    if dialect(conn) == "postgres":
        from .pg.search import doc_freqs as pg_doc_freqs

        wanted = sorted(set(terms))
        counts = pg_doc_freqs(conn, [((t,), False) for t in wanted])
        return {t: n for t, n in zip(wanted, counts) if n}
    conn.execute(_SQL_VOCAB)
    return dict(conn.execute(_SQL_DF, (_IDS.encode(sorted(set(terms))).decode(),)))


# ``ORDER BY bm25(...) LIMIT n`` lets SQLite keep a top-n sorter; FTS5's ``ORDER BY
# rank`` sorts every hit first and measured 1.5x slower at 100k notes (bench.recall).
# The auxiliary functions run only for rows that enter the sorter, and ``memories`` is
# read for the n pooled rows only; filters sit in the LEFT JOIN so that rows they
# reject still count towards "FTS5 has more hits".
_SQL_POOL = (
    "SELECT p.rowid, p.raw, p.cover, p.corpus, {cols},"
    " COALESCE(m.session_id, m.batch_id) FROM ("
    " SELECT rowid, bm25(memories_fts) AS raw, aa_coverage(memories_fts) AS cover,"
    " {corpus} AS corpus FROM memories_fts WHERE memories_fts MATCH ? ORDER BY {order} LIMIT ?)"
    " AS p LEFT JOIN memories m ON m.id = p.rowid{where}"
)
_SQL_NEAR = (
    "SELECT {cols}, COALESCE(m.session_id, m.batch_id) FROM memories m"
    " WHERE {ids}{where}"
)
_SQL_ID_RANGE = "SELECT (SELECT min(id) FROM memories), (SELECT max(id) FROM memories)"
#: FTS5's ``bm25()`` constants (``fts5_aux.c``): k1 = 1.2, b = 0.75.
_K1, _B = 1.2, 0.75


def _common_terms(conn: Connection, query: RecallQuery) -> dict[str, int]:
    """Index terms of ``query`` held by more than :data:`COMMON_DF` of the notes, with
    their document frequency; ``{}`` below :data:`COMMON_MIN_NOTES` notes (estimated
    from the id range, an upper bound; on PostgreSQL, where ids are shared by every
    tenant, the tenant's count, read with the frequencies in one round trip) or when the
    split would not help."""
    singles = [t[0] for t, star in query.phrases if len(t) == 1 and not star]
    if dialect(conn) == "postgres":
        from .pg.search import corpus_freqs

        wanted = sorted(set(singles))
        notes, _, counts = corpus_freqs(conn, [((t,), False) for t in wanted])
        if notes < COMMON_MIN_NOTES:
            return {}
        return {t: n for t, n in zip(wanted, counts) if n > COMMON_DF * notes}
    lo, hi = cast(tuple[int | None, int | None],
                  conn.execute(_SQL_ID_RANGE).fetchall()[0])
    if lo is None or hi is None or hi - lo + 1 < COMMON_MIN_NOTES:
        return {}
    df = doc_freqs(conn, singles)
    return {t: n for t, n in df.items() if n > COMMON_DF * (hi - lo + 1)}


def _common_score(content: str, corpus: str, common: dict[str, int]) -> tuple[float, int]:
    """FTS5's ``bm25()`` share of the ``common`` terms for one note, and how many of
    them it holds: ``sum idf * f (k1 + 1) / (f + k1 (1 - b + b dl / avgdl))`` with
    ``idf = ln((N - n + 0.5) / (n + 0.5))`` (1e-6 when not positive), as fts5_aux.c."""
    rows, total, size = (int(x) for x in corpus.split())
    tokens = _TOKENIZE(index_text(content), query=False)
    norm = _K1 * (1 - _B + _B * size / (total / rows)) if total else _K1
    score, held = 0.0, 0
    for term, n in common.items():
        f = tokens.count(term)
        if f:
            idf = math.log((rows - n + 0.5) / (n + 0.5))
            score += (idf if idf > 0 else 1e-6) * f * (_K1 + 1) / (f + norm)
            held += 1
    return score, held


def ranked_search(
    conn: Connection,
    query: RecallQuery,
    k: int,
    *,
    cols: str,
    where: str = "",
    args: Sequence[object] = (),
    coverage: bool = True,
    context_weight: float = CONTEXT_WEIGHT,
    context_radius: int | None = None,
    split_common: bool = True,
    asking_weight: float | None = None,
) -> list[tuple[tuple[Any, ...], float]]:
    """Return up to ``k`` ``(row, score)`` pairs, best first (steps 2-5 above).

    Args:
        conn: a connection with :func:`register_recall_functions` applied.
        query: from :func:`build_recall_query` (or :func:`compile_terms`).
        k: the number of notes wanted (>= 1).
        cols: the ``memories m`` columns to return; the first must be ``m.id``, the
            second ``m.content``. The note's context (``COALESCE(m.session_id, m.batch_id)``)
            is appended to every row.
        where: extra ``" AND ..."`` conditions on ``m`` (scope, working dir, tags).
        args: the bindings of ``where``.
        coverage / context_weight: steps 3 and 4 (``False`` / ``0.0`` switch them off;
            ``bench.locomo --ablation`` measures each).
        context_radius: how many ids either side a same-session neighbour may be (>= 1;
            default :data:`CONTEXT_RADIUS`, read at call time).
        split_common: on large indexes, pool by the rare terms only (step 2).
        asking_weight: step 5's factor for notes ending in a question mark (1.0 switches
            it off; default :data:`ASKING_WEIGHT`, read at call time).

    Scores are in [0, 1], the first is 1.0 (all 1.0 when every raw score is 0).

    Bounded: a query of more than :data:`MAX_QUERY_TERMS` terms keeps
    its longest (rarest) ones (:func:`cap_terms`), and a search that runs past
    :data:`RECALL_BUDGET_MS` is interrupted (an SQLite progress handler) and returns
    ``[]``; both are logged and counted in :data:`LIMITED`.
    """
    query = cap_terms(query)
    deadline = time.monotonic() + RECALL_BUDGET_MS / 1000
    sqlite = cast(apsw.Connection, conn) if dialect(conn) == "sqlite" else None
    if sqlite:  # (PostgreSQL bounds a statement by the session's statement_timeout)
        sqlite.set_progress_handler(lambda: time.monotonic() > deadline, _PROGRESS_STEPS)
    try:
        return _ranked(conn, query, k, cols=cols, where=where, args=args, coverage=coverage,
                       context_weight=context_weight, context_radius=context_radius,
                       split_common=split_common,
                       asking_weight=ASKING_WEIGHT if asking_weight is None else asking_weight)
    except apsw.InterruptError:
        LIMITED["budget"] += 1
        log.warning("memory.recall_over_budget", budget_ms=RECALL_BUDGET_MS,
                    terms=len(query.parts))
        return []
    finally:
        if sqlite:
            sqlite.set_progress_handler(None)


def cap_terms(query: RecallQuery) -> RecallQuery:
    """``query`` with at most :data:`MAX_QUERY_TERMS` terms, unchanged when it is short
    enough: the longest distinct words are kept (a CJK phrase counts as long), in their
    order. Length stands in for rarity (Zipf: long words are the rare ones; a document
    frequency lookup per word costs as much as the search it would save, ~30 ms for a
    500-word message at 20,000 notes), and from :data:`COMMON_MIN_NOTES` notes on the
    kept words are split into rare and common by their real document frequency
    (step 2). A pasted log of 500 words otherwise ORs them all and pays for each one's
    postings."""
    if len(query.parts) <= MAX_QUERY_TERMS:
        return query
    size = {p: (100 if len(t) != 1 else len(t[0])) for p, (t, _star) in
            zip(query.parts, query.phrases)}
    keep = set(sorted(query.parts, key=lambda p: -size[p])[:MAX_QUERY_TERMS])
    LIMITED["terms"] += 1
    return compile_terms([p for p in query.parts if p in keep], query.all_stopwords) or query


def _pool(conn: Connection, query: RecallQuery, parts: list[int], joiner: str, limit: int,
          *, cols: str, where: str, args: Sequence[object], newest: bool,
          with_corpus: bool) -> list[tuple[Any, ...]]:
    """The pool of step 2 on either engine: ``(id, raw, coverage, corpus, *cols)`` rows,
    cols None where the filters reject the note, at most ``limit``, best BM25 first
    (newest first with ``newest``)."""
    if dialect(conn) == "postgres":
        from .pg import search

        return search.pool(conn, [query.phrases[i] for i in parts],
                           "|" if joiner == "OR" else "&", limit, cols=cols, where=where,
                           args=args, newest_first=newest, with_corpus=with_corpus)
    sql = _SQL_POOL.format(cols=cols, where=where, order="rowid DESC" if newest else "raw",
                           corpus="aa_corpus(memories_fts)" if with_corpus else "''")
    match = f" {joiner} ".join(query.parts[i] for i in parts)
    return cast(list[tuple[Any, ...]], conn.execute(sql, (match, limit, *args)).fetchall())


def _ranked(
    conn: Connection,
    query: RecallQuery,
    k: int,
    *,
    cols: str,
    where: str,
    args: Sequence[object],
    coverage: bool,
    context_weight: float,
    context_radius: int | None,
    split_common: bool,
    asking_weight: float,
) -> list[tuple[tuple[Any, ...], float]]:
    want = max(POOL_PER_K * k, POOL_MIN)
    common = _common_terms(conn, query) if split_common else {}
    rare = [p for p, (t, star) in zip(query.parts, query.phrases)
            if star or len(t) != 1 or t[0] not in common]
    every = list(range(len(query.parts)))
    if not common:
        plans: list[tuple[list[int], str, dict[str, int]]] = [(every, "OR", {})]
    elif rare:
        plans = [([query.parts.index(p) for p in rare], "OR", common)]
    else:  # only common terms: the notes holding all of them, else every hit; their
        # BM25 is ~0 everywhere (IDF of a word most notes hold), so the newest such notes
        # are pooled (rowid order, no score for every hit: "user" at 100k notes stays fast)
        plans = [(every, "AND", {}), (every, "OR", {})]
    newest = bool(common and not rare)
    for n, (parts, joiner, split) in enumerate(plans):
        limit = want
        while True:
            pool = _pool(conn, query, parts, joiner, limit, cols=cols, where=where,
                         args=args, newest=newest, with_corpus=bool(split))
            kept = sorted((r for r in pool if r[4] is not None), key=lambda r: (r[1], r[0]))
            if len(kept) >= want or len(pool) < limit:
                break
            limit *= 4
        if len(kept) >= want or n == len(plans) - 1:
            break
    rows: dict[int, tuple[Any, ...]] = {}
    base: dict[int, float] = {}
    for rowid, raw, cover, corpus, *row in kept[:want]:
        rows[rowid] = tuple(row)
        relevance = max(0.0, -raw)
        if split:
            extra, held = _common_score(row[1], corpus, split)
            relevance += extra
            cover = (cover * len(rare) + held) / len(query.parts)
        base[rowid] = relevance * (cover if coverage else 1.0)
    if not base:
        return []
    session = {i: rows[i][-1] for i in base}
    radius = max(1, CONTEXT_RADIUS if context_radius is None else context_radius)
    offsets = [d for r in range(1, radius + 1) for d in (-r, r)]

    def context(i: int) -> float:
        own_session = session[i]
        if own_session is None or not context_weight:
            return 0.0
        return context_weight * sum(base[j] for j in (i + d for d in offsets)
                                    if j in base and session[j] == own_session)

    def asking(i: int) -> float:
        return asking_weight if rows[i][1].rstrip().endswith(_QUESTION_MARKS) else 1.0

    scores = {i: (own + context(i)) * asking(i) for i, own in base.items()}
    if context_weight:
        # Same-session neighbours (ids +-radius) outside the pool score only the context
        # weight times their pooled neighbours; fetch those that could still reach the
        # top k, keep those of the same session whose text matches the query. The text
        # is tested in Python with FTS5's tokenizer (a rowid seek per note re-runs the
        # whole MATCH, ~0.2 ms each).
        kth = sorted(scores.values(), reverse=True)[k - 1] if len(scores) >= k else 0.0
        pooled = set(base)
        bound: dict[int, float] = {}
        for i, own in base.items():
            if session[i] is not None:
                for j in (i + d for d in offsets):
                    if j not in base:
                        bound[j] = bound.get(j, 0.0) + context_weight * own
        near = [j for j, b in bound.items() if b >= kth or len(scores) < k]
        found = conn.execute(_SQL_NEAR.format(cols=cols, where=where,
                                              ids=in_ids(conn, "m.id")),
                             (ids_binding(conn, near), *args)) if near else ()
        for row in found:
            j = row[0]
            if any(session[i] == row[-1] for i in (j + d for d in offsets) if i in pooled) and \
                    matches_text(query, row[1]):
                rows[j] = row
                session[j] = row[-1]
                base[j] = 0.0  # below the pool: its own BM25 is not needed
                scores[j] = context(j) * asking(j)
    top = sorted(scores.items(), key=lambda t: (-t[1], t[0]))[:k]
    best = top[0][1]
    return [(rows[i], (score / best if best > 0 else 1.0)) for i, score in top]
