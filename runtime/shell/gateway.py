"""The websocket gateway, served by the root process.

Security: binds ``127.0.0.1`` by default (another host only with ``server.allowRemote``);
the upgrade request's ``Host`` must name this machine (421 otherwise: DNS rebinding) and a
browser ``Origin`` must be allowlisted (403: cross-site websocket hijacking), both checked
by :mod:`.listen_guard`; one address may have ``server.maxPendingPerPeer`` connections
waiting for ``hello`` (429 past that), and the upgrade plus ``hello`` must finish within
``server.handshakeTimeoutMs``. The first frame must be ``hello`` with the token from
``<state>/token``, compared in constant time (``hmac.compare_digest``); a wrong token is
slowed and counted (``auth.failed{listener=websocket}``), then gets one ``error`` frame
and a close with 1008 (policy violation). Frames above ``server.maxFrameBytes`` close the
connection with 1009 (trio-websocket).

Isolation: each client has its own bounded outbound queue (``server.clientQueue``
frames) drained by its own task; a client that stops reading is dropped when its
queue is full, never slowing the others. Each client may have at most
``server.clientInflight`` requests (turns, memory ops, metrics …) running at once;
past that each further request is answered at once with a ``busy`` error (its ``id``
echoed) and not run. The gateway keeps reading a client's frames while it waits on the
store: trio-websocket answers pings only while frames are read, so a client whose
keepalive pings went unanswered while it waited on a slow store was closed by its own
keepalive. Only a client that does not read its answers (more than half its outbound
queue full) has its frames left unread until the queue drains (TCP backpressure).
A malformed frame gets one ``error`` to that client only and the connection stays open.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import msgspec
from msgspec import UNSET
import structlog
import trio
from trio_websocket import (ConnectionClosed, WebSocketConnection, WebSocketRequest,
                            WebSocketServer, serve_websocket)

from actors.agent.messages import (
    ApprovalDone,
    ApprovalRequest,
    Approve,
    CancelTurn,
    DeleteSession,
    GetSession,
    ListSessions,
    RenameSession,
    OpenSession,
    RunTurn,
    TurnEvent,
    TurnFinished,
    TurnResult,
)
from actors.memory.client import actor_memory
from actors.memory.messages import MemoryChanged, Refused
from actors.memory.ops import decode_op
from actors.reflection.messages import ConsolidationEvent, ReflectionEvent
from actors.store.errors import ValidationError
from runtime.kernel import Supervisor
from runtime.kernel.actor import leaf_exception
from runtime.kernel.errors import ActorCrashed, ActorUnavailable, RemoteError, RuntimeFailure
from runtime.kernel.unicode import encode_repaired
from runtime.services.config import ServerConfig
from runtime.services.metrics import Metrics, MetricsRequest, live_tasks, merge_snapshots

from .clients import OWNER, OWNER_PRINCIPAL, ClientRegistry, Principal, op_scope
from .listen_guard import THROTTLE, host_allowed, origin_allowed
from .openai_api import TurnEvents
from .outbound import (ActorRestarting, ApprovalResult, CancelResult, ConsolidationFrame,
                       ErrorFrame, MemoryChangedFrame, MemoryResult, MetricsResult,
                       OutboundFrame, Pong, ReflectionFrame, SessionDeleted, SessionRenamed,
                       SessionResult, SessionsResult, ShuttingDown, Subscribed, Welcome)
from .protocol import (
    CHANNELS,
    PROTOCOL_VERSION,
    ApprovalFrame,
    BadFrame,
    CancelFrame,
    Hello,
    MemoryFrame,
    MetricsFrame,
    Ping,
    Say,
    SessionDeleteFrame,
    SessionGetFrame,
    SessionRenameFrame,
    SessionsFrame,
    Shutdown,
    Subscribe,
    decode_frame,
)

log = structlog.get_logger()

CLOSE_REASONS = {1009: "frame_too_large", 1006: "abrupt"}
"""``gateway.closed{reason}`` of a connection that ended with this websocket close code
(1006: no close frame, the TCP connection just went away); others count as ``client``."""
CONTROL_INFLIGHT = 2
"""``cancel`` requests one client may have running besides its in-flight limit."""
_event_decoder = msgspec.msgpack.Decoder(
    TurnEvent | MemoryChanged | ReflectionEvent | ConsolidationEvent)
_json = msgspec.json.Encoder()
ROOT_METRICS = Metrics()
"""The root process's own counters (connections closed by reason; ``text.repaired``),
merged into ``metrics.result`` with the actors'."""


