"""What memory says that bears on this message: one line next to the question.

A 1.5B model reads the tail's memory sections and then, many lines later, answers the
question as if they were not there: with a shellfish allergy in memory it called a
seafood paella "a great option", with a warfarin prescription it said aspirin was fine,
with the user's city in ``### profile`` it suggested "the beach" (the memory-use
benchmark, ``bench/memuse.py``). Small models follow what stands next to the
instruction far better than what they read pages earlier, so the ``### respond`` section
repeats the few items most likely to change the answer (:func:`render_focus`):

1. *care* items — a fact or note about health, diet or safety (an allergy, a medication,
   a condition, a diet, an injury, …, :data:`CARE`), from the profile, the recalled notes
   or the index: getting these wrong harms the user, and they are short;
2. the best recalled notes (the recall hits, best first);
3. the profile facts the tail shows.

At most :data:`FOCUS_ITEMS` items, each clipped to :data:`FOCUS_ITEM_CHARS` chars, in
that order without repeats. Text that reads as an instruction is never repeated
(``instructions.reads_as_instruction``); everything goes through ``render.neutralise``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from .instructions import reads_as_instruction
from .notes import Note
from .profile import ProfileFact
from .render import clip_preview, neutralise

__all__ = ["CARE", "FOCUS_ITEMS", "FOCUS_ITEM_CHARS", "render_focus"]

FOCUS_ITEMS = 5
"""Most items on the focus line (each costs the reply's first token a few tokens)."""
FOCUS_ITEM_CHARS = 110
"""Clip of one item, in chars including the ellipsis."""

CARE = re.compile(
    r"allerg|anaphyla|intoleran|sensitiv\w* to|medicat|medicine|prescri|\bdrugs?\b|"
    r"\bpills?\b|diabet|insulin|pregnan|asthma|epilep|seizure|blood\s*(?:thinner|pressure)|"
    r"anticoagul|heart\s+condition|chronic|disorder|disease|illness|injur|surgery|"
    r"\bdiet\b|vegan|vegetarian|pescatarian|halal|kosher|gluten|coeliac|celiac|"
    r"lactose|dairy-free|nut-free|sober|alcohol|can't eat|cannot eat|must avoid|"
    r"must not|phobi|wheelchair|disabilit|deaf|blind",
    re.I)
"""Health, diet and safety words: an item holding one may change any answer about food,
drink, medicine, exercise or travel, whether or not the question names it."""


def _fact_text(fact: ProfileFact) -> str:
    return f"{fact.key.replace('_', ' ')}: {' '.join(fact.value.split())}"


def _note_text(note: Note) -> str:
    return " ".join(note.content.split())


def render_focus(profile: Sequence[ProfileFact], recalled: Sequence[Note],
                 index: Sequence[Note], *, superseded: Mapping[int, int] | None = None,
                 max_items: int = FOCUS_ITEMS) -> str:
    """The focus line's items joined by ``"; "`` (module docstring), or ``""`` when
    memory shows nothing. ``profile``: the facts ``### profile`` shows; ``recalled``:
    the recall hits, best first; ``index``: the index rows; ``superseded``: notes a
    shown correction replaces (never repeated). Pure; never raises."""
    old = set(superseded or {})
    facts = [(_fact_text(f), f"{f.key} {f.value}") for f in profile]
    notes = [(_note_text(n), n.content) for n in recalled if n.id not in old]
    rows = [(_note_text(n), n.content) for n in index if n.id not in old]
    care = [t for t, raw in facts + notes + rows if CARE.search(raw.replace("_", " "))]
    ordered = care + [t for t, _ in notes] + [t for t, _ in facts]
    out: list[str] = []
    for text in ordered:
        if len(out) >= max_items:
            break
        if not text or reads_as_instruction(text):
            continue
        item = neutralise(clip_preview(text.rstrip(". "), FOCUS_ITEM_CHARS))
        if item not in out:
            out.append(item)
    return "; ".join(out)
