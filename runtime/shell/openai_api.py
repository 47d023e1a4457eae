"""The OpenAI-compatible HTTP API of the daemon: chat completions with memory.

Served by the root process beside the websocket gateway (``server.httpPort``, default
the gateway's port + 1, on the same ``server.host``), so any program written against
the OpenAI API can talk to the daemon by changing its base URL to
``http://127.0.0.1:8766/v1`` and its API key to the daemon token.

* ``GET /v1/models`` → ``{"object": "list", "data": [{"id": "atomic-agent", …}]}``.
* ``POST /v1/chat/completions`` runs one normal turn (docs/architecture.md §4: memory context, the
  agent loop, the session saved, reflection after it) on the **last** message, which must
  be the user's. The session is the ``X-Atomic-Session`` header, else the request's
  ``user`` field, else ``openai``; an unknown id is created. The daemon keeps each
  session's history itself, so earlier ``messages`` (and ``system`` messages) are not
  replayed: a client may send only the new message. ``stream: true`` answers Server-Sent
  Events (``chat.completion.chunk`` objects: the role, then each ``reply.delta`` as
  ``delta.content``, then ``finish_reason``, with ``stream_options: {"include_usage":
  true}`` a chunk with ``usage`` and no choices, then ``data: [DONE]``); otherwise one
  ``chat.completion`` object with ``usage`` (the backend's prompt and completion tokens
  summed over the turn's steps). Sampling fields (``temperature``, ``max_tokens``, …) and
  ``model`` are accepted and not used (the daemon's ``llm.*`` configuration decides);
  ``tools`` are refused (the agent has its own memory tools). Responses carry
  ``X-Atomic-Session`` and ``X-Atomic-Turn`` headers.

Security, as for the websocket gateway: loopback by default; every request needs
``Authorization: Bearer <token>`` (the daemon token, ``<state>/token``, compared in
constant time) or gets 401; a request with a browser ``Origin`` that is not in
``server.allowedOrigins`` gets 403; bodies above ``server.maxFrameBytes`` get 413.
Errors use OpenAI's shape ``{"error": {"message", "type", "code"}}`` with the daemon's
codes (``busy`` 409, ``invalid_argument`` 400, ``unavailable`` 503, ``turn_failed`` 502).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Protocol, TypeVar

import msgspec
import structlog
import trio

from actors.agent.messages import (OpenSession, ReplyDelta, ReplyText, RunTurn, Step, TurnFinished,
                                   TurnFrame, TurnResult, TurnTimings)
from actors.agent.sessions import valid_session_id
from actors.memory.messages import Refused
from actors.tools.messages import down_reason
from runtime.kernel.errors import ActorUnavailable, RemoteError, RuntimeFailure
from runtime.services.metrics import MetricsRequest
from runtime.services.config import ServerConfig

from .clients import OWNER_PRINCIPAL, ClientRegistry, Principal, bearer_token
from .listen_guard import THROTTLE, host_allowed, origin_allowed

log = structlog.get_logger()

MODEL_ID = "atomic-agent"
DEFAULT_SESSION = "openai"
SESSION_HEADER = b"x-atomic-session"
EVENT_BUFFER = 4096
"""Turn events buffered per request; a reader slower than that loses deltas, never
the final ``reply``/``turn.finished`` (those always fit: see :meth:`TurnEvents.put`)."""

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]
App = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]
"""An ASGI application (scope, receive, send), as :class:`OpenAIApi` and the dashboard are."""

_T = TypeVar("_T")


class Request(Protocol):
    """``sup.request``: ``await request(actor, message, reply_type)`` is the actor's
    reply, decoded as ``reply_type``."""

    def __call__(self, dest: str, body: msgspec.Struct, reply_type: type[_T], /
                 ) -> Awaitable[_T]: ...


class ChatMessage(msgspec.Struct):
    """One entry of ``messages``: ``content`` is text or a list of parts
    (``{"type": "text", "text": …}``; other part types are refused)."""

    role: str
    content: str | list[dict[str, Any]] | None = None


class StreamOptions(msgspec.Struct):
    """``stream_options``: ``include_usage`` adds a last chunk with ``usage`` and no
    choices before ``[DONE]``, as OpenAI's API does."""

    include_usage: bool = False


