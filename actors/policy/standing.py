"""Standing preferences about the replies: kept as facts, applied in every later reply.

"From now on always answer me in Italian", "use metric units", "keep your answers short"
are preferences about how the assistant should answer from now on — unlike "reply only
with OK" (one reply) or "ignore your rules" (an instruction to override it,
:mod:`.instructions`). A small model reads them as one-off instructions and stores nothing,
and even when ``language: Italian`` stands in ``### profile`` it answers the next session
in English. So:

* :func:`standing_preferences` finds them in the user's message, with no model, as
  ``(key, value)`` facts in the user's own words (``reply_language`` — written under the
  ``language`` group's key —, ``units``, ``answer_length``); reflection stores them like
  any fact (grounding, supersede, history, forget);
* :func:`reply_rules` turns the active facts of those keys back into short rules that
  ``### respond`` states next to the question ("Answer in Italian."). Only values from
  fixed vocabularies become a rule (a language name, metric/imperial, short/detailed), so
  stored text never reaches the prompt as an instruction of its own.

A preference is *standing* when its sentence says so (always, from now on, by default,
in future, every time, I prefer, …: :mod:`.lexicon` rule ``standing``, in every language of
the lexicon) or speaks of replies in general
("keep your answers short", "use metric units"), and none of the rule ``negators`` negates
it. Every word is the lexicon's:

* a reply language: a verb of the rule ``reply_verbs``, up to three ``reply_fillers`` and
  one of the ``language_prepositions`` (every language of the lexicon), or a Russian
  adverb (``language_adverb``: "отвечай по-русски"), before a name of
  :data:`.lexicon.LANGUAGE_NAMES`;
* units: ``unit_systems`` (metric, imperial), standing or after ``units_lead`` (use,
  prefer …);
* an answer length: ``length_verbs``, ``reply_determiners``, ``reply_nouns`` and
  ``length_short`` / ``length_detailed`` ("keep your answers short"), or such a length —
  or ``length_detailed_before`` ("in-depth") — right before the ``reply_nouns``. English
  only.

Pure; never raises for any ``str``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .lexicon import LANGUAGE_NAMES, compile_rules, entries, meanings
from .lexicon import pattern as lexicon_pattern

__all__ = ["LANGUAGE_KEYS", "LANGUAGES", "reply_rules", "standing_preferences"]

LANGUAGES: dict[str, str] = meanings(LANGUAGE_NAMES)
"""Language names (lower case, English and the languages' own and neighbours' names:
:data:`.lexicon.LANGUAGE_NAMES`) → the English name a rule uses."""

LANGUAGE_KEYS = frozenset({"reply_language", "response_language", "answer_language",
                           "preferred_language", "communication_language"})
"""Keys of the language replies are in. A bare ``language`` is not among them: it is as
often a language the user learns, speaks or codes in ("I'm learning Korean" →
``language=Korean``, and the next reply came in Korean)."""
UNITS_KEYS = frozenset({"units", "unit_system", "measurement_system", "measurement_units"})
LENGTH_KEYS = frozenset({"answer_length", "reply_length", "response_length"})
_LENGTHS = {**dict.fromkeys(entries("length_short"), "short"),
            **dict.fromkeys(entries("length_detailed", "length_detailed_before"), "detailed")}
_UNIT_SYSTEMS = frozenset(entries("unit_systems"))

_STANDING = compile_rules("standing")
_NEGATORS = compile_rules("negators")
_REPLY_VERB = lexicon_pattern("reply_verbs")
_LANGUAGE_RE = re.compile(
    rf"{_REPLY_VERB}(?:[\s,-]+{lexicon_pattern('reply_fillers')}){{0,3}}\s+"
    rf"{lexicon_pattern('language_prepositions')}\s+(?P<lang>[^\W\d_][\w-]*)", re.I)
_LANGUAGE_RU_RE = re.compile(
    rf"{_REPLY_VERB}(?:\s+\w+){{0,2}}\s+(?P<lang>{lexicon_pattern('language_adverb')}\w+)",
    re.I)
_UNITS_RE = re.compile(rf"(?P<units>{lexicon_pattern('unit_systems')})", re.I)
_UNITS_LEAD = compile_rules("units_lead")
_REPLIES = (rf"(?:{lexicon_pattern('reply_determiners')}\s+)?"
            rf"{lexicon_pattern('reply_nouns')}")
_LENGTH_RE = re.compile(
    rf"{lexicon_pattern('length_verbs')}\s+{_REPLIES}\s+(?:\w+\s+)?"
    rf"(?P<a>{lexicon_pattern('length_short', 'length_detailed')})|"
    rf"(?P<b>{lexicon_pattern('length_short', 'length_detailed', 'length_detailed_before')})"
    rf"\s+{lexicon_pattern('reply_nouns')}", re.I)
_SENTENCES = re.compile(r"(?<=[.!?;])\s+|\n+")


def standing_preferences(user_message: str) -> list[tuple[str, str]]:
    """The standing reply preferences ``user_message`` states (module docstring), as
    ``(key, value)`` pairs in the user's own words: ``("reply_language", "Italian")``,
    ``("units", "metric")``, ``("answer_length", "short")``; one per key, first wins.
    A sentence that negates the preference ("don't answer in English") gives nothing."""
    out: dict[str, str] = {}
    for sentence in _SENTENCES.split(user_message):
        standing = bool(_STANDING.search(sentence))
        negated = _NEGATORS.search(sentence)
        if standing and not negated:
            m = _LANGUAGE_RE.search(sentence) or _LANGUAGE_RU_RE.search(sentence)
            if m and m.group("lang").lower() in LANGUAGES:
                out.setdefault("reply_language", m.group("lang"))
        m = _UNITS_RE.search(sentence)
        if m and not negated and (standing or _UNITS_LEAD.search(sentence[:m.start()])):
            out.setdefault("units", m.group("units").lower())
        m = _LENGTH_RE.search(sentence)
        if m and not negated:
            out.setdefault("answer_length", (m.group("a") or m.group("b")).lower())
    return list(out.items())


def reply_rules(facts: Iterable[tuple[str, str]]) -> list[str]:
    """Short rules for ``### respond`` from active ``(key, value)`` facts of the standing
    keys whose value is in the fixed vocabularies: "Answer in Italian.", "Use metric
    units.", "Keep answers short." / "Give detailed answers."; one per kind, in that
    order. Any other value gives no rule (stored text never becomes an instruction)."""
    language = units = length = None
    for key, value in facts:
        v = " ".join(value.lower().split())
        if key in LANGUAGE_KEYS and v in LANGUAGES and language is None:
            language = LANGUAGES[v]
        elif key in UNITS_KEYS and v in _UNIT_SYSTEMS and units is None:
            units = v
        elif key in LENGTH_KEYS and v in _LENGTHS and length is None:
            length = _LENGTHS[v]
    rules = []
    if language:
        rules.append(f"Answer in {language}.")
    if units:
        rules.append(f"Use {units} units.")
    if length:
        rules.append("Keep answers short." if length == "short" else "Give detailed answers.")
    return rules
