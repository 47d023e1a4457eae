"""``atomic-agent mcp``: the daemon's memory as a Model Context Protocol server.

Desktop and editor clients (Claude Desktop and Code, Cursor, …) launch
``atomic-agent mcp`` and speak MCP over its stdin/stdout; ``--http`` serves MCP's
Streamable HTTP transport on loopback instead (``http://127.0.0.1:PORT/mcp``), for
clients that connect to a URL. Built on the official ``mcp`` SDK (``MCPServer``).

The server is a client of the running daemon (:class:`runtime.shell.daemon_link.DaemonLink`,
one websocket connection, session ``mcp`` by default): every tool is one ``memory``
op the memory actor answers, so nothing here opens ``memory.sqlite`` behind the actor's
back. A daemon that is not running makes each tool call an MCP tool error
``not_running: …`` naming the command that starts it; the server keeps running and
the next call after ``atomic-agent serve`` works.

Tools (names use ``_``: several clients accept only ``[A-Za-z0-9_-]`` in tool
names), with MCP annotations (``readOnlyHint``, ``destructiveHint``, ``idempotentHint``):

=============================  ==========================  =========================
tool                           daemon op                   kind
=============================  ==========================  =========================
``memory_profile_set``         ``memory.profile.set``      write (history kept)
``memory_profile_remove``      ``memory.profile.remove``   destructive
``memory_profile_list``        ``memory.profile.list``     read-only
``memory_profile_history``     ``memory.profile.history``  read-only
``memory_notes_store``         ``memory.notes.store``      write (deduplicated)
``memory_notes_recall``        ``memory.notes.recall``     read-only (hybrid recall)
``memory_notes_search``        ``memory.notes.search``     read-only (keywords)
``memory_notes_get``           ``memory.notes.get``        read-only
``memory_notes_forget``        ``memory.notes.forget``     destructive
``memory_lessons_list/get``    ``memory.lessons.*``        read-only
``memory_procedures_list/get`` ``memory.procedures.*``     read-only
``memory_context``             ``memory.context``          read-only
=============================  ==========================  =========================

The tools, their titles, descriptions, argument schemas and hints are made from the op
table (``actors.memory.ops``: the ops with an MCP title), so they say what the websocket's
``memory`` frames and the agent's tools say. Errors come back as MCP tool errors
(``isError``) whose text starts with the daemon's error code (``invalid_argument: …``,
``not_found: …``, ``not_running: …``). Arguments are typed (JSON Schema in
``tools/list``) and checked by the op's request Struct before they are sent.

Per-app access: with ``ATOMIC_AGENT_TOKEN`` set to a client token (``atomic-agent clients
add``) the connection to the daemon uses it, and a tool beyond its scopes is the tool error
``forbidden: …``; the activity log names the connection ``mcp:<clientInfo name>``.

HTTP security (``--http``): binds ``127.0.0.1`` unless ``--host`` says otherwise;
every request needs ``Authorization: Bearer <token>`` with the daemon's token
(``<state>/token``) or a client token (its calls then go through a daemon connection
of their own, :class:`LinkPool`), compared in constant time; a wrong one is slowed and
counted; the
``Host`` header must name localhost (421: DNS rebinding) and a browser ``Origin`` is
refused (403) unless it is in ``server.allowedOrigins`` — the same checks, case-insensitive,
as the websocket gateway and the OpenAI API (:mod:`.listen_guard`).
"""

from __future__ import annotations

import functools
import hmac
import json
import signal
import sys
from pathlib import Path
from typing import Any

import msgspec
import structlog
import trio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from mcp.types import Tool as MCPTool

from actors.memory.ops import OPS, ContextAnswer, MemoryOp, args_schema, decode_op
from actors.store.errors import MemoryFailure

from .client import ClientError
from .clients import ClientRegistry, activity_label, bearer_token
from .daemon_link import DaemonLink
from .listen_guard import THROTTLE, AuthThrottle, host_allowed, origin_allowed

log = structlog.get_logger()

DEFAULT_SESSION = "mcp"
TOKEN_ENV = "ATOMIC_AGENT_TOKEN"
"""A client token for the connection to the daemon (its scopes bound every tool)."""
DEFAULT_HTTP_PORT = 8767
INSTRUCTIONS = (
    "Long-term memory of the user, kept by their local atomic-agent daemon. Call "
    "memory_context with the user's message to get what the user told earlier "
    "(profile facts, recalled notes, an index of recent notes). Store durable facts "
    "about the user with memory_profile_set and other things worth keeping with "
    "memory_notes_store; remove what the user asks to forget.")

_READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_ADD = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                       open_world_hint=False)
_DELETE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                          open_world_hint=False)



