"""The supervisor: starts the actors, routes envelopes, restarts crashed actors.

Star topology: every child has one channel to the root; the root
routes ``Request``/``Reply``/``Error``/``Cast``/``Cancel`` by ``dest``. The root is
itself an endpoint named ``"root"`` (the websocket gateway calls actors through
:meth:`Supervisor.request`; casts addressed to ``"root"`` go to ``on_cast``).

Supervision is one-for-one: a crashed actor is restarted alone, after an
exponential backoff (0.1 s doubling, at most 5 s), unless more than
``max_restarts`` restarts happened within ``window_s`` (default 5 in 60 s, the
Erlang/OTP intensity rule): then :class:`RestartIntensityExceeded` propagates,
the whole tree is shut down, and the root exits non-zero so the service manager
restarts the group. Requests in flight to an actor that dies fail at once with
``ActorUnavailable``; requests the dead actor had in flight elsewhere are
cancelled.
"""

from __future__ import annotations

import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import msgspec
import structlog
import trio

from ._calls import Calls, encode_body
from ._channel import Channel
from ._spawn import (
    HELLO_TIMEOUT_S,
    READY_TIMEOUT_S,
    ActorSpec,
    adopt_actor,
    spawn_actor,
    stop_process,
)
from .errors import (
    ActorCrashed,
    ActorTooSlow,
    ProtocolViolation,
    RestartIntensityExceeded,
    TransportClosed,
)
from .messages import Cancel, Cast, Envelope, Error, Reply, Request

T = TypeVar("T")
log = structlog.get_logger()

CastHandler = Callable[[str, msgspec.Raw], Awaitable[None]]
CrashHandler = Callable[[ActorCrashed], Awaitable[None]]


SHUTDOWN_BUDGET_S = 2.7
"""Seconds the ordered shutdown of all actors may take at most (the target is ≤ 3 s
for the whole daemon, docs/architecture.md §10, leaving room for the gateway and the
root's own exit)."""


@dataclass
class RestartPolicy:
    """One-for-one restart policy.

    Attributes:
        max_restarts: restarts allowed within ``window_s`` before giving up.
        window_s: sliding window length in seconds.
        backoff_initial_s / backoff_max_s: exponential backoff bounds in seconds.
    """

    max_restarts: int = 5
    window_s: float = 60.0
    backoff_initial_s: float = 0.1
    backoff_max_s: float = 5.0


@dataclass
class _Slot:
    spec: ActorSpec
    proc: trio.Process | None = None
    channel: Channel | None = None
    stopping: bool = False
    restarts: deque[float] = field(default_factory=deque)
    crash_report: Error | None = None
    done: trio.Event = field(default_factory=trio.Event)
    pid: int | None = None
    # Set once the first start has ended, ready or failed: requests sent to the actor
    # before that wait for it instead of failing (the actors start concurrently).
    first_start: trio.Event = field(default_factory=trio.Event)


