"""What a writer proposes to remember, before the policy judges it.

A reflection's ``SET`` and ``NOTE`` lines (:mod:`actors.reflection.parser`) and the
agent's own ``memory.profile.set`` / ``memory.notes.store`` calls
(:mod:`actors.policy.write_guard`) both become these candidates, so one set of guards
(:mod:`actors.policy.grounding`, :mod:`actors.policy.stance`) judges them alike.
"""

from __future__ import annotations

import msgspec


class ParsedFact(msgspec.Struct, frozen=True):
    """One ``SET`` line: a profile fact for ``ProfileStore.set``.

    ``key``: 1..32 chars matching ``[a-z][a-z0-9_]{0,31}``. ``value``: 1..200 chars,
    marker removed. ``pinned``: True unless the marker says ``pinned=false``.
    ``keywords``: 0..8 lower-case keywords (≤ 40 chars each), always empty when pinned.
    ``supersedes`` / ``valid_from``: the bi-temporal marker clauses —
    ``supersedes`` a valid key or None, ``valid_from`` only ever ``"now"`` or None.
    """

    key: str
    value: str
    pinned: bool = True
    keywords: list[str] = []
    supersedes: str | None = None
    valid_from: str | None = None


class ParsedNote(msgspec.Struct, frozen=True):
    """One ``NOTE`` line: ``body`` 1..500 chars, ``tags`` 0..8 lower-case tags."""

    body: str
    tags: list[str] = []
