"""Profile keys a small model writes, mapped to one key per meaning.

"Actually I moved to Berlin" must *supersede* the active ``city`` fact, keeping its
history; a model that writes ``location=Berlin`` instead would leave two homes active.
The prompt asks the model to reuse a known key; :func:`canonical_key` makes sure: a key
of a synonym group (:data:`GROUPS`) becomes the group's key already in the profile, else
the group's first key. Keys outside every group are kept as written.

The key vocabularies here (:data:`GROUPS` and the key parts each function names) are the
profile's own identifiers, English by the format's convention, not words of a language;
the words of values are :mod:`.lexicon`'s (rules ``flag_values``, ``diets``, ``dates``,
``time_words``, ``clock_suffixes``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .lexicon import compile_rules, entries
from .lexicon import pattern as lexicon_pattern

__all__ = ["FLAG_VALUES", "GROUPS", "DIETS", "canonical_key", "group_words", "holds_value",
           "not_a_place", "one_attribute", "spell_out"]

GROUPS: tuple[tuple[str, ...], ...] = (
    ("name", "user_name", "first_name", "full_name", "my_name", "given_name"),
    ("city", "location", "home_city", "current_city", "residence", "lives_in", "live_in",
     "living_in", "based_in", "town", "home_town_current", "place_of_residence", "home"),
    ("job", "occupation", "profession", "role", "work", "job_title", "position", "career",
     "current_job"),
    ("employer", "company", "workplace", "works_at", "work_place"),
    ("editor", "code_editor", "text_editor", "preferred_editor", "favorite_editor",
     "favourite_editor"),
    # the language of replies; a bare "language" is not one ("I'm learning Korean" was
    # stored as language=Korean and the next reply came in Korean)
    ("reply_language", "preferred_language", "response_language", "answer_language",
     "communication_language"),
    ("timezone", "time_zone", "tz"),
    ("diet", "dietary_preference", "diet_type", "dietary_restriction", "dietary_restrictions"),
    ("test_runner", "testing_framework", "test_framework", "testing_tool",
     "preferred_test_framework", "testing", "test_tool"),
    ("email", "email_address", "e_mail"),
    ("phone", "phone_number", "mobile", "mobile_number", "telephone", "cell"),
    ("birthday", "date_of_birth", "birth_date", "dob"),
    ("allergy", "allergies", "allergic_to", "allergic"),
    ("pet", "pets"),
    ("hobby", "hobbies"),
    ("pronouns", "preferred_pronouns"),
    ("units", "unit_system", "measurement_system", "measurement_units", "preferred_units"),
    ("answer_length", "reply_length", "response_length", "answer_style_length"),
)
"""Synonym groups: the first key is the group's default name."""

_BY_KEY = {k: g for g in GROUPS for k in g}
_PREFIXES = ("preferred_", "favorite_", "favourite_", "my_", "current_", "usual_",
             "primary_", "main_", "default_", "user_")


def canonical_key(key: str, known: Iterable[str] = ()) -> str:
    """The key to write ``key`` under: its group's key that is already in ``known``
    (the active profile's keys), else the group's first key; ``key`` itself outside
    every group."""
    group = _BY_KEY.get(key)
    if group is None:  # "preferred_testing_framework" means "testing_framework"
        for prefix in _PREFIXES:
            base = key[len(prefix):]
            if key.startswith(prefix) and base in _BY_KEY and base != "name":
                group = _BY_KEY[base]
                break
    if group is None:
        return key
    known_set = set(known)
    for k in group:
        if k in known_set:
            return k
    return group[0]


_GENERIC = frozenset("""user my first full given current preferred favorite favourite home
time type place based live living lives answer response reply communication date""".split())


def group_words(key: str) -> set[str]:
    """The distinctive words of every key of ``key``'s group (``job`` → job, occupation,
    work, …; generic parts such as ``user`` or ``preferred`` left out), or of ``key``
    itself outside every group: what a user may call the fact."""
    keys = _BY_KEY.get(key, (key,))
    words = {w for k in keys for w in k.split("_") if len(w) >= 2 and w not in _GENERIC}
    return words or {w for w in key.split("_") if w}


FLAG_VALUES = frozenset(entries("flag_values"))
"""Fact values that only say "this key holds" (``halal=true``; lexicon rule
``flag_values``): the key is the fact."""

