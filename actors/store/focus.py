"""What memory says that bears on this message: one line next to the question.

A 1.5B model reads the tail's memory sections and then, many lines later, answers the
question as if they were not there: with a shellfish allergy in memory it called a
seafood paella "a great option", with a warfarin prescription it said aspirin was fine,
with the user's city in ``### profile`` it suggested "the beach" (the memory-use
benchmark, ``bench/memuse.py``). Small models follow what stands next to the
instruction far better than what they read pages earlier, so the ``### respond`` section
repeats, after the user's message:

* :func:`render_focus` — the best recalled notes (the recall hits, best first), then the
  profile facts the tail shows: at most :data:`FOCUS_ITEMS` items, each clipped to
  :data:`FOCUS_ITEM_CHARS` chars, without repeats;
* :func:`care_items` — when the message is about food, medicine, exercise or travel
  (:data:`CARE_TOPIC`), the facts and notes about health, diet or safety (:data:`CARE`:
  an allergy, a medication, a condition, a diet, an injury …) shown anywhere in the tail,
  the index included: getting these wrong harms the user;
* :func:`same_day` — what memory has on a day the message names;
* :func:`unknown_people` — the people or pets the message asks about that memory does not
  mention, so the reply says it does not know instead of inventing;
* :func:`someone_else` — a question about a named person's something where what memory
  holds on it is about someone else. Text that reads as an instruction is never repeated
(``instructions.reads_as_instruction``); everything goes through ``render.neutralise``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from actors.policy.instructions import reads_as_instruction
from actors.policy.keys import GROUPS
from actors.policy.relations import RELATIONS

from .records import Note, ProfileFact
from .render import clip_preview, neutralise

__all__ = ["CARE", "CARE_TOPIC", "FOCUS_ITEMS", "FOCUS_ITEM_CHARS", "care_items", "render_focus",
           "same_day", "someone_else", "unknown_people"]

FOCUS_ITEMS = 5
"""Most items on the focus line (each costs the reply's first token a few tokens)."""
FOCUS_ITEM_CHARS = 110
"""Clip of one item, in chars including the ellipsis."""

CARE = re.compile(
    r"allerg|anaphyla|intoleran|sensitiv\w* to|medicat|medicine|prescri|\bdrugs?\b|"
    r"\bpills?\b|diabet|insulin|pregnan|asthma|epilep|seizure|blood\s*(?:thinner|pressure)|"
    r"anticoagul|heart\s+condition|chronic|disorder|disease|illness|injur|surgery|"
    r"\bdiet\b|vegan|vegetarian|pescatarian|halal|kosher|gluten|coeliac|celiac|"
    r"lactose|dairy-free|nut-free|sober|alcohol|can't eat|cannot eat|must avoid|"
    r"must not|phobi|wheelchair|disabilit|deaf|blind|"
    r"can[’']?t stand|cannot stand|dislike|\bhates?\b|(?:don|doesn)[’']?t like|"
    r"do(?:es)? not like|never eats?\b|won[’']?t eat|not a fan of",
    re.I)
"""Health, diet and safety words, and dislikes: an item holding one may change any answer
about food, drink, medicine, exercise or travel, whether or not the question names it
("Suggest pizza toppings" with "you can't stand olives" in memory)."""


CARE_TOPIC = re.compile(
    r"\b(?:eat\w*|ate|food|dish\w*|meal\w*|recipe\w*|cook\w*|bak\w*|dessert\w*|snack\w*|"
    r"restaurant\w*|order\w*|dinner|lunch|breakfast|brunch|drink\w*|menu|cuisine|"
    r"pizza\w*|topping\w*|pasta|salad\w*|sandwich\w*|burger\w*|soup\w*|cake\w*|"
    r"sauce\w*|flavou?r\w*|tast\w*|grocer\w*|picnic\w*|barbecue|bbq|sushi|curry|"
    r"snack\w*|treat\w*|"
    r"ingredient\w*|pill\w*|medicine\w*|medication\w*|drug\w*|tablet\w*|painkiller\w*|"
    r"dose|headache|pain|ache|fever|cold|flu|sick|ill|hurt\w*|symptom\w*|take\s+(?:some|a|an)\b|"
    r"prescri\w*|doctor\w*|pharmac\w*|dentist\w*|hospital\w*|infection\w*|vaccin\w*|"
    r"antibiotic\w*|allerg\w*|"
    r"workout\w*|exercis\w*|run|running|gym|train\w*|sport\w*|hik\w*|swim\w*|yoga|"
    r"travel\w*|trip|flight|holiday|vacation|party|birthday|visit\w*|guest\w*|"
    r"essen|kochen|trinken|manger|cuisiner|boire|comer|cocinar|beber|mangiare|cucinare|"
    r"bere|еда|есть|готовить|пить|лекарств\w*)\b", re.I)
"""What a message is about when a care item may change the answer: food and drink,
medicine and symptoms, exercise, travel and hosting."""


def care_items(message: str, profile: Sequence[ProfileFact], recalled: Sequence[Note],
               index: Sequence[Note], *, superseded: Mapping[int, int] | None = None,
               max_items: int = 3, owner: str = "the user's") -> list[str]:
    """The care items (:data:`CARE`) shown anywhere in the tail when ``message`` is about
    food, medicine, exercise or travel (:data:`CARE_TOPIC`), else none: a medication
    repeated beside a question about a meeting only distracts a small model."""
    if not CARE_TOPIC.search(message):
        return []
    old = set(superseded or {})
    texts = [(_fact_text(f, owner=owner), f"{f.key} {f.value}") for f in profile]
    texts += [(_note_text(n), n.content) for n in [*recalled, *index] if n.id not in old]
    out: list[str] = []
    for text, raw in texts:
        if len(out) < max_items and CARE.search(raw.replace("_", " ")) \
                and not reads_as_instruction(text):
            item = neutralise(clip_preview(_care_clause(text).rstrip(". "), FOCUS_ITEM_CHARS))
            if item not in out:
                out.append(item)
    return out


_CLAUSE_END = re.compile(r"(?<=[.;!?])\s+|,\s+(?:and\s+|but\s+)?")


def _care_clause(text: str) -> str:
    """``text`` if it fits one focus item, else the clause holding its care word behind
    "…": a quoted introduction clipped at 110 characters had lost "you can't stand
    olives" at its end."""
    m = CARE.search(text)
    if m is None or len(text) <= FOCUS_ITEM_CHARS:
        return text
    start = 0
    for cut in _CLAUSE_END.finditer(text):
        if cut.start() > m.start():
            return ("… " if start else "") + text[start:cut.start()]
        start = cut.end()
    return ("… " if start else "") + text[start:]


def _fact_text(fact: ProfileFact, line: str = "", owner: str = "the user's") -> str:
    """A fact as the focus names it: "the user's package manager: poetry", or its
    ``### profile`` line (``line``, with the days the prompt counted) under the same
    owner. Bare "shell: fish" and "city: Lisbon" were used in 4 of 12 sampled replies,
    owned ones in 7 (``bench/memuse.py`` prompts, 6 samples each)."""
    key, sep, rest = line.partition(":")
    if not sep or key.strip() != fact.key:
        key, rest = fact.key, f" {' '.join(fact.value.split())}"
    return f"{owner} {key.replace('_', ' ')}:{rest}"


def _note_text(note: Note) -> str:
    return " ".join(note.content.split())


def render_focus(profile: Sequence[ProfileFact], recalled: Sequence[Note],
                 *, superseded: Mapping[int, int] | None = None,
                 max_items: int = FOCUS_ITEMS, fact_lines: Mapping[str, str] | None = None,
                 note_days: Mapping[int, str] | None = None,
                 said: Sequence[str] = (), owner: str = "the user's") -> str:
    """The focus line's items joined by ``"; "`` (module docstring), or ``""`` when
    memory shows nothing. ``profile``: the facts ``### profile`` shows; ``recalled``:
    the recall hits, best first; ``superseded``: notes a shown correction replaces
    (never repeated); ``fact_lines``: a fact's ``### profile`` line by key (without the
    leading ``- ``), used instead of ``key: value`` so the days the prompt counted come
    along ("thesis_due: March 14th (14 Mar 2027, in 102 days)"); ``note_days``: the
    same for a note (`` (7 May 2023)``), appended; ``said``: the health and same-day
    items (:func:`care_items`, :func:`same_day`), which ``### respond`` states in lines of
    their own — an item one of them holds (or that holds one: the focus may carry the
    prompt's days) is left out, so each is said once (on 2 cores every tail token costs
    ~20 ms of prompt evaluation); ``owner``: whose a fact is ("the user's"; the agent's
    prompt says "your"). Pure; never raises."""
    old = set(superseded or {})
    lines, days = fact_lines or {}, note_days or {}
    facts = [(_fact_text(f, lines.get(f.key, ""), owner), f"{f.key} {f.value}")
             for f in profile]
    notes = [(_note_text(n).rstrip(". ") + days.get(n.id, ""), n.content)
             for n in recalled if n.id not in old]
    out: list[str] = []
    for text, raw in notes + facts:
        if len(out) >= max_items:
            break
        if not text or reads_as_instruction(raw.replace("_", " ")) or reads_as_instruction(text):
            continue
        item = neutralise(clip_preview(text.rstrip(". "), FOCUS_ITEM_CHARS))
        if item not in out:
            out.append(item)
    return "; ".join(i for i in out if not any(o in i or i in o for o in said))


_DAY_WORDS = re.compile(
    r"\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|today|tonight|"
    r"tomorrow|this\s+(?:morning|afternoon|evening|weekend)|"
    r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+\d{1,2}(?:st|nd|rd|th)?|"
    r"\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|"
    r"dec)[a-z]*)\b", re.I)


def _days(text: str) -> set[str]:
    """The days ``text`` names, normalised ("tuesday", "mar 14")."""
    out = set()
    for m in _DAY_WORDS.finditer(text):
        words = re.findall(r"[a-z]+|\d+", m.group().lower())
        nums = [w for w in words if w.isdigit()]
        month = next((w[:3] for w in words if not w.isdigit() and w not in ("st", "nd", "rd",
                                                                            "th", "of")), "")
        out.add(f"{month} {int(nums[0])}" if nums else " ".join(words))
    return out


def same_day(message: str, recalled: Sequence[Note], index: Sequence[Note],
             profile: Sequence[ProfileFact], *, max_items: int = 2,
             owner: str = "the user's") -> list[str]:
    """What memory has on a day the message names ("Can we talk on Tuesday morning?" and
    "The user has a job interview on Tuesday at 10am."): a weekday, "tomorrow", "this
    evening" or a month day written the same way in both; at most ``max_items``,
    clipped like the focus items. "Am I free then?" was answered "Yes" with the
    appointment for that very day recalled."""
    asked = _days(message)
    if not asked:
        return []
    out: list[str] = []
    texts = ([_note_text(n) for n in [*recalled, *index]]
             + [_fact_text(f, owner=owner) for f in profile])
    for text in texts:
        if len(out) >= max_items:
            break
        if _days(text) & asked and not reads_as_instruction(text):
            item = neutralise(clip_preview(text.rstrip(". "), FOCUS_ITEM_CHARS))
            if item not in out:
                out.append(item)
    return out


_WH_MY = re.compile(
    r"\b(?:who|where|how\s+old|when|what|which)(?:['’]s|\s+(?:is|was|are|were|does|did|do))"
    r"\s+my\s+(?:(?P<a>[^\W\d_]+)\s+)?(?P<b>[^\W\d_]+)(?:['’]s\s+(?P<c>[^\W\d_]+))?", re.I)
"""A question for something of the user's: "what's my brother's name", "where does my
sister live", "how old is my son", "what is my blood type" (not "what should I cook for
my wife", which asks nothing about her)."""
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_SAME = {w: group.split()[0] for group in (
    "mother mum mom mommy mummy mama mam", "father dad daddy papa pa",
    "grandmother grandma granny nan nana", "grandfather grandpa granddad",
    "wife spouse", "husband spouse", "partner girlfriend boyfriend", "children kids child kid",
    "son boy", "daughter girl", "cat kitten", "dog puppy") for w in group.split()}
_MINE_STOP = frozenset("""favourite favorite own current old new first last best usual main
real full little big older younger dear""".split())


def _canonical(word: str) -> str:
    """One form per word: a family word's group head, a plural's singular ("cats" and
    ``cat_names`` are the same cat), the first five letters."""
    if word not in _SAME and len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    return _SAME.get(word, word)[:5]


_SYNONYMS: tuple[frozenset[str], ...] = tuple(
    frozenset(_canonical(w) for key in group for w in key.split("_") if len(w) >= 3
              and w not in ("user", "my", "current", "preferred", "favorite", "favourite",
                            "first", "full", "given", "home", "time", "type", "place",
                            "based", "live", "living", "lives", "answer", "response",
                            "reply", "date"))
    for group in GROUPS) + (frozenset({"pet", "cat", "dog", "kitte", "puppy"}),)
"""Words of one meaning, as :func:`_canonical` forms: a profile key's synonym group
(:data:`actors.policy.keys.GROUPS`: job, role, position, occupation …), and a pet for a
cat or a dog."""


def unknown_people(message: str, memory_text: str) -> list[str]:
    """What the message asks about the user's people, pets or things ("my cousin's
    name", "my blood type") that no memory shown mentions: the reply should say it does
    not know rather than invent (a 1.5B model gave the user's own name as their
    brother's). Only in sentences that are questions; compared by the first five letters,
    with the usual family words read as one ("mum" is "mother"), a plural as its
    singular, and the words of one meaning as one (:data:`_SYNONYMS`: "my role" is known
    when memory holds a ``job``)."""
    known = {_canonical(w.lower()) for w in re.findall(r"[^\W\d_]+", memory_text)}
    for group in _SYNONYMS:  # "role" is known when memory holds a job
        if known & group:
            known |= group
    out: list[str] = []
    for sentence in _SENTENCE_END.split(message):
        if not sentence.rstrip().endswith("?"):
            continue
        for m in _WH_MY.finditer(sentence):
            words = [w.lower() for w in (m.group("a"), m.group("b")) if w]
            person = next((w for w in words if w in RELATIONS), None)
            thing = person or next((w for w in words if w not in _MINE_STOP), None)
            if thing and _canonical(thing) not in known and thing not in out:
                out.append(thing)
    return out


_WH_OPEN = re.compile(r"^\W*(?:what|when|where|who|whom|whose|which|why|how)\b", re.I)
"""A question for a fact: it opens with a question word ("Can you suggest a gift for
Klara?" asks for something, not about her)."""
_NAME = re.compile(r"(?<![\w'’])([A-Z][a-z]{2,})(?=['’]s\b|\b)")
_ASKED_ABOUT = re.compile(
    r"(?<![\w'’])([A-Z][a-z]{2,})['’]s\b"  # "Melanie's necklace"
    r"|\b(?:did|does|do|is|was|has|had|will|would|can|could|should)\s+"
    r"(?:[a-z]+\s+)?([A-Z][a-z]{2,})\b(?!['’]s)")  # "did Caroline realize", "will John"
"""Whom a question asks about: a name with a possessive, or the subject after the
question's verb ("What could I get my son for Christmas?" asks about no Christmas)."""
_TOPIC_STOP = frozenset("""what when where whom whose which does have been with about after
before that this these those from they them their there your yours like know would could
should into over some much many also ever were will kind sort type time much more most
make made doing done being than then only just very really did the and for her his she him
you was are has had its our any can get got how why who not but all one two yet""".split())
_NOT_NAMES = frozenset("""What When Where Who Whom Whose Which Why How The And But You Your
Yours She They Their His Her Him Its Our This That These Those There Then Since User Today
Yesterday Tomorrow Also Please Thanks Yes Not Now Just Maybe Sure Okay Hello Christmas
Easter Halloween Thanksgiving Hanukkah Ramadan Diwali Eid New Year Monday
Tuesday Wednesday Thursday Friday Saturday Sunday January February March April May June
July August September October November December""".split())


_VOCATIVE = re.compile(
    r"(?:^|(?<=:\s)|(?<=[.!?]\s))(?:(?i:hey|hi|hello|thanks|thank\s+you|congrats|"
    r"congratulations|wow|yeah|yes|oh|ok|okay|sure|great|aw+|well|dear)[,!]?\s+)?"
    r"[A-Z][a-z]{2,}[,!]|,\s+[A-Z][a-z]{2,}(?=[!?.])")
"""A name the speaker addresses ("Hey Nate!", "Thanks, Melanie!", "…, Joanna."): whom the
words are said to, not whom they are about."""


def _stem(word: str) -> str:
    return word.lower()[:5]


def someone_else(message: str, items: Sequence[str]) -> list[tuple[str, str]]:
    """``(name, topic)`` for each question about a named person's something ("What did
    Caroline realize after her charity race?") where the memory items that say most about
    that something (``items``: the notes and facts the prompt shows) never name the person:
    what memory holds on it is about someone else, and a small model hands it to whoever
    was asked about (LoCoMo's adversarial questions, Maharana et al., ACL 2024, 0 of 20
    answered "not mentioned"). ``topic``: the question's own words for the something.

    Only sentences that open with a question word and end with "?", about one name: a
    capitalised word after the first (``_NOT_NAMES`` aside) with a possessive or after the
    question's verb (:data:`_ASKED_ABOUT`); words are compared by their
    first five letters; a name the item's speaker addresses ("Hey Nate! I had an
    audition…") does not count as a mention. Only when every item that says most names someone else (a note
    "Melanie: I ran a charity race…"): an item of the user's own ("your birthday: 3 May")
    may sit beside one that answers in other words ("Klara turns 9 on 14 March"). Nothing
    when no item shares a word with the question (the reply then says what it knows, or
    :func:`unknown_people` speaks)."""
    said = [_VOCATIVE.sub(" ", item) for item in items]
    words = [{_stem(w) for w in re.findall(r"[^\W\d_]+", item)} for item in said]
    named = [{n for n in _NAME.findall(item) if n not in _NOT_NAMES} for item in said]
    out: list[tuple[str, str]] = []
    for sentence in _SENTENCE_END.split(message):
        sentence = sentence.strip()
        if not (sentence.endswith("?") and _WH_OPEN.match(sentence)):
            continue
        first = re.match(r"\W*[^\W\d_]+", sentence)
        body = sentence[first.end():] if first else sentence
        names = [n for n in dict.fromkeys(_NAME.findall(body)) if n not in _NOT_NAMES]
        about = [n for pair in _ASKED_ABOUT.findall(body) for n in pair if n in names]
        if len(names) != 1 or not about:
            continue  # no one asked about, or several: whose is what cannot be told apart
        name = names[0]
        topic = [w for w in re.findall(r"[^\W\d_]+", body)
                 if len(w) >= 3 and w.lower() not in _TOPIC_STOP and w != name]
        asked = {_stem(w) for w in topic}
        if not asked:
            continue
        overlap = [len(asked & ws) for ws in words]
        best = max(overlap, default=0)
        if best == 0:
            continue
        top = [i for i, n in enumerate(overlap) if n == best]
        if all(_stem(name) not in words[i] and named[i] - {name} for i in top):
            pair = (name, " ".join(topic))
            if pair not in out:
                out.append(pair)
    return out