def _needs(frame: Any) -> tuple[str, ...]:
    """The scopes a client frame needs (``runtime/shell/clients.py``): a turn reads and
    writes (reflection stores what it learns); ``memory`` frames as their op; deleting a
    session forgets, renaming one writes; shutdown is admin; answering a tool's approval
    request needs ``tools:approve``; hello, cancel and ping need none."""
    match frame:
        case Say():
            return ("read", "write")
        case MemoryFrame(op=op):
            return (op_scope(op),)
        case Subscribe() | MetricsFrame() | SessionsFrame() | SessionGetFrame():
            return ("read",)
        case SessionRenameFrame():
            return ("write",)
        case SessionDeleteFrame():
            return ("forget",)
        case Shutdown():
            return ("admin",)
        case ApprovalFrame():
            return ("tools:approve",)
    return ()



_REQUEST_OF: dict[type, str] = {CancelResult: "cancel", ApprovalResult: "approval",
                                SessionsResult: "sessions",
                                SessionResult: "session.get", SessionDeleted: "session.delete",
                                SessionRenamed: "session.rename"}
"""The frame a session answer replies to (the activity log's name for a refusal)."""


class Client:
    """One connected, authenticated client."""

    def __init__(self, ws: WebSocketConnection, queue_size: int, cid: int,
                 inflight: int = 16) -> None:
        self.ws = ws
        self.inflight = trio.Semaphore(inflight)
        # ``cancel`` has slots of its own: a client at its in-flight limit can still
        # stop its turn (bounded too, so a flood of cancels is no loophole).
        self.control = trio.Semaphore(CONTROL_INFLIGHT)
        self.id = cid
        self.session: str | None = None
        self.session_saved = False  # the session has a turn (memory writes name it)
        # The writer's batch of the notes this connection stores outside a session:
        # recall's context step reads the notes one writer stored in a row as
        # neighbours (unique across daemon runs, like a turn id).
        self.batch = f"conn-{secrets.token_hex(5)}"
        self.channels: set[str] = set()
        self.send_ch, self.recv_ch = trio.open_memory_channel[bytes](queue_size)
        self.queue_size = queue_size
        self._drained: trio.Event | None = None  # set by pump once half the queue is free
        self.dropped = False
        self.close_reason = "too slow: outbound queue full"  # (when dropped)
        self.scope: trio.CancelScope | None = None  # the connection's; cancelled on drop
        self.peer: str | None = None  # its address while it has not said hello yet
        self.principal: Principal = OWNER_PRINCIPAL  # whose token (set by the hello)
        self.label = OWNER  # the name the activity log shows (set by the hello)

    def push(self, frame: OutboundFrame) -> None:
        """Queue a frame without blocking; a full queue drops this client (slow consumer)."""
        if self.dropped:
            return
        try:
            self.send_ch.send_nowait(encode_repaired(_json.encode, frame))
        except trio.WouldBlock:
            self.dropped = True
            log.warning("gateway.slow_client_dropped", client=self.id)
            ROOT_METRICS.inc("gateway.closed", {"reason": "slow_consumer"})
            if self.scope is not None:
                self.scope.cancel()  # close it now, even if it never sends again
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            self.dropped = True

    def _backlog(self) -> int:
        return self.send_ch.statistics().current_buffer_used

    async def room(self) -> None:
        """Wait while more than half of this client's outbound queue is full: a client
        that sends faster than it reads its answers is slowed by not reading its frames
        (backpressure on its own socket), instead of being answered ``busy`` until its
        queue overflows and it is dropped. A client that reads is never held here, so
        its pings are answered while its requests wait on a slow store."""
        while self._backlog() > self.queue_size // 2 and not self.dropped:
            self._drained = trio.Event()
            await self._drained.wait()

    async def pump(self) -> None:
        """Drain the queue to the socket (one writer per connection)."""
        async for data in self.recv_ch:
            await self.ws.send_message(data.decode())
            if self._drained is not None and self._backlog() <= self.queue_size // 2:
                self._drained.set()