class ChatRequest(msgspec.Struct):
    """The fields of a chat completion request the daemon reads; others are ignored."""

    messages: list[ChatMessage]
    model: str | None = None
    stream: bool = False
    user: str | None = None
    tools: list[Any] | None = None
    stream_options: StreamOptions | None = None


def usage(timings: TurnTimings | None) -> dict[str, int]:
    """OpenAI's ``usage`` for a turn: the backend's own counts summed over the turn's
    LLM steps (``prompt_tokens`` includes the server's prompt cache; 0 where a backend
    reports none, as some OpenAI-compatible servers do when streaming)."""
    prompt = timings.prompt_tokens if timings is not None else 0
    completion = timings.generated_tokens if timings is not None else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


class ApiError(Exception):
    """An HTTP error answer in OpenAI's shape."""

    def __init__(self, status: int, code: str, message: str,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.code, self.kind = status, code, kind

    def body(self) -> dict[str, dict[str, str | None]]:
        return {"error": {"message": str(self), "type": self.kind, "code": self.code,
                          "param": None}}


class TurnEvents:
    """Routes the agent's turn events (``TurnEvent`` casts, by turn id) to the HTTP
    requests waiting for them; the gateway calls :meth:`put` for every turn event."""

    def __init__(self) -> None:
        self.waiting: dict[str, trio.MemorySendChannel[TurnFrame]] = {}

    def open(self, turn: str) -> trio.MemoryReceiveChannel[TurnFrame]:
        send, recv = trio.open_memory_channel[TurnFrame](EVENT_BUFFER)
        self.waiting[turn] = send
        return recv

    def close(self, turn: str) -> None:
        send = self.waiting.pop(turn, None)
        if send is not None:
            send.close()

    def put(self, frame: TurnFrame) -> None:
        """Deliver one turn frame without blocking. When a request's buffer is full a
        ``reply.delta`` is dropped (the final ``reply`` frame carries the whole text); any
        other frame that does not fit is logged."""
        send = self.waiting.get(frame.turn)
        if send is None:
            return
        try:
            send.send_nowait(frame)
        except trio.WouldBlock:
            if not isinstance(frame, ReplyDelta):
                log.warning("openai_api.events_overflow", turn=frame.turn)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass


class OpenAIApi:
    """The ASGI application (module docstring).

    Args:
        request: ``sup.request``-like: ``await request(actor, message, reply_type)``.
        spawn_turn: starts a coroutine in the daemon-lifetime nursery (a client that
            goes away mid-turn does not cancel the turn, as on the websocket).
        events: the router the gateway feeds with turn events.
        token: the daemon token; cfg: ``server.*`` (allowedOrigins, maxFrameBytes).
    """

    def __init__(self, request: Request,
                 spawn_turn: Callable[[Callable[[], Awaitable[None]]], None],
                 events: TurnEvents, registry: ClientRegistry | str, cfg: ServerConfig,
                 cast: Callable[[str, msgspec.Struct], Awaitable[None]] | None = None
                 ) -> None:
        self.request = request
        self.cast = cast  # ``sup.cast``: refusals go to the activity log
        self.spawn_turn = spawn_turn
        self.events = events
        self.registry = (registry if isinstance(registry, ClientRegistry)
                         else ClientRegistry(None, registry))
        self.cfg = cfg

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        headers = {k.lower(): v for k, v in scope.get("headers") or []}
        if scope["path"].rstrip("/") == "/health" and scope["method"] == "GET":
            await self._health(headers, send)
            return
        try:
            principal = await self._check_access(headers)
            path, method = scope["path"].rstrip("/"), scope["method"]
            lacking = principal.lacks("read", "write") if path == "/v1/chat/completions" \
                else principal.lacks("read")
            if lacking is not None:
                await self._refused(principal.name, f"openai-api {path}", "forbidden")
                raise ApiError(403, "forbidden", f"the client {principal.name!r} lacks the "
                                                 f"scope {lacking!r} (a chat turn reads and "
                                                 "writes memory)", "permission_error")
            if path == "/v1/models" and method == "GET":
                await _json(send, 200, {"object": "list", "data": [self._model()]})
            elif path == "/v1/models/" + MODEL_ID and method == "GET":
                await _json(send, 200, self._model())
            elif path == "/v1/chat/completions" and method == "POST":
                await self._chat(headers, await self._body(receive, headers), send, principal)
            elif path in ("/v1/models", "/v1/chat/completions"):
                raise ApiError(405, "method_not_allowed", f"{method} is not allowed on {path}")
            else:
                raise ApiError(404, "not_found", f"no such endpoint: {method} {scope['path']} "
                                                 "(this daemon serves /v1/models and "
                                                 "/v1/chat/completions)")
        except ApiError as exc:
            extra = [(b"www-authenticate", b'Bearer realm="atomic-agent"')] \
                if exc.status == 401 else []
            if exc.status in (408, 413):  # the rest of the body is not read: the connection ends
                extra.append((b"connection", b"close"))
            await _json(send, exc.status, exc.body(), extra)

    async def _health(self, headers: dict[bytes, bytes], send: Send) -> None:
        """``GET /health``, no token needed (a supervisor's or a load balancer's probe):
        200 ``{"status": "ok", "problems": []}``, or 503 ``{"status": "degraded",
        "problems": [one line each]}`` — a clients.json the daemon cannot read, a memory
        database (PostgreSQL) that is away.
        Host and Origin are checked as for every request (421, 403)."""
        if not host_allowed(headers.get(b"host"), self.cfg.host, self.cfg.allow_remote):
            await _json(send, 421, ApiError(421, "misdirected_request", "Host header not "
                                            "allowed (localhost or server.host only)").body())
            return
        if not origin_allowed(headers.get(b"origin"), self.cfg.allowed_origins):
            await _json(send, 403, ApiError(403, "origin_not_allowed",
                                            "browser origin not allowed").body())
            return
        self.registry.reload()
        problems = [self.registry.error] if self.registry.error else []
        problems += await self._memory_problems()
        problems += await self._tools_problems()
        await _json(send, 503 if problems else 200,
                    {"status": "degraded" if problems else "ok", "problems": problems})

    async def _snapshot(self, actor: str) -> dict[str, Any]:
        """``actor``'s metrics snapshot; ``{}`` when it does not answer within 2 s (being
        restarted) or does not run (the tools actor without servers)."""
        try:
            with trio.fail_after(2):
                snap = await self.request(actor, MetricsRequest(), dict)
        except (RuntimeFailure, trio.TooSlowError, KeyError):
            return {}
        return snap if isinstance(snap, dict) else {}

    async def _memory_problems(self) -> list[str]:
        """What the memory actor says of its database (the PostgreSQL engine probes its
        server: docs/teams.md, "Faults"): one line when it is away."""
        database = (await self._snapshot("memory")).get("database")
        if isinstance(database, dict) and database.get("up") is False:
            return [f"the memory database is unavailable: {database.get('problem')}"]
        return []

    async def _tools_problems(self) -> list[str]:
        """One line per MCP server that is down (docs/tools.md)."""
        servers = (await self._snapshot("tools")).get("servers")
        return [f"MCP server {s.get('name')!r} is down: "
                f"{down_reason(str(s.get('name')), str(s.get('error')))}"
                for s in servers or [] if isinstance(s, dict) and s.get("state") == "down"]

    # ------------------------------------------------------------------ checks
    async def _check_access(self, headers: dict[bytes, bytes]) -> Principal:
        """Host, Origin (:mod:`.listen_guard`) and the token (the daemon's or a client's,
        ``runtime/shell/clients.py``) → whose it is; a wrong token is slowed and counted
        (``auth.failed{listener=openai_api}``). Raises ApiError (421, 403, 401)."""
        if not host_allowed(headers.get(b"host"), self.cfg.host, self.cfg.allow_remote):
            log.warning("openai_api.host_refused")
            raise ApiError(421, "misdirected_request", "Host header not allowed (localhost "
                                                       "or server.host only)")
        origin = headers.get(b"origin")
        if not origin_allowed(origin, self.cfg.allowed_origins):
            log.warning("openai_api.origin_refused",
                        origin=(origin or b"").decode(errors="replace")[:200])
            raise ApiError(403, "origin_not_allowed", "browser origin not allowed "
                                                      "(server.allowedOrigins)")
        token = bearer_token(headers.get(b"authorization"))
        principal = self.registry.resolve(token) if token else None
        if principal is None:
            paused = self.registry.paused(token) if token else None
            if paused is not None:
                await self._refused(paused, "openai-api", "paused")
                raise ApiError(403, "paused", f"the client {paused!r} is paused (resume it "
                                              "in the dashboard or with atomic-agent "
                                              "clients resume)", "permission_error")
            log.warning("openai_api.auth_failed")
            await THROTTLE.failed("openai_api")
            if self.registry.error is not None:
                raise ApiError(503, "clients_unreadable", self.registry.error,
                               "authentication_error")
            raise ApiError(401, "invalid_api_key", "send the daemon token, or a client token "
                                                   "(atomic-agent clients add), as the API "
                                                   "key (Authorization: Bearer <token>; the "
                                                   "daemon token is in <state>/token)",
                           "authentication_error")
        return principal

    async def _refused(self, client: str, op: str, outcome: str) -> None:
        """Record a refusal in the activity log (when the daemon gave a ``cast``)."""
        if self.cast is not None:
            await self.cast("memory", Refused(client=client, op=op, outcome=outcome))

    async def _body(self, receive: Receive, headers: dict[bytes, bytes]) -> ChatRequest:
        limit = self.cfg.max_frame_bytes
        chunks: list[bytes] = []
        size = 0
        more = True
        # A client that announces a body and never sends it is let go, not held.
        deadline = trio.current_time() + self.cfg.handshake_timeout_ms / 1000
        while more:
            with trio.move_on_at(deadline) as waited:
                message = await receive()
            if waited.cancelled_caught:
                raise ApiError(408, "request_timeout", "the request body did not arrive within "
                               f"{self.cfg.handshake_timeout_ms / 1000:g} s "
                               "(server.handshakeTimeoutMs)")
            if message["type"] == "http.disconnect":
                raise ApiError(400, "disconnected", "the client went away")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise ApiError(413, "too_large", f"the request body is over {limit} bytes "
                                                 "(server.maxFrameBytes)")
            chunks.append(chunk)
            more = message.get("more_body", False)
        try:
            request = msgspec.json.decode(b"".join(chunks), type=ChatRequest)
        except msgspec.DecodeError as exc:
            raise ApiError(400, "invalid_argument", f"the body is not a chat completion "
                                                    f"request: {exc}") from None
        if request.tools:
            raise ApiError(400, "invalid_argument", "tools are not supported: the agent "
                                                    "uses its own memory tools")
        return request

    def _model(self) -> dict[str, str | int]:
        return {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "atomic-agent"}

    # -------------------------------------------------------------------- chat
    async def _chat(self, headers: dict[bytes, bytes], request: ChatRequest, send: Send,
                    principal: Principal = OWNER_PRINCIPAL) -> None:
        """One turn. It acts under ``principal``'s scopes, in a session of its own: an app
        reaches only the sessions it started (its default session is ``openai-<name>``)."""
        client = "openai-api" if principal.owner else principal.name
        app = principal.app
        text = _last_user_text(request.messages)
        session = (headers.get(SESSION_HEADER, b"").decode(errors="replace")
                   or request.user or (DEFAULT_SESSION if app is None
                                       else f"{DEFAULT_SESSION}-{app}"))
        if not valid_session_id(session):
            raise ApiError(400, "invalid_argument", "the session (X-Atomic-Session header or "
                                                    "user field) must be 1-64 characters of "
                                                    "letters, digits, _ . -")
        try:
            await self.request("agent", OpenSession(session=session, app=app), dict)
        except RemoteError as exc:
            if exc.code == "forbidden":
                await self._refused(client, "openai-api session", "forbidden")
            raise ApiError(403 if exc.code == "forbidden" else 400, exc.code, exc.message,
                           "permission_error" if exc.code == "forbidden"
                           else "invalid_request_error") from None
        except RuntimeFailure as exc:
            raise ApiError(503, "unavailable", str(exc), "server_error") from None
        turn = f"t-{secrets.token_hex(5)}"
        events = self.events.open(turn)
        failure: list[ApiError] = []

        async def run() -> None:
            try:
                await self.request("agent", RunTurn(
                    session=session, turn=turn, text=text, client=client, app=app,
                    scopes=principal.turn_scopes, answerable=False),
                    TurnResult)
            except RemoteError as exc:
                if exc.code == "busy":
                    failure.append(ApiError(409, "busy", f"a turn is already running in "
                                                         f"session {session!r}; wait for its "
                                                         f"answer, or use another session "
                                                         f"(X-Atomic-Session header or user "
                                                         f"field)"))
                else:
                    failure.append(ApiError(400, exc.code, exc.message))
            except (ActorUnavailable, RuntimeFailure) as exc:
                failure.append(ApiError(503, "unavailable", str(exc), "server_error"))
            finally:
                self.events.close(turn)

        self.spawn_turn(run)
        try:
            first = await _next_event(events)
            if first is None:
                raise failure[0] if failure else ApiError(
                    502, "turn_failed", "the turn ended before it started", "server_error")
            extra = [(b"x-atomic-session", session.encode()), (b"x-atomic-turn", turn.encode())]
            completion_id = f"chatcmpl-{turn}"
            if request.stream:
                await self._stream(send, events, completion_id, extra,
                                   include_usage=bool(request.stream_options
                                                      and request.stream_options.include_usage))
            else:
                reply, reason, error, timings = await _collect(events)
                if error is not None and not reply:
                    raise ApiError(502, "turn_failed", error, "server_error")
                await _json(send, 200, {
                    "id": completion_id, "object": "chat.completion", "created": int(time.time()),
                    "model": MODEL_ID, "system_fingerprint": None,
                    "choices": [{"index": 0, "finish_reason": _finish(reason), "logprobs": None,
                                 "message": {"role": "assistant", "content": reply}}],
                    "usage": usage(timings)}, extra)
        finally:
            self.events.close(turn)

    async def _stream(self, send: Send, events: trio.MemoryReceiveChannel[TurnFrame],
                      completion_id: str, extra: list[tuple[bytes, bytes]], *,
                      include_usage: bool = False) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), *extra]})
        created = int(time.time())

        async def event(choices: list[dict[str, object]], **extra: object) -> None:
            await _sse(send, {"id": completion_id, "object": "chat.completion.chunk",
                              "created": created, "model": MODEL_ID, "system_fingerprint": None,
                              "choices": choices, **extra})

        async def chunk(delta: dict[str, str], finish: str | None = None) -> None:
            await event([{"index": 0, "delta": delta, "logprobs": None,
                          "finish_reason": finish}])

        await chunk({"role": "assistant", "content": ""})
        sent = ""
        error: str | None = None
        async for frame in events:
            match frame:
                case ReplyDelta(text=text):
                    sent += text
                    await chunk({"content": text})
                case ReplyText(text=text):  # the whole reply: send what deltas did not
                    if text.startswith(sent) and len(text) > len(sent):
                        await chunk({"content": text[len(sent):]})
                        sent = text
                case Step(step="error", message=message):
                    error = message or "the turn failed"
                case TurnFinished(reason=reason, message=message, timings=timings):
                    if reason == "error" and not sent:
                        await _sse(send, {"error": {
                            "message": error or message or "the turn failed",
                            "type": "server_error", "code": "turn_failed"}})
                    else:
                        await chunk({}, _finish(reason))
                        if include_usage:
                            await event([], usage=usage(timings))
                    break
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n",
                    "more_body": False})


