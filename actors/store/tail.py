"""A turn's memory context as the prompt tail's sections: pure rendering, no store.

:func:`render_context` turns a :class:`~actors.store.records.MemoryContext` (what the
memory actor's :func:`actors.store.context.build_context` read for the turn) into section
bodies by name, within the configured budgets; :func:`context_text` joins them as the
tail shows them. The agent process renders with this module alone: it imports records,
rendering and ranking arithmetic, never the store's SQL modules (an import-linter
contract in ``pyproject.toml``).
"""

from __future__ import annotations

import re
import time

import msgspec

from actors.policy.standing import reply_rules

from .focus import care_items, render_focus, same_day, someone_else, unknown_people
from .person import second_person, without_name
from .plans import RenderBudget
from .records import MemoryContext, Note
from .render import (
    estimate_tokens,
    note_day,
    render_index,
    render_lessons,
    render_procedures,
    render_profile,
    render_recalled,
    render_session_facts,
)

__all__ = ["NAME_KEYS", "context_text", "render_context"]

_INDEX_ID = re.compile(r"^- #(\d+)", re.M)

NAME_KEYS = frozenset({"name", "first_name", "full_name", "user_name", "preferred_name",
                       "nickname"})
_ASKS_NAME = re.compile(
    r"\b(?:name|names|named|called|call|nom|appel\w*|nombre|llam\w*|nome|chiam\w*|"
    r"hei(?:ß|ss)\w*|имя|зовут|"
    # what is written in the user's name: a signature, a letter, an email, a bio
    r"sign\w*|letter|e-?mails?|introduc\w*|bio|cv|r[ée]sum[ée]|invitation|card|"
    r"signature|lettre|brief|carta|lettera|письмо|подпис\w*)\b", re.I)
"""A message about names, or about something written in the user's name: only then does
the agent's prompt show the user's name (:func:`render_context`)."""


_NAME_LINE = re.compile(r"^- (?:" + "|".join(sorted(NAME_KEYS)) + r"): [^\n(]+?(?=\s*$)", re.M)


def _you(note: Note, name: str = "") -> Note:
    text = second_person(note.content)
    return msgspec.structs.replace(note, content=without_name(text, name) if name else text)


