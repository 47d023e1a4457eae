"""Child side of the kernel: the serve loop every actor process runs.

An actor module (``actors/<name>/actor.py``) exposes one function::

    @asynccontextmanager
    async def open_actor(ctx: ActorContext, config: bytes) -> AsyncIterator[Handler]

It opens its resources (database, HTTP client …) and yields a :class:`Handler`;
leaving the context closes them. The loop here does the handshake, dispatches
envelopes, and applies the lifecycle rules:

* each Request runs in its own task and cancel scope, keyed by ``(src, id)``, so a
  ``Cancel`` for that id cancels just that handler;
* a handler error carrying a string ``code`` attribute (domain errors, RemoteError)
  becomes an ``Error`` reply; any other exception crashes the actor ("let it
  crash"): the dying words go to the root as ``Error(kind="crash")``, exit code 1;
* ``Cancel(id=0)`` from the root is an orderly shutdown: cancel work, close
  resources (the memory actor checkpoints WAL), send ``Bye``, exit 0;
* EOF from the root is the orphan rule: cancel everything and exit at once.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeVar

import msgspec
import structlog
import trio

from ._calls import Calls, encode_body
from ._channel import Channel
from .errors import ActorTooSlow, ProtocolViolation, TransportClosed
from .messages import (
    ENVELOPE_VERSION,
    Boot,
    Bye,
    Cancel,
    Cast,
    Error,
    ChildHello,
    Ready,
    Reply,
    Request,
)

T = TypeVar("T")
log = structlog.get_logger()

BOOT_TIMEOUT_S = 10.0
SHUTDOWN_HOOK_S = 1.0
"""Bound (s) on a handler's optional ``on_shutdown()`` hook (e.g. the agent telling
clients their turns end with reason ``shutdown``)."""


class Handler(Protocol):
    """What an actor's ``open_actor`` yields."""

    async def on_request(self, src: str, body: msgspec.Raw) -> Any:
        """Answer one request; return a msgspec-encodable reply Struct."""

    async def on_cast(self, src: str, body: msgspec.Raw) -> None:
        """Handle one one-way message."""

    # Optional: ``async def on_shutdown(self) -> None`` runs (shielded, bounded by
    # SHUTDOWN_HOOK_S) when the root asks for shutdown, before work is cancelled.


OpenActor = Callable[["ActorContext", bytes], AbstractAsyncContextManager[Handler]]


def error_code(exc: BaseException) -> str | None:
    """The reply code of an expected (domain) error, or None for a crash-worthy bug."""
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) and code else None


