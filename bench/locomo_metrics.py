"""Retrieval metrics beside LoCoMo evidence recall: where missed turns lie, and
LongMemEval-style session-level figures.

Pure functions over note ids; ``bench.locomo`` feeds them one question at a time.

* :func:`miss_kinds` -- for each evidence turn missing from the top k, whether it lies
  within :data:`NEAR` turns of a returned note of the same session ("near": a neighbour
  window around the hits would have caught it) or not ("far"). The peer harness in
  entire-graph's LoCoMo comparison reported 70 % of its missed turns within two turns of a
  returned fragment.
* :func:`session_metrics` -- LongMemEval's retrieval metrics (Wu et al., ICLR 2025,
  ``print_retrieval_metrics.py``) at session granularity: the ranked notes become the
  ranked list of their sessions (first appearance; a session counts once), a question's
  relevant sessions are those of its evidence turns. ``recall_any@k``: at least one
  relevant session in the top k sessions; ``recall_all@k``: every one of them;
  ``ndcg@10``: binary-relevance NDCG over the top 10 sessions (DCG = sum rel_i /
  log2(i + 2), divided by the DCG of the ideal order).
* :func:`ndcg` -- the same NDCG over any ranked list (turn-level NDCG@10 too).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = ["NEAR", "SESSION_KS", "miss_kinds", "ndcg", "session_metrics"]

#: A missed evidence turn is "near" when a returned note of its session is at most this
#: many turns away (peers-2026 §1.2: "within two turns of a returned fragment").
NEAR = 2
#: Cut-offs of the session-level recall_any / recall_all (LongMemEval reports 1..50; a
#: LoCoMo conversation has 19-32 sessions, so 10 and above say little).
SESSION_KS = (1, 3, 5)


def miss_kinds(evidence: set[int], returned: Sequence[int],
               session: Mapping[int, str | None]) -> tuple[int, int]:
    """Return ``(near, far)``: how many evidence ids missing from ``returned`` lie within
    :data:`NEAR` ids of a returned id of the same session, and how many do not.

    ``session`` maps note id -> session id (``None``: no session, never near)."""
    near = far = 0
    hits = [(r, session.get(r)) for r in returned]
    for e in evidence - set(returned):
        own = session.get(e)
        if own is not None and any(s == own and abs(r - e) <= NEAR for r, s in hits):
            near += 1
        else:
            far += 1
    return near, far


def ndcg(ranked: Sequence[object], relevant: set, k: int = 10) -> float:
    """Binary-relevance NDCG@k of ``ranked`` against ``relevant`` (0.0 when nothing is
    relevant). Duplicates in ``ranked`` count once, at their first position."""
    if not relevant:
        return 0.0
    seen: set = set()
    dcg = 0.0
    position = 0
    for item in ranked:
        if item in seen:
            continue
        seen.add(item)
        if position >= k:
            break
        if item in relevant:
            dcg += 1.0 / math.log2(position + 2)
        position += 1
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(k, len(relevant))))
    return dcg / ideal


def session_metrics(ranked_notes: Sequence[int], evidence: set[int],
                    session: Mapping[int, str | None]) -> dict[str, float]:
    """LongMemEval-style session figures for one question (module docstring):
    ``{"any@1", "all@1", "any@3", ..., "ndcg@10"}``, each 0..1."""
    order: list[str] = []
    for note in ranked_notes:
        s = session.get(note)
        if s is not None and s not in order:
            order.append(s)
    relevant = {session[e] for e in evidence if session.get(e) is not None}
    out: dict[str, float] = {}
    for k in SESSION_KS:
        top = set(order[:k])
        out[f"any@{k}"] = float(bool(relevant & top))
        out[f"all@{k}"] = float(bool(relevant) and relevant <= top)
    out["ndcg@10"] = ndcg(order, relevant, 10)
    return out
