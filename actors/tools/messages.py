"""The tools actor's messages (docs/tools.md): what a caller asks of the user's MCP
servers and what it gets back.

:class:`ToolsStatus` → :class:`ToolsStatusReply` (each configured server's state and
tools); :class:`CallTool` → :class:`ToolCallResult` (a call's output as text, capped,
or why there is none). A call is made only when asked: whether a tool may run is
decided by the caller before it asks (``runtime.services.tool_policy``), never here.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from runtime.services.metrics import MetricsRequest
from runtime.services.tool_spec import ToolSpec

__all__ = ["CallTool", "ServerState", "ServerStatus", "ToolCallResult", "ToolsMsg",
           "ToolsStatus", "ToolsStatusReply", "down_reason"]

ServerState = Literal["starting", "up", "down", "disabled"]


class _M(msgspec.Struct, tag_field="kind", tag=str.lower, kw_only=True):
    """Base of the tools actor's requests (tagged by class name)."""


class ToolsStatus(_M):
    """Each server's state → :class:`ToolsStatusReply`. ``wait``: answer once every
    server's first start has succeeded or failed (the daemon's start-up report)."""

    wait: bool = False


class ServerStatus(msgspec.Struct, kw_only=True, rename="camel"):
    """One configured server: ``state``; its ``tools`` while up; the last ``error``
    (one line); ``restarts`` since the daemon started; ``since`` (unix ms) the state
    began; ``log``: where a program's stderr goes."""

    name: str
    state: ServerState
    tools: list[ToolSpec] = msgspec.field(default_factory=list)
    error: str = ""
    restarts: int = 0
    since: int = 0
    log: str = ""


def down_reason(name: str, error: str) -> str:
    """A server's ``error`` without its opening "MCP server '<name>'", for a line that
    names the server already: ``down_reason("git", "MCP server 'git' could not start:
    …")`` is ``"could not start: …"`` (so "MCP server 'git' is down: could not start:
    …" says the name once). An error that does not open so is returned as it is."""
    head = f"MCP server {name!r}"
    rest = error[len(head):].lstrip(": ") if error.startswith(head) else ""
    return rest or error


class ToolsStatusReply(msgspec.Struct, kw_only=True):
    """Answer to :class:`ToolsStatus`, servers by name order."""

    servers: list[ServerStatus]


class CallTool(_M):
    """Call ``tool`` of ``server`` with ``arguments`` → :class:`ToolCallResult`.
    ``timeout_ms``: at most this long (default: the server's ``timeoutMs``)."""

    server: str
    tool: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    timeout_ms: int | None = None


class ToolCallResult(msgspec.Struct, kw_only=True, rename="camel"):
    """What a call gave: ``ok`` false when no answer came (``error`` says why: the
    server is down, the call timed out, the link broke); otherwise ``text`` (the
    result's content as text, at most ``MAX_RESULT_CHARS``, ``truncated`` when cut) and
    ``is_error`` (the tool itself reported a failure). ``duration_ms``: the call's
    wall time."""

    ok: bool
    text: str = ""
    is_error: bool = False
    truncated: bool = False
    error: str = ""
    duration_ms: float = 0.0


ToolsMsg = ToolsStatus | CallTool | MetricsRequest
