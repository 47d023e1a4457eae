"""What the dashboard reads and changes, through the same actors every other client uses:
memory ops through the typed memory client (:mod:`actors.memory.client`; recorded in the
activity log as ``dashboard``), sessions from the agent, the activity log, metrics from
the gateway, and per-app tokens in ``clients.json`` (:mod:`runtime.shell.clients`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from actors.agent.messages import (ApprovalRequest, Approve, Decision, GetSession,
                                   ListApprovals, ListSessions, RenameSession)
from actors.tools.messages import ServerStatus, ToolsStatus, ToolsStatusReply
from actors.memory import ops
from actors.memory.client import actor_memory
from actors.memory.ops import MemoryOp
from actors.store.errors import ValidationError
from runtime.kernel.errors import RemoteError, RuntimeFailure

__all__ = ["Backend", "BackendError"]

CLIENT = "dashboard"
R = TypeVar("R")


class BackendError(Exception):
    """A refused or failed request, one line for the page (``code``: the daemon's)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Backend:
    """``request``: the supervisor's ``request(actor, message, reply_type)``;
    ``metrics``: the gateway's aggregate; ``state_dir``: where clients.json lives."""

    def __init__(self, request: Callable[..., Awaitable[Any]],
                 metrics: Callable[[], Awaitable[dict[str, Any]]], state_dir: Path) -> None:
        self._request = request
        self._metrics = metrics
        self.state_dir = state_dir
        self.memory = actor_memory(request, source="user", client=CLIENT)

    async def _ask(self, actor: str, message: Any, kind: type) -> Any:
        try:
            return await self._request(actor, message, kind)
        except RemoteError as exc:
            raise BackendError(exc.code, exc.message) from None
        except RuntimeFailure as exc:
            raise BackendError("unavailable", str(exc)) from None

    async def run(self, request: MemoryOp[R]) -> R:
        """One memory op (a request built from a form: its text checked as
        :func:`~actors.memory.ops.decode_op` would); its typed reply. BackendError
        with the daemon's code."""
        try:
            ops.check(request)
            return await self.memory.run(request)
        except ValidationError as exc:
            raise BackendError(exc.code, str(exc)) from None
        except RemoteError as exc:
            raise BackendError(exc.code, exc.message) from None
        except RuntimeFailure as exc:
            raise BackendError("unavailable", str(exc)) from None

    async def data(self, request: MemoryOp[Any]) -> Any:
        """:meth:`run`, its reply as JSON data (what the templates read)."""
        return msgspec.to_builtins(await self.run(request))

    async def stats(self) -> dict[str, Any]:
        return await self.run(ops.Stats())

    async def activity(self, *, limit: int = 100, client: str | None = None,
                       before: int | None = None, reads: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = await self.data(
            ops.Activity(limit=limit, client=client, before=before, reads=reads))
        return data

    async def sessions(self, limit: int = 50) -> list[dict[str, Any]]:
        data: list[dict[str, Any]] = await self._ask("agent", ListSessions(limit=limit), list)
        return data

    async def session(self, session: str, messages: int = 200) -> dict[str, Any]:
        data: dict[str, Any] = await self._ask(
            "agent", GetSession(session=session, messages=messages), dict)
        return data

    async def rename_session(self, session: str, title: str) -> dict[str, Any]:
        """Give ``session`` a title (``""``: its first line's again) → ``{"id", "title"}``;
        BackendError ``not_found`` / ``invalid_argument`` (over 200 characters)."""
        data: dict[str, Any] = await self._ask(
            "agent", RenameSession(session=session, title=title), dict)
        return data

    async def metrics(self) -> dict[str, Any]:
        return await self._metrics()

    async def approvals(self) -> list[ApprovalRequest]:
        """The tool calls waiting for a person's answer, oldest first (every session)."""
        data: list[ApprovalRequest] = await self._ask("agent", ListApprovals(),
                                                      list[ApprovalRequest])
        return data

    async def approve(self, request: str, decision: Decision) -> bool:
        """Answer one (as the owner, named ``dashboard`` in the activity log); False when
        it was no longer waiting."""
        data: dict[str, bool] = await self._ask("agent", Approve(
            request=request, decision=decision, client=CLIENT), dict)
        return bool(data.get("resolved"))

    async def tool_servers(self) -> list[ServerStatus]:
        """Each configured MCP server's state and tools (none without the tools actor:
        no server is enabled)."""
        reply: ToolsStatusReply = await self._ask("tools", ToolsStatus(), ToolsStatusReply)
        return reply.servers
