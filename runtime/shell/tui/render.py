"""Pure text helpers of the TUI: what each memory channel shows, and what a turn's
prompt tail says memory did (docs/protocol.md §3, §5; docs/architecture.md §5).

Nothing here talks to the daemon or to textual; every function takes the store's records
the daemon's replies decode to (:mod:`actors.store.records`; times in Unix milliseconds)
and returns strings or lists of strings, so they are tested directly.
"""

from __future__ import annotations

import re
import textwrap
import time
from dataclasses import dataclass, field
from typing import Literal

from actors.store.records import Lesson, Link, Note, Procedure, ProfileFact, Vote

from ..memory_feedback import UNMET_CLAIMS
from ..outbound import ReflectionFrame
from ..safe_text import one_line as escape_line
from ..safe_text import visible

CHANNELS = ("profile", "notes", "lessons", "procedures", "links", "votes")
"""The Manage → Memory channels, in the order of the ``1``–``6`` keys."""

ARCHIVE_FILTERS: tuple[Literal["active", "archived", "all"], ...] = ("active", "archived", "all")
"""Values of ``memory.notes.list`` ``archived``, in the order ``f`` cycles them."""

COLUMNS: dict[str, tuple[str, ...]] = {
    "profile": ("key", "value", "shown", "by"),
    "notes": ("id", "tags", "content"),
    "lessons": ("id", "tags", "activation"),
    "procedures": ("id", "steps", "activation"),
    "links": ("from", "kind", "to", "weight"),
    "votes": ("id", "kind", "target", "dir", "session"),
}
"""Table columns per channel; :func:`row_cells` fills them in this order."""


EMPTY_HINTS = {
    "profile": " — from what you tell the agent; n adds one",
    "notes": " — from conversations and tools; n adds one",
    "lessons": " — not distilled yet (no consolidator); memory import",
    "procedures": " — not distilled yet (no consolidator); memory import",
    "links": " — from memory.links.add (websocket) and imports",
}
"""What fills an empty channel, said in its status line."""


def channel_status(channel: str, n: int, *, archive: str = "active", query: str = "",
                   voting_enabled: bool | None = None) -> str:
    """The browser's status line for ``n`` rows of ``channel``: what they are, and for
    an empty channel what fills it (:data:`EMPTY_HINTS`)."""
    what = {"profile": "active fact(s)", "notes": f"{archive} note(s)",
            "lessons": "active lesson(s)", "procedures": "active procedure(s)",
            "links": "link(s)", "votes": "vote(s)"}[channel]
    if query:
        what = f"match(es) for {query!r}" + (" (keyword search)" if channel == "notes" else "")
    text = f"{n} {what}"
    if channel == "votes" and voting_enabled is False:
        text += " — voting is off (memory.voting.enabled)"
    elif not n and not query:
        text += EMPTY_HINTS.get(channel, "")
    return text


def one_line(text: str, width: int) -> str:
    """``text`` with runs of whitespace folded to one space and control characters shown
    as escapes (:func:`~runtime.shell.safe_text.visible`), cut to ``width`` characters (an
    ellipsis marks a cut). ``width`` < 1 gives ``""``."""
    flat = " ".join(visible(str(text)).split())
    if width < 1:
        return ""
    return flat if len(flat) <= width else flat[: max(width - 1, 0)] + "…"


def when(ms: int | None) -> str:
    """Unix milliseconds as local ``YYYY-MM-DD HH:MM:SS``; ``-`` for None."""
    if ms is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


Row = ProfileFact | Note | Lesson | Procedure | Link | Vote
"""A row of one of the browser's channels: the store's record (:mod:`actors.store.records`)."""

CHANNEL_OF: dict[type[Row], str] = {ProfileFact: "profile", Note: "notes", Lesson: "lessons",
                                    Procedure: "procedures", Link: "links", Vote: "votes"}
"""The channel each kind of row is listed in."""