class MemoryMCPServer(MCPServer):
    """``MCPServer`` whose tools are the op table's (:func:`mcp_ops`): listed from it,
    their arguments checked by the op's request Struct (errors read like the daemon's:
    ``invalid_argument: id: Expected `int`, got `str```), run through the daemon
    connection of the caller's bearer token."""

    link: DaemonLink | None = None
    links: LinkPool | None = None  # over HTTP: one daemon connection per bearer token

    async def list_tools(self) -> list[MCPTool]:
        return [mcp_tool(name, cls) for name, cls in mcp_ops().items()]

    def _tool_input_schema(self, name: str) -> dict[str, Any] | None:
        # The SDK's hook for checking a request's parameters against a tool's schema
        # (it reads registered functions; ours are the op table's).
        cls = mcp_ops().get(name)
        return None if cls is None else args_schema(cls)

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Any = None) -> CallToolResult:
        link = self.links.for_headers(_headers(context)) if self.links is not None else self.link
        if link is None:
            raise ToolError("unavailable: no daemon connection")
        if link.client is None:
            link.client = mcp_client_label(context)
        cls = mcp_ops().get(name)
        if cls is None:
            raise ToolError(f"invalid_argument: unknown tool {name!r}")
        try:
            request = decode_op(cls.name, {k: v for k, v in arguments.items() if v is not None})
            reply = await link.run_op(request)
        except MemoryFailure as exc:
            raise ToolError(f"{exc.code}: {exc}") from None
        except ClientError as exc:
            raise ToolError(f"{exc.code}: {exc}") from None
        if isinstance(reply, ContextAnswer):
            text = reply.text or "(memory has nothing for this message)"
        else:
            text = _json(msgspec.to_builtins(reply))
        return CallToolResult(content=[TextContent(type="text", text=text)], is_error=False)


def _headers(context: Any) -> Any:
    try:
        return context.headers
    except (AttributeError, LookupError, ValueError):
        return None


class LinkPool:
    """Over HTTP, one :class:`DaemonLink` per bearer token, so a client token's scopes
    bind what its tool calls may do (the daemon's gateway refuses the rest); the owner's
    token uses the state directory's token. ``BearerGuard`` has already checked the
    token of every request that reaches a tool. Links start in ``nursery``."""

    def __init__(self, state_dir: Path, session: str | None, owner_token: str,
                 nursery: trio.Nursery) -> None:
        self.state_dir, self.session, self.owner = state_dir, session, owner_token
        self.nursery = nursery
        self.links: dict[str, DaemonLink] = {}

    def for_headers(self, headers: Any) -> DaemonLink:
        token = bearer_token(headers.get("authorization") if headers is not None else None)
        key = "" if not token or hmac.compare_digest(token, self.owner) else token
        link = self.links.get(key)
        if link is None:
            link = DaemonLink(self.state_dir, session=self.session, token=key or None)
            self.nursery.start_soon(link.run)
            self.links[key] = link
        return link


def mcp_client_label(context: Any) -> str:
    """``mcp:<clientInfo.name>`` of the MCP client behind ``context`` (the activity log's
    name for it), ``mcp`` when it gave none."""
    try:
        info = context.session.client_params.client_info
        name = activity_label(f"{info.name} {info.version}".strip() if info.version
                              else info.name)
    except AttributeError:
        name = None
    return f"mcp:{name}" if name else "mcp"


def mcp_ops() -> dict[str, type[MemoryOp[Any]]]:
    """The ops served as MCP tools (those with an MCP title in the op table), by tool
    name: the op's name with ``_`` for ``.`` (several clients accept only
    ``[A-Za-z0-9_-]`` in tool names)."""
    return {name.replace(".", "_"): cls for name, cls in OPS.items() if cls.mcp}


def mcp_tool(name: str, cls: type[MemoryOp[Any]]) -> MCPTool:
    """One tool's listing: title, description and argument schema from the op table;
    ``readOnlyHint`` for ops that do not write, ``destructiveHint`` for deletions."""
    if not cls.writes:
        hints = _READ
    else:
        hints = _DELETE if cls.access == "forget" else _ADD
    description = cls.summary
    if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "("):
        description += " " + " ".join(cls.__doc__.split())
    return MCPTool(name=name, title=cls.mcp, description=description,
                   input_schema=args_schema(cls),
                   annotations=hints.model_copy(update={"title": cls.mcp}))


def build_server(link: DaemonLink) -> MemoryMCPServer:
    """The MCP server with every MCP tool of the op table bound to ``link`` (module
    docstring)."""
    server = MemoryMCPServer(name="atomic-agent", title="atomic-agent memory",
                             instructions=INSTRUCTIONS, version=_version(), log_level="WARNING")
    server.link = link
    return server


def _json(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, indent=1)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("atomic-agent")
    except PackageNotFoundError:
        return "0"


