"""Messages of the agent actor and the turn events it casts."""

from __future__ import annotations

from typing import Any

import msgspec


class _M(msgspec.Struct, tag_field="kind", tag=str.lower, kw_only=True):
    """Base of agent-actor messages."""


class OpenSession(_M):
    """Resume ``session`` (created when unknown) or create a new one (None)
    → :class:`SessionInfo`."""

    session: str | None = None
    working_dir: str | None = None


class SessionInfo(msgspec.Struct):
    session: str
    created: bool
    turns: int = 0


class RunTurn(_M):
    """Run one turn; the reply comes as TurnEvents; this answers :class:`TurnResult`
    when the turn ends. ``debug`` adds a ``prompt`` step event with the tail."""

    session: str
    turn: str
    text: str
    debug: bool = False


class TurnResult(msgspec.Struct):
    turn: str
    reason: str
    reply: str = ""


class CancelTurn(_M):
    """Cancel the running turn of ``session`` → ``{"cancelled": bool}``."""

    session: str


class ListSessions(_M):
    limit: int = 50


class DeleteSession(_M):
    session: str


class GetSession(_M):
    """One stored session → ``{"id", "createdAt", "updatedAt", "turns", "workingDir",
    "messages": [{"role", "text", "at"}]}`` (the last ``messages`` entries);
    ``not_found`` for an id without a stored turn."""

    session: str
    messages: int = 50


AgentMsg = OpenSession | RunTurn | CancelTurn | ListSessions | DeleteSession | GetSession


class TurnEvent(msgspec.Struct, tag="turn.event", tag_field="kind", kw_only=True):
    """Cast to the root for the clients attached to ``session``. ``type`` is the
    client-facing frame type (``turn.started``, ``step``, ``reply.delta``, ``reply``,
    ``turn.finished``); ``data`` its other fields."""

    session: str
    type: str
    data: dict[str, Any]
