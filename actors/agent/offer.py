"""Which memory tools a step of a turn offers the model.

The stable prefix lists every enabled tool (it is cached byte for byte, so it never
changes with the turn); what a step may *call* is narrowed by the action grammar
(:func:`actors.agent.prompt.action_grammar`). On the default 1.5B model, 9 of 16 plain
questions began with a ``memory.notes.store`` call that the write guard
(:mod:`actors.policy.write_guard`) then refused — each refused call a whole LLM step, up to
tens of seconds on 2 cores — and some turns called ``memory.lessons.recall`` with nothing
to read. A tool is offered only when the turn can use it:

* the write tools (``memory.profile.set``, ``memory.notes.store``) when the user asks to
  remember something about themselves (:func:`actors.policy.write_guard.may_write`);
* the removal tools (``memory.profile.remove``, ``memory.notes.forget``) when the user asks
  to forget something or lets go of something, or of a value ``### profile`` shows
  (:func:`~actors.policy.write_guard.may_remove`; what a call would remove is judged
  again when it is made, :func:`~actors.policy.write_guard.removal_refusal`);
* ``memory.notes.recall`` when the tail shows a note clipped (a ``### recalled`` or
  ``### memory-index`` row ending in "…": there is more to read; a note shown whole was
  read again in a whole extra step on the default model); ``memory.profile.list`` when
  ``### profile`` is cut by its budget ("[truncated]") or the user asks what memory knows
  ("what do you know about me?"), since the tail shows the profile otherwise;
  ``memory.lessons.recall`` / ``memory.procedures.recall`` when ``### lessons`` /
  ``### procedures`` list one;
* and a tool already called in this turn is not offered again (its result is in the
  conversation).

The write guard still checks every call: a backend without grammars (an OpenAI-compatible
server) can call anything the prefix lists.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from actors.memory.ops import OPS, LessonsRecall, NotesRecall, ProceduresRecall, ProfileList
from actors.policy.write_guard import may_remove, may_write
from actors.store.render import NO_PROFILE

__all__ = ["offered_tools"]

_SHOWN_BY: dict[str, tuple[str, ...]] = {
    NotesRecall.name: ("recalled", "memory-index"),
    ProfileList.name: ("profile",),
    LessonsRecall.name: ("lessons",),
    ProceduresRecall.name: ("procedures",),
}
"""A read tool, and the tail sections whose rows it reads in full."""


_ASKS_WHAT_IS_KNOWN = re.compile(
    r"\b(?:what|everything|anything)\b[^.?!]{0,40}\b(?:know|remember|stored?|saved?|"
    r"kept|have)\b[^.?!]{0,20}\b(?:about\s+me|of\s+me|on\s+me)\b|\bmy\s+profile\b", re.I)


def _shown(sections: Mapping[str, str], name: str, tool: str) -> bool:
    body = sections.get(name, "").strip()
    if tool == NotesRecall.name:
        return any(line.rstrip().endswith("…") for line in body.splitlines())
    if tool == ProfileList.name:
        return "[truncated]" in body
    return bool(body) and body != NO_PROFILE


_PROFILE_ROW = re.compile(r"^- ([^:\n]+): (.*)$", re.M)


def _profile_values(body: str) -> dict[str, str]:
    """``### profile``'s rows (``- key: value``) as key → value."""
    return {m.group(1).strip(): m.group(2).strip() for m in _PROFILE_ROW.finditer(body)}


def offered_tools(enabled: Iterable[str], user_message: str, sections: Mapping[str, str],
                  called: Iterable[str] = ()) -> tuple[str, ...]:
    """The tools of ``enabled`` (in its order) a step may call (module docstring).

    ``user_message``: the turn's message; ``sections``: the memory sections the tail
    shows (body by section name, as :func:`actors.agent.prompt.build_tail` takes them);
    ``called``: tools already called in this turn. Pure; never raises."""
    done = set(called)
    writes = may_write(user_message)
    removes = may_remove(user_message, _profile_values(sections.get("profile", "")))
    out = []
    for tool in enabled:
        if tool in done:
            continue
        guard = OPS[tool].guard
        if guard in ("fact", "note") and not writes:
            continue
        if guard == "removal" and not removes:
            continue
        asked = tool == ProfileList.name and _ASKS_WHAT_IS_KNOWN.search(user_message)
        if tool in _SHOWN_BY and not asked and not any(
                _shown(sections, s, tool) for s in _SHOWN_BY[tool]):
            continue
        out.append(tool)
    return tuple(out)
