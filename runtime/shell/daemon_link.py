"""One shared connection to the running daemon for a long-lived client process.

The MCP server (:mod:`runtime.shell.mcp_server`) answers tool calls from many tasks, but a
websocket connection (:func:`runtime.shell.client.open_daemon`) lives inside one task's
context manager. :class:`DaemonLink` owns that connection in its own task
(:meth:`DaemonLink.run`, started in the caller's nursery) and serves requests sent to
it over a memory channel, one at a time. The connection is opened on the first request
(so a client started before the daemon works once the daemon is up) and opened again
after it breaks; a request that finds no daemon fails with ``ClientError`` code
``not_running`` and the daemon's hint, never a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar, cast

import trio

from actors.memory.ops import MemoryOp

from .client import ClientError, DaemonClient, NotSent, daemon_endpoint, open_daemon

R = TypeVar("R")

REQUEST_TIMEOUT_S = 60.0
"""Bound on one request (connect included); memory ops answer in milliseconds."""


class _Request:
    """One memory op waiting for its reply (``data``) or ``error``."""

    def __init__(self, request: MemoryOp[Any]) -> None:
        self.request = request
        self.done = trio.Event()
        self.data: Any = None
        self.error: ClientError | None = None
        self.tries = 0

    def answer(self, data: Any = None, error: ClientError | None = None) -> None:
        if not self.done.is_set():
            self.data, self.error = data, error
            self.done.set()


class DaemonLink:
    """Serialised memory ops over one (re-opened when broken) daemon connection.

    Args:
        state_dir: the daemon's state directory (``daemon.json`` names its url and
            token file).
        session: the session id the connection opens (created on first use). One fixed
            id per client program keeps it from adding a session per start.
    """

    def __init__(self, state_dir: Path, session: str | None = None, *,
                 token: str | None = None, client: str | None = None) -> None:
        self.state_dir = state_dir
        self.session = session
        self.token = token  # a client token (runtime/shell/clients.py); None: the daemon's
        self.client = client  # the name the activity log shows; set before the first op
        self._send, self._recv = trio.open_memory_channel[_Request](0)
        self._current: _Request | None = None  # the request on the wire now

    async def run_op(self, request: MemoryOp[R]) -> R:
        """Run one memory op (:mod:`actors.memory.ops`) in the daemon; its typed reply.

        Raises:
            ClientError: the daemon's error (``code`` e.g. ``invalid_argument``,
                ``not_found``), or ``not_running`` / ``connect_failed`` / ``closed`` /
                ``timeout`` when the daemon cannot be reached or stops answering.
        """
        req = _Request(request)
        with trio.move_on_after(REQUEST_TIMEOUT_S):
            await self._send.send(req)
            await req.done.wait()
        if not req.done.is_set():
            raise ClientError("timeout", f"the daemon did not answer {request.name} within "
                                         f"{REQUEST_TIMEOUT_S:.0f} s")
        if req.error is not None:
            raise req.error
        return cast(R, req.data)

    async def run(self) -> None:
        """Serve requests until cancelled (run it in a nursery)."""
        async with self._recv:
            pending: _Request | None = None
            while True:
                req = pending or await self._recv.receive()
                pending = None
                req.tries += 1
                if req.tries > 2:
                    req.answer(error=ClientError("closed", "the daemon keeps closing the "
                                                           "connection"))
                    continue
                self._current = req
                try:
                    url = token = None
                    if self.token is not None:
                        url, token = daemon_endpoint(self.state_dir)[0], self.token
                    async with open_daemon(self.state_dir, url=url, token=token,
                                           session=self.session,
                                           client=self.client) as client:
                        pending = await self._serve(client, req)
                except ClientError as exc:
                    self._current.answer(error=exc)
                except (OSError, trio.BrokenResourceError) as exc:
                    self._current.answer(error=ClientError(
                        "closed", f"the daemon connection broke: {exc}"))

    async def _serve(self, client: DaemonClient, first: _Request) -> _Request | None:
        """Answer requests on ``client`` until the connection breaks; returns the
        request that was being sent when it broke before the daemon saw it (None when
        that request was answered)."""
        req = first
        while True:
            try:
                req.answer(data=await client.run(req.request))
            except NotSent:
                return req  # the send failed (closed while idle): not seen, send again
            except ClientError as exc:
                if exc.code == "closed":
                    req.answer(error=ClientError(
                        "closed", "the daemon closed the connection (stopped or restarting); "
                                  "the next call reconnects"))
                    return None
                req.answer(error=exc)
            req = await self._recv.receive()
            self._current = req
