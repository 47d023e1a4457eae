"""The one typed door to memory: :class:`MemoryClient`.

``await memory.run(ops.ProfileSet(key="city", value="Brno"))`` answers a
:class:`~actors.store.records.ProfileFact`; every op of :mod:`.ops` is a request Struct
whose class names its reply, so the reply is typed for the caller and checked on arrival.
What carries the request differs by where the caller runs, and is the client's ``send``:

* inside the daemon (the agent, reflection, backfill, the gateway, the dashboard):
  :func:`actor_memory` sends a :class:`~actors.memory.messages.ToolOp` to the actor the
  op's ``route`` names, with who asks (source, session, turn, batch, client label);
* outside it (the CLI, the TUI, the MCP server): ``runtime.shell.client.DaemonClient``
  sends a ``memory`` frame over the websocket;
* with no daemon running, the offline CLI runs the op on the state directory's file
  (``runtime.shell.offline``).

This module loads no store and no HTTP client: talking to memory is a leaf.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar, cast

from .messages import ToolOp
from .ops import MemoryOp, MemoryRequest, reply_of

__all__ = ["MemoryClient", "MemoryRunner", "Requester", "actor_memory"]

R = TypeVar("R")
T = TypeVar("T")

Send = Callable[[MemoryOp[Any]], Awaitable[object]]
"""Carries one request and answers its reply (typed, or as decoded JSON)."""


class Requester(Protocol):
    """An actor context's or the supervisor's ``request(dest, body, reply_type)``."""

    def __call__(self, dest: str, body: Any, reply_type: Any, /) -> Awaitable[Any]: ...


class MemoryRunner(Protocol):
    """Whatever runs memory ops with typed replies: a :class:`MemoryClient`, the shell's
    websocket client, its offline stand-in (code that only needs memory takes this)."""

    async def run(self, request: MemoryOp[R], /) -> R: ...


class MemoryClient:
    """``run(request)`` → the request's reply (module docstring). Errors are the
    transport's: ``RemoteError`` with the memory actor's code inside the daemon,
    ``ClientError`` over the websocket, the store's ``MemoryFailure`` offline;
    ``msgspec.ValidationError`` when a reply does not have the op's shape."""

    def __init__(self, send: Send, *, typed: bool = False) -> None:
        self._send = send
        self._typed = typed  # send answers the reply decoded as its type already

    async def run(self, request: MemoryOp[R]) -> R:
        """Send ``request`` and return its reply, of ``type(request).reply``."""
        reply = await self._send(request)
        return cast(R, reply) if self._typed else reply_of(request, reply)


def actor_memory(request: Requester, *, source: str = "agent", session: str | None = None,
                 turn: str | None = None, batch: str | None = None,
                 client: str | None = None) -> MemoryClient:
    """A :class:`MemoryClient` inside the daemon: each request goes as a ``ToolOp`` to the
    actor its op's ``route`` names, through ``request`` (an ``ActorContext.request`` or
    ``Supervisor.request``), and its reply is decoded as the op's reply type.

    ``source`` is ``agent`` for the agent's tool calls (provenance ``tool``), else the
    user's surface; ``session`` / ``turn`` are written beside what a write stores;
    ``batch`` is the writer's batch (one client connection); ``client`` names who asks in
    the activity log (docs/architecture.md, "The activity log")."""

    async def send(op: MemoryOp[Any]) -> object:
        message = ToolOp(request=cast(MemoryRequest, op), source=source, session=session, turn=turn, batch=batch,
                         client=client)
        return await request(op.route, message, type(op).reply)

    return MemoryClient(send, typed=True)  # (the kernel decodes the reply as that type)
