"""The agent actor: sessions, the turn loop, the prompt, memory tools.

One turn (``RunTurn``): abort the session's pending reflection → ``BuildContext``
from the memory actor (once per turn, not per step) → up to ``agent.maxSteps``
steps of: build prompt (stable prefix + tail) → LLM completion on the main slot,
grammar-constrained → parse the action → run the tool (memory tools are requests
to the memory actor) → record the result. Stops on ``reply``, ``finish`` or
``max_steps``. Every step and the reply are cast to the root as TurnEvents for
the session's clients. Then the session is persisted (ephemeral fields stripped)
and ``Reflect`` is cast to the reflection actor — fire-and-forget.

Turns of different sessions run in parallel; a second turn of a busy session is
refused with ``busy``; ``CancelTurn`` ends a turn at once with reason
``cancelled`` (the in-flight LLM request is cancelled with it); at shutdown running
turns end with reason ``shutdown``.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import apsw
import msgspec
import structlog
import trio

from actors.backfill.messages import (Relevance, RelevanceReply, Similarity,
                                      SimilarityReply)
from actors.memory import ops
from actors.memory.client import MemoryClient, actor_memory
from actors.memory.messages import (ApplyReflection, ApplyResult, Audited, BuildContext,
                                    BumpOutcomes, ForgetIn, Refused)
from actors.memory.ops import OPS, TOOL_NAMES, decode_op
from actors.policy.forget import forget_intent, request_targets
from actors.policy.introduction import introduced_name
from actors.policy.stance import asks_to_see
from actors.policy.write_guard import refusal, removal_refusal, spelled_call
from actors.reflection.messages import EARLIER_MAX, AbortPending, Foreground, Reflect, Surfaced
from actors.store.records import MemoryContext
from actors.store.tail import render_context
from actors.store.plans import RenderBudget
from actors.store.errors import StorageFailure, ValidationError
from actors.store.render import estimate_tokens
from actors.tools.messages import (CallTool, ToolCallResult, ToolsStatus, ToolsStatusReply,
                                   down_reason)
from runtime.kernel.actor import ActorContext
from runtime.kernel.errors import RemoteError, RuntimeFailure
from runtime.services.backends import BackendPool, backends_from_config, warm_prefix
from runtime.services.config import ActorBoot
from runtime.services.llm import (LLMContextOverflow, LLMError, LLMNotReady, LLMServerError,
                                  LLMUnavailable)
from runtime.services.metrics import Metrics, MetricsRequest
from runtime.services.tool_policy import PolicyBook, PolicyError, standing, what_changed
from runtime.services.tool_spec import ToolSpec

from .messages import (
    AgentMsg,
    ApprovalDone,
    ApprovalRequest,
    Approve,
    CancelTurn,
    DeleteSession,
    GetSession,
    ListApprovals,
    ListSessions,
    OpenSession,
    RenameSession,
    RunTurn,
    ReplyDelta,
    ReplyText,
    SessionInfo,
    Step,
    TurnEvent,
    TurnFinished,
    TurnFrame,
    TurnResult,
    TurnStarted,
    TurnTimings,
)
from .now import now_line
from .offer import offered_tools
from .prompt import (
    CLIP_MARKER,
    LAST_STEP_NOTICE,
    NOT_ALLOWED,
    REPLY_PREFILL,
    WARMING,
    Finish,
    Invalid,
    Reply,
    TailInput,
    ToolCall,
    action_grammar,
    agent_prompt,
    build_tail,
    call_prefill,
    enabled_tools,
    intro_prefill,
    not_run_opening,
    opening_prefill,
    parse_action,
    partial_reply,
    route_prefill,
    tool_outcome_text,
)
from .rewriter import Rewriter
from .toolbox import (argument_error, asked_for, fitting_tools, for_reading, gist,
                      names_server, rank_offer, redacted, render_tools, result_line)
from .sessions import Message, SessionState, SessionStore, session_title, valid_session_id

log = structlog.get_logger()
T = TypeVar("T")
OPENED_MAX = 10_000
"""Sessions opened by a hello but without a turn yet, remembered (oldest dropped first)."""
NOT_READY_POLL_S = 1.0
"""Seconds between tries while the LLM server loads its model or restarts; a turn waits
up to ``llm.startupTimeoutMs`` for a model loading (HTTP 503), then ends with the code
``llm_loading``."""
START_WAIT_S = 10.0
"""Longest wait (s) of a turn for the MCP servers' first start after the daemon's."""
UNREACHABLE_WAIT_S = 30.0
"""Longest wait (s) for an LLM server that refuses connections: the embedded server
restarts in seconds; a wrong URL should not hold every turn for minutes."""


class AgentError(Exception):
    """A refused agent request; ``code`` is sent to the client."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _may(msg: RunTurn, scope: str) -> bool:
    """Whether the app that started the turn holds ``scope`` (the owner holds all)."""
    return msg.scopes is None or scope in msg.scopes


@dataclass
class _Turn:
    turn: str
    scope: trio.CancelScope
    reason: str | None = None  # set by CancelTurn / shutdown before cancelling
    context_ms: float = 0.0  # rewrite + BuildContext + render
    llm_ms: float = 0.0  # every completion of the turn
    prompt_ms: float = 0.0  # the server's prompt processing (prefill), when it reports it
    prefill_tokens: int = 0  # prompt tokens the server processed (its cache excluded)
    prompt_tokens: int = 0  # prompt tokens of every completion, from the cache or not
    generated_tokens: int = 0  # tokens the server generated
    generation_ms: float = 0.0  # the server's generation time, when it reports it
    floor_ms: float = 0.0  # the last completion's server prompt + generation time
    steps: int = 0
    surfaced: list[Surfaced] = field(default_factory=list)  # memory items rendered
    zone: str | None = None  # the user's time zone, from the profile (agent/now.py)
    facts: dict[str, str] = field(default_factory=dict)  # key → value the context held
    notes: dict[int, str] = field(default_factory=dict)  # note id → content it held
    wrote: bool = False  # a memory tool call of the turn stored or updated something
    forgot: bool = False  # the turn removed something (its forget, a tool call)
    mcp: dict[str, ToolSpec] = field(default_factory=dict)  # MCP tools offered, by name
    mcp_known: dict[str, ToolSpec] = field(default_factory=dict)  # every MCP tool up
    tool_outcomes: list[tuple[str, str]] = field(default_factory=list)  # (server.tool, outcome)
    tool_errors: dict[str, str] = field(default_factory=dict)  # server.tool -> its error


@dataclass
class _Approval:
    """An approval request waiting for a person (:meth:`AgentActor._ask`)."""

    frame: ApprovalRequest
    app: str | None  # the app whose turn asks (an app answers only its own)
    done: trio.Event = field(default_factory=trio.Event)
    decision: str = "timeout"
    by: str = ""


def surfaced_items(mem: MemoryContext, sections: dict[str, str]) -> list[Surfaced]:
    """The memory items a turn's prompt actually shows: the
    recalled notes, profile facts, lessons and procedures whose rows survived the
    section budgets (``- #id``, ``- key:``, ``*id``, ``>id`` in the rendered text)."""
    def lines(name: str) -> list[str]:
        return sections.get(name, "").splitlines()

    def shown(name: str, head: str) -> bool:
        return any(ln == head or ln.startswith(head + " ") for ln in lines(name))

    out = [Surfaced("memory", n.id, n.content[:300]) for n in mem.recalled
           if shown("recalled", f"- #{n.id}")]
    out += [Surfaced("profile", f.id, f"{f.key}: {f.value}"[:300]) for f in mem.profile
            if any(ln.startswith(f"- {f.key}:") for ln in lines("profile"))]
    out += [Surfaced("profile", f.id, f"{f.key}: {f.value}"[:300]) for f in mem.session_facts
            if any(ln.startswith(f"- {f.key}:") for ln in lines("session-facts"))]
    out += [Surfaced("lesson", x.id, x.activation[:300]) for x in mem.lessons
            if shown("lessons", f"*{x.id}")]
    out += [Surfaced("procedure", x.id, x.activation[:300]) for x in mem.procedures
            if shown("procedures", f">{x.id}")]
    return out


