"""From a parsed reflection to what is written: keys, guards and forgetting (issue 17).

:func:`skip_reason` decides before any model call whether the user's message can hold
anything to remember; :func:`plan_reflection` turns the model's parsed lines into one
write. Pure, no I/O; never raises for any input. Order (each dropped item is counted with
its reason, never its value):

1. ``SET`` keys are mapped to one key per meaning (:func:`keys.canonical_key`), so an
   update supersedes the active fact instead of adding a second one.
2. The grounding filter (:func:`grounding.filter_ungrounded`): invented names, the
   assistant's persona, copied examples, one-off payloads, content the user never wrote.
3. The stance guards (:func:`stance.judge`): another person's name, city or job stored
   as the user's (``third_person``), negations (``negated``), daydreams
   (``hypothetical``), questions (``question``); text that tries to instruct the
   assistant (``injection``: "ignore all previous instructions", "system prompt"); and a
   fact whose value states nothing or only an absence (``no_value``: "coffee=false",
   "city=None").
4. Forgetting (:mod:`forget`): with a forget request in the message, its own targets and
   the model's grounded ``FORGET`` lines are purged, and a new fact or note holding a
   purged target is dropped (``forgotten``); without one, a model ``FORGET key`` only
   retires a known fact whose value the message mentions, when it says something changed,
   and a fact whose value the user says they let go of ("I sold the Civic",
   :func:`forget.dropped_values`) is retired unless this reflection sets its key anew.
5. A fact dropped as ``third_person`` whose value no kept note mentions becomes a note
   quoting the user's sentence ("The user said: We have a dog named Biscuit."), so what
   was said about someone else is kept as theirs, not lost.
6. The per-call caps.
"""

from __future__ import annotations

import re

import msgspec

from actors.memory.messages import FactIn, ForgetIn, NoteIn

from .forget import (CHANGE, dropped_values, forget_intent, matches, request_targets,
                     target_words)
from .grounding import Dropped, filter_ungrounded, is_trivial_window
from .keys import canonical_key, group_words
from .parser import ParsedFact, ParsedReflection, normalize_key
from .stance import about_user, clauses, is_question_only, is_request_only, judge

__all__ = ["INJECTION", "Plan", "plan_reflection", "skip_reason"]

INJECTION = re.compile(
    r"\b(?:ignore|disregard|forget)\s+(?:all\s+|any\s+|the\s+|your\s+)?(?:previous|prior|above|"
    r"earlier|preceding)\s+(?:instructions?|rules?|prompts?)|\bsystem\s+prompt\b|"
    r"\breveal\s+(?:your|the)\s+(?:instructions?|prompt|rules)|\bjailbreak\b|"
    r"\bdeveloper\s+mode\b", re.I)
_WORD_RE = re.compile(r"[^\W_]+")
EMPTY_VALUES = frozenset({"false", "no", "none", "never", "null", "n/a", "na", "0", "nothing",
                          "unknown", "not specified", "not sure", "-", "?"})
"""Fact values that state nothing, or only an absence ("coffee=false"): ambiguous in a
prompt and the usual shape of a negation stored as a fact; dropped as ``no_value``."""


class Plan(msgspec.Struct):
    """One reflection's write: ``facts``/``notes`` to store, ``forget`` to apply first,
    and ``dropped`` (what the guards removed, with reasons)."""

    facts: list[FactIn]
    notes: list[NoteIn]
    forget: ForgetIn
    dropped: list[Dropped]

    @property
    def empty(self) -> bool:
        f = self.forget
        return not (self.facts or self.notes or f.retire_keys or f.purge_keys or f.targets)


def skip_reason(user_message: str) -> str | None:
    """Why no model call is needed for this message, or None: ``trivial`` (greetings,
    pings, one-off echo commands), ``question`` (it only asks), ``request`` (it only asks
    the assistant to do something: "tell me a story about a fox"), ``impersonal``
    (nothing in it speaks of the user). A forget request is never skipped."""
    if forget_intent(user_message):
        return None
    if is_trivial_window(user_message):
        return "trivial"
    if is_question_only(user_message):
        return "question"
    if is_request_only(user_message):
        return "request"
    if not about_user(user_message):
        return "impersonal"
    return None


def _value_words(value: str) -> list[str]:
    """Every word of a value (a name such as "Mia" is no filler here)."""
    return [w.lower() for w in _WORD_RE.findall(value) if len(w) >= 2]


def _sentence_with(user_message: str, value: str) -> str:
    """The sentence of the user's message holding ``value``'s distinctive words, or ""."""
    words = _value_words(value)
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", user_message):
        if words and matches(words, sentence):
            return sentence.strip()
    return ""


