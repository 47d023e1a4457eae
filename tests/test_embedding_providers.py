"""Server embedding providers, and inputs over a server's physical batch.

Tier 1: the response parser and the "too large" classifier on literal bodies.
Tier 2: :func:`runtime.services.embeddings.providers.attach` against the scripted llama-server run as
a real subprocess (``/embedding`` and ``/v1/embeddings``): attach only with the catalog's
dimension, a clear reason otherwise, bearer tokens, inputs cut to fit.
Tier 3: the whole daemon with ``provider: "llama-server"``: notes are embedded by the
backfill actor, recall goes hybrid through the server, a note too long for the server is
stored and found by keyword, and the warning names ``-b``/``-ub``.
"""

from __future__ import annotations

import json

import msgspec
import numpy as np
import pytest
import trio

from runtime.services.config import EmbeddingsConfig, parse_config
from runtime.services.embeddings.embedder import EmbeddingUnavailable
from runtime.services.embeddings.providers import (
    FIT_ATTEMPTS,
    ServerEmbedder,
    attach,
    configured_entry,
    parse_vectors,
    too_large,
)
from runtime.shell.client import open_client
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama

BC10_MESSAGE = ("input (812 tokens) is too large to process. increase the physical batch "
                "size (current batch size: 512)")


def emb_cfg(**block) -> EmbeddingsConfig:
    cfg = parse_config(msgspec.json.encode({"memory": {"embeddings": block}}))
    return cfg.memory.embeddings


# -- Tier 1 ---------------------------------------------------------------------------


@pytest.mark.parametrize("payload", [
    {"embedding": [0.1, 0.2, 0.3]},                                   # old llama-server
    {"embedding": [[0.1, 0.2, 0.3]]},                                 # pooled, nested
    {"data": [{"index": 0, "embedding": [0.1, 0.2, 0.3]}]},           # OpenAI
    [{"index": 0, "embedding": [[0.1, 0.2, 0.3]]}],                   # current llama-server
    [{"embedding": [0.1, 0.2, 0.3]}],
])
def test_every_documented_response_shape_parses(payload):
    assert parse_vectors(payload, 1) == [[0.1, 0.2, 0.3]]


def test_batch_responses_come_back_in_input_order():
    payload = {"data": [{"index": 1, "embedding": [2.0]}, {"index": 0, "embedding": [1.0]}]}
    assert parse_vectors(payload, 2) == [[1.0], [2.0]]


@pytest.mark.parametrize(("payload", "words"), [
    ({"embedding": [[0.1, 0.2], [0.3, 0.4]]}, "--pooling"),           # per-token (pooling none)
    ({"embedding": ["a", "b"]}, "not a list of numbers"),
    ({"embedding": [True, False]}, "not a list of numbers"),
    ({"embedding": []}, "not a list of numbers"),
    ({"data": []}, "0 embeddings for 1"),
    ({"result": [1.0]}, "neither 'embedding' nor 'data'"),
    ("hello", "neither"),
    ({"data": [{"index": 3, "embedding": [1.0]}]}, "indexes"),
])
def test_wrong_shapes_are_named(payload, words):
    with pytest.raises(ValueError, match=words):
        parse_vectors(payload, 1)


def test_null_components_read_as_nan_and_unfloatable_numbers_are_named():
    """llama-server writes a NaN component as ``null``: the row parses (NaN) and is then
    reported missing, instead of failing the whole batch."""
    (row,) = parse_vectors({"embedding": [0.5, None]}, 1)
    assert row[0] == 0.5 and row[1] != row[1]
    with pytest.raises(ValueError, match="too large for a float"):
        parse_vectors({"embedding": [10**400]}, 1)
    # A 5,000-digit count is no number (int() would refuse it): read as 0.
    assert too_large(500, f"input ({'9' * 5000} tokens) is too large to process. increase "
                          f"the physical batch size (current batch size: 512)") == (0, 512)


def test_too_large_is_recognised_with_its_numbers():
    assert too_large(500, BC10_MESSAGE) == (812, 512)
    assert too_large(400, "This model's maximum context length is 8192 tokens, however you "
                          "requested 9000 tokens (9000 in your prompt).") == (9000, 8192)
    assert too_large(500, "input is too large to process") == (0, 0)
    assert too_large(500, "out of memory") is None
    assert too_large(200, BC10_MESSAGE) is None


