"""A websocket client of the daemon, used by the CLI and the tests.

``open_client`` finds the running daemon through ``<state>/daemon.json``, connects,
sends ``hello`` with the token and yields a :class:`DaemonClient`. Errors are
:class:`ClientError` with a one-line message the CLI prints as is.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import trio
from trio_websocket import ConnectionClosed, HandshakeError, WebSocketConnection, open_websocket_url

from actors.memory.client import MemoryClient
from actors.memory.ops import MemoryOp, args_of

from .state import read_daemon_info

R = TypeVar("R")


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


def encode_frame(frame: dict[str, Any]) -> str:
    """``frame`` as JSON text. ClientError ``invalid_argument`` when a string in it is
    not valid UTF-8 (a lone surrogate: undecodable bytes from ``argv`` or stdin): the
    daemon would refuse the frame without its ``id``, so a caller waiting for the
    answer would wait forever."""
    text = json.dumps(frame, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ClientError("invalid_argument", "text that is not valid UTF-8 (undecodable "
                                              "bytes) cannot be sent") from None
    return text


def memory_result_data(frame: dict[str, Any]) -> Any:
    """The ``data`` of the answer to a ``memory`` frame (a ``memory.result``, or an
    ``error`` frame echoing its id); ClientError(code, message) when it failed."""
    if frame.get("type") == "error":
        raise ClientError(frame["code"], frame["message"])
    if not frame.get("ok"):
        raise ClientError(frame["error"]["code"], frame["error"]["message"])
    return frame["data"]


class DaemonClient:
    """An authenticated connection. ``session`` is the session id from ``welcome``;
    ``created`` is true when that session has no turn yet (new, or a mistyped id)."""

    def __init__(self, ws: WebSocketConnection, session: str, created: bool = False) -> None:
        self.ws = ws
        self.session = session
        self.created = created  # the session did not exist (no turn yet) at hello
        self._ids = itertools.count(1)
        self.backlog: list[dict] = []
        self.memory_client = MemoryClient(lambda op: self.memory(op.name, args_of(op)))

    async def send(self, frame: dict[str, Any]) -> None:
        """Send one frame as JSON text. ClientError: see :func:`encode_frame`; code
        ``closed`` when the daemon has closed the connection (stopped or restarted)."""
        text = encode_frame(frame)
        try:
            await self.ws.send_message(text)
        except ConnectionClosed as exc:
            raise NotSent("closed", closed_text(exc.reason)) from None

    async def receive(self) -> dict[str, Any]:
        """Next frame from the daemon (ClientError when the connection closes)."""
        if self.backlog:
            return self.backlog.pop(0)
        try:
            return json.loads(await self.ws.get_message())
        except ConnectionClosed as exc:
            raise ClientError("closed", closed_text(exc.reason)) from None

    async def wait_for(self, pred: Callable[[dict], bool]) -> dict[str, Any]:
        """Receive until a frame matches; non-matching frames are kept for later."""
        skipped: list[dict] = []
        try:
            while True:
                frame = await self.receive()
                if pred(frame):
                    return frame
                skipped.append(frame)
        finally:
            self.backlog = skipped + self.backlog

    async def say(self, text: str, *, debug: bool = False,
                  recalled: list[int] | None = None) -> AsyncIterator[dict[str, Any]]:
        """Start a turn and yield its frames up to and including ``turn.finished``.
        An ``error`` frame (e.g. ``busy``) is yielded and ends the iteration.
        ``recalled``: the note ids ``### recalled`` shows instead of recall's hits."""
        frame: dict[str, Any] = {"type": "say", "text": text, "debug": debug}
        if recalled is not None:
            frame["recalled"] = recalled
        await self.send(frame)
        while True:
            frame = await self.receive()
            yield frame
            if frame.get("type") in ("turn.finished", "error"):
                return

    async def run(self, request: MemoryOp[R]) -> R:
        """Run one memory op (:mod:`actors.memory.ops`) through the daemon; its typed
        reply, or ClientError(code, message)."""
        return await self.memory_client.run(request)

    async def memory(self, op: str, args: dict[str, Any] | None = None) -> Any:
        """Send a ``memory`` frame as is (op name and JSON arguments: the wire, for a
        caller that forwards them); its ``data`` as JSON, or ClientError(code,
        message). Typed callers use :meth:`run`."""
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


def daemon_endpoint(state_dir: Path) -> tuple[str, str]:
    """(url, token) of the daemon running on ``state_dir``; ClientError if none."""
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
async def open_client(state_dir: Path | None = None, *, url: str | None = None,
                      token: str | None = None, session: str | None = None,
                      working_dir: str | None = None, client: str | None = None,
                      connect_timeout_s: float = 10.0) -> AsyncIterator[DaemonClient]:
    """Connect and authenticate; yields a DaemonClient. Either ``state_dir`` or
    ``url`` + ``token``; ``client``: the program's name for the activity log (``cli``,
    ``tui``, ``mcp:<name>``). Errors: ClientError (not running, refused, bad token)."""
    if url is None or token is None:
        assert state_dir is not None
        url, token = daemon_endpoint(state_dir)
    hello = encode_frame({"type": "hello", "token": token, "session": session,
                          "workingDir": working_dir, "client": client})
    connected = False
    try:
        async with open_websocket_url(url, connect_timeout=connect_timeout_s,
                                      disconnect_timeout=2, max_message_size=64 * 1024 * 1024) as ws:
            await ws.send_message(hello)
            with trio.fail_after(connect_timeout_s + 20):
                try:
                    welcome = json.loads(await ws.get_message())
                except ConnectionClosed as exc:
                    raise ClientError("closed", f"connection closed during hello ({exc.reason})") from None
            if welcome.get("type") != "welcome":
                raise ClientError(welcome.get("code", "refused"), welcome.get("message", "refused"))
            connected = True
            yield DaemonClient(ws, welcome["session"], bool(welcome.get("created")))
    except (OSError, HandshakeError, trio.TooSlowError) as exc:
        if connected:
            if isinstance(exc, OSError):
                return  # the daemon went away while we were closing (e.g. after `stop`)
            raise  # the caller's own deadline, not a connection failure
        raise ClientError("connect_failed", f"cannot connect to the daemon at {url}: {exc}") from None