def _message_words(user_message: str) -> set[str]:
    return {w.lower()[:5] for w in _WORD_RE.findall(user_message.replace("_", " "))}


def _grounded(words: list[str] | set[str], message_stems: set[str]) -> bool:
    return bool(words) and all(w.lower()[:5] in message_stems for w in words)


def _forget_plan(parsed: ParsedReflection, user_message: str, known: dict[str, str]
                 ) -> ForgetIn:
    stems = _message_words(user_message)
    purge = forget_intent(user_message)
    out = ForgetIn(targets=request_targets(user_message))
    for target in parsed.forgets:
        key = normalize_key(target.split("=")[0])  # "car_model = Honda Civic" names a key
        key = canonical_key(key, known) if key else None
        if key and key in known:
            value_words = target_words(known[key])
            if purge:
                if any(w[:5] in stems for w in group_words(key) | set(value_words)):
                    out.purge_keys.append(key)  # the user named the fact, or its value
            elif CHANGE.search(user_message) and any(w[:5] in stems for w in value_words):
                out.retire_keys.append(key)
            continue
        words = target_words(target)
        if purge and _grounded(words, stems) and words not in out.targets:
            out.targets.append(words)
    if not purge:  # "I sold the Civic": the car fact stopped being true
        for key in dropped_values(user_message, known):
            if key not in out.retire_keys:
                out.retire_keys.append(key)
    return out


def plan_reflection(parsed: ParsedReflection, user_message: str, known: dict[str, str],
                    *, max_facts: int, max_notes: int, assistant_reply: str = "") -> Plan:
    """The write for one reflection (module doc). ``known``: the active profile as
    ``{key: value}``; ``max_facts``/``max_notes``: the per-call caps (0 disables);
    ``assistant_reply``: names the cause ``assistant_only`` of an item only the
    assistant said (it never grounds anything)."""
    facts = []
    for f in parsed.facts:
        key = canonical_key(f.key, known)
        facts.append(f if key == f.key else ParsedFact(
            key=key, value=f.value, pinned=f.pinned, keywords=f.keywords))
    grounded = filter_ungrounded(facts, parsed.notes, user_message, assistant_reply)
    dropped = list(grounded.dropped)
    parts = clauses(user_message)
    forget = _forget_plan(parsed, user_message, known)
    forgotten_words = forget.targets + [target_words(known.get(k, "")) + k.split("_")
                                        for k in forget.purge_keys]

    def verdict(key: str | None, text: str) -> str | None:
        item = text if key is None else f"{key} {text}"
        if key is not None and text.strip().lower().rstrip(".") in EMPTY_VALUES:
            return "no_value"
        if INJECTION.search(item):
            return "injection"
        reason = judge(key, text, parts, user_message)
        if reason:
            return reason
        if any(matches(words, item) for words in forgotten_words if words):
            return "forgotten"
        return None

    # A key written anew in this reflection is superseded (history kept), not retired.
    renewed = {f.key for f in grounded.facts if known.get(f.key) != f.value}
    forget.retire_keys = [k for k in forget.retire_keys if k not in renewed]
    kept_facts: list[FactIn] = []
    for f in grounded.facts:
        if any(k.key == f.key for k in kept_facts):
            continue  # the first line of a key that survives the guards wins
        if (reason := verdict(f.key, f.value)) is not None:
            dropped.append(Dropped(item="fact", reason=reason, key=f.key))
        elif known.get(f.key) == f.value and f.key not in forget.purge_keys:
            continue  # already known, exactly
        else:
            kept_facts.append(FactIn(key=f.key, value=f.value, pinned=f.pinned,
                                     keywords=list(f.keywords)))
    kept_notes: list[NoteIn] = []
    for n in grounded.notes:
        if (reason := verdict(None, n.body)) is not None:
            dropped.append(Dropped(item="note", reason=reason))
        else:
            kept_notes.append(NoteIn(body=n.body, tags=list(n.tags)))
    # What was said about someone else is kept as a note in the user's own words when
    # the model offered it only as the user's fact ("a dog named Biscuit" → name=Biscuit).
    for d in dropped:
        if d.reason not in ("third_person", "ungrounded_identity") or d.key is None:
            continue  # (someone else's name the user wrote: "my son Leo", FC2-04)
        value = next((f.value for f in facts if f.key == d.key), "")
        said = _sentence_with(user_message, value)
        if said and not any(matches(_value_words(value), n.body) for n in kept_notes):
            kept_notes.append(NoteIn(body=f"The user said: {said}"[:400]))
    return Plan(facts=kept_facts[:max(0, max_facts)], notes=kept_notes[:max(0, max_notes)],
                forget=forget, dropped=dropped)
