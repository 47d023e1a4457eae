"""Messages of the reflection actor (DESIGN §2 steps 2, 5, 6)."""

from __future__ import annotations

import msgspec


class _M(msgspec.Struct, tag_field="kind", tag=str.lower, kw_only=True):
    """Base of reflection-actor messages."""


class Reflect(_M):
    """Cast by the agent after a turn: extract durable memory from this exchange.
    ``earlier``: the session's previous user messages (oldest first, at most
    :data:`EARLIER_MAX`), shown to the model as context only: "She is a nurse" needs
    "My sister is called Ana" before it (anchor §4.7 segmentation)."""

    session: str
    turn: str
    user_message: str
    assistant_reply: str
    earlier: list[str] = msgspec.field(default_factory=list)


EARLIER_MAX = 2


class AbortPending(_M):
    """Cancel the in-flight reflection of ``session`` (None: of every session)."""

    session: str | None = None


ReflectionMsg = Reflect | AbortPending


class ReflectionEvent(msgspec.Struct, tag="reflection", tag_field="kind", kw_only=True):
    """Cast to the root when a reflection ends; forwarded to clients subscribed to
    ``reflection``. Keys and note ids only, never values: ``fact_keys`` written (of which
    ``updated_keys`` replaced an active value), ``note_ids`` stored, ``forgotten_keys``
    (retired or deleted facts) and ``forgotten_note_ids``; ``timeout_ms`` is the
    reflection timeout in force (for the client's warning)."""

    session: str
    turn: str
    outcome: str
    latency_ms: float
    fact_keys: list[str] = msgspec.field(default_factory=list)
    note_ids: list[int] = msgspec.field(default_factory=list)
    reason: str = ""
    updated_keys: list[str] = msgspec.field(default_factory=list)
    forgotten_keys: list[str] = msgspec.field(default_factory=list)
    forgotten_note_ids: list[int] = msgspec.field(default_factory=list)
    timeout_ms: int = 0
