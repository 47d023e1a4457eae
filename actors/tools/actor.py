"""The tools actor: keeps the user's MCP servers running and connected, and calls their
tools when asked (docs/tools.md).

It runs only when ``tools.mcpServers`` has an enabled server (a daemon without tools has
no such process). Each server is kept by a task of its own (:meth:`ToolsActor.keep`):
connect (:func:`runtime.services.mcp_tools.open_server`: a stdio program started as this
process's child, its stderr in ``<state>/logs/mcp-<name>.log``; or a streamable HTTP
URL), list its tools, then watch it — a ping every :data:`PING_S`, or at once when a call
found the link broken. When it fails or stops answering, the state goes ``down`` with
the one-line reason (logged ``tools.server_down``, counted in
``agent.tools.server_down{server}``), and it is started again after a backoff that
doubles from 1 s to :data:`BACKOFF_MAX_S` and goes back to 1 s once it is up. A server
that never starts costs a retry a minute, nothing else: the other servers and the
agent go on.

Requests: :class:`~actors.tools.messages.ToolsStatus` (every server's state and tools;
``wait`` holds the answer until each server's first start is done, for the daemon's
start-up report), :class:`~actors.tools.messages.CallTool` (one call; whether it may run
is the caller's decision, made before), and ``MetricsRequest`` (counters, and the
servers' states under ``servers``).

Shutdown: the keeper tasks are cancelled; each program's stdin is closed (an MCP stdio
server exits when its stdin closes), then it is sent SIGTERM and SIGKILL, and reaped
(:func:`runtime.services.mcp_tools.stdio_transport`), within the 0.8 s the daemon's stop
gives this actor: none is left running, one still starting included.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import structlog
import trio

from runtime.kernel.actor import ActorContext, first_line
from runtime.services.config import ActorBoot, McpServerConfig
from runtime.services.mcp_tools import (ServerLink, ToolServerError, open_server,
                                        server_log_path)
from runtime.services.metrics import Metrics, MetricsRequest

from .messages import (CallTool, ServerState, ServerStatus, ToolCallResult, ToolsMsg,
                       ToolsStatus, ToolsStatusReply, down_reason)

log = structlog.get_logger()

PING_S = 10.0
"""Seconds between two pings of an idle server."""
BACKOFF_MAX_S = 60.0
"""Longest wait before starting a failed server again."""
MAX_RESULT_CHARS = 8_000
"""A call's text is cut to this many characters (the model's context is small)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


def result_text(content: list[Any], structured: Any = None) -> str:
    """A call result's content as text: text parts as they are, other parts named
    (``[image image/png]``, ``[resource file:///…]``); the structured result as JSON
    when there is no text."""
    parts: list[str] = []
    for c in content:
        kind = getattr(c, "type", "")
        if kind == "text":
            parts.append(str(getattr(c, "text", "")))
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {getattr(c, 'mime_type', '')}]")
        elif kind in ("resource", "resource_link"):
            resource = getattr(c, "resource", None)
            uri = getattr(resource, "uri", None) or getattr(c, "uri", "")
            text = getattr(resource, "text", None)
            parts.append(str(text) if text else f"[resource {uri}]")
        else:
            parts.append(f"[{kind or 'content'}]")
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, default=str))
    return "\n".join(parts)


class _Kept:
    """One server's keeper state."""

    def __init__(self, name: str, cfg: McpServerConfig, state_dir: Path) -> None:
        self.name, self.cfg = name, cfg
        self.status = ServerStatus(name=name, state="starting" if cfg.enabled else "disabled",
                                   since=_now_ms(),
                                   log=str(server_log_path(state_dir, name))
                                   if cfg.command else "")
        self.link: ServerLink | None = None
        self.broken = trio.Event()
        self.first_done = trio.Event()
        if not cfg.enabled:
            self.first_done.set()

    def set(self, state: ServerState, **kw: Any) -> None:
        self.status = msgspec.structs.replace(self.status, state=state, since=_now_ms(), **kw)


