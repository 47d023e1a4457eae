"""A message in which the user introduces themselves, and the name they give.

Told "Hi, I'm Oskar. I just moved to Tallinn and I work as a carpenter.", the 1.5B model
answered "Hello! How can I assist you today?" three times out of three, or repeated the
introduction as its own ("Hi! I'm Sofia, 29, a vet …"). :func:`introduced_name` finds the
name the user gives for themselves ("I'm Oskar", "my name is Ana", "je m'appelle
Élodie"; lexicon rules ``self_naming`` and ``self_intro``; a capitalised word, not one
of ``not_names``: "I'm Sorry") in a message that is not a question, and
:func:`greeting` the opening of a reply that greets them by it and goes on in the second
person, in the language of the words that named them; the agent puts that opening in
the model's mouth, so the reply starts with the name and goes on with what was said,
said back to them.

Pure; never raises for any ``str``.
"""

from __future__ import annotations

import re

from .lexicon import LANGUAGES, entries
from .lexicon import pattern as lexicon_pattern
from .stance import clauses

__all__ = ["GREETINGS", "YOU", "greeting", "introduced_name"]

GREETINGS: dict[str, str] = {
    "en": "Nice to meet you, {name}!",
    "fr": "Enchanté, {name} !",
    "de": "Schön, dich kennenzulernen, {name}!",
    "es": "¡Encantado de conocerte, {name}!",
    "it": "Piacere di conoscerti, {name}!",
    "pt": "Prazer em conhecer-te, {name}!",
    "ru": "Приятно познакомиться, {name}!",
}
"""The opening of a reply to an introduction, per language of the lexicon."""

YOU: dict[str, str] = {"en": "You", "fr": "Vous", "de": "Du", "es": "Tú", "it": "Tu",
                       "pt": "Você", "ru": "Ты"}
"""The word the reply goes on with after the greeting: what the user said is said back
to them ("You just moved to Tallinn …"); left to itself the model repeated it as its own
("I can't stand olives, and my partner Luis is a chef.")."""

_NAME = r"(?P<name>[A-ZÀ-ÖØ-ÞА-ЯЁ][\w'’-]{1,30})"
_NOT_NAMES = frozenset(entries("not_names"))
"""Words after "I'm" that are no name ("I'm sorry", "I'm vegan"): lexicon rule
``not_names``."""


def _lead(language: str, rule: str) -> re.Pattern[str]:
    lead = lexicon_pattern(rule, languages=(language,))
    return re.compile(rf"{lead}\s+{_NAME}(?![\w'’-])", re.I)


_LEADS = [(lang, _lead(lang, rule)) for rule in ("self_naming", "self_intro")
          for lang in LANGUAGES if (rule, lang) != ("self_intro", "de")]
"""Per language, the words before a name. German's "ich bin" is left out: German nouns
are capitalised ("Ich bin Lehrer"), so the word after it is no name of itself."""


def _name_case(m: re.Match[str]) -> bool:
    """The matched name is written with a capital (the pattern is case-insensitive)."""
    name = m.group("name")
    return name[:1].isupper() and name.lower() not in _NOT_NAMES


def introduced_name(user_message: str) -> tuple[str, str] | None:
    """``(name, language)`` when the message introduces the user by name and asks
    nothing (no sentence ends with "?"), else None. ``"Hi, I'm Oskar. I just moved to
    Tallinn."`` → ``("Oskar", "en")``; ``"I'm Oskar, what's the weather?"`` → None; "I'm
    Italian" → ``("Italian", "en")`` is possible: a capitalised word after "I'm" is read
    as a name."""
    if any(c.question for c in clauses(user_message)):
        return None
    for language, lead in _LEADS:
        for m in lead.finditer(user_message):
            if _name_case(m):
                return m.group("name").rstrip("'’-"), language
    return None


def greeting(name: str, language: str) -> str:
    """The opening of a reply greeting ``name`` and going on in the second person
    (:data:`GREETINGS`, :data:`YOU`; English for a language they do not hold):
    ``"Nice to meet you, Oskar! You"``."""
    lang = language if language in GREETINGS else "en"
    return f"{GREETINGS[lang].format(name=name)} {YOU[lang]}"
