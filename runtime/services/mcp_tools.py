"""The user's MCP servers, as a client: connect, list their tools, call one
(docs/tools.md).

A server is configured under ``tools.mcpServers.<name>`` (:class:`McpServerConfig`): a
local program spoken to over stdio, or a streamable HTTP server. :func:`open_server`
connects with the official ``mcp`` SDK (https://modelcontextprotocol.io/docs/sdk) and
gives a :class:`ServerLink`; every failure — a program that does not start, exits or
hangs, a URL that does not answer, a server that answers nonsense — is a
:class:`ToolServerError` with one line that says which server and what happened, never
a traceback: the SDK's own log records (``logging``, tracebacks included) go to the
server's log file (:func:`route_sdk_logs`), not to the terminal. A program is spoken to
through :func:`stdio_transport`, whose stop (stdin closed, SIGTERM, SIGKILL, reaped)
fits in the daemon's stop even when the program never finished starting.

Each tool is a :class:`ToolSpec` named ``<server>.<tool>`` (two servers offering a tool of
the same name never shadow each other) and carries its **pin**: a hash of its server,
name, description and input schema (:func:`pin_of`). An approval is bound to the pin,
so a tool whose description or schema changes after it was approved asks again
(the "rug pull" of https://invariantlabs.ai/blog/mcp-security-notification-tool-poisoning-attacks).
Annotations such as ``readOnlyHint`` are the server's say-so, kept for display and as a
default the user can override, never as a security boundary (MCP specification,
"Tools": https://modelcontextprotocol.io/specification/2025-11-25/server/tools).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import structlog
import trio

from runtime.kernel.actor import first_line, leaf_exception

from .config import McpServerConfig
from .tool_spec import ToolSpec, pin_of

if TYPE_CHECKING:  # (the SDK is imported when a server is opened, not with this module)
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
    from mcp.shared.message import SessionMessage

    _Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception],
                     MemoryObjectSendStream[SessionMessage]]
    """What :func:`stdio_transport` yields: from the program, to it."""

# (ToolSpec and pin_of re-exported from .tool_spec)
__all__ = ["STOP_GRACE_S", "ServerLink", "ToolServerError", "ToolSpec", "open_server",
           "pin_of", "route_sdk_logs", "server_log_path", "stdio_transport"]

_log = structlog.get_logger()


class ToolServerError(Exception):
    """An MCP server could not be reached, started, listed or called: one line naming
    the server."""


def server_log_path(state_dir: Path, name: str) -> Path:
    """Where a stdio server's stderr goes, and the SDK's log records about any server's
    link: ``<state>/logs/mcp-<name>.log``."""
    return state_dir / "logs" / f"mcp-{name}.log"


@dataclass
class ServerLink:
    """An open session with one MCP server (:func:`open_server`)."""

    name: str
    cfg: McpServerConfig
    session: Any  # mcp.ClientSession

    async def list_tools(self) -> list[ToolSpec]:
        """Every tool the server offers (all pages), pinned. ToolServerError on a failure
        or a server that takes longer than ``timeoutMs``."""
        tools: list[Any] = []
        cursor: str | None = None
        try:
            with trio.fail_after(self.cfg.timeout_ms / 1000):
                while True:
                    from mcp import types

                    params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                    page = await self.session.list_tools(params=params)
                    tools += page.tools
                    cursor = page.next_cursor
                    if not cursor:
                        break
        except trio.TooSlowError:
            raise ToolServerError(f"MCP server {self.name!r} did not list its tools within "
                                  f"{self.cfg.timeout_ms} ms") from None
        except Exception as exc:  # the SDK's McpError, a closed stream, bad JSON ...
            raise ToolServerError(f"MCP server {self.name!r} could not list its tools: "
                                  f"{first_line(exc)}") from None
        out = []
        for t in tools:
            schema = t.input_schema if isinstance(t.input_schema, dict) else {}
            notes = t.annotations
            read_only = bool(notes and notes.read_only_hint)
            destructive = (not read_only) if notes is None or notes.destructive_hint is None \
                else bool(notes.destructive_hint)
            description = t.description or ""
            out.append(ToolSpec(server=self.name, name=t.name, description=description,
                                input_schema=schema, read_only=read_only,
                                destructive=destructive,
                                pin=pin_of(self.name, t.name, description, schema)))
        return out


async def _stdio(name: str, cfg: McpServerConfig, state_dir: Path, errlog: TextIO,
                 stack: contextlib.AsyncExitStack, refused: list[str]) -> Any:
    from mcp.client.stdio import get_default_environment

    assert cfg.command is not None
    cwd = None
    if cfg.cwd:
        cwd = Path(cfg.cwd).expanduser()
        cwd = cwd if cwd.is_absolute() else state_dir / cwd
        if not cwd.is_dir():
            raise ToolServerError(f"MCP server {name!r}: its working directory {str(cwd)!r} "
                                  "does not exist")
    return await stack.enter_async_context(stdio_transport(
        [cfg.command, *cfg.args], env={**get_default_environment(), **cfg.env}, cwd=cwd,
        errlog=errlog))


async def _http(name: str, cfg: McpServerConfig, state_dir: Path, errlog: TextIO,
                stack: contextlib.AsyncExitStack, refused: list[str]) -> Any:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    assert cfg.url is not None
    headers = dict(cfg.headers)
    if cfg.token_file:
        path = Path(cfg.token_file).expanduser()
        path = path if path.is_absolute() else state_dir / path
        try:
            token = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ToolServerError(f"MCP server {name!r}: cannot read its tokenFile "
                                  f"{str(path)!r} ({exc.strerror or exc})") from None
        headers["Authorization"] = f"Bearer {token}"
    client = await stack.enter_async_context(create_mcp_http_client(headers=headers))

    async def note_refusal(response: Any) -> None:
        """``refused`` holds "HTTP 401 Unauthorized" while the last answer was one
        (the SDK's error says only "Server returned an error response")."""
        refused[:] = [f"HTTP {response.status_code} {response.reason_phrase}".strip()] \
            if response.status_code in _REFUSALS else []

    client.event_hooks["response"].append(note_refusal)
    return await stack.enter_async_context(streamable_http_client(cfg.url, http_client=client))


_REFUSALS = (401, 403)
"""HTTP statuses that say the server refused us (a missing or wrong token)."""


@contextlib.asynccontextmanager
async def open_server(name: str, cfg: McpServerConfig, state_dir: Path
                      ) -> AsyncIterator[ServerLink]:
    """Connect to server ``name`` (start its program, or reach its URL), initialise the
    session and yield a :class:`ServerLink`; on exit the session ends and a started
    program is stopped and reaped within about 0.4 s, cancelled or not
    (:func:`stdio_transport`: stdin closed, then SIGTERM, then SIGKILL). A stdio server's
    stderr is appended to :func:`server_log_path`, and so are the mcp SDK's own log
    records about this link, tracebacks included (:func:`route_sdk_logs`): none reaches
    the terminal.

    Raises ToolServerError (one line) when it cannot start, answer or initialise within
    ``timeoutMs``, when an HTTP server refuses it (401, 403), or when the link breaks
    (the program exits, the connection drops); an error of the body comes out as
    itself, not inside an exception group."""
    route_sdk_logs()
    started = False
    refused: list[str] = []  # "HTTP 401 Unauthorized" while the server's last answer was
    try:
        async with contextlib.AsyncExitStack() as stack:
            log_path = server_log_path(state_dir, name)
            log_path.parent.mkdir(parents=True, exist_ok=True)
            errlog: TextIO = stack.enter_context(open(log_path, "a", encoding="utf-8"))
            stack.callback(_SERVER_LOG.reset, _SERVER_LOG.set(errlog))  # after the link
            link = await _connect(name, cfg, state_dir, errlog, stack, refused)
            started = True
            yield link
    except BaseException as exc:  # noqa: BLE001 - sorted below, nothing swallowed
        inner = leaf_exception(exc)
        if isinstance(inner, trio.Cancelled) or not isinstance(inner, Exception):
            raise
        if isinstance(inner, ToolServerError) or (started and not _link_failure(inner)):
            raise inner from None
        if refused:
            raise ToolServerError(f"MCP server {name!r} refused the connection: {refused[0]} "
                                  "(check its headers or tokenFile)") from None
        what = "broke" if started else "could not start"
        raise ToolServerError(f"MCP server {name!r} {what}: {first_line(inner)}"
                              f"{_where(name, cfg, state_dir)}") from None


async def _connect(name: str, cfg: McpServerConfig, state_dir: Path, errlog: TextIO,
                   stack: contextlib.AsyncExitStack, refused: list[str]) -> ServerLink:
    from mcp import ClientSession

    # (the transports open task groups: a deadline scope may wrap only awaits that
    # return inside it, hence none around entering them)
    opener = _stdio if cfg.command is not None else _http
    streams = await opener(name, cfg, state_dir, errlog, stack, refused)
    session = await stack.enter_async_context(
        ClientSession(streams[0], streams[1], read_timeout_seconds=cfg.timeout_ms / 1000))
    try:
        with trio.fail_after(cfg.timeout_ms / 1000):
            await session.initialize()
    except trio.TooSlowError:
        raise ToolServerError(f"MCP server {name!r} did not answer within {cfg.timeout_ms} ms"
                              f"{_where(name, cfg, state_dir)}") from None
    return ServerLink(name, cfg, session)


def _link_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is the link failing (the transport, the SDK, the network), not a
    bug of the code using it."""
    module = type(exc).__module__ or ""
    return isinstance(exc, (OSError, EOFError)) or module.startswith(
        ("mcp", "anyio", "httpx", "httpcore", "trio"))


def _where(name: str, cfg: McpServerConfig, state_dir: Path) -> str:
    """Where to look next: its URL, and its log when something was written there."""
    log = server_log_path(state_dir, name)
    logged = log.exists() and log.stat().st_size > 0
    if cfg.command is None:
        return f" ({cfg.url}; its log: {log})" if logged else f" ({cfg.url})"
    return f" (its output: {log})" if logged else ""


# ------------------------------------------------------------------ the stdio transport
# Owned here, not the SDK's ``stdio_client``, so that a program's stop fits the daemon's:
# the SDK gives a program 2 s once its stdin is closed and 2 s more after SIGTERM, while
# the daemon's stop gives the whole tools actor 0.8 s before it kills it, which left a
# program that ignores its stdin (one still starting, say) running, re-parented to PID 1.
# The program is this process's child in a process group of its own; leaving
# :func:`stdio_transport` (normally, on an error, cancelled) closes its pipes (an MCP
# stdio server exits when its stdin closes: the specification's "Shutdown"), then sends
# SIGTERM to its group, then SIGKILL, and reaps it, shielded from cancellation. A line
# that is not a JSON-RPC message is noted, one line, in the server's log, never printed
# with a traceback.

STOP_GRACE_S = 0.2
"""Seconds a program has to exit once its stdin is closed, and again after SIGTERM,
before SIGKILL: at most about 0.4 s in all, inside the daemon's 0.8 s for an actor."""


@contextlib.asynccontextmanager
async def stdio_transport(argv: Sequence[str], *, env: dict[str, str], cwd: Path | None,
                          errlog: TextIO) -> AsyncIterator[_Streams]:
    """Start ``argv`` (program and arguments) with environment ``env`` (the whole of it)
    in ``cwd``, its stderr to ``errlog`` (an open file), and yield ``(read, write)``:
    the session's streams of messages from and to it. The read stream ends when the
    program closes its stdout (exits). On exit the program is stopped and reaped
    (the comment above), within about ``2 * STOP_GRACE_S`` seconds.

    Raises OSError (or ValueError: a NUL in an argument) when it cannot be started."""
    import anyio  # the SDK's session reads and writes anyio memory streams
    from mcp.shared.message import SessionMessage

    read_in, read_out = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_in, write_out = anyio.create_memory_object_stream[SessionMessage](0)
    streams = (read_in, read_out, write_in, write_out)
    try:
        proc = await trio.lowlevel.open_process(
            list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog,
            env=env, cwd=cwd, start_new_session=True)
        # (no checkpoint between the start and the try: a cancellation cannot leak it)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_read, proc, read_in, errlog)
                nursery.start_soon(_write, proc, write_out, read_in)
                try:
                    yield read_out, write_in
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            await _stop(proc)
    finally:
        for stream in streams:
            stream.close()


async def _read(proc: trio.Process, out: MemoryObjectSendStream[SessionMessage | Exception],
                errlog: TextIO) -> None:
    """The program's stdout, a message a line, to ``out``; ``out`` is closed at its end."""
    import anyio
    from mcp import types
    from mcp.shared.message import SessionMessage

    assert proc.stdout is not None
    async with out:
        buf = b""
        while True:
            try:
                chunk = await proc.stdout.receive_some()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                chunk = b""
            if not chunk:
                return
            *lines, buf = (buf + chunk).split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                item: SessionMessage | Exception
                try:
                    item = SessionMessage(types.jsonrpc_message_adapter.validate_json(
                        line, by_name=False))
                except ValueError as exc:  # pydantic's ValidationError, bad JSON
                    _note(errlog, f"not a JSON-RPC message on stdout: {line[:200]!r} "
                                  f"({first_line(exc)})")
                    item = exc
                try:
                    await out.send(item)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return  # the session is gone


async def _write(proc: trio.Process, messages: MemoryObjectReceiveStream[SessionMessage],
                 read_in: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
    """The session's messages, a line each, to the program's stdin. When the program
    cannot take them (its stdin is closed), the read stream is closed too, so the
    session sees the link end instead of waiting for an answer."""
    assert proc.stdin is not None
    async with messages:
        async for message in messages:
            data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
            try:
                await proc.stdin.send_all(data.encode("utf-8") + b"\n")
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                await read_in.aclose()
                return


async def _stop(proc: trio.Process) -> None:
    """Close its pipes, wait :data:`STOP_GRACE_S`, SIGTERM its process group, wait as
    long again, SIGKILL the group, reap. Shielded; returns once it is reaped (or, for a
    process the kernel cannot kill, after 1 s more)."""
    with trio.CancelScope(shield=True):
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError,
                                         OSError):
                    await pipe.aclose()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with trio.move_on_after(STOP_GRACE_S):
                await proc.wait()
            if proc.returncode is not None:  # exited and reaped (its pid may be reused)
                return
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)  # its group: what it started too
        with trio.move_on_after(1.0):
            await proc.wait()


