"""Frames the daemon sends its websocket clients, as typed Structs.

The mirror of :mod:`.protocol` (the frames clients send): one msgspec Struct per frame
``type``, wire keys camelCase, tagged by ``type``, so the gateway builds every frame
through a type and a client can decode any frame with :func:`decode_outbound`. The
turn's frames (``turn.started``, ``step``, ``reply.delta``, ``reply``,
``turn.finished``) are the agent's (:mod:`actors.agent.messages`), sent as they come.
docs/protocol.md describes each frame for client authors.

A field typed ``… | UnsetType`` is left out of the frame while unset (``UNSET``), so
frames keep the exact keys they have always had: an error names ``id`` even when it is
``null``, a ``memory.changed`` frame names ``replaced`` only when a write replaced an
active value.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from actors.agent.messages import (ApprovalDone, ApprovalRequest, ReplyDelta, ReplyText, Step,
                                   TurnFinished, TurnStarted)
from actors.reflection.messages import NotKept

__all__ = ["ActorRestarting", "ApprovalResult", "CancelResult", "ConsolidationFrame", "ErrorFrame",
           "MemoryChangedFrame", "MemoryResult", "MetricsResult", "OutboundFrame", "Pong",
           "ReflectionFrame", "SessionDeleted", "SessionRenamed", "SessionResult", "SessionsResult",
           "ShuttingDown", "Subscribed", "Welcome", "decode_outbound"]


class _Out(msgspec.Struct, tag_field="type", rename="camel", kw_only=True):
    """Base of the daemon's frames."""


class Welcome(_Out, tag="welcome"):
    """The answer to ``hello``: the session this connection is attached to, the protocol
    version, and whether the session was created now."""

    session: str
    version: str
    created: bool


class ErrorFrame(_Out, tag="error"):
    """A refused frame or failed request: ``code`` (``bad_frame``, ``busy``,
    ``invalid_argument``, ``unavailable``, a remote error's code …), a sentence, and the
    request's ``id`` (``null`` when there is none)."""

    code: str
    message: str
    id: Any
    scope: str | UnsetType = UNSET  # ``forbidden``: the scope the client lacks


class Subscribed(_Out, tag="subscribed"):
    """The channels this connection now receives."""

    id: Any
    channels: list[str]


class Pong(_Out, tag="pong"):
    """The answer to ``ping``."""


class ShuttingDown(_Out, tag="shutting_down"):
    """The daemon accepted ``shutdown`` and is stopping."""


class _Result(_Out):
    id: Any
    data: Any


class CancelResult(_Result, tag="cancel.result"):
    """``{"cancelled": bool}`` for ``cancel``."""


class ApprovalResult(_Result, tag="approval.result"):
    """``{"resolved": bool}`` for ``approval`` (false: nothing of that id was waiting —
    answered already, timed out, or its turn ended)."""


class SessionsResult(_Result, tag="sessions.result"):
    """The stored sessions, newest first, for ``sessions``."""


class SessionResult(_Result, tag="session.result"):
    """One stored session with its last messages, for ``session.get``."""


class SessionDeleted(_Result, tag="session.deleted"):
    """The answer to ``session.delete``."""


class SessionRenamed(_Result, tag="session.renamed"):
    """``{"id", "title"}`` for ``session.rename``."""


class MemoryResult(_Out, tag="memory.result"):
    """The answer to a ``memory`` frame: ``data`` when ``ok``, else ``error``
    (``{"code", "message"}``)."""

    id: Any
    ok: bool
    data: Any | UnsetType = UNSET
    error: dict[str, str] | UnsetType = UNSET


class MetricsResult(_Out, tag="metrics.result"):
    """Every actor's metrics merged (``counters``, ``histograms``), each actor's own
    snapshot (``actors``), actor restarts, connected clients, live tasks per process."""

    counters: dict[str, Any]
    histograms: dict[str, Any]
    actors: dict[str, Any]
    restarts: int
    clients: int
    tasks: dict[str, Any]


class MemoryChangedFrame(_Out, tag="memory.changed"):
    """A committed write (``memory`` channel): the op, the profile keys and note ids it
    wrote, the session it came from; ``replaced`` / ``replacedPinned`` name the keys
    whose active value it replaced (only when there are some)."""

    op: str
    keys: list[str]
    ids: list[int]
    session: str | None
    replaced: list[str] | UnsetType = UNSET
    replaced_pinned: list[str] | UnsetType = UNSET


class ConsolidationFrame(_Out, tag="memory.consolidation"):
    """Progress of a consolidator tick (``memory`` channel): ``started``, each
    ``cluster`` (its ``index``, ``result``, ``lessonId``), ``finished`` (``report``)."""

    stage: str
    clusters: int
    index: int | UnsetType = UNSET
    result: str | UnsetType = UNSET
    lesson_id: int | None | UnsetType = UNSET
    report: Any | UnsetType = UNSET


class ReflectionFrame(_Out, tag="reflection"):
    """One reflection's outcome (``reflection`` channel): what it wrote and forgot, and
    how long it took."""

    session: str
    turn: str
    outcome: str
    latency_ms: float
    fact_keys: list[str]
    note_ids: list[int]
    reason: str
    updated_keys: list[str]
    forgotten_keys: list[str]
    forgotten_note_ids: list[int]
    timeout_ms: int
    not_kept: list[NotKept] = msgspec.field(default_factory=list)
    rewritten_note_ids: list[int] = msgspec.field(default_factory=list)
    unmet_claims: list[str] = msgspec.field(default_factory=list)


class ActorRestarting(_Out, tag="actor.restarting"):
    """An actor died and is being restarted (``actors`` channel): its exit code and
    the exception it reported (``null`` when none)."""

    actor: str
    exit_code: int | None
    error: str | None
    restarts: int


OutboundFrame = (Welcome | ErrorFrame | Subscribed | Pong | ShuttingDown | CancelResult
                 | ApprovalResult | SessionsResult | SessionResult | SessionDeleted | SessionRenamed | MemoryResult
                 | MetricsResult | MemoryChangedFrame | ConsolidationFrame | ReflectionFrame
                 | ActorRestarting | TurnStarted | ReplyDelta | ReplyText | Step | ApprovalRequest
                 | ApprovalDone | TurnFinished)
"""Every frame the daemon sends."""

_decoder = msgspec.json.Decoder(OutboundFrame)


def decode_outbound(raw: bytes | str) -> OutboundFrame:
    """One frame from the daemon as its Struct. Raises msgspec.DecodeError (or
    msgspec.ValidationError) for text that is no daemon frame."""
    return _decoder.decode(raw)