def _last_user_text(messages: list[ChatMessage]) -> str:
    if not messages or messages[-1].role != "user":
        raise ApiError(400, "invalid_argument", "the last message must be the user's "
                                                "(role \"user\")")
    content = messages[-1].content
    if isinstance(content, list):
        parts = []
        for part in content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(400, "invalid_argument", "only text content parts are "
                                                        "supported")
            parts.append(part["text"])
        content = "\n".join(parts)
    if not content or not content.strip():
        raise ApiError(400, "invalid_argument", "the user's message is empty")
    try:
        content.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(400, "invalid_argument", "the message is not valid UTF-8") from None
    return content


async def _next_event(events: trio.MemoryReceiveChannel[TurnFrame]
                      ) -> TurnFrame | None:
    """The turn's first event (``turn.started``), or None when the turn was refused
    (the RunTurn request failed before any event and closed the channel). Events are
    cast before the agent answers RunTurn, on the same connection, so none is lost."""
    try:
        return await events.receive()
    except trio.EndOfChannel:
        return None


async def _collect(events: trio.MemoryReceiveChannel[TurnFrame]
                   ) -> tuple[str, str, str | None, TurnTimings | None]:
    """(reply, finish reason, error message, the turn's timings) once it finishes."""
    deltas: list[str] = []
    reply: str | None = None
    error: str | None = None
    async for frame in events:
        match frame:
            case ReplyDelta(text=text):
                deltas.append(text)
            case ReplyText(text=text):
                reply = text
            case Step(step="error", message=message):
                error = message or "the turn failed"
            case TurnFinished(reason=reason, message=message, timings=timings):
                if reason == "error" and error is None:
                    error = message or "the turn failed"
                return (reply if reply is not None else "".join(deltas), reason,
                        error if reason in ("error", "shutdown", "cancelled") else None,
                        timings)
    return "".join(deltas), "error", "the turn's events stopped", None


