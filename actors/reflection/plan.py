"""From a parsed reflection to what is written: keys, guards and forgetting.

:func:`plan_reflection` turns the model's parsed lines into one write, judged by the
memory policy (:mod:`actors.policy`; whether a message is worth a model call at all is
:func:`actors.policy.skip.skip_reason`). Pure, no I/O; never raises for any input. Order (each dropped item is counted with
its reason, never its value):

1. ``SET`` keys are mapped to one key per meaning (:func:`actors.policy.keys.one_attribute`:
   ``vegetarian=yes`` and ``job=pescatarian`` are ``diet``, ``husband_name`` is
   ``husband``; :func:`actors.policy.keys.canonical_key`), so an
   update supersedes the active fact instead of adding a second one; a key that holds
   its value (``allergy_peanuts=yes``) is spelled out in the user's words
   (``allergy=peanuts``, :func:`actors.policy.keys.spell_out`) or, where it cannot be
   (``partner_sam_vegetarian=yes``), dropped (``key_holds_value``).
2. The grounding filter (:func:`actors.policy.grounding.filter_ungrounded`): invented names, the
   assistant's persona, copied examples, one-off payloads, content the user never wrote.
3. The stance guards (:func:`actors.policy.stance.judge`): another person's name, city or job stored
   as the user's (``third_person``), negations (``negated``), a note naming what the
   user denied without the denial (``denied``), daydreams
   (``hypothetical``), questions (``question``); text that tries to instruct the
   assistant (``injection``: "ignore all previous instructions", "system prompt"); and a
   fact whose value states nothing or only an absence (``no_value``: "coffee=false",
   "city=None").
4. Forgetting (:mod:`actors.policy.forget`): with a forget request in the message, its own targets and
   the model's grounded ``FORGET`` lines are purged, and a new fact or note holding a
   purged target is dropped (``forgotten``); without one, a model ``FORGET key`` only
   retires a known fact whose value the message mentions, when it says something changed,
   and a fact whose value the user says they let go of ("I sold the Civic",
   :func:`actors.policy.forget.dropped_values`) is retired unless this reflection sets its key anew.
5. Notes are put in the third person: "You switched …" becomes "The user switched …",
   a note in the user's "I/we" becomes their sentence quoted ("The user said: …").
6. Stale on arrival (``stale``): a note that states the old value of a fact this
   reflection replaces or retires, and says nothing of a change ("The user works in
   Linz." beside ``city=Graz``; :func:`actors.store.staleness.states_old_value`). Then
   fragments (``fragment``): a fact that only repeats part of another item of the same
   reflection — ``halal=true`` beside ``diet=strictly halal``, ``day_of_week=Sunday``
   beside ``cycling=every Sunday morning``.
7. A fact dropped as ``third_person``, ``invented_detail``, ``negated_key`` (a yes-fact
   under a negated key: ``no_drink_coffee=yes``) or ``key_holds_value`` whose value no kept note
   mentions becomes a note quoting the user's sentence ("The user said: We have a dog
   named Biscuit.", "The user said: My passport expires in June."), so what was said is
   kept in the user's words, not lost. So is a second value the reflection sets for a
   key it already set ("language=Rust" and "language=Go" from "I've written Rust for
   years but I'm new to Go"): the first value is the fact, the sentence holding the
   second is quoted. So is an age the user gives only as one to come ("turns 9 on 14
   March" → not ``daughter_age=9``: ``coming_age``). And so is the sentence that retires a fact by a stated change
   ("I sold the Civic, now I ride a bicycle to work.") when the reflection keeps nothing
   else from it: the change is remembered even when the model only restated the old
   profile. And a sentence where the user lets go of something memory does not hold
   ("I sold my car, I cycle everywhere now." with no car known) when the model wrote
   something but nothing kept names what ended (``vehicle=cycle``, or its lines all
   dropped): without the quote, memory would hold the new state, or nothing, and
   nothing of the change. And a note dropped as ``denied`` ("The user prefers green tea
   over coffee" from "I don't drink coffee at all, only green tea") gives way to the
   sentence that holds the denial.
8. Coverage: in a message of three statements or more, a sentence holding a statement about
   the user or their people that nothing kept or known holds is quoted (in a shorter
   message, one holding a number or a name nothing holds) ("The user said:
   … I can't stand olives, and my partner Luis is a chef." when the model stopped after
   name, job and city; :func:`actors.policy.coverage.uncovered_sentences`), so a dense
   introduction loses nothing. Before it, a spelling the user corrects ("Small
   correction: it's Anna" after ``name=Ana``, :func:`actors.policy.corrections.
   corrections`) replaces the fact, whatever the model wrote.
9. The per-call caps (the reflection actor raises them to the number of statements the
   message makes, :func:`actors.policy.coverage.statement_count`).
"""

