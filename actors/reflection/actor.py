"""The reflection actor: end-of-turn memory formation (docs/architecture.md §4,
steps 10-14).

Fire-and-forget: the agent casts ``Reflect`` after the reply is out; nothing waits
on it. One reflection is in flight per session: a new ``Reflect`` or an
``AbortPending`` for the same session cancels the old one (outcome ``aborted``) and its
exchanges are carried into the session's next reflection (at most :data:`CARRY_MAX`),
so an interrupted reflection loses nothing; other sessions are untouched. A transient
failure (the memory actor restarting, the LLM server answering 5xx, unreachable or too
slow) is tried again after :data:`RETRY_DELAYS_S`, then carried the same way;
``AbortPending(session=None)`` and shutdown abort all. The session's previous user
messages (``Reflect.earlier``) are shown to the model as context only.

Each run: skip the call when the user's messages hold nothing to remember
(``actors.policy.skip.skip_reason``: small talk and one-off instructions ``trivial``, questions
``question``, nothing about the user ``impersonal``; outcome ``none``) → read the known profile from the memory actor → build the micro-prompt →
LLM call on the reflection slot (slot 1 when the server has ≥ 2 slots, else -1)
with the GBNF grammar inside ``move_on_after(timeoutMs)`` (outcome
``timeout``, nothing written) → parse (invalid lines dropped and counted) → ``plan.plan_reflection``: canonical keys,
the grounding filter (invented names, the assistant's self-description, copied
examples, one-off instructions, content the user never wrote), the stance guards
(another person's facts, negations, daydreams, questions, injected instructions) and
forgetting (``FORGET`` lines and the user's own request) — dropped items are counted in
``agent.memory.reflection.dropped{reason}`` and logged as ``reflection.dropped`` with
keys and reasons, never values — then the per-call caps ``maxFactsPerCall`` /
``maxNotesPerCall`` → one ``ApplyReflection`` to the memory actor, forgetting and
writing in one transaction. The outcome
``ok | none | failed | aborted | timeout`` is counted
(``agent.memory.reflection{outcome}``), timed (``agent.memory.reflection.latency_ms``),
logged (``reflection.*`` events), and cast to the root as a ``reflection`` event.

Then, under the same cancel scope (a newer turn of the session cancels them too), the
turn's side calls on the same slot: the link generator
(``memory.links.autoGenerate``, :mod:`.linkgen`) and the vote runner
(``memory.voting.enabled``, :mod:`.voting`), each on the items the turn surfaced
(``Reflect.surfaced``) and within its own timeout. The actor also runs the periodic
consolidator (:mod:`.consolidator`, started in :meth:`ReflectionActor.on_ready`) and
answers ``memory.consolidate`` (a ``ToolOp`` of ``actors.memory.ops.Consolidate``) with a
tick's :class:`~.messages.TickReport`.

Every LLM call of this actor goes through a :class:`~.foreground.ForegroundGate`
(turns first, docs/architecture.md §10): it waits while the agent runs a turn
(``Foreground`` casts), is cancelled and sent again when a turn starts during it, and
is held back at most ``DEFER_MAX_S`` in all.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import msgspec
import structlog
import trio

from actors.memory.messages import (
    ApplyLinks,
    ApplyReflection,
    ApplyResult,
    ApplyVotes,
    ForgetIn,
    Refused,
    ToolOp,
    VoteResult,
)
from actors.memory import ops
from actors.memory.client import actor_memory
from actors.policy.claims import unmet_claims
from actors.policy.corrections import corrections, says_correction
from actors.policy.coverage import statement_count
from actors.policy.forget import forget_intent
from actors.policy.skip import skip_reason
from runtime.kernel.actor import ActorContext
from runtime.kernel.errors import RemoteError, RuntimeFailure
from runtime.services.backends import BackendPool, backends_from_config, warm_prefix
from runtime.services.config import ActorBoot
from runtime.services.llm import (LLMError, LLMServerError, LLMStreamIncomplete, LLMTimeout,
                                  LLMUnavailable)
from runtime.services.metrics import Metrics, MetricsRequest

from .consolidator import Consolidator
from .foreground import ForegroundGate, YieldingPool
from .grammar import MAX_ENTRIES, REFLECTION_GRAMMAR
from .linkgen import LINK_SYSTEM, build_link_prompt, link_grammar, parse_links
from .messages import (
    AbortPending,
    ConsolidationEvent,
    Foreground,
    NotKept,
    Reflect,
    ReflectionEvent,
    ReflectionMsg,
)
from .parser import parse_reflection
from .plan import plan_reflection
from .prompt import REFLECTION_PREFIX, build_reflection_prompt
from .voting import VOTE_SYSTEM, build_vote_prompt, parse_votes, vote_grammar

log = structlog.get_logger()

FAILURE_STREAK_WARN = 3
"""Consecutive failed/timeout outcomes in one session before one operator warning
(the health tracker)."""
MAX_TRACKED_SESSIONS = 1024
"""Sessions whose failure streak is remembered at most (the longest-quiet are forgotten
first), so the health tracker stays bounded however many sessions come and go."""
SIDE_N_PREDICT = 96
"""Token cap of a link-generator or vote-runner completion (4 links / 8 votes)."""
N_PREDICT = 480
"""Token cap of a reflection completion: the grammar's ten lines, most of them short
(a 60-char value is ~15 tokens, a 120-char note ~30)."""
CARRY_MAX = 2
"""Interrupted exchanges carried into a session's next reflection, at most."""
RETRY_DELAYS_S = (1.0, 4.0)
"""Waits (s) before the reflection is tried again after a transient failure: the memory
actor restarting (~1 s), the LLM server answering 5xx, unreachable or too slow. After
the last, the exchanges are carried into the session's next reflection."""
AGENT_HEARD_WAIT_S = 10.0
"""At start-up, how long the reflection slot's warm-up waits for the agent's first
:class:`~.messages.Foreground` count (the agent warms its own slot first)."""
PARSE_MAX_ITEMS = MAX_ENTRIES
"""Items parsed before grounding (the grammar's lines); the per-call caps apply to
what survives the grounding filter (guards first, then caps)."""


