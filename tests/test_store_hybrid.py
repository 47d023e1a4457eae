"""Hybrid recall's ranking (``actors/store/hybrid.py``; docs/architecture.md §4,
step 4): vectors of another model, non-finite and all-zero vectors, the blend."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.store.hybrid import Ranked, VectorSide, cosine_scores, hybrid_rank


@pytest.fixture
def conn(engine_conn):
    """Every test here runs on each engine (SQLite, PostgreSQL)."""
    return engine_conn


def test_vector_math_is_finite_and_controlled():
    rows = np.array([[1, 0, 0, 0], [0.7, 0.7, 0, 0], [0, 0, 0, 0], [np.nan, 1, 0, 0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy warning escapes
        scores = cosine_scores([1, 0, 0, 0], rows)
        zero = cosine_scores([0, 0, 0, 0], rows)
    assert scores.tolist() == pytest.approx([1.0, 0.7071, 0.0, 0.0], abs=1e-4)
    assert np.isfinite(scores).all() and zero.tolist() == [0.0, 0.0, 0.0, 0.0]
    ids = [1, 2, 3, 4]
    # the vector leg's top-2 (the hybrid admission window then keeps only n1: 0.707 is
    # more than 0.15 below the best cosine 1.0)
    assert [ids[i] for i in np.argsort(-scores, kind="stable")[:2]] == [1, 2]
    top = hybrid_rank([], dict(zip(ids, scores.tolist())), 2, vector_weight=0.5)
    assert [r.id for r in top] == [1]
    # the all-zero query: every cosine 0, so the order is the BM25 order
    keyword = [(3, 1.0), (1, 0.6), (2, 0.2)]
    ranked = hybrid_rank(keyword, dict(zip(ids, zero.tolist())), 3, vector_weight=0.5)
    assert [r.id for r in ranked] == [3, 1, 2]


def test_other_dimensions_are_refused_not_mixed():
    with pytest.raises(ValueError):
        cosine_scores([1, 0, 0, 0, 0, 0], np.ones((3, 4)))
    assert cosine_scores([1, 0], np.zeros((0, 2))).tolist() == []


def test_keyword_hits_keep_their_slots_and_blend_with_cosine():
    keyword = [(10, 1.0), (11, 0.9)]
    cosines = {10: 0.1, 11: 0.9, 12: 0.95}  # 12 is meaning-only, better than both
    ranked = hybrid_rank(keyword, cosines, 3, vector_weight=0.5)
    assert [(r.id, r.via) for r in ranked] == [(11, "keyword"), (10, "keyword"), (12, "meaning")]
    assert ranked[0].score == pytest.approx(0.5 * 0.9 + 0.5 * 0.9)
    # two slots: both keyword hits stay, the meaning-only note does not push one out
    assert [r.id for r in hybrid_rank(keyword, cosines, 2, vector_weight=0.5)] == [11, 10]


def test_meaning_only_admission_floor_and_window():
    cosines = {1: 0.80, 2: 0.70, 3: 0.64, 4: 0.30}
    ranked = hybrid_rank([], cosines, 5, vector_weight=0.4)
    assert [r.id for r in ranked] == [1, 2]  # 3 is > 0.15 below the best, 4 under 0.35
    assert hybrid_rank([], {1: 0.34}, 5, vector_weight=0.4) == []
    assert hybrid_rank([], {1: 0.5}, 5, vector_weight=0.4, min_cosine=0.6) == []
    # the best cosine over every scanned vector sets the window, keyword hits included
    assert [r.id for r in hybrid_rank([(9, 1.0)], {9: 0.95, 1: 0.7}, 3, vector_weight=0.4)] == [9]


def test_vector_weight_zero_is_keyword_only():
    keyword = [(1, 1.0), (2, 0.5)]
    ranked = hybrid_rank(keyword, {2: 1.0, 3: 1.0}, 5, vector_weight=0.0)
    assert ranked == [Ranked(1, 1.0, "keyword"), Ranked(2, 0.5, "keyword")]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(1, 50), st.floats(0, 1)), max_size=10, unique_by=lambda t: t[0]),
       st.dictionaries(st.integers(1, 80), st.floats(-1, 1), max_size=30),
       st.integers(1, 10), st.floats(0, 1))
def test_rank_invariants(keyword, cosines, k, w):
    ranked = hybrid_rank(keyword, cosines, k, vector_weight=w)
    ids = [r.id for r in ranked]
    assert len(ids) == len(set(ids)) <= k
    kw = {i for i, _ in keyword}
    vias = [r.via for r in ranked]
    assert vias == sorted(vias, key=lambda v: v != "keyword")  # keyword hits first
    assert len([v for v in vias if v == "keyword"]) == min(k, len(kw))
    assert all(0.0 <= r.score <= 1.0 for r in ranked)


def test_load_keeps_one_model_and_dimension_and_counts_the_rest(conn):
    from actors.store.notes import MemoryStore
    from actors.store.vectors import VectorStore

    notes, vectors = MemoryStore(conn), VectorStore(conn)
    ids = [notes.store(t).id for t in ("Likes oat flat whites", "Cycles to work",
                                        "Allergic to cats", "Plays chess", "Reads poetry")]
    four = np.array([1, 0, 0, 0], dtype="<f4").tobytes()
    vectors.put("A", 4, [(i, four) for i in ids])
    vectors.put("A", 6, [(ids[0], np.ones(6, dtype="<f4").tobytes())])  # the server changed
    vectors.put("B", 4, [(ids[1], four)])  # another model: never read for A
    got = vectors.load("A", 4, ceiling=10)
    assert got.ids == sorted(ids[1:], reverse=True) and got.rows.shape == (4, 4)
    assert (got.stale, got.overflow) == (1, 0)  # another model's: left out of scoring, counted
    assert cosine_scores([1, 0, 0, 0], got.rows).tolist() == [1.0] * 4
    # above the ceiling: the newest ones plus the keyword hits' vectors
    capped = vectors.load("A", 4, ceiling=2, also=[ids[1], 999])
    assert capped.ids == [ids[4], ids[3], ids[1]] and capped.overflow == 2
    assert [capped.index[i] for i in capped.ids] == [0, 1, 2]
    assert capped.rows.shape == (3, 4) and capped.norms.tolist() == [1.0] * 3
    assert cosine_scores([1, 0, 0, 0], capped.rows, capped.norms).tolist() == [1.0] * 3


@pytest.mark.slow
async def test_paraphrase_is_found_through_the_memory_actor_and_falls_back_cleanly(tmp_path):
    """A paraphrase is found, through real actors: the backfill actor embeds the note, the
    memory actor embeds the query; keyword recall alone finds nothing."""
    import msgspec
    import trio

    from actors import actor_spec
    from tests.memory_ops import memory_op, memory_stats
    from runtime import open_supervisor
    from runtime.services.config import ActorBoot, parse_config

    cfg = parse_config('{"memory": {"embeddings": {"backfillStartDelayMs": 50}}}')
    boot = msgspec.msgpack.encode(ActorBoot(state_dir=str(tmp_path), config=cfg))
    specs = [actor_spec("memory", config=boot), actor_spec("backfill", config=boot)]
    query = "what did I tell you about my Python testing setup?"
    async with open_supervisor(specs) as sup:
        for text in ("I prefer pytest for unit work", "My sister lives in Lyon",
                     "I drink oat flat whites"):
            await memory_op(sup, "memory.notes.store", {"content": text})
        with trio.fail_after(60):
            while True:
                stats = await memory_stats(sup)
                if stats["embeddings"]["vectors"] == 3 and stats["embeddings"]["recall"] == "hybrid":
                    break
                await trio.sleep(0.05)
        hits = (await memory_op(sup, "memory.notes.recall", {"query": query})).data
        by_tag = (await memory_op(sup, "memory.notes.recall", {
            "query": query, "tags": ["nope"]})).data
        from actors.store.context import MemoryContext
        from actors.memory.messages import BuildContext

        ctx = await sup.request("memory", BuildContext(session="s", user_message=query),
                                MemoryContext)
        metrics = await sup.request("memory", __import__(
            "runtime.services.metrics", fromlist=["MetricsRequest"]).MetricsRequest(), dict)
    assert [h["content"] for h in hits] == ["I prefer pytest for unit work"]
    from runtime.services.embeddings.embedder import CATALOG

    floor = CATALOG[cfg.memory.embeddings.model].min_cosine  # the default model's floor
    assert floor <= hits[0]["score"] <= 1.0
    assert by_tag == []  # meaning-only candidates pass the same tag filter
    assert [n.content for n in ctx.recalled] == ["I prefer pytest for unit work"]  # auto-recall
    assert metrics["counters"]["agent.memory.recall{mode=hybrid}"] == 3
    assert stats["embeddings"]["state"] == "attached"


def test_vector_side_errors_fall_back_to_keyword_recall(conn, monkeypatch):
    from actors.memory import actor as memory_actor
    from actors.store.stores import open_stores
    from actors.store.query_embedder import QueryEmbedder
    from runtime.services.config import Config

    stores = open_stores(conn, Config().memory)
    stores.notes.store("I prefer pytest for unit work")

    class Broken(QueryEmbedder):
        attached = True
        model = "wordllama-l2-supercat-256"
        min_cosine = 0.35

        def embed(self, text):
            raise RuntimeError("the embedding server answered HTTP 500")

    class Fake:  # just what _recall_for reads
        cfg = Config().memory
        query_embedder = Broken(Config().memory.embeddings)
        metrics = memory_actor.Metrics()

    recall = memory_actor.MemoryActor._recall_for(Fake(), stores)
    assert [n.content for n in recall("pytest unit", k=5)] == ["I prefer pytest for unit work"]
    assert Fake.metrics.snapshot()["counters"] == {"agent.memory.recall{mode=fallback}": 1}


def test_vector_cache_serves_until_its_generation_changes(conn):
    from actors.store.notes import MemoryStore
    from actors.store.vectors import VectorCache, VectorStore

    notes, vectors, cache = MemoryStore(conn), VectorStore(conn), VectorCache()
    a = notes.store("alpha").id
    one = np.array([1, 0], dtype="<f4").tobytes()
    vectors.put("A", 2, [(a, one)])
    assert vectors.load("A", 2, 10, cache=cache).ids == [a]
    b = notes.store("beta").id
    vectors.put("A", 2, [(b, one)])
    assert vectors.load("A", 2, 10, cache=cache).ids == [a]  # same generation: cached
    cache.generation += 1  # what the memory actor does after every PutVectors
    assert vectors.load("A", 2, 10, cache=cache).ids == [b, a]


def test_new_vectors_join_the_cached_scan_without_a_reload(conn):
    """``VectorCache.add`` (what the memory actor does on PutVectors): newer vectors are
    folded into the cached newest-``ceiling`` scan exactly as a reload would give them;
    a re-embed or an older note is refused (the actor then drops the cache)."""
    from actors.store.notes import MemoryStore
    from actors.store.vectors import VectorCache, VectorStore

    notes, vectors, cache = MemoryStore(conn), VectorStore(conn), VectorCache()
    ids = [notes.store(f"note {i}").id for i in range(4)]
    vec = {i: np.array([1, n], dtype="<f4").tobytes() for n, i in enumerate(ids)}
    vectors.put("M", 2, [(ids[0], vec[ids[0]])])
    assert vectors.load("M", 2, 2, cache=cache).ids == [ids[0]]
    new = [(ids[1], vec[ids[1]]), (ids[2], vec[ids[2]])]
    vectors.put("M", 2, new)
    assert cache.add("M", 2, new)
    got = vectors.load("M", 2, 2, cache=cache)  # served from the cache
    fresh = vectors.load("M", 2, 2)  # a real scan, for comparison
    assert got.ids == fresh.ids == [ids[2], ids[1]] and got.overflow == fresh.overflow == 1
    assert np.array_equal(got.rows, fresh.rows) and np.allclose(got.norms, fresh.norms)
    assert got.index == fresh.index
    assert not cache.add("M", 2, [(ids[1], vec[ids[1]])])  # not newer: a re-embed
    assert not cache.add("other", 2, [(ids[3], vec[ids[3]])])  # another model
    cache.generation += 1
    assert not cache.add("M", 2, [(ids[3], vec[ids[3]])])  # nothing cached at this generation


def test_a_note_deleted_after_the_vectors_were_cached_is_never_recalled(conn):
    """Hybrid recall reads every candidate back through the notes table, so a deleted
    note whose vector is still in a cached scan is not returned (the memory actor also
    drops the cache after a write that deleted notes: ``MemoryStore.deletions``)."""
    from actors.store.hybrid import hybrid_recall
    from actors.store.notes import MemoryStore
    from actors.store.vectors import VectorCache, VectorStore

    notes, vectors, cache = MemoryStore(conn), VectorStore(conn), VectorCache()
    keep = notes.store("the weather in spring").id
    gone = notes.store("an unrelated remark about trains").id
    near = np.array([1, 0], dtype="<f4").tobytes()
    vectors.put("M", 2, [(keep, near), (gone, near)])

    def run() -> list[int]:
        side = VectorSide(vectors, lambda _t: np.array([1.0, 0.0]), "M", 0.5, 100,
                          cache=cache)
        return [n.id for n in hybrid_recall(notes, side, "holiday plans", k=5).notes]

    assert sorted(run()) == sorted([keep, gone])  # both found by meaning alone
    assert notes.forget(gone)
    assert cache.get(("M", 2, 100)) is not None  # still cached, with the deleted note's row
    assert run() == [keep]


def test_the_store_counts_its_deletions_for_the_actors_vector_cache(conn):
    from actors.store.notes import MemoryStore

    notes = MemoryStore(conn, max_entries=2)
    notes.store("one note about apples")
    notes.store("another note about pears")
    assert notes.deletions == 0
    notes.store("a third note about plums")  # over the cap: one evicted
    assert notes.deletions == 1
    alive = notes.list_index(limit=10)[0].id
    assert notes.forget(alive) and notes.deletions == 2
    assert not notes.forget(alive) and notes.deletions == 2  # nothing deleted: not counted


@pytest.mark.slow
async def test_a_model_switch_warns_once_and_keeps_the_old_vectors(tmp_path, capfd):
    """Vectors of another model/dimension are counted, named in one warning at
    start-up, never scored, and kept (until ``memory reindex --prune``)."""
    import msgspec
    import trio

    from actors import actor_spec
    from tests.memory_ops import memory_stats
    from actors.store.notes import MemoryStore
    from actors.store.schema import open_database
    from actors.store.vectors import VectorStore
    from runtime import open_supervisor
    from runtime.services.config import ActorBoot, parse_config

    conn = open_database(str(tmp_path / "memory.sqlite"))
    ids = [MemoryStore(conn).store(t).id for t in ("Likes oat flat whites", "Cycles to work",
                                                    "Allergic to cats")]
    VectorStore(conn).put("model-A", 4, [(i, np.ones(4, dtype="<f4").tobytes()) for i in ids])
    conn.close()
    cfg = parse_config('{"memory": {"embeddings": {"backfillStartDelayMs": 20}}}')
    boot = msgspec.msgpack.encode(ActorBoot(state_dir=str(tmp_path), config=cfg))
    async with open_supervisor([actor_spec("memory", config=boot)]) as sup:
        with trio.fail_after(30):
            while (stats := await memory_stats(sup))["embeddings"][
                    "state"] != "attached":
                await trio.sleep(0.05)
        await trio.sleep(0.3)
    assert stats["embeddings"]["otherModelVectors"] == 3 and stats["embeddings"]["vectors"] == 0
    warnings = [line for line in capfd.readouterr().err.splitlines()
                if "memory.vectors_stale" in line]
    assert len(warnings) == 1 and "model-A" in warnings[0] and "reindex --prune" in warnings[0]


def test_the_blend_reaches_keyword_hits_below_the_keyword_top_k(conn):
    """The keyword hits are ranked among themselves by the blend, so a hit
    that keyword recall puts just below the k slots but that the query's vector points
    at takes a slot (hybrid.KEYWORD_POOL_PER_K); with only the keyword top k blended,
    recall@k could never differ from keyword recall's (LoCoMo dev, bench.locomo)."""
    from actors.store.errors import ValidationError
    from actors.store.hybrid import hybrid_recall
    from actors.store.notes import MemoryStore
    from actors.store.vectors import VectorStore

    notes, vectors = MemoryStore(conn), VectorStore(conn)
    strong = notes.store("dance dance dance tonight").id
    middle = notes.store("dance lessons on friday").id
    weak = notes.store("we talked about the dance and many other things that evening").id
    for i in range(5):
        notes.store(f"filler note number {i} about the weather")
    off, on = np.array([0, 1], dtype="<f4").tobytes(), np.array([1, 0], dtype="<f4").tobytes()
    vectors.put("M", 2, [(strong, off), (middle, off), (weak, on)])
    keyword = [n.id for n in notes.recall("dance", k=3, bump=False)]
    assert keyword == [strong, middle, weak]

    def side(weight: float) -> VectorSide:
        return VectorSide(vectors, lambda _t: np.array([1.0, 0.0]), "M", weight, 100)

    def run(weight: float, **kw):
        return [n.id for n in hybrid_recall(notes, side(weight), "dance", k=2, **kw).notes]

    assert run(0.5) == [weak, strong]  # lifted from keyword rank 3
    assert run(0.5, pool_per_k=1) == [strong, middle]  # top k only: reordered
    assert run(0.0) == keyword[:2]  # weight 0: keyword recall exactly
    with pytest.raises(ValidationError):  # k is checked before the pool is sized
        hybrid_recall(notes, side(0.5), "dance", k="2")