def _note(errlog: TextIO, text: str) -> None:
    """One line of ours in the server's log."""
    with contextlib.suppress(OSError, ValueError):
        errlog.write(f"atomic-agent: {text}\n")
        errlog.flush()


# ---------------------------------------------------------------------- the SDK's logs
_SERVER_LOG: contextvars.ContextVar[TextIO | None] = contextvars.ContextVar(
    "mcp_server_log", default=None)
"""The log file of the server whose link the current task serves (set by
:func:`open_server`; the tasks the SDK starts inside it inherit it)."""


class _SdkLogHandler(logging.Handler):
    """The mcp SDK's log records: whole, traceback included, in the log file of the
    server whose link logged them; elsewhere (a call made from another task) one line in
    this process's structured log at level info (the daemon's JSON log; a CLI command
    shows only warnings)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(asctime)s mcp SDK %(levelname)s %(name)s: "
                                            "%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # a log record never breaks the link
            sink = _SERVER_LOG.get()
            if sink is not None and not sink.closed:
                sink.write(self.format(record) + "\n")
                sink.flush()
                return
            text = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                text = f"{text}: {first_line(record.exc_info[1])}"
            _log.info("tools.sdk_log", logger=record.name, level=record.levelname,
                      message=(text.splitlines() or [""])[0][:300])


def route_sdk_logs() -> None:
    """Send the mcp SDK's Python log records (the logger ``mcp`` and those below it)
    through :class:`_SdkLogHandler` instead of the terminal, where Python's last-resort
    handler printed them with their tracebacks. Idempotent; the CLI and the tools actor
    get it through :func:`open_server`."""
    sdk = logging.getLogger("mcp")
    if not any(isinstance(h, _SdkLogHandler) for h in sdk.handlers):
        sdk.addHandler(_SdkLogHandler())
    sdk.propagate = False
