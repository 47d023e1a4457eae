"""Corrections: a note that negates or retracts a near-identical older note (the
boundary of the near-duplicate merge, ``dedup``).

Word-overlap similarity cannot tell "Is allergic to penicillin …" from "Is not allergic
to penicillin …" (token Jaccard 0.875 when short words are dropped), so a merge on
overlap alone would keep the opposite of what the user said last. Here:

* :func:`polarity` -- the negation and retraction cues a text holds ("not", "n't",
  "never", "no longer", "without", "stopped", "dislike", "hate", "can not stand" …, and
  the common ones of German, French and Spanish). Two texts whose cue sets differ are
  never the same note, however much else they share (``dedup.near_match``).
* :func:`link_correction` -- the newer note ``SUPERSEDES`` the older one (link origin
  ``correction``), written in the store's transaction.
* :func:`superseded_by` / :func:`newest_first` -- which of some notes a newer note
  supersedes, and recall order with each superseded note after the notes that are not
  (BM25 alone ranks the shorter, older statement first). The prompt marks a superseded
  note as such (``render``), so the two are never shown as equally current.

Cues are matched on whole words, case-folded, with typographic apostrophes folded; a
cue inside a longer word ("note", "nothing") is not a cue unless listed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import cast

import msgspec

from .records import Note
from .sql import Connection, ids_binding, in_ids

__all__ = ["CORRECTION_ORIGIN", "link_correction", "newest_first", "polarity", "superseded_by"]

CORRECTION_ORIGIN = "correction"
"""``memory_links.origin`` of a link the store writes from a correction to what it corrects."""

# Multi-word cues first, so "no longer" is one cue and not "no" + "longer".
_CUES: tuple[tuple[str, str], ...] = (
    (r"no longer", "no_longer"), (r"not any ?more", "not_anymore"), (r"no more", "no_more"),
    (r"can ?not stand", "cannot_stand"), (r"can't stand", "cannot_stand"),
    (r"used to", "used_to"), (r"any ?more", "anymore"),
    (r"\w+n't", "not"), (r"cannot", "not"), (r"not", "not"), (r"no", "no"),
    (r"never", "never"), (r"none", "none"), (r"nobody", "none"), (r"nothing", "none"),
    (r"neither", "neither"), (r"nor", "neither"), (r"without", "without"),
    (r"stopped|stops|stop|quit|quits|quitted", "stopped"),
    (r"dislikes?|disliked|hates?|hated|detests?|detested|loathes?|loathed|despises?",
     "dislike"),
    (r"formerly|former|previously|ex", "formerly"),
    # German, French, Spanish
    (r"nicht|kein|keine|keinen|keinem|keiner|nie|niemals|ohne", "not"),
    (r"pas|jamais|sans|aucun|aucune", "not"),
    (r"nunca|jamás|jamas|sin|ningún|ningun|ninguna", "not"),
)
_CUE_RE = re.compile(r"(?<![\w'])(?:" + "|".join(f"(?P<c{i}>{p})" for i, (p, _n) in
                                                enumerate(_CUES)) + r")(?![\w'])",
                     re.IGNORECASE)


def polarity(text: str) -> frozenset[str]:
    """The negation / retraction cues in ``text`` (normalised names such as ``"not"``,
    ``"no_longer"``, ``"dislike"``); ``frozenset()`` for a plain positive statement.

    >>> sorted(polarity("No longer works at Acme"))
    ['no_longer']
    >>> sorted(polarity("She doesn't eat fish"))
    ['not']
    """
    folded = text.replace("\u2019", "'").replace("\u2018", "'")
    out: set[str] = set()
    for m in _CUE_RE.finditer(folded):
        name = _CUES[int(next(k for k, v in m.groupdict().items() if v is not None)[1:])][1]
        out.add(name)
    return frozenset(out)


def link_correction(conn: Connection, newer_id: int, older_id: int, now_ms: int) -> None:
    """Write ``newer_id -SUPERSEDES-> older_id`` (weight 1.0, origin ``correction``) in
    the caller's transaction; an existing edge of that kind is kept as it is."""
    conn.execute(
        "INSERT OR IGNORE INTO memory_links (from_id, to_id, kind, weight, created_at, origin)"
        " VALUES (?, ?, 'SUPERSEDES', 1.0, ?, ?)", (newer_id, older_id, now_ms,
                                                     CORRECTION_ORIGIN))


def superseded_by(conn: Connection, ids: Iterable[int]) -> dict[int, int]:
    """``{old id: the newest id that supersedes it}`` for those of ``ids`` a
    ``SUPERSEDES`` link points at (any origin); ``{}`` when none does."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    rows = conn.execute(
        "SELECT to_id, max(from_id) FROM memory_links WHERE kind = 'SUPERSEDES'"
        f" AND {in_ids(conn, 'to_id')} GROUP BY to_id", (ids_binding(conn, wanted),)).fetchall()
    return {int(old): int(new) for old, new in cast(list[tuple[int, int]], rows)}


def newest_first(conn: Connection, notes: Sequence[Note]) -> list[Note]:
    """``notes`` in the same order, except that each note superseded by another note
    comes after every note that is not (stable; a no-op without supersede links). A
    moved note's ``score`` (when it has one) is lowered to just below the last current
    note's, so scores still read best first."""
    gone = superseded_by(conn, [n.id for n in notes])
    if not gone:
        return list(notes)
    current = [n for n in notes if n.id not in gone]
    floor = min((n.score for n in current if n.score is not None),
                default=None)
    moved = []
    for n in notes:
        if n.id in gone:
            score = getattr(n, "score", None)
            if floor is not None and score is not None and score >= floor:
                n = msgspec.structs.replace(n, score=round(floor * 0.99, 4))
            moved.append(n)
    return current + moved