def test_a_query_is_embedded_once_and_its_vector_shared():
    """The local model embeds a query text once; every later recall of the same text
    (a turn's notes recall, a tool call repeating it) gets the same read-only vector."""
    from actors.store.query_embedder import QueryEmbedder
    from runtime.services.config import Config

    class Model:  # just what QueryEmbedder reads of a LocalProvider
        local, model, dim = True, "m", 2
        calls = 0

        def embed_now(self, text, purpose):
            Model.calls += 1
            return np.array([1.0, float(len(text))], dtype=np.float32)

    q = QueryEmbedder(Config().memory.embeddings)
    q.embedder = Model()
    first = q.embed("where do I live?")
    assert q.embed("  where do I live?  ") is first and Model.calls == 1
    assert not first.flags.writeable
    q.embed("what do I like?")
    assert Model.calls == 2


def test_past_the_ceiling_the_servers_index_finds_older_notes_by_meaning(conn):
    """The scan reads the newest ``ceiling`` vectors. On PostgreSQL the server's HNSW
    index (one per dimension, made when the dimension is first written) searches every
    vector of the tenant, so an old note close in meaning is still found; on SQLite it
    is counted as overflow, as before."""
    from actors.store.hybrid import hybrid_recall
    from actors.store.notes import MemoryStore
    from actors.store.vectors import VectorStore

    notes, vectors = MemoryStore(conn), VectorStore(conn)
    old = notes.store("we planted the apple trees by the north fence").id
    newer = [notes.store(f"unrelated remark number {i} about trains").id for i in range(6)]
    vectors.put("M", 3, [(old, np.array([1, 0, 0], dtype="<f4").tobytes())]
                + [(i, np.array([0, 1, 0.1 * n], dtype="<f4").tobytes())
                   for n, i in enumerate(newer)])
    side = VectorSide(vectors, lambda _t: np.array([1.0, 0.0, 0.0]), "M", 0.5, 3)
    result = hybrid_recall(notes, side, "orchard", k=3)
    assert result.overflow == 4  # seven vectors, three scanned
    if getattr(conn, "dialect", "sqlite") == "postgres":
        assert [n.id for n in result.notes] == [old]
        (index,) = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = "
                                "'memory_vectors_hnsw_3'").fetchall()[0]
        assert "hnsw" in index and "vector_cosine_ops" in index
        assert vectors.nearest("M", np.array([0.0, 1.0, 0.0]), 2).keys() <= set(newer)
    else:
        assert result.notes == [] and vectors.nearest("M", np.array([1.0, 0, 0]), 2) == {}
