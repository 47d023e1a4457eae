"""What the ``atomic-agent`` CLI prints: its exit statuses, times, facts, notes, lessons,
procedures and provenance as text (``--json`` prints the protocol's shapes instead)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import msgspec

from actors.memory import ops
from actors.memory.client import MemoryRunner
from actors.store.dates import written_date

from .safe_text import one_line

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


def print_fact(f: dict[str, Any]) -> None:
    """One profile fact: ``*`` pinned (always shown) or ``~`` shown on its keywords."""
    mark = "*" if f.get("pinned") else "~"
    kw = f" [keywords: {', '.join(f['keywords'])}]" if f.get("keywords") else ""
    print(f"{mark} {f['key']}: {one_line(f['value'])}{one_line(kw)}")
    if f.get("warning"):
        print(f"atomic-agent: warning: {f['warning']}", file=sys.stderr)


def print_note(n: dict[str, Any]) -> None:
    """One note on one line: id, tags, the day it was written (as the prompt shows it),
    score when recalled, the start of its text."""
    tags = f" [{', '.join(n['tags'])}]" if n.get("tags") else ""
    text = " ".join(n["content"].split())[:100]
    day = f" {written_date(n['createdAt'])}" if isinstance(n.get("createdAt"), int) else ""
    score = f" (score {n['score']:.2f})" if n.get("score") is not None else ""
    print(f"#{n['id']}{tags}{day}{score} {text}")


def provenance(row: dict[str, Any], key: str = "source") -> str:
    """"reflection, session s-1, turn t-2" for a fact version (``key`` source) or a note
    (``key`` origin); "unknown" for rows written before provenance was kept."""
    parts = [row.get(key) or "unknown"]
    if row.get("sessionId"):
        parts.append(f"session {row['sessionId']}")
    if row.get("turnId"):
        parts.append(f"turn {row['turnId']}")
    return ", ".join(parts)


def print_history(versions: list[dict[str, Any]]) -> None:
    """A fact's versions, oldest first: when, state, value, who wrote it and who ended
    it (``removedBy``, with its turn)."""
    width = max((len(v["value"]) for v in versions), default=0)
    for v in versions:
        if v.get("supersededBy") is None:
            state = "active"
        elif v["supersededBy"] == v.get("id"):
            state = "removed"
        else:
            state = "replaced"
        ended = ""
        if state != "active" and v.get("removedBy"):
            ended = f"; {state} by {v['removedBy']}" + (
                f", turn {v['removedTurnId']}" if v.get("removedTurnId") else "")
        print(f"{when(v['validFrom'])}  {state:<8}  {one_line(v['value']):<{min(width, 40)}}  "
              f"({one_line(provenance(v) + ended)})")


async def print_note_detail(c: MemoryRunner, n: dict[str, Any]) -> None:
    """``memory notes show``: the note and everything known about it."""
    print(f"#{n['id']} {n['content']}")
    print(f"  tags: {', '.join(n['tags']) or '-'}")
    print(f"  written by: {provenance(n, 'origin')}")
    where = n.get("scope", "all") + (f" ({n['workingDir']})" if n.get("workingDir") else "")
    print(f"  scope: {where}{'; archived' if n.get('archived') else ''}")
    print(f"  created: {when(n.get('createdAt'))}; updated: {when(n.get('updatedAt'))}")
    count = n.get("recallCount", 0)
    print(f"  recalled: {count} time{'s' if count != 1 else ''}"
          + (f", last {when(n['lastRecalledAt'])}" if n.get("lastRecalledAt") else ""))
    links = await c.run(ops.LinksList(id=n["id"], limit=50))
    rows = [f"-{e.kind}-> #{e.to_id}" if e.from_id == n["id"]
            else f"<-{e.kind}- #{e.from_id}" for e in links]
    print(f"  links: {', '.join(rows) if rows else '-'}")


def pointer(marker: str, row: dict[str, Any]) -> str:
    tags = f" [{','.join(row['tags'])}]" if row.get("tags") else ""
    status = " (deprecated)" if row.get("status") == "deprecated" else ""
    return f"{marker}{row['id']}{tags}{status} {' '.join(row['activation'].split())}"


def print_lesson(row: dict[str, Any]) -> None:
    print(pointer("*", row))
    print(f"principle: {row['principle']}")
    print(f"parents: {', '.join(f'#{i}' for i in row['parentIds']) or '-'}")
    print(f"status: {row['status']}  success: {row['successCount']}  "
          f"failure: {row['failureCount']}")


def print_procedure(row: dict[str, Any]) -> None:
    print(pointer(">", row))
    for i, step in enumerate(row["steps"], 1):
        hint = f" [@{step['toolHint']}]" if step.get("toolHint") else ""
        print(f"{i}. {step['description']}{hint}")
    print(f"parent lessons: {', '.join(f'*{i}' for i in row['parentLessonIds']) or '-'}  "
          f"parent notes: {', '.join(f'#{i}' for i in row['parentMemoryIds']) or '-'}")
    print(f"status: {row['status']}  source: {row['source']}  uses: {row['useCount']}")


def counts_text(counts: dict[str, int]) -> str:
    """``{"notes": 3, "factVersions": 2, …}`` as ``3 notes, 2 fact versions, …``."""
    names = {"facts": "facts", "factVersions": "fact versions", "notes": "notes",
             "links": "links", "lessons": "lessons", "procedures": "procedures"}
    return ", ".join(f"{counts[k]} {names.get(k, k)}" for k in counts)

def turns_text(n: int) -> str:
    """"1 turn", "3 turns"."""
    return f"{n} turn{'s' if n != 1 else ''}"
