"""Who and how the user's message speaks, clause by clause: the guards of issue 17.

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
* ``question``: its sentence ends with "?".

:func:`judge` finds the clauses that hold an item's content words and drops the item
(``third_person`` / ``comparison`` / ``negated`` / ``hypothetical`` / ``question``) when
*every* such clause is of that kind and the item does not carry the same stance itself
("The user does not drink coffee" is a fine note of "I don't drink coffee").
``third_person`` applies to every fact (the profile is the user's) unless its key says
whose it is: a note, or ``brother_city`` / ``cat_name``, about the brother or the cat is
fine, ``greeting=purrs at everyone`` from "our cat Miso purrs at everyone" is not.
``comparison``: a fact whose words stand only after a comparison ("nine hours ahead of
Berlin", "cheaper than Oslo", "rather than emacs") is what the user is measured against,
never the user's own. A name-like key whose value the user wrote
right after a relation word, "named" or "called" ("my daughter Mia", "a dog named
Biscuit") is ``third_person`` too.

:func:`is_question_only` — every sentence is a question and none states something about
the user first ("I live in Oslo, any tips?" is not) and nothing asks to remember: the
reflection call is skipped (outcome ``none``, reason ``question``).

Word lists cover English first and the common forms of German, French, Spanish,
Italian, Portuguese and Russian. Pure functions, no I/O; never raise for any ``str``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from actors.policy.relations import RELATIONS

from .grounding import PERSIST

__all__ = ["Clause", "IDENTITY_KEYS", "about_user", "clauses", "is_greeting", "is_question_only",
           "judge"]

_WORD_RE = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")
_SENTENCE_RE = re.compile(r"(?<=[.!?…])\s+|\n+")
_CLAUSE_RE = re.compile(
    r"\s*[,;:—–]\s+|\s+(?:and|but|so|because|while|although|though|whereas|und|aber|"
    r"et|mais|y|pero|e|ma|mas|и|а|но)\s+", re.I)

_POSSESSIVE_1P = frozenset("""my our mein meine meinen meinem meiner unser unsere mon ma mes
notre nos mi mis nuestro nuestra mio mia miei mie nostro nostra meu minha meus minhas nosso
nossa мой моя моё мое мои наш наша наши""".split())
_SUBJECT_USER = frozenset("""i i'm i’m im i've i’ve i'd i’d i'll me we we're we’re we've us
ich wir je j'ai nous yo nosotros io noi eu nós я мы меня мне""".split())
_SUBJECT_OTHER = frozenset("""he she they he's she's they're he’s she’s they’re his her their
it's er sie il elle ils elles él ella ellos ellas lui lei loro ele ela eles elas он она они
его её ее их""".split())
_VERBS_3P = re.compile(
    r"^(?:is|was|has|lives|lived|works|worked|likes|loves|owns|turns|studies|plays|"
    r"goes|went|moved|got|became|teaches|runs|said|says|'s|’s)$", re.I)

_NEGATION = re.compile(
    r"\b(?:not|no|never|none|nothing|neither|nor|without|hate|hates|hated|dislike|dislikes|"
    r"can't stand|cannot stand|avoid|avoids|nicht|kein|keine|keinen|nie|niemals|ne|pas|"
    r"jamais|nunca|nada|non|mai|não|nao|не|нет|никогда|ни)\b|n['’]t\b", re.I)
_HYPOTHETICAL = re.compile(
    r"\b(?:if|would(?!\s+(?:like|love|prefer))|might|maybe|perhaps|someday|some day|"
    r"one day|daydream\w*|dream(?:s|ing)?\s+(?:of|about)|wish(?:es)?|hypothetical(?:ly)?|"
    r"imagine|suppose|wenn|falls|vielleicht|würde|si|quizás|quizas|tal vez|se|forse|talvez|"
    r"если|бы|может быть|мечтаю)\b|['’]d\s+(?!like|love|prefer)", re.I)
