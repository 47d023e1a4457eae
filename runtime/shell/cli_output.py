"""What the ``atomic-agent`` CLI prints: its exit statuses, times, facts, notes, lessons,
procedures and provenance as text (``--json`` prints the protocol's shapes instead)."""

from __future__ import annotations

import json
import time
import msgspec

from actors.memory import ops
from actors.memory.client import MemoryRunner
from actors.store.dates import written_date
from actors.store.records import Lesson, Link, Note, Procedure, ProfileFact

from .safe_text import one_line, print_error

EXIT_FAILED, EXIT_USAGE, EXIT_NOT_RUNNING = 1, 2, 3
"""1 = the operation failed, 2 = bad arguments or configuration, 3 = no daemon running."""


def json_line(frame: object) -> str:
    """A frame (or any reply) as one line of JSON, as the daemon sent it (``--json``)."""
    return json.dumps(msgspec.to_builtins(frame))

def when(ms: int | None) -> str:
    """Unix milliseconds as local ``YYYY-MM-DD HH:MM ZONE`` ("-" for None): the zone
    is named, since the prompt shows times in the profile's zone."""
    if ms is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(ms / 1000)).strip()


def print_fact(f: ProfileFact) -> None:
    """One profile fact: ``*`` pinned (always shown) or ``~`` shown on its keywords."""
    mark = "*" if f.pinned else "~"
    kw = f" [keywords: {', '.join(f.keywords)}]" if f.keywords else ""
    print(f"{mark} {f.key}: {one_line(f.value)}{one_line(kw)}")
    if f.warning:
        print_error(f"warning: {f.warning}")


def print_note(n: Note) -> None:
    """One note on one line: id, tags, whether it is the team's, the day it was written
    (as the prompt shows it), score when recalled, the start of its text."""
    tags = f" [{', '.join(n.tags)}]" if n.tags else ""
    text = " ".join(n.content.split())[:100]
    score = f" (score {n.score:.2f})" if n.score is not None else ""
    team = " (shared by your team)" if n.space == "team" else ""
    print(f"#{n.id}{tags}{team} {written_date(n.created_at)}{score} {text}")


def provenance(who: str | None, session_id: str | None, turn_id: str | None) -> str:
    """"reflection, session s-1, turn t-2": who wrote a fact version (its ``source``) or a
    note (its ``origin``), in which session and turn; "unknown" for rows written before
    provenance was kept."""
    parts = [who or "unknown"]
    if session_id:
        parts.append(f"session {session_id}")
    if turn_id:
        parts.append(f"turn {turn_id}")
    return ", ".join(parts)


def fact_state(v: ProfileFact) -> str:
    """"active", "removed" (its own id in ``superseded_by``) or "replaced"."""
    if v.superseded_by is None:
        return "active"
    return "removed" if v.superseded_by == v.id else "replaced"


def print_history(versions: list[ProfileFact]) -> None:
    """A fact's versions, oldest first: when, state, value, who wrote it and who ended
    it (``removed_by``, with its turn)."""
    width = max((len(v.value) for v in versions), default=0)
    for v in versions:
        state = fact_state(v)
        ended = ""
        if state != "active" and v.removed_by:
            ended = f"; {state} by {v.removed_by}" + (
                f", turn {v.removed_turn_id}" if v.removed_turn_id else "")
        written = provenance(v.source, v.session_id, v.turn_id)
        print(f"{when(v.valid_from)}  {state:<8}  {one_line(v.value):<{min(width, 40)}}  "
              f"({one_line(written + ended)})")


async def print_note_detail(c: MemoryRunner, n: Note) -> None:
    """``memory notes show``: the note and everything known about it."""
    print(f"#{n.id} {n.content}")
    print(f"  tags: {', '.join(n.tags) or '-'}")
    print(f"  written by: {provenance(n.origin, n.session_id, n.turn_id)}")
    where = n.scope + (f" ({n.working_dir})" if n.working_dir else "")
    print(f"  scope: {where}{'; archived' if n.archived else ''}")
    print(f"  created: {when(n.created_at)}; updated: {when(n.updated_at)}")
    count = n.recall_count
    print(f"  recalled: {count} time{'s' if count != 1 else ''}"
          + (f", last {when(n.last_recalled_at)}" if n.last_recalled_at else ""))
    links = await c.run(ops.LinksList(id=n.id, limit=50))
    rows = [f"-{e.kind}-> #{e.to_id}" if e.from_id == n.id
            else f"<-{e.kind}- #{e.from_id}" for e in links]
    print(f"  links: {', '.join(rows) if rows else '-'}")


def pointer(marker: str, row: Lesson | Procedure) -> str:
    """A lesson (``*``) or procedure (``>``) on one line: id, tags, deprecated or not, its
    activation."""
    tags = f" [{','.join(row.tags)}]" if row.tags else ""
    status = " (deprecated)" if row.status == "deprecated" else ""
    return f"{marker}{row.id}{tags}{status} {' '.join(row.activation.split())}"


def print_lesson(row: Lesson) -> None:
    """``memory lessons show``."""
    print(pointer("*", row))
    print(f"principle: {row.principle}")
    print(f"parents: {', '.join(f'#{i}' for i in row.parent_ids) or '-'}")
    print(f"status: {row.status}  success: {row.success_count}  "
          f"failure: {row.failure_count}")


def print_procedure(row: Procedure) -> None:
    """``memory procedures show``."""
    print(pointer(">", row))
    for i, step in enumerate(row.steps, 1):
        hint = f" [@{step.tool_hint}]" if step.tool_hint else ""
        print(f"{i}. {step.description}{hint}")
    print(f"parent lessons: {', '.join(f'*{i}' for i in row.parent_lesson_ids) or '-'}  "
          f"parent notes: {', '.join(f'#{i}' for i in row.parent_memory_ids) or '-'}")
    print(f"status: {row.status}  source: {row.source}  uses: {row.use_count}")


def print_link(e: Link) -> None:
    """One edge: ``#1 -RELATES_TO-> #2 (weight 1, manual)``."""
    print(f"#{e.from_id} -{e.kind}-> #{e.to_id} (weight {e.weight:g}, {e.origin})")


def counts_text(counts: dict[str, int]) -> str:
    """``{"notes": 3, "factVersions": 2, …}`` as ``3 notes, 2 fact versions, …``."""
    names = {"facts": "facts", "factVersions": "fact versions", "notes": "notes",
             "links": "links", "lessons": "lessons", "procedures": "procedures"}
    return ", ".join(f"{counts[k]} {names.get(k, k)}" for k in counts)

def turns_text(n: int) -> str:
    """"1 turn", "3 turns"."""
    return f"{n} turn{'s' if n != 1 else ''}"