from __future__ import annotations

import re

import msgspec

from actors.memory.messages import FactIn, ForgetIn, NoteIn
from actors.policy.candidates import ParsedFact
from actors.policy.corrections import corrections
from actors.policy.coverage import statement_count, uncovered_sentences
from actors.policy.forget import (CHANGE, dropped_values, forget_intent, let_go_objects,
                                  matches, request_targets, target_words)
from actors.policy.grounding import Dropped, filter_ungrounded
from actors.policy.instructions import (from_instruction, instruction_sentences,
                                        reads_as_instruction, sentence_with, value_words)
from actors.policy.lexicon import entries
from actors.policy.lexicon import pattern as lexicon_pattern
from actors.policy.keys import (FLAG_VALUES, GROUPS, canonical_key, group_words, holds_value,
                                 not_a_place, one_attribute, spell_out)
from actors.policy.relations import RELATIONS
from actors.policy.stance import IDENTITY_KEYS, clauses, denied_word, judge
from actors.policy.standing import standing_preferences
from actors.store.old_values import states_old_value

from .parser import ParsedReflection, normalize_key
from .prompt import EXAMPLE_VALUES

__all__ = ["Plan", "plan_reflection"]

_WORD_RE = re.compile(r"[^\W_]+")
EMPTY_VALUES = frozenset({"false", "no", "none", "never", "null", "n/a", "na", "0", "nothing",
                          "unknown", "not specified", "not sure", "-", "?"})
"""Fact values that state nothing, or only an absence ("coffee=false"): ambiguous in a
prompt and the usual shape of a negation stored as a fact; dropped as ``no_value``."""


DENSE_STATEMENTS = 3
"""Statements (:func:`actors.policy.coverage.statement_count`) from which a message is
checked for every word nothing kept holds (step 8; below, only numbers and names). With
two, the earlier steps' choices stand ("We sold the Oceanis, so I go hiking now" keeps ``hobby=hiking`` and retires the
boat without a quote); the 1.5B model drops statements from three on."""


QUOTE = "The user said: "
"""How a note keeping the user's own sentence begins."""
SILENT_DROPS = frozenset({"fragment", "stale", "forgotten", "example_copy",
                          "assistant_persona", "one_off_payload", "one_off_tool_restriction"})
"""Drops :meth:`Plan.not_kept` does not report: what another item holds, what the user
asked to lose, and what the model made up from the prompt itself."""


