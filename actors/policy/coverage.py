"""What the user said about themselves that nothing kept holds.

A small model asked for memory lines writes them in the order the message gives them
and stops early: "Hi! I'm Sofia, 29, a vet in Valencia. I walk to work, I'm learning
Korean, I can't stand olives, and my partner Luis is a chef." came back as name, job and
city, and the olives and the partner were lost without a word. :func:`uncovered_sentences`
finds, clause by clause (:func:`actors.policy.stance.clauses`), the statements the user
made about themselves or their people — not a question, a greeting, a daydream, a
dismissed thought, or a clause that only says how things are today (lexicon rule
``passing``: today, tonight, right now …) — whose content words no kept item holds, and
returns the sentences that hold them, so the reflection keeps them in the user's own
words ("The user said: …"). :func:`statement_count` is how many such statements a
message makes: the reflection's per-call budget follows it. In a shorter message only
the specifics count — a number or a name nothing kept holds. Content words leave out
the lexicon's ``coverage_stopwords``, first-person words (``first_person``,
``first_person_object``, ``first_person_verbs``, ``first_person_possessive``) and
``greeting_words``.

Pure, no I/O; never raises for any ``str``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .lexicon import compile_rules, entries, word_set
from .stance import Clause, clauses, is_greeting

__all__ = ["statement_count", "uncovered_sentences"]

_PASSING = compile_rules("passing")
_FIRST_PERSON = word_set("first_person", "first_person_object", "first_person_verbs",
                         "first_person_possessive", "greeting_words")
_STOP = frozenset(entries("coverage_stopwords"))
"""Words that carry no fact of their own here (lexicon rule ``coverage_stopwords``): "I
live in Graz" is held by ``city=Graz``, "I love olives" by ``likes=olives`` (a dislike is
not: "can't stand" must be held)."""
_WORD = re.compile(r"[^\W_]+")
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")


_NUMBER = re.compile(r"\d(?:[\d,.'’ ]*\d)?")


def _numbers(text: str) -> list[str]:
    """The numbers of ``text``, digits only ("1,200" and "1200" are one number)."""
    return [re.sub(r"\D", "", n) for n in _NUMBER.findall(text)]


def _content(clause: Clause, specifics: bool = False) -> list[str]:
    """The clause's content words, lower-cased: three letters or more, a number (digits
    only), or a capitalised two-letter word ("Go", "VS"); not a stop, first-person or
    greeting word. ``specifics``: only its numbers and capitalised words (names, places,
    brands)."""
    words = [w for w in _WORD.findall(_NUMBER.sub(" ", clause.text))
             if (len(w) >= 3 or (len(w) == 2 and w[0].isupper()))
             and w.lower() not in _STOP and w.lower() not in _FIRST_PERSON]
    if specifics:
        words = [w for w in words if w[0].isupper()]
    return [w.lower() for w in words] + _numbers(clause.text)


def _statement(clause: Clause) -> bool:
    return (clause.subject is not None and not (clause.question or clause.hypothetical
                                                or clause.dismissed)
            and not is_greeting(clause) and not _PASSING.search(clause.text)
            and bool(_content(clause)))


def statement_count(user_message: str) -> int:
    """How many statements about the user or their people the message makes (clauses,
    see the module doc)."""
    return sum(1 for c in clauses(user_message) if _statement(c))


def _held(word: str, held: set[str]) -> bool:
    """``word`` is one of ``held`` or shares a beginning with one ("vet" and
    "veterinarian", "walk" and "walks"; five letters at most are compared)."""
    if word in held:
        return True
    stem = word[:5]
    return any(h.startswith(stem) or (len(h) >= 3 and word.startswith(h[:5])) for h in held)


def uncovered_sentences(user_message: str, kept: Iterable[str], *,
                        specifics: bool = False) -> list[str]:
    """The sentences of ``user_message`` (stripped, in order, each once) holding a
    statement (module doc) with a content word that none of ``kept`` (the items a
    reflection keeps, as text: ``"key value"`` for a fact, a note's body, and the known
    profile's facts) holds; with ``specifics``, only a number or a capitalised word
    counts ("My rent is 1,200 a month and I take home 3,000" with only ``income=3000``
    kept). ``[]`` when every statement is held."""
    items = list(kept)
    held = {w.lower() for item in items for w in _WORD.findall(item.replace("_", " "))}
    held |= {n for item in items for n in _numbers(item)}
    missing = [c for c in clauses(user_message) if _statement(c)
               and not all(_held(w, held) for w in _content(c, specifics))]
    out: list[str] = []
    for sentence in _SENTENCE.findall(user_message):
        text = sentence.strip()
        low = text.lower()
        if text and text not in out and any(c.text.lower() in low for c in missing):
            out.append(text)
    return out