def test_configured_entry_needs_a_dimension_for_unknown_models():
    def server(**block) -> EmbeddingsConfig:  # a server's models (the local two are fixed)
        return emb_cfg(provider="llama-server", url="http://127.0.0.1:9", **block)

    assert configured_entry(server(model="nomic-embed-text-v1.5")).dim == 768
    assert configured_entry(server(model="my-model", dim=64)).dim == 64
    with pytest.raises(EmbeddingUnavailable, match="not in the catalog; set memory.embeddings.dim"):
        configured_entry(server(model="my-model"))
    with pytest.raises(EmbeddingUnavailable, match="contradicts the catalog"):
        configured_entry(server(model="bge-small-en-v1.5", dim=768))


# -- Tier 2: attach against a real HTTP server ------------------------------------------


async def test_llama_server_attaches_with_the_catalog_dimension_and_embeds(tmp_path):
    async with open_fake_llama(tmp_path, embedding_dim=768) as fake:
        emb = await attach(emb_cfg(provider="llama-server", url=fake.url,
                                   model="nomic-embed-text-v1.5"))
        try:
            out = await emb.embed(["pytest fixtures for unit tests", "pytest unit tests", ""],
                                  "document")
        finally:
            await emb.aclose()
        bodies = [r["body"] for r in fake.embedding_requests()]
    assert emb.model == "nomic-embed-text-v1.5" and emb.dim == 768
    assert out.vectors.shape == (3, 768) and out.vectors.dtype == np.float32
    assert np.isclose(np.linalg.norm(out.vectors[0]), 1.0)
    assert float(out.vectors[0] @ out.vectors[1]) > 0.5
    # The empty text's all-zero answer is never stored: it is reported missing.
    assert out.missing == [2] and not out.vectors[2].any()
    assert bodies[0] == {"content": "probe"}  # the attach probe, then one text per request
    assert bodies[1:] == [{"content": "pytest fixtures for unit tests"},
                          {"content": "pytest unit tests"}, {"content": ""}]


async def test_gemma_style_models_get_their_task_prefix_on_the_wire(tmp_path):
    async with open_fake_llama(tmp_path, embedding_dim=768) as fake:
        emb = await attach(emb_cfg(provider="llama-server", url=fake.url,
                                   model="embeddinggemma-300m"))
        try:
            await emb.embed(["I prefer pytest"], "document")
            await emb.embed(["testing setup?"], "query")
        finally:
            await emb.aclose()
        bodies = [r["body"]["content"] for r in fake.embedding_requests()][1:]
    assert bodies == ["title: none | text: I prefer pytest",
                      "task: search result | query: testing setup?"]


@pytest.mark.parametrize(("server_dim", "block", "reason"), [
    (384, {"model": "nomic-embed-text-v1.5"}, "returns 384-d vectors but nomic-embed-text-v1.5 is 768-d"),
    (0, {"model": "nomic-embed-text-v1.5"}, "HTTP 501: This server does not support embeddings. "
                                           "Start it with `--embeddings`"),
    (768, {"model": "unknown-model"}, "not in the catalog"),
])
async def test_a_server_that_cannot_serve_the_model_is_not_attached(tmp_path, server_dim, block,
                                                                    reason):
    async with open_fake_llama(tmp_path, embedding_dim=server_dim) as fake:
        with pytest.raises(EmbeddingUnavailable) as info:
            await attach(emb_cfg(provider="llama-server", url=fake.url, **block))
    assert reason in info.value.message


async def test_a_dead_server_is_a_clear_reason_after_bounded_tries(tmp_path):
    with trio.fail_after(10), pytest.raises(EmbeddingUnavailable, match="ConnectError"):
        await attach(emb_cfg(provider="llama-server", url="http://127.0.0.1:9",
                             model="bge-small-en-v1.5"))
    with pytest.raises(EmbeddingUnavailable, match="memory.embeddings.url is not set"):
        await attach(emb_cfg(provider="llama-server", model="bge-small-en-v1.5"))