class Supervisor:
    """Routes and supervises a fixed set of actors. Create with :func:`open_supervisor`."""

    def __init__(
        self,
        specs: Sequence[ActorSpec],
        *,
        on_cast: CastHandler | None = None,
        on_crash: CrashHandler | None = None,
        policy: RestartPolicy | None = None,
        log_dir: str | None = None,
        log_level: str = "info",
        prestarted: dict[str, tuple[Any, socket.socket]] | None = None,
    ) -> None:
        self._slots = {s.name: _Slot(s) for s in specs}
        # Actors the caller already started (the daemon forks them: runtime.kernel._fork),
        # adopted on their first start instead of spawned; taken out as adopted.
        self._prestarted = prestarted if prestarted is not None else {}
        self._order = [s.name for s in specs]
        self._on_cast = on_cast
        self._on_crash = on_crash
        self.policy = policy or RestartPolicy()
        self._log_dir = log_dir
        self._log_level = log_level
        self._in_flight: dict[tuple[str, int], str] = {}
        self.calls = Calls("root", self._send_from_root)
        self.stopping = False
        self.restart_count = 0
        self._nursery: trio.Nursery | None = None  # the tree's, set by open_supervisor

    # ----------------------------------------------------------------- root API
    @property
    def names(self) -> list[str]:
        """The supervised actors' names, in start order."""
        return list(self._order)

    async def request(self, dest: str, body: Any, reply_type: type[T]) -> T:
        """The root as a caller; see :meth:`runtime.kernel._calls.Calls.request`."""
        return await self.calls.request(dest, body, reply_type)

    async def cast(self, dest: str, body: Any) -> None:
        """Send a one-way message from the root; dropped (logged) if dest is down."""
        await self._forward(dest, Cast(src="root", dest=dest, body=encode_body(body)))

    def pid_of(self, name: str) -> int | None:
        """PID of the running process of actor ``name``, or None."""
        slot = self._slots[name]
        return slot.proc.pid if slot.proc is not None and slot.proc.returncode is None else None

    def running(self, name: str) -> bool:
        """Whether actor ``name`` currently has a live channel."""
        return self._slots[name].channel is not None

    # ------------------------------------------------------------------ routing
    async def _send_from_root(self, env: Envelope) -> None:
        await self._route("root", env)

    async def _forward(self, dest: str, env: Envelope, raw: bytes | None = None) -> bool:
        """Send ``env`` to ``dest``; ``raw`` (its bytes as received) skips re-encoding."""
        slot = self._slots.get(dest)
        chan = slot.channel if slot is not None else None
        if chan is None:
            return False
        try:
            if raw is not None:
                await chan.send_raw(raw)
            else:
                await chan.send(env)
        except TransportClosed:
            return False
        return True

    async def _answer_unavailable(self, src: str, dest: str, rid: int, reason: str) -> None:
        err = Error(src=dest, dest=src, id=rid, kind="unavailable", code="unavailable",
                    message=reason)
        if src == "root":
            self.calls.resolve(err)
        else:
            await self._forward(src, err)

    async def _route(self, origin: str, env: Envelope, raw: bytes | None = None) -> None:
        src_field = getattr(env, "src", origin)
        if origin != "root" and src_field != origin:
            log.error("actor.spoofed_src", child=origin, claimed=src_field)
            return  # a child may only speak for itself
        match env:
            case Request(src=src, dest=dest, id=rid):
                if dest == "root":
                    await self._forward(src, Error(src="root", dest=src, id=rid, kind="remote",
                                                   code="not_found", message="root serves no requests"))
                    return
                if dest not in self._slots:
                    await self._answer_unavailable(src, dest, rid, "no such actor")
                    return
                self._in_flight[(src, rid)] = dest
                if not await self._forward(dest, env, raw):
                    if not self._slots[dest].first_start.is_set() and self._nursery is not None:
                        self._nursery.start_soon(self._deliver_after_start, env, raw)
                        return
                    self._in_flight.pop((src, rid), None)
                    await self._answer_unavailable(src, dest, rid, "not running")
            case Reply(src=src, dest=dest, id=rid) | Error(src=src, dest=dest, id=rid) if rid:
                self._in_flight.pop((dest, rid), None)
                if dest == "root":
                    self.calls.resolve(env)
                else:
                    await self._forward(dest, env, raw)
            case Error(kind="crash"):
                self._slots[origin].crash_report = env
            case Cast(src=src, dest=dest, body=body):
                if dest == "root":
                    if self._on_cast is not None:
                        await self._on_cast(src, body)
                elif not await self._forward(dest, env, raw):
                    slot = self._slots.get(dest)  # (a cast to no such actor: dropped)
                    if slot is not None and not slot.first_start.is_set() \
                            and self._nursery is not None:
                        self._nursery.start_soon(self._cast_after_start, env, raw)
                    else:
                        log.warning("cast.dropped", src=src, dest=dest)
            case Cancel(src=src, dest=dest, id=rid):
                if self._in_flight.pop((src, rid), None) is not None:
                    await self._forward(dest, env, raw)
            case _:
                log.debug("envelope.ignored", origin=origin, type=type(env).__name__)

    async def _deliver_after_start(self, env: Request, raw: bytes | None) -> None:
        """Forward a request that reached an actor still in its first start, once it is
        ready (bounded by the start's own deadlines); unavailable if it never is, dropped
        if its caller cancelled meanwhile."""
        await self._first_start(env.dest)
        if (env.src, env.id) not in self._in_flight:
            return  # the caller gave up (Cancel) while it waited
        if not await self._forward(env.dest, env, raw):
            self._in_flight.pop((env.src, env.id), None)
            await self._answer_unavailable(env.src, env.dest, env.id, "not running")

    async def _cast_after_start(self, env: Cast, raw: bytes | None) -> None:
        """Forward a cast that reached an actor still in its first start once it is ready
        (bounded like :meth:`_deliver_after_start`); dropped, with a warning, if it never
        is."""
        await self._first_start(env.dest)
        if not await self._forward(env.dest, env, raw):
            log.warning("cast.dropped", src=env.src, dest=env.dest)

    async def _first_start(self, dest: str) -> None:
        """Wait until ``dest`` finished its first start, at most the handshake's own
        deadlines (``HELLO_TIMEOUT_S + READY_TIMEOUT_S``)."""
        with trio.move_on_after(HELLO_TIMEOUT_S + READY_TIMEOUT_S):
            await self._slots[dest].first_start.wait()

    async def _pump(self, name: str, chan: Channel) -> None:
        while True:
            try:
                env, raw = await chan.receive_raw()
            except (TransportClosed, ProtocolViolation) as exc:
                if isinstance(exc, ProtocolViolation):
                    log.error("actor.protocol_violation", child=name, error=str(exc))
                return
            await self._route(name, env, raw)

    async def _forget(self, name: str) -> None:
        """Fail requests addressed to ``name``; cancel those it had made elsewhere."""
        for (src, rid), dest in list(self._in_flight.items()):
            if dest == name:
                del self._in_flight[(src, rid)]
                await self._answer_unavailable(src, dest, rid, "actor died while handling the request")
            elif src == name:
                del self._in_flight[(src, rid)]
                await self._forward(dest, Cancel(src=src, dest=dest, id=rid))

    # -------------------------------------------------------------- supervision
    async def _supervise(self, name: str, *,
                         task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                         ) -> None:
        slot = self._slots[name]
        started = False
        try:
            while True:
                slot.crash_report = None
                try:
                    pre = self._prestarted.pop(name, None)
                    if pre is not None:
                        proc, chan = await adopt_actor(slot.spec, *pre)
                    else:
                        proc, chan = await spawn_actor(slot.spec, log_dir=self._log_dir,
                                                       log_level=self._log_level)
                except (ActorCrashed, ActorTooSlow, ProtocolViolation) as exc:
                    if not started or slot.stopping or self.stopping:
                        raise  # a first start that fails is a boot failure
                    # A restart that dies during its own start-up (killed again, the
                    # machine overloaded) is one more crash: same backoff, same
                    # intensity limit — never the end of the whole daemon.
                    crash = exc if isinstance(exc, ActorCrashed) else ActorCrashed(
                        name, None, type(exc).__name__, str(exc))
                    log.error("actor.restart_failed", child=name, error=str(exc))
                    await self._crashed(slot, crash)
                    continue
                slot.proc, slot.channel = proc, chan
                if not started:
                    started = True
                    slot.first_start.set()
                    task_status.started()
                try:
                    await self._pump(name, chan)
                finally:
                    slot.channel = None
                    await stop_process(proc, None if slot.stopping else chan,
                                       cancel_grace_s=0.5 if not slot.stopping else 2.0)
                    await chan.aclose()
                    with trio.CancelScope(shield=True):
                        await self._forget(name)
                if slot.stopping or self.stopping:
                    return
                report = slot.crash_report
                crash = ActorCrashed(name, proc.returncode,
                                     report.remote_type if report else "",
                                     report.traceback if report else "")
                log.error("actor.crashed", child=name, exitcode=proc.returncode,
                          remote_type=crash.remote_type)
                await self._crashed(slot, crash)
        finally:
            slot.proc = None
            slot.first_start.set()
            slot.done.set()

    async def _crashed(self, slot: _Slot, crash: ActorCrashed) -> None:
        """One crash (at run time or during a restart's start-up): tell ``on_crash``,
        then back off under the intensity limit (raises RestartIntensityExceeded)."""
        if self._on_crash is not None:
            await self._on_crash(crash)
        await self._backoff(slot, crash)

    async def _backoff(self, slot: _Slot, crash: ActorCrashed) -> None:
        now = time.monotonic()
        while slot.restarts and now - slot.restarts[0] > self.policy.window_s:
            slot.restarts.popleft()
        if len(slot.restarts) >= self.policy.max_restarts:
            raise RestartIntensityExceeded(
                f"actor {slot.spec.name!r} crashed {len(slot.restarts) + 1} times within "
                f"{self.policy.window_s:.0f}s; giving up"
            ) from crash
        delay = min(self.policy.backoff_initial_s * 2 ** len(slot.restarts), self.policy.backoff_max_s)
        slot.restarts.append(now)
        self.restart_count += 1
        log.warning("actor.restarting", child=slot.spec.name, delay_s=delay,
                    restarts_in_window=len(slot.restarts))
        await trio.sleep(delay)

    async def shutdown(self, phases: Sequence[Sequence[str]] | None = None, *,
                       budget_s: float = SHUTDOWN_BUDGET_S) -> None:
        """Stop actors phase by phase (each phase concurrently), via the ladder.

        Default: the actors started after the first one together, then the first one —
        the reverse of the start order in two phases (OTP stops a supervisor's children
        in reverse start order), so the actor the others depend on, started first (the
        daemon's store), outlives them and closes cleanly; the kernel names no actor. ``budget_s`` (seconds) is shared
        equally by the phases; inside a phase 2/3 of it waits for an orderly exit and
        the rest for SIGTERM before SIGKILL, so the whole shutdown stays within its
        bound (3 s) even when an actor ignores every request.
        """
        self.stopping = True
        if phases is None:
            first, rest = self._order[:1], list(self._order[1:])
            phases = [p for p in (rest, first) if p]
        share = budget_s / max(1, len(phases))
        with trio.CancelScope(shield=True):
            for phase in phases:
                async with trio.open_nursery() as nursery:
                    for name in phase:
                        nursery.start_soon(self._stop_one, name, share)

    async def _stop_one(self, name: str, share: float) -> None:
        slot = self._slots[name]
        slot.stopping = True
        if slot.proc is not None and slot.proc.returncode is None:
            await stop_process(slot.proc, slot.channel, cancel_grace_s=share * 0.6,
                               term_grace_s=share * 0.3)
        with trio.move_on_after(share * 0.1):
            await slot.done.wait()