_HYPOTHETICAL_SENTENCE = re.compile(
    r"^\s*(?:if|imagine|suppose|hypothetically|wenn|falls|si|se|если)\b|"
    r"\b(?:daydream\w*|just a dream|hypothetical(?:ly)?|in theory)\b", re.I)
_STOP = frozenset("""the a an and or but of to in on at for with by from is are was were be
been being has have had do does did that this these those it its as about user users
user's their they them he she his her who which what when where there than then also very
really just only all any some every each into over not no yes i me my mine we our you
your""".split())

IDENTITY_KEYS = frozenset("""name first_name last_name full_name user_name preferred_name
nickname surname my_name city home_city current_city location residence lives_in live_in
living_in based_in town country home hometown address job occupation profession role work
job_title position career employer company workplace age birthday date_of_birth birth_date
dob gender nationality email phone phone_number""".split())
"""Keys that describe the user's own identity: never taken from a clause about others."""

_NAME_KEYS = frozenset("""name first_name last_name full_name user_name preferred_name
nickname surname my_name""".split())
_USER_NAMING_LEAD = re.compile(
    r"(?:\bmy\s+name\s+is|\bmy\s+name['’]s|\bcall\s+me|\bi\s*(?:am|['’]m)(?:\s+called|"
    r"\s+named)?|\bim|\bthis\s+is|ich\s+heiße|ich\s+bin|je\s+m['’]appelle|je\s+suis|"
    r"me\s+llamo|soy|mi\s+chiamo|sono|me\s+chamo|sou|меня\s+зовут|я)\s+$", re.I)
_NAMED_BEFORE = re.compile(
    r"(?:\b(?:named|called|name is|name's|names are|heißt|s'appelle|se llama|si chiama|"
    r"se chama|зовут)\s+$)", re.I)


@dataclass(frozen=True)
class Clause:
    """One clause of the user's message (see the module doc for the fields)."""

    text: str
    words: tuple[str, ...]
    subject: str | None
    negated: bool
    hypothetical: bool
    question: bool


def _words(text: str) -> list[str]:
    return [w.lower().replace("’", "'") for w in _WORD_RE.findall(text)]


def _subject(words: list[str], raw: str) -> str | None:
    if not words:
        return None
    first = words[0]
    if first in _POSSESSIVE_1P:
        nxt = [w for w in words[1:4] if w not in ("little", "big", "older", "younger",
                                                  "new", "old", "best", "dear", "new")]
        if nxt and (nxt[0].removesuffix("'s") in RELATIONS):
            return "other"
        return "user"
    if first in _SUBJECT_USER:
        return "user"
    if first in _SUBJECT_OTHER:
        return "other"
    tokens = raw.split()
    if len(tokens) >= 2 and tokens[0][:1].isupper() and first not in _STOP \
            and _VERBS_3P.match(tokens[1].strip(",.")):
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
                              hypothetical=hypo_sentence or bool(_HYPOTHETICAL.search(part)),
                              question=question))
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


_COMPARISON = re.compile(
    r"\b(?:ahead\s+of|behind|than|compared\s+(?:to|with)|unlike|similar\s+to|same\s+as|"
    r"different\s+from|just\s+like|like\s+in|vs\.?|versus|rather\s+than|"
    r"instead\s+of|im\s+vergleich\s+zu|plutôt\s+que|comparé\s+à|comparado\s+con|"
    r"rispetto\s+a|чем|в\s+отличие\s+от)\b", re.I)


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


def judge(key: str | None, text: str, parts: list[Clause], user_message: str) -> str | None:
    """Why the item (a fact ``key``=``text``, or a note with ``key`` None) must not be
    stored as the message puts it, or None. Reasons: ``third_person``, ``comparison``,
    ``negated``, ``hypothetical``, ``question`` (module doc)."""
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
    if all(c.hypothetical for c in support) and not _HYPOTHETICAL.search(item) and not re.search(
            r"\b(?:plan|plans|planning|dream|dreams|wants? to|hopes?|considering)\b", item, re.I):
        return "hypothetical"
    if all(c.question for c in support):
        return "question"
    return None


