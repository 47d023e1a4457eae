"""Hybrid recall's ranking: BM25 hits blended with cosine, meaning-only notes in the
slots left; vectors of another dimension or all zeros never break the order.

Pure functions over numbers; the stores feed them:

* :func:`cosine_scores` — the cosine of a query vector with each row of a matrix, computed
  under ``numpy.errstate(all="ignore")``; a zero or non-finite vector (query or row)
  scores exactly 0.0, never NaN. Rows of another dimension than the query are
  never passed in (``VectorStore.load`` keeps one model and one dimension).
* :func:`hybrid_rank` — the order:

  1. keyword hits (BM25 normalised within the hit set, strongest 1.0) are ranked among
     themselves by ``(1 − w) · bm25 + w · cosine`` (cosine 0 when the note has no vector)
     and keep their slots;
  2. notes found by meaning alone fill the slots left, best cosine first, only when their
     cosine reaches the model's floor (``minCosine``, default 0.35) and is within 0.15 of
     the best cosine the query reached over every scanned vector (visible or not);
  3. ``w = 0`` (``memory.embeddings.vectorWeight``) gives the keyword order and no
     meaning-only notes.

  An all-zero query vector gives every note cosine 0, so the order is the BM25 order.
* :func:`hybrid_recall` — the whole read: the keyword leg (``MemoryStore.recall``, its
  best :data:`KEYWORD_POOL_PER_K` × k hits, so the blend can lift a hit from below the
  keyword top k into it), the query embedded (purpose ``query``), the attached model's
  vectors (``VectorStore.load`` with the brute-force ceiling), the meaning-only candidates
  passed through the keyword query's filters (``MemoryStore.visible``), then
  :func:`hybrid_rank`. Errors from the vector side propagate: the caller falls back to
  keyword recall.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import msgspec
import numpy as np

from .errors import require_int
from .notes import K_MAX, K_MIN, MemoryStore, Note
from .vectors import VectorCache, VectorStore

__all__ = [
    "BEST_WINDOW",
    "DEFAULT_MIN_COSINE",
    "KEYWORD_POOL_PER_K",
    "Ranked",
    "VectorSide",
    "cosine_scores",
    "hybrid_rank",
    "hybrid_recall",
]

#: Meaning-only notes must be within this of the query's best cosine.
BEST_WINDOW = 0.15
#: Default cosine floor of a catalog entry (its ``minCosine``).
DEFAULT_MIN_COSINE = 0.35
#: The keyword hits that are blended with cosine: the best ``KEYWORD_POOL_PER_K * k`` of
#: keyword recall (at most ``notes.K_MAX``), ranked among themselves, cut to k. With only
#: the top k the blend merely reorders them and recall@k equals keyword recall's. LoCoMo
#: dev recall@10, vectorWeight 0.5, local MiniLM int8 (the default model): x1 = keyword
#: recall (71.1 %), x2 +2.2, x3 +2.7, x5 +3.0 points; the depth alone (x3, vectorWeight
#: 0.001) +0.6; wordllama x2 +1.2, x5 +0.9 (``python -m bench.locomo --hybrid
#: --ablation``, bench/RESULTS.md "LoCoMo retrieval"). x3 and x5 beat keyword recall on
#: each half of the dev split alone; x3 because x5's deeper keyword leg costs every
#: recall time for 0.3 points, with p99 near the 10 ms target of a recall (``bench.hybrid``).
KEYWORD_POOL_PER_K = 3


class Ranked(msgspec.Struct, frozen=True):
    """One ranked note: ``score`` in [0, 1] (the blend for keyword hits, the cosine for
    meaning-only notes); ``via`` is ``"keyword"`` or ``"meaning"``."""

    id: int
    score: float
    via: str


def cosine_scores(query: Sequence[float] | np.ndarray, rows: np.ndarray,
                  norms: np.ndarray | None = None) -> np.ndarray:
    """Cosine of ``query`` (shape ``(d,)``) with each row of ``rows`` (``(n, d)``).

    ``norms``: the rows' L2 norms when already known (``LoadedVectors.norms``, computed
    once per scan instead of once per query). Zero or non-finite vectors score 0.0; the
    result is finite, clipped to [-1, 1]. Raises ``ValueError`` when the dimensions differ.
    """
    q = np.asarray(query, dtype=np.float32).ravel()
    m = np.asarray(rows, dtype=np.float32)
    if m.size == 0:
        return np.zeros(0)
    if m.ndim != 2 or m.shape[1] != q.shape[0]:
        raise ValueError(f"dimension mismatch: query {q.shape[0]}, rows {m.shape}")
    with np.errstate(all="ignore"):
        if not np.isfinite(q).all():
            return np.zeros(m.shape[0])
        dots = m @ q  # a non-finite row gives a non-finite dot (zeroed below)
        if norms is None:
            norms = np.sqrt(np.einsum("ij,ij->i", m, m))
        denom = norms * np.sqrt(float(q @ q))
        out = np.zeros(m.shape[0], dtype=np.float32)
        np.divide(dots, denom, out=out, where=denom > 0)
    out[~np.isfinite(out)] = 0.0
    return np.clip(out, -1.0, 1.0).astype(np.float64)


def hybrid_rank(
    keyword: Sequence[tuple[int, float]],
    cosines: Mapping[int, float],
    k: int,
    *,
    vector_weight: float,
    min_cosine: float = DEFAULT_MIN_COSINE,
    best_window: float = BEST_WINDOW,
    best: float | None = None,
) -> list[Ranked]:
    """Rank keyword hits and meaning-only notes (the order of the module docstring).

    Args:
        keyword: ``(note id, normalised BM25 in [0, 1])`` of the keyword hits.
        cosines: cosine per note id for every scanned vector (keyword hits included).
        k: slots (≥ 1).
        vector_weight: ``w`` in [0, 1].
        min_cosine / best_window: the meaning-only admission rule.
        best: the query's best cosine over every scanned vector (default: the best of
            ``cosines``).

    Returns at most ``k`` :class:`Ranked`, keyword hits first.
    """
    w = min(1.0, max(0.0, float(vector_weight)))
    hits = [Ranked(i, (1 - w) * bm25 + w * max(0.0, cosines.get(i, 0.0)), "keyword")
            for i, bm25 in keyword]
    hits.sort(key=lambda r: (-r.score, r.id))
    out = hits[:k]
    if w == 0 or len(out) >= k or not cosines:
        return out
    best = max(cosines.values()) if best is None else best
    floor = max(min_cosine, best - best_window)
    taken = {r.id for r in out}
    meaning = sorted(((c, i) for i, c in cosines.items() if i not in taken and c >= floor),
                     key=lambda t: (-t[0], t[1]))
    return out + [Ranked(i, c, "meaning") for c, i in meaning[:k - len(out)]]


class HybridResult(msgspec.Struct, frozen=True):
    """:func:`hybrid_recall`'s notes (best first; ``score`` = blend or cosine) and what
    the vector scan left out: ``overflow`` (over the ceiling), ``stale`` (another
    dimension of the model)."""

    notes: list[Note]
    overflow: int = 0
    stale: int = 0


@dataclass(frozen=True)
class VectorSide:
    """The vector side of :func:`hybrid_recall`: where the vectors are and how they count.

    Attributes:
        vectors: the store of note vectors.
        embed_query: ``text -> vector`` of ``model`` for a query (purpose ``query``).
        model: the attached embedding model's name (only its vectors are read).
        vector_weight: ``w`` of the blend (``memory.embeddings.vectorWeight``); 0 gives
            keyword recall exactly.
        ceiling: at most this many vectors are scanned (``bruteForceCeiling``); the rest
            are counted as ``overflow``.
        min_cosine: the model's cosine floor for notes found by meaning alone.
        cache: the memory actor's cache of the newest vectors, or None.
    """

    vectors: VectorStore
    embed_query: Callable[[str], np.ndarray]
    model: str
    vector_weight: float
    ceiling: int
    min_cosine: float = DEFAULT_MIN_COSINE
    cache: VectorCache | None = None


def hybrid_recall(
    notes: MemoryStore,
    side: VectorSide,
    query: str,
    *,
    k: int,
    scope: str | None = None,
    working_dir: str | None = None,
    tags: list[str] | None = None,
    pool_per_k: int = KEYWORD_POOL_PER_K,
) -> HybridResult:
    """Hybrid recall of up to ``k`` notes for ``query`` (module docstring) with the
    vectors of ``side``; ``scope``, ``working_dir`` and ``tags`` filter as
    ``MemoryStore.recall`` does.

    ``pool_per_k``: how many keyword hits per slot are blended (``bench.locomo``
    measures it). Nothing is bumped: the caller bumps the returned ids. Raises
    ``ValidationError`` for bad arguments (as ``MemoryStore.recall``) and whatever the
    vector side raises.
    """
    vector_weight, min_cosine = side.vector_weight, side.min_cosine
    if vector_weight <= 0:  # keyword recall exactly
        return HybridResult(notes=notes.recall(query, k=k, scope=scope,
                                               working_dir=working_dir, tags=tags, bump=False))
    # The keyword hits: the best pool_per_k * k of keyword recall (its scores are already
    # normalised within them, strongest 1.0), so that the blend can bring a hit from just
    # below the keyword top k into the k slots (KEYWORD_POOL_PER_K).
    k = min(K_MAX, max(K_MIN, require_int(k, "k")))
    pool = min(K_MAX, max(k, pool_per_k * k))
    keyword = notes.recall(query, k=pool, scope=scope, working_dir=working_dir, tags=tags,
                           bump=False)
    qvec = np.asarray(side.embed_query(query.strip()), dtype=np.float32).ravel()
    loaded = side.vectors.load(side.model, qvec.shape[0], side.ceiling,
                               also=[n.id for n in keyword], cache=side.cache)
    scores = cosine_scores(qvec, loaded.rows, loaded.norms)
    at = loaded.index
    # Past the ceiling (older notes the scan left out), the server's own index finds the
    # nearest vectors among all of them (PostgreSQL; nothing on SQLite).
    slots = max(4 * k, 16)
    beyond = ({i: c for i, c in side.vectors.nearest(side.model, qvec, slots).items()
               if i not in at} if loaded.overflow else {})
    best = float(scores.max()) if scores.size else 0.0
    if beyond:
        best = max(best, *beyond.values())
    floor = max(min_cosine, best - BEST_WINDOW)
    by_id = {n.id: n for n in keyword}
    # Only the admissible candidates, best first (ties: newest), a few times the free
    # slots, are read back through the keyword query's filters. Vectorised: the scan is
    # up to bruteForceCeiling rows on every recall.
    admissible = scores >= floor
    admissible[[at[i] for i in by_id if i in at]] = False
    rows = np.flatnonzero(admissible)
    rows = rows[np.argsort(-scores[rows], kind="stable")][:slots]
    found = [(float(scores[j]), loaded.ids[j]) for j in rows.tolist()]
    found += [(c, i) for i, c in beyond.items() if c >= floor and i not in by_id]
    found.sort(key=lambda sc: (-sc[0], -sc[1]))
    visible = notes.visible([i for _, i in found[:slots]], scope=scope,
                            working_dir=working_dir, tags=tags)
    cosines = {i: float(scores[at[i]]) for i in (*by_id, *visible) if i in at}
    cosines.update({i: beyond[i] for i in visible if i in beyond})
    ranked = hybrid_rank([(n.id, n.score or 0.0) for n in keyword], cosines, k,
                         vector_weight=vector_weight, min_cosine=min_cosine, best=best)
    out = [msgspec.structs.replace(by_id[r.id] if r.via == "keyword" else visible[r.id],
                                   score=round(r.score, 6)) for r in ranked]
    return HybridResult(notes=out, overflow=loaded.overflow, stale=loaded.stale)
