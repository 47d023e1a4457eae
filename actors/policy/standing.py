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
("keep your answers short", "use metric units"). Pure; never raises for any ``str``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .lexicon import compile_rules

__all__ = ["LANGUAGE_KEYS", "LANGUAGES", "reply_rules", "standing_preferences"]

LANGUAGES: dict[str, str] = {
    **{w: "English" for w in ("english", "anglais", "englisch", "inglés", "ingles", "inglese",
                              "inglês", "английском", "английский", "по-английски")},
    **{w: "Italian" for w in ("italian", "italiano", "italien", "italienisch", "italiana",
                              "итальянском", "итальянский")},
    **{w: "French" for w in ("french", "français", "francais", "französisch", "francés",
                             "frances", "francese", "francês", "французском", "французский",
                             "по-французски")},
    **{w: "German" for w in ("german", "deutsch", "allemand", "alemán", "aleman", "tedesco",
                             "alemão", "немецком", "немецкий", "по-немецки")},
    **{w: "Spanish" for w in ("spanish", "español", "espanol", "espagnol", "spanisch",
                              "spagnolo", "espanhol", "испанском", "испанский", "castellano")},
    **{w: "Portuguese" for w in ("portuguese", "português", "portugues", "portugais",
                                 "portugiesisch", "portugués", "portoghese",
                                 "португальском")},
    **{w: "Russian" for w in ("russian", "русском", "русский", "по-русски", "russe", "russisch",
                              "ruso", "russo")},
    **{w: "Dutch" for w in ("dutch", "nederlands", "néerlandais", "niederländisch")},
    **{w: "Polish" for w in ("polish", "polski", "polonais", "polnisch")},
    **{w: "Ukrainian" for w in ("ukrainian", "українською", "украинском")},
    **{w: "Turkish" for w in ("turkish", "türkçe", "turc", "türkisch")},
    **{w: "Greek" for w in ("greek", "ελληνικά", "grec", "griechisch")},
    **{w: "Swedish" for w in ("swedish", "svenska", "suédois", "schwedisch")},
    **{w: "Japanese" for w in ("japanese", "日本語", "japonais", "japanisch")},
    **{w: "Chinese" for w in ("chinese", "中文", "chinois", "chinesisch", "mandarin")},
    **{w: "Korean" for w in ("korean", "한국어", "coréen", "koreanisch")},
    **{w: "Hindi" for w in ("hindi",)},
    **{w: "Arabic" for w in ("arabic", "arabe", "arabisch", "árabe")},
}
"""Language names (lower case, English and the languages' own and neighbours' names) →
the English name a rule uses."""

LANGUAGE_KEYS = frozenset({"reply_language", "response_language", "answer_language",
                           "preferred_language", "communication_language"})
"""Keys of the language replies are in. A bare ``language`` is not among them: it is as
often a language the user learns, speaks or codes in ("I'm learning Korean" →
``language=Korean``, and the next reply came in Korean)."""
UNITS_KEYS = frozenset({"units", "unit_system", "measurement_system", "measurement_units"})
LENGTH_KEYS = frozenset({"answer_length", "reply_length", "response_length"})
_LENGTHS = {"short": "short", "brief": "short", "concise": "short", "shorter": "short",
            "succinct": "short", "detailed": "detailed", "long": "detailed",
            "thorough": "detailed", "in-depth": "detailed"}

_STANDING = compile_rules("standing")
_NEGATORS = compile_rules("negators")
_REPLY_VERB = (r"(?:answer|reply|respond|talk|speak|write|chat|communicate|antworte|"
               r"schreib|sprich|réponds|repondez|répondez|écris|parle|responde|contesta|"
               r"escribe|háblame|hablame|rispondi|rispondimi|scrivi|parla|responda|escreva|"
               r"fala|отвечай|пиши|говори)\w*")
_LANGUAGE_RE = re.compile(
    rf"\b{_REPLY_VERB}(?:[\s,-]+(?:to|me|with|us|moi|mir|mi|me|мне|со\s+мной|only|"
    rf"immer|toujours|siempre|sempre|всегда|just|nur|seulement|solo|только)){{0,3}}\s+"
    rf"(?:in|en|auf|in\s+lingua|em|на)\s+(?P<lang>[^\W\d_][\w-]*)", re.I)
_LANGUAGE_RU_RE = re.compile(rf"\b{_REPLY_VERB}(?:\s+\w+){{0,2}}\s+(?P<lang>по-\w+)", re.I)
_UNITS_RE = re.compile(
    r"\b(?P<units>metric|imperial)(?:\s+(?:units?|system|measurements?))?\b", re.I)
_UNITS_LEAD = re.compile(r"\b(?:use|using|prefer|want|like|give|show|in|with)\b", re.I)
_LENGTH_RE = re.compile(
    r"\b(?:keep|make)\s+(?:your\s+|the\s+|all\s+|my\s+)?(?:answers|replies|responses)\s+"
    r"(?:\w+\s+)?(?P<a>short|brief|concise|shorter|succinct|detailed|long|thorough)\b|"
    r"\b(?P<b>short|brief|concise|shorter|succinct|detailed|long|thorough|in-depth)\s+"
    r"(?:answers|replies|responses)\b", re.I)
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
        elif key in UNITS_KEYS and v in ("metric", "imperial") and units is None:
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