def row_key(row: Row) -> str:
    """A stable key of a row in its channel (the table's row key)."""
    match row:
        case ProfileFact():
            return f"fact:{row.key}"
        case Link():
            return f"link:{row.from_id}:{row.to_id}:{row.kind}"
        case _:
            return f"{CHANNEL_OF[type(row)]}:{row.id}"


def row_cells(row: Row, width: int = 80) -> tuple[str, ...]:
    """The table cells of one row (the columns of :data:`COLUMNS` for its channel); the
    free-text column is cut so the row fits ``width`` characters."""
    match row:
        case ProfileFact():
            shown = "always" if row.pinned else "if " + ",".join(row.keywords)
            return (one_line(row.key, 20), one_line(row.value, max(width - 52, 10)),
                    one_line(shown, 14), one_line(row.source or "-", 10))
        case Note():
            mark = "(archived) " if row.archived else ""
            score = f"{row.score:.2f} " if row.score is not None else ""
            return (f"#{row.id}", one_line(",".join(row.tags), 16),
                    one_line(score + mark + row.content, max(width - 28, 10)))
        case Lesson() | Procedure():
            lesson = isinstance(row, Lesson)
            middle = (one_line(",".join(row.tags), 16) if isinstance(row, Lesson)
                      else str(len(row.steps)))
            status = " (deprecated)" if row.status == "deprecated" else ""
            return (f"{'*' if lesson else '>'}{row.id}", middle,
                    one_line(row.activation + status, max(width - 28, 10)))
        case Link():
            return (f"#{row.from_id}", row.kind, f"#{row.to_id}", f"{row.weight:g}")
        case Vote():
            return (str(row.id), row.kind, f"{row.target_id}",
                    "+1" if row.direction > 0 else "-1", one_line(row.session_id or "-", 24))


def matches(row: Row, query: str) -> bool:
    """Keyword filter for the channels searched on the client (every channel but
    notes): True when every word of ``query`` occurs, case-insensitively, in the row's
    cells or its long text (principle, steps)."""
    words = query.lower().split()
    text = " ".join(row_cells(row, 10_000)).lower()
    if isinstance(row, Lesson):
        text += " " + row.principle.lower()
    if isinstance(row, Procedure):
        text += " " + " ".join(s.description for s in row.steps).lower()
    return all(w in text for w in words)


def _where(session_id: str | None, turn_id: str | None) -> str:
    return "".join(f", {label} {value}" for label, value in (("session", session_id),
                                                             ("turn", turn_id)) if value)


def fact_history(key: str, history: list[ProfileFact]) -> list[str]:
    """Detail of a profile fact: every version, oldest first (bi-temporal
    ``memory.profile.history``), the active one marked."""
    lines = [f"profile fact {key} — {len(history)} version(s)", ""]
    number = {f.id: i for i, f in enumerate(history, 1)}  # v1 = the oldest
    for i, f in enumerate(history, 1):
        sup = f.superseded_by
        state = ("active" if sup is None else "removed" if sup == f.id
                 else f"replaced by v{number.get(sup, '?')}")
        shown = "always shown" if f.pinned else f"shown if [{', '.join(f.keywords)}]"
        ended = ""
        if sup is not None and f.removed_by:
            ended = f"; {'removed' if sup == f.id else 'replaced'} by {f.removed_by}"
            ended += f", turn {f.removed_turn_id}" if f.removed_turn_id else ""
        lines.append(f"v{i}  {when(f.valid_from)}  {state}  ({shown}; by "
                     f"{f.source or 'unknown'}{_where(f.session_id, f.turn_id)}{ended})")
        lines.append(f"    {escape_line(f.value)}")
    if not history:
        lines.append("(no history)")
    return lines


def _other_end(e: Link, nid: int) -> tuple[int, str]:
    """The note at ``e``'s other end from ``nid``, and the arrow as seen from ``nid``."""
    if e.from_id == nid:
        return e.to_id, f"-{e.kind}->"
    return e.from_id, f"<-{e.kind}-"


