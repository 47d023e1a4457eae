"""What the dashboard reads and changes, through the same actors every other client uses:
memory ops as :class:`~actors.memory.messages.ToolOp` (recorded in the activity log as
``dashboard``), sessions from the agent, the activity log, metrics from the gateway,
and per-app tokens in ``clients.json`` (:mod:`runtime.shell.clients`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from actors.agent.messages import GetSession, ListSessions, RenameSession
from actors.memory.messages import ActivityQuery, OpResult, Stats, ToolOp
from runtime.kernel.errors import RemoteError, RuntimeFailure

__all__ = ["Backend", "BackendError"]

CLIENT = "dashboard"


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

    async def _ask(self, actor: str, message: Any, kind: type) -> Any:
        try:
            return await self._request(actor, message, kind)
        except RemoteError as exc:
            raise BackendError(exc.code, exc.message) from None
        except RuntimeFailure as exc:
            raise BackendError("unavailable", str(exc)) from None

    async def op(self, op: str, **args: Any) -> Any:
        """One memory op (``args`` in the op's camelCase names); its ``data``."""
        result = await self._ask("memory", ToolOp(
            op=op, args={k: v for k, v in args.items() if v is not None}, source="user",
            client=CLIENT), OpResult)
        return result.data

    async def stats(self) -> dict[str, Any]:
        data: dict[str, Any] = await self._ask("memory", Stats(), dict)
        return data

    async def activity(self, *, limit: int = 100, client: str | None = None,
                       before: int | None = None, reads: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = await self._ask(
            "memory", ActivityQuery(limit=limit, client=client, before=before, reads=reads),
            dict)
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