class Plan(msgspec.Struct):
    """One reflection's write: ``facts``/``notes`` to store, ``forget`` to apply first,
    and ``dropped`` (what the guards removed, with reasons)."""

    facts: list[FactIn]
    notes: list[NoteIn]
    forget: ForgetIn
    dropped: list[Dropped]

    def not_kept(self) -> list[tuple[str, str]]:
        """``(key, reason)`` of each fact the guards dropped that nothing kept holds,
        for the person to see (the ``memory:`` line's "not kept: …"): not a fragment,
        a stale or forgotten value, a copied example or the assistant's persona, not a
        key kept anyway, and none at all when a note keeps the user's own sentence
        ("The user said: …": what they said is there)."""
        if any(n.body.startswith(QUOTE) for n in self.notes):
            return []
        kept = {f.key for f in self.facts}
        out: list[tuple[str, str]] = []
        for d in self.dropped:
            if d.item == "fact" and d.key and d.key not in kept \
                    and d.reason not in SILENT_DROPS and (d.key, d.reason) not in out:
                out.append((d.key, d.reason))
        return out

    @property
    def empty(self) -> bool:
        f = self.forget
        return not (self.facts or self.notes or f.retire_keys or f.purge_keys or f.targets)


_AGE_KEY = re.compile(r"(?:^|_)age$")
_NUMBER_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve "
                 "thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty").split()


def coming_age(key: str, value: str, user_message: str) -> bool:
    """Whether the fact ``key=value`` is an age (``age``, ``daughter_age``) that the
    user's words give only as one to come: "my daughter Klara turns 9 on 14 March" (she
    is 8 until then), "I'll be 40 in May", "turning five". Such a fact is dropped and the
    sentence kept, so the birthday and the age stay together."""
    if not _AGE_KEY.search(key):
        return False
    m = re.search(r"\d+", value)
    if m is None:
        word = value.strip().lower().rstrip(".")
        number = str(_NUMBER_WORDS.index(word)) if word in _NUMBER_WORDS else None
    else:
        number = m.group(0)
    if number is None:
        return False
    spoken = _NUMBER_WORDS[int(number)] if int(number) < len(_NUMBER_WORDS) else number
    return bool(re.search(rf"\b(?:turns?|turning|(?:will|'ll)\s+be)\s+(?:{number}|{spoken})\b",
                          user_message, re.I))


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
            named = target_words(target.partition("=")[2])
            if named and not set(named) & set(value_words):
                continue  # "FORGET language = English" while the fact says Spanish
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


_YOU_FORMS = (("you're ", "is "), ("you’re ", "is "), ("you are ", "is "), ("you've ", "has "),
              ("you’ve ", "has "), ("you have ", "has "), ("you were ", "was "),
              ("you don't ", "does not "), ("you do not ", "does not "),
              ("you didn't ", "did not "), ("you can't ", "cannot "), ("you can ", "can "),
              ("you will ", "will "), ("you'll ", "will "), ("you would ", "would "))
_FIRST_PLURAL = re.compile(  # a note in the user's own first person, any lexicon language
    "^" + lexicon_pattern("first_person", "first_person_object", "first_person_possessive"),
    re.I)


