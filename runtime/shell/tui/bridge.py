"""The TUI's link to the daemon: the project's trio client, run in a thread.

textual runs on asyncio and :mod:`runtime.shell.client` is trio. Rather than a second
websocket client, :class:`DaemonBridge` runs ``trio.run`` in one background thread
that owns a :class:`~runtime.shell.client.DaemonClient` (hello, token, frame encoding all
come from there). The asyncio side calls the bridge's ``async`` methods; each starts
its request as a task in the trio thread and awaits an ``asyncio`` future that the
task completes (``call_soon_threadsafe``), so the UI loop never blocks and no worker
thread is held. Cancelling the asyncio side (a textual worker replaced by a newer one)
cancels the trio task too. Failures arrive as :class:`~runtime.shell.client.ClientError`.

Only one task reads the websocket (``_reader``): answers are matched to their request
by ``id`` (``memory``, ``sessions``, ``cancel`` and ``subscribe`` frames all carry one,
docs/protocol.md), every other frame (turn frames, ``memory.changed``, ``reflection``,
errors of other frames) goes to the ``on_frame`` callback, called in the trio thread.
Frames are typed both ways: :mod:`runtime.shell.protocol` Structs go out, and what comes
back is :mod:`runtime.shell.outbound`'s. When the connection ends the callback gets a
:class:`BridgeClosed`.

Rules: one connection at a time (:meth:`DaemonBridge.switch` closes it and opens
another with a new ``hello``; opens are serialised); waiting for an answer is bounded
by ``request_timeout_s``, opening a connection by the client's own connect and hello
deadlines; :meth:`DaemonBridge.close` ends the thread within a few seconds.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import msgspec
import trio

from actors.agent.messages import Decision
from actors.memory.client import MemoryClient
from actors.memory.ops import MemoryOp, args_of

from ..client import ClientError, DaemonClient, open_daemon, result_data
from ..outbound import (ApprovalResult, CancelResult, ErrorFrame, MemoryResult, OutboundFrame,
                        SessionRenamed, SessionResult, SessionsResult)
from ..protocol import (ApprovalFrame, CancelFrame, MemoryFrame, Say, SessionGetFrame,
                        SessionRenameFrame, SessionsFrame, Subscribe)

R = TypeVar("R")
F = TypeVar("F")


class BridgeClosed(msgspec.Struct, frozen=True):
    """The bridge's own event: the connection to the daemon ended (``message``: why)."""

    message: str


BridgeFrame = OutboundFrame | BridgeClosed
"""What ``on_frame`` receives."""

Request = (MemoryFrame | SessionsFrame | SessionGetFrame | SessionRenameFrame | CancelFrame
           | Subscribe | ApprovalFrame)
"""The frames that carry an ``id`` their answer echoes."""

SUBSCRIBE = ["memory", "reflection"]
"""Channels the TUI follows (docs/protocol.md §2 ``subscribe``)."""