async def test_openai_provider_batches_sends_the_key_and_checks_dim(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_EMBED_KEY", "sk-test-123")
    async with open_fake_llama(tmp_path, embedding_dim=64) as fake:
        emb = await attach(emb_cfg(provider="openai", url=fake.url, model="tiny-embed", dim=64,
                                   apiKeyEnv="MY_EMBED_KEY"))
        try:
            out = await emb.embed(["alpha beta", "gamma"], "document")
        finally:
            await emb.aclose()
        reqs = fake.embedding_requests()
    assert out.vectors.shape == (2, 64) and out.missing == []
    assert [r["path"] for r in reqs] == ["/v1/embeddings"] * 2
    assert reqs[1]["body"] == {"model": "tiny-embed", "input": ["alpha beta", "gamma"],
                               "encoding_format": "float"}
    assert {r["auth"] for r in reqs} == {"Bearer sk-test-123"}
    assert fake.openai_requests() == []  # chat/completions requests are counted apart


async def test_a_long_note_is_cut_to_fit_with_one_warning_naming_ub(tmp_path, capsys):
    """A note longer than the server's batch: HTTP 500 "increase the physical batch size"
    for inputs over 1,500 chars."""
    long_note = "Packing list for the Iceland trip: " + ", ".join(
        f"item {i} wool socks and a rain shell" for i in range(90))
    assert len(long_note) > 3000
    for api, model, extra in (("llama-server", "bge-small-en-v1.5", {}),
                              ("openai", "bge-small-en-v1.5", {})):
        async with open_fake_llama(tmp_path / api, embedding_dim=384,
                                   embedding_max_chars=1500) as fake:
            emb = await attach(emb_cfg(provider=api, url=fake.url, model=model, **extra))
            assert isinstance(emb, ServerEmbedder)
            try:
                out = await emb.embed(["short note", long_note], "document")
            finally:
                await emb.aclose()
            sent = [r["body"] for r in fake.embedding_requests()][1:]
        assert out.missing == [] and out.truncated == [1], api
        assert out.vectors[1].any() and emb.truncated == 1
        # Bounded: the long note costs at most FIT_ATTEMPTS requests (plus OpenAI's batch).
        texts = [b.get("content") or b.get("input") for b in sent]
        long_tries = [t for t in texts if (t if isinstance(t, str) else t[0]).startswith("Pack")]
        assert 2 <= len(long_tries) <= FIT_ATTEMPTS + (api == "openai"), (api, len(long_tries))
    logged = capsys.readouterr().out
    assert logged.count("embedding.input_too_large") == 2  # once per embedder
    assert "-b and -ub" in logged and "limit=512" in logged


async def test_a_note_that_never_fits_is_missing_after_bounded_requests(tmp_path):
    rules = [{"embedding": True, "match": "UNEMBEDDABLE", "status": 500,
              "response": "input (4000 tokens) is too large to process. increase the physical "
                          "batch size (current batch size: 3000)"}]
    async with open_fake_llama(tmp_path, rules, embedding_dim=384) as fake:
        emb = await attach(emb_cfg(provider="llama-server", url=fake.url,
                                   model="bge-small-en-v1.5"))
        try:
            out = await emb.embed(["UNEMBEDDABLE " * 300, "fine"], "document")
        finally:
            await emb.aclose()
        tries = [r for r in fake.embedding_requests()
                 if "UNEMBEDDABLE" in r["body"]["content"]]
    assert out.missing == [0] and out.vectors[1].any() and emb.skipped == 1
    assert len(tries) == FIT_ATTEMPTS


async def test_a_server_started_late_is_attached_and_a_dead_one_costs_one_failure(
        tmp_path, monkeypatch):
    """The query embedder probes a server that is not up yet again (ATTACH_RETRY_S), and
    after a failed query embedding recall skips the server for COOLDOWN_S instead of
    paying the failure on every turn."""
    import socket

    from actors.store.query_embedder import QueryEmbedder
    from runtime.services.embeddings import providers

    monkeypatch.setattr(providers, "ATTACH_RETRY_S", 0.2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    qe = QueryEmbedder(emb_cfg(provider="llama-server", url=f"http://127.0.0.1:{port}",
                               model="bge-small-en-v1.5", backfillStartDelayMs=0))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(qe.attach)
        with trio.fail_after(10):
            while qe.state != "unavailable":
                await trio.sleep(0.02)
        assert "probing again every" in qe.reason and "ConnectError" in qe.reason
        async with open_fake_llama(tmp_path, embedding_dim=384, port=port):
            with trio.fail_after(20):
                while not qe.attached:
                    await trio.sleep(0.05)
            await qe.prepare("pytest unit work")
            assert qe.embed("pytest unit work").shape == (384,)
    assert qe.status()["recall"] == "hybrid"
    # The server is gone now: one failed try, then keyword recall without asking it.
    t0 = trio.current_time()
    await qe.prepare("a new question")
    assert "keyword recall for 30 s" in qe.status()["reason"]
    with pytest.raises(EmbeddingUnavailable):
        qe.embed("a new question")
    t1 = trio.current_time()
    await qe.prepare("another question")
    assert trio.current_time() - t1 < 0.05 <= t1 - t0  # cooldown: no request at all
    await qe.aclose()


# -- Tier 3: the daemon with a llama-server embedding provider --------------------------


async def _stats(c) -> dict:
    return await c.memory("memory.stats")


async def test_daemon_with_a_server_embedder_backfills_recalls_hybrid_and_survives_long_notes(
        tmp_path):
    """The whole path with ``provider: "llama-server"``: the backfill actor embeds new
    notes through the server (the note too long for its batch cut to fit; one that never
    fits is stored without a vector), ``memory stats`` says hybrid, and recall answers through the
    server's query embedding; a turn is unaffected."""
    state = tmp_path / "state"
    state.mkdir()
    rules = [{"embedding": True, "match": "UNEMBEDDABLE", "status": 500,
              "response": "input (99999 tokens) is too large to process. increase the physical "
                          "batch size (current batch size: 1)"},
             {"grammar_contains": "reply", "response": '{"reply": "Noted."}'}]
    async with open_fake_llama(tmp_path, rules, embedding_dim=384,
                               embedding_max_chars=1500) as fake:
        (state / "config.json").write_text(json.dumps({"memory": {"embeddings": {
            "provider": "llama-server", "url": fake.url, "model": "bge-small-en-v1.5",
            "backfillStartDelayMs": 0}}}))
        long_note = "Packing list for Iceland: " + ", ".join(
            f"item {i} wool socks" for i in range(120))
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                with trio.fail_after(30):
                    while (await _stats(c))["embeddings"]["state"] != "attached":
                        await trio.sleep(0.05)
                ids = [(await c.memory("memory.notes.store", {"content": text}))["id"]
                       for text in (long_note, "UNEMBEDDABLE " * 20,
                                    "I prefer pytest for unit work")]
                with trio.fail_after(30):
                    while (await _stats(c))["embeddings"]["vectors"] < 2:
                        await trio.sleep(0.05)
                with trio.fail_after(30):
                    stats = await _stats(c)
                    hits = await c.memory("memory.notes.recall", {"query": "pytest unit work"})
                    socks = await c.memory("memory.notes.recall", {"query": "wool socks Iceland"})
                    lost = await c.memory("memory.notes.recall", {"query": "UNEMBEDDABLE"})
                    frames = [f async for f in c.say("What do I use for unit work?")]
                    metrics = await c.request({"type": "metrics"}, "metrics.result")
        embedding_paths = {r["path"] for r in fake.embedding_requests()}
    emb = stats["embeddings"]
    assert emb["recall"] == "hybrid" and emb["provider"] == "llama-server"
    assert emb["model"] == "bge-small-en-v1.5"
    assert emb["vectors"] == 2 and stats["notes"] == 3  # the unembeddable note is kept
    assert hits[0]["id"] == ids[2] and socks[0]["id"] == ids[0] and lost[0]["id"] == ids[1]
    assert frames[-1]["type"] == "turn.finished" and frames[-1]["reason"] == "reply"
    assert embedding_paths == {"/embedding"}
    memory_counters = json.dumps(metrics)
    assert "agent.memory.recall{mode=hybrid}" in memory_counters
    assert "agent.memory.backfill.skipped" in memory_counters
    backfill_log = (state / "logs" / "backfill.log").read_text()
    assert "embedding.input_too_large" in backfill_log and "-ub" in backfill_log
    assert "backfill.skipped" in backfill_log