@dataclass
class _Step:
    scratch: list[str] = field(default_factory=list)
    notice: str = ""


def _squeezed_window(exc: LLMContextOverflow, n_ctx: int, prompt: str) -> int:
    """The context window (tokens) to build a prompt for after the server refused one
    as too long: the server's own ``n_ctx`` when given, scaled by how much its token
    count exceeded our estimate of the refused prompt (:func:`estimate_tokens`), less
    a tenth; half of ``n_ctx`` when the server gave no numbers."""
    if exc.n_prompt_tokens and exc.n_ctx:
        estimate = max(1, estimate_tokens(prompt))
        ratio = min(1.0, estimate / exc.n_prompt_tokens)
        return max(1, int(exc.n_ctx * ratio * 0.9))
    return max(1, n_ctx // 2)


def _now() -> int:
    return int(time.time() * 1000)


_BOOKKEEPING = frozenset({"origin", "sessionId", "turnId", "recallCount", "lastRecalledAt",
                          "source", "supersededBy", "warning"})
"""Provenance and counters of notes and facts: for people and clients, not for the model
(a tool result keeps its 300 characters for content)."""


def _lean(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _lean(v) for k, v in data.items()
                if v is not None and k not in _BOOKKEEPING}
    if isinstance(data, list):
        return [_lean(v) for v in data]
    return data


def _summary(data: Any, limit: int = 300) -> str:
    """A tool result for the model: JSON without bookkeeping fields, ≤ ``limit`` chars."""
    text = json.dumps(_lean(msgspec.to_builtins(data)), ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _ReplyStream:
    """Turns streamed completion pieces into ``reply.delta`` events while the
    completion is a ``{"reply": "…"}`` action, or prose (a backend without grammars:
    prose is the reply) up to its first ``{``; other actions are not streamed."""

    def __init__(self, agent: "AgentActor", msg: RunTurn) -> None:
        self.agent = agent
        self.msg = msg
        self.pieces: list[str] = []
        self.sent = ""

    async def on_token(self, piece: str) -> None:
        self.pieces.append(piece)
        joined = "".join(self.pieces).lstrip()
        if not joined:
            return
        if joined[0] in "{`":
            text = partial_reply(joined)
        else:  # prose: parse_action takes text without any JSON object as the reply
            text = joined.split("{", 1)[0].rstrip()  # trailing space waits for more
        if text is not None and len(text) > len(self.sent):
            await self.agent._emit(self.msg.session, ReplyDelta(turn=self.msg.turn,
                                                                text=text[len(self.sent):]))
            self.sent = text


class AgentActor:
    """Handlers of the agent actor; see the module docstring."""

    def __init__(self, ctx: ActorContext, boot: ActorBoot, store: SessionStore,
                 llm: BackendPool | None) -> None:
        self.ctx = ctx
        self.boot = boot
        self.cfg = boot.config
        self.render_budget = RenderBudget.from_config(boot.config.memory)
        self.store = store
        self.llm = llm
        self.metrics = Metrics()
        self.llm_served = False  # a completion came back since start (see _complete)
        self.turns: dict[str, _Turn] = {}
        # Set once the start-up warm-up of the model's prompt cache is over (at once
        # without an embedded server): a turn that starts before it says so.
        self.warmed = trio.Event()
        self._foreground_seq = 0  # Foreground.seq of the last count cast
        # opened, no turn yet: id → (working dir, the app that opened it)
        self.opened: dict[str, tuple[str | None, str | None]] = {}
        self.db_lock = trio.Lock()
        self.n_ctx: int | None = None
        # The user's MCP servers (docs/tools.md): their tools are offered per message.
        self.mcp_on = any(sv.enabled for sv in self.cfg.tools.mcp_servers.values())
        self.prompt = agent_prompt(enabled_tools(self.cfg.memory), mcp=self.mcp_on)
        self.approvals: dict[str, _Approval] = {}  # waiting for a person, by request id
        self.rewriter = Rewriter(llm, self.cfg.memory.rewriter,
                                 similarity=self._similarity
                                 if self.cfg.memory.embeddings.enabled else None)
        self._decoder = msgspec.msgpack.Decoder(AgentMsg | MetricsRequest)

    # ------------------------------------------------------------------ dispatch
    async def on_request(self, src: str, body: msgspec.Raw) -> Any:
        match self._decoder.decode(body):
            case OpenSession() as msg:
                return await self._open_session(msg)
            case RunTurn() as msg:
                return await self._run_turn(msg)
            case CancelTurn(session=session) as msg:
                try:
                    await self._reach(session, msg.app)
                except AgentError:
                    await self._audit(msg.client or msg.app or "owner", "turn.cancel",
                                      session, "forbidden")
                    raise
                turn = self.turns.get(session)
                if turn is not None:
                    turn.reason = "cancelled"
                    turn.scope.cancel()
                    await self._audit(msg.client or msg.app or "owner", "turn.cancel",
                                      turn.turn)
                return {"cancelled": turn is not None}
            case ListSessions(limit=limit, app=app):
                return await self._db(self.store.list, limit, app)
            case DeleteSession(session=session, app=app):
                await self._reach(session, app)
                if session in self.turns:
                    raise AgentError("busy", "that session has a turn running")
                self.opened.pop(session, None)
                return {"removed": await self._db(self.store.delete, session)}
            case GetSession(session=session, messages=count, app=app):
                state = await self._reach(session, app)
                if state is None:
                    raise AgentError("not_found", f"no session {session!r} (sessions exist "
                                                  "once they have a turn)")
                shown = state.messages[-count:] if count > 0 else []
                return {"id": state.id, "title": session_title(state),
                        "createdAt": state.created_at,
                        "updatedAt": state.updated_at, "turns": state.turns,
                        "workingDir": state.working_dir,
                        "messages": [{"role": m.role, "text": m.text, "at": m.at}
                                     for m in shown]}
            case RenameSession(session=session, title=title, app=app):
                if len(title) > 200:
                    raise AgentError("invalid_argument", "a title is at most 200 characters")
                await self._reach(session, app)
                renamed = await self._db(self.store.rename, session, title)
                if renamed is None:
                    raise AgentError("not_found", f"no session {session!r} (sessions exist "
                                                  "once they have a turn)")
                return {"id": renamed.id, "title": session_title(renamed)}
            case Approve() as msg:
                return self._approve(msg)
            case ListApprovals(app=app):
                return [p.frame for p in self.approvals.values()
                        if app is None or p.app == app]
            case MetricsRequest():
                return self.metrics.snapshot()

    async def on_cast(self, src: str, body: msgspec.Raw) -> None:
        log.warning("agent.unexpected_cast", src=src)

    async def on_shutdown(self) -> None:
        """Running turns end with reason ``shutdown`` (their events reach clients)."""
        for turn in list(self.turns.values()):
            turn.reason = "shutdown"
            turn.scope.cancel()
        while self.turns:
            await trio.sleep(0.01)

    # ------------------------------------------------------------------ sessions
    async def _db(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a SessionStore call on a worker thread under ``db_lock``. A disk that
        refuses it (full, read-only, I/O error) becomes AgentError with code
        ``storage_full`` / ``storage_readonly`` / ``storage_error`` for this request only,
        never an actor crash; other apsw errors propagate."""
        async with self.db_lock:
            try:
                return await trio.to_thread.run_sync(fn, *args)
            except apsw.Error as exc:
                failure = StorageFailure.from_apsw(exc, what="the session")
                if failure is None:
                    raise
                log.error("agent.storage_failed", code=failure.code, error=str(exc))
                raise AgentError(failure.code, str(failure)) from None

    async def _load(self, session: str) -> SessionState | None:
        return await self._db(self.store.get, session)

    async def _save(self, state: SessionState) -> None:
        await self._db(self.store.save, state)

    async def _reach(self, session: str, app: str | None) -> SessionState | None:
        """The stored session ``session`` (None when it has no turn yet), if ``app`` may
        reach it: the owner (``app`` None) reaches every session, an app those it
        started. Raises AgentError ``forbidden`` otherwise."""
        state = await self._load(session)
        started_by = state.app if state is not None else self.opened.get(session, (None, None))[1]
        if app is not None and started_by != app and (state is not None or session in self.opened):
            raise AgentError("forbidden", f"the session {session!r} belongs to another app: "
                                          "an app reaches only the sessions it started")
        return state

    async def _refused(self, msg: RunTurn, op: str) -> None:
        """Record in the activity log that the turn of ``msg``'s app was refused ``op``
        for want of a scope."""
        try:
            await self.ctx.cast("memory", Refused(
                client=f"agent for {msg.client}" if msg.client else msg.app or "agent",
                op=op, outcome="forbidden"))
        except RuntimeFailure:
            pass

    async def _audit(self, client: str, op: str, what: str, outcome: str = "ok",
                     more: list[str] | None = None) -> None:
        """An activity-log entry for an action outside memory (``Audited``: ``what``,
        then ``more`` as its ids); a memory actor that is down misses it, the action
        stands."""
        try:
            await self.ctx.cast("memory", Audited(client=client, op=op,
                                                  ids=[what, *(more or [])],
                                                  outcome=outcome))
        except RuntimeFailure:
            pass

    async def _open_session(self, msg: OpenSession) -> SessionInfo:
        if msg.session is not None and not valid_session_id(msg.session):
            raise AgentError("invalid_argument",
                             "session ids are 1-64 characters of letters, digits, _ . -")
        if msg.session is not None:
            state = await self._reach(msg.session, msg.app)
            if state is not None:
                return SessionInfo(session=state.id, created=False, turns=state.turns)
            if msg.session in self.opened:  # opened by this app, no turn yet
                return SessionInfo(session=msg.session, created=True)
        # Not persisted until its first turn: a client that only reads memory, lists
        # sessions or watches leaves nothing behind.
        state = SessionStore.new(msg.session, msg.working_dir)
        self.opened[state.id] = (state.working_dir, msg.app)
        while len(self.opened) > OPENED_MAX:
            self.opened.pop(next(iter(self.opened)))
        return SessionInfo(session=state.id, created=True)

    # ---------------------------------------------------------------------- turns
    async def _emit(self, session: str, frame: TurnFrame) -> None:
        """Cast ``frame`` to the root for ``session``'s clients; a root that cannot take
        it (shutting down) loses it, the turn goes on."""
        try:
            await self.ctx.cast("root", TurnEvent(session=session, frame=frame))
        except RuntimeFailure:
            pass

    async def _tell_foreground(self) -> None:
        """Cast the number of running turns (the start-up warm-up counts as one) to the
        reflection actor, which holds its LLM calls back while it is above zero
        (docs/architecture.md §10, "Turns first"). A reflection actor that is down
        misses it; the turn goes on."""
        busy = len(self.turns) + (0 if self.warmed.is_set() else 1)
        # The system-wide monotonic clock: a restarted agent's counts stay newer.
        self._foreground_seq = max(self._foreground_seq + 1, time.monotonic_ns())
        try:
            await self.ctx.cast("reflection", Foreground(turns=busy, seq=self._foreground_seq))
        except RuntimeFailure:
            pass

    async def on_ready(self) -> None:
        """Warm the agent's slot with the stable prefix (persona and tool catalog) at
        start-up, so the first turn evaluates only its tail (embedded server only). The
        reflection actor's own warm-up waits for this one (:meth:`_tell_foreground`)."""
        try:
            await self._tell_foreground()
            if self.cfg.llm.url is None:
                await warm_prefix(self.llm, self.prompt.prefix, role="main",
                                  partition="agent:warmup")
        finally:
            self.warmed.set()
            with trio.CancelScope(shield=True):
                await self._tell_foreground()

    async def _run_turn(self, msg: RunTurn) -> TurnResult:
        if msg.session in self.turns:
            raise AgentError("busy", "a turn is already running in this session; "
                                     "wait for turn.finished or send cancel")
        state = await self._reach(msg.session, msg.app)
        if state is None:
            # Opened by a hello (OpenSession), first turn now; the gateway only runs turns
            # in sessions it opened, so an id it sends after an agent restart (which
            # forgets ``opened``) is created too, without its working directory.
            if not valid_session_id(msg.session):
                raise AgentError("invalid_argument", f"bad session id {msg.session!r}")
            working_dir, _ = self.opened.pop(msg.session, (None, None))
            state = SessionStore.new(msg.session, working_dir)
            state.app = msg.app
        if not msg.text.strip():
            raise AgentError("invalid_argument", "say.text must not be empty")
        turn = _Turn(turn=msg.turn, scope=trio.CancelScope())
        self.turns[msg.session] = turn
        t0 = time.monotonic()
        reason, reply = "error", ""
        failure: dict[str, Any] = {}  # turn.finished's code (and token numbers) on error
        try:
            await self._tell_foreground()
            await self.ctx.cast("reflection", AbortPending(session=msg.session))
            await self._emit(msg.session, TurnStarted(turn=msg.turn))
            with turn.scope:
                reason, reply = await self._turn_body(msg, state)
            if turn.scope.cancelled_caught:
                reason = turn.reason or "cancelled"
        except (LLMError, RuntimeFailure) as exc:
            reason = "error"
            code = getattr(exc, "code", None) if isinstance(exc, LLMError) else None
            log.warning("agent.turn_error", session=msg.session, error=str(exc), code=code)
            self.metrics.inc("agent.turn_errors", {"code": code or type(exc).__name__})
            failure = {"code": code or None}
            if isinstance(exc, LLMContextOverflow):
                failure.update(n_prompt_tokens=exc.n_prompt_tokens, n_ctx=exc.n_ctx)
            await self._emit(msg.session, Step(turn=msg.turn, step="error",
                                               message=str(exc)[:1000], **failure))
        finally:
            with trio.CancelScope(shield=True):
                # Persist first, announce after: a client that saw turn.finished can
                # rely on the exchange being in sessions.sqlite, whatever crashes next
                # (nothing acknowledged is ever lost). Shielded, so it completes
                # even if the caller gave up; the 5 s bound covers waiting for the
                # database lock (a save already running in its thread is not interrupted).
                state.messages.append(Message("user", msg.text, _now()))
                if reply:
                    state.messages.append(Message("assistant", reply, _now()))
                state.turns += 1
                state.updated_at = _now()
                unsaved = ""
                with trio.move_on_after(5) as saving:
                    try:
                        await self._save(state)
                    except Exception as exc:  # noqa: BLE001 - say so, never claim success
                        unsaved = f"{type(exc).__name__}: {exc}"
                if saving.cancelled_caught:
                    unsaved = "the sessions database was busy for more than 5 s"
                if unsaved:
                    log.error("agent.session_save_failed", session=msg.session, error=unsaved)
                    reason = "error"
                    await self._emit(msg.session, Step(
                        turn=msg.turn, step="error",
                        message=f"the exchange was not saved: {unsaved}"[:1000]))
                if reply:
                    await self._emit(msg.session, ReplyText(turn=msg.turn, text=reply))
                await self._emit(msg.session, TurnFinished(
                    turn=msg.turn, reason=reason, **(failure if reason == "error" else {}),
                    timings=TurnTimings(total_ms=round((time.monotonic() - t0) * 1000, 2),
                                        context_ms=round(turn.context_ms, 2),
                                        llm_ms=round(turn.llm_ms, 2),
                                        prompt_ms=round(turn.prompt_ms, 2),
                                        prefill_tokens=turn.prefill_tokens,
                                        steps=turn.steps,
                                        prompt_tokens=turn.prompt_tokens,
                                        generated_tokens=turn.generated_tokens,
                                        generation_ms=round(turn.generation_ms, 2),
                                        floor_ms=round(turn.floor_ms, 2))))
                self.turns.pop(msg.session, None)
                await self._tell_foreground()
        latency = (time.monotonic() - t0) * 1000
        self.metrics.inc("agent.turns", {"reason": reason})
        log.info("agent.turn_finished", session=msg.session, turn=msg.turn, reason=reason,
                 latency_ms=round(latency, 1))
        self.metrics.observe("agent.turn.latency_ms", latency)
        # Handing the exchange to reflection completes even if the caller gave up.
        # Every finished exchange is reflected on, also one that ended with ``finish``
        # or at ``max_steps`` ("forget that …" often ends without a reply).
        if reason in ("reply", "finish", "max_steps") and self.cfg.memory.after_turn_calls():
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                earlier = [m.text for m in state.messages[:-1] if m.role == "user"]
                if earlier and earlier[-1] == msg.text:
                    earlier = earlier[:-1]
                await self.ctx.cast("reflection", Reflect(
                    session=msg.session, turn=msg.turn, user_message=msg.text,
                    assistant_reply=reply, earlier=earlier[-EARLIER_MAX:],
                    surfaced=turn.surfaced, turn_index=state.turns, client=msg.client,
                    agent_wrote=turn.wrote, agent_forgot=turn.forgot,
                    may_forget=_may(msg, "forget"),
                    tool_calls=list(dict.fromkeys(q for q, _o in turn.tool_outcomes))))
        await self._bump_outcomes(turn, reason)
        return TurnResult(turn=msg.turn, reason=reason, reply=reply)

    async def _bump_outcomes(self, turn: _Turn, reason: str) -> None:
        """Each lesson and procedure the turn surfaced gets one success
        (``reply`` / ``finish``) or one failure (``error``); ``cancelled`` and
        ``max_steps`` bump nothing. Off the reply's path; a failure is only logged."""
        lessons = [x.id for x in turn.surfaced if x.kind == "lesson"]
        procedures = [x.id for x in turn.surfaced if x.kind == "procedure"]
        if not (lessons or procedures) or reason not in ("reply", "finish", "error"):
            return
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            try:
                await self.ctx.request("memory", BumpOutcomes(
                    lesson_ids=lessons, procedure_ids=procedures,
                    success=reason != "error"), int)
            except RuntimeFailure as exc:
                log.warning("agent.outcome_bump_failed", error=str(exc))

    async def _similarity(self, a: str, b: str) -> tuple[float, float] | None:
        """Cosine of ``a`` and ``b`` from the backfill actor's embedder (purpose
        ``similarity``) and the model's floor; None when it has no embedder or does not
        answer within 2 s (then the rewrite is not checked)."""
        try:
            with trio.fail_after(2):
                reply = await self.ctx.request("backfill", Similarity(a=a, b=b),
                                               SimilarityReply)
        except (RuntimeFailure, trio.TooSlowError) as exc:
            log.debug("agent.similarity_unavailable", error=str(exc))
            return None
        return None if reply.cosine is None else (reply.cosine, reply.min_cosine)

    async def _recall_query(self, msg: RunTurn, state: SessionState) -> str | None:
        """The rewriter's recall query for this turn, or None to recall with the raw
        message (``rewriter`` module). Counted in
        ``agent.memory.rewriter{outcome}``; a rewrite is shown as a ``rewrite`` step."""
        history = [(m.role, m.text) for m in state.messages]
        t0 = time.monotonic()
        query, outcome = await self.rewriter.rewrite(msg.session, msg.text, history)
        self.metrics.inc("agent.memory.rewriter", {"outcome": outcome})
        if outcome not in ("skipped_disabled", "skipped_no_history", "skipped_not_referential"):
            self.metrics.observe("agent.memory.rewriter.latency_ms",
                                 (time.monotonic() - t0) * 1000)
        if query == msg.text:
            return None
        await self._emit(msg.session, Step(turn=msg.turn, step="rewrite", query=query))
        return query

    async def _memory_context(self, msg: RunTurn, state: SessionState) -> dict[str, str]:
        t0 = time.monotonic()
        # Notes given by the client: nothing is recalled, so nothing to rewrite.
        recall_query = None if msg.recalled is not None else await self._recall_query(msg, state)
        try:
            with trio.fail_after(10):
                mem = await self.ctx.request("memory", BuildContext(
                    session=msg.session, user_message=msg.text, working_dir=state.working_dir,
                    recall_query=recall_query, recalled=msg.recalled, client=msg.client),
                    MemoryContext)
        except (RuntimeFailure, trio.TooSlowError) as exc:
            log.warning("agent.memory_context_failed", error=str(exc))
            return {}
        turn = self.turns.get(msg.session)
        if turn is not None:
            turn.zone = mem.zone
            # What a removal tool may be judged against (removal_refusal).
            turn.facts = {f.key: f.value for f in [*mem.profile, *mem.session_facts]}
            turn.notes = {n.id: n.content for n in [*mem.recalled, *mem.index]}
        state.recalled_notes = [n.id for n in mem.recalled]
        state.memory_index = [n.id for n in mem.index]
        state.known_facts = [f.id for f in mem.session_facts]
        sections = render_context(mem, self.render_budget, message=msg.text)
        if turn is not None:
            turn.surfaced = surfaced_items(mem, sections)
        elapsed = (time.monotonic() - t0) * 1000
        self.metrics.observe("agent.memory.context_ms", elapsed)
        if turn is not None:
            turn.context_ms = elapsed
        return sections

    async def _context_window(self) -> int:
        """The model's context window (tokens): ``/props`` of the first backend when it
        reports one, else ``llm.ctxSize``; resolved once."""
        if self.n_ctx is None:
            reported = await self.llm.context_window() if self.llm is not None else None
            self.n_ctx = reported or self.cfg.llm.ctx_size
        return self.n_ctx

    async def _complete(self, msg: RunTurn, tail: str, n: int, last: int,
                        stream: _ReplyStream, tools: tuple[str, ...],
                        intro: tuple[str, str] | None = None, must_call: bool = False,
                        opening: str = "") -> Any:
        """One completion of step ``n`` on the main slot, streamed through ``stream``;
        the action grammar offers ``tools`` only (:mod:`actors.agent.offer`). A step
        that offers no tool, and the last step, must reply: the reply's opening is
        put in the model's mouth (:data:`~actors.agent.prompt.REPLY_PREFILL`), with a
        greeting by name when the message introduces the user (``intro``: name and
        language, :func:`~actors.agent.prompt.intro_prefill`) or the words ``opening``
        (:func:`~actors.agent.prompt.not_run_opening`). ``must_call``: the step must call
        one of ``tools`` (:func:`~actors.agent.prompt.call_prefill`)."""
        assert self.llm is not None  # _turn_body refuses a turn without one
        must_reply = (n == last and last > 1) or not tools
        must_call = must_call and not must_reply
        waited_since: float | None = None
        while True:
            try:
                completion = await self.llm.complete(
                    msg.session, self.prompt.prefix, tail, role="main",
                    grammar=(self.prompt.reply_grammar if must_reply
                             else action_grammar(tools)),
                    n_predict=self.cfg.llm.n_predict, temperature=self.cfg.llm.temperature,
                    on_token=stream.on_token,
                    prefill=(opening_prefill(opening) if opening else
                             intro_prefill(*intro) if intro else REPLY_PREFILL)
                    if must_reply else call_prefill(tools) if must_call else None)
                self.llm_served = True
                return completion
            except (LLMUnavailable, LLMServerError) as exc:
                # The model still loading (503), or a server that has answered before
                # restarting (refused): wait for it, saying so once, instead of failing
                # the turn at once. A server never reached (a wrong URL) fails at once.
                if stream.pieces or (isinstance(exc, LLMServerError) and exc.status != 503) \
                        or (isinstance(exc, LLMUnavailable) and not self.llm_served):
                    raise
                now = trio.current_time()
                limit = self.cfg.llm.startup_timeout_ms / 1000
                if isinstance(exc, LLMUnavailable):  # a restart, not a wrong URL forever
                    limit = min(limit, UNREACHABLE_WAIT_S)
                if waited_since is None:
                    waited_since = now
                    log.info("agent.llm_not_ready", session=msg.session, error=str(exc))
                    await self._emit(msg.session, Step(
                        turn=msg.turn, step="notice",
                        message="the model is still loading (or its server is restarting); "
                                f"waiting up to {limit:.0f} s"))
                elif now - waited_since >= limit:
                    raise LLMNotReady(f"the model was not ready within {limit:.0f} s "
                                      f"(llm.startupTimeoutMs): {exc}", url=exc.url,
                                      status=exc.status) from None
                await trio.sleep(NOT_READY_POLL_S)

    async def _turn_body(self, msg: RunTurn, state: SessionState) -> tuple[str, str]:
        if self.llm is None:
            raise AgentError("no_llm", "no LLM is configured (set llm.url)")
        if not self.warmed.is_set():
            await self._emit(msg.session, Step(turn=msg.turn, step="notice", message=WARMING))
        forgot = await self._forget_requested(msg)
        memory = await self._memory_context(msg, state)
        if forgot is not None:
            memory = {**memory, "forgot": forgot}
        # Greeted by name (actors/policy/introduction.py) unless memory knows a name
        # already: "Small correction: it's Anna" is no introduction.
        turn_facts = self.turns[msg.session].facts if msg.session in self.turns else {}
        intro = None if "name" in turn_facts else introduced_name(msg.text)
        if intro is not None:
            memory = {**memory, "intro": intro[0]}
        keep = self.cfg.agent.history_messages
        history = [(m.role, m.text) for m in state.messages[-keep:]] if keep else []
        history.append(("user", msg.text))
        step = _Step()
        n_ctx = await self._context_window()
        last = self.cfg.agent.max_steps
        turn_zone = self.turns[msg.session].zone if msg.session in self.turns else None
        called: list[str] = []
        outputs = 0  # tool results that came back with text of their own
        mcp = await self._offer_mcp(msg)
        turn_state = self.turns.get(msg.session)
        for n in range(1, last + 1):
            if n == last and last > 1:
                step.notice = (step.notice + " " + LAST_STEP_NOTICE).strip()
            notice = step.notice
            # the user's tools that fit the message, not yet called — none on the last
            # step, and none once one was not run (the reply then says so, first)
            outcomes_so_far = turn_state.tool_outcomes if turn_state is not None else []
            refused = not_run_opening(outcomes_so_far, turn_state.tool_errors
                                      if turn_state is not None else None)
            open_mcp = [] if (n == last and last > 1) or refused else [
                spec for q, spec in mcp.items() if q not in called]
            outcomes = tool_outcome_text(outcomes_so_far)

            def tail_for(window: int, shown: dict[str, str]) -> str:
                return build_tail(TailInput(
                    memory=shown, history=history, scratch=step.scratch, notice=notice,
                    world=(f"working directory: {state.working_dir or '(none)'}\n"
                           + now_line(turn_zone)),
                    tools=render_tools(open_mcp), tool_outcomes=outcomes,
                    context_window=window, reply_reserve=self.cfg.llm.n_predict,
                    conversation_max_tokens=self.cfg.agent.conversation_max_tokens))

            tail = tail_for(n_ctx, memory)
            if n == 1 and CLIP_MARKER in tail and CLIP_MARKER not in msg.text:
                await self._emit(msg.session, Step(
                    turn=msg.turn, step="notice",
                    message="your message is longer than the model's context holds: its "
                            "middle was left out of the prompt (the conversation keeps it "
                            "whole)"))
            if msg.debug:
                await self._emit(msg.session, Step(turn=msg.turn, step="prompt", n=n, tail=tail))
            log.debug("agent.prompt_tail", session=msg.session, step=n, tail=tail)
            step.notice = ""
            turn = self.turns[msg.session]
            turn.steps = n
            t_llm = time.monotonic()
            tools = offered_tools(self.prompt.tools, msg.text, memory, called)
            if forgot and forgot != "nothing":  # the request is done: nothing to remove
                tools = tuple(t for t in tools if OPS[t].guard != "removal")
            tools += tuple(spec.qualified for spec in open_mcp)
            if refused:  # the reply says it, now
                tools = ()
            must_call = False
            if open_mcp and not turn.tool_outcomes and not (n == last and last > 1) \
                    and self.cfg.tools.ask_first and self.llm is not None \
                    and self.llm.prefills:
                # the first step that offers the user's tools: the model says first
                # which one the message needs, if any (route_prefill), then calls it
                chosen = await self._needs_tool(msg, tail,
                                                tuple(s.qualified for s in open_mcp))
                must_call = chosen is not None
                mcp_names = {spec.qualified for spec in open_mcp}
                tools = (chosen,) if chosen else tuple(t for t in tools if t not in mcp_names)
            try:
                stream = _ReplyStream(self, msg)
                completion = await self._complete(msg, tail, n, last, stream, tools, intro,
                                                  must_call, refused)
            except LLMContextOverflow as exc:
                # The server counted more tokens than our estimate: once, the
                # same step again in the window it says it has, scaled by how far off
                # the estimate was, with only the profile of memory; then the error.
                window = _squeezed_window(exc, n_ctx, self.prompt.prefix + tail)
                log.warning("agent.context_overflow", session=msg.session, window=window,
                            n_prompt_tokens=exc.n_prompt_tokens, n_ctx=exc.n_ctx)
                self.metrics.inc("agent.context_overflow", {"retried": "yes"})
                tail = tail_for(window, {"profile": memory.get("profile", "")})
                stream = _ReplyStream(self, msg)
                completion = await self._complete(msg, tail, n, last, stream, tools, intro,
                                                  must_call, refused)
            turn.llm_ms += (time.monotonic() - t_llm) * 1000
            turn.prompt_ms += completion.prompt_ms or 0.0
            turn.prefill_tokens += completion.prompt_n or 0
            turn.prompt_tokens += completion.tokens_evaluated
            turn.generated_tokens += completion.tokens_predicted
            turn.generation_ms += completion.predicted_ms or 0.0
            turn.floor_ms = (completion.prompt_ms or 0.0) + (completion.predicted_ms or 0.0)
            match parse_action(completion.text):
                case Reply(text=text) if text.strip():
                    return "reply", text.strip()
                case Finish(text=text):
                    await self._emit(msg.session, Step(turn=msg.turn, step="finish", n=n,
                                                       text=text))
                    return "finish", ""
                case ToolCall(name=name, args=args) if name in mcp or name in turn.mcp_known:
                    called.append(name)
                    await self._emit(msg.session, Step(turn=msg.turn, step="tool", n=n,
                                                       tool=name, args=args))
                    line, outcome, summary = await self._call_mcp(
                        msg, mcp.get(name) or turn.mcp_known[name], args,
                        offered=name in mcp, after_output=outputs > 0,
                        best=next(iter(mcp), None))
                    await self._emit(msg.session, Step(turn=msg.turn, step="tool.result", n=n,
                                                       tool=name, summary=summary,
                                                       outcome=outcome))
                    step.scratch.append(line)
                    if outcome in ("ok", "error"):  # the server answered: its text is in
                        outputs += 1
                    if outcome == "invalid":  # it may try again with arguments that fit
                        called.remove(name)
                case ToolCall(name=name, args=args):
                    called.append(name)
                    await self._emit(msg.session, Step(turn=msg.turn, step="tool", n=n,
                                                       tool=name, args=args))
                    result = await self._call_tool(msg, name, args)
                    outputs += 1  # (memory's text: notes anyone with write access stored)
                    await self._emit(msg.session, Step(turn=msg.turn, step="tool.result", n=n,
                                                       tool=name, summary=result))
                    step.scratch.append(f"TOOL {name} {json.dumps(args, ensure_ascii=False)}"
                                        f" -> {result}")
                case Reply():
                    step.notice = "Your reply was empty. Answer the user with a non-empty reply."
                case Invalid(reason=why):
                    step.notice = (f"Your last output was not a valid action ({why}). "
                                   'Answer with one JSON object such as {"reply": "..."}.')
                    await self._emit(msg.session, Step(turn=msg.turn, step="invalid", n=n,
                                                       reason=why))
        return "max_steps", ""

    # --------------------------------------------------------- the user's MCP tools
    async def _offer_mcp(self, msg: RunTurn) -> dict[str, ToolSpec]:
        """The user's MCP tools this turn offers (docs/tools.md), by qualified name: those
        of the servers that are up which fit the message best
        (:func:`~actors.agent.toolbox.fitting_tools`, words; only the read-only ones
        for a message that asks to see, :func:`~actors.agent.toolbox.for_reading`;
        ordered by words and meaning, less those that share a word by chance,
        :meth:`_rank_offer`; at most ``tools.offerMax``), less the ones whose standing
        policy is ``deny``. Every tool up is remembered in the
        turn (``mcp_known``), so a call to one not offered is answered as such. A turn
        while a server's first start is still going waits for it up to
        :data:`START_WAIT_S`. None when no server is configured, the tools actor does not
        answer, or the turn's app lacks the ``tools`` scope (then said in a notice when
        a tool fit)."""
        turn = self.turns.get(msg.session)
        if not self.mcp_on or turn is None or self.cfg.tools.offer_max == 0:
            return {}
        status: ToolsStatusReply | None = None
        try:
            # a turn right after start waits for the servers' first start (a second or
            # two), rather than answering without the tool the user asked for
            with trio.move_on_after(START_WAIT_S):
                status = await self.ctx.request("tools", ToolsStatus(wait=True),
                                                ToolsStatusReply)
            if status is None:
                with trio.fail_after(2):
                    status = await self.ctx.request("tools", ToolsStatus(), ToolsStatusReply)
        except (RemoteError, RuntimeFailure, trio.TooSlowError) as exc:
            log.warning("agent.tools_unavailable", error=str(exc))
            return {}
        specs = [t for sv in status.servers if sv.state == "up" for t in sv.tools]
        turn.mcp_known = {t.qualified: t for t in specs}
        for sv in status.servers:
            if sv.state in ("down", "starting") and names_server(sv.name, msg.text):
                # the user asked for what a server that is not up gives: the reply
                # says so first, rather than answering from nothing
                turn.tool_outcomes.append((sv.name, "down"))
                await self._emit(msg.session, Step(
                    turn=msg.turn, step="notice",
                    message=f"MCP server {sv.name!r} is {sv.state}"
                            + (f": {down_reason(sv.name, sv.error)}" if sv.error else "")
                            + "; its tools were not offered"))
        book = await self._policies()
        denied = set() if book is None else {
            t.qualified for t in specs if standing(t, book.entry(t.qualified)).policy == "deny"}
        k = self.cfg.tools.offer_max
        reading = asks_to_see(msg.text)
        ranked = fitting_tools(specs, msg.text, len(specs))  # every tool up, denied too
        if ranked and denied and not reading:
            await self._denied_fit(msg, turn, ranked[0][0], denied)
        fitting = [(t, score) for t, score in ranked if t.qualified not in denied][:2 * k]
        if fitting and reading:
            fitting = for_reading(fitting)
        chosen = await self._rank_offer(msg.text, fitting, k)
        if chosen and not _may(msg, "tools"):
            await self._refused(msg, "turn.tools")
            await self._emit(msg.session, Step(
                turn=msg.turn, step="notice",
                message=f"your tools were not offered: the app {msg.app or msg.client!r} "
                        "may not use them (its token lacks the tools scope)"))
            return {}
        return {t.qualified: t for t in chosen}

    async def _denied_fit(self, msg: RunTurn, turn: _Turn, best: ToolSpec,
                          denied: set[str]) -> None:
        """When a message that asks for a change (not only to see) is done best by a
        tool the user denied — ``best`` fits it best by words, is in ``denied``, changes
        something and the message names it (:func:`~actors.agent.toolbox.asked_for`) —
        record it as denied in the turn (the reply then opens "I did not run …: you did
        not allow it." rather than reaching for another tool) and tell the client how
        to be asked instead."""
        if best.qualified not in denied or best.read_only or not asked_for(best, msg.text):
            return
        q = best.qualified
        turn.tool_outcomes.append((q, "denied"))
        self.metrics.inc("agent.tools.decided", {"outcome": "denied"})
        await self._emit(msg.session, Step(
            turn=msg.turn, step="notice",
            message=f"{q} was not run: your standing policy denies it (atomic-agent tools "
                    f"ask {q} to be asked each time instead)"))

    async def _rank_offer(self, text: str, fitting: list[tuple[ToolSpec, float]],
                          k: int) -> list[ToolSpec]:
        """The ``k`` tools of ``fitting`` to offer (:func:`~actors.agent.toolbox.
        rank_offer`): the backfill actor's embedder gives the cosines of ``text`` with
        each tool's gist, its model's catalog the chance floor. The words' order alone
        when there is no embedder or it does not answer within 5 s (it answers at once
        but in the daemon's first seconds, when it waits for the embedder to attach).
        Tools dropped as chance are counted in ``agent.tools.chance``."""
        if not fitting:
            return []
        reply = RelevanceReply()
        try:
            # (up to 4 s more only in the daemon's first seconds, while the embedder
            # attaches: actors.backfill.actor.RELEVANCE_WAIT_S)
            with trio.fail_after(5):
                reply = await self.ctx.request("backfill", Relevance(
                    text=text, others=[gist(t) for t, _score in fitting]), RelevanceReply)
        except (RuntimeFailure, trio.TooSlowError) as exc:
            log.debug("agent.relevance_unavailable", error=str(exc))
        chosen = rank_offer(fitting, reply.cosines, reply.chance_cosine, len(fitting))
        if len(chosen) < len(fitting):
            self.metrics.inc("agent.tools.chance", by=len(fitting) - len(chosen))
            log.info("agent.tools_by_chance", dropped=[
                t.qualified for t, _score in fitting if t not in chosen])
        return chosen[:k]

    async def _needs_tool(self, msg: RunTurn, tail: str,
                          offered: tuple[str, ...]) -> str | None:
        """The one of ``offered`` the model, asked in its own mouth (:func:`~actors.agent.
        prompt.route_prefill`, a name or ``none`` under a grammar), says the message
        needs; None for none. The prompt is the step's own, so the server's cache holds
        all but the question. Counted in ``agent.tools.route{answer}`` (``tool`` or
        ``none``); an LLM error is the step's to meet, so it says none."""
        assert self.llm is not None
        route = route_prefill(offered)
        try:
            done = await self.llm.complete(
                msg.session, self.prompt.prefix, tail, role="main", grammar=None,
                n_predict=16, temperature=0.0, prefill=route)
        except LLMError as exc:
            log.warning("agent.tools_route_failed", error=str(exc))
            return None
        answer = done.text[len(route.text):].strip()
        chosen = answer if answer in offered else None
        self.metrics.inc("agent.tools.route", {"answer": "tool" if chosen else "none"})
        return chosen

    async def _policies(self) -> PolicyBook | None:
        """``<state>/tool-policies.json``, read now (the CLI and the dashboard change
        it); None, logged, when it cannot be read (every call then asks)."""
        try:
            return await trio.to_thread.run_sync(PolicyBook, self.boot.path)
        except PolicyError as exc:
            log.error("agent.tool_policies_unreadable", error=str(exc))
            return None

    async def _call_mcp(self, msg: RunTurn, spec: ToolSpec, args: dict[str, Any], *,
                        offered: bool, after_output: bool,
                        best: str | None) -> tuple[str, str, str]:
        """Decide and make one call of an MCP tool (docs/tools.md, "How a turn uses
        them"): not offered → refused; arguments checked against its schema; its
        standing policy — ``deny`` refuses, ``allow`` runs, ``ask`` asks the session's
        clients (:meth:`_ask`) — except that an allowed tool asks too when the call
        comes after a tool's output entered the prompt (``after_output``) and the user's
        message did not ask for it: neither names it
        (:func:`~actors.agent.toolbox.asked_for`) nor fits it best of all tools
        (``best``, the first offered). Returns (the scratch line the model reads, the
        outcome, a short summary for the clients); never raises but for cancellation.
        Each decided call is in the activity log and counted in
        ``agent.tools.decided{outcome}`` (the tools actor counts the calls it makes)."""
        q = spec.qualified
        turn = self.turns.get(msg.session)
        t0 = time.monotonic()

        def done(outcome: str, text: str) -> tuple[str, str, str]:
            if turn is not None:
                turn.tool_outcomes.append((q, outcome))
                if outcome == "error":
                    turn.tool_errors[q] = text
            self.metrics.inc("agent.tools.decided", {"outcome": outcome})
            line = result_line(q, args, text, failed=outcome != "ok",
                               from_tool=outcome == "error")
            return line, outcome, " ".join(text.split())[:300]

        if not offered:
            return done("invalid", f"{q} is not offered in this turn (the user's message "
                                   "does not call for it); answer the user instead")
        if not _may(msg, "tools"):
            return done("forbidden", "the app the user talks through may not use tools")
        why = argument_error(spec, args)
        if why is not None:
            return done("invalid", f"invalid arguments: {why}; call it again with "
                                   "arguments that fit, or answer the user")
        book = await self._policies()
        entry = book.entry(q) if book is not None else None
        held = standing(spec, entry)
        decision = "allow"
        if held.policy == "deny":
            decision = "policy-deny"
        elif held.policy == "ask" or book is None or (
                after_output and q != best and not asked_for(spec, msg.text)):
            ask_why = ("changed" if held.reason == "changed" else
                       "policy" if held.policy == "ask" or book is None else "after_tool_result")
            decision, by = await self._ask(msg, spec, args, ask_why)
            if decision == "always" and book is not None:
                try:
                    await trio.to_thread.run_sync(book.decide, spec, "allow", by or "owner")
                except PolicyError as exc:
                    log.error("agent.tool_policy_unsaved", error=str(exc))
        audit_ids: list[str] = [q, "args=" + json.dumps(redacted(args), ensure_ascii=False)[:200],
                                f"decision={decision}"]
        if held.reason == "changed" and entry is not None:
            audit_ids.append(f"changed since it was decided: its {what_changed(spec, entry)}")
        if decision in ("policy-deny", "deny", "timeout", "unanswerable"):
            outcome = decision if decision in ("timeout", "unanswerable") else "denied"
            await self._audit_call(msg, audit_ids, outcome)
            return done(outcome, "not run: " + (
                "its policy is deny" if decision == "policy-deny" else
                "the user did not answer in time" if decision == "timeout" else
                "no one can approve it here" if decision == "unanswerable" else
                "the user denied it") + "; tell the user it was not done")
        timeout = self.cfg.tools.mcp_servers[spec.server].timeout_ms / 1000 \
            if spec.server in self.cfg.tools.mcp_servers else 30.0
        try:
            with trio.fail_after(timeout + 5):
                res = await self.ctx.request("tools", CallTool(
                    server=spec.server, tool=spec.name, arguments=args), ToolCallResult)
        except (RemoteError, RuntimeFailure, trio.TooSlowError) as exc:
            res = ToolCallResult(ok=False, error=f"the tools actor did not answer ({exc})")
        elapsed = (time.monotonic() - t0) * 1000  # (the tools actor times the call itself)
        outcome = "ok" if res.ok and not res.is_error else "error"
        await self._audit_call(msg, audit_ids + [f"ms={round(res.duration_ms or elapsed)}"],
                               outcome)
        return done(outcome, res.text if res.ok else res.error)

    async def _audit_call(self, msg: RunTurn, ids: list[str], outcome: str) -> None:
        """The activity log's ``tool.call`` entry: the tool, its arguments with secrets
        redacted, the decision, the duration; ``outcome`` ``ok``, ``error``, ``denied``
        or ``timeout``."""
        await self._audit(msg.client or msg.app or "owner", "tool.call", ids[0], outcome,
                          more=ids[1:])

    async def _ask(self, msg: RunTurn, spec: ToolSpec, args: dict[str, Any],
                   why: str) -> tuple[str, str]:
        """Ask the session's clients whether to run this call: an ``approval.request``
        turn frame, then wait up to ``tools.approvalTimeoutMs`` for an answer
        (:class:`~actors.agent.messages.Approve`). Returns (decision — ``once``,
        ``always``, ``deny``, ``timeout`` or ``unanswerable`` —, who answered).
        ``approval.done`` tells every client it is over. A turn no one can answer
        (``RunTurn.answerable`` false: the OpenAI-compatible API) is denied at once."""
        if not msg.answerable:  # no one could answer: no wait
            self.metrics.inc("agent.tools.approvals", {"why": "unanswerable"})
            return "unanswerable", ""
        timeout_ms = self.cfg.tools.approval_timeout_ms
        request = secrets.token_hex(8)
        pending = _Approval(ApprovalRequest(
            turn=msg.turn, request=request, session=msg.session, server=spec.server,
            tool=spec.name, args=args, description=spec.description[:2000], pin=spec.pin,
            why=why, read_only=spec.read_only, timeout_ms=timeout_ms), app=msg.app)
        self.approvals[request] = pending
        self.metrics.inc("agent.tools.approvals", {"why": why})
        decided = "cancelled"  # (unless it is answered or times out)
        try:
            await self._emit(msg.session, pending.frame)
            with trio.move_on_after(timeout_ms / 1000):
                await pending.done.wait()
            decided = pending.decision  # "timeout" when no one answered
        finally:
            self.approvals.pop(request, None)
            with trio.CancelScope(shield=True):
                await self._emit(msg.session, ApprovalDone(turn=msg.turn, request=request,
                                                           decision=decided, by=pending.by))
        return pending.decision, pending.by

    def _approve(self, msg: Approve) -> dict[str, bool]:
        """Answer a pending approval (:class:`~actors.agent.messages.Approve`)."""
        pending = self.approvals.get(msg.request)
        if pending is None or pending.done.is_set() or (
                msg.session is not None and msg.session != pending.frame.session):
            return {"resolved": False}
        if msg.app is not None and pending.app != msg.app:
            raise AgentError("forbidden", "an app answers only the approvals of its own "
                                          "sessions")
        pending.decision = ("unanswerable" if msg.unanswerable and msg.decision == "deny"
                            else msg.decision)
        pending.by = msg.client or msg.app or "owner"
        pending.done.set()
        return {"resolved": True}

    async def _forget_requested(self, msg: RunTurn) -> str | None:
        """Forget what the user's message asks to forget, before the reply, so the reply
        can say what was done: the request's targets
        (:func:`actors.policy.forget.request_targets`) go to memory as one forget (facts
        named by value or by a key of the same meaning, notes holding the words —
        rewritten without them where they hold other facts, :mod:`actors.store.forgetting`).
        Returns what ``### respond`` tells the model (:func:`~actors.agent.prompt.
        forgot_text`), or None when the message asks nothing to be forgotten."""
        if not forget_intent(msg.text):
            return None
        if not _may(msg, "forget"):
            await self._refused(msg, "turn.forget")
            await self._emit(msg.session, Step(
                turn=msg.turn, step="notice",
                message=f"nothing was forgotten: the app {msg.app or msg.client!r} may not "
                        "forget memory (its token lacks the forget scope)"))
            return NOT_ALLOWED
        targets = request_targets(msg.text)
        if not targets:
            return ""
        try:
            with trio.fail_after(10):
                done = await self.ctx.request("memory", ApplyReflection(
                    session=msg.session, turn=msg.turn, forget=ForgetIn(targets=targets),
                    agent=True, client=msg.client), ApplyResult)
        except (RemoteError, RuntimeFailure, trio.TooSlowError) as exc:
            log.warning("agent.forget_failed", session=msg.session, error=str(exc))
            return None  # the reflection after the turn tries again
        keys = list(dict.fromkeys(done.retired_keys + done.purged_keys))
        notes = len(set(done.forgotten_note_ids + done.rewritten_note_ids))
        what = ", ".join(keys + ([f"{notes} note{'s' if notes != 1 else ''}"] if notes else []))
        if what and msg.session in self.turns:
            self.turns[msg.session].forgot = True
        await self._emit(msg.session, Step(
            turn=msg.turn, step="notice",
            message=(f"forgot {what}, as you asked" if what else
                     "memory held nothing that matches what you asked to forget")))
        return what or "nothing"

    async def _removal_refusal(self, msg: RunTurn, name: str, args: dict[str, Any]
                               ) -> str | None:
        """Whether the user named what this removal would delete
        (:func:`actors.policy.write_guard.removal_refusal`): the fact's value, or the
        note's text, from the turn's context, else read from memory."""
        turn = self.turns.get(msg.session)
        if name == ops.ProfileRemove.name:
            key = str(args.get("key", ""))
            facts = turn.facts if turn is not None else {}
            why = removal_refusal(msg.text, key=key, value=facts.get(key, ""))
            named = [k for k, v in facts.items() if k != key
                     and removal_refusal(msg.text, key=k, value=v) is None]
            if why is not None and named:  # point the model at what the user named
                why += f"; the facts the user named: {', '.join(named)}"
            return why
        note_id = args.get("id")
        if not isinstance(note_id, int) or isinstance(note_id, bool):
            return None  # the memory actor refuses a malformed id
        content = turn.notes.get(note_id) if turn is not None else None
        if content is None:
            try:
                with trio.fail_after(10):
                    hits = await self._memory(msg).run(ops.NotesRecall(id=note_id))
                content = hits[0].content if hits else None
            except (RemoteError, RuntimeFailure, trio.TooSlowError):
                content = None
        return removal_refusal(msg.text, note=content)

    async def _call_tool(self, msg: RunTurn, name: str, args: dict[str, Any]) -> str:
        """Run a memory tool; errors go back to the model as the result (it can retry)."""
        if name in OPS:
            guard, spelled = spelled_call(OPS[name].guard, args, msg.text)
            if guard == "note" and ops.NotesStore.name in self.prompt.tools:
                name, args = ops.NotesStore.name, spelled  # the user's sentence, as a note
            elif guard == "fact":  # "allergy_peanuts=yes" → "allergy=peanuts"
                args = spelled
        if name not in self.prompt.tools:
            if name in TOOL_NAMES:  # switched off, not unknown
                switch = f"memory.{OPS[name].family}.enabled"
                return (f"error: tool {name!r} is turned off ({switch} is false); "
                        f"available: {', '.join(self.prompt.tools) or 'none'}")
            return (f"error: unknown tool {name!r}; available: "
                    f"{', '.join(self.prompt.tools) or 'none'}")
        try:
            request = decode_op(name, args)
        except ValidationError as exc:  # the model can retry with the field named
            return f"error: {exc.code}: {exc}"
        needed = request.access
        if not _may(msg, needed):
            await self._refused(msg, name)
            return (f"error: forbidden: the app the user talks through lacks the {needed!r} "
                    "scope; answer the user instead")
        refused = refusal(request.guard, args, msg.text)
        if refused is None and request.guard == "removal":
            refused = await self._removal_refusal(msg, name, args)
        if refused is not None:
            self.metrics.inc("agent.tool_refused", {"tool": name})
            return f"error: not_done: {refused}; answer the user instead"
        try:
            with trio.fail_after(10):
                result = await self._memory(msg, client=f"agent for {msg.client}"
                                            if msg.client else None).run(request)
        except RemoteError as exc:
            return f"error: {exc.code}: {exc.message}"
        except (RuntimeFailure, trio.TooSlowError) as exc:
            return f"error: memory unavailable ({exc})"
        self.metrics.inc("agent.tool_calls", {"tool": name})
        turn = self.turns.get(msg.session)
        if turn is not None and request.writes:
            if request.access != "forget":
                turn.wrote = True
            elif not isinstance(result, ops.Removed) or result.removed:
                turn.forgot = True
        return _summary(result)

    def _memory(self, msg: RunTurn, client: str | None = None) -> MemoryClient:
        """Memory as this turn's tool calls reach it (provenance ``tool``, the turn's
        session and id; ``client``: who the activity log names)."""
        return actor_memory(self.ctx.request, source="agent", session=msg.session,
                            turn=msg.turn, client=client)


@asynccontextmanager
async def open_actor(ctx: ActorContext, config: bytes) -> AsyncIterator[AgentActor]:
    """Open ``<state>/sessions.sqlite`` and the LLM client; serve; close both on exit."""
    boot = msgspec.msgpack.decode(config, type=ActorBoot)
    store = await trio.to_thread.run_sync(SessionStore, str(boot.path / "sessions.sqlite"))
    pruned = await trio.to_thread.run_sync(store.prune_empty)
    if pruned:
        log.info("agent.empty_sessions_pruned", count=pruned)
    backends = backends_from_config(boot.config, boot.llm_url)
    llm = BackendPool(backends) if backends else None
    actor = AgentActor(ctx, boot, store, llm)
    try:
        yield actor
    finally:
        with trio.CancelScope(shield=True):
            if llm is not None:
                await llm.aclose()
            await trio.to_thread.run_sync(store.close)
