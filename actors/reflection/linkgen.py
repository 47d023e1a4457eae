"""The link generator's prompt, grammar and parser.

After a turn, the notes the turn surfaced (its recalled notes, the allowlist) are shown
to the model, which answers ``NONE`` or up to ``maxLinksPerCall`` lines
``LINK <from> <to> kind=<KIND>``. The grammar is built per call and admits only the
allowlisted ids, so even a small model cannot name a note the turn did not show; the
parser checks everything again (a server that ignores grammars, a cloud answer):

* trimmed empty or ``NONE`` (any case) → no links;
* a JSON body ``{"kind": "links", "links": [{"from_id", "to_id", "link_kind"}]}`` or
  ``{"kind": "none"}`` is tried first (cloud structured outputs), the lines otherwise;
* each line must match exactly; ids positive and both in the allowlist; no self-loop;
  kind one of the six (default ``RELATES_TO``); ``(from, to, kind)`` duplicates
  collapse to the first; parsing stops at ``max_links``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence

from actors.store.records import LINK_KINDS, LinkIn
from actors.store.render import neutralise
from runtime.services.structured import with_line_schema

__all__ = ["LINK_SYSTEM", "build_link_prompt", "link_grammar", "parse_links",
           "PREVIEW_CHARS"]

#: Chars of each note shown to the link generator.
PREVIEW_CHARS = 200

LINK_SYSTEM = (
    "You connect notes in a personal memory. You are shown notes, each as '#id: text'.\n"
    "For each pair of notes about the same person, thing or event, write one line:\n"
    "LINK <id> <id> kind=<KIND>\n"
    "KIND is RELATES_TO (same topic), CAUSED_BY (the first happened because of the "
    "second), REFERENCES (the first mentions the second), CONTRADICTS, DUPLICATES (same "
    "content) or SUPERSEDES (the first replaces the second, newer information).\n"
    "Link only notes that really belong together. If none do, write NONE."
)

_LINE = re.compile(r"LINK\s+#?(\d+)\s+#?(\d+)(?:\s+kind=([A-Z_]+))?")


def build_link_prompt(candidates: Sequence[tuple[int, str]]) -> str:
    """The user part of the call: ``#id: preview`` lines (one line each, ≤ 200 chars),
    role markers and headings in the notes neutralised (``render.neutralise``)."""
    rows = [neutralise(f"#{i}: {' '.join(text.split())[:PREVIEW_CHARS]}") for i, text in candidates]
    return "Notes:\n" + "\n".join(rows) + "\n\nLinks:"


def link_grammar(ids: Iterable[int], max_links: int) -> str:
    """GBNF admitting ``NONE`` or 1..``max_links`` LINK lines over ``ids`` only, with
    its JSON-schema form (``{"lines": [...]}``,
    :func:`runtime.services.structured.with_line_schema`)."""
    numbers = [str(i) for i in sorted(set(ids))]
    alts = " | ".join(f'"{i}"' for i in numbers)
    kinds = " | ".join(f'"{k}"' for k in LINK_KINDS)
    one_id = "(" + "|".join(numbers) + ")"
    return with_line_schema(
        f'root ::= "NONE" | link{{1,{max_links}}}\n'
        'link ::= "LINK " id " " id " kind=" kind "\\n"\n'
        f"id ::= {alts}\n"
        f"kind ::= {kinds}\n",
        "memory_links", f"NONE|LINK {one_id} {one_id} kind=({'|'.join(LINK_KINDS)})",
        max_lines=max_links)


def _from_json(text: str) -> list[tuple[int, int, str]] | None:
    try:
        body = json.loads(text)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    if body.get("kind") == "none":
        return []
    links = body.get("links")
    if body.get("kind") != "links" or not isinstance(links, list):
        return None
    out = []
    for item in links:
        if isinstance(item, dict):
            a, b, k = item.get("from_id"), item.get("to_id"), item.get("link_kind") or "RELATES_TO"
            if isinstance(a, int) and isinstance(b, int) and isinstance(k, str):
                out.append((a, b, k))
    return out


def parse_links(text: str, allow: Iterable[int], max_links: int) -> tuple[list[LinkIn], int]:
    """Parse a completion into at most ``max_links`` links between allowlisted ids.

    Returns ``(links, dropped)``: ``dropped`` counts lines or items refused (format,
    an id outside the allowlist, a self-loop, an unknown kind, a duplicate)."""
    allowed = set(allow)
    text = (text or "").strip()
    if not text or text.upper() == "NONE":
        return [], 0
    raw = _from_json(text) if text.startswith("{") else None
    dropped = 0
    if raw is None:
        raw = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.upper() == "NONE":
                continue
            m = _LINE.fullmatch(line)
            if m is None:
                dropped += 1
                continue
            raw.append((int(m[1]), int(m[2]), m[3] or "RELATES_TO"))
    out: list[LinkIn] = []
    seen: set[tuple[int, int, str]] = set()
    for a, b, kind in raw:
        if (a <= 0 or b <= 0 or a == b or a not in allowed or b not in allowed
                or kind not in LINK_KINDS or (a, b, kind) in seen):
            dropped += 1
            continue
        if len(out) >= max_links:
            break
        seen.add((a, b, kind))
        out.append(LinkIn(a, b, kind))
    return out, dropped
