"""The daemon's websocket clients.

Both find the running daemon through ``<state>/daemon.json``, connect, send ``hello``
with the token (:func:`connect`, the handshake they share) and yield a connection:

* :func:`open_daemon` → :class:`DaemonClient`, what the project's own programs use (the
  CLI, the TUI, the MCP server): typed frames only. It sends :mod:`.protocol`'s Structs,
  reads every frame the daemon sends as :mod:`.outbound`'s (``decode_outbound``), and runs
  memory ops as :mod:`actors.memory.ops` requests with typed replies.
* :func:`open_client` → :class:`WireClient`, for scripts, benchmarks and tests that speak
  the protocol as JSON objects, the way docs/protocol.md writes it (any frame, a
  malformed one included; frames read exactly as the daemon sent them).

Errors are :class:`ClientError` with a one-line message the CLI prints as is.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec
import structlog
import trio
from trio_websocket import ConnectionClosed, HandshakeError, WebSocketConnection, open_websocket_url

from actors.agent.messages import TurnFinished
from actors.memory.client import MemoryClient
from actors.memory.ops import MemoryOp, args_of

from .outbound import ErrorFrame, MemoryResult, OutboundFrame, Welcome, decode_outbound
from .protocol import ClientFrame, Hello, MemoryFrame, Say
from .state import read_daemon_info

R = TypeVar("R")
F = TypeVar("F")
T = TypeVar("T")
log = structlog.get_logger()


class ClientError(Exception):
    """A client-side failure; ``code`` is machine-readable, ``str()`` is one line."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def closed_text(reason: Any) -> str:
    """One line for a connection the daemon closed: a normal close (code 1000/1001) is
    the daemon stopping or restarting; any other code is named with its reason."""
    code = getattr(reason, "code", None)
    if code in (None, 1000, 1001):
        return ("the daemon closed the connection: it stopped or is restarting (start it "
                "with: atomic-agent serve)")
    why = getattr(reason, "reason", None) or getattr(reason, "name", "")
    return f"the daemon closed the connection (code {code}: {why})"


class NotSent(ClientError):
    """The connection was closed before the frame could be sent: the daemon never saw
    it, so sending it again on a new connection is safe."""


_encoder = msgspec.json.Encoder()


def encode_frame(frame: ClientFrame | dict[str, Any]) -> str:
    """``frame`` (a :mod:`.protocol` Struct, or a JSON object as a third-party client
    writes it) as JSON text. ClientError ``invalid_argument`` when a string in it is not
    valid UTF-8 (a lone surrogate: undecodable bytes from ``argv`` or stdin): the daemon
    would refuse the frame without its ``id``, so a caller waiting for the answer would
    wait forever."""
    try:
        return _encoder.encode(frame).decode("utf-8")
    except (UnicodeEncodeError, msgspec.EncodeError):
        raise ClientError("invalid_argument", "text that is not valid UTF-8 (undecodable "
                                              "bytes) cannot be sent") from None


def result_data(frame: MemoryResult | ErrorFrame) -> Any:
    """The ``data`` of the answer to a ``memory`` frame (a ``memory.result``, or an
    ``error`` frame echoing its id); ClientError(code, message) when it failed."""
    if isinstance(frame, ErrorFrame):
        raise ClientError(frame.code, frame.message)
    if not frame.ok or isinstance(frame.data, msgspec.UnsetType):
        error = frame.error if isinstance(frame.error, dict) else {}
        raise ClientError(error.get("code", "failed"), error.get("message", "failed"))
    return frame.data


def answers(rid: str) -> Callable[[OutboundFrame], bool]:
    """A predicate: the frame answers the request with id ``rid``."""
    return lambda f: isinstance(f, (MemoryResult, ErrorFrame)) and f.id == rid


class _Connection(Generic[T]):
    """What both clients share: the websocket, the session, and reading frames of type
    ``T`` with a backlog (frames :meth:`wait_for` passed over, kept in order). ``decode``
    turns one message into a frame, or None for one to skip."""

    def __init__(self, ws: WebSocketConnection, session: str, created: bool,
                 decode: Callable[[str], T | None]) -> None:
        self._decode = decode
        self.ws = ws
        self.session = session
        self.created = created  # the session did not exist (no turn yet) at hello
        self._ids = itertools.count(1)
        self.backlog: list[T] = []

    async def _send_text(self, text: str) -> None:
        try:
            await self.ws.send_message(text)
        except ConnectionClosed as exc:
            raise NotSent("closed", closed_text(exc.reason)) from None

    async def _text(self) -> str:
        try:
            text = await self.ws.get_message()
        except ConnectionClosed as exc:
            raise ClientError("closed", closed_text(exc.reason)) from None
        return text if isinstance(text, str) else text.decode("utf-8", "replace")

    async def receive(self) -> T:
        """The next frame from the daemon (ClientError when the connection closes)."""
        if self.backlog:
            return self.backlog.pop(0)
        while (frame := self._decode(await self._text())) is None:
            pass
        return frame

    async def wait_for(self, pred: Callable[[T], bool]) -> T:
        """Receive until a frame matches; non-matching frames are kept for later."""
        skipped: list[T] = []
        try:
            while True:
                frame = await self.receive()
                if pred(frame):
                    return frame
                skipped.append(frame)
        finally:
            self.backlog = skipped + self.backlog