def render_context(
    ctx: MemoryContext,
    budget: RenderBudget = RenderBudget(),
    *,
    message: str = "",
    now_ms: int | None = None,
) -> dict[str, str]:
    """Render a context into prompt-tail section bodies, keyed by section name.

    Keys are ``"memory-index"``, ``"session-facts"``, ``"recalled"``, ``"profile"``,
    ``"lessons"`` and ``"procedures"`` (the ``### `` headings of the prompt's tail,
    docs/architecture.md §5), in the tail's order; a section whose body is empty is left
    out. ``budget`` (:class:`~actors.store.plans.RenderBudget`, built once from
    ``memory.*`` config) gives each section's budget in tokens as estimated by
    ``render.estimate_tokens`` and its preview lengths; a budget of 0 drops the section.
    Its defaults write no dates and no focus line, the plain line formats.

    With ``budget.dates`` each recalled note shows the day it was written,
    ``budget.index_dates`` (default: ``dates``) each index row's, in ``ctx.zone``;
    ``budget.profile_dates`` shows the earlier value of a fact that replaced one and the
    day a fact relative to its day was said; a day a fact or recalled note names is
    counted from ``now_ms`` (default: the wall clock).

    ``budget.focus_items`` (0 = off) adds ``"focus"``: the few items most likely to
    change the answer, which the agent repeats in ``### respond`` next to the question
    (:mod:`actors.store.focus`). With ``message`` (the user's), ``"care"`` lists the
    health and diet items shown when the message is about food, medicine, exercise or
    travel, ``"same-day"`` lists what memory has on a day the message names and
    ``"elsewhere"`` ``name|topic`` pairs, ``;``-separated, of questions about a named
    person's something that memory holds only about someone else
    (:func:`.focus.someone_else`), ``"unknown"`` the people it asks about that memory does not mention
    (:func:`.focus.care_items`, :func:`.focus.same_day`, :func:`.focus.unknown_people`;
    all with ``focus_items``). ``"reply-rules"`` states the user's standing reply
    preferences from the shown profile ("Answer in Italian. Use metric units.",
    :func:`actors.policy.standing.reply_rules`), which ``### respond`` states too.

    With ``budget.second_person`` notes and the focus line speak of the user as "you"
    (:mod:`actors.store.person`), and the user's name is shown only when ``message``
    asks about names (marked "(you)" then).

    Link-expanded neighbours (``ctx.expanded``) are shown in ``### recalled`` after the
    hits, except those the index already shows (each note once per prompt), and the
    tokens they add there are taken from the end of the index's budget, so links never
    lengthen the tail. The index, the tail's first section, then changes only at its end
    (its newest rows give way), never in its middle, so the LLM server's prompt cache
    keeps covering it from turn to turn. A neighbour's line still costs the first reply
    token (each tail token after the first difference is prefilled;
    ``bench/link_expansion.py``): that is why links by meaning are not expanded by
    default (``memory.links.expandByMeaning``).
    """
    b = budget
    if b.second_person:  # notes about "you", as the agent reads them (store/person.py)
        # and, unless names are asked about, without the user's name (said of them by it)
        name = "" if _ASKS_NAME.search(message) else next(
            (f.value for f in ctx.profile if f.key in NAME_KEYS), "")
        ctx = msgspec.structs.replace(ctx, recalled=[_you(n, name) for n in ctx.recalled],
                                      index=[_you(n, name) for n in ctx.index])
    profile_max_tokens, focus_items, dates = b.profile_max_tokens, b.focus_items, b.dates
    recall_preview_chars, recall_max_tokens = b.recall_preview_chars, b.recall_max_tokens
    index_preview_chars, index_max_tokens = b.index_preview_chars, b.index_max_tokens
    profile_dates = b.profile_dates
    hits = ctx.recalled[:len(ctx.recalled) - ctx.expanded]
    marks = ctx.superseded
    zone = ctx.zone
    index_dates = dates if b.index_dates is None else b.index_dates
    index = render_index(ctx.index, preview_chars=index_preview_chars,
                         max_tokens=index_max_tokens, superseded=marks, dates=index_dates,
                         zone=zone)
    shown = {int(i) for i in _INDEX_ID.findall(index)}
    neighbours = [n for n in ctx.recalled[len(hits):] if n.id not in shown]
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    recalled = render_recalled(hits + neighbours, preview_chars=recall_preview_chars,
                               max_tokens=recall_max_tokens, superseded=marks, dates=dates,
                               zone=zone, now_ms=now_ms)
    if neighbours:
        spent = estimate_tokens(recalled) - estimate_tokens(render_recalled(
            hits, preview_chars=recall_preview_chars, max_tokens=recall_max_tokens,
            superseded=marks, dates=dates, zone=zone, now_ms=now_ms))
        index = render_index(ctx.index, preview_chars=index_preview_chars,
                             max_tokens=max(0, index_max_tokens - spent), superseded=marks,
                             dates=index_dates, zone=zone)
    if b.second_person and not _ASKS_NAME.search(message):
        # The user's name only when names are asked about: shown, the 1.5B model spoke
        # of the user by it ("Since Tariq is a pescatarian, …").
        ctx = msgspec.structs.replace(
            ctx, profile=[f for f in ctx.profile if f.key not in NAME_KEYS])
    profile_body = render_profile(ctx.profile, profile_max_tokens, empty="",
                                  before=ctx.before if profile_dates else None, zone=zone,
                                  dates=profile_dates, now_ms=now_ms)
    if b.second_person:  # "- name: Sofia (you)": the name is whom the model speaks to
        profile_body = _NAME_LINE.sub(r"\g<0> (you)", profile_body)
    fact_lines = {line[2:].split(":", 1)[0]: line[2:] for line in profile_body.splitlines()
                  if line.startswith("- ")}
    bodies = {
        "memory-index": index,
        "session-facts": render_session_facts(ctx.session_facts,
                                              max_tokens=b.session_facts_max_tokens, zone=zone,
                                              dates=profile_dates, now_ms=now_ms),
        "recalled": recalled,
        "profile": profile_body,
        "lessons": render_lessons(ctx.lessons, max_tokens=b.lessons_max_tokens),
        "procedures": render_procedures(ctx.procedures, max_tokens=b.procedures_max_tokens),
        "reply-rules": " ".join(reply_rules((f.key, f.value) for f in ctx.profile))
        if profile_max_tokens > 0 else "",
    }
    facts = ctx.profile if profile_max_tokens > 0 else []
    said: list[str] = []
    if focus_items > 0 and message:
        owner = "your" if b.second_person else "the user's"
        cares = care_items(message, facts, hits, ctx.index, superseded=marks, owner=owner)
        days = same_day(message, hits, ctx.index, facts, owner=owner)
        bodies["care"], bodies["same-day"], said = "; ".join(cares), "; ".join(days), cares + days
        shown_text = " ".join([index, recalled, bodies["profile"], bodies["session-facts"]])
        bodies["unknown"] = ", ".join(unknown_people(message, shown_text))
        items = [n.content for n in hits] + [f"{f.key.replace('_', ' ')}: {f.value}"
                                             for f in facts]
        bodies["elsewhere"] = "; ".join(f"{name}|{topic}"
                                        for name, topic in someone_else(message, items))
    bodies["focus"] = render_focus(facts, hits, superseded=marks, max_items=focus_items,
                                   owner="your" if b.second_person else "the user's",
                                   fact_lines=fact_lines, said=said, note_days={
                                       n.id: note_day(n, dates, zone, now_ms) for n in hits})
    return {name: body for name, body in bodies.items() if body}


def context_text(sections: dict[str, str]) -> str:
    """The memory sections as the prompt tail shows them: ``### name`` then the body,
    one blank line between sections, in :func:`render_context`'s order ("" when
    memory has nothing to add)."""
    return "".join(f"### {name}\n{body.rstrip()}\n\n" for name, body in sections.items()).rstrip()
