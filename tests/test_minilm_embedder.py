"""The in-process all-MiniLM-L6-v2 int8 embedder: loads offline
from the default install (weights checked against their pinned sha256, the vendored
vocabulary), gives L2-normalised 384-d vectors that rank paraphrases above unrelated
text, and runs in the daemon when ``memory.embeddings.model`` names it: the backfill
embeds the notes, hybrid recall finds a paraphrase keyword recall cannot."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import trio

from runtime.services.embeddings.embedder import CATALOG, EmbeddingUnavailable
from runtime.services.embeddings.providers import load_local
from runtime.shell.client import open_client
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama

MODEL = "all-minilm-l6-v2-int8"

try:
    EMBEDDER = load_local(MODEL)
except EmbeddingUnavailable as exc:  # the embedded extra is not installed
    EMBEDDER = None
    WHY = str(exc)


@pytest.fixture(autouse=True)
def _need_it():
    if EMBEDDER is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must install the embedded extra: {WHY}")
        pytest.skip(WHY)


FACTS = ["I prefer pytest for unit work", "My sister lives in Lyon",
         "I drink oat flat whites every morning", "The standup moved to Tuesdays at 9:30",
         "Our dog Pixel is afraid of thunderstorms", "I am learning the cello"]
QUESTIONS = ["what testing framework do I like?", "where is my sibling based?",
             "how do I take my coffee?", "when is the daily team meeting?",
             "which pet gets scared by storms?", "what instrument am I studying?"]


def test_vectors_are_normalised_384_d_and_paraphrases_rank_first():
    assert EMBEDDER.model == MODEL and EMBEDDER.dim == CATALOG[MODEL].dim == 384
    docs = EMBEDDER.embed(FACTS, "document")
    assert docs.shape == (6, 384) and docs.dtype == np.float32
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    queries = EMBEDDER.embed(QUESTIONS, "query")
    best = (queries @ docs.T).argmax(axis=1)
    assert best.tolist() == list(range(6))  # each question finds its fact
    assert EMBEDDER.similarity("I live in Oslo", "My home is in Oslo") > \
        EMBEDDER.similarity("I live in Oslo", "The cat sleeps all day")
    long = EMBEDDER.embed(["word " * 5000], "document")  # truncated, not refused
    assert long.shape == (1, 384) and np.isfinite(long).all()
    empty = EMBEDDER.embed([""], "query")
    assert np.isfinite(empty).all()
    assert EMBEDDER.embed([], "document").shape == (0, 384)
    with pytest.raises(ValueError):
        EMBEDDER.embed(["x"], "nonsense")
    with pytest.raises(EmbeddingUnavailable, match="runs wordllama"):
        load_local("no-such-model")


async def test_the_daemon_backfills_and_recalls_by_meaning_with_minilm(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "config.json").write_text(json.dumps({"memory": {"embeddings": {
        "model": MODEL, "backfillStartDelayMs": 50}}}))
    async with open_fake_llama(tmp_path) as fake, run_daemon(state, llm_url=fake.url) as d:
        async with open_client(url=d.url, token=d.token) as c:
            for text in FACTS:
                await c.memory("memory.notes.store", {"content": text})
            with trio.fail_after(60):
                while True:
                    emb = (await c.memory("memory.stats"))["embeddings"]
                    if emb["vectors"] == len(FACTS) and emb["recall"] == "hybrid":
                        break
                    await trio.sleep(0.05)
            assert emb["model"] == MODEL
            hits = await c.memory("memory.notes.recall",
                                  {"query": "which pet gets scared by storms?", "k": 1})
    assert [h["content"] for h in hits] == ["Our dog Pixel is afraid of thunderstorms"]
