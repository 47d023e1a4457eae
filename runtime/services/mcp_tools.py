"""The user's MCP servers, as a client: connect, list their tools, call one
(docs/tools.md).

A server is configured under ``tools.mcpServers.<name>`` (:class:`McpServerConfig`): a
local program spoken to over stdio, or a streamable HTTP server. :func:`open_server`
connects with the official ``mcp`` SDK (https://modelcontextprotocol.io/docs/sdk) and
gives a :class:`ServerLink`; every failure — a program that does not start, exits or
hangs, a URL that does not answer, a server that answers nonsense — is a
:class:`ToolServerError` with one line that says which server and what happened, never
a traceback.

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
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import trio

from runtime.kernel.actor import first_line, leaf_exception

from .config import McpServerConfig
from .tool_spec import ToolSpec, pin_of

__all__ = ["ServerLink", "ToolServerError", "ToolSpec", "open_server", "pin_of",
           "server_log_path"]  # (ToolSpec and pin_of re-exported from .tool_spec)


class ToolServerError(Exception):
    """An MCP server could not be reached, started, listed or called: one line naming
    the server."""


def server_log_path(state_dir: Path, name: str) -> Path:
    """Where a stdio server's stderr goes: ``<state>/logs/mcp-<name>.log``."""
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


async def _stdio(name: str, cfg: McpServerConfig, state_dir: Path,
                 stack: contextlib.AsyncExitStack) -> Any:
    from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client

    assert cfg.command is not None
    log_path = server_log_path(state_dir, name)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    errlog: TextIO = stack.enter_context(open(log_path, "a", encoding="utf-8"))
    cwd = None
    if cfg.cwd:
        cwd = Path(cfg.cwd).expanduser()
        cwd = cwd if cwd.is_absolute() else state_dir / cwd
        if not cwd.is_dir():
            raise ToolServerError(f"MCP server {name!r}: its working directory {str(cwd)!r} "
                                  "does not exist")
    params = StdioServerParameters(command=cfg.command, args=list(cfg.args),
                                   env={**get_default_environment(), **cfg.env}, cwd=cwd)
    return await stack.enter_async_context(stdio_client(params, errlog=errlog))


async def _http(name: str, cfg: McpServerConfig, state_dir: Path,
                stack: contextlib.AsyncExitStack) -> Any:
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
    return await stack.enter_async_context(streamable_http_client(cfg.url, http_client=client))


@contextlib.asynccontextmanager
async def open_server(name: str, cfg: McpServerConfig, state_dir: Path
                      ) -> AsyncIterator[ServerLink]:
    """Connect to server ``name`` (start its program, or reach its URL), initialise the
    session and yield a :class:`ServerLink`; on exit the session ends and a started
    program is stopped (the SDK closes its stdin, then terminates and kills it). A stdio
    server's stderr is appended to :func:`server_log_path`.

    Raises ToolServerError (one line) when it cannot start, answer or initialise within
    ``timeoutMs``, or when the link breaks (the program exits, the connection drops);
    an error of the body comes out as itself, not inside an exception group."""
    started = False
    try:
        async with contextlib.AsyncExitStack() as stack:
            link = await _connect(name, cfg, state_dir, stack)
            started = True
            yield link
    except BaseException as exc:  # noqa: BLE001 - sorted below, nothing swallowed
        inner = leaf_exception(exc)
        if isinstance(inner, trio.Cancelled) or not isinstance(inner, Exception):
            raise
        if isinstance(inner, ToolServerError) or (started and not _link_failure(inner)):
            raise inner from None
        what = "broke" if started else "could not start"
        raise ToolServerError(f"MCP server {name!r} {what}: {first_line(inner)}"
                              f"{_where(name, cfg, state_dir)}") from None


async def _connect(name: str, cfg: McpServerConfig, state_dir: Path,
                   stack: contextlib.AsyncExitStack) -> ServerLink:
    from mcp import ClientSession

    # (the transports open task groups: a deadline scope may wrap only awaits that
    # return inside it, hence none around entering them)
    opener = _stdio if cfg.command is not None else _http
    streams = await opener(name, cfg, state_dir, stack)
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
    """Where to look next: the server's log, for a program."""
    if cfg.command is None:
        return f" ({cfg.url})"
    log = server_log_path(state_dir, name)
    return f" (its output: {log})" if log.exists() and log.stat().st_size else ""
