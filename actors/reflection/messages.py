"""Messages of the reflection actor (docs/architecture.md §4, steps 3, 10-14)."""

from __future__ import annotations

import msgspec

from actors.memory.ops import TickReport


class _M(msgspec.Struct, tag_field="kind", tag=str.lower, kw_only=True):
    """Base of reflection-actor messages."""


class Surfaced(msgspec.Struct, array_like=True):
    """A memory item the turn rendered: ``kind`` (``memory`` | ``lesson`` | ``profile``
    | ``procedure``), its id and its text (a note's content, a lesson's or procedure's
    activation, a fact as ``key: value``), cut to 300 chars."""

    kind: str
    id: int
    text: str


class Reflect(_M):
    """Cast by the agent after a turn: extract durable memory from this exchange.
    ``earlier``: the session's previous user messages (oldest first, at most
    :data:`EARLIER_MAX`), shown to the model as context only: "She is a nurse" needs
    "My sister is called Ana" before it. ``surfaced``: the
    memory items the turn rendered, for the link generator (its notes) and the vote
    runner (all of them); ``turn_index`` the session's turn number (vote audit);
    ``client`` the app whose turn it was (the activity log names it); ``agent_wrote`` /
    ``agent_forgot``: the agent itself wrote or removed memory in the turn (the reply's
    claims are held against them and the reflection's own writes); ``may_forget``: the
    app holds the ``forget`` scope — without it the reflection forgets and retires
    nothing (refused in the activity log); ``tool_calls``: the MCP tools the turn called
    (``server.tool``, run or not) — the reply may relay their output, which reflection
    sees marked as such and never takes for something the user said, and a one-sentence
    message a tool was called for is not reflected on (``actors.policy.skip``)."""

    session: str
    turn: str
    user_message: str
    assistant_reply: str
    earlier: list[str] = msgspec.field(default_factory=list)
    surfaced: list[Surfaced] = msgspec.field(default_factory=list)
    turn_index: int | None = None
    client: str | None = None  # the app that started the turn (its activity entries)
    agent_wrote: bool = False  # the agent's own tool call stored or updated something
    agent_forgot: bool = False  # the agent removed something (its forget, a tool call)
    may_forget: bool = True  # the turn's app holds the ``forget`` scope
    tool_calls: list[str] = msgspec.field(default_factory=list)  # MCP tools the turn called


EARLIER_MAX = 2


class AbortPending(_M):
    """Cancel the in-flight reflection of ``session`` (None: of every session)."""

    session: str | None = None


class Foreground(_M):
    """Cast by the agent whenever its number of running turns changes (its start-up
    warm-up of the model's prompt cache counts as one): while ``turns`` > 0 the
    reflection actor holds its LLM calls back (:mod:`actors.reflection.foreground`).
    ``seq`` grows by one with every cast: the kernel runs each cast's handler in a task
    of its own, and trio runs the tasks of one scheduling batch in random order, so two
    counts sent back to back can be taken in the wrong order; the gate keeps the count
    with the highest ``seq`` (the agent's ``time.monotonic_ns()``, system-wide, so a
    restarted agent's counts are newer still); 0 = unordered, always taken."""

    turns: int = 0
    seq: int = 0


ReflectionMsg = Reflect | AbortPending | Foreground


class ConsolidationEvent(msgspec.Struct, tag="consolidation", tag_field="kind", kw_only=True):
    """Cast to the root while a tick runs; forwarded to clients subscribed to ``memory``
    as ``memory.consolidation`` frames: ``stage`` ``started`` (``clusters`` claimed) |
    ``cluster`` (cluster ``index`` of ``clusters`` done, ``result`` ``lesson`` |
    ``abstained`` | ``failed`` | ``changed``, ``lesson_id``) | ``finished`` (``report``)."""

    stage: str
    clusters: int = 0
    index: int = 0
    result: str = ""
    lesson_id: int | None = None
    report: TickReport | None = None


class NotKept(msgspec.Struct, frozen=True):
    """A fact the model proposed and the guards dropped, with nothing kept holding it:
    its ``key`` (never its value) and the guard's ``reason`` (``ungrounded_content``,
    ``negated`` …, docs/protocol.md "reflection")."""

    key: str
    reason: str


class ReflectionEvent(msgspec.Struct, tag="reflection", tag_field="kind", kw_only=True):
    """Cast to the root when a reflection ends; forwarded to clients subscribed to
    ``reflection``. Keys and note ids only, never values: ``fact_keys`` written (of which
    ``updated_keys`` replaced an active value), ``note_ids`` stored, ``forgotten_keys``
    (retired or deleted facts) and ``forgotten_note_ids``; ``not_kept``: proposals the
    guards dropped that nothing kept holds (:meth:`actors.reflection.plan.Plan.not_kept`);
    ``rewritten_note_ids``: notes rewritten without what the user asked to forget;
    ``unmet_claims``: what the reply said it did to memory that the turn did not do
    (``kept``, ``forgot``: :func:`actors.policy.claims.unmet_claims`);
    ``timeout_ms`` is the reflection timeout in force (for the client's warning)."""

    session: str
    turn: str
    outcome: str
    latency_ms: float
    fact_keys: list[str] = msgspec.field(default_factory=list)
    note_ids: list[int] = msgspec.field(default_factory=list)
    reason: str = ""
    updated_keys: list[str] = msgspec.field(default_factory=list)
    forgotten_keys: list[str] = msgspec.field(default_factory=list)
    forgotten_note_ids: list[int] = msgspec.field(default_factory=list)
    timeout_ms: int = 0
    not_kept: list[NotKept] = msgspec.field(default_factory=list)
    rewritten_note_ids: list[int] = msgspec.field(default_factory=list)
    unmet_claims: list[str] = msgspec.field(default_factory=list)
