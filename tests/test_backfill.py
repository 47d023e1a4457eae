"""The local embedder and the backfill actor.

Tier 1: the embedder in-process (offline load, shapes, purposes and prefixes, zero /
non-finite vectors never give NaN, a semantic sanity check). Tier 2: real ``memory``
and ``backfill`` child processes under ``open_supervisor`` against a pre-populated
``memory.sqlite`` in ``tmp_path``; deadlines are generous wall-clock ``fail_after``
bounds (2 loaded cores, ~1–3 s per Python child start); the autouse ``no_orphans``
fixture fails a test that leaves a child alive.
"""

from __future__ import annotations

import math
import sys
import time

import apsw
import msgspec
import numpy as np
import pytest
import trio

from actors import actor_spec
from actors.backfill.messages import BackfillStatus
from actors.memory import ops
from tests.memory_ops import memory_op, memory_stats
from actors.store.notes import MemoryStore
from actors.store.schema import open_database, write_txn
from runtime import ActorSpec, open_supervisor
from runtime.services.config import ActorBoot, Config, parse_config
from runtime.services.embeddings.embedder import (
    CATALOG,
    GEMMA_PREFIXES,
    CatalogEntry,
    EmbeddingUnavailable,
    LocalEmbedder,
    apply_prefix,
    cosine,
    from_blob,
    normalise_rows,
    to_blob,
)
from runtime.services.metrics import MetricsRequest

MODEL = "wordllama-l2-supercat-256"
DIM = 256


# -- Tier 1: the embedder ---------------------------------------------------------------


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder.load()


