"""Messages of the agent actor and the turn events it casts.

The messages that reach sessions carry ``app``: the app that asks (a client token's
name), None for the owner. The owner reaches every session, an app only those it started
(the agent answers ``forbidden`` otherwise)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec


class _M(msgspec.Struct, tag_field="kind", tag=str.lower, kw_only=True):
    """Base of agent-actor messages."""


class OpenSession(_M):
    """Resume ``session`` (created when unknown) or create a new one (None)
    → :class:`SessionInfo`; ``forbidden`` for another app's session."""

    session: str | None = None
    working_dir: str | None = None
    app: str | None = None  # the app that asks; None: the owner (every session)


class SessionInfo(msgspec.Struct):
    session: str
    created: bool
    turns: int = 0


class RunTurn(_M):
    """Run one turn; the reply comes as TurnEvents; this answers :class:`TurnResult`
    when the turn ends. ``debug`` adds a ``prompt`` step event with the tail;
    ``recalled`` (note ids) replaces recall's hits in ``### recalled`` (None = recall);
    ``client``: the app the turn is for (its memory reads and tool calls are recorded
    under it in the activity log); ``scopes``: what that app may do (None: everything,
    the owner) — the turn's tool calls and the reflection it causes do no more;
    ``answerable``: false where no one can answer a tool call's approval request (the
    OpenAI-compatible API): such a call is denied at once instead of waiting."""

    session: str
    turn: str
    text: str
    debug: bool = False
    recalled: list[int] | None = None
    client: str | None = None  # the app that asked (the activity log's name for its reads)
    scopes: list[str] | None = None  # the app's scopes; None: the owner's (all)
    app: str | None = None  # the app that asks; None: the owner (every session)
    answerable: bool = True  # a person may answer approvals (not an HTTP API request)


class TurnResult(msgspec.Struct):
    turn: str
    reason: str
    reply: str = ""


class CancelTurn(_M):
    """Cancel the running turn of ``session`` → ``{"cancelled": bool}``; ``client``:
    who asks, as the activity log names them (the cancel is recorded there)."""

    session: str
    client: str | None = None
    app: str | None = None  # the app that asks; None: the owner (every session)


class ListSessions(_M):
    """The sessions ``app`` started (all for the owner), newest first."""

    limit: int = 50
    app: str | None = None  # the app that asks; None: the owner (every session)


class DeleteSession(_M):
    session: str
    app: str | None = None  # the app that asks; None: the owner (every session)


class GetSession(_M):
    """One stored session → ``{"id", "title", "createdAt", "updatedAt", "turns",
    "workingDir", "messages": [{"role", "text", "at"}]}`` (the last ``messages``
    entries); ``not_found`` for an id without a stored turn."""

    session: str
    messages: int = 50
    app: str | None = None  # the app that asks; None: the owner (every session)


class RenameSession(_M):
    """Give a stored session a title (at most 200 characters; ``""``: its first line's
    again) → ``{"id", "title"}``; ``not_found`` for an id without a stored turn."""

    session: str
    title: str
    app: str | None = None  # the app that asks; None: the owner (every session)


Decision = Literal["once", "always", "deny"]
"""A person's answer to an approval request: run this call, run it and allow the tool
from now on (for its current pin), or do not run it."""


class Approve(_M):
    """Answer the pending approval ``request`` (an id from :class:`ApprovalRequest`) →
    ``{"resolved": bool}`` (false: no such request is pending — answered already, timed
    out, or its turn ended). ``session``: the session the answering client is attached
    to (None: any session, the dashboard); ``app``: the app that answers (None: the
    owner; an app answers only its own sessions' requests); ``client``: who answers, as
    the activity log names them. ``unanswerable``: with ``deny``, the client had no one
    to ask (the call is then ``unanswerable``, as for the OpenAI-compatible API)."""

    request: str
    decision: Decision
    unanswerable: bool = False
    session: str | None = None
    app: str | None = None
    client: str | None = None


class ListApprovals(_M):
    """The approval requests waiting for an answer → ``list[ApprovalRequest]`` (with
    their sessions), oldest first; ``app``: only those of that app's sessions."""

    app: str | None = None


AgentMsg = (OpenSession | RunTurn | CancelTurn | ListSessions | DeleteSession | GetSession
            | RenameSession | Approve | ListApprovals)


class _TurnFrame(msgspec.Struct, tag_field="type", rename="camel", kw_only=True,
                 omit_defaults=True):
    """Base of the turn's client frames: the agent casts them inside :class:`TurnEvent`
    and the gateway sends them as they are to the clients attached to the session (wire
    keys camelCase; a field left at its default is not sent)."""

    turn: str


class TurnStarted(_TurnFrame, tag="turn.started"):
    """The turn began."""


class ReplyDelta(_TurnFrame, tag="reply.delta"):
    """The next piece of the reply as the model writes it."""

    text: str