def as_client_error(exc: BaseException) -> ClientError:
    """``exc`` as the ClientError the UI shows: itself, the first ClientError inside an
    exception group (trio nurseries wrap what their tasks raise), or ``failed`` with
    the exception's type and text."""
    if isinstance(exc, ClientError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = as_client_error(inner)
            if found.code != "failed":
                return found
    return ClientError("failed", f"{type(exc).__name__}: {exc}")


class BridgeHost(Protocol):
    """What the chat and memory screens need of the application that holds the
    bridge (:class:`runtime.shell.tui.app.AtomicTUI` is one): the bridge itself and the
    action that opens Manage → Memory. The screens type their app as this, so they do
    not import the application that imports them (no import circle)."""

    bridge: DaemonBridge

    def action_memory(self) -> None:
        """Open the memory browser."""


class DaemonBridge:
    """A daemon connection owned by a trio thread, used from asyncio.

    Args:
        state_dir: where ``daemon.json`` is read (ignored when ``url`` and ``token``
            are given).
        on_frame: called in the bridge thread with each frame that is not the answer
            to a request (an :mod:`runtime.shell.outbound` frame, or
            :class:`BridgeClosed`). It must not block; textual's thread-safe
            ``post_message`` fits.
        url, token: connect here instead of reading ``daemon.json``.
        working_dir: sent in ``hello`` (stored when a session is created).
        request_timeout_s: seconds to wait for any answer (ClientError ``timeout``).
    """

    def __init__(self, state_dir: Path | None, on_frame: Callable[[BridgeFrame], None], *,
                 url: str | None = None, token: str | None = None,
                 working_dir: str | None = None, request_timeout_s: float = 30.0) -> None:
        self.state_dir = state_dir
        self.on_frame = on_frame
        self.url, self.token = url, token
        self.working_dir = working_dir
        self.request_timeout_s = request_timeout_s
        self.session: str | None = None
        self._thread: threading.Thread | None = None
        self._trio_token: trio.lowlevel.TrioToken | None = None
        self._ready = threading.Event()
        self._stop: trio.Event | None = None
        self._nursery: trio.Nursery | None = None
        self._client: DaemonClient | None = None
        self._conn_scope: trio.CancelScope | None = None
        self._conn_done: trio.Event | None = None
        self._ids = itertools.count(1)
        self.memory_client = MemoryClient(lambda op: self._call(self._memory, op))
        self._pending: dict[str, trio.MemorySendChannel[OutboundFrame]] = {}
        self._open_lock: trio.Lock | None = None

    # ------------------------------------------------------------ asyncio side

    async def connect(self, session: str | None = None) -> str:
        """Start the bridge thread (once) and connect; returns the session id.
        ClientError: no daemon, refused, bad token, timeout."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="atomic-agent-tui-bridge",
                                            daemon=True)
            self._thread.start()
            await asyncio.to_thread(self._ready.wait, 10.0)
        return str(await self._call(self._open, session))

    async def switch(self, session: str | None) -> str:
        """Close this connection and open one on ``session`` (new when None or
        unknown); returns the session id. ClientError as :meth:`connect`."""
        return str(await self._call(self._open, session))

    async def run(self, request: MemoryOp[R]) -> R:
        """Run one memory op (:mod:`actors.memory.ops`); its typed reply.
        ClientError(code, message) when the daemon refuses it, on timeout, or when not
        connected."""
        return await self.memory_client.run(request)

    async def sessions(self, limit: int = 50) -> list[dict[str, Any]]:
        """Sessions, newest first: dicts with ``id``, ``createdAt``, ``updatedAt`` (Unix
        ms) and ``turns``."""
        reply = await self._call(self._request, SessionsFrame(limit=limit), SessionsResult)
        rows: list[dict[str, Any]] = reply.data
        return rows

    async def rename(self, session: str, title: str) -> str:
        """Give ``session`` a title (``""``: its first line's again); returns the title
        now shown. ClientError ``not_found`` for a session without a turn yet."""
        reply = await self._call(self._request,
                                 SessionRenameFrame(session=session, title=title),
                                 SessionRenamed)
        return str(reply.data["title"])

    async def history(self, session: str, messages: int = 20) -> list[dict[str, Any]]:
        """The last ``messages`` transcript entries of ``session`` (``role``, ``text``,
        ``at``), oldest first; ``[]`` for a session without a turn yet."""
        try:
            reply = await self._call(self._request,
                                     SessionGetFrame(session=session, messages=messages),
                                     SessionResult)
        except ClientError as exc:
            if exc.code == "not_found":
                return []
            raise
        messages_: list[dict[str, Any]] = reply.data["messages"]
        return messages_

    async def say(self, text: str, *, debug: bool = True) -> None:
        """Start a turn; its frames arrive through ``on_frame``. With ``debug`` the
        ``prompt`` steps show the memory the turn was given."""
        await self._call(self._send, Say(text=text, debug=debug))

    async def approve(self, request: str, decision: Decision) -> bool:
        """Answer a tool call's approval request (``approval``); True when it was still
        waiting."""
        reply = await self._call(self._request, ApprovalFrame(request=request,
                                                              decision=decision),
                                 ApprovalResult)
        return bool((reply.data or {}).get("resolved"))

    async def cancel(self) -> bool:
        """Cancel this session's running turn; True when one was running."""
        reply = await self._call(self._request, CancelFrame(), CancelResult)
        return bool((reply.data or {}).get("cancelled"))

    def close(self) -> None:
        """Close the connection and end the thread (bounded, about 3 s at most)."""
        if self._thread is None:
            return
        self._ready.wait(3.0)  # a thread still starting gets its token first
        if self._trio_token is not None:
            try:
                trio.from_thread.run_sync(self._stop_all, trio_token=self._trio_token)
            except trio.RunFinishedError:
                pass
        self._thread.join(timeout=3.0)

    async def _call(self, afn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """Run ``afn(*args)`` as a task in the trio thread; its result, or ClientError.
        Cancelling the caller cancels the task."""
        token = self._trio_token
        if token is None or self._nursery is None:
            raise ClientError("closed", "not connected to the daemon")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        box: dict[str, Any] = {}

        def settle(result: Any = None, error: BaseException | None = None) -> None:
            def apply() -> None:
                if not future.done():
                    if error is not None:
                        future.set_exception(error)
                    else:
                        future.set_result(result)
            try:
                loop.call_soon_threadsafe(apply)
            except RuntimeError:  # the UI's loop is closed: nobody is waiting
                pass

        async def task() -> None:
            try:
                with trio.CancelScope() as scope:
                    box["scope"] = scope
                    if box.get("cancel"):
                        scope.cancel()
                    result = await afn(*args)
                    settle(result)
                if scope.cancelled_caught:
                    settle(error=ClientError("cancelled", "the request was cancelled"))
            except Exception as exc:  # noqa: BLE001 - the UI gets one error type, never a crash
                settle(error=as_client_error(exc))
            finally:  # cancelled from outside (the bridge closing): never leave it waiting
                settle(error=ClientError("closed", "the connection to the daemon is closed"))

        def cancel_task() -> None:
            box["cancel"] = True
            if "scope" in box:
                box["scope"].cancel()

        nursery = self._nursery
        try:
            trio.from_thread.run_sync(nursery.start_soon, task, trio_token=token)
        except (trio.RunFinishedError, RuntimeError):
            raise ClientError("closed", "the connection to the daemon is closed") from None
        try:
            return await future
        except asyncio.CancelledError:
            try:
                trio.from_thread.run_sync(cancel_task, trio_token=token)
            except trio.RunFinishedError:
                pass
            raise

    # --------------------------------------------------------------- trio side

    def _run(self) -> None:
        trio.run(self._main)

    async def _main(self) -> None:
        self._trio_token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        self._open_lock = trio.Lock()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def _stop_all(self) -> None:
        assert self._stop is not None
        self._stop.set()

    async def _open(self, session: str | None) -> str:
        """Connect to ``session``, closing the current connection first; one open at a
        time (two quick ``/session`` commands must not leave two connections). When the
        new one is refused (a bad id, say), the previous session is reopened (best
        effort) and the refusal raised, so a typo does not leave the TUI disconnected;
        if that reopen fails too, ``on_frame`` gets ``bridge.closed``."""
        assert self._open_lock is not None and self._nursery is not None
        async with self._open_lock:
            previous = self.session if self._conn_scope is not None else None
            if self._conn_scope is not None and self._conn_done is not None:
                self._conn_scope.cancel()
                await self._conn_done.wait()
            try:
                return str(await self._nursery.start(self._hold, session))
            except Exception as exc:  # noqa: BLE001 - ClientError, maybe inside a group
                refusal = as_client_error(exc)
                if previous is not None:
                    try:
                        await self._nursery.start(self._hold, previous)
                    except Exception as again:  # noqa: BLE001 - the refusal is the news
                        self.session = None
                        self.on_frame(BridgeClosed(f"{refusal}; reopening {previous} failed "
                                                   f"too: {as_client_error(again)}"))
                raise refusal from None

    async def _hold(self, session: str | None, task_status: Any = trio.TASK_STATUS_IGNORED
                    ) -> None:
        """Own one connection until cancelled or closed by the daemon."""
        done = self._conn_done = trio.Event()
        scope = self._conn_scope = trio.CancelScope()
        reason = "closed by the TUI"
        started = False
        try:
            with scope:
                async with open_daemon(self.state_dir, url=self.url, token=self.token,
                                       session=session, working_dir=self.working_dir,
                                       client="tui") as c:  # its edits are the TUI's
                    self._client = c
                    lost: list[str] = []
                    async with trio.open_nursery() as inner:
                        inner.start_soon(self._reader, c, inner.cancel_scope, lost)
                        await self._request(Subscribe(channels=SUBSCRIBE))
                        self.session = c.session
                        task_status.started(c.session)
                        started = True
                        await trio.sleep_forever()
                    reason = lost[0] if lost else reason
                    if not started:  # the connection dropped while subscribing
                        raise ClientError("closed", reason)
        except Exception as exc:
            if not started:
                raise
            reason = f"the connection failed: {type(exc).__name__}: {exc}"
        finally:
            self._client = None
            for ch in list(self._pending.values()):
                ch.close()
            done.set()
            if self._conn_scope is scope:
                self._conn_scope = None
        if reason != "closed by the TUI":
            self.on_frame(BridgeClosed(reason))

    async def _reader(self, c: DaemonClient, scope: trio.CancelScope, lost: list[str]) -> None:
        """The only task that reads: route answers to waiters, the rest to on_frame."""
        try:
            while True:
                frame = await c.receive()
                rid = getattr(frame, "id", None)
                if isinstance(rid, str) and rid in self._pending:
                    self._pending.pop(rid).send_nowait(frame)
                else:
                    self.on_frame(frame)
        except Exception as exc:  # noqa: BLE001 - ClientError("closed"), or an undecodable frame
            lost.append(str(as_client_error(exc)))
            scope.cancel()

    def _require(self) -> DaemonClient:
        if self._client is None:
            raise ClientError("closed", "not connected to the daemon")
        return self._client

    async def _send(self, frame: Say) -> None:
        await self._require().send(frame)

    async def _await_answer(self, recv: trio.MemoryReceiveChannel[OutboundFrame],
                            what: str) -> OutboundFrame:
        try:
            with trio.fail_after(self.request_timeout_s):
                return await recv.receive()
        except trio.TooSlowError:
            raise ClientError("timeout", f"the daemon did not answer {what} within "
                                         f"{self.request_timeout_s:g} s") from None
        except trio.EndOfChannel:
            raise ClientError("closed", "the connection to the daemon closed") from None

    async def _memory(self, request: MemoryOp[Any]) -> Any:
        answer = await self._request(MemoryFrame(op=request.name, args=args_of(request)),
                                     MemoryResult, request.name)
        return result_data(answer)

    async def _request(self, frame: Request, reply: type[F] | None = None,
                       what: str | None = None) -> F:
        """Send ``frame`` with a fresh ``id`` and return the frame that answers it, of
        type ``reply`` (an ``error`` frame: ClientError). ``what`` names it in a timeout
        message (default: the frame's type)."""
        c = self._require()
        rid = f"tui-{next(self._ids)}"
        send, recv = trio.open_memory_channel[OutboundFrame](1)
        self._pending[rid] = send
        try:
            await c.send(msgspec.structs.replace(frame, id=rid))
            answer = await self._await_answer(recv, what or str(type(frame).__struct_config__.tag))
        finally:
            self._pending.pop(rid, None)
        if isinstance(answer, ErrorFrame):
            raise ClientError(answer.code or "failed", answer.message)
        if reply is not None and not isinstance(answer, reply):
            raise ClientError("failed", f"unexpected answer {type(answer).__name__}")
        return answer  # type: ignore[return-value]  # (checked against reply above)
