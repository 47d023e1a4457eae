"""Pure text helpers of the TUI: what each memory channel shows, and what a turn's
prompt tail says memory did (docs/protocol.md §3, §5; docs/architecture.md §5).

Nothing here talks to the daemon or to textual; every function takes the dicts the
daemon sends (camelCase keys, times in Unix milliseconds) and returns strings or
lists of strings, so they are tested directly.
"""

from __future__ import annotations

import re
import textwrap
import time
from dataclasses import dataclass, field
from typing import Any, Literal

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


def row_key(channel: str, row: dict[str, Any]) -> str:
    """A stable key of a row in its channel (the table's row key)."""
    if channel == "profile":
        return f"fact:{row['key']}"
    if channel == "links":
        return f"link:{row['fromId']}:{row['toId']}:{row['kind']}"
    return f"{channel}:{row['id']}"


def row_cells(channel: str, row: dict[str, Any], width: int = 80) -> tuple[str, ...]:
    """The table cells of one row of ``channel`` (columns of :data:`COLUMNS`); the
    free-text column is cut so the row fits ``width`` characters."""
    if channel == "profile":
        shown = "always" if row.get("pinned") else "if " + ",".join(row.get("keywords") or [])
        return (one_line(row["key"], 20), one_line(row["value"], max(width - 52, 10)),
                one_line(shown, 14), one_line(row.get("source") or "-", 10))
    if channel == "notes":
        mark = "(archived) " if row.get("archived") else ""
        score = f"{row['score']:.2f} " if row.get("score") is not None else ""
        return (f"#{row['id']}", one_line(",".join(row.get("tags") or []), 16),
                one_line(score + mark + row["content"], max(width - 28, 10)))
    if channel in ("lessons", "procedures"):
        marker = "*" if channel == "lessons" else ">"
        middle = (one_line(",".join(row.get("tags") or []), 16) if channel == "lessons"
                  else str(len(row.get("steps") or [])))
        status = " (deprecated)" if row.get("status") == "deprecated" else ""
        return (f"{marker}{row['id']}", middle,
                one_line(row["activation"] + status, max(width - 28, 10)))
    if channel == "links":
        return (f"#{row['fromId']}", row["kind"], f"#{row['toId']}", f"{row['weight']:g}")
    if channel == "votes":
        return (str(row["id"]), row["kind"], f"{row['targetId']}",
                "+1" if row["direction"] > 0 else "-1", one_line(row.get("sessionId") or "-", 24))
    raise ValueError(f"unknown channel {channel!r}")


def matches(channel: str, row: dict[str, Any], query: str) -> bool:
    """Keyword filter for the channels searched on the client (every channel but
    notes): True when every word of ``query`` occurs, case-insensitively, in the row's
    cells or its long text (principle, steps)."""
    words = query.lower().split()
    text = " ".join(row_cells(channel, row, 10_000)).lower()
    if channel == "lessons":
        text += " " + str(row.get("principle", "")).lower()
    if channel == "procedures":
        text += " " + " ".join(s.get("description", "") for s in row.get("steps") or []).lower()
    return all(w in text for w in words)


def fact_history(key: str, history: list[dict[str, Any]]) -> list[str]:
    """Detail of a profile fact: every version, oldest first (bi-temporal
    ``memory.profile.history``), the active one marked."""
    lines = [f"profile fact {key} — {len(history)} version(s)", ""]
    number = {f.get("id"): i for i, f in enumerate(history, 1)}  # v1 = the oldest
    for i, f in enumerate(history, 1):
        sup = f.get("supersededBy")
        state = ("active" if sup is None else "removed" if sup == f.get("id")
                 else f"replaced by v{number.get(sup, '?')}")
        shown = ("always shown" if f.get("pinned")
                 else f"shown if [{', '.join(f.get('keywords') or [])}]")
        by = f.get("source") or "unknown"
        where = "".join(f", {label} {f[k]}" for label, k in (("session", "sessionId"),
                                                               ("turn", "turnId")) if f.get(k))
        ended = ""
        if sup is not None and f.get("removedBy"):
            ended = f"; {'removed' if sup == f.get('id') else 'replaced'} by {f['removedBy']}"
            ended += f", turn {f['removedTurnId']}" if f.get("removedTurnId") else ""
        lines.append(f"v{i}  {when(f.get('validFrom'))}  {state}  ({shown}; by {by}{where}"
                     f"{ended})")
        lines.append(f"    {escape_line(str(f.get('value', '')))}")
    if not history:
        lines.append("(no history)")
    return lines


