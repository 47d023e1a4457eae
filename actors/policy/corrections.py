"""A spelling the user corrects: "Small correction: it's Anna, with two n's."

Said after "My name is Ana.", the correction names no one in the first person, so the
message read as impersonal and reflection never ran; had it run, ``SET name=Anna`` from
"it's Anna" read as someone else's name. :func:`corrections` finds, in a message that
says it corrects something (lexicon rule ``correction``: "correction", "I meant", "typo",
"spelled" …, seven languages), a word that is another spelling of a known fact's value
word (the same first letter, one or two letters apart: "Anna" for "Ana", "Jonh" for
"John") and gives the fact with that word replaced. Reflection keeps it whatever the
model wrote.

Pure; never raises for any ``str``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .lexicon import compile_rules

__all__ = ["corrections", "says_correction"]

_CORRECTION = compile_rules("correction")
_WORD = re.compile(r"[^\W\d_][\w'’-]*")


def says_correction(user_message: str) -> bool:
    """Whether the message says it corrects something (lexicon rule ``correction``)."""
    return bool(_CORRECTION.search(user_message))


def _distance(a: str, b: str, most: int = 2) -> int:
    """Levenshtein distance of ``a`` and ``b``, or ``most + 1`` once it exceeds ``most``."""
    if abs(len(a) - len(b)) > most:
        return most + 1
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
        if min(row) > most:
            return most + 1
    return row[-1]


def corrections(user_message: str, known: Mapping[str, str]) -> list[tuple[str, str]]:
    """``(key, corrected value)`` for each known fact (``known``: key → value) a word of
    whose value the message spells anew, when the message says it corrects something:
    ``("Small correction: it's Anna, with two n's.", {"name": "Ana"})`` →
    ``[("name", "Anna")]``. A word counts when it is capitalised like a name, shares the
    value word's first letter, is at least three letters long and differs by one or two
    letters (never the same word)."""
    if not says_correction(user_message):
        return []
    said = [w for w in _WORD.findall(user_message) if w[0].isupper() and len(w) >= 3]
    out: list[tuple[str, str]] = []
    for key, value in known.items():
        fixed = value
        for old in _WORD.findall(value):
            if len(old) < 2:
                continue
            for new in said:
                if new.lower() != old.lower() and new[0].lower() == old[0].lower() \
                        and _distance(new.lower(), old.lower()) <= (1 if len(old) < 5 else 2):
                    fixed = re.sub(rf"\b{re.escape(old)}\b", new, fixed)
                    break
        if fixed != value:
            out.append((key, fixed))
    return out
