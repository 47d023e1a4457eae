"""The hybrid rankers ``bench.locomo`` measures: ``hybrid_recall`` with any
local embedder and settings, and the alternatives measured beside it.

* :func:`hybrid` -- ``actors.store.hybrid.hybrid_recall`` exactly as the memory actor
  calls it, with a given local model (default: ``memory.embeddings.model``), keyword pool,
  vectorWeight and same-session radius. Each conversation's notes are embedded (purpose
  ``document``) on first use, as the backfill would, into the conversation's own
  ``memory.sqlite``; vectors are keyed by model, so several models share one database.
* :func:`rrf` -- reciprocal-rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009:
  ``score = sum 1 / (60 + rank)``) of keyword recall's top ``pool·k`` and the best
  ``pool·k`` cosines over every vector: the usual "hybrid search" of vector databases, in
  which meaning-only notes compete for every slot (outside the hybrid rule, where meaning-only
  notes only fill the slots keyword hits left).
* :func:`candidate_union` -- not a ranker but a bound: keyword recall's top k and the
  vector top k together (up to 2k notes). Its "R@k" is how much of the evidence the two
  retrievers' first k candidates hold between them, whatever the fusion.
* :func:`second_recall` -- a multi-hop treatment: a second hybrid recall whose query adds
  the rare words (held by at most :data:`RARE_DF` of the notes) of the first recall's
  best :data:`SEED_HITS` notes, so that turns that share an entity with a first hit but
  not a word with the question can enter; the second recall's new notes take the last
  :data:`SECOND_SLOTS` share of the k slots.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from actors.store import recall
from actors.store.fts import index_text, query_terms
from actors.store.hybrid import KEYWORD_POOL_PER_K, VectorSide, cosine_scores, hybrid_recall
from actors.store.notes import K_MAX, MemoryStore
from actors.store.recall import STOPWORDS, doc_freqs
from actors.store.vectors import VectorCache, VectorStore
from runtime.services.config import EmbeddingsConfig
from runtime.services.embeddings.embedder import to_blob
from runtime.services.embeddings.providers import load_local

__all__ = ["EMBEDDER_MODEL", "RARE_DF", "SECOND_SLOTS", "SEED_HITS", "VECTOR_WEIGHT",
           "candidate_union", "hybrid", "reset", "rrf", "second_recall"]

Ranker = Callable[[object, MemoryStore, str, int], list[int]]

#: The local model of hybrid rows without an explicit one (``bench.locomo --embedder``).
EMBEDDER_MODEL: list[str] = [EmbeddingsConfig().model]
#: ``memory.embeddings.vectorWeight``'s default (runtime/services/config.py).
VECTOR_WEIGHT = EmbeddingsConfig().vector_weight
#: Loaded embedders by model id, and per (connection, model) the vector cache.
_EMBEDDERS: dict[str, object] = {}
_CACHES: dict[tuple[int, str], VectorCache] = {}
_CONN: list = []

#: second_recall: how many first hits give words, how rare a word must be (share of
#: notes holding it), and the share of the k slots the second recall may take.
SEED_HITS = 3
RARE_DF = 0.01
SECOND_SLOTS = 0.3


def reset() -> None:
    """Forget loaded embedders and caches (another model or another run)."""
    _EMBEDDERS.clear()
    _CACHES.clear()
    _CONN.clear()


def _prepare(conn, model: str):
    """The embedder of ``model`` and this conversation's cache, its notes embedded."""
    if model not in _EMBEDDERS:
        _EMBEDDERS[model] = load_local(model)
    embedder = _EMBEDDERS[model]
    if not _CONN or _CONN[0] is not conn:  # a new conversation: drop the old caches
        _CONN[:] = [conn]
        _CACHES.clear()
    if (id(conn), model) not in _CACHES:
        vectors = VectorStore(conn)
        todo = vectors.missing(model, 10_000)
        if todo:
            rows = embedder.embed([t for _, t in todo], "document")
            vectors.put(model, embedder.dim, [(i, to_blob(v)) for (i, _), v in zip(todo, rows)])
        _CACHES[(id(conn), model)] = VectorCache()
    return embedder, _CACHES[(id(conn), model)]


def hybrid(weight: float = VECTOR_WEIGHT, pool_per_k: int = KEYWORD_POOL_PER_K,
           radius: int | None = None, model: str | None = None) -> Ranker:
    """``hybrid_recall`` as a ranker; ``radius``: the keyword leg's
    ``recall.CONTEXT_RADIUS`` for this ranker; ``model``: default ``EMBEDDER_MODEL``."""

    def rank(conn, store: MemoryStore, question: str, k: int) -> list[int]:
        embedder, cache = _prepare(conn, model or EMBEDDER_MODEL[0])
        saved = recall.CONTEXT_RADIUS
        recall.CONTEXT_RADIUS = saved if radius is None else radius
        try:
            side = VectorSide(VectorStore(conn), lambda t: embedder.embed([t], "query")[0],
                              embedder.model, weight, 2000, embedder.entry.min_cosine, cache)
            result = hybrid_recall(store, side, question, k=k, pool_per_k=pool_per_k)
        finally:
            recall.CONTEXT_RADIUS = saved
        return [n.id for n in result.notes]
    return rank