def note_detail(note: Note, links: list[Link], neighbours: dict[int, Note]) -> list[str]:
    """Detail of a note: full content, metadata, and its edges with the preview of the
    note at the other end (``neighbours`` maps id → note; a missing one shows ``?``)."""
    lines = [f"note #{note.id}  tags: {', '.join(note.tags) or '-'}",
             f"written by {note.origin or 'unknown'}{_where(note.session_id, note.turn_id)}",
             f"recalled {note.recall_count} time(s)" + (
                 f", last {when(note.last_recalled_at)}" if note.last_recalled_at else ""),
             f"scope: {note.scope}"
             + (f" ({note.working_dir})" if note.working_dir else "")
             + ("  ARCHIVED" if note.archived else ""),
             f"created {when(note.created_at)}  updated {when(note.updated_at)}",
             "", note.content, "", f"links ({len(links)}):"]
    for e in links:
        other, arrow = _other_end(e, note.id)
        preview = one_line(neighbours[other].content, 50) if other in neighbours else "?"
        lines.append(f"  {arrow} #{other} ({e.weight:g}) {preview}")
    if not links:
        lines.append("  (none)")
    return lines


def neighbourhood(root: int, edges: list[Link], notes: dict[int, Note],
                  depth: int) -> list[str]:
    """The link neighbourhood of note ``root`` up to ``depth`` hops: one line per note
    reached, indented by hop, with the edge that reached it (BFS, each note once)."""
    lines = [f"neighbourhood of #{root}, {depth} hop(s): {len(notes) - 1} note(s)"]
    seen, frontier = {root}, [root]
    for hop in range(1, depth + 1):
        nxt: list[int] = []
        for nid in frontier:
            for e in edges:
                if nid not in (e.from_id, e.to_id):
                    continue
                other, arrow = _other_end(e, nid)
                if other in seen:
                    continue
                seen.add(other)
                nxt.append(other)
                preview = one_line(notes[other].content, 44) if other in notes else "?"
                lines.append(f"{'  ' * hop}#{nid} {arrow} #{other} {preview}")
        frontier = nxt
    return lines


def lesson_detail(row: Lesson, parents: dict[int, Note]) -> list[str]:
    """Detail of a lesson: activation, principle, and its parent notes' previews."""
    lines = [f"lesson *{row.id}  [{', '.join(row.tags)}]  {row.status}",
             f"when: {row.activation}", "", f"principle: {row.principle}", "",
             (f"success {row.success_count}  failure {row.failure_count}  "
              f"updated {when(row.updated_at)}"), "", "parents:"]
    for pid in row.parent_ids:
        preview = one_line(parents[pid].content, 60) if pid in parents else "(gone)"
        lines.append(f"  #{pid} {preview}")
    if not row.parent_ids:
        lines.append("  (none)")
    return lines


def procedure_detail(row: Procedure) -> list[str]:
    """Detail of a procedure: activation and its numbered steps with tool hints."""
    lines = [f"procedure >{row.id}  [{', '.join(row.tags)}]  {row.status}  source: {row.source}",
             f"when: {row.activation}", "", "steps:"]
    for i, step in enumerate(row.steps, 1):
        hint = f"  [@{step.tool_hint}]" if step.tool_hint else ""
        lines.append(f"  {i}. {step.description}{hint}")
    lessons = ", ".join(f"*{i}" for i in row.parent_lesson_ids) or "-"
    notes = ", ".join(f"#{i}" for i in row.parent_memory_ids) or "-"
    lines += ["", f"parent lessons: {lessons}  parent notes: {notes}",
              f"uses {row.use_count}  success {row.success_count}  failure {row.failure_count}"]
    return lines


def link_detail(row: Link, ends: dict[int, Note]) -> list[str]:
    """Detail of an edge: both notes' previews, kind, weight, time."""
    def end(nid: int) -> str:
        return f"#{nid} {one_line(ends[nid].content, 60)}" if nid in ends else f"#{nid} (gone)"
    return [f"link {row.kind}  weight {row.weight:g}  {row.origin}  created {when(row.created_at)}",
            "", f"from {end(row.from_id)}", f"  to {end(row.to_id)}"]