def leaf_exception(exc: BaseException) -> BaseException:
    """First non-group exception inside (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def first_line(exc: BaseException, limit: int = 300) -> str:
    """One line that says what ``exc`` is: the first line of its message (of its first
    leaf, inside exception groups), at most ``limit`` characters; its type's name when
    the message is empty. For errors told to a person in one line."""
    leaf = leaf_exception(exc)
    text = str(leaf).strip()
    return text.splitlines()[0][:limit] if text else type(leaf).__name__


class ActorContext:
    """Handle an actor uses to talk to the rest of the tree.

    Attributes:
        name: this actor's name.
        nursery: actor-lifetime nursery for background work (e.g. reflections);
            set when serving starts, cancelled at shutdown before resources close.
    """

    def __init__(self, name: str, channel: Channel) -> None:
        self.name = name
        self.pid = os.getpid()
        self._channel = channel
        self.nursery: trio.Nursery = None  # type: ignore[assignment]  # set once serving
        self.calls = Calls(name, channel.send)

    async def request(self, dest: str, body: Any, reply_type: type[T]) -> T:
        """Request/reply through the root; see :meth:`runtime.kernel._calls.Calls.request`."""
        return await self.calls.request(dest, body, reply_type)

    async def cast(self, dest: str, body: Any) -> None:
        """Send a one-way message to ``dest`` (``"root"`` reaches the gateway)."""
        await self._channel.send(Cast(src=self.name, dest=dest, body=encode_body(body)))


async def _serve(ctx: ActorContext, channel: Channel, handler: Handler) -> None:
    """Dispatch loop; returns on shutdown request, raises TransportClosed on EOF."""
    in_flight: dict[tuple[str, int], trio.CancelScope] = {}

    async def run_request(req: Request) -> None:
        key = (req.src, req.id)
        with trio.CancelScope() as scope:
            in_flight[key] = scope
            try:
                result = await handler.on_request(req.src, req.body)
            except Exception as exc:
                code = error_code(exc)
                if code is None:
                    raise
                reply: Reply | Error = Error(
                    src=ctx.name, dest=req.src, id=req.id, kind="remote", code=code,
                    message=str(exc),
                    remote_type=type(exc).__name__,
                )
            else:
                reply = Reply(src=ctx.name, dest=req.src, id=req.id, body=encode_body(result))
            finally:
                in_flight.pop(key, None)
            try:
                await channel.send(reply)
            except TransportClosed:
                pass

    async def run_cast(cast: Cast) -> None:
        await handler.on_cast(cast.src, cast.body)

    while True:
        env = await channel.receive()
        match env:
            case Request():
                ctx.nursery.start_soon(run_request, env)
            case Cast():
                ctx.nursery.start_soon(run_cast, env)
            case Reply() | Error():
                ctx.calls.resolve(env)
            case Cancel(id=0):
                return
            case Cancel():
                scope = in_flight.get((env.src, env.id))
                if scope is not None:
                    scope.cancel()
            case _:
                raise ProtocolViolation(f"unexpected envelope {type(env).__name__}")


async def run_actor(name: str, channel: Channel, open_actor: OpenActor) -> int:
    """Run one actor over ``channel`` until shutdown; return the process exit code.

    0 after an orderly shutdown or orphaning, 1 after a crash (the crash report is
    sent to the root first when the channel still works).
    """
    try:
        await channel.send(ChildHello(name=name, pid=os.getpid(), version=ENVELOPE_VERSION))
        with trio.fail_after(BOOT_TIMEOUT_S):
            boot = await channel.receive()
        if isinstance(boot, Cancel) and boot.id == 0:
            log.info("actor.stopped_before_boot", actor=name)  # the root gave up on this start
            return 0
        if not isinstance(boot, Boot):
            raise ProtocolViolation(f"expected boot, got {type(boot).__name__}")
        ctx = ActorContext(name, channel)
        # Resources (open_actor) outlive the nursery: every handler task has finished
        # before the database or HTTP client closes.
        async with open_actor(ctx, bytes(boot.config)) as handler:
            async with trio.open_nursery() as nursery:
                ctx.nursery = nursery
                await channel.send(Ready())
                log.info("actor.ready", actor=name)
                on_ready = getattr(handler, "on_ready", None)
                if on_ready is not None:  # background start-up work (e.g. warming a cache)
                    nursery.start_soon(on_ready)
                try:
                    await _serve(ctx, channel, handler)
                finally:
                    on_shutdown = getattr(handler, "on_shutdown", None)
                    if on_shutdown is not None:
                        with trio.move_on_after(SHUTDOWN_HOOK_S) as cs:
                            cs.shield = True
                            await on_shutdown()
                    ctx.calls.fail_all("actor shutting down")
                    nursery.cancel_scope.cancel()
        with trio.move_on_after(0.5) as cs:
            cs.shield = True
            await channel.send(Bye())
        log.info("actor.stopped", actor=name)
        return 0
    except trio.TooSlowError:
        log.error("actor.boot_timeout", actor=name)
        raise ActorTooSlow(f"{name}: no boot within {BOOT_TIMEOUT_S}s") from None
    except BaseException as exc:  # noqa: BLE001 - the top level of a process
        leaf = leaf_exception(exc)
        if isinstance(leaf, TransportClosed):
            log.info("actor.orphaned", actor=name)  # root is gone: exit quietly
            return 0
        if isinstance(leaf, (KeyboardInterrupt, trio.Cancelled)):
            return 0
        tb = "".join(traceback.format_exception(leaf))
        log.error("actor.crashed", actor=name, error_type=type(leaf).__name__, error=str(leaf))
        with trio.move_on_after(0.5) as cs:
            cs.shield = True
            try:
                await channel.send(
                    Error(src=name, dest="root", id=0, kind="crash", code="crash",
                          message=str(leaf)[:2000], remote_type=type(leaf).__name__,
                          traceback=tb[-8000:])
                )
            except Exception:  # noqa: BLE001 - best effort dying words
                pass
        return 1
    finally:
        with trio.CancelScope(shield=True):
            await channel.aclose()