class Gateway:
    """Routes client frames to actors and actor events to clients.

    Args:
        sup: the running supervisor (``request``/``cast`` to actors).
        token: the shared secret clients must present.
        cfg: ``server.*`` configuration.
        request_shutdown: called when a client sends ``shutdown``.
    """

    def __init__(self, sup: Supervisor, token: str, cfg: ServerConfig,
                 request_shutdown: Callable[[], None],
                 registry: ClientRegistry | None = None) -> None:
        self.sup = sup
        self.registry = registry if registry is not None else ClientRegistry(None, token)
        self.cfg = cfg
        self.request_shutdown = request_shutdown
        self.clients: set[Client] = set()
        self._ids = itertools.count(1)
        self.finished_turns: set[str] = set()
        self.accepting = True
        self.turn_nursery: trio.Nursery | None = None
        self.connections: set[Client] = set()  # every accepted websocket, until closed
        self.turn_events = TurnEvents()  # turns run by the OpenAI-compatible HTTP API
        # connections before hello, by peer address, oldest first
        self.pending: dict[str, list[Client]] = {}
        # Called with the op of every memory change, and "tool.approval" when a tool call
        # starts or stops waiting for an answer (the dashboard's live pages).
        self.memory_listeners: list[Callable[[str], None]] = []

    # ------------------------------------------------------------ actor → clients
    async def on_cast(self, src: str, body: msgspec.Raw) -> None:
        """Supervisor callback for casts addressed to the root; never blocks."""
        try:
            event = _event_decoder.decode(body)
        except msgspec.DecodeError:
            log.warning("gateway.unknown_cast", src=src)
            return
        match event:
            case TurnEvent(session=session, frame=frame):
                if isinstance(frame, TurnFinished):
                    self.finished_turns.add(frame.turn)
                if isinstance(frame, (ApprovalRequest, ApprovalDone)):
                    for listener in self.memory_listeners:  # the dashboard's Tools page
                        listener("tool.approval")
                self._to_session(session, frame)
                self.turn_events.put(frame)
            case MemoryChanged():
                for listener in self.memory_listeners:
                    listener(event.op)
                replaced = bool(event.replaced)  # (named only when a write replaced a value)
                self._to_channel("memory", MemoryChangedFrame(
                    op=event.op, keys=event.keys, ids=event.ids, session=event.session,
                    replaced=event.replaced if replaced else UNSET,
                    replaced_pinned=event.replaced_pinned if replaced else UNSET))
            case ConsolidationEvent():
                cluster = event.stage == "cluster"
                self._to_channel("memory", ConsolidationFrame(
                    stage=event.stage, clusters=event.clusters,
                    index=event.index if cluster else UNSET,
                    result=event.result if cluster else UNSET,
                    lesson_id=event.lesson_id if cluster else UNSET,
                    report=event.report if event.report is not None else UNSET))
            case ReflectionEvent():
                # the frame is the event under its client-facing type (the same fields)
                self._to_channel("reflection",
                                 ReflectionFrame(**msgspec.structs.asdict(event)),
                                 session=event.session)

    def _to_session(self, session: str, frame: OutboundFrame) -> None:
        for c in list(self.clients):
            if c.session == session:
                c.push(frame)

    def actor_crashed(self, crash: ActorCrashed) -> None:
        """Tell ``actors`` subscribers that an actor died and is being restarted
        (``actor.restarting``: its name, exit code and the exception it reported)."""
        self._to_channel("actors", ActorRestarting(
            actor=crash.name, exit_code=crash.exitcode, error=crash.remote_type or None,
            restarts=self.sup.restart_count + 1))

    def _to_channel(self, channel: str, frame: OutboundFrame,
                    session: str | None = None) -> None:
        """Push ``frame`` to ``channel``'s subscribers; a frame of one ``session`` reaches
        an app's connections only on that session (the owner's reach every session's)."""
        for c in list(self.clients):
            if channel in c.channels and (session is None or c.principal.owner
                                          or c.session == session):
                c.push(frame)

    # ------------------------------------------------------------------- serving
    async def serve(self, *, handler_nursery: trio.Nursery,
                    task_status: trio.TaskStatus[WebSocketServer] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; reports the bound port through ``task_status``.
        Connections live in ``handler_nursery`` so closing the listener (stop
        accepting) does not cut clients off mid-shutdown."""

        self.turn_nursery = handler_nursery
        # connect_timeout bounds the HTTP upgrade: a peer that never finishes it held a
        # file descriptor for trio-websocket's default 60 s.
        await serve_websocket(
            self._handle, self.cfg.host, self.cfg.port, None, handler_nursery=handler_nursery,
            max_message_size=self.cfg.max_frame_bytes,
            connect_timeout=self.cfg.handshake_timeout_ms / 1000, task_status=task_status)

    def _refusal(self, request: WebSocketRequest) -> tuple[int, str, str] | None:
        """``(status, reason, body)`` when the upgrade request must be refused
        (:mod:`.listen_guard`), else None."""
        headers = {name.lower(): value for name, value in request.headers}
        # wsproto keeps Host out of the extra headers, on the handshake event itself.
        host = getattr(getattr(request, "_event", None), "host", None) or headers.get(b"host")
        if not host_allowed(host, self.cfg.host, self.cfg.allow_remote):
            return 421, "host", "Host header not allowed (localhost or server.host only)"
        if not origin_allowed(headers.get(b"origin"), self.cfg.allowed_origins):
            return 403, "origin", "origin not allowed (server.allowedOrigins)"
        return None

    async def _handle(self, request: WebSocketRequest) -> None:
        if not self.accepting:
            await request.reject(503, body=b"shutting down")
            return
        refused = self._refusal(request)
        if refused is not None:
            status, reason, body = refused
            log.warning("gateway.refused", reason=reason)
            ROOT_METRICS.inc("gateway.refused", {"reason": reason})
            await request.reject(status, body=body.encode())
            return
        peer = str(getattr(request.remote, "address", request.remote))
        ws = await request.accept()
        client = Client(ws, self.cfg.client_queue, next(self._ids), self.cfg.client_inflight)
        waiting = self.pending.setdefault(peer, [])
        if len(waiting) >= self.cfg.max_pending_per_peer:
            # The oldest connection still without a hello goes, never the new one: a
            # flood of connections that never say hello (or say it with a wrong token)
            # cannot hold the places a client with the right token needs (it says hello
            # within milliseconds of connecting).
            oldest = waiting.pop(0)
            ROOT_METRICS.inc("gateway.refused", {"reason": "pending_per_peer"})
            oldest.close_reason = ("hello_required: too many connections from this address "
                                   "waiting for hello (server.maxPendingPerPeer)")
            oldest.dropped = True
            if oldest.scope is not None:
                oldest.scope.cancel()
        waiting.append(client)
        client.peer = peer
        self.connections.add(client)
        try:
            await self._serve_connection(client)
        finally:
            self.connections.discard(client)
            self._settled(client)

    def _settled(self, client: Client) -> None:
        """``client`` said hello (right or wrong) or went away: it waits no more."""
        peer, client.peer = client.peer, None
        if peer is None:
            return
        waiting = self.pending.get(peer, [])
        if client in waiting:
            waiting.remove(client)
        if not waiting:
            self.pending.pop(peer, None)

    async def _serve_connection(self, client: Client) -> None:
        ws = client.ws
        try:
            async with trio.open_nursery() as nursery:
                client.scope = nursery.cancel_scope
                if client.dropped:  # pushed out of the waiting places before it began
                    nursery.cancel_scope.cancel()
                nursery.start_soon(self._pump, client, nursery.cancel_scope)
                if self.cfg.ping_interval_ms:
                    nursery.start_soon(self._heartbeat, client)
                authenticated = await self._authenticate(client)
                self._settled(client)
                if authenticated:
                    self.clients.add(client)
                    await self._serve_client(client, nursery)
                nursery.cancel_scope.cancel()
        except BaseException as exc:  # noqa: BLE001 - one client never takes down others
            leaf = leaf_exception(exc)
            if isinstance(leaf, (trio.Cancelled, KeyboardInterrupt)):
                raise
            if isinstance(leaf, ConnectionClosed):
                code = getattr(leaf.reason, "code", None)
                reason = CLOSE_REASONS.get(code, "client") if isinstance(code, int) else "client"
                ROOT_METRICS.inc("gateway.closed", {"reason": reason})
                if reason != "client":
                    log.warning("gateway.closed", client=client.id, reason=reason, code=code)
            elif isinstance(leaf, (trio.BrokenResourceError, trio.ClosedResourceError)):
                ROOT_METRICS.inc("gateway.closed", {"reason": "abrupt"})
                log.warning("gateway.closed", client=client.id, reason="abrupt")
            else:
                log.error("gateway.client_failed", client=client.id,
                          error_type=type(leaf).__name__, error=str(leaf))
        finally:
            self.clients.discard(client)
            with trio.move_on_after(1) as cs:
                cs.shield = True
                if client.dropped:
                    await ws.aclose(code=1008, reason=client.close_reason)
                else:
                    await ws.aclose()

    async def _heartbeat(self, client: Client) -> None:
        """Ping the connection every ``server.pingIntervalMs``; no pong within
        ``server.pingTimeoutMs`` closes it (a peer gone without a FIN or a close frame
        looks connected forever otherwise). Counted as
        ``gateway.closed{reason=ping_timeout}``."""
        interval, timeout = self.cfg.ping_interval_ms / 1000, self.cfg.ping_timeout_ms / 1000
        while True:
            await trio.sleep(interval)
            with trio.move_on_after(timeout) as waited:
                await client.ws.ping()
            if waited.cancelled_caught:
                log.warning("gateway.ping_timeout", client=client.id, timeout_s=timeout)
                ROOT_METRICS.inc("gateway.closed", {"reason": "ping_timeout"})
                client.dropped = True
                client.close_reason = f"no pong within {timeout:g} s"
                if client.scope is not None:
                    client.scope.cancel()
                return

    async def _pump(self, client: Client, scope: trio.CancelScope) -> None:
        try:
            await client.pump()
        except ConnectionClosed:
            pass
        scope.cancel()

    async def _authenticate(self, client: Client) -> bool:
        with trio.move_on_after(self.cfg.handshake_timeout_ms / 1000):
            raw = await client.ws.get_message()
            try:
                frame = decode_frame(raw)
            except BadFrame as exc:
                frame = None
                reason = exc.message
            if not isinstance(frame, Hello):
                await self._refuse(client, "hello_required",
                                   "the first frame must be hello with the token"
                                   + (f" ({reason})" if frame is None else ""))
                return False
            self._settled(client)  # a hello, right or wrong: it holds no waiting place
            principal = self.registry.resolve(frame.token)
            if principal is None:
                paused = self.registry.paused(frame.token)
                if paused is not None:
                    await self.sup.cast("memory", Refused(client=paused, op="hello",
                                                          outcome="paused"))
                    await self._refuse(client, "paused", f"the client {paused!r} is paused "
                                                         "(resume it in the dashboard or with "
                                                         "atomic-agent clients resume)")
                    return False
                log.warning("gateway.auth_failed", client=client.id)
                await THROTTLE.failed("websocket")  # slowed (listen_guard)
                if self.registry.error is not None:  # every app token is refused: say why
                    await self._refuse(client, "clients_unreadable", self.registry.error)
                else:
                    await self._refuse(client, "unauthorized", "wrong token")
                return False
            client.principal = principal
            client.label = (self.registry.owner_label(frame.client) if principal.owner
                            else principal.name)  # an app is its token's name, whatever it says
            try:
                info = await self.sup.request("agent", OpenSession(
                    session=frame.session, working_dir=frame.working_dir,
                    app=principal.app), dict)
            except RemoteError as exc:
                if exc.code == "forbidden":  # another app's session: logged under the app
                    await self.sup.cast("memory", Refused(client=client.label, op="hello",
                                                          outcome="forbidden"))
                await self._refuse(client, exc.code, exc.message)
                return False
            except RuntimeFailure as exc:
                await self._refuse(client, "unavailable", str(exc))
                return False
            client.session = info["session"]
            client.session_saved = not info["created"]
            client.push(Welcome(session=client.session, version=PROTOCOL_VERSION,
                                created=info["created"]))
            return True
        ROOT_METRICS.inc("gateway.closed", {"reason": "hello_timeout"})
        await self._refuse(client, "hello_required", "no hello within "
                           f"{self.cfg.handshake_timeout_ms / 1000:g} s "
                           "(server.handshakeTimeoutMs)")
        return False

    async def _refuse(self, client: Client, code: str, message: str) -> None:
        await client.ws.send_message(encode_repaired(
            _json.encode, ErrorFrame(code=code, message=message, id=None)).decode())
        await client.ws.aclose(code=1008, reason=code)

    async def _serve_client(self, client: Client, nursery: trio.Nursery) -> None:
        assert client.session is not None  # set by the hello
        while True:
            await client.room()
            raw = await client.ws.get_message()
            try:
                frame = decode_frame(raw)
            except BadFrame as exc:
                client.push(ErrorFrame(code="bad_frame", message=exc.message, id=exc.id))
                continue
            seen = self.registry.generation
            if not self.registry.still_allowed(client.principal):
                await self._drop_revoked(client)
                return
            if client.principal.owner:
                self.registry.reload()
            if self.registry.generation != seen:  # apply it to every connection now
                await self._sweep_revoked()
            lacking = client.principal.lacks(*_needs(frame))
            if lacking is not None:
                await self._forbid(client, frame, lacking)
                continue
            match frame:
                case Hello():
                    client.push(ErrorFrame(code="bad_frame", message="already said hello",
                                           id=None))
                case Say():
                    # Turns run in the daemon-lifetime nursery: a client that disconnects
                    # mid-turn does not cancel it (the reply is persisted, reflection runs).
                    assert self.turn_nursery is not None  # set by serve()
                    await self._spawn(self.turn_nursery, client, self._say, client, frame)
                case CancelFrame(id=rid):
                    await self._spawn(nursery, client, self._call, client, rid,
                                      partial(self.sup.request, "agent",
                                              CancelTurn(session=client.session,
                                                         app=client.principal.app,
                                                         client=client.label), dict),
                                      CancelResult, slots=client.control, rid=rid)
                case ApprovalFrame(request=request, decision=decision, id=rid,
                                   unanswerable=unanswerable):
                    # control slots, as cancel: a client at its in-flight limit (its
                    # turn waiting on this very answer) can still answer
                    await self._spawn(nursery, client, self._call, client, rid,
                                      partial(self.sup.request, "agent",
                                              Approve(request=request, decision=decision,
                                                      unanswerable=unanswerable,
                                                      session=client.session,
                                                      app=client.principal.app,
                                                      client=client.label), dict),
                                      ApprovalResult, slots=client.control, rid=rid)
                case MemoryFrame():
                    await self._spawn(nursery, client, self._memory, client, frame,
                                      rid=frame.id)
                case Subscribe(channels=channels, id=rid):
                    bad = [c for c in channels if c not in CHANNELS]
                    if bad:
                        client.push(ErrorFrame(
                            code="invalid_argument", id=rid,
                            message=f"unknown channel(s) {bad}; known: {list(CHANNELS)}"))
                    else:
                        client.channels.update(channels)
                        client.push(Subscribed(id=rid, channels=sorted(client.channels)))
                case MetricsFrame():
                    await self._spawn(nursery, client, self._metrics, client)
                case SessionsFrame(limit=limit, id=rid):
                    await self._spawn(nursery, client, self._call, client, rid,
                                      partial(self.sup.request, "agent",
                                              ListSessions(limit=limit,
                                                           app=client.principal.app), list),
                                      SessionsResult, rid=rid)
                case SessionGetFrame(session=session, messages=count, id=rid):
                    await self._spawn(nursery, client, self._call, client, rid,
                                      partial(self.sup.request, "agent",
                                              GetSession(session=session, messages=count,
                                                         app=client.principal.app),
                                              dict), SessionResult, rid=rid)
                case SessionDeleteFrame(session=session, id=rid):
                    await self._spawn(nursery, client, self._call, client, rid,
                                      partial(self.sup.request, "agent",
                                              DeleteSession(session=session,
                                                            app=client.principal.app), dict),
                                      SessionDeleted, rid=rid)
                case SessionRenameFrame(session=session, title=title, id=rid):
                    await self._spawn(nursery, client, self._call, client, rid,
                                      partial(self.sup.request, "agent",
                                              RenameSession(session=session, title=title,
                                                            app=client.principal.app),
                                              dict), SessionRenamed, rid=rid)
                case Ping():
                    client.push(Pong())
                case Shutdown():
                    client.push(ShuttingDown())
                    self.request_shutdown()

    async def _forbid(self, client: Client, frame: Any, scope: str) -> None:
        """Refuse ``frame``: its client lacks ``scope``; nothing runs (``forbidden``, also
        recorded in the activity log)."""
        ROOT_METRICS.inc("gateway.refused", {"reason": "scope"})
        op = frame.op if isinstance(frame, MemoryFrame) else str(frame.__struct_config__.tag)
        await self.sup.cast("memory", Refused(client=client.label, op=op, outcome="forbidden"))
        message = (f"the client {client.principal.name!r} lacks the scope {scope!r} "
                   f"(it has {', '.join(sorted(client.principal.scopes)) or 'none'})")
        rid = getattr(frame, "id", None)
        if isinstance(frame, MemoryFrame):
            client.push(MemoryResult(id=rid, ok=False, error={
                "code": "forbidden", "message": message, "scope": scope}))
        else:
            client.push(ErrorFrame(code="forbidden", message=message, id=rid, scope=scope))

    async def watch_clients(self, interval_s: float = 0.5) -> None:
        """Read clients.json again every ``interval_s`` while the daemon runs; a
        connection whose client was revoked, paused or given other scopes is closed
        (1008, the reason starting ``revoked:``); the others stay."""
        seen = self.registry.generation
        while True:
            await trio.sleep(interval_s)
            self.registry.reload()
            if self.registry.generation == seen:
                continue
            seen = self.registry.generation
            await self._sweep_revoked()

    async def apply_clients(self) -> None:
        """Read clients.json now and close the connections it no longer allows (the
        dashboard calls this after revoking or pausing an app)."""
        self.registry.reload()
        await self._sweep_revoked()

    async def _sweep_revoked(self) -> None:
        """Close every connection whose token clients.json no longer allows."""
        for c in list(self.clients):
            if not self.registry.still_allowed(c.principal):
                await self._drop_revoked(c)

    async def _drop_revoked(self, c: Client) -> None:
        """Close the connection of a client revoked, paused or given other scopes
        (1008, the reason starting ``revoked:``) and cancel the turn it has running."""
        if c.dropped:
            return
        log.info("gateway.client_revoked", client=c.principal.name)
        ROOT_METRICS.inc("gateway.closed", {"reason": "revoked"})
        # The close frame says why (1008 with this reason): a frame queued
        # now would be cut off by the close.
        c.close_reason = (f"revoked: the client {c.principal.name!r} was revoked, "
                          "paused or given other scopes")[:120]
        c.dropped = True
        if c.session is not None:
            with trio.move_on_after(5):
                try:
                    await self.sup.request("agent", CancelTurn(
                        session=c.session, app=c.principal.app,
                        client=c.label), dict)
                except (RemoteError, RuntimeFailure):
                    pass
        if c.scope is not None:
            c.scope.cancel()

    @staticmethod
    async def _spawn(nursery: trio.Nursery, client: Client,
                     fn: Callable[..., Awaitable[None]], *args: Any,
                     slots: trio.Semaphore | None = None, rid: Any = None) -> None:
        """Start ``fn(*args)`` in ``nursery`` when ``client`` has a free slot (its
        ``server.clientInflight`` requests, or ``slots``); without one, answer the
        request (``rid``) with ``busy`` and run nothing (module docstring)."""
        sem = slots if slots is not None else client.inflight
        try:
            sem.acquire_nowait()
        except trio.WouldBlock:
            ROOT_METRICS.inc("gateway.refused", {"reason": "inflight"})
            client.push(ErrorFrame(code="busy", id=rid,
                                   message="too many requests in flight on this connection "
                                           "(the limit is server.clientInflight); wait for "
                                           "an answer, then send it again"))
            return

        async def run() -> None:
            try:
                await fn(*args)
            finally:
                sem.release()

        nursery.start_soon(run)

    async def _call(self, client: Client, rid: Any, call: Callable[[], Awaitable[Any]],
                    answer: type[CancelResult | SessionsResult | SessionResult | SessionDeleted
                                 | SessionRenamed]
                    ) -> None:
        try:
            data = await call()
        except RemoteError as exc:
            if exc.code == "forbidden":  # another app's session: logged under the app
                await self.sup.cast("memory", Refused(
                    client=client.label, op=_REQUEST_OF.get(answer, "session"),
                    outcome="forbidden"))
            client.push(ErrorFrame(code=exc.code, message=exc.message, id=rid))
            return
        except RuntimeFailure as exc:
            client.push(ErrorFrame(code="unavailable", message=str(exc), id=rid))
            return
        client.push(answer(id=rid, data=data))

    async def _say(self, client: Client, frame: Say) -> None:
        turn = f"t-{secrets.token_hex(5)}"  # unique across daemon runs (sessions outlive them)
        session = client.session
        assert session is not None
        try:
            await self.sup.request("agent", RunTurn(
                session=session, turn=turn, text=frame.text, debug=frame.debug,
                recalled=frame.recalled, client=client.label, app=client.principal.app,
                scopes=client.principal.turn_scopes), TurnResult)
            client.session_saved = True
        except RemoteError as exc:
            client.push(ErrorFrame(code=exc.code, message=exc.message, id=None))
        except (ActorUnavailable, RuntimeFailure) as exc:
            if turn not in self.finished_turns:
                reason = "shutdown" if self.sup.stopping else "error"
                self._to_session(session, TurnFinished(turn=turn, reason=reason,
                                                       message=str(exc)))
        finally:
            self.finished_turns.discard(turn)

    async def _memory(self, client: Client, frame: MemoryFrame) -> None:
        """One ``memory`` frame: its op and arguments as the op's request (an
        ``invalid_argument`` error frame naming the field when they do not fit), run
        through the typed memory client as this connection (its label, batch, and its
        session once that exists), answered with ``memory.result``."""
        try:
            request = decode_op(frame.op, frame.args)
            # A write names the session only once it exists (has a turn): a CLI or MCP
            # connection's unsaved session is no provenance.
            memory = actor_memory(self.sup.request, source="user",
                                  session=client.session if client.session_saved else None,
                                  batch=client.batch, client=client.label)
            data = await memory.run(request)
        except ValidationError as exc:
            client.push(MemoryResult(id=frame.id, ok=False,
                                     error={"code": exc.code, "message": str(exc)}))
            return
        except RemoteError as exc:
            client.push(MemoryResult(id=frame.id, ok=False,
                                     error={"code": exc.code, "message": exc.message}))
            return
        except RuntimeFailure as exc:
            client.push(MemoryResult(id=frame.id, ok=False,
                                     error={"code": "unavailable", "message": str(exc)}))
            return
        client.push(MemoryResult(id=frame.id, ok=True, data=data))

    async def metrics(self) -> dict[str, Any]:
        """Aggregate every running actor's metrics snapshot."""
        snaps: dict[str, dict[str, Any]] = {}
        for name in self.sup.names:
            try:
                with trio.fail_after(5):
                    snaps[name] = await self.sup.request(name, MetricsRequest(), dict)
            except (RuntimeFailure, trio.TooSlowError, KeyError):
                snaps[name] = {"error": "unavailable"}
        snaps["root"] = ROOT_METRICS.snapshot()  # the gateway's own (connections, text)
        out = merge_snapshots({k: v for k, v in snaps.items() if "error" not in v})
        out["actors"] = {k: v for k, v in snaps.items() if k != "root"}
        out["restarts"] = self.sup.restart_count
        out["clients"] = len(self.clients)
        out["tasks"] = {"root": live_tasks(), **{
            name: snap.get("gauges", {}).get("tasks") for name, snap in snaps.items()}}
        return out

    async def _metrics(self, client: Client) -> None:
        client.push(MetricsResult(**await self.metrics()))

    async def close_all(self) -> None:
        """Flush (bounded) and close every client connection (end of shutdown).

        Closing a client's queue ends its pump, which ends its handler, which closes
        the websocket (close frame, then the client's answer). This waits (≤ 1 s) for
        those handlers (flush and handshakes together ≤ 0.5 s, as the flush alone was
        before), so the close handshakes finish while the connections' reader tasks still
        run: cancelling them first left each ``aclose`` waiting out its 1 s bound for an
        answer nobody read (``bench/lifecycle.py``). A connection still open then (its
        client stopped reading) is cancelled."""
        for c in list(self.connections):
            c.send_ch.close()  # authenticated or still saying hello
        with trio.move_on_after(0.5):  # one bound for the flush and the close handshakes
            while any(c.recv_ch.statistics().current_buffer_used for c in self.connections):
                await trio.sleep(0.02)
            while self.connections:
                await trio.sleep(0.01)
        for c in list(self.connections):  # still open (a client that stopped reading)
            if c.scope is not None:
                c.scope.cancel()