def vote_detail(row: Vote) -> list[str]:
    """Detail of a vote audit row."""
    return [f"vote {row.id}: {row.kind} {row.target_id} {'+1' if row.direction > 0 else '-1'}",
            f"session {row.session_id or '-'}  turn {row.turn_index}",
            f"at {when(row.created_at)}"]


# ----------------------------------------------------------- what a turn was given

_SECTION_RE = re.compile(r"^### ([a-z-]+)\n(.*?)(?=\n\n###|\n*\Z)", re.DOTALL | re.MULTILINE)
_POINTER_RE = re.compile(r"^- #(\d+)(?: \[[^\]]*\])? ?(.*)$")
# The day a note was written (``- #12 8 May 2023: …``): the 30-column panel leaves it out.
_WRITTEN_RE = re.compile(r"^\d{1,2} [A-Z][a-z]{2} \d{4}: ")


@dataclass
class TurnMemory:
    """What memory did for one turn, as the side panel shows it.

    ``recalled``: (note id, preview without the day it was written) from ``###
    recalled``; ``facts``: ``key: value`` lines from ``### session-facts`` and ``###
    profile``; ``lessons`` / ``procedures``: pointer lines;
    ``reflection``: the ``reflection`` frame once it lands; ``wrote``: lines saying
    what was written (tool calls, reflection), filled by the chat screen.
    """

    recalled: list[tuple[int, str]] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)
    lessons: list[str] = field(default_factory=list)
    procedures: list[str] = field(default_factory=list)
    index_size: int = 0
    reflection: ReflectionFrame | None = None
    wrote: list[str] = field(default_factory=list)


def parse_tail(tail: str) -> TurnMemory:
    """Read the memory sections of a ``prompt`` step's ``tail`` (docs/architecture.md
    §5). Unknown or missing sections are ignored; never raises on odd text."""
    out = TurnMemory()
    for name, body in _SECTION_RE.findall(tail):
        lines = [ln for ln in body.splitlines() if ln.strip()]
        if name == "recalled":
            for ln in lines:
                m = _POINTER_RE.match(ln)
                if m:
                    out.recalled.append((int(m.group(1)), _WRITTEN_RE.sub("", m.group(2))))
        elif name in ("session-facts", "profile"):
            out.facts += [ln.removeprefix("- ") for ln in lines]
        elif name == "lessons":
            out.lessons = lines
        elif name == "procedures":
            out.procedures = lines
        elif name == "memory-index":
            out.index_size = sum(1 for ln in lines if _POINTER_RE.match(ln))
    return out


def panel_lines(mem: TurnMemory, width: int = 30) -> list[str]:
    """The side panel's text for ``mem``: plain lines (show them without markup: they
    hold stored text), headings in capitals, each cut to ``width``."""
    lines = ["RECALLED"]
    lines += [one_line(f"#{i} {p}", width) for i, p in mem.recalled] or ["  (none)"]
    lines += ["", "PROFILE INJECTED"]
    lines += [one_line(f, width) for f in mem.facts] or ["  (none)"]
    if mem.lessons or mem.procedures:
        lines += ["", "LESSONS / PROCEDURES"]
        lines += [one_line(x, width) for x in mem.lessons + mem.procedures]
    lines += ["", f"index: {mem.index_size} other note(s)", "", "REFLECTION"]
    r = mem.reflection
    if r is None:
        lines.append("  (pending)")
    else:
        lines.append(one_line(f"{r.outcome} in {r.latency_ms:.0f} ms", width))
        if r.reason:
            lines.append(one_line(f"  {r.reason}", width))
        for k in r.not_kept:
            lines.append(one_line(f"  not kept: {k.key}", width))
        for claim in r.unmet_claims:
            if claim in UNMET_CLAIMS:
                lines += ["  ! " + part for part in textwrap.wrap(UNMET_CLAIMS[claim],
                                                                  max(width - 4, 10))]
    if mem.wrote:
        lines += ["", "WROTE"] + [one_line(w, width) for w in mem.wrote]
    return lines