class FakeWordLlama:
    """Stands in for wordllama's inference object: records the texts it is given."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.seen: list[str] = []

    def embed(self, texts, norm=False):
        self.seen.extend(texts)
        return np.ones((len(texts), self.dim), dtype=np.float32)


def test_offline_load_never_touches_the_network(monkeypatch):
    import wordllama.wordllama as wl_module

    def no_network(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(wl_module.requests, "get", no_network)
    emb = LocalEmbedder.load()
    assert (emb.model, emb.dim) == (MODEL, DIM)
    assert emb.entry.min_cosine == pytest.approx(0.35)


def test_missing_package_is_typed_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "wordllama", None)  # import now raises ImportError
    with pytest.raises(EmbeddingUnavailable) as info:
        LocalEmbedder.load()
    assert info.value.code == "embeddings_unavailable"
    assert "wordllama is not installed" in str(info.value)


def test_embed_shape_dtype_and_unit_rows(embedder):
    texts = ["I prefer pytest for unit work", "The weather in Paris is mild", "x y z"]
    for purpose in ("document", "query", "similarity"):
        vecs = embedder.embed(texts, purpose)
        assert vecs.shape == (3, DIM) and vecs.dtype == np.float32
        assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert embedder.embed([], "document").shape == (0, DIM)


def test_every_call_names_a_valid_purpose(embedder):
    with pytest.raises(ValueError, match="purpose"):
        embedder.embed(["hello"], "search")
    with pytest.raises(ValueError, match="purpose"):
        CATALOG[MODEL].prefix("index")


def test_gemma_entry_gets_task_prefixes_wordllama_gets_none():
    gemma = CatalogEntry("fake-gemma", 4, prefixes=GEMMA_PREFIXES)
    fake = FakeWordLlama(4)
    emb = LocalEmbedder(fake, entry=gemma)
    emb.embed(["a note"], "document")
    emb.embed(["a question"], "query")
    emb.embed(["a rewrite"], "similarity")
    assert fake.seen == [
        "title: none | text: a note",
        "task: search result | query: a question",
        "task: sentence similarity | query: a rewrite",
    ]

    plain = FakeWordLlama(DIM)
    emb = LocalEmbedder(plain)  # the wordllama catalog entry
    for purpose in ("document", "query", "similarity"):
        emb.embed(["unchanged text"], purpose)
    assert plain.seen == ["unchanged text"] * 3
    assert all(CATALOG[MODEL].prefix(p) == "" for p in ("document", "query", "similarity"))
    assert CATALOG["embeddinggemma-300m"].prefix("query") == "task: search result | query: "
    assert apply_prefix(CATALOG[MODEL], ["t"], "query") == ["t"]


def test_zero_and_non_finite_vectors_score_zero_never_nan(embedder):
    unit = np.ones(DIM, dtype=np.float32)
    zero = np.zeros(DIM, dtype=np.float32)
    nan = np.full(DIM, np.nan, dtype=np.float32)
    inf = unit.copy()
    inf[3] = np.inf
    for other in (zero, nan, inf):
        assert cosine(unit, other) == 0.0 and cosine(other, unit) == 0.0
    assert cosine(zero, zero) == 0.0 and cosine(nan, nan) == 0.0
    assert cosine(unit, np.ones(DIM + 1)) == 0.0  # another model's dimension
    assert cosine(unit, unit) == pytest.approx(1.0)
    rows = normalise_rows(np.stack([unit, zero, nan, inf]))
    assert np.isfinite(rows).all()
    assert not rows[1:].any() and np.linalg.norm(rows[0]) == pytest.approx(1.0)
    # A text with no token embeds to a zero row, and still never gives NaN.
    vecs = embedder.embed(["", "hello"], "document")
    assert np.isfinite(vecs).all() and not vecs[0].any()
    assert cosine(vecs[0], vecs[1]) == 0.0


def test_semantic_sanity(embedder):
    sim = embedder.similarity
    related = sim("I prefer pytest for unit work", "python testing setup")
    unrelated = sim("I prefer pytest for unit work", "my sister adopted a grey cat in March")
    assert related > unrelated
    assert not math.isnan(related) and not math.isnan(unrelated)


def test_blob_round_trip_is_little_endian_float32(embedder):
    vec = embedder.embed(["round trip"], "document")[0]
    blob = to_blob(vec)
    assert len(blob) == DIM * 4
    assert np.array_equal(from_blob(blob, DIM), vec)
    with pytest.raises(ValueError):
        from_blob(blob[:-1], DIM)


class _FlakyEmbedder:
    """Answers ``ok_calls`` embeds, then fails like a model that stopped answering."""

    model, dim, local = MODEL, DIM, True

    def __init__(self, ok_calls: int, refuse: tuple[str, ...] = ()) -> None:
        self.ok_calls = ok_calls
        self.refuse = refuse

    async def embed(self, texts, purpose):
        from runtime.services.embeddings.providers import Embedded

        assert purpose == "document"
        if self.ok_calls <= 0:
            raise EmbeddingUnavailable("model stopped answering")
        self.ok_calls -= 1
        out = Embedded(normalise_rows(np.ones((len(texts), DIM), dtype=np.float32)))
        for i, text in enumerate(texts):
            if text in self.refuse:  # a note the server cannot embed
                out.vectors[i] = 0.0
                out.missing.append(i)
        return out


class _FakeMemory:
    """In-process stand-in for the memory actor's MissingVectors / PutVectors / Stats."""

    def __init__(self, n: int) -> None:
        self.notes = {i: f"note {i}" for i in range(1, n + 1)}
        self.vectors: dict[int, bytes] = {}
        self.puts: list[list[int]] = []

    async def request(self, dest, body, reply_type):
        from actors.memory.messages import MissingVectors, PutVectors, ToolOp, VectorTodo

        assert dest == "memory"
        match body:
            case MissingVectors(limit=limit, below=below):
                missing = sorted((i for i in self.notes if i not in self.vectors
                                  and (below is None or i < below)), reverse=True)
                return [VectorTodo(id=i, content=self.notes[i]) for i in missing[:limit]]
            case PutVectors(ids=ids, vectors=blobs):
                self.puts.append(list(ids))
                self.vectors.update(zip(ids, blobs))
                return len(ids)
            case ToolOp(request=ops.Stats()):
                return {"notes": len(self.notes), "embeddings": {"vectors": len(self.vectors)}}
        raise AssertionError(f"unexpected {body!r}")


async def test_model_that_stops_answering_ends_the_pass_quietly():
    from actors.backfill.actor import BackfillActor

    memory = _FakeMemory(20)
    actor = BackfillActor(memory, ActorBoot(state_dir="/nonexistent",
                                            config=make_config(backfillBatchSize=4)))
    actor.embedder = _FlakyEmbedder(ok_calls=2)
    with trio.fail_after(10):
        written = await actor.sweep()
    assert written == 8 and memory.puts == [[20, 19, 18, 17], [16, 15, 14, 13]]  # newest first
    status = actor.status()
    assert status.state == "idle" and status.runs == 1 and "model_failed" in status.reason
    assert actor.metrics.snapshot()["counters"]["agent.memory.backfill.runs{outcome=model_failed}"] == 1
    # The next boot resumes where this run stopped.
    actor.embedder = _FlakyEmbedder(ok_calls=100)
    with trio.fail_after(10):
        assert await actor.sweep() == 12
    assert sorted(memory.vectors) == list(range(1, 21))