def note_detail(note: dict[str, Any], links: list[dict[str, Any]],
                neighbours: dict[int, dict[str, Any]]) -> list[str]:
    """Detail of a note: full content, metadata, and its edges with the preview of the
    note at the other end (``neighbours`` maps id → note; a missing one shows ``?``)."""
    tags = ", ".join(note.get("tags") or []) or "-"
    by = note.get("origin") or "unknown"
    where = "".join(f", {label} {note[k]}" for label, k in (("session", "sessionId"),
                                                              ("turn", "turnId")) if note.get(k))
    count = note.get("recallCount", 0)
    lines = [f"note #{note['id']}  tags: {tags}",
             f"written by {by}{where}",
             f"recalled {count} time(s)" + (f", last {when(note['lastRecalledAt'])}"
                                             if note.get("lastRecalledAt") else ""),
             f"scope: {note.get('scope')}"
             + (f" ({note['workingDir']})" if note.get("workingDir") else "")
             + ("  ARCHIVED" if note.get("archived") else ""),
             f"created {when(note.get('createdAt'))}  updated {when(note.get('updatedAt'))}",
             "", note["content"], "", f"links ({len(links)}):"]
    for e in links:
        other = e["toId"] if e["fromId"] == note["id"] else e["fromId"]
        arrow = f"-{e['kind']}->" if e["fromId"] == note["id"] else f"<-{e['kind']}-"
        preview = one_line(neighbours[other]["content"], 50) if other in neighbours else "?"
        lines.append(f"  {arrow} #{other} ({e['weight']:g}) {preview}")
    if not links:
        lines.append("  (none)")
    return lines


def neighbourhood(root: int, edges: list[dict[str, Any]], notes: dict[int, dict[str, Any]],
                  depth: int) -> list[str]:
    """The link neighbourhood of note ``root`` up to ``depth`` hops: one line per note
    reached, indented by hop, with the edge that reached it (BFS, each note once)."""
    lines = [f"neighbourhood of #{root}, {depth} hop(s): {len(notes) - 1} note(s)"]
    seen, frontier = {root}, [root]
    for hop in range(1, depth + 1):
        nxt: list[int] = []
        for nid in frontier:
            for e in edges:
                if nid not in (e["fromId"], e["toId"]):
                    continue
                other = e["toId"] if e["fromId"] == nid else e["fromId"]
                if other in seen:
                    continue
                seen.add(other)
                nxt.append(other)
                arrow = f"-{e['kind']}->" if e["fromId"] == nid else f"<-{e['kind']}-"
                preview = one_line(notes[other]["content"], 44) if other in notes else "?"
                lines.append(f"{'  ' * hop}#{nid} {arrow} #{other} {preview}")
        frontier = nxt
    return lines


def lesson_detail(row: dict[str, Any], parents: dict[int, dict[str, Any]]) -> list[str]:
    """Detail of a lesson: activation, principle, and its parent notes' previews."""
    lines = [(f"lesson *{row['id']}  [{', '.join(row.get('tags') or [])}]  "
              f"{row.get('status')}"),
             f"when: {row['activation']}", "", f"principle: {row['principle']}", "",
             (f"success {row.get('successCount', 0)}  failure {row.get('failureCount', 0)}  "
              f"updated {when(row.get('updatedAt'))}"), "", "parents:"]
    for pid in row.get("parentIds") or []:
        preview = one_line(parents[pid]["content"], 60) if pid in parents else "(gone)"
        lines.append(f"  #{pid} {preview}")
    if not row.get("parentIds"):
        lines.append("  (none)")
    return lines


def procedure_detail(row: dict[str, Any]) -> list[str]:
    """Detail of a procedure: activation and its numbered steps with tool hints."""
    lines = [(f"procedure >{row['id']}  [{', '.join(row.get('tags') or [])}]  "
              f"{row.get('status')}  source: {row.get('source')}"),
             f"when: {row['activation']}", "", "steps:"]
    for i, step in enumerate(row.get("steps") or [], 1):
        hint = f"  [@{step['toolHint']}]" if step.get("toolHint") else ""
        lines.append(f"  {i}. {step['description']}{hint}")
    lessons = ", ".join(f"*{i}" for i in row.get("parentLessonIds") or []) or "-"
    notes = ", ".join(f"#{i}" for i in row.get("parentMemoryIds") or []) or "-"
    lines += ["", f"parent lessons: {lessons}  parent notes: {notes}",
              (f"uses {row.get('useCount', 0)}  success {row.get('successCount', 0)}  "
               f"failure {row.get('failureCount', 0)}")]
    return lines


def link_detail(row: dict[str, Any], ends: dict[int, dict[str, Any]]) -> list[str]:
    """Detail of an edge: both notes' previews, kind, weight, time."""
    def end(nid: int) -> str:
        return f"#{nid} {one_line(ends[nid]['content'], 60)}" if nid in ends else f"#{nid} (gone)"
    return [f"link {row['kind']}  weight {row['weight']:g}  {row.get('origin', 'manual')}  "
            f"created {when(row.get('createdAt'))}",
            "", f"from {end(row['fromId'])}", f"  to {end(row['toId'])}"]


def vote_detail(row: dict[str, Any]) -> list[str]:
    """Detail of a vote audit row."""
    return [(f"vote {row['id']}: {row['kind']} {row['targetId']} "
             f"{'+1' if row['direction'] > 0 else '-1'}"),
            f"session {row.get('sessionId') or '-'}  turn {row.get('turnIndex')}",
            f"at {when(row.get('createdAt'))}"]


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