def transient(exc: BaseException) -> bool:
    """Whether a reflection that failed with ``exc`` may succeed if tried again soon: a
    peer restarting or unreachable (:class:`~runtime.kernel.errors.RuntimeFailure`,
    :class:`~runtime.services.llm.LLMUnavailable`), an LLM server error (5xx), a timeout
    or a stream cut short. A refused or malformed answer (4xx, bad JSON) is not."""
    return isinstance(exc, (RuntimeFailure, trio.TooSlowError, LLMUnavailable, LLMServerError,
                            LLMTimeout, LLMStreamIncomplete))


ALREADY_KNOWN = "everything was already known or invalid"
"""The ``none`` reason of a reflection whose every item memory held already (or was
invalid)."""


TOOL_OUTPUT_MARK = "(this reply relays the output of the tool(s) {tools}: not the user's words)"
"""How the reflection prompt marks the reply of a turn that called MCP tools: what a tool
returned is data from another program, never a fact the user stated (docs/tools.md)."""


def marked_reply(msg: Reflect) -> str:
    """``msg``'s assistant reply as the reflection prompt shows it: behind
    :data:`TOOL_OUTPUT_MARK` when the turn called MCP tools. (Nothing in a reply grounds a
    fact anyway, :func:`actors.reflection.plan.plan_reflection`; the mark keeps the model
    from proposing it.)"""
    if not msg.tool_calls:
        return msg.assistant_reply
    return TOOL_OUTPUT_MARK.format(tools=", ".join(msg.tool_calls)) + " " + msg.assistant_reply