class BearerGuard:
    """ASGI middleware, the same checks as the daemon's other listeners
    (:mod:`.listen_guard`): a ``Host`` that does not name this machine gets 421, a browser
    ``Origin`` not in ``allowed_origins`` 403 (both case-insensitive), a request without
    ``Authorization: Bearer <token>`` 401 after a pause, counted as
    ``auth.failed{listener=mcp}`` (the token compared in constant time); lifespan events
    pass through. ``token``: the daemon's, or a :class:`ClientRegistry` that also knows the
    client tokens (read again when clients.json changes)."""

    def __init__(self, app: Any, token: str | ClientRegistry, host: str = "127.0.0.1",
                 allowed_origins: list[str] | None = None,
                 throttle: AuthThrottle = THROTTLE) -> None:
        self.app = app
        self.registry = token if isinstance(token, ClientRegistry) else None
        self.expected = b"" if self.registry is not None else f"Bearer {token}".encode()
        self.host = host
        self.allowed_origins = list(allowed_origins or [])
        self.throttle = throttle

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.lower(): v for k, v in scope.get("headers") or []}
            refused: tuple[int, bytes] | None = None
            if not host_allowed(headers.get(b"host"), self.host):
                refused = 421, b'{"error":"Host header not allowed (localhost only)"}'
            elif not origin_allowed(headers.get(b"origin"), self.allowed_origins):
                refused = 403, b'{"error":"origin not allowed (server.allowedOrigins)"}'
            elif not self._known(headers.get(b"authorization", b"")):
                await self.throttle.failed("mcp")
                if self.registry is not None and self.registry.error is not None:
                    refused = 503, json.dumps({"error": "clients_unreadable: "
                                               + self.registry.error}).encode()
                else:
                    refused = 401, (b'{"error":"unauthorized: send Authorization: Bearer '
                                    b'<the daemon token or a client token>"}')
            if refused is not None:
                status, body = refused
                await send({"type": "http.response.start", "status": status, "headers": [
                    (b"content-type", b"application/json"),
                    *([(b"www-authenticate", b'Bearer realm="atomic-agent"')]
                      if status == 401 else [])]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)

    def _known(self, auth: bytes) -> bool:
        if self.registry is None:
            return hmac.compare_digest(auth, self.expected)
        token = bearer_token(auth)
        if not token:
            return False
        self.registry.reload()
        return self.registry.resolve(token) is not None


async def serve_stdio(link: DaemonLink) -> None:
    """Serve MCP on stdin/stdout until the client closes stdin."""
    server = build_server(link)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(link.run)
        await server.run_stdio_async()
        nursery.cancel_scope.cancel()


async def serve_http(link: DaemonLink, *, host: str, port: int, token: str,
                     allowed_origins: list[str],
                     task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve MCP's Streamable HTTP transport at ``http://host:port/mcp`` (hypercorn on
    trio) until cancelled; ``task_status`` gets the URL once listening. Requests bearing
    the daemon's token use ``link``; a client token (``atomic-agent clients add``) gets a
    daemon connection of its own, bound by its scopes (:class:`LinkPool`).

    Raises:
        OSError: the address cannot be bound (e.g. the port is in use).
    """
    from hypercorn.config import Config
    from hypercorn.trio import serve

    server = build_server(link)
    # Host and Origin are checked by BearerGuard, case-insensitively, as on the daemon's
    # other listeners (the SDK's own check compares them byte for byte).
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    registry = ClientRegistry(link.state_dir, token)
    app = BearerGuard(server.streamable_http_app(transport_security=security, host=host),
                      registry, host, allowed_origins)
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = None
    async with trio.open_nursery() as nursery:
        pool = LinkPool(link.state_dir, link.session, token, nursery)
        pool.links[""] = link
        server.links = pool
        nursery.start_soon(link.run)
        binds = await nursery.start(serve, app, config)
        task_status.started(binds[0] + "/mcp")


def print_err(line: str) -> None:
    """One line on stderr (stdout is the MCP channel under stdio)."""
    print(line, file=sys.stderr, flush=True)


async def mcp_main(state_dir: Path, *, http: bool, host: str, port: int,
                   session: str | None, allowed_origins: list[str]) -> int:
    """``atomic-agent mcp``: serve until stdin closes (stdio) or Ctrl-C (HTTP).
    Returns the exit status; start-up problems are one line on stderr."""
    from .state import load_or_create_token, read_daemon_info

    import os

    # A client token (atomic-agent clients add) limits what this MCP server may do.
    link = DaemonLink(state_dir, session=session, token=os.environ.get(TOKEN_ENV) or None)
    if read_daemon_info(state_dir) is None:
        print_err(f"atomic-agent mcp: no daemon is running for {state_dir} yet; tools answer "
                  f"not_running until one is started with: atomic-agent serve "
                  f"--state-dir {state_dir}")
    if not http:
        await serve_stdio(link)
        return 0
    token = load_or_create_token(state_dir)
    status = 0
    try:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(functools.partial(
                serve_http, link, host=host, port=port, token=token,
                allowed_origins=allowed_origins))
            print_err(f"atomic-agent mcp: serving MCP (Streamable HTTP) at {url}; clients "
                      f"send 'Authorization: Bearer <token>' with the token in "
                      f"{state_dir / 'token'}")
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    break
            nursery.cancel_scope.cancel()  # SIGTERM / Ctrl-C: stop listening, exit 0
    except* OSError as group:  # raised inside hypercorn's nursery: an exception group
        exc = _first_leaf(group)
        print_err(f"atomic-agent mcp: cannot listen on {host}:{port}: "
                  f"{getattr(exc, 'strerror', None) or exc}; choose another with --port N "
                  f"(0 = any free port)")
        status = 1
    return status


def _first_leaf(group: BaseException) -> BaseException:
    while isinstance(group, BaseExceptionGroup):
        group = group.exceptions[0]
    return group