def _dense(conn, question: str, depth: int, model: str | None) -> list[int]:
    """The ``depth`` notes with the best cosine to ``question`` (every vector scanned)."""
    embedder, cache = _prepare(conn, model or EMBEDDER_MODEL[0])
    loaded = VectorStore(conn).load(embedder.model, embedder.dim, 2000, cache=cache)
    scores = cosine_scores(embedder.embed([question], "query")[0], loaded.rows, loaded.norms)
    return [loaded.ids[j] for j in np.argsort(-scores, kind="stable")[:depth]]


def candidate_union(model: str | None = None) -> Ranker:
    """Keyword top k plus the vector top k (module docstring): a bound, up to 2k notes."""

    def rank(conn, store: MemoryStore, question: str, k: int) -> list[int]:
        keyword = [n.id for n in store.recall(question, k=k, bump=False)]
        return list(dict.fromkeys(keyword + _dense(conn, question, k, model)))
    return rank


def rrf(pool_per_k: int = KEYWORD_POOL_PER_K, c: int = 60, model: str | None = None) -> Ranker:
    """Reciprocal-rank fusion of the keyword and the vector top ``pool_per_k·k``."""

    def rank(conn, store: MemoryStore, question: str, k: int) -> list[int]:
        depth = min(K_MAX, pool_per_k * k)
        keyword = [n.id for n in store.recall(question, k=depth, bump=False)]
        dense = _dense(conn, question, depth, model)
        fused: dict[int, float] = {}
        for ranked in (keyword, dense):
            for r, note in enumerate(ranked):
                fused[note] = fused.get(note, 0.0) + 1.0 / (c + r + 1)
        return sorted(fused, key=lambda n: (-fused[n], n))[:k]
    return rank


def second_recall(model: str | None = None) -> Ranker:
    """The multi-hop second recall (module docstring) over the default hybrid."""
    first_rank = hybrid(model=model)

    def rank(conn, store: MemoryStore, question: str, k: int) -> list[int]:
        first = first_rank(conn, store, question, k)
        if not first:
            return first
        own = {w for w, _cjk in query_terms(question)}
        texts = [r[0] for r in conn.execute(
            "SELECT content FROM memories WHERE id IN (SELECT value FROM json_each(?))",
            (str(first[:SEED_HITS]),))]
        words = {w for t in texts for w, _cjk in query_terms(index_text(t))
                 if w not in STOPWORDS and w not in own and len(w) > 2}
        notes = conn.execute("SELECT count(*) FROM memories").fetchall()[0][0]
        stems = {w: recall.index_terms(w) for w in words}
        df = doc_freqs(conn, [s[0] for s in stems.values() if len(s) == 1])
        rare = sorted(w for w, s in stems.items()
                      if len(s) == 1 and 0 < df.get(s[0], 0) <= max(2, RARE_DF * notes))
        if not rare:
            return first
        extended = question
        for word in rare:  # recall takes at most 500 characters
            if len(extended) + 1 + len(word) > 500:
                break
            extended += " " + word
        second = first_rank(conn, store, extended, k)
        keep = k - max(1, round(SECOND_SLOTS * k))
        out = first[:keep]
        out += [n for n in second if n not in out][:k - len(out)]
        return out + [n for n in first[keep:] if n not in out][:k - len(out)]
    return rank


def linked(extra: int, floor: float = 0.45, per_note: int = 3,
           model: str | None = None) -> Ranker:
    """The links by meaning as recall help: the default hybrid's top ``k - extra``
    and, in the ``extra`` slots left, each hit's ``per_note`` nearest notes with cosine
    ≥ ``floor`` (what ``cold.similarity_links`` links and the context's link expansion
    would add), then the rest of the hybrid order. Same number of slots as hybrid."""
    first_rank = hybrid(model=model)

    def rank(conn, store: MemoryStore, question: str, k: int) -> list[int]:
        first = first_rank(conn, store, question, k)
        keep = first[:max(1, k - extra)]
        embedder, cache = _prepare(conn, model or EMBEDDER_MODEL[0])
        loaded = VectorStore(conn).load(embedder.model, embedder.dim, 2000, cache=cache)
        rows = loaded.rows / np.maximum(loaded.norms[:, None], 1e-12)
        out = list(keep)
        for seed in keep:
            j = loaded.index.get(seed)
            if j is None:
                continue
            scores = rows @ rows[j]
            scores[j] = -1.0
            for kk in np.argsort(-scores, kind="stable")[:per_note]:
                if scores[kk] < floor or len(out) >= k:
                    break
                if loaded.ids[kk] not in out:
                    out.append(loaded.ids[kk])
        out += [n for n in first if n not in out]
        return out[:k]
    return rank