async def test_a_note_the_server_cannot_embed_is_skipped_and_the_pass_still_ends():
    """A note the embedding server refuses even cut to fit: the pass writes the others, never asks
    for the refused one twice, and the next pass retries it."""
    from actors.backfill.actor import BackfillActor

    memory = _FakeMemory(10)
    actor = BackfillActor(memory, ActorBoot(state_dir="/nonexistent",
                                            config=make_config(backfillBatchSize=4)))
    actor.embedder = _FlakyEmbedder(ok_calls=100, refuse=("note 7",))
    with trio.fail_after(10):
        assert await actor.sweep() == 9
    assert memory.puts == [[10, 9, 8], [6, 5, 4, 3], [2, 1]]  # 7 skipped, asked for once
    assert 7 not in memory.vectors
    counters = actor.metrics.snapshot()["counters"]
    assert counters["agent.memory.backfill.skipped"] == 1
    assert counters["agent.memory.backfill.runs{outcome=done}"] == 1
    actor.embedder = _FlakyEmbedder(ok_calls=100)  # the next boot retries it
    with trio.fail_after(10):
        assert await actor.sweep() == 1
    assert sorted(memory.vectors) == list(range(1, 11))


# -- Tier 2: real processes -------------------------------------------------------------


def make_config(**embeddings) -> Config:
    """The backfill's mechanics are tested with wordllama (fast, 256-d); the default
    model, MiniLM, is tested end to end in test_minilm_embedder.py and
    test_store_hybrid.py."""
    block = {"backfillStartDelayMs": 50, "model": MODEL, **embeddings}
    return parse_config(msgspec.json.encode(
        {"memory": {"notes": {"maxEntries": 10_000}, "embeddings": block}}))


def specs(state_dir, cfg: Config) -> list[ActorSpec]:
    boot = msgspec.msgpack.encode(ActorBoot(state_dir=str(state_dir), config=cfg))
    return [actor_spec("memory", config=boot), actor_spec("backfill", config=boot)]


def populate(state_dir, n: int) -> list[int]:
    """Write ``n`` distinct notes (one transaction) and return their ids, oldest first."""
    conn = open_database(str(state_dir / "memory.sqlite"))
    store = MemoryStore(conn, max_entries=10_000)
    topics = ["pytest fixtures", "the garden", "Paris trains", "sourdough", "chess openings",
              "rust lifetimes", "piano scales", "tax forms", "bird songs", "trio nurseries"]
    ids = []
    with write_txn(conn):
        for i in range(n):
            note = store.store(f"note {i}: thoughts on {topics[i % len(topics)]} #{i * 7919}",
                               now_ms=1_000_000 + i)
            ids.append(note.id)
    conn.close()
    return ids