class ReflectionActor:
    """Handlers and per-session bookkeeping; see the module docstring."""

    def __init__(self, ctx: ActorContext, boot: ActorBoot, llm: BackendPool | None,
                 gate: ForegroundGate | None = None) -> None:
        self.ctx = ctx
        # Turns first: ``llm``'s calls wait for this gate when it is a YieldingPool.
        self.gate = gate or ForegroundGate()
        self.cfg = boot.config.memory.reflection
        self.memory_cfg = boot.config.memory
        self.llm = llm
        self.embedded_llm = boot.config.llm.url is None
        self.metrics = Metrics()
        self.in_flight: dict[str, trio.CancelScope] = {}
        # Exchanges of each in-flight run, and of interrupted runs waiting for the
        # session's next reflection: an interruption never loses an exchange.
        self.running: dict[str, list[Reflect]] = {}
        self.carry: dict[str, list[Reflect]] = {}
        self.streaks: dict[str, int] = {}
        # What a turn's plan dropped that nothing kept holds, until its event is sent
        # (bounded: a turn whose event never comes is forgotten oldest first).
        self.not_kept: dict[str, list[NotKept]] = {}
        self.warned: set[str] = set()
        self._decoder = msgspec.msgpack.Decoder(ReflectionMsg | ToolOp | MetricsRequest)
        self.consolidator = Consolidator(ctx, boot.config.memory, llm, self.metrics,
                                         self._emit_consolidation)
        self.periodic = trio.CancelScope()  # the periodic consolidator (on_ready)

    async def _emit_consolidation(self, event: ConsolidationEvent) -> None:
        try:
            await self.ctx.cast("root", event)
        except RuntimeFailure:
            pass

    async def on_ready(self) -> None:
        """Start the periodic consolidator (``memory.consolidation``), then warm the
        reflection slot: evaluate the byte-stable prefix once at start-up, so
        the first real reflection only evaluates its tail (the kernel runs this in the
        background; a failure is logged and changes nothing). Only for the embedded
        server: a server of your own is yours to warm."""
        if self.consolidator.enabled:
            self.ctx.nursery.start_soon(self._consolidate_periodically)
        if self.embedded_llm:
            # The agent's warm-up goes first (it counts as a turn at the gate): wait to
            # hear from the agent, briefly, so this one does not start ahead of it.
            with trio.move_on_after(AGENT_HEARD_WAIT_S):
                await self.gate.heard.wait()
            # Without a bound: a warm-up beside a turn would put a 128-token step of its
            # prompt into every step of that turn's reply (measured: 2.4 s a token).
            llm = self.llm.unbounded() if isinstance(self.llm, YieldingPool) else self.llm
            await warm_prefix(llm, REFLECTION_PREFIX.rstrip("\n"), role="reflection",
                              partition="reflection:warmup")

    async def _consolidate_periodically(self) -> None:
        with self.periodic:
            await self.consolidator.run_periodic()

    async def on_request(self, src: str, body: msgspec.Raw) -> object:
        match self._decoder.decode(body):
            case MetricsRequest():
                return self.metrics.snapshot()
            case ToolOp(request=ops.Consolidate(ignore_cooldown=ignore)):
                return await self.consolidator.tick(ignore_cooldown=ignore)
            case ToolOp(request=request):
                raise RemoteError("invalid_argument", f"{request.name} is not answered "
                                                      "by reflection")
            case msg:
                await self.on_message(msg)
                return {}

    async def on_cast(self, src: str, body: msgspec.Raw) -> None:
        await self.on_message(self._decoder.decode(body))

    async def on_message(self, msg: object) -> None:
        match msg:
            case Foreground(turns=turns, seq=seq):
                self.gate.set_busy(turns, seq or None)  # 0: a sender without order
            case AbortPending(session=None):
                for session in list(self.in_flight):
                    self._interrupt(session)
            case AbortPending(session=session):
                if session in self.in_flight:
                    self._interrupt(session)
            case Reflect():
                if msg.session in self.in_flight:
                    self._interrupt(msg.session)
                if self.llm is None or not self.memory_cfg.after_turn_calls():
                    return
                window = [*self.carry.pop(msg.session, []), msg][-CARRY_MAX - 1:]
                scope = trio.CancelScope()
                self.in_flight[msg.session] = scope
                self.running[msg.session] = window
                self.ctx.nursery.start_soon(self._run, window, scope)

    def _interrupt(self, session: str) -> None:
        """Cancel the session's in-flight reflection; its exchanges are carried into the
        session's next one (at most :data:`CARRY_MAX`; sessions bounded)."""
        self.in_flight.pop(session).cancel()
        self._carry(session, self.running.pop(session, []))

    def _carry(self, session: str, window: list[Reflect]) -> None:
        """Carry ``window``'s exchanges into the session's next reflection (at most
        :data:`CARRY_MAX`; sessions bounded, the longest-quiet dropped first)."""
        self.carry[session] = window[-CARRY_MAX:]
        while len(self.carry) > MAX_TRACKED_SESSIONS:
            del self.carry[next(iter(self.carry))]

    async def _run(self, window: list[Reflect], scope: trio.CancelScope) -> None:
        """Reflect (when enabled) and record its outcome, then the turn's side calls
        (link generator, vote runner), all under ``scope``: a newer turn of the session
        or shutdown cancels whichever is running. Once reflection is recorded its
        exchanges are no longer carried into the session's next one."""
        msg = window[-1]
        t0 = time.monotonic()
        recorded = False
        try:
            with scope:
                if self.cfg.enabled:
                    log.debug("reflection.fired", session=msg.session, turn=msg.turn)
                    written: ApplyResult | None = None
                    for delay in (*RETRY_DELAYS_S, None):
                        try:
                            outcome, reason, written = await self._reflect(window)
                            break
                        except (LLMError, RuntimeFailure, trio.TooSlowError) as exc:
                            outcome, reason = "failed", str(exc)[:200] or type(exc).__name__
                            if not transient(exc):
                                break
                            if delay is None:  # still failing: the next turn tries again
                                self._carry(msg.session, window)
                                break
                            self.metrics.inc("agent.memory.reflection.retried")
                            log.info("reflection.retrying", session=msg.session,
                                     turn=msg.turn, delay_s=delay, error=reason)
                            await trio.sleep(delay)
                    recorded = True
                    with trio.CancelScope(shield=True):
                        await self._record(msg, outcome, reason, written,
                                           (time.monotonic() - t0) * 1000)
                self.running.pop(msg.session, None)
                await self._side_calls(msg)
            if self.cfg.enabled and not recorded and scope.cancelled_caught:
                await self._record(msg, "aborted", "a newer turn or shutdown cancelled it",
                                   None, (time.monotonic() - t0) * 1000)
        finally:
            if self.in_flight.get(msg.session) is scope:
                del self.in_flight[msg.session]
                self.running.pop(msg.session, None)

    async def _side_calls(self, msg: Reflect) -> None:
        """The link generator then the vote runner on what the turn surfaced, each on
        the side-call slot within its timeout; outcomes ``ok |
        none | timeout | failed`` counted (``skipped``: too few items, no call, not
        counted) in
        ``agent.memory.link_generator{outcome}`` / ``agent.memory.vote_runner{outcome}``."""
        m = self.memory_cfg
        if m.links.enabled and m.links.auto_generate:
            outcome = await self._guarded(self._generate_links, msg, m.links.generator_timeout_ms)
            if outcome != "skipped":
                self.metrics.inc("agent.memory.link_generator", {"outcome": outcome})
        if m.voting.enabled:
            outcome = await self._guarded(self._vote, msg, m.voting.timeout_ms)
            if outcome != "skipped":
                self.metrics.inc("agent.memory.vote_runner", {"outcome": outcome})

    async def _guarded(self, fn: Callable[[Reflect], Awaitable[str]], msg: Reflect,
                       timeout_ms: int) -> str:
        t0 = time.monotonic()
        try:
            with trio.move_on_after(timeout_ms / 1000) as timer:
                outcome = await fn(msg)
            if timer.cancelled_caught:
                outcome = "timeout"
        except (LLMError, RuntimeFailure, trio.TooSlowError) as exc:
            log.info("reflection.side_call_failed", call=fn.__name__.lstrip("_"),
                     session=msg.session, error=str(exc)[:200])
            outcome = "failed"
        if outcome not in ("skipped",):
            self.metrics.observe(f"agent.memory.{fn.__name__.lstrip('_')}.duration_ms",
                                 (time.monotonic() - t0) * 1000)
        return outcome

    async def _generate_links(self, msg: Reflect) -> str:
        assert self.llm is not None
        cfg = self.memory_cfg.links
        notes = list({s.id: s for s in msg.surfaced if s.kind == "memory"}.values())
        if len(notes) < cfg.min_candidates:
            return "skipped"
        ids = [n.id for n in notes]
        completion = await self.llm.complete(
            f"link-gen:{msg.session}", LINK_SYSTEM,
            build_link_prompt([(n.id, n.text) for n in notes]), role="reflection",
            grammar=link_grammar(ids, cfg.max_links_per_call), n_predict=SIDE_N_PREDICT,
            temperature=0.0)
        links, dropped = parse_links(completion.text, ids, cfg.max_links_per_call)
        if dropped:
            self.metrics.inc("agent.memory.link_generator.dropped", by=dropped)
        if not links:
            return "none"
        with trio.CancelScope(shield=True), trio.fail_after(10):
            written = await self.ctx.request("memory", ApplyLinks(session=msg.session,
                                                                  links=links), int)
        self.metrics.inc("agent.memory.links_written", {"source": "generator"}, by=written)
        log.info("reflection.links", session=msg.session, turn=msg.turn, written=written)
        return "ok" if written else "none"

    async def _vote(self, msg: Reflect) -> str:
        assert self.llm is not None
        items = list({(s.kind, s.id): s for s in msg.surfaced}.values())
        if not items or not msg.assistant_reply.strip():
            return "skipped"
        allow = [(s.kind, s.id) for s in items]
        completion = await self.llm.complete(
            f"vote:{msg.session}", VOTE_SYSTEM,
            build_vote_prompt(msg.user_message, msg.assistant_reply,
                              [(s.kind, s.id, s.text) for s in items]),
            role="reflection", grammar=vote_grammar(allow), n_predict=SIDE_N_PREDICT,
            temperature=0.0)
        votes, dropped = parse_votes(completion.text, allow)
        if dropped:
            self.metrics.inc("agent.memory.vote_runner.dropped", by=dropped)
        if not votes:
            return "none"
        with trio.CancelScope(shield=True), trio.fail_after(10):
            result = await self.ctx.request("memory", ApplyVotes(
                session=msg.session, votes=votes, cap=self.memory_cfg.voting.max_vote_per_item,
                turn_index=msg.turn_index), VoteResult)
        self.metrics.inc("agent.memory.votes", {"result": "applied"}, by=result.applied)
        if result.clamp_hits:
            self.metrics.inc("agent.memory.votes", {"result": "clamp_hit"}, by=result.clamp_hits)
        log.info("reflection.votes", session=msg.session, turn=msg.turn,
                 applied=result.applied, clamp_hits=result.clamp_hits)
        return "ok"

    async def _reflect(self, window: list[Reflect]) -> tuple[str, str, ApplyResult | None]:
        assert self.llm is not None
        msg = window[-1]
        # Only the user's own words ground anything: every user message of the window.
        user_text = "\n".join(m.user_message for m in window)
        skip = skip_reason(user_text, tool_request=all(m.tool_calls for m in window))
        if skip is not None and not (skip == "impersonal" and says_correction(user_text)):
            self.metrics.inc("agent.memory.reflection.skipped", {"reason": skip})
            return "none", skip, None
        with trio.fail_after(10):
            known = await actor_memory(self.ctx.request, client="reflection").run(
                ops.ProfileList())
        pairs = [(f.key, f.value) for f in known]
        if skip is not None and not corrections(user_text, dict(pairs)):
            # "Small correction: it's Anna" reads as impersonal: it goes on only when it
            # spells a known value anew (actors/policy/corrections.py)
            self.metrics.inc("agent.memory.reflection.skipped", {"reason": skip})
            return "none", skip, None
        full = build_reflection_prompt(
            pairs, msg.user_message, marked_reply(msg), earlier=window[0].earlier,
            carried=[(m.user_message, marked_reply(m)) for m in window[:-1]])
        with trio.move_on_after(self.cfg.timeout_ms / 1000) as timer:
            # Partition ``reflection:<session>``: its fallbacks never move the turn's
            # sticky backend (that map lives in the agent process anyway).
            completion = await self.llm.complete(
                f"reflection:{msg.session}", REFLECTION_PREFIX.rstrip("\n"),
                full[len(REFLECTION_PREFIX):], role="reflection", grammar=REFLECTION_GRAMMAR,
                n_predict=N_PREDICT, temperature=0.0)
        if timer.cancelled_caught:
            return "timeout", f"no answer within memory.reflection.timeoutMs={self.cfg.timeout_ms}", None
        # The raw completion holds personal data: debug level only (never at info).
        log.debug("reflection.completion", session=msg.session, turn=msg.turn,
                  text=completion.text[:2000])
        notes_on = self.cfg.auto_store_notes and self.cfg.max_notes_per_call > 0
        parsed = parse_reflection(completion.text, max_facts=PARSE_MAX_ITEMS,
                                  max_notes=PARSE_MAX_ITEMS if notes_on else 0,
                                  keep_duplicates=True)
        if parsed.invalid_facts:
            log.debug("reflection.invalid_fact", session=msg.session, count=parsed.invalid_facts)
        if parsed.invalid_notes:
            log.debug("reflection.invalid_note", session=msg.session, count=parsed.invalid_notes)
        # The budget follows what was said: a six-fact introduction keeps six facts.
        said = min(statement_count(user_text), MAX_ENTRIES)
        plan = plan_reflection(parsed, user_text, dict(pairs),
                               max_facts=max(self.cfg.max_facts_per_call, said),
                               max_notes=max(self.cfg.max_notes_per_call, said) if notes_on else 0,
                               assistant_reply=msg.assistant_reply)
        if plan.dropped:
            for d in plan.dropped:
                self.metrics.inc("agent.memory.reflection.dropped", {"reason": d.reason})
            log.info("reflection.dropped", session=msg.session, turn=msg.turn,
                     reasons=sorted({d.reason for d in plan.dropped}),
                     fact_keys=[d.key for d in plan.dropped if d.key],
                     notes=sum(1 for d in plan.dropped if d.item == "note"))
        forget = plan.forget
        if not msg.may_forget and (forget.retire_keys or forget.purge_keys or forget.targets):
            # The app whose turn this was may not forget: nothing is forgotten or retired.
            plan = msgspec.structs.replace(plan, forget=ForgetIn())
            self.metrics.inc("memory.reflection.refused", {"reason": "forget_scope"})
            try:
                await self.ctx.cast("memory", Refused(
                    client=f"reflection for {msg.client}" if msg.client else "reflection",
                    op="reflection.forget", outcome="forbidden"))
            except RuntimeFailure:
                pass
        self.not_kept[msg.turn] = [NotKept(key=k, reason=r) for k, r in plan.not_kept()]
        while len(self.not_kept) > MAX_TRACKED_SESSIONS:
            self.not_kept.pop(next(iter(self.not_kept)))
        if plan.empty:
            reason = "ungrounded: " + ",".join(sorted({d.reason for d in plan.dropped})) \
                if plan.dropped else ""
            return "none", reason, None
        apply = ApplyReflection(session=msg.session, turn=msg.turn, facts=plan.facts,
                                notes=plan.notes, forget=plan.forget, client=msg.client)
        # Once the write is decided it completes (one transaction) even if aborted now,
        # so the recorded outcome always matches what is in the database.
        with trio.CancelScope(shield=True):
            with trio.fail_after(10):
                result = await self.ctx.request("memory", apply, ApplyResult)
        if not (result.fact_keys or result.note_ids or result.retired_keys
                or result.purged_keys or result.forgotten_note_ids
                or result.rewritten_note_ids):
            return "none", ALREADY_KNOWN, result
        return "ok", "", result

    async def _record(self, msg: Reflect, outcome: str, reason: str,
                      written: ApplyResult | None, latency_ms: float) -> None:
        self.metrics.inc("agent.memory.reflection", {"outcome": outcome})
        self.metrics.observe("agent.memory.reflection.latency_ms", latency_ms)
        keys = written.fact_keys if written else []
        ids = written.note_ids if written else []
        level = {"ok": "info", "timeout": "warning", "failed": "warning"}.get(outcome, "debug")
        getattr(log, level)(f"reflection.{outcome}", session=msg.session, turn=msg.turn,
                            latency_ms=round(latency_ms, 1), fact_keys=keys, note_ids=ids,
                            reason=reason or None)
        if outcome in ("failed", "timeout"):
            streak = self.streaks.pop(msg.session, 0) + 1
            self.streaks[msg.session] = streak  # re-inserted: newest last
            while len(self.streaks) > MAX_TRACKED_SESSIONS:  # failing sessions, bounded
                oldest = next(iter(self.streaks))
                del self.streaks[oldest]
                self.warned.discard(oldest)
            if streak >= FAILURE_STREAK_WARN and msg.session not in self.warned:
                self.warned.add(msg.session)
                self.metrics.inc("agent.memory.reflection.unhealthy")
                log.warning("reflection.unhealthy", session=msg.session, streak=streak,
                            hint="reflection keeps failing or timing out; raise "
                                 "memory.reflection.timeoutMs or set memory.reflection.enabled=false")
        elif outcome != "aborted":
            # Forget a healthy session: one entry per session ever seen would grow with
            # the daemon's lifetime (found by bench/soak).
            self.streaks.pop(msg.session, None)
            self.warned.discard(msg.session)
        not_kept = self.not_kept.pop(msg.turn, [])
        if forget_intent(msg.user_message):
            # a forget turn states nothing new: what its model proposed echoes the request
            not_kept = []
        unmet: list[str] = []
        if outcome in ("ok", "none"):
            unmet = unmet_claims(
                msg.assistant_reply,
                # memory already holding what was said bears a "noted" out as well
                kept=msg.agent_wrote or reason == ALREADY_KNOWN
                or bool(written and (written.fact_keys or written.note_ids)),
                forgot=msg.agent_forgot or bool(written and (
                    written.retired_keys or written.purged_keys or written.forgotten_note_ids
                    or written.rewritten_note_ids)))
            if unmet:
                self.metrics.inc("agent.memory.reply_claims_unmet", by=len(unmet))
        try:
            await self.ctx.cast("root", ReflectionEvent(
                session=msg.session, turn=msg.turn, outcome=outcome, latency_ms=round(latency_ms, 1),
                fact_keys=keys, note_ids=ids, reason=reason,
                updated_keys=written.updated_keys if written else [],
                forgotten_keys=(written.retired_keys + written.purged_keys) if written else [],
                forgotten_note_ids=written.forgotten_note_ids if written else [],
                rewritten_note_ids=written.rewritten_note_ids if written else [],
                timeout_ms=self.cfg.timeout_ms,
                not_kept=not_kept if outcome in ("ok", "none") else [],
                unmet_claims=unmet))
        except RuntimeFailure:
            pass


@asynccontextmanager
async def open_actor(ctx: ActorContext, config: bytes) -> AsyncIterator[ReflectionActor]:
    """Open the LLM client (when an LLM is configured), start the periodic
    consolidator (``memory.consolidation``) and serve; abort all on exit."""
    boot = msgspec.msgpack.decode(config, type=ActorBoot)
    backends = backends_from_config(boot.config, boot.llm_url)
    gate = ForegroundGate()
    llm = YieldingPool(BackendPool(backends), gate) if backends else None
    actor = ReflectionActor(ctx, boot, llm, gate)
    try:
        yield actor
    finally:
        actor.periodic.cancel()
        for scope in actor.in_flight.values():
            scope.cancel()
        if llm is not None:
            with trio.CancelScope(shield=True):
                await llm.aclose()