def _finish(reason: str) -> str:
    """OpenAI's ``finish_reason`` for a ``turn.finished`` reason."""
    return "stop" if reason in ("reply", "finish") else "length" if reason == "max_steps" \
        else reason


async def _json(send: Send, status: int, body: object,
                headers: list[tuple[bytes, bytes]] | None = None) -> None:
    data = json.dumps(body, ensure_ascii=False).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
        *(headers or [])]})
    await send({"type": "http.response.body", "body": data, "more_body": False})


async def _sse(send: Send, obj: dict[str, object]) -> None:
    await send({"type": "http.response.body", "more_body": True,
                "body": b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


class PathRouter:
    """ASGI: requests whose path is one of ``routes``' prefixes (or under it) go to that
    app (the dashboard's ``/ui``), every other request and the lifespan to ``default``."""

    def __init__(self, default: App, routes: dict[str, App]) -> None:
        self.default = default
        self.routes = routes

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope.get("path", "")
            for prefix, app in self.routes.items():
                if path == prefix or path.startswith(prefix + "/"):
                    await app(scope, receive, send)
                    return
        await self.default(scope, receive, send)


async def serve_api(app: App, host: str, port: int,
                    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``app`` with hypercorn on trio at ``host:port`` until cancelled;
    ``task_status`` gets the bound port.

    Raises:
        OSError: the address cannot be bound (e.g. ``EADDRINUSE``).
    """
    from hypercorn.config import Config
    from hypercorn.trio import serve

    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 1.0
    async with trio.open_nursery() as nursery:
        # hypercorn types an app by its TypedDict scopes and events; this one reads dicts
        binds = await nursery.start(partial(serve, app, config))  # type: ignore[arg-type]
        task_status.started(int(binds[0].rsplit(":", 1)[1]))