def vector_rows(state_dir) -> list[tuple[int, str, int, int, int]]:
    """(note_id, model, dim, length(vector), created_at) of every stored vector."""
    conn = apsw.Connection(str(state_dir / "memory.sqlite"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute("SELECT note_id, model, dim, length(vector), created_at"
                            " FROM memory_vectors ORDER BY note_id").fetchall()
    finally:
        conn.close()


async def vectors(sup) -> int:
    stats = await memory_stats(sup)
    return stats["embeddings"]["vectors"]


async def test_backfill_embeds_every_note_newest_first(tmp_path):
    ids = populate(tmp_path, 300)
    cfg = make_config(backfillBatchSize=32)
    async with open_supervisor(specs(tmp_path, cfg)) as sup:
        with trio.fail_after(60):
            while await vectors(sup) < 300:
                await trio.sleep(0.05)
            while (status := await sup.request("backfill", BackfillStatus(), dict))["runs"] < 1:
                await trio.sleep(0.05)
            metrics = await sup.request("backfill", MetricsRequest(), dict)
    assert status["state"] == "idle" and status["model"] == MODEL
    assert status["embedded"] == 300 and status["dim"] == DIM
    assert metrics["counters"]["agent.memory.backfill.embedded"] == 300
    assert metrics["histograms"]["agent.memory.backfill.batch_ms"]["count"] == math.ceil(300 / 32)
    rows = vector_rows(tmp_path)
    assert [r[0] for r in rows] == sorted(ids)
    assert all(r[1:4] == (MODEL, DIM, DIM * 4) for r in rows)
    # Newest first: a higher note id was never embedded later than a lower one.
    by_id_desc = sorted(rows, key=lambda r: -r[0])
    stamps = [r[4] for r in by_id_desc]
    assert stamps == sorted(stamps)


@pytest.mark.slow
async def test_shutdown_during_backfill_is_fast_and_leaves_whole_batches(tmp_path):
    n, batch = 3000, 8
    ids = populate(tmp_path, n)
    cfg = make_config(backfillBatchSize=batch)
    async with open_supervisor(specs(tmp_path, cfg)) as sup:
        with trio.fail_after(60):
            while await vectors(sup) == 0:
                await trio.sleep(0.02)
        t0 = time.monotonic()
    exit_s = time.monotonic() - t0
    assert exit_s < 3.0, f"shutdown took {exit_s:.2f}s"
    rows = vector_rows(tmp_path)
    count = len(rows)
    assert 0 < count < n, "the run should have been stopped part-way"
    assert all(r[1:4] == (MODEL, DIM, DIM * 4) for r in rows)  # no partial rows
    assert count % batch == 0  # only whole PutVectors transactions
    # Newest first: exactly the `count` highest note ids have vectors.
    assert sorted(r[0] for r in rows) == sorted(ids)[-count:]


async def test_new_note_is_embedded_soon_after_it_is_written(tmp_path):
    old = populate(tmp_path, 5)
    cfg = make_config(backfill=False)  # no sweep: only the NotesWritten path embeds
    async with open_supervisor(specs(tmp_path, cfg)) as sup:
        with trio.fail_after(30):
            res = await memory_op(sup, "memory.notes.store", {"content": "I prefer pytest for unit work"},
                source="user")
            new_id = res.data["id"]
            while await vectors(sup) < 1:
                await trio.sleep(0.05)
            await trio.sleep(0.3)  # give a (wrong) sweep the chance to show up
            status = await sup.request("backfill", BackfillStatus(), dict)
    assert status["state"] == "idle" and status["runs"] == 0
    rows = vector_rows(tmp_path)
    assert [r[0] for r in rows] == [new_id] and new_id not in old
    assert rows[0][1:4] == (MODEL, DIM, DIM * 4)


def test_a_local_model_name_the_provider_cannot_run_is_refused_in_the_config():
    """A typo no longer leaves recall silently keyword-only: the config is refused where
    it is read (``serve``) or set (``config set``), naming the models that run."""
    from runtime.services.config import ConfigError, parse_config

    with pytest.raises(ConfigError) as info:
        parse_config('{"memory": {"embeddings": {"model": "no-such-model"}}}')
    assert "memory.embeddings" in str(info.value) and "'no-such-model'" in str(info.value)
    assert "all-minilm-l6-v2-int8" in str(info.value) and "wordllama" in str(info.value)
    server = parse_config('{"memory": {"embeddings": {"provider": "openai", "model": "x"}}}')
    assert server.memory.embeddings.model == "x"  # a server's model is the server's business


@pytest.mark.slow
@pytest.mark.parametrize(
    ("embeddings", "state", "reason"),
    [
        ({"enabled": False}, "disabled", "enabled is false"),
        ({"provider": "llama-server"}, "unavailable", "memory.embeddings.url is not set"),
    ],
)
async def test_inactive_backfill_writes_nothing(tmp_path, embeddings, state, reason):
    populate(tmp_path, 20)
    cfg = make_config(backfillStartDelayMs=0, **embeddings)
    async with open_supervisor(specs(tmp_path, cfg)) as sup:
        with trio.fail_after(30):
            await memory_op(sup, "memory.notes.store", {"content": "a fresh note"})
            await trio.sleep(1.0)
            status = await sup.request("backfill", BackfillStatus(), dict)
            metrics = await sup.request("backfill", MetricsRequest(), dict)
            assert await vectors(sup) == 0
    assert status["state"] == state and reason in status["reason"]
    assert status["embedded"] == 0
    assert any(k.startswith("agent.memory.backfill.inactive") for k in metrics["counters"])
    assert vector_rows(tmp_path) == []


async def test_similarity_requests_answer_once_the_embedder_is_attached(tmp_path):
    """The query rewriter's check (the ``similarity`` embed purpose) through the actor."""
    from actors.backfill.messages import Similarity, SimilarityReply

    cfg = make_config()
    async with open_supervisor(specs(tmp_path, cfg)) as sup:
        with trio.fail_after(60):
            while True:
                # the embedder attaches in the background, between any two requests: a
                # reply without a cosine (the caller skips its check) comes only before it
                early = await sup.request("backfill", Similarity(a="x", b="y"), SimilarityReply)
                attached = (await sup.request("backfill", BackfillStatus(), dict))["dim"] > 0
                if early.cosine is not None:
                    assert attached
                    break
                if attached:
                    break
                await trio.sleep(0.05)
        near = await sup.request("backfill", Similarity(
            a="My cat Pixel needs a checkup soon. and when is it?",
            b="Pixel vet checkup appointment"), SimilarityReply)
        far = await sup.request("backfill", Similarity(
            a="My cat Pixel needs a checkup soon. and when is it?",
            b="quantum chromodynamics lecture schedule"), SimilarityReply)
    assert near.model == far.model == MODEL and near.min_cosine == 0.35
    assert near.cosine > near.min_cosine > far.cosine


async def test_relevance_tells_a_tool_a_message_needs_from_a_word_shared_by_chance(tmp_path):
    """The agent's check before it offers a tool (docs/tools.md): with the default
    embedder a message that needs a tool scores above the model's chance floor with the
    tool's gist, and one that shares the tool's word in another sense below it; wordllama
    (no measured floor) gives no floor, so the agent keeps its choice."""
    from actors.backfill.messages import Relevance, RelevanceReply

    gists = ["get current time: Get current time in a specific timezones",
             "convert time: Convert time between timezones"]
    cfg = make_config(model="all-minilm-l6-v2-int8")
    async with open_supervisor(specs(tmp_path, cfg)) as sup:
        with trio.fail_after(120):
            while (await sup.request("backfill", BackfillStatus(), dict))["dim"] == 0:
                await trio.sleep(0.05)
        need = await sup.request("backfill", Relevance(
            text="My brother is in Lima. What time is it there now?", others=gists),
            RelevanceReply)
        chance = await sup.request("backfill", Relevance(
            text="What is 12 times 7?", others=gists), RelevanceReply)
        empty = await sup.request("backfill", Relevance(text="x", others=[]), RelevanceReply)
    floor = need.chance_cosine
    assert floor is not None and need.model == "all-minilm-l6-v2-int8"
    assert need.cosines is not None and min(need.cosines) > floor
    assert chance.cosines is not None and max(chance.cosines) < floor
    assert empty.cosines is None
    (tmp_path / "w").mkdir()
    async with open_supervisor(specs(tmp_path / "w", make_config())) as sup:
        with trio.fail_after(60):
            while (await sup.request("backfill", BackfillStatus(), dict))["dim"] == 0:
                await trio.sleep(0.05)
        other = await sup.request("backfill", Relevance(text="x", others=["y"]),
                                  RelevanceReply)
    assert other.cosines is not None and other.chance_cosine is None


async def test_a_relevance_request_in_the_first_seconds_waits_for_the_embedder(tmp_path):
    """A turn right after the daemon's start (the embedder attaches after the start
    delay) still gets its cosines: the request waits for the first attach."""
    from actors.backfill.messages import Relevance, RelevanceReply

    cfg = make_config(model="all-minilm-l6-v2-int8", backfillStartDelayMs=1500)
    async with open_supervisor(specs(tmp_path, cfg)) as sup:
        assert (await sup.request("backfill", BackfillStatus(), dict))["dim"] == 0
        with trio.fail_after(10):
            early = await sup.request("backfill", Relevance(
                text="What time is it in Tokyo?",
                others=["get current time: Get current time in a specific timezones"]),
                RelevanceReply)
    assert early.cosines is not None and early.cosines[0] > 0.25
