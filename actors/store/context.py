"""Per-turn memory context: the read path that feeds the prompt tail.

Built once per turn (the BuildContext step of docs/architecture.md §4):

* ``profile``  -- active facts through the contextual keyword gate (``render.gate_profile``);
* ``recalled`` -- top-``k`` notes by BM25 against the user message, recall counters bumped
  exactly once; any recall failure degrades to ``[]`` (docs/architecture.md §4), logged; a note
  archived other than into a lesson (by hand, or because it stated a fact's old value)
  is left out;
* ``index``    -- the most recently updated non-archived notes minus every recalled id, so
  no note appears twice in one prompt;
* link expansion (when a ``LinkStore`` and ``max_expanded``
  are given) -- BFS neighbours of the recalled notes appended to ``recalled`` after the
  BM25 hits, without duplicate ids; their ``recall_count`` is bumped too, so every
  surfaced note is bumped exactly once per turn; the tokens they add are taken from the
  index's budget when rendered, so links never lengthen the prompt's tail; the index
  leaves out only the hits, and a neighbour the index shows is not repeated;
* ``lessons`` / ``procedures`` -- keyword recall on the same query,
  projected to pointer rows; any failure degrades to ``[]``;
* ``session_facts`` -- the active profile facts written in this session, the newest
  ``memory.sessionFacts.limit`` (default 8: the session's known facts), minus
  those ``### profile`` shows; rebuilt from the store every turn, never saved with the
  session;
* ``before`` -- for the shown profile facts that replaced an earlier value, that value
  (``### profile`` shows it: "where did I live before?");
* ``zone`` -- the user's time zone from the profile (``dates.user_zone``), in which the
  tail's ``now:`` line and the notes' dates are written;
* a question that names a time ("what did I say last week?", "on 24 October 2023",
  ``dates.time_window``) recalls the notes written then first (:func:`timed_recall`).

The result is plain data (msgspec Struct) the memory actor sends to the agent actor,
which turns it into section bodies with :func:`actors.store.tail.render_context` (pure:
the agent loads none of the store's SQL modules).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import apsw
import structlog

from .corrections import superseded_by
from .dates import TimeWindow, time_window, user_zone
from .lessons import LessonPointer
from .links import LinkStore
from .notes import MAX_QUERY_CHARS, MemoryStore, Note
from .plans import RecallPlan, RenderBudget, TurnScope
from .procedures import ProcedurePointer
from .recall import build_recall_query
from .records import MemoryContext
from .render import gate_profile

if TYPE_CHECKING:  # (the engine builds a context through this module: no import circle)
    from .stores import StoreSet

__all__ = ["MemoryContext", "RecallPlan", "RenderBudget", "TurnScope", "build_context",
           "recall_query", "timed_recall"]

log = structlog.get_logger("actors.store.context")
T = TypeVar("T")


def recall_query(user_message: str | None) -> str:
    """Return the auto-recall query for a user message.

    The message trimmed; when longer than ``MAX_QUERY_CHARS`` (500) it is cut there,
    dropping a partial last word, so a long message still recalls by its opening
    words instead of failing validation.
    """
    text = (user_message or "").strip()
    if len(text) <= MAX_QUERY_CHARS:
        return text
    cut = text[:MAX_QUERY_CHARS]
    if not text[MAX_QUERY_CHARS].isspace():
        head, sep, _tail = cut.rpartition(" ")
        if sep and head.strip():
            cut = head
    return cut.strip()


def build_context(
    stores: StoreSet,
    user_message: str,
    plan: RecallPlan = RecallPlan(),
    scope: TurnScope = TurnScope(),
    *,
    recall: Callable[..., list[Note]] | None = None,
    bump: bool = True,
) -> MemoryContext:
    """Build the :class:`MemoryContext` for one turn.

    Args:
        stores: the stores of one connection (profile, notes, links, lessons, procedures).
        user_message: the current user message (the gate input, and the recall query
            unless ``scope.recall_text`` is given).
        plan: what to fetch (:class:`~actors.store.plans.RecallPlan`, built once from
            ``memory.*`` config: a disabled channel is 0 there). Link expansion goes
            ``plan.expansion_depth`` hops in both directions, at most
            ``plan.max_expanded`` notes, not over links whose origin is in
            ``plan.skip_link_origins``. With ``plan.time_windows``, a query that names a
            time span (read relative to ``scope.now_ms``, in the profile's time zone)
            recalls through :func:`timed_recall`.
        scope: this turn's session, working directory, rewritten query and clock
            (:class:`~actors.store.plans.TurnScope`).
        recall: replaces ``notes.recall`` for the notes (same keyword arguments,
            ``bump=False``): the memory actor passes hybrid recall.

    ``recall_count`` is bumped exactly once per surfaced note (BM25 hit or expanded
    neighbour), in one transaction at the end; with
    ``bump=False`` nothing is written and the caller bumps ``[n.id for n in
    result.recalled]`` itself (the memory actor does it after replying, off the turn's
    path). A failed bump is logged (``memory.context.bump_failed``), never raised. Expanded neighbours that are missing, already
    recalled, or (with ``working_dir``) project notes of another directory are
    skipped. Recall, expansion, lesson and procedure errors of any kind are logged
    (``memory.context.recall_failed`` / ``memory.context.part_failed``) and give empty
    results; profile and index errors propagate.
    """
    profiles, notes, links = stores.profiles, stores.notes, stores.links
    lessons, procedures = stores.lessons, stores.procedures
    working_dir, session = scope.working_dir, scope.session
    k, lessons_k, procedures_k = plan.k, plan.lessons_k, plan.procedures_k
    score_blend, profile_vote_floor = plan.score_blend, plan.profile_vote_floor
    facts = profiles.list()
    if profile_vote_floor is not None and facts:
        hidden = {r[0] for r in profiles.conn.execute(
            "SELECT id FROM profile_facts WHERE superseded_by IS NULL AND vote_score <= ?",
            (profile_vote_floor,))}
        facts = [f for f in facts if f.id not in hidden]
    profile = gate_profile(facts, user_message, gate=plan.gate)
    shown_facts = {f.id for f in profile}
    before = (_safe_map(lambda: profiles.predecessors(profile), "profile_history")
              if plan.profile_history and profile else {})
    session_rows = (_safe("session_facts", lambda: [
        f for f in profiles.session_facts(session or "", plan.session_facts_limit)
        if f.id not in shown_facts]) if plan.session_facts_limit > 0 and session else [])

    zone = user_zone(facts)
    query = recall_query(scope.recall_text or user_message)
    recalled: list[Note] = []
    if scope.pinned is not None:
        recalled = _pinned(notes, scope.pinned, working_dir)
    elif k > 0:
        try:
            now = int(time.time() * 1000) if scope.now_ms is None else scope.now_ms
            window = time_window(query, now, zone) if plan.time_windows else None
            if window is not None:
                recalled = timed_recall(recall or notes.recall, notes, query, window, k=k,
                                        working_dir=working_dir)
            else:
                recalled = (recall or notes.recall)(query, k=k, working_dir=working_dir,
                                                    bump=False)
        except Exception as exc:  # noqa: BLE001 - a failed recall leaves ### recalled empty
            log.warning(
                "memory.context.recall_failed",
                error_type=type(exc).__name__,
                error=str(exc),
            )
            recalled = []

    if any(n.archived for n in recalled):
        recalled = _without_set_aside(notes, recalled)

    neighbours: list[Note] = []
    if plan.max_expanded > 0 and recalled:
        neighbours = _expand(notes, links, recalled, working_dir, plan.expansion_depth,
                             plan.max_expanded, plan.skip_link_origins)
        recalled = recalled + neighbours

    lesson_rows: list[LessonPointer] = []
    if lessons_k > 0 and query:
        lesson_rows = _safe("lessons", lambda: [
            row.pointer() for row in lessons.recall(query, k=lessons_k, working_dir=working_dir,
                                                   score_blend=score_blend)])
    procedure_rows: list[ProcedurePointer] = []
    if procedures_k > 0 and query:
        procedure_rows = _safe("procedures", lambda: [
            row.pointer()
            for row in procedures.recall(query, k=procedures_k, working_dir=working_dir,
                                         score_blend=score_blend)])

    index: list[Note] = []
    if plan.index_limit > 0:
        # Only the hits leave the index: what expansion adds must not change it, so the
        # index stays the same from one turn to the next and the LLM server's prompt
        # cache keeps covering it (render_context shows a neighbour only when the index
        # does not).
        seen = {n.id for n in recalled[:len(recalled) - len(neighbours)]}
        index = [
            n
            for n in notes.list_index(plan.index_limit, exclude_ids=seen, working_dir=working_dir)
            if n.id not in seen
        ][:plan.index_limit]

    if bump and recalled:
        try:
            notes.bump_recall([n.id for n in recalled])
        except apsw.Error as exc:
            log.warning("memory.context.bump_failed", error_type=type(exc).__name__,
                        error=str(exc))

    superseded = _safe_map(lambda: superseded_by(notes.conn, [n.id for n in recalled + index]),
                           "superseded")
    if superseded:
        # A note whose correction is shown too is left out: the prompt shows the
        # current statement only (a small model answered from the old one, marked
        # superseded, in a trial); one whose correction is not shown keeps its mark.
        shown = {n.id for n in recalled + index}
        stale = {old for old, new in superseded.items() if new in shown}
        if stale:
            kept = [n for n in recalled if n.id not in stale]
            neighbours = [n for n in neighbours if n.id not in stale]
            recalled, index = kept, [n for n in index if n.id not in stale]
            superseded = {k: v for k, v in superseded.items() if k not in stale}
    return MemoryContext(profile=profile, recalled=recalled, index=index,
                         lessons=lesson_rows, procedures=procedure_rows,
                         expanded=len(neighbours), superseded=superseded,
                         session_facts=session_rows, before=before, zone=zone)


def _pinned(notes: MemoryStore, ids: Sequence[int], working_dir: str | None) -> list[Note]:
    """The notes of ``ids`` that exist, in that order, each once, without project notes
    of a directory other than ``working_dir`` (as recall would leave them out)."""
    out: list[Note] = []
    for note_id in dict.fromkeys(ids):
        note = notes.get(note_id)
        if note is None or (note.scope == "project" and working_dir is not None
                            and note.working_dir != working_dir):
            continue
        out.append(note)
    return out


def _without_set_aside(notes: MemoryStore, recalled: list[Note]) -> list[Note]:
    """``recalled`` without the notes archived other than into a lesson: archived by
    hand (``memory notes archive``) or because they stated a fact's old value
    (:mod:`.staleness`). A note archived into a lesson stays recallable (its lesson
    distils it; the cold path's design)."""
    ids = [n.id for n in recalled if n.archived]
    marks = ",".join("?" * len(ids))
    aside = {r[0] for r in notes.conn.execute(
        f"SELECT id FROM memories WHERE id IN ({marks}) AND consolidated_into IS NULL", ids)}
    return [n for n in recalled if n.id not in aside]


TIMED_POOL = 24
"""How many of recall's best notes (at least; ``8 k`` when more) are searched for notes
written in the span a question names (:func:`timed_recall`)."""

TOPICLESS_WORDS = frozenset((
    "say", "said", "tell", "told", "talk", "talked", "mention", "mentioned", "discuss",
    "discussed", "happen", "happened", "remind", "ask", "asked", "write", "wrote", "note",
    "noted", "remember", "chat", "chatted", "speak", "spoke", "do", "did", "done", "go",
    "went", "anything", "something", "thing", "things", "stuff", "about", "us"))
"""Words that name no topic: "what did I say last week?" asks about a time only."""


def _topicless(query: str, window: TimeWindow) -> bool:
    """Whether ``query`` without the words naming its time holds no topic word (every
    recall term is a stopword or in :data:`TOPICLESS_WORDS`)."""
    parsed = build_recall_query(query.replace(window.words, " "))
    if parsed is None:
        return True
    return all(part.strip('"').lower() in TOPICLESS_WORDS for part in parsed.parts)


def timed_recall(recall: Callable[..., list[Note]], notes: MemoryStore, query: str,
                 window: TimeWindow, *, k: int, working_dir: str | None) -> list[Note]:
    """Recall for a question that names a time span: of recall's best
    ``max(TIMED_POOL, 8 k)`` notes (at most 50) those written inside ``window`` come
    first, best first, and recall's own best fill the rest of the ``k`` slots. A
    question about the time only ("what did I say last week?": no topic word, see
    :data:`TOPICLESS_WORDS`) recalls the newest notes written in the span
    (``MemoryStore.written_between``). A span with no note (a future deadline, a
    birthday) changes nothing. Measured on LoCoMo dev (``python -m bench.locomo_temporal
    --retrieval``). Raises what ``recall`` raises."""
    pool = recall(query, k=min(50, max(TIMED_POOL, 8 * k)), working_dir=working_dir,
                  bump=False)
    inside = [n for n in pool if window.start_ms <= n.created_at < window.end_ms]
    if _topicless(query, window):
        inside = notes.written_between(window.start_ms, window.end_ms, limit=k,
                                       working_dir=working_dir) or inside
    chosen = inside[:k]
    ids = {n.id for n in chosen}
    return (chosen + [n for n in pool if n.id not in ids])[:k]


def _safe_map(fn: Callable[[], dict[int, T]], what: str) -> dict[int, T]:
    """A map that only decorates the context (supersede marks, earlier values); any
    error is logged, ``{}`` returned."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a mark is never worth failing the turn
        log.warning("memory.context.part_failed", part=what,
                    error_type=type(exc).__name__, error=str(exc))
        return {}


def _safe(what: str, fn: Callable[[], list[T]]) -> list[T]:
    """Run a fire-safe read of the context: any exception is logged, ``[]`` returned."""
    try:
        return fn()
    except Exception as exc:  # each part fire-safe (errors -> [])
        log.warning("memory.context.part_failed", part=what, error_type=type(exc).__name__,
                    error=str(exc))
        return []


def _visible(note: Note, working_dir: str | None) -> bool:
    """Whether an expanded note may be shown in a session of ``working_dir`` (the
    visibility rule of recall: global notes plus that directory's)."""
    return working_dir is None or note.scope == "all" or note.working_dir == working_dir


def _expand(notes: MemoryStore, links: LinkStore, base: list[Note], working_dir: str | None,
            depth: int, cap: int, skip_origins: tuple[str, ...] = ()) -> list[Note]:
    """Hydrate the BFS neighbours of ``base``; fire-safe
    (errors -> ``[]``). The caller bumps their recall counters."""

    def run() -> list[Note]:
        seen = {n.id for n in base}
        extra: list[Note] = []
        for note_id in links.expand([n.id for n in base], depth=depth, max_expanded=cap,
                                    skip_origins=skip_origins):
            if note_id in seen:
                continue
            note = notes.get(note_id)
            if note is None or not _visible(note, working_dir):
                continue
            seen.add(note_id)
            extra.append(note)
        if extra:
            log.debug("memory.context.link_expansion", hits=len(extra))
        return extra

    return _safe("link_expansion", run)
