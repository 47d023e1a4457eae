"""A fact that changes archives the notes that still state its old value.

After "I moved to Graz" the profile says ``city: Graz`` (the old value kept in its
history), but a note "The user lives in Linz." written weeks earlier stayed active and
was recalled next to it; a small model then answers from either. :func:`archive_stale`
runs whenever a profile fact gets a new value (reflection, the agent's tool, a client's
``memory.profile.set``) or reflection retires it ("I sold the Civic") and archives — never deletes: ``memory notes archive ID
--restore`` brings one back — the active notes that

* hold every distinctive word of the old value ("Linz", "Honda Civic"),
* do not hold the new value, if any (a note "The user moved from Linz to Graz" is
  current),
* say it of the user: the sentence holding it starts with "The user" / "User" / "I", or
  "The user's …" of an attribute ("The user's name is Ana") but not of a person or a
  pet ("The user's sister lives in Linz" is hers, not stale),
* and were written before the new value (never a note of the same write).

Runs inside the caller's transaction; pure SQL over ``memories`` plus
:meth:`MemoryStore.set_archived`.
"""

from __future__ import annotations

from typing import cast

from .notes import MemoryStore
from .old_values import states_old_value, value_words

__all__ = ["archive_stale", "states_old_value", "value_words"]

_MAX_SCAN = 2000
"""Active notes scanned per change at most (the newest; an FTS pre-filter picks them)."""


def archive_stale(notes: MemoryStore, old_value: str, new_value: str, *,
                  max_id: int | None = None, now_ms: int | None = None) -> list[int]:
    """Archive the active notes that state ``old_value`` of the user and not
    ``new_value``, newest first, among the notes with an id up to ``max_id`` (those
    written before the change; None = all) (module docstring). Returns the archived ids; ``[]`` when the old value has no distinctive
    word. Raises what :meth:`MemoryStore.set_archived` raises (apsw errors)."""
    old, new = value_words(old_value), value_words(new_value)
    if not old or old == new:
        return []
    # A cheap pre-filter: LIKE on the rarest-looking (longest) word, then exact matching.
    # lower() on both sides: PostgreSQL's LIKE minds case (SQLite's does not, in ASCII).
    probe = max(old, key=len)
    rows = cast(list[tuple[int, str]], notes.conn.execute(
        "SELECT id, content FROM memories WHERE archived = 0 AND id <= ? "
        "AND lower(content) LIKE ? ORDER BY id DESC LIMIT ?",
        (2**63 - 1 if max_id is None else max_id, f"%{probe}%", _MAX_SCAN)).fetchall())
    out = []
    for note_id, content in rows:
        if states_old_value(content, old_value, new_value):
            if notes.set_archived(note_id, True, now_ms=now_ms):
                out.append(note_id)
    return out
