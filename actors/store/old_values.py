"""Whether a note still states a fact's old value of the user: the text rules of
:mod:`actors.store.staleness`, pure (no store), so reflection's planning can apply them to
what it is about to write (:mod:`actors.reflection.plan`).

A note states the old value when it holds every distinctive word of it, not the new
value, and says it of the user: the sentence holding it starts with "The user" / "User"
/ "I", or "The user's …" of an attribute ("The user's name is Ana") but not of a person
or a pet ("The user's sister lives in Linz" is hers).
"""

from __future__ import annotations

import re

from actors.policy.forget import WORD_RE, matches
from actors.policy.relations import RELATIONS

__all__ = ["states_old_value", "value_words"]

_STOP = frozenset("""the a an and or of to in on at for with by from is are was were be my
our your their his her its at true false yes no none""".split())
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
_USER_SUBJECT = re.compile(r"^\s*(?:the\s+user|user|i)\b(?!['’]s)", re.I)
_USERS_OWN = re.compile(r"^\s*(?:the\s+)?user['’]s\s+(?:[^\W\d_]+\s+)?([^\W\d_]+)", re.I)
"""``The user's name is …``, ``The user's favourite colour is …``: the user's own
attribute, unless the word is a person or a pet (``The user's sister lives in …``)."""
def value_words(value: str) -> list[str]:
    """The distinctive words of a fact value (lower case, ≥ 3 letters or a number, not a
    stopword), in order, without repeats."""
    out: list[str] = []
    for w in WORD_RE.findall(value.replace("_", " ")):
        w = w.lower()
        if (len(w) >= 3 or w.isdigit()) and w not in _STOP and w not in out:
            out.append(w)
    return out


def _user_subject(sentence: str) -> bool:
    if _USER_SUBJECT.match(sentence):
        return True
    own = _USERS_OWN.match(sentence)
    return own is not None and not any(w.lower() in RELATIONS for w in own.group(0).split()[2:])


def _about_user(content: str, words: list[str]) -> bool:
    return any(_user_subject(s) and matches(words, s) for s in _SENTENCE.split(content))


def states_old_value(content: str, old_value: str, new_value: str) -> bool:
    """Whether a note's ``content`` states ``old_value`` of the user and not
    ``new_value`` ("" when the fact was retired): the first three rules of the module
    doc. False when the old value has no distinctive word or equals the new one."""
    old, new = value_words(old_value), value_words(new_value)
    if not old or old == new:
        return False
    return matches(old, content) and not (new and matches(new, content)) \
        and _about_user(content, old)