class ToolsActor:
    """Keepers and request handlers (module docstring)."""

    def __init__(self, ctx: ActorContext, boot: ActorBoot) -> None:
        self.ctx = ctx
        self.state_dir = Path(boot.state_dir)
        self.kept = {name: _Kept(name, cfg, self.state_dir)
                     for name, cfg in sorted(boot.config.tools.mcp_servers.items())}
        self.metrics = Metrics()
        self._decoder = msgspec.msgpack.Decoder(ToolsMsg)

    # ------------------------------------------------------------------ keepers
    async def keep(self, kept: _Kept) -> None:
        """Keep one server connected for the actor's life (module docstring)."""
        backoff = 1.0
        while True:
            error = "it stopped"
            try:
                async with open_server(kept.name, kept.cfg, self.state_dir) as link:
                    tools = await link.list_tools()
                    kept.link, kept.broken = link, trio.Event()
                    kept.set("up", tools=tools, error="")
                    kept.first_done.set()
                    backoff = 1.0
                    log.info("tools.server_up", server=kept.name, tools=len(tools))
                    await self._watch(kept, link)
            except ToolServerError as exc:
                error = str(exc)
            finally:
                kept.link = None
            kept.set("down", tools=[], error=error, restarts=kept.status.restarts + 1)
            kept.first_done.set()
            self.metrics.inc("agent.tools.server_down", {"server": kept.name})
            log.warning("tools.server_down", server=kept.name, error=error,
                        retry_in_s=backoff)
            await trio.sleep(backoff)
            backoff = min(BACKOFF_MAX_S, backoff * 2)

    async def _watch(self, kept: _Kept, link: ServerLink) -> None:
        """Return never; raise ToolServerError when the server stops answering a ping or
        a call found the link broken."""
        while True:
            with trio.move_on_after(PING_S):
                await kept.broken.wait()
                raise ToolServerError(f"MCP server {kept.name!r} broke during a call")
            try:
                with trio.fail_after(kept.cfg.timeout_ms / 1000):
                    await link.session.send_ping()
            except trio.TooSlowError:
                raise ToolServerError(f"MCP server {kept.name!r} stopped answering (no "
                                      f"ping answer within {kept.cfg.timeout_ms} ms)") from None
            except Exception as exc:  # noqa: BLE001 - the link is what failed
                raise ToolServerError(f"MCP server {kept.name!r} stopped answering: "
                                      f"{first_line(exc)}") from None

    # ------------------------------------------------------------------ requests
    async def on_request(self, src: str, body: msgspec.Raw) -> Any:
        """Answer ToolsStatus, CallTool and MetricsRequest (module docstring)."""
        match self._decoder.decode(body):
            case ToolsStatus(wait=wait):
                if wait:
                    longest = max((k.cfg.timeout_ms for k in self.kept.values()), default=0)
                    with trio.move_on_after(longest / 1000 + 5):
                        for kept in self.kept.values():
                            await kept.first_done.wait()
                return self.status()
            case CallTool() as msg:
                return await self.call(msg)
            case MetricsRequest():
                snap = self.metrics.snapshot()
                snap["servers"] = msgspec.to_builtins(self.status().servers)
                return snap

    async def on_cast(self, src: str, body: msgspec.Raw) -> None:
        log.warning("tools.unexpected_cast", src=src)

    async def on_shutdown(self) -> None:
        """Nothing to flush: the keepers are cancelled with the actor's nursery."""

    def status(self) -> ToolsStatusReply:
        return ToolsStatusReply(servers=[k.status for k in self.kept.values()])

    async def call(self, msg: CallTool) -> ToolCallResult:
        """One call (:class:`~actors.tools.messages.CallTool`); never raises."""
        kept = self.kept.get(msg.server)
        if kept is None:
            return ToolCallResult(ok=False, error=f"no MCP server named {msg.server!r}")
        link = kept.link
        if link is None:
            why = f": {down_reason(kept.name, kept.status.error)}" if kept.status.error else ""
            return ToolCallResult(ok=False, error=f"MCP server {msg.server!r} is "
                                                  f"{kept.status.state}{why}")
        timeout_ms = msg.timeout_ms or kept.cfg.timeout_ms
        t0 = time.monotonic()
        labels = {"server": msg.server}
        try:
            with trio.fail_after(timeout_ms / 1000):
                result = await link.session.call_tool(msg.tool, msg.arguments)
        except trio.TooSlowError:
            self.metrics.inc("agent.tools.calls", {**labels, "outcome": "timeout"})
            return ToolCallResult(ok=False, error=f"{msg.server}.{msg.tool} did not answer "
                                                  f"within {timeout_ms} ms",
                                  duration_ms=(time.monotonic() - t0) * 1000)
        except Exception as exc:  # noqa: BLE001 - any failure is this call's answer
            kept.broken.set()  # the keeper checks the link now
            self.metrics.inc("agent.tools.calls", {**labels, "outcome": "failed"})
            return ToolCallResult(ok=False, error=f"{msg.server}.{msg.tool} failed: "
                                                  f"{first_line(exc)}",
                                  duration_ms=(time.monotonic() - t0) * 1000)
        text = result_text(list(getattr(result, "content", []) or []),
                           getattr(result, "structured_content", None))
        is_error = bool(getattr(result, "is_error", False))
        self.metrics.inc("agent.tools.calls", {**labels, "outcome": "error" if is_error
                                              else "ok"})
        self.metrics.observe("agent.tools.call_ms", (time.monotonic() - t0) * 1000)
        return ToolCallResult(ok=True, text=text[:MAX_RESULT_CHARS], is_error=is_error,
                              truncated=len(text) > MAX_RESULT_CHARS,
                              duration_ms=(time.monotonic() - t0) * 1000)


@asynccontextmanager
async def open_actor(ctx: ActorContext, config: bytes) -> AsyncIterator[ToolsActor]:
    """Decode the :class:`~runtime.services.config.ActorBoot`, keep every enabled server
    in a nursery owned here, serve; the keepers are cancelled on exit."""
    boot = msgspec.msgpack.decode(config, type=ActorBoot)
    actor = ToolsActor(ctx, boot)
    log.info("tools.configured", servers=[k.name for k in actor.kept.values()])
    async with trio.open_nursery() as nursery:
        for kept in actor.kept.values():
            if kept.cfg.enabled:
                nursery.start_soon(actor.keep, kept)
        try:
            yield actor
        finally:
            nursery.cancel_scope.cancel()
