"""What reflection may write: the trivial-window skip and the grounding filter.

Pure functions, no I/O; the reflection actor logs what they decide (counts and reasons,
never the values: names are personal data).

Only durable facts the user stated are kept. Models — small ones especially — invent names, describe themselves as the
user, copy the prompt's examples and store one-off instructions as preferences; the
prompt asks them not to, and this module makes sure.

:func:`is_trivial_window` — the user's message is nothing but probe fragments (greetings,
pings, thanks, "reply exactly PONG", "don't use tools", "no explanation"), so the LLM is
not called at all. Clauses are split on ``. ! ? ;``, newlines and ", "; leading fillers
(please, just, now, kindly: :mod:`.lexicon` rule ``fillers``) are dropped, and "ok"/"okay"
(``confirmations``) too when a command follows. A probe fragment is a greeting, ping or
thanks (``probe``), an echo command (``echo_verbs``, ``echo_particles``,
``echo_adverbs``, a payload of one to three words, ``echo_tail``), a tool restriction
(``tool_restriction``) or a format-only clause (``format_only``). Any
persistence marker (remember, always, never, from now on, next time, …: :mod:`.lexicon`
rule ``persist``) or personal marker (I, my, me, we, our, je, ich, я, …: the lexicon's
first-person rules) makes the window non-trivial, and so does a
bare confirmation ("yes", "ok", "ok thanks": it may answer "shall I remember that?").
An empty message is trivial. Style rules are not echoes: "reply only in YAML", "answer
only briefly" (a payload word of ``style_words``).

:func:`filter_ungrounded` drops a fact (judged on its key with ``_`` as spaces plus its
value) or a note body, with one reason each, in this order:

* ``example_copy`` — a placeholder in angle brackets (``<name>``), the literal
  ``key``/``value``/``body`` of the format description, or a value of the prompt's
  examples (``Nairobi``) that the user did not write;
* ``assistant_persona`` — "you are a/my/the … assistant|ai|agent|bot" (rules
  ``persona_addressed``, ``persona_addressed_as``), "I am a/an/the/your …
  ai|assistant|language model|llm|chatbot" ending the clause (``persona_self``,
  ``persona_self_as``), "as an AI", "memory extractor" (``persona_phrases``), a key about
  the assistant (``assistant_*``, ``ai_*``, ``bot_*``: ``assistant_words``) or a note whose
  subject is the assistant (``assistant_subject``, ``assistant_words``; not an
  ``assistant_titles`` one: "assistant professor") — unless the user wrote that phrase
  ("I am an assistant professor" survives: the clause goes on);
* ``ungrounded_identity`` — a name-like key (``name``, ``preferred_name``, ``nickname``,
  …) or a naming phrase ("my name is X", "call me X", "the user's name is X", "меня зовут
  X": rules ``self_naming``, ``user_naming``, ``naming_phrase``) whose name words (not
  ``name_particles``: the, de, van, mr …) are not found among the user's words; for the
  user's own name (the key, or a phrase naming the user) only where the user names
  themself with it ("my name is", "I'm", "call me", "this is", "je m'appelle", "меня
  зовут", "… here,": the lexicon's rules ``self_naming``, ``self_intro`` and
  ``self_intro_after``; "my sister Anna", "tell Anna", "we met Anna" never make the user
  Anna). Matching is fuzzy
  (Cyrillic transliterated, x→ks, j→y, w→v, ph→f, ia→ya, doubled letters collapsed; edit
  distance 1 up to 5 letters, 2 beyond, same first letter, both ≥ 3 letters); a word the
  user wrote lower-case or only at the start of a sentence vouches for a name of at most
  5 letters only after a naming lead ("my name is", "call me", "I'm", …);
* ``one_off_payload`` — a distinctive token (≥ 3 chars with ``_`` or a digit, or ≥ 4
  capital letters) that the user used only inside a one-off echo command;
* ``one_off_tool_restriction`` — the user restricted tools (``tool_restriction``)
  without a persistence marker, and the item mentions tools (``tool_words``) and
  avoidance (``avoidance``);
* ``ungrounded_content`` — none of a fact's content words (its value; its key only when
  the value has none), or less than half of a note's, occurs in the user's message
  (the rule ``grounding_stopwords`` left out, compared by their first 5 letters, or for
  words of six letters or more by their first six within one edit: "electrician" for
  "Elektriker"): the model did not get it from the user. This check fails open when the
  message is mostly in a script written without spaces (CJK, Thai …), where words cannot
  be split;
* ``invented_detail`` — the item is grounded but holds a number, or a capitalised word
  past the start of a sentence, that the user did not write: "my passport expires in
  June" stored as "June 30, 2024" (numbers spelled out count: "nine" is 9,
  :data:`.lexicon.NUMBER_WORDS`; leading zeros do not: "10:00" for "10 am"); a detail
  the assistant's reply of the same exchange named is the user's choice, not an
  invention, once the item is grounded in the user's words ("great, book Luigi" →
  "Booked Trattoria Luigi");
* ``assistant_only`` — an ``ungrounded_content`` item whose words the assistant's reply
  holds: the model took it from what the assistant said.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

import msgspec

from .candidates import ParsedFact, ParsedNote
from .lexicon import LANGUAGES, NUMBER_WORDS, compile_rules, entries, meanings
from .lexicon import pattern as lexicon_pattern

__all__ = ["Dropped", "Grounded", "filter_ungrounded", "is_trivial_window", "name_matches"]

_WORD_RE = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")
_CLAUSE_SPLIT_RE = re.compile(r"[.!?;\n]+|,\s+")
_FILLERS = frozenset(entries("fillers"))
_CONFIRM = frozenset(entries("confirmations"))
_GREETINGS = frozenset(entries("probe"))
PERSIST = compile_rules("persist")
"""A request to keep something, or a rule for later (:mod:`.lexicon` rule ``persist``):
makes a message worth reflecting on."""
_PERSONAL = compile_rules("first_person", "first_person_object", "first_person_possessive",
                          "first_person_verbs")


def _echo_re(lang: str) -> re.Pattern[str]:
    """A one-off echo command in ``lang``: an ``echo_verbs`` word, then optionally
    ``echo_particles`` and ``echo_adverbs`` words (each read as a word's start: "replying
    X" is "reply" + "ing X"), a payload of one to three words and an ``echo_tail``."""
    def slot(rule: str, bound: bool) -> str:
        if not entries(rule, languages=(lang,)):
            return ""
        return rf"(?:\s+{lexicon_pattern(rule, languages=(lang,), bound=bound)})?"
    return re.compile(
        rf"^{lexicon_pattern('echo_verbs', languages=(lang,), bound=False)}"
        rf"{slot('echo_particles', False)}{slot('echo_adverbs', False)}\s*:?\s*"
        r"(?P<payload>\S+(?:\s+\S+){0,2}?)"
        rf"{slot('echo_tail', True)}$", re.I)


_ECHO_RES = tuple(_echo_re(lang) for lang in LANGUAGES
                  if entries("echo_verbs", languages=(lang,)))
_STYLE_WORDS = frozenset(entries("style_words"))
_TOOL_RESTRICTION = compile_rules("tool_restriction")
_FORMAT_ONLY = re.compile(rf"^{lexicon_pattern('format_only')}$", re.I)
_TOOLS_WORD = compile_rules("tool_words")
_AVOID_WORD = compile_rules("avoidance")

_PLACEHOLDER_RE = re.compile(r"<[^<>\s]{1,40}>")
_PERSONA_RES = (
    re.compile(rf"{lexicon_pattern('persona_addressed')}[^.;!?\n]{{0,40}}?"
               rf"{lexicon_pattern('persona_addressed_as')}", re.I),
    re.compile(rf"{lexicon_pattern('persona_self')}[^.;!?\n]{{0,40}}?"
               rf"{lexicon_pattern('persona_self_as')}\s*(?:[.;!?,]|$)", re.I),
    compile_rules("persona_phrases"),
)
_ASSISTANT_SUBJECT_RE = re.compile(
    rf"^{lexicon_pattern('assistant_subject', 'assistant_words')}"
    rf"(?!\s+{lexicon_pattern('assistant_titles')})", re.I)
_PERSONA_KEY_RE = re.compile(  # a key is an identifier: "assistant_name", not "assistants"
    rf"^(?:{'|'.join(re.escape(w) for w in entries('assistant_words'))})(?:_|$)")
_NAME_KEY_RE = re.compile(
    r"^(?:user_|my_|preferred_|first_|last_|full_|given_|family_|middle_|nick_|display_|"
    r"real_)?(?:name|nickname|surname|username|alias|nick)$")
_NAMING_PHRASE_RE = re.compile(  # a phrase naming someone in a stored item
    rf"{lexicon_pattern('self_naming', 'user_naming', 'naming_phrase')}(?:\s*:)?\s+"
    r"(?P<name>[^\W\d_][\w'’-]*(?:\s+[A-ZА-ЯЁ][\w'’-]*)?)", re.I)
_NAMING_LEADS = re.compile(  # the user's words right before their own name
    rf"{lexicon_pattern('self_naming', 'self_intro')}\s+$", re.I)
_SELF_INTRO_RE = re.compile(  # "Anna here, …"
    rf"[^\W\d_][\w'’-]*\s+{lexicon_pattern('self_intro_after')}", re.I)
_SELF_NAMING_RE = re.compile(  # a naming phrase whose subject is the user, ending here
    rf"{lexicon_pattern('self_naming', 'user_naming')}(?:\s*:)?\s*$", re.I)
_NAME_STOP = frozenset(entries("name_particles"))
_STOPWORDS = frozenset(entries("grounding_stopwords"))
_TRANSLIT = str.maketrans({
    "а": "a", "б": "b", "в": "v", "г": "g", "д": "d", "е": "e", "ё": "e", "ж": "zh",
    "з": "z", "и": "i", "й": "y", "к": "k", "л": "l", "м": "m", "н": "n", "о": "o",
    "п": "p", "р": "r", "с": "s", "т": "t", "у": "u", "ф": "f", "х": "kh", "ц": "ts",
    "ч": "ch", "ш": "sh", "щ": "sch", "ъ": "", "ы": "y", "ь": "", "э": "e", "ю": "yu",
    "я": "ya",
})


class Dropped(msgspec.Struct, frozen=True):
    """One item the filter removed: ``item`` is ``"fact"`` or ``"note"``, ``reason`` one
    of the module docstring's reasons, ``key`` the fact key (None for notes)."""

    item: str
    reason: str
    key: str | None = None


class Grounded(msgspec.Struct, frozen=True):
    """What survives :func:`filter_ungrounded`, in input order, and what did not."""

    facts: list[ParsedFact]
    notes: list[ParsedNote]
    dropped: list[Dropped]


def _clauses(text: str) -> list[str]:
    return [c.strip().strip("\"'`«»“”") for c in _CLAUSE_SPLIT_RE.split(text) if c.strip()]


def _is_echo(clause: str) -> re.Match[str] | None:
    m = next(filter(None, (rx.match(clause) for rx in _ECHO_RES)), None)
    if m is None:
        return None
    words = [w.lower() for w in m.group("payload").split()]
    if any(w.strip("\"'`:") in _STYLE_WORDS for w in words):
        return None
    return m


def _is_command(clause: str) -> bool:
    return bool(_is_echo(clause) or _FORMAT_ONLY.match(clause)
                or _TOOL_RESTRICTION.fullmatch(clause.strip())
                or _TOOL_RESTRICTION.match(clause) and len(clause.split()) <= 7)


def is_trivial_window(user_message: str) -> bool:
    """True when ``user_message`` holds nothing worth a reflection call (module
    docstring). Never raises for any ``str``."""
    text = user_message.strip()
    if not text:
        return True
    if PERSIST.search(text) or _PERSONAL.search(text):
        return False
    clauses = _clauses(text)
    for i, clause in enumerate(clauses):
        words = clause.split()
        while words and words[0].lower().strip(",") in _FILLERS:
            words = words[1:]
        if words and words[0].lower().strip(",") in _CONFIRM:
            rest = " ".join(words[1:])
            if rest and _is_command(rest):
                words = words[1:]
            elif rest or i == len(clauses) - 1:
                return False  # a bare confirmation may answer "shall I remember X?"
            elif _is_command(clauses[i + 1]):
                continue  # "ok, reply exactly PONG": a filler before a command
            else:
                return False
        rest = " ".join(words)
        if not rest:
            continue
        if rest.lower().strip(" !") in _GREETINGS or _is_command(rest):
            continue
        return False
    return True


def _fold(word: str) -> str:
    """Fuzzy form of a name word: lower-case, Cyrillic transliterated, accents removed,
    x→ks, j→y, w→v, ph→f, ia→ya, doubled letters collapsed."""
    w = unicodedata.normalize("NFKD", word.lower().translate(_TRANSLIT))
    w = "".join(ch for ch in w if ch.isalnum())
    w = w.replace("ph", "f").replace("x", "ks").replace("j", "y").replace("w", "v")
    w = w.replace("ia", "ya")
    return re.sub(r"(.)\1+", r"\1", w)


def _edit_distance(a: str, b: str, limit: int) -> int:
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


_RU_ENDINGS = ("ey", "oy", "yu", "ya", "om", "em", "oi", "ei", "a", "e", "i", "u", "y", "o")


def _ru_stem(folded: str) -> str:
    """``folded`` without one Russian case ending (transliterated), keeping ≥ 3 letters:
    "Надей" and "Nadya" both give "nad"."""
    for end in _RU_ENDINGS:
        if folded.endswith(end) and len(folded) - len(end) >= 3:
            return folded[: -len(end)]
    return folded


def name_matches(name: str, word: str) -> bool:
    """Whether ``word`` (written by the user) is ``name`` up to spelling: equal after
    :func:`_fold`, or within edit distance 1 (≤ 5 letters) / 2 (longer) with the same
    first letter and both at least 3 letters long; a Cyrillic ``word`` also matches by
    its stem without a case ending ("Зови меня Надей" grounds Nadya)."""
    a, b = _fold(name), _fold(word)
    if not a or not b:
        return False
    if a == b:
        return True
    if re.search("[А-Яа-яЁё]", word) and len(b) >= 4 and _ru_stem(a) == _ru_stem(b):
        return True
    if len(name) < 3 or len(word) < 3 or a[0] != b[0]:
        return False
    limit = 1 if max(len(a), len(b)) <= 5 else 2
    return _edit_distance(a, b, limit) <= limit


class _Window:
    """The user's words, with what each one may vouch for."""

    def __init__(self, user_message: str) -> None:
        self.text = user_message
        self.lower = user_message.lower()
        self.strong: list[str] = []  # capitalised mid-sentence, or after a naming lead
        self.weak: list[str] = []  # any other word
        self.own: list[str] = []  # a name the user gives themself
        previous_own = False
        for m in _WORD_RE.finditer(user_message):
            word = m.group()
            before = user_message[:m.start()]
            sentence_start = not before.strip() or before.rstrip()[-1] in ".!?\n"
            lead = bool(_NAMING_LEADS.search(before[-40:]))
            # "my name is Anna Schmidt": the capitalised word right after a self-named
            # one is the same name; "Anna here, …" names the writer too.
            if lead or (previous_own and word[0].isupper() and before.endswith(" ")) or (
                    _SELF_INTRO_RE.match(user_message[m.start():]) and not before.strip()):
                self.own.append(word)
                previous_own = True
            else:
                previous_own = False
            if lead or (word[0].isupper() and not sentence_start):
                self.strong.append(word)
            else:
                self.weak.append(word)
        letters = [ch for ch in user_message if ch.isalpha()]
        spaced = sum(1 for ch in letters if ord(ch) < 0x2E80)
        self.unsplittable = bool(letters) and spaced < len(letters) / 2
        self.stems = {w.lower()[:5] for w in self.strong + self.weak}
        self.long_words = {w.lower() for w in self.strong + self.weak if len(w) >= 6}

    def vouches(self, name: str) -> bool:
        if any(name_matches(name, w) for w in self.strong):
            return True
        return len(_fold(name)) > 5 and any(name_matches(name, w) for w in self.weak)

    def self_named(self, name: str) -> bool:
        """Whether the user gave themself ``name`` ("my name is …", "I'm …", "call me
        …", "… here,"): a name merely written ("my sister Anna", "tell Anna …") is
        someone else's."""
        return any(name_matches(name, w) for w in self.own)


def _name_words(text: str) -> list[str]:
    return [w for w in _WORD_RE.findall(text) if w.lower() not in _NAME_STOP]


def _identity(key: str | None, value: str, window: _Window) -> bool | None:
    """None when the item names nobody, else whether every name word is vouched for:
    the user's own name (a name-like key, or a phrase naming the user: "the user's
    name is X", "call me X") only by the user naming themself with it ("my sister
    Anna" never makes the user Anna), anyone else's by the user
    having written it."""
    names: list[str] = []
    own: list[str] = []
    if key is not None and _NAME_KEY_RE.match(key):
        own += _name_words(value)
    for m in _NAMING_PHRASE_RE.finditer(value):
        # "is called falcon-2" names a server, not a person: only capitalised (or
        # caseless-script) words count as a name after a naming phrase.
        found = [w for w in _name_words(m.group("name"))
                 if not w.isdigit() and (w[0].isupper() or w[0].lower() == w[0].upper())]
        (own if _SELF_NAMING_RE.search(value[:m.start("name")]) else names).extend(found)
    if not names and not own:
        return None
    if window.unsplittable and not re.search("[А-Яа-яЁё]", value):
        return True
    return all(window.vouches(n) for n in names) and all(window.self_named(n) for n in own)


def _persona(key: str | None, text: str, window: _Window) -> bool:
    if key is not None and _PERSONA_KEY_RE.match(key):
        return True
    if key is None and _ASSISTANT_SUBJECT_RE.match(text.strip()):
        return True
    for rx in _PERSONA_RES:
        m = rx.search(text)
        if m and m.group().lower().strip(" .;!?,") not in window.lower:
            return True
    return False


def _one_off_tokens(user_message: str) -> set[str]:
    """Distinctive tokens the user wrote inside echo commands and nowhere else."""
    inside: set[str] = set()
    outside = user_message
    for clause in _clauses(user_message):
        m = _is_echo(clause)
        if m is None:
            continue
        for tok in re.findall(r"[\w-]+", m.group("payload")):
            if (len(tok) >= 3 and ("_" in tok or any(c.isdigit() for c in tok))) or \
                    (len(tok) >= 4 and tok.isalpha() and tok.isupper()):
                inside.add(tok)
        outside = outside.replace(clause, " ")
    return {t for t in inside if t not in outside}


def _content_words(text: str) -> list[str]:
    return [w for w in (w.lower() for w in _WORD_RE.findall(text))
            if w not in _STOPWORDS and len(w) >= 3]


def _cognate(word: str, window: _Window) -> bool:
    """A long word the user wrote in another spelling or language ("electrician" for
    "Elektriker"): the first six letters within one edit, same first letter."""
    if len(word) < 6:
        return False
    head = word[:6]
    return any(len(u) >= 6 and u[0] == head[0] and _edit_distance(u[:6], head, 1) <= 1
               for u in window.long_words)


def _grounded_words(words: list[str], window: _Window) -> bool:
    return any(w[:5] in window.stems or _cognate(w, window) for w in words)


NOTE_GROUNDED_SHARE = 0.5
"""Share of a note's content words the user's message must hold (a small
model's note that pastes the prompt's examples after the user's words — "The user works
in Turin. The user's sister Zoe is a pilot in Oslo" — shares one word, not half)."""


FACT_SHARE_FROM = 4
"""A fact value of this many content words or more needs :data:`NOTE_GROUNDED_SHARE` of
them in the user's words, like a note ("features=real-time tracking, user-friendly
interface, data analysis" from "an app for tracking bird sightings" holds one); a shorter
one needs one ("diet=strictly halal")."""


_SHORT_TOKEN_RE = re.compile(r"\b[A-Z][A-Za-z0-9+#]{0,2}\b")


def _verbatim_only(text: str) -> bool:
    """The value is made of short capitalised tokens only ("Go", "R", "C#", "UI")."""
    return bool(_SHORT_TOKEN_RE.search(text))


def _verbatim_grounded(text: str, window: _Window) -> bool:
    """A short capitalised token of the value appears, as written, in the message."""
    return any(re.search(rf"(?<![\w]){re.escape(t)}(?![\w])", window.text)
               for t in _SHORT_TOKEN_RE.findall(text))


_NUMBER_RE = re.compile(r"\d(?:[\d,.’' ]*\d)?")
_THOUSANDS = re.compile(r"(?<=\d)[,.’' ](?=\d{3}(?!\d))")


def _plain_number(text: str) -> str:
    """A number without its thousands separators: "1,200", "1 200" and "1200" are one."""
    return _THOUSANDS.sub("", text)


def _content_ok(key: str | None, text: str, window: _Window) -> bool:
    """A fact's value (or, when the value has no content word, its key) must share a
    content word with the user's message — a value that is only a number must be one
    the user wrote ("age=29" of "I'm 29"); a note at least :data:`NOTE_GROUNDED_SHARE`
    of its content words."""
    if window.unsplittable:
        return True
    words = _content_words(text)
    if not words and _verbatim_only(text):  # "Go", "C#": too short to be content words
        return _verbatim_grounded(text, window)
    number = text.strip().rstrip(".")
    if re.fullmatch(r"\d[\d,.]*", number):  # "age=29" of "I'm 29"; "1200" of "1,200"
        return _plain_number(number) in {_plain_number(n) for n in _NUMBER_RE.findall(
            window.lower)}
    if not words and key is not None:
        words = _content_words(key.replace("_", " "))
    if not words:
        return True
    if key is None and len(words) >= 2:
        held = sum(1 for w in words if w[:5] in window.stems)
        return held >= NOTE_GROUNDED_SHARE * len(words)
    if len(words) >= FACT_SHARE_FROM:  # a long value: most of it must be the user's
        held = sum(1 for w in words if w[:5] in window.stems or _cognate(w, window))
        return held >= NOTE_GROUNDED_SHARE * len(words)
    return _grounded_words(words, window)


_NUMBER_WORDS = meanings(NUMBER_WORDS)
_DIGITS_RE = re.compile(r"\d+")


def _numbers(text: str) -> set[str]:
    """The numbers of ``text`` without leading zeros ("07" is 7; "00" of "10:00" is
    none), plus those spelled out in English ("nine" is 9)."""
    found = {d.lstrip("0") for d in _DIGITS_RE.findall(text)} - {""}
    found |= {_NUMBER_WORDS[w] for w in re.findall(r"[a-z]+", text.lower()) if w in _NUMBER_WORDS}
    return found


def _new_numbers(text: str, window: _Window) -> bool:
    """The item holds a number (digits, leading zeros aside) the window's text does not."""
    digits = {d.lstrip("0") for d in _DIGITS_RE.findall(text)} - {""}
    return bool(digits - _numbers(window.text))


def _invented(text: str, window: _Window) -> bool:
    """The item holds a number, or a capitalised word past a sentence's start, that the
    user did not write ("expires in June" stored as "June 30, 2024"; "the user is a
    Data Scientist" from "I do my data work in R"). Names are compared as
    :func:`name_matches` does (spelling, transliteration), so "Kazan" is the user's
    "Казани". Fails open when the message cannot be split into words."""
    if window.unsplittable:
        return False
    if _new_numbers(text, window):
        return True
    words = [u for u in _WORD_RE.findall(window.text)]
    for m in _WORD_RE.finditer(text):
        w = m.group()
        before = text[:m.start()].rstrip()
        if not w[:1].isupper() or not before or before[-1] in ".!?:;\"(" or w.isupper():
            continue  # sentence-initial, or an acronym ("R", "AWS": checked as content)
        if w.lower() in _STOPWORDS or w.lower() in _NAME_STOP:
            continue
        if w.lower()[:5] in window.stems or _cognate(w.lower(), window):
            continue  # "Brazilian" for "Brazil", "Elektriker" for "electrician"
        if not any(name_matches(w, u) for u in words):
            return True
    return False


def _reason(key: str | None, text: str, window: _Window, one_off: set[str],
            tool_restricted: bool, examples: frozenset[str]) -> str | None:
    if _PLACEHOLDER_RE.search(text) or key == "key" or text.strip().lower() in (
            "value", "body", "key=value"):
        return "example_copy"
    if text.strip().lower() in examples and text.strip().lower() not in window.lower:
        return "example_copy"
    if _persona(key, text, window):
        return "assistant_persona"
    named = _identity(key, text, window)
    if named is False:
        return "ungrounded_identity"
    if one_off and any(t in text for t in one_off):
        return "one_off_payload"
    full = (key or "").replace("_", " ") + " " + text
    if tool_restricted and _TOOLS_WORD.search(full) and _AVOID_WORD.search(full):
        return "one_off_tool_restriction"
    if named is None and not _content_ok(key, text, window):
        return "ungrounded_content"
    if _invented(text, window):
        return "invented_detail"
    return None


def filter_ungrounded(facts: Sequence[ParsedFact], notes: Sequence[ParsedNote],
                      user_message: str, assistant_reply: str = "",
                      examples: frozenset[str] = frozenset()) -> Grounded:
    """Keep the facts and notes grounded in ``user_message`` (module docstring).

    ``examples``: lower-cased values of the writer's prompt examples (the reflection
    prompt's ``SET`` lines); a copied one is believed only when the user wrote it, and is
    dropped as ``example_copy`` (naming the cause) otherwise.

    Only the user's own words ground anything: the assistant's reply never vouches for
    a fact about the user. An item dropped as ``ungrounded_content`` whose words the
    ``assistant_reply`` holds is dropped as ``assistant_only`` instead ("Trattoria Luigi" suggested by the assistant is not the user's favourite).
    Pure; never raises for any ``str``.
    """
    window = _Window(user_message)
    reply = _Window(assistant_reply) if assistant_reply.strip() else None
    one_off = _one_off_tokens(user_message)
    tool_restricted = bool(_TOOL_RESTRICTION.search(user_message)) and not PERSIST.search(
        user_message)

    both = _Window(f"{user_message}\n{assistant_reply}") if reply is not None else None

    def why(key: str | None, text: str) -> str | None:
        reason = _reason(key, text, window, one_off, tool_restricted, examples)
        if reason == "invented_detail" and both is not None and not _invented(text, both) \
                and not _new_numbers(text, window):
            # the user picked what the assistant named ("book Luigi" → Trattoria Luigi);
            # a number only the reply holds ("turns six in June" → "June 5th") is not theirs
            return None
        if reason == "ungrounded_content" and reply is not None and not reply.unsplittable \
                and _content_ok(key, text, reply):
            return "assistant_only"
        return reason

    kept_facts: list[ParsedFact] = []
    kept_notes: list[ParsedNote] = []
    dropped: list[Dropped] = []
    for fact in facts:
        reason = why(fact.key, fact.value)
        if reason:
            dropped.append(Dropped(item="fact", reason=reason, key=fact.key))
        else:
            kept_facts.append(fact)
    for note in notes:
        reason = why(None, note.body)
        if reason:
            dropped.append(Dropped(item="note", reason=reason))
        else:
            kept_notes.append(note)
    return Grounded(facts=kept_facts, notes=kept_notes, dropped=dropped)