def _outbound(text: str) -> OutboundFrame | None:
    """One daemon frame as its Struct; None (logged at debug level) for a frame this
    version does not know (a newer daemon's)."""
    try:
        return decode_outbound(text)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        log.debug("client.frame_skipped", error=str(exc)[:200])
        return None


class DaemonClient(_Connection[OutboundFrame]):
    """An authenticated connection. ``session`` is the session id from ``welcome``;
    ``created`` is true when that session has no turn yet (new, or a mistyped id).
    Frames the daemon sends that this version does not know (a newer daemon's) are
    skipped, logged at debug level."""

    def __init__(self, ws: WebSocketConnection, session: str, created: bool = False) -> None:
        super().__init__(ws, session, created, _outbound)
        self.memory_client = MemoryClient(self._memory)

    async def send(self, frame: ClientFrame) -> None:
        """Send one frame. ClientError: see :func:`encode_frame`; :class:`NotSent`
        (code ``closed``) when the daemon has closed the connection (stopped or
        restarted)."""
        await self._send_text(encode_frame(frame))

    async def say(self, text: str, *, debug: bool = False,
                  recalled: list[int] | None = None) -> AsyncIterator[OutboundFrame]:
        """Start a turn and yield its frames (and any other frame that arrives
        meanwhile) up to and including ``turn.finished``. An ``error`` frame of the turn
        (e.g. ``busy``; one without an ``id``) is yielded and ends the iteration (an
        error answering a frame sent meanwhile, which has its ``id``, does not).
        ``recalled``: the note ids ``### recalled`` shows instead of recall's hits."""
        await self.send(Say(text=text, debug=debug, recalled=recalled))
        while True:
            frame = await self.receive()
            yield frame
            if isinstance(frame, TurnFinished) or (isinstance(frame, ErrorFrame)
                                                    and frame.id is None):
                return

    async def request(self, frame: ClientFrame, reply: type[F]) -> F:
        """Send ``frame`` and wait for the first frame of type ``reply``; ClientError
        for an ``error`` frame."""
        await self.send(frame)
        answer = await self.wait_for(lambda f: isinstance(f, (reply, ErrorFrame)))
        if isinstance(answer, ErrorFrame):
            raise ClientError(answer.code, answer.message)
        return answer  # type: ignore[return-value]  # (isinstance above: a reply)

    async def run(self, request: MemoryOp[R]) -> R:
        """Run one memory op (:mod:`actors.memory.ops`) through the daemon; its typed
        reply, or ClientError(code, message)."""
        return await self.memory_client.run(request)

    async def _memory(self, request: MemoryOp[Any]) -> Any:
        rid = f"m{next(self._ids)}"
        await self.send(MemoryFrame(id=rid, op=request.name, args=args_of(request)))
        answer = await self.wait_for(answers(rid))
        assert isinstance(answer, (MemoryResult, ErrorFrame))  # (answers() holds only those)
        return result_data(answer)


def daemon_endpoint(state_dir: str | os.PathLike[str]) -> tuple[str, str]:
    """(url, token) of the daemon running on ``state_dir``; ClientError if none."""
    state_dir = Path(state_dir)
    info = read_daemon_info(state_dir)
    if info is None:
        raise ClientError("not_running",
                          f"no atomic-agent daemon is running for {state_dir}; "
                          f"start one with: atomic-agent serve --state-dir {state_dir}")
    try:
        token = Path(info["tokenFile"]).read_text().strip()
    except OSError as exc:
        raise ClientError("no_token", f"cannot read the token file: {exc.strerror}") from None
    return info["url"], token


