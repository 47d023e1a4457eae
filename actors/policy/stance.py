"""Who and how the user's message speaks, clause by clause.

A small model reads "My brother Tomas lives in Prague" and writes ``SET city=Prague``;
reads "I don't drink coffee" and writes ``SET drink=coffee``; reads "if I ever moved to
Lisbon…" and writes ``SET city=Lisbon``; reads "Where do I live?" and stores it. The
prompt asks it not to; this module checks, on the user's own words, with no model.

The message is cut into clauses (sentences, then ``, ; : —`` and the conjunctions
``and``/``but``/``so``/``because``…); each :class:`Clause` gets

* ``subject``: ``"user"`` (I, my + a thing, we…), ``"other"`` (my/our + a relation or a
  pet — brother, daughter, friend, dog… —, he/she/they, a capitalised name followed by a
  verb) or ``None`` (no subject of its own: it inherits the previous clause's, within
  its sentence);
* ``negated``: a negation or a negative stance (not, n't, never, no, without, hate,
  dislike, nicht, не, jamais, nunca…);
* ``hypothetical``: if / would / might / maybe / someday / a wish or a daydream (a whole
  sentence that starts with "if", "imagine", "suppose" or mentions a daydream is);
* ``question``: its sentence ends with "?";
* ``dismissed``: its sentence says it is not meant ("that's just a daydream", "in
  theory", "hypothetically").

:func:`judge` finds the clauses that hold an item's content words and drops the item
(``third_person`` / ``comparison`` / ``negated`` / ``hypothetical`` / ``question``) when
*every* such clause is of that kind and the item does not carry the same stance itself
("The user does not drink coffee" is a fine note of "I don't drink coffee"; "The user
dreams of Lisbon" of "maybe someday I'll move to Lisbon"), except that nothing is kept
from a hypothetical the user dismissed ("… but that's just a daydream": not even
``dream_destination=Lisbon``).
``third_person`` applies to every fact (the profile is the user's) unless its key says
whose it is: a note, or ``brother_city`` / ``cat_name``, about the brother or the cat is
fine, ``greeting=purrs at everyone`` from "our cat Miso purrs at everyone" is not.
``comparison``: a fact whose words stand only after a comparison ("nine hours ahead of
Berlin", "cheaper than Oslo", "rather than emacs") is what the user is measured against,
never the user's own. ``denied``: a note that names something only where the user
denies it ("coffee" after "I don't drink", "no", "without", "hate") and carries no
negation or "instead of" itself — "The user prefers green tea over coffee" from "I don't
drink coffee at all, only green tea" turns the denial into a preference; the reflection
keeps the user's sentence instead. A name-like key whose value the user wrote
right after a relation word, "named" or "called" ("my daughter Mia", "a dog named
Biscuit") is ``third_person`` too.

:func:`is_question_only` — every sentence is a question and none states something about
the user first ("I live in Oslo, any tips?" is not) and nothing asks to remember: the
reflection call is skipped (outcome ``none``, reason ``question``). :func:`asks_to_see`
— the message only asks to be shown or told something (a question no "can you" makes a
request, a verb of showing, statements around them): the agent offers it the read-only
tools.

Every word list is :mod:`.lexicon`'s (rules ``conjunctions``, ``first_person*``,
``third_person*``, ``relations``, ``negation``, ``negation_determiners``,
``negative_stance``, ``replacement``, ``hypothetical``, ``wish``, ``hypothetical_open``,
``daydream``, ``intent``, ``dismissal``, ``comparison``, ``articles``, ``self_naming``,
``self_intro``, ``naming_lead``, ``greeting_words``, ``commitment``, ``dates``,
``request_verbs``, ``request_openers``, ``show_verbs``, ``wondering``), in every language of the lexicon:
English, French, German, Spanish, Italian, Portuguese and Russian; and, English only,
``stance_stopwords`` (no content word), ``relation_adjectives`` ("my little brother")
and ``greeting_fillers`` ("thanks a lot"). The identity and name keys
(:data:`IDENTITY_KEYS`) are profile keys, not words. Pure functions, no I/O; never raise
for any ``str``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from actors.policy.relations import RELATIONS

from .grounding import PERSIST
from .lexicon import compile_rules, entries, word_set
from .lexicon import pattern as lexicon_pattern

__all__ = ["Clause", "IDENTITY_KEYS", "about_user", "asks_to_see", "clauses", "denied_word",
           "is_greeting", "is_question_only", "judge"]

_WORD_RE = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")
_SENTENCE_RE = re.compile(r"(?<=[.!?…])\s+|\n+")
_CLAUSE_RE = re.compile(
    rf"\s*[,;:—–]\s+|\s+{lexicon_pattern('conjunctions')}\s+", re.I)

_POSSESSIVE_1P = word_set("first_person_possessive")
_SUBJECT_USER = word_set("first_person", "first_person_object", "first_person_verbs")
_SUBJECT_OTHER = word_set("third_person")
_ARTICLES = word_set("articles")
_VERBS_3P = word_set("third_person_verbs")

_NEGATION = compile_rules("negation", "negative_stance")
_DENIES_NEXT = word_set("negation_determiners", "negative_stance")
_REPLACEMENT = compile_rules("replacement")
_WISH = compile_rules("wish")
_HYPOTHETICAL_WORD = compile_rules("hypothetical")
_DISMISSED = re.compile(lexicon_pattern("dismissal"), re.I)
_HYPOTHETICAL_SENTENCE = re.compile(
    rf"^\s*{lexicon_pattern('hypothetical_open')}|{lexicon_pattern('daydream')}", re.I)
_INTENT = compile_rules("intent")


def _hypothetical(text: str) -> bool:
    """A hypothetical marker outside a wish ("if", "would", "бы" — not "I'd like", "я бы
    хотел")."""
    return bool(_HYPOTHETICAL_WORD.search(_WISH.sub(" ", text)))


_STOP = frozenset(entries("stance_stopwords"))
_RELATION_ADJECTIVES = frozenset(entries("relation_adjectives"))

IDENTITY_KEYS = frozenset("""name first_name last_name full_name user_name preferred_name
nickname surname my_name city home_city current_city location residence lives_in live_in
living_in based_in town country home hometown address job occupation profession role work
job_title position career employer company workplace age birthday date_of_birth birth_date
dob gender nationality email phone phone_number""".split())
"""Keys that describe the user's own identity: never taken from a clause about others."""

_NAME_KEYS = frozenset("""name first_name last_name full_name user_name preferred_name
nickname surname my_name""".split())
_USER_NAMING_LEAD = re.compile(rf"{lexicon_pattern('self_naming', 'self_intro')}\s+$", re.I)
_NAMED_BEFORE = re.compile(rf"{lexicon_pattern('naming_lead')}\s+$", re.I)


@dataclass(frozen=True)
class Clause:
    """One clause of the user's message (see the module doc for the fields)."""

    text: str
    words: tuple[str, ...]
    subject: str | None
    negated: bool
    hypothetical: bool
    question: bool
    dismissed: bool = False


def _words(text: str) -> list[str]:
    return [w.lower().replace("’", "'") for w in _WORD_RE.findall(text)]


def _subject(words: list[str], raw: str) -> str | None:
    if not words:
        return None
    first = words[0]
    if len(words) > 1 and words[1] in _POSSESSIVE_1P and first in _ARTICLES:
        first, words = words[1], words[1:]  # an article first: "il mio", "o meu"
    if first in _POSSESSIVE_1P:
        nxt = [w for w in words[1:4] if w not in _RELATION_ADJECTIVES]
        if nxt and (nxt[0].removesuffix("'s") in RELATIONS):
            return "other"
        return "user"
    if first in _SUBJECT_USER:
        return "user"
    if first in _SUBJECT_OTHER:
        return "other"
    tokens = raw.split()
    if len(tokens) >= 2 and tokens[0][:1].isupper() and first not in _STOP \
            and tokens[1].strip(",.") in _VERBS_3P:
        return "other"  # "Tomas lives in Prague", "Ana is a nurse"
    return None


def clauses(user_message: str) -> list[Clause]:
    """The user's message as :class:`Clause` objects, in order."""
    out: list[Clause] = []
    for sentence in _SENTENCE_RE.split(user_message.strip()):
        sentence = sentence.strip()
        if not sentence:
            continue
        question = sentence.rstrip("\"'”»)").endswith("?")
        hypo_sentence = bool(_HYPOTHETICAL_SENTENCE.search(sentence))
        dismissed = bool(_DISMISSED.search(sentence))
        subject: str | None = None
        for part in _CLAUSE_RE.split(sentence):
            part = part.strip(" .!?…\"'“”«»()")
            if not part:
                continue
            words = _words(part)
            own = _subject(words, part)
            subject = own or subject
            out.append(Clause(text=part, words=tuple(words), subject=subject,
                              negated=bool(_NEGATION.search(part)),
                              hypothetical=hypo_sentence or _hypothetical(part),
                              question=question, dismissed=dismissed))
    return out


def _content(text: str) -> list[str]:
    return [w for w in _words(text) if w not in _STOP and len(w) >= 3]


def _holds(clause: Clause, word: str) -> bool:
    stem = word[:5]
    return any(w[:5] == stem for w in clause.words)


def _name_after_relation(value: str, user_message: str) -> bool:
    """The name in ``value`` appears in the message right after a relation word,
    "named" or "called" (within three words), and nowhere after a user naming lead."""
    names = [w for w in _WORD_RE.findall(value) if w[:1].isupper() or len(value.split()) == 1]
    if not names:
        return False
    for name in names:
        for m in re.finditer(rf"\b{re.escape(name)}\b", user_message, re.I):
            before = user_message[:m.start()]
            if _USER_NAMING_LEAD.search(before[-25:]):
                return False
            near = _words(before)[-3:]
            if _NAMED_BEFORE.search(before[-25:]) or any(
                    w.removesuffix("'s") in RELATIONS for w in near):
                continue
            return False
        if not re.search(rf"\b{re.escape(name)}\b", user_message, re.I):
            return False
    return True


_COMPARISON = compile_rules("comparison")


def _compared(clause: Clause, words: list[str]) -> bool:
    """Every word of the item the clause holds stands after a comparison ("nine hours
    ahead of Berlin", "cheaper than Oslo"): the clause measures the user against it."""
    m = _COMPARISON.search(clause.text)
    if m is None:
        return False
    before = {w[:5] for w in _words(clause.text[:m.start()])}
    held = [w for w in words if _holds(clause, w)]
    return bool(held) and not any(w[:5] in before for w in held)


def _names_other(key: str, support: list[Clause]) -> bool:
    """The key says whose the fact is ("sister_city", "cat_name", "miso_age"): a relation
    word, or a word of the clause other than the item's (the other's name)."""
    parts = key.lower().split("_")
    if any(p in RELATIONS or p.rstrip("s") in RELATIONS for p in parts):
        return True
    names = {w for c in support for w in c.words if w not in _STOP}
    return any(p in names and p[:1].isalpha() and len(p) >= 3 for p in parts[:1])


def _denied(clause: Clause, word: str) -> bool:
    """``word`` stands after the clause's first negation, past the verb a negator such as
    "don't" or "never" governs ("I don't drink coffee": coffee, not drink); after a
    negation that comes right before what it denies ("no", "without", "hate", lexicon
    rules ``negation_determiners`` and ``negative_stance``), from the next word on."""
    for i, w in enumerate(clause.words):
        if _NEGATION.fullmatch(w):
            start = i + 1 if w in _DENIES_NEXT else i + 2
            return any(x[:5] == word[:5] for x in clause.words[start:])
    return False


def denied_word(note: str, parts: list[Clause]) -> str:
    """The first content word of ``note`` that the user's message (``parts``) holds only
    where it denies it ("coffee" of "The user prefers green tea over coffee" against "I
    don't drink coffee at all, only green tea"), or "" — always "" when the note carries
    a negation or a replacement ("instead of coffee") itself."""
    if _NEGATION.search(note) or _REPLACEMENT.search(note):
        return ""
    for w in _content(note):
        support = [c for c in parts if _holds(c, w)]
        if support and all(c.negated and _denied(c, w) for c in support):
            return w
    return ""


def judge(key: str | None, text: str, parts: list[Clause], user_message: str) -> str | None:
    """Why the item (a fact ``key``=``text``, or a note with ``key`` None) must not be
    stored as the message puts it, or None. Reasons: ``third_person``, ``comparison``,
    ``negated``, ``denied`` (a note naming what the user denied, without the denial),
    ``hypothetical``, ``question`` (module doc)."""
    if key in _NAME_KEYS and _name_after_relation(text, user_message):
        return "third_person"
    words = _content(text)
    support = [c for c in parts if any(_holds(c, w) for w in words)]
    if not support:
        return None
    if all(c.subject == "other" for c in support) and (
            key in IDENTITY_KEYS or (key is not None and not _names_other(key, support))):
        return "third_person"
    if key is not None and all(_compared(c, words) for c in support):
        return "comparison"
    item = text if key is None else f"{key.replace('_', ' ')} {text}"
    if all(c.negated for c in support) and not _NEGATION.search(item):
        return "negated"
    if key is None and denied_word(text, parts):
        return "denied"  # "prefers green tea over coffee" from "I don't drink coffee"
    if all(c.hypothetical for c in support) and (
            all(c.dismissed for c in support)
            or not _hypothetical(item) and not _INTENT.search(item)):
        return "hypothetical"
    if all(c.question for c in support):
        return "question"
    return None


_GREETING_WORDS = word_set("greeting_words", split=True)
_GREETING_FILLERS = frozenset(entries("greeting_fillers"))
_FIRST_PERSON = compile_rules("first_person", "first_person_object", "first_person_possessive",
                              "first_person_verbs")


def is_greeting(clause: Clause) -> bool:
    """A clause made only of greeting and thanks words ("hi there", "thanks a lot":
    lexicon rules ``greeting_words``, ``greeting_fillers``)."""
    return bool(clause.words) and all(w in _GREETING_WORDS or w in _GREETING_FILLERS
                                      for w in clause.words)


_COMMITMENT = compile_rules("commitment")
_DAY = re.compile(rf"\b\d{{1,4}}\b|{lexicon_pattern('dates')}", re.I)


def about_user(user_message: str) -> bool:
    """Whether the message speaks of the user at all: a first-person word (several
    languages), a request to remember, or a dated commitment ("the tax return is due by
    31 January": a deadline is said of the user's own life even without "my"). "lol
    that meme was funny" does not."""
    return bool(_FIRST_PERSON.search(user_message) or PERSIST.search(user_message)
                or (_COMMITMENT.search(user_message) and _DAY.search(user_message)))


_REQUEST_VERBS = word_set("request_verbs")
_OPENERS = tuple(sorted((tuple(_words(e)) for e in entries("request_openers")), key=len,
                        reverse=True))
_NOT_A_REQUEST = re.compile(  # "call me Robin", "je m'appelle Camille": a name
    rf"^(?:{lexicon_pattern('request_openers')}\s+)?{lexicon_pattern('self_naming')}", re.I)
_USER_AS_SUBJECT = word_set("first_person", "first_person_possessive", "first_person_verbs")
_WONDERING = compile_rules("wondering")


def _without_openers(words: list[str]) -> list[str]:
    """``words`` without leading openers ("please", "can you", "s'il te plaît")."""
    again = True
    while again and words:
        again = False
        for opener in _OPENERS:
            if tuple(words[:len(opener)]) == opener:
                words, again = words[len(opener):], True
                break
    return words


def is_request_only(user_message: str) -> bool:
    """True when every clause (greetings aside) asks the assistant to do something
    ("Tell me a story about a fox", "please write me a haiku", "can you list three
    tips") and none says anything of the user: the only first-person words are the
    request's object ("me", "us"). English imperatives; other languages fall through to
    the model and the grounding guards. False with a request to remember."""
    parts = [c for c in clauses(user_message) if not is_greeting(c)]
    if not parts or PERSIST.search(user_message):
        return False
    for c in parts:
        words = _without_openers(list(c.words))
        if not words or words[0] not in _REQUEST_VERBS or _NOT_A_REQUEST.match(c.text):
            return False
        if any(w in _USER_AS_SUBJECT for w in words):
            return False
    return True


_SHOW_VERBS = word_set("show_verbs")


def asks_to_see(user_message: str) -> bool:
    """Whether the message asks to be told or shown something, not for something to be
    done (the agent then offers only the read-only tools where one fits: docs/tools.md).
    Each sentence is a question that no opener makes a request ("what were the recent
    commits?", not "can you commit this?"), opens with a verb of showing or telling
    after any opener ("show me the last commits", "can you list my branches?"), or
    states something with a subject of its own ("My sister lives in Lima."); and at
    least one asks. An imperative ("Commit my changes. What is the status?") makes it
    False. Lexicon rules ``show_verbs`` and ``request_openers``."""
    asked = False
    for sentence in _SENTENCE_RE.split(user_message.strip()):
        parts = [c for c in clauses(sentence) if not is_greeting(c)]
        if not parts:
            continue
        first = parts[0]
        words = _without_openers(list(first.words))
        opened = len(words) < len(first.words)
        if words and words[0] in _SHOW_VERBS:
            asked = True
        elif first.question and not opened:
            asked = True
        elif first.subject is None or first.question:
            return False  # an imperative, or a request behind "can you"
    return asked


def is_question_only(user_message: str) -> bool:
    """True when the message only asks (module doc), greetings aside; False for an
    empty message."""
    parts = [c for c in clauses(user_message) if not is_greeting(c)]
    if not parts or PERSIST.search(user_message):
        return False
    for c in parts:
        if not c.question:
            return False
    for c in parts[:-1]:
        # "I live in Oslo, any tips?": a first-person statement before the question.
        if c.words and (c.words[0] in _SUBJECT_USER or c.words[0] in _POSSESSIVE_1P) \
                and not _WONDERING.match(c.text):
            return False
    return True