_GREETING_WORDS = frozenset("""hi hello hey heya hiya there yo good morning evening afternoon
night day thanks thank you cheers bye goodbye ok okay lol haha hallo salut hola ciao oi
привет здравствуйте спасибо пока""".split())
_FIRST_PERSON = re.compile(
    r"\b(?:i|i'm|i’m|im|i've|i’ve|i'd|i’d|i'll|me|my|mine|myself|we|we're|our|ours|us|ich|"
    r"mich|mir|mein|meine|meinen|wir|unser|unsere|je|j'|moi|mon|ma|mes|nous|notre|yo|mi|mis|"
    r"me|nosotros|nuestro|io|mio|mia|miei|noi|nostro|eu|meu|minha|nós|nosso|я|меня|мне|мой|"
    r"моя|моё|мое|мои|мы|нас|наш|наша)\b", re.I)


def is_greeting(clause: Clause) -> bool:
    """A clause made only of greeting and thanks words ("hi there", "thanks a lot")."""
    return bool(clause.words) and all(w in _GREETING_WORDS or w in ("a", "lot", "so", "much")
                                      for w in clause.words)


_COMMITMENT = re.compile(
    r"\b(?:due|deadline|appointment|meeting|exam|interview|flight|booked|reservation|"
    r"expires?|renewal|check-?up|surgery|court|hearing|fällig|termin|échéance|rendez-vous|"
    r"plazo|cita|scadenza|appuntamento|срок|встреча)\b", re.I)
_DAY = re.compile(
    r"\b(?:\d{1,4}|jan\w*|feb\w*|mar\w*|apr\w*|may|jun\w*|jul\w*|aug\w*|sep\w*|oct\w*|"
    r"nov\w*|dec\w*|monday|tuesday|wednesday|thursday|friday|saturday|sunday|today|"
    r"tonight|tomorrow|next\s+\w+|this\s+(?:week|month|weekend|\w+day))\b", re.I)


def about_user(user_message: str) -> bool:
    """Whether the message speaks of the user at all: a first-person word (several
    languages), a request to remember, or a dated commitment ("the tax return is due by
    31 January": a deadline is said of the user's own life even without "my"). "lol
    that meme was funny" does not."""
    return bool(_FIRST_PERSON.search(user_message) or PERSIST.search(user_message)
                or (_COMMITMENT.search(user_message) and _DAY.search(user_message)))


_REQUEST_VERBS = frozenset("""tell give write show explain list make create draft compose
generate describe summarise summarize translate suggest recommend find help teach send
sing play read rewrite fix convert calculate compute name plan pick""".split())
_NOT_A_REQUEST = re.compile(r"^(?:please\s+)?call\s+me\b", re.I)  # "call me Robin": a name
_USER_AS_SUBJECT = frozenset({"i", "i'm", "i’m", "im", "i've", "i’ve", "i'd", "i’d", "i'll",
                              "my", "mine", "myself", "we", "we're", "our", "ours"})


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
        words = list(c.words)
        while words and words[0] in ("please", "pls", "now", "ok", "okay", "so"):
            words = words[1:]
        if words[:2] in (["can", "you"], ["could", "you"], ["would", "you"], ["will", "you"]):
            words = words[2:]
        if not words or words[0] not in _REQUEST_VERBS or _NOT_A_REQUEST.match(c.text):
            return False
        if any(w in _USER_AS_SUBJECT for w in words):
            return False
    return True


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
        if c.words and c.words[0] in _SUBJECT_USER | {"my", "our"} and not re.match(
                r"^(?:i|we)\s+(?:wonder|was wondering|want to know|need to know)", c.text, re.I):
            return False
    return True