@asynccontextmanager
async def connect(state_dir: str | os.PathLike[str] | None = None, *, url: str | None = None,
                  token: str | None = None, session: str | None = None,
                  working_dir: str | None = None, client: str | None = None,
                  connect_timeout_s: float = 10.0
                  ) -> AsyncIterator[tuple[WebSocketConnection, Welcome]]:
    """Connect and authenticate: yields the websocket and the daemon's ``welcome``.
    Either ``state_dir`` (a path or a string) or ``url`` + ``token``; ``client``: the
    program's name for the activity log (``cli``, ``tui``, ``mcp:<name>``). Errors:
    ClientError (not running, refused, bad token); ValueError with neither."""
    if url is None or token is None:
        if state_dir is None:
            raise ValueError("connect needs the daemon's state_dir, or its url and token")
        url, token = daemon_endpoint(state_dir)
    hello = encode_frame(Hello(token=token, session=session, working_dir=working_dir,
                               client=client))
    connected = False
    try:
        async with open_websocket_url(url, connect_timeout=connect_timeout_s,
                                      disconnect_timeout=2, max_message_size=64 * 1024 * 1024) as ws:
            await ws.send_message(hello)
            with trio.fail_after(connect_timeout_s + 20):
                try:
                    first = await ws.get_message()
                except ConnectionClosed as exc:
                    raise ClientError("closed", f"connection closed during hello ({exc.reason})") from None
            try:
                welcome = decode_outbound(first)
            except (msgspec.DecodeError, msgspec.ValidationError):
                raise ClientError("refused", f"not a daemon's answer: {first[:200]!r}") from None
            if isinstance(welcome, ErrorFrame):
                raise ClientError(welcome.code, welcome.message)
            if not isinstance(welcome, Welcome):
                raise ClientError("refused", f"the daemon answered hello with {welcome!r}")
            connected = True
            yield ws, welcome
    except (OSError, HandshakeError, trio.TooSlowError) as exc:
        if connected:
            if isinstance(exc, OSError):
                return  # the daemon went away while we were closing (e.g. after `stop`)
            raise  # the caller's own deadline, not a connection failure
        raise ClientError("connect_failed", f"cannot connect to the daemon at {url}: {exc}") from None


@asynccontextmanager
async def open_daemon(state_dir: str | os.PathLike[str] | None = None, *,
                      url: str | None = None,
                      token: str | None = None, session: str | None = None,
                      working_dir: str | None = None, client: str | None = None,
                      connect_timeout_s: float = 10.0) -> AsyncIterator[DaemonClient]:
    """:func:`connect`, then a :class:`DaemonClient` (typed frames) on the connection."""
    async with connect(state_dir, url=url, token=token, session=session,
                       working_dir=working_dir, client=client,
                       connect_timeout_s=connect_timeout_s) as (ws, welcome):
        yield DaemonClient(ws, welcome.session, welcome.created)


def memory_result_data(frame: dict[str, Any]) -> Any:
    """The ``data`` of the answer to a ``memory`` frame as a JSON object (a
    ``memory.result``, or an ``error`` frame echoing its id); ClientError(code, message)
    when it failed."""
    if frame.get("type") == "error":
        raise ClientError(frame["code"], frame["message"])
    if not frame.get("ok"):
        raise ClientError(frame["error"]["code"], frame["error"]["message"])
    return frame["data"]


class WireClient(_Connection[dict[str, Any]]):
    """An authenticated connection that sends and reads JSON objects (module docstring).
    ``session`` and ``created`` as :class:`DaemonClient`'s."""

    def __init__(self, ws: WebSocketConnection, session: str, created: bool = False) -> None:
        super().__init__(ws, session, created, json.loads)

    async def send(self, frame: dict[str, Any]) -> None:
        """Send one frame as JSON text. ClientError: see :func:`encode_frame`;
        :class:`NotSent` when the daemon has closed the connection."""
        await self._send_text(encode_frame(frame))

    async def say(self, text: str, *, debug: bool = False,
                  recalled: list[int] | None = None) -> AsyncIterator[dict[str, Any]]:
        """Start a turn and yield its frames up to and including ``turn.finished``. An
        ``error`` frame of the turn (e.g. ``busy``; one without an ``id``) is yielded and
        ends the iteration. ``recalled``: the note ids ``### recalled`` shows instead of
        recall's hits."""
        frame: dict[str, Any] = {"type": "say", "text": text, "debug": debug}
        if recalled is not None:
            frame["recalled"] = recalled
        await self.send(frame)
        while True:
            frame = await self.receive()
            yield frame
            if frame.get("type") == "turn.finished" or (
                    frame.get("type") == "error" and frame.get("id") is None):
                return

    async def memory(self, op: str, args: dict[str, Any] | None = None) -> Any:
        """Run a memory op by name; its ``data`` as JSON, or ClientError(code, message)."""
        rid = f"m{next(self._ids)}"
        await self.send({"type": "memory", "id": rid, "op": op, "args": args or {}})
        return memory_result_data(await self.wait_for(lambda f: f.get("id") == rid))

    async def request(self, frame: dict[str, Any], reply_type: str) -> dict[str, Any]:
        """Send a frame and wait for the first frame of ``reply_type`` (or error)."""
        await self.send(frame)
        reply = await self.wait_for(lambda f: f.get("type") in (reply_type, "error"))
        if reply["type"] == "error":
            raise ClientError(reply["code"], reply["message"])
        return reply


@asynccontextmanager
async def open_client(state_dir: str | os.PathLike[str] | None = None, *,
                      url: str | None = None,
                      token: str | None = None, session: str | None = None,
                      working_dir: str | None = None, client: str | None = None,
                      connect_timeout_s: float = 10.0) -> AsyncIterator[WireClient]:
    """:func:`connect`, then a :class:`WireClient` (JSON objects) on the connection."""
    async with connect(state_dir, url=url, token=token, session=session,
                       working_dir=working_dir, client=client,
                       connect_timeout_s=connect_timeout_s) as (ws, welcome):
        yield WireClient(ws, welcome.session, welcome.created)
