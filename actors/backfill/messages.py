"""Messages of the backfill actor.

The backfill actor answers :class:`BackfillStatus` (→ :class:`BackfillStatusReply`),
:class:`Similarity`, :class:`Relevance` and the runtime-wide ``MetricsRequest``; it handles the memory actor's
``NotesWritten`` cast (``actors.memory.messages``). Bodies are msgspec Structs tagged
by ``kind`` with lower-case tags, like every actor's; new fields always
get defaults so an older peer keeps decoding newer messages.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from actors.memory.messages import NotesWritten
from runtime.services.metrics import MetricsRequest

__all__ = ["BackfillMsg", "BackfillState", "BackfillStatus", "BackfillStatusReply",
           "Relevance", "RelevanceReply", "Similarity", "SimilarityReply"]

BackfillState = Literal["disabled", "idle", "running", "unavailable"]
"""``disabled``: embeddings off in the config; ``idle``: attached, nothing to do (or
waiting for the start delay); ``running``: a backfill pass is embedding notes;
``unavailable``: embeddings are on but the embedder cannot be attached (the reason
says why; recall stays keyword-only)."""


class _M(msgspec.Struct, tag_field="kind", tag=str.lower, kw_only=True):
    """Base of backfill-actor messages."""


class BackfillStatus(_M):
    """Ask where the backfill stands → :class:`BackfillStatusReply`."""


class BackfillStatusReply(msgspec.Struct, kw_only=True):
    """Answer to :class:`BackfillStatus`; encodes as a plain map, so callers may
    decode it as ``dict``: ``{"state", "reason", "model", "embedded", "dim", "runs"}``.

    Attributes:
        state: see :data:`BackfillState`.
        reason: one line on why (e.g. "memory.embeddings.enabled is false").
        model: the attached (or configured) model id.
        embedded: vectors written by this process since it started.
        dim: vector dimension of the attached model (0 when none).
        runs: backfill passes finished since start.
    """

    state: BackfillState
    reason: str = ""
    model: str = ""
    embedded: int = 0
    dim: int = 0
    runs: int = 0


class Similarity(_M):
    """Cosine of two texts embedded with purpose ``similarity`` (the query
    rewriter's drift check) → :class:`SimilarityReply`."""

    a: str
    b: str


class SimilarityReply(msgspec.Struct, kw_only=True):
    """``cosine`` None when no embedder is attached (disabled, not loaded yet, failed);
    ``min_cosine``: the attached model's catalog floor (default 0.35)."""

    cosine: float | None = None
    min_cosine: float = 0.35
    model: str = ""


class Relevance(_M):
    """Cosines of ``text`` with each of ``others``, all embedded with purpose
    ``similarity`` (the agent's check that a tool sharing a word with a message is about
    the same thing) → :class:`RelevanceReply`."""

    text: str
    others: list[str]


class RelevanceReply(msgspec.Struct, kw_only=True):
    """``cosines`` (one per ``Relevance.others``, in order) None when no embedder is
    attached or it failed; ``chance_cosine``: the attached model's floor for a shared
    word being chance (its catalog entry; None where not measured)."""

    cosines: list[float] | None = None
    chance_cosine: float | None = None
    model: str = ""


BackfillMsg = BackfillStatus | MetricsRequest | NotesWritten | Relevance | Similarity
"""Everything the backfill actor decodes (requests and casts)."""