class ReplyText(_TurnFrame, tag="reply"):
    """The whole reply, once, before ``turn.finished`` (a client that dropped deltas
    still gets all of it)."""

    text: str


class Step(_TurnFrame, tag="step"):
    """One step of the turn, by ``step``:

    * ``rewrite`` — the query memory was recalled with (``query``);
    * ``prompt`` (with ``debug``) — step ``n``'s prompt tail (``tail``);
    * ``tool`` / ``tool.result`` — step ``n`` called ``tool`` with ``args`` / its result
      (``summary``); for an MCP tool (``server.tool``) ``tool.result`` also carries
      ``outcome``: ``ok``, ``error`` (the tool said it failed, or it could not be
      reached), ``denied`` (by its policy or the user), ``invalid`` (arguments that do
      not fit its schema) or ``forbidden`` (the app lacks the ``tools`` scope);
    * ``finish`` — step ``n`` ended the turn without a reply (``text``);
    * ``invalid`` — step ``n``'s output was no valid action (``reason``);
    * ``notice`` — something the user should know (``message``: the model is loading,
      the message was clipped);
    * ``error`` — the turn failed (``message``; ``code``; on a context overflow the
      server's ``n_prompt_tokens`` and ``n_ctx``).
    """

    step: str
    n: int | None = None
    message: str | None = None
    code: str | None = None
    n_prompt_tokens: int | None = None
    n_ctx: int | None = None
    query: str | None = None
    tail: str | None = None
    text: str | None = None
    tool: str | None = None
    args: dict[str, Any] | None = None
    summary: str | None = None
    reason: str | None = None
    outcome: str | None = None


class TurnTimings(msgspec.Struct, rename="camel"):
    """Where a turn's time went (ms) and how much the model read and wrote.

    ``total_ms``: the whole turn in the agent; ``context_ms``: rewrite, memory context and
    its rendering; ``llm_ms``: every completion, as the agent waited for it;
    ``prompt_ms`` / ``generation_ms``: the server's own prompt processing and generation
    time, summed over the steps (0 when the server reports none); ``prefill_tokens``:
    prompt tokens the server evaluated, ``prompt_tokens``: every prompt token of the
    turn's completions, its prompt cache's included (so ``prompt_tokens -
    prefill_tokens`` came from the cache); ``generated_tokens``: tokens generated;
    ``floor_ms``: the last completion's server prompt + generation time — what the model
    alone needs for the answer, the floor a turn is measured against; ``steps``: LLM
    steps. Fields added after the first release have defaults.
    """

    total_ms: float
    context_ms: float
    llm_ms: float
    prompt_ms: float
    prefill_tokens: int
    steps: int
    prompt_tokens: int = 0
    generated_tokens: int = 0
    generation_ms: float = 0.0
    floor_ms: float = 0.0


class TurnFinished(_TurnFrame, tag="turn.finished"):
    """The turn ended: ``reason`` is ``reply``, ``finish``, ``max_steps``, ``cancelled``,
    ``error`` or ``shutdown``; a failed turn names its ``code`` (and on a context
    overflow ``n_prompt_tokens`` / ``n_ctx``); ``message`` when the daemon, not the
    agent, ended it (the agent process died); ``timings`` when the agent ran it."""

    reason: str
    code: str | None = None
    n_prompt_tokens: int | None = None
    n_ctx: int | None = None
    message: str | None = None
    timings: TurnTimings | None = None


class ApprovalRequest(_TurnFrame, tag="approval.request"):
    """The turn wants to call ``server``'s ``tool`` with ``args`` and waits for a person
    to answer (``approval`` frame, :class:`Approve`): ``request`` is the id to answer;
    ``description`` the tool's description as its server gives it (cut to 2,000
    characters); ``pin`` the tool's pin (docs/tools.md); ``why``: ``policy`` (the
    tool asks) or ``after_tool_result`` (allowed, but proposed after a tool result and
    not asked for by the user's message); ``timeout_ms``: no answer in this long is a
    deny; ``session``: the turn's session. Every field is always sent."""

    request: str
    session: str
    server: str
    tool: str
    args: dict[str, Any]
    description: str
    pin: str
    why: str
    read_only: bool
    timeout_ms: int


class ApprovalDone(_TurnFrame, tag="approval.done"):
    """The approval ``request`` is over: ``decision`` ``once``, ``always``, ``deny`` or
    ``timeout``; ``by``: who answered (empty on a timeout). Lets every other client
    attached to the session close its prompt."""

    request: str
    decision: str
    by: str


TurnFrame = TurnStarted | ReplyDelta | ReplyText | Step | ApprovalRequest | ApprovalDone | \
    TurnFinished
"""Every frame a turn sends its session's clients."""


class TurnEvent(msgspec.Struct, tag="turn.event", tag_field="kind", kw_only=True):
    """Cast to the root: ``frame`` for the clients attached to ``session`` (and for the
    OpenAI-compatible API's request waiting on the turn)."""

    session: str
    frame: TurnFrame
