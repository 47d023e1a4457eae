"""What a reply says it did to memory, to hold against what the turn actually did.

A small model answers "Got it, I'll remember that you use VS Code" whether or not
anything was kept, and "I've forgotten that" whether or not anything was removed
(docs/architecture.md, "A conversation that goes right"). The reply streams to the
user before the turn's reflection has decided what to keep, so it cannot be held back;
instead the turn's ``reflection`` frame lists the claims the turn did not bear out
(``unmetClaims``) and the ``memory:`` line says so in plain words.

Claims are read with the lexicon rules ``claims_kept`` and ``claims_forgot``
(:mod:`actors.policy.lexicon`, seven languages), and ``opens_noted`` for a reply that
opens with "Noted." (English, French, German, Spanish). A claim in a negated or
hypothetical form ("I won't remember that", "if you want, I'll remember") is still read
as a claim: the check errs towards saying plainly what memory holds.
"""

from __future__ import annotations

import re

from .lexicon import compile_rules
from .lexicon import pattern as lexicon_pattern

__all__ = ["KEPT", "FORGOT", "memory_claims", "unmet_claims"]

KEPT = "kept"
"""The reply says it remembered, noted, saved or updated something."""
FORGOT = "forgot"
"""The reply says it forgot, removed or deleted something."""

_KEPT_RE = compile_rules("claims_kept")
_OPENS_NOTED = re.compile(rf"^\W*{lexicon_pattern('opens_noted')}", re.I)
"""A reply that opens with "Noted." (lexicon rule ``opens_noted``; anywhere else the word
is "as you noted")."""
_FORGOT_RE = compile_rules("claims_forgot")


def memory_claims(reply: str) -> frozenset[str]:
    """The claims ``reply`` makes about memory: a subset of {:data:`KEPT`, :data:`FORGOT`}.

    >>> sorted(memory_claims("Got it! I'll remember that you use VS Code."))
    ['kept']
    >>> sorted(memory_claims("Done, I've forgotten your phone number."))
    ['forgot']
    >>> sorted(memory_claims("You live in Brno."))
    []
    """
    out: set[str] = set()
    if _KEPT_RE.search(reply) or _OPENS_NOTED.match(reply):
        out.add(KEPT)
    if _FORGOT_RE.search(reply):
        out.add(FORGOT)
    return frozenset(out)


def unmet_claims(reply: str, *, kept: bool, forgot: bool) -> list[str]:
    """The claims of ``reply`` the turn did not bear out, in :data:`KEPT`,
    :data:`FORGOT` order. ``kept``: the turn wrote something to memory (a fact, a note,
    the agent's own tool write); ``forgot``: it removed something (a fact retired or
    deleted, a note deleted or rewritten without what was forgotten)."""
    claims = memory_claims(reply)
    return [c for c, done in ((KEPT, kept), (FORGOT, forgot)) if c in claims and not done]