_KEY_STOP = frozenset("a an the to of for in on at is are has have with".split())


def holds_value(key: str, value: str) -> bool:
    """Whether the fact's key holds its value: a flag value (:data:`FLAG_VALUES`) under a
    key of two or more words (``allergy_peanuts=yes``, ``partner_sam_vegetarian=true``).
    A one-word flag key (``vegetarian=yes``, ``is_vegan=true``) is a fact in itself."""
    if value.strip().lower().rstrip(".") not in FLAG_VALUES:
        return False
    return len([w for w in key.split("_") if w and w not in _KEY_STOP]) >= 2


def spell_out(key: str, value: str, user_message: str,
              known: Iterable[str] = ()) -> tuple[str, str] | None:
    """``(key, value)`` for a fact whose key holds its value (:func:`holds_value`), in the
    user's words: ``allergy_peanuts=yes`` → ``("allergy", "peanuts")`` when the user wrote
    "peanuts". The key's leading words must name an attribute — a key of a synonym group
    (:data:`GROUPS`, so ``allergic_to_peanuts`` → ``allergy``) or a key in ``known`` (the
    active profile) — and every remaining word must be in ``user_message`` (compared on
    their first five letters). None otherwise: the caller keeps the user's sentence."""
    if not holds_value(key, value):
        return None
    parts = [w for w in key.split("_") if w]
    known_set = set(known)
    for cut in range(len(parts) - 1, 0, -1):
        head = "_".join(parts[:cut])
        if head in _BY_KEY or head in known_set:
            rest = [w for w in parts[cut:] if w not in _KEY_STOP]
            break
    else:
        return None
    said: dict[str, str] = {}
    for word in re.findall(r"[^\W_]+(?:['’][^\W_]+)?", user_message):
        said.setdefault(word.lower()[:5], word)
    if not rest or any(w[:5] not in said for w in rest):
        return None
    return canonical_key(head, known_set), " ".join(said[w[:5]] for w in rest)


DIETS = frozenset(entries("diets"))
"""Values that are a diet (lexicon rule ``diets``): ``job=pescatarian`` or
``vegetarian=yes`` is ``diet``."""


def one_attribute(key: str, value: str, relations: Iterable[str] = ()) -> tuple[str, str]:
    """``(key, value)`` written under the one key of its attribute, so one attribute
    holds one fact: a diet named as the key (``vegetarian=yes``) or as the value of
    another key (``job=pescatarian``) is ``diet=<the diet>``; a relation's name under
    ``<relation>_name`` (``husband_name=Marco``, one of ``relations``) is
    ``<relation>=Marco``. Anything else is returned unchanged."""
    low_key, low_value = key.lower(), value.strip().lower().rstrip(".")
    if low_key in DIETS and low_value in FLAG_VALUES:
        return "diet", low_key
    if low_value in DIETS and low_key not in _BY_KEY.get("diet", ()) and \
            low_key not in ("allergy", "allergies"):
        return "diet", value.strip()
    base = low_key.removesuffix("_name")
    if base != low_key and base in set(relations):
        return base, value
    return key, value



_PLACE_WORDS = frozenset("""city country town hometown location residence destination home
address neighbourhood neighborhood region village place""".split())
_TIME_RE = compile_rules("dates")
_TIME_WORDS = re.compile(
    rf"^(?:\d{{1,2}}(?::\d\d)?{lexicon_pattern('clock_suffixes', bound=False)}?|"
    rf"{lexicon_pattern('time_words')})$", re.I)


def not_a_place(key: str, value: str) -> bool:
    """Whether ``value`` is a time, not a place, for a place key (``city``,
    ``destination``, ``home`` …): "I'm staying in on Saturday night" gave ``city =
    Saturday night``. True when every word of the value is a day, a month, a part of the
    day or a clock time (lexicon rules ``dates``, ``time_words``, ``clock_suffixes``)."""
    if not _PLACE_WORDS & set(key.lower().split("_")):
        return False
    words = re.findall(r"[^\W_]+(?::\d\d)?", value)
    return bool(words) and all(_TIME_WORDS.match(w) or _TIME_RE.fullmatch(w) for w in words)