def _third_person_verb(verb: str) -> str:
    """"like" → "likes", "go" → "goes", "study" → "studies"; past tenses unchanged."""
    low = verb.lower()
    if low.endswith(("ed", "s")) or low in ("went", "got", "had", "was", "bought", "made",
                                            "took", "left", "began", "became", "sold"):
        return verb
    if low.endswith(("sh", "ch", "x", "o", "z")):
        return verb + "es"
    if low.endswith("y") and len(low) > 2 and low[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def _third_person(note: NoteIn, user_message: str) -> NoteIn | None:
    """A note in the third person ("The user …"). The model copies the user's "I/we" or
    addresses them ("You switched to oat milk"): "You …" is rewritten ("The user
    switched …", "You are" → "The user is"), a first-person note becomes the user's
    sentence quoted ("The user said: We switched to oat milk."), or is dropped when no
    sentence of the message holds it."""
    body = note.body.strip()
    low = body.lower()
    if low.startswith(("you ", "you're", "you’re", "you've", "you’ve")):
        for you, verb in _YOU_FORMS:
            if low.startswith(you):
                rest = verb + body[len(you):]
                break
        else:
            first, _, tail = body[4:].partition(" ")
            rest = f"{_third_person_verb(first)} {tail}".rstrip()
        rest = re.sub(r"\byour\b", "their", rest, flags=re.I)
        rest = re.sub(r"\byou\b", "them", rest, flags=re.I)
        return NoteIn(body=f"The user {rest}", tags=note.tags)
    if _FIRST_PLURAL.match(body):
        said = sentence_with(user_message, body) or sentence_with(
            user_message, " ".join(value_words(body)[:3]))
        return NoteIn(body=f"The user said: {said}"[:400], tags=note.tags) if said else None
    return note


_NEGATED_KEY = re.compile("^(?:" + "|".join(sorted({
    re.sub(r"['’]", "", w).replace(" ", "_") for w in entries("negation", "negative_stance")
    if "*" not in w and re.fullmatch(r"[a-z' ]+", w)}, key=len, reverse=True)) + ")_")
"""A key that starts with a negating word (``no_``, ``dont_``, ``do_not_``, ``never_``,
``avoids_``, ``kein_`` …: the lexicon's ``negation`` and ``negative_stance`` words as a
key writes them)."""
_STATES_CHANGE = re.compile(lexicon_pattern("change", "let_go", "let_go_loose", "negation"),
                            re.I)
"""A note that says what changed ("no longer", "sold", "instead", "moved") or negates."""
GROUPED = frozenset(k for group in GROUPS for k in group)
TRUE_VALUES = FLAG_VALUES


def _fragments(facts: list[FactIn], notes: list[NoteIn]) -> list[FactIn]:
    """Facts that only repeat part of another item of the same reflection: a yes-fact
    whose key words another fact or note states ("halal=true" beside "diet=strictly
    halal"), or a value whose words all stand in another fact's longer value
    ("day_of_week=Sunday" beside "cycling=every Sunday morning") unless the fact is one of
    the user's identity or well-known keys (``city=Turin`` beside ``workplace=hospital in
    Turin`` stays)."""
    out = []
    for f in facts:
        others = [g for g in facts if g is not f]
        texts = [f"{g.key.replace('_', ' ')} {g.value}" for g in others] + [n.body for n in notes]
        if f.value.strip().lower().rstrip(".") in TRUE_VALUES:
            words = [w for w in f.key.split("_") if len(w) >= 3]
            if words and any(matches(words, t) for t in texts):
                out.append(f)
            continue
        words = value_words(f.value)
        if f.key in IDENTITY_KEYS or f.key in GROUPED:
            continue  # "city=Turin" beside "workplace=hospital in Turin" is the fact itself
        if words and any(len(value_words(g.value)) > len(words) and matches(words, g.value)
                         for g in others):
            out.append(f)
    return out


def plan_reflection(parsed: ParsedReflection, user_message: str, known: dict[str, str],
                    *, max_facts: int, max_notes: int, assistant_reply: str = "") -> Plan:
    """The write for one reflection (module doc). ``known``: the active profile as
    ``{key: value}``; ``max_facts``/``max_notes``: the per-call caps (0 disables);
    ``assistant_reply``: names the cause ``assistant_only`` of an item only the
    assistant said (it never grounds anything)."""
    facts = []
    unspelled: list[Dropped] = []  # "partner_sam_vegetarian=yes": kept as the user's sentence
    for f in parsed.facts:
        key, value = one_attribute(f.key, f.value, RELATIONS)  # job=pescatarian → diet
        key = canonical_key(key, known)
        if holds_value(f.key, f.value):  # "allergy_peanuts=yes" → "allergy=peanuts"
            spelled = spell_out(f.key, f.value, user_message, known)
            if spelled is None:
                unspelled.append(Dropped(item="fact", reason="key_holds_value", key=f.key))
                continue
            key, value = spelled
        facts.append(f if (key, value) == (f.key, f.value) else ParsedFact(
            key=key, value=value, pinned=f.pinned, keywords=f.keywords))
    # Standing reply preferences are read from the user's words, not left to the model
    # (a small model takes "always answer me in Italian" for a one-off instruction).
    for key, value in standing_preferences(user_message):
        key = canonical_key(key, known)
        if not any(f.key == key for f in facts):
            facts.append(ParsedFact(key=key, value=value))
    grounded = filter_ungrounded(facts, parsed.notes, user_message, assistant_reply,
                                 examples=EXAMPLE_VALUES)
    dropped = list(grounded.dropped) + unspelled
    parts = clauses(user_message)
    injected = instruction_sentences(user_message)
    forget = _forget_plan(parsed, user_message, known)
    forgotten_words = forget.targets + [target_words(known.get(k, "")) + k.split("_")
                                        for k in forget.purge_keys]

    def verdict(key: str | None, text: str) -> str | None:
        item = text if key is None else f"{key} {text}"
        if key is not None and text.strip().lower().rstrip(".") in EMPTY_VALUES:
            return "no_value"
        if key is not None and _NEGATED_KEY.match(key) and \
                text.strip().lower().rstrip(".") in TRUE_VALUES:
            return "negated_key"  # "no_drink_coffee=yes": kept as the user's sentence
        if key is not None and coming_age(key, text, user_message):
            return "coming_age"  # "turns 9 on 14 March" is no age of 9: the sentence
        if key is not None and not_a_place(key, text):
            return "not_a_place"  # "staying in on Saturday night" is no city
        if from_instruction(item, user_message, injected):
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
    second_values: list[str] = []  # "language=Rust" then "language=Go": Go is quoted
    for f in grounded.facts:
        if (first := next((k for k in kept_facts if k.key == f.key), None)) is not None:
            # the first line of a key that survives the guards wins; a second value the
            # first does not hold is kept in the user's sentence (step 7)
            if not (matches(value_words(f.value), first.value)
                    or matches(value_words(first.value), f.value)) \
                    and verdict(f.key, f.value) is None:
                second_values.append(f.value)
            continue
        if (reason := verdict(f.key, f.value)) is not None:
            dropped.append(Dropped(item="fact", reason=reason, key=f.key))
        elif known.get(f.key) == f.value and f.key not in forget.purge_keys:
            continue  # already known, exactly
        else:
            kept_facts.append(FactIn(key=f.key, value=f.value, pinned=f.pinned,
                                     keywords=list(f.keywords)))
    kept_notes: list[NoteIn] = []
    denied: list[str] = []  # "coffee" of "prefers green tea over coffee": quoted (step 7)
    for n in grounded.notes:
        if (reason := verdict(None, n.body)) is not None:
            dropped.append(Dropped(item="note", reason=reason))
            if reason == "denied":
                denied.append(denied_word(n.body, parts))
        else:
            kept_notes.append(NoteIn(body=n.body, tags=list(n.tags)))
    kept_notes = [n for n in (_third_person(n, user_message) for n in kept_notes)
                  if n and not reads_as_instruction(n.body)]
    # A note of this reflection that still states a value it replaces or retires ("The
    # user drives a Honda Civic." beside car=bicycle, copied from the known profile) is
    # stale on arrival: memory archives such notes only when written before the change.
    changed = {k: "" for k in forget.retire_keys if k in known}
    changed.update({f.key: f.value for f in kept_facts if f.key in known})
    for kept in list(kept_notes):
        if not _STATES_CHANGE.search(kept.body) and any(
                states_old_value(kept.body, known[k], new) for k, new in changed.items()):
            kept_notes.remove(kept)
            dropped.append(Dropped(item="note", reason="stale"))
    for frag in _fragments(kept_facts, kept_notes):
        kept_facts.remove(frag)
        dropped.append(Dropped(item="fact", reason="fragment", key=frag.key))
    # What was said about someone else is kept as a note in the user's own words when
    # the model offered it only as the user's fact ("a dog named Biscuit" → name=Biscuit),
    # and so is a fact the model embellished ("expires in June" → "June 30, 2024").
    quoted: list[tuple[str, str]] = [("second_value", v) for v in second_values]
    quoted += [("denied", w) for w in denied]
    for key in forget.retire_keys:  # "I sold the Civic, now I ride a bicycle to work."
        said = sentence_with(user_message, known.get(key, ""))
        if said and not kept_notes and not any(
                matches(value_words(f.value), said) for f in kept_facts):
            quoted.append(("retired", known[key]))  # nothing kept says what changed
    held = ([f"{f.key} {f.value}" for f in kept_facts] + [n.body for n in kept_notes]
            + [f"{k} {v}" for k, v in known.items()])
    for said, thing in let_go_objects(user_message):  # "I sold my car, I cycle everywhere"
        # the model found something to remember, and nothing kept or known names what
        # ended: the user's sentence says it (not a question, daydream or someone else's)
        stated = [c for c in parts if thing in c.words and c.subject != "other"
                  and not (c.hypothetical or c.question or c.dismissed)]
        if (parsed.facts or parsed.notes) and stated \
                and not any(matches([thing], h) for h in held) and verdict(None, said) is None:
            quoted.append(("let_go", said))
    for d in dropped:
        if d.reason not in ("third_person", "ungrounded_identity", "invented_detail",
                            "negated_key", "key_holds_value", "coming_age") \
                or d.key is None:
            continue  # (someone else's name the user wrote: "my son Leo")
        value = next((f.value for f in facts if f.key == d.key), "")
        if d.reason == "negated_key":  # what the key says: "no_drink_coffee" → drink coffee
            value = _NEGATED_KEY.sub("", d.key).replace("_", " ")
        elif d.reason == "key_holds_value":  # "partner_sam_vegetarian" → its words
            value = d.key.replace("_", " ")
        quoted.append((d.reason, value))
    for reason, value in quoted:
        said = sentence_with(user_message, value)
        if reason in ("invented_detail", "key_holds_value") and not said:
            # the words the user did write ("likes_hiking" → "I love hiking …")
            said = sentence_with(user_message, " ".join(
                w for w in value_words(value) if w in user_message.lower()))
        if said and not reads_as_instruction(said) and not any(
                matches(value_words(value), n.body) for n in kept_notes):
            kept_notes.append(NoteIn(body=f"{QUOTE}{said}"[:400]))
    # A spelling the user corrects ("it's Anna, with two n's" after name=Ana) is kept
    # whatever the model wrote: the stance guards read "it's Anna" as someone else.
    for key, value in corrections(user_message, known):
        kept_facts = [f for f in kept_facts if f.key != key]
        kept_facts.insert(0, FactIn(key=key, value=value, pinned=True))
        dropped = [d for d in dropped if d.key != key]
    # 8. Statements nothing kept holds ("… I can't stand olives, and my partner Luis is
    # a chef." after name, job and city): the user's sentence, when the model found
    # something to remember; in a message of fewer statements only a number or a name
    # nothing holds counts ("My rent is 1,200 …" with only income=3,000 kept).
    statements = statement_count(user_message)
    if (parsed.facts or parsed.notes) and statements:
        held = ([f"{f.key} {f.value}" for f in kept_facts[:max(0, max_facts)]]
                + [n.body for n in kept_notes] + [f"{k} {v}" for k, v in known.items()])
        for said in uncovered_sentences(user_message, held,
                                        specifics=statements < DENSE_STATEMENTS):
            if not reads_as_instruction(said) and not any(
                    matches(words, said) for words in forgotten_words if words):
                kept_notes.append(NoteIn(body=f"{QUOTE}{said}"[:400]))
    unique = list({n.body: n for n in kept_notes}.values())  # a sentence quoted once
    return Plan(facts=kept_facts[:max(0, max_facts)], notes=unique[:max(0, max_notes)],
                forget=forget, dropped=dropped)