async def _start_all(nursery: trio.Nursery, sup: Supervisor, names: list[str]) -> None:
    """Start every actor at once and return when all are ready (``serve`` is ready only
    when every actor is). Concurrent, because each child is a fresh
    interpreter spending most of its start importing: one after another they added up
    past the target "serve ready ≤ 2 s" (``bench/lifecycle.py``). A request an actor
    sends to one still starting waits for it (:meth:`Supervisor._deliver_after_start`).
    The first start to fail cancels the others and its own exception is raised here (the
    tree's nursery in :func:`open_supervisor` may wrap it in a group again; ``serve``
    reports the leaf). A second start failing at the same moment is not reported.
    """
    try:
        async with trio.open_nursery() as starters:
            for name in names:
                starters.start_soon(partial(nursery.start, sup._supervise, name))
    except BaseExceptionGroup as group:
        leaves = _leaves(group)
        primary = next((e for e in leaves if not isinstance(e, trio.Cancelled)), None)
        if primary is None:
            raise
        raise primary from None


def _leaves(exc: BaseException) -> list[BaseException]:
    """Every non-group exception inside ``exc``, depth first."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


@asynccontextmanager
async def open_supervisor(
    specs: Sequence[ActorSpec],
    **kwargs: Any,
) -> AsyncIterator[Supervisor]:
    """Start every actor in ``specs`` order, yield once all are ready, stop on exit.

    Keyword arguments go to :class:`Supervisor`; ``prestarted`` maps actor names to
    ``(process, socket)`` of children already started (the daemon forks them,
    :mod:`runtime.kernel._fork`): their first start is a handshake only, and the entries
    adopted are removed from the dict. On normal exit the tree is shut down
    in order (:meth:`Supervisor.shutdown`). If an actor exceeds the restart
    intensity, RestartIntensityExceeded propagates out of the ``async with``. No
    child process outlives the context.
    """
    sup = Supervisor(specs, **kwargs)
    async with trio.open_nursery() as nursery:
        sup._nursery = nursery
        try:
            await _start_all(nursery, sup, [spec.name for spec in specs])
            yield sup
        finally:
            await sup.shutdown()
            nursery.cancel_scope.cancel()
