"""The ``memory.*`` configuration computed once into what a turn's context needs.

A turn's memory context is built (:func:`actors.store.context.build_context`) and
rendered (:func:`actors.store.context.render_context`) with a dozen switches and budgets
each. Rather than unpacking ``MemoryConfig`` into long calls at every caller, it is
turned once into two frozen plans:

* :class:`RecallPlan` — what to fetch: how many notes to recall, the index's length,
  link expansion, lessons and procedures, voting's reordering, session facts, earlier
  values, time windows;
* :class:`RenderBudget` — how much of it to show: each section's token budget, preview
  lengths, dates, the focus line.

A disabled channel is written as 0 (or None) here and only here: a disabled recall is
``k == 0``, disabled links ``max_expanded == 0``, a disabled profile a 0-token budget,
and so on, so the code that builds and renders never reads an ``enabled`` switch.
What belongs to one turn rather than to the configuration (its session, working
directory, rewritten query, clock) is a :class:`TurnScope`.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime.services.config import MemoryConfig

__all__ = ["RecallPlan", "RenderBudget", "TurnScope"]


@dataclass(frozen=True)
class RecallPlan:
    """What a turn's context fetches (defaults: recall and index on, the rest off).

    Attributes:
        k: notes recalled (``memory.recallInjection.k``); 0 recalls nothing.
        index_limit: rows of ``### memory-index`` (``memory.index.limit``); 0 = no index.
        gate: the profile's contextual keyword gate
            (``memory.profile.contextualKeywordGate``): unpinned facts shown only when one
            of their keywords is in the message.
        expansion_depth: link hops from the recalled notes (``memory.links.expansionDepth``,
            clamped into [1, 3] by the link store).
        max_expanded: neighbours added over links (``memory.links.maxExpanded``); 0 = off.
        skip_link_origins: link origins not expanded over (``("similarity",)`` unless
            ``memory.links.expandByMeaning``).
        lessons_k / procedures_k: lessons and procedures recalled
            (``memory.lessons.recallK`` / ``memory.procedures.recallK``); 0 = off.
        score_blend: ``memory.voting.scoreBlend`` when voting is on (lessons and
            procedures reordered by votes and outcomes); None = BM25 order.
        profile_vote_floor: with voting on, ``-memory.voting.profileFilterThreshold``:
            facts whose vote score is at or below it are left out; None = none left out.
        session_facts_limit: the session's newest facts shown beside the profile
            (``memory.sessionFacts.limit``); 0 = off.
        profile_history: fill each shown fact's earlier value (``memory.profile.showDates``).
        time_windows: a question naming a time span recalls the notes written then first
            (``memory.recallInjection.timeWindows``).
    """

    k: int = 3
    index_limit: int = 20
    gate: bool = True
    expansion_depth: int = 1
    max_expanded: int = 0
    skip_link_origins: tuple[str, ...] = ()
    lessons_k: int = 0
    procedures_k: int = 0
    score_blend: float | None = None
    profile_vote_floor: float | None = None
    session_facts_limit: int = 0
    profile_history: bool = False
    time_windows: bool = False

    @classmethod
    def from_config(cls, m: MemoryConfig) -> RecallPlan:
        """The plan of ``memory.*``, every disabled channel zeroed."""
        rc, links, voting = m.recall_injection, m.links, m.voting
        return cls(
            k=rc.k if rc.enabled else 0,
            index_limit=m.index.limit if m.index.enabled else 0,
            gate=m.profile.contextual_keyword_gate,
            expansion_depth=links.expansion_depth,
            max_expanded=links.max_expanded if links.enabled else 0,
            skip_link_origins=() if links.expand_by_meaning else ("similarity",),
            lessons_k=m.lessons.recall_k if m.lessons.enabled else 0,
            procedures_k=m.procedures.recall_k if m.procedures.enabled else 0,
            score_blend=voting.score_blend if voting.enabled else None,
            profile_vote_floor=-voting.profile_filter_threshold if voting.enabled else None,
            session_facts_limit=(m.session_facts.limit
                                 if m.session_facts.enabled and m.profile.enabled else 0),
            profile_history=m.profile.show_dates and m.profile.enabled,
            time_windows=rc.time_windows,
        )


@dataclass(frozen=True)
class RenderBudget:
    """How much of a context the prompt's tail shows: budgets in estimated tokens
    (``actors.store.render.estimate_tokens``), previews in characters; a budget of 0
    drops its section. The defaults are the configuration's defaults, with dates and
    the focus line off (the plain line formats).

    Attributes:
        profile_max_tokens: ``### profile`` (``memory.profile.maxTokens``); 0 also drops
            the reply rules and the focus line's facts.
        recall_preview_chars / recall_max_tokens: ``### recalled`` lines
            (``memory.recallInjection.previewChars`` / ``maxTokens``).
        index_preview_chars / index_max_tokens: ``### memory-index`` rows
            (``memory.index.previewChars`` / ``maxTokens``).
        lessons_max_tokens / procedures_max_tokens: ``### lessons`` / ``### procedures``
            (``memory.lessons.maxTokens`` / ``memory.procedures.maxTokens``).
        session_facts_max_tokens: ``### session-facts`` (``memory.sessionFacts.maxTokens``).
        dates: the day each recalled note was written (``memory.recallInjection.showDates``).
        index_dates: the same for index rows (``memory.index.showDates``; None = ``dates``).
        profile_dates: a fact's earlier value and the day a relative fact was said
            (``memory.profile.showDates``).
        focus_items: items repeated next to the question, and the care, same-day and
            unknown-people lines (``memory.recallInjection.focusItems``); 0 = off.
        second_person: notes and focus items speak of the user as "you"
            (:func:`actors.store.person.second_person`), as the agent's prompt shows
            them; the configuration's budget does, the plain default does not.
    """

    profile_max_tokens: int = 512
    recall_preview_chars: int = 160
    recall_max_tokens: int = 400
    index_preview_chars: int = 60
    index_max_tokens: int = 300
    lessons_max_tokens: int = 300
    procedures_max_tokens: int = 400
    session_facts_max_tokens: int = 200
    dates: bool = False
    index_dates: bool | None = None
    profile_dates: bool = False
    focus_items: int = 0
    second_person: bool = False

    @classmethod
    def from_config(cls, m: MemoryConfig) -> RenderBudget:
        """The budgets of ``memory.*``: a disabled profile, session-facts, lessons or
        procedures channel gets 0."""
        rc = m.recall_injection
        return cls(
            profile_max_tokens=m.profile.max_tokens if m.profile.enabled else 0,
            session_facts_max_tokens=(m.session_facts.max_tokens
                                      if m.profile.enabled and m.session_facts.enabled else 0),
            dates=rc.show_dates, index_dates=m.index.show_dates,
            profile_dates=m.profile.show_dates,
            recall_preview_chars=rc.preview_chars, recall_max_tokens=rc.max_tokens,
            index_preview_chars=m.index.preview_chars, index_max_tokens=m.index.max_tokens,
            lessons_max_tokens=m.lessons.max_tokens if m.lessons.enabled else 0,
            procedures_max_tokens=m.procedures.max_tokens if m.procedures.enabled else 0,
            focus_items=rc.focus_items, second_person=True,
        )


@dataclass(frozen=True)
class TurnScope:
    """What one turn adds to the plan.

    Attributes:
        session: the session id (its facts fill ``### session-facts``), or None.
        working_dir: the session's project directory: recall and index show global notes
            plus that directory's; None = every note.
        recall_text: the query rewriter's self-contained rewrite of the user's message:
            notes, lessons and procedures are recalled with it (None = the message).
        now_ms: the clock (Unix ms) a time span in the question is read against; None =
            the wall clock.
        pinned: the notes ``### recalled`` shows instead of recall's hits, in this order
            (missing ids, and project notes of another directory, left out); None =
            recall.
    """

    session: str | None = None
    working_dir: str | None = None
    recall_text: str | None = None
    now_ms: int | None = None
    pinned: tuple[int, ...] | None = None
