"""The vote runner's prompt, grammar and parser.

One call after a turn: the model sees the user's message, the assistant's reply and
the memory items the turn rendered (``memory``, ``lesson``, ``profile``,
``procedure``, each ``kind:id``), and answers ``NONE`` or up to :data:`MAX_VOTES`
lines ``UPVOTE <kind>:<id>`` (the item helped this reply) / ``DOWNVOTE <kind>:<id>``
(it was wrong or misleading). The grammar admits only this turn's items; the parser
drops any vote outside the allowlist, de-duplicates by item (first wins) and caps.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from actors.store.records import VoteIn
from actors.store.render import neutralise
from runtime.services.structured import with_line_schema

__all__ = ["MAX_VOTES", "VOTE_SYSTEM", "build_vote_prompt", "parse_votes", "vote_grammar"]

#: Votes of one call at most.
MAX_VOTES = 8
#: Chars of each item shown to the vote runner, and of the message and reply.
PREVIEW_CHARS, EXCHANGE_CHARS = 160, 600

VOTE_SYSTEM = (
    "You judge which remembered items helped an assistant's reply. You are shown the "
    "user's message, the assistant's reply and the memory items that were in its "
    "prompt, each as 'kind:id: text'.\n"
    "For an item that was correct and useful for this reply write: UPVOTE kind:id\n"
    "For an item that was wrong, outdated or misleading write: DOWNVOTE kind:id\n"
    "Leave out items that did not matter. If none mattered, write NONE."
)

_LINE = re.compile(r"(UPVOTE|DOWNVOTE)\s+(memory|lesson|profile|procedure):(\d+)")


def build_vote_prompt(user_message: str, reply: str,
                      items: Sequence[tuple[str, int, str]]) -> str:
    """The user part of the call; ``items`` are ``(kind, id, text)``; every line is
    neutralised (``render.neutralise``: no role markers or headings from stored text)."""
    rows = [neutralise(f"{k}:{i}: {' '.join(t.split())[:PREVIEW_CHARS]}") for k, i, t in items]
    return (neutralise(f"User: {' '.join(user_message.split())[:EXCHANGE_CHARS]}") + "\n"
            + neutralise(f"Assistant: {' '.join(reply.split())[:EXCHANGE_CHARS]}") + "\n\n"
            "Memory items:\n" + "\n".join(rows) + "\n\nVotes:")


def vote_grammar(items: Iterable[tuple[str, int]]) -> str:
    """GBNF admitting ``NONE`` or 1..:data:`MAX_VOTES` vote lines over ``items``
    (``(kind, id)``: kinds are lower-case words), with its JSON-schema form
    (``{"lines": [...]}``, :func:`runtime.services.structured.with_line_schema`)."""
    pairs = sorted(set(items))
    alts = " | ".join(f'"{k}:{i}"' for k, i in pairs)
    return with_line_schema(
        f'root ::= "NONE" | vote{{1,{MAX_VOTES}}}\n'
        'vote ::= ("UPVOTE " | "DOWNVOTE ") item "\\n"\n'
        f"item ::= {alts}\n",
        "memory_votes", "NONE|(UPVOTE|DOWNVOTE) (" + "|".join(f"{k}:{i}" for k, i in pairs)
        + ")", max_lines=MAX_VOTES)


def parse_votes(text: str, allow: Iterable[tuple[str, int]]) -> tuple[list[VoteIn], int]:
    """Parse a completion into votes on allowlisted items → ``(votes, dropped)``."""
    allowed = set(allow)
    text = (text or "").strip()
    if not text or text.upper() == "NONE":
        return [], 0
    out: list[VoteIn] = []
    seen: set[tuple[str, int]] = set()
    dropped = 0
    for line in text.splitlines():
        line = line.strip()
        if not line or line.upper() == "NONE":
            continue
        m = _LINE.fullmatch(line)
        item = (m[2], int(m[3])) if m else None
        if m is None or item is None or item not in allowed or item in seen:
            dropped += 1
            continue
        if len(out) >= MAX_VOTES:
            break
        seen.add(item)
        out.append(VoteIn(item[0], item[1], 1 if m[1] == "UPVOTE" else -1))
    return out, dropped
