"""Forgetting and updating by conversation: what the user asked to forget,
and which ``FORGET`` lines of the model to believe.

Two kinds of forgetting:

* **purge** — the user asks to forget or delete something ("Please forget that I like
  Radiohead", "delete my phone number from your memory", "забудь мой номер"):
  :func:`forget_intent` finds the request and :func:`request_targets` the words it
  names. Every fact (all its versions) and note containing *all* of a target's words is
  deleted: notes with their FTS rows, vectors and links. Nothing is removed that the user
  did not name: a target is only its distinctive words (not "like", "my", "memory",
  "fact"…), and an entry must hold every one of them.
* **retire** — no request to forget, but a known fact stopped being true ("I sold the
  Civic, now I ride a bicycle"): a model ``FORGET car`` retires the active ``car`` fact
  (its history is kept, like a supersede) only when the message says something changed
  (:data:`CHANGE`) and mentions the fact's current value.

:func:`target_words` turns any target (the user's phrase or a model's ``FORGET`` text)
into its distinctive words; a target naming a known profile key (``phone_number``) is
that key. The words each step reads are :mod:`.lexicon`'s (rules ``forget_verbs``,
``delete_verbs``, ``memory_words``, ``stop_remembering``, ``dont_forget``, ``change``,
``let_go``, ``let_go_loose``, ``forget_filler``, the first-person rules, ``third_person``
and ``relations``), in every language of the lexicon; :func:`without` cuts a note at the
English ``clause_joins`` and ``list_joins`` (and, but, or). Pure, no I/O; never raises
for any ``str``.
"""

from __future__ import annotations

import re

from .keys import GROUPS
from .stance import clauses
from .lexicon import compile_rules, entries, word_set
from .lexicon import pattern as lexicon_pattern


WORD_RE = re.compile(r"[^\W_]+(?:[-'’][^\W_]+)*")
"""A word, with inner hyphens and apostrophes (``falcon-2``, ``user's``)."""


def _forms(word: str) -> set[str]:
    if len(word) > 3 and word.endswith("s"):
        return {word, word[:-1]}
    return {word, word + "s"}


def matches(words: list[str], text: str) -> bool:
    """Whether ``text`` (a fact as ``"key value"``, ``_`` read as a space, or a note)
    holds every one of ``words`` as a whole word, case-insensitively, a plural ``s``
    either way. An empty ``words`` matches nothing."""
    if not words:
        return False
    have = {w.lower().replace("’", "'").removesuffix("'s")
            for w in WORD_RE.findall(text.replace("_", " "))}
    return all(_forms(w.lower()) & have for w in words)


def names_note(words: list[str], text: str) -> bool:
    """Whether a forget target's ``words`` name the note ``text``: it holds every one
    of them (:func:`matches`), or — for a target of three words or more — all but a
    quarter of them ("my address, the one at 12 Rue Victor Hugo" names "Lives at 12 Rue
    Victor Hugo, Lyon", which never says "address")."""
    if matches(words, text):
        return True
    if len(words) < 3:
        return False
    held = sum(1 for w in words if matches([w], text))
    return held >= max(2, -(-3 * len(words) // 4))


_KEY_GENERIC = frozenset("""user my current preferred favorite favourite main usual primary
default at in of to is""".split())
"""Parts of a key that name nothing of their own (``works_at`` is ``works``)."""


def names_fact(words: list[str], key: str, value: str) -> bool:
    """Whether a forget target's ``words`` (:func:`target_words`) name the fact
    ``key=value``: each word is a word of the value, of the key, or of a key of the same
    meaning (:data:`actors.policy.keys.GROUPS`: "where I work" names ``job`` and
    ``employer``, not ``city``; "where I live" names ``city``); named by the key, every
    part of one such key must be said, but for one of a target of two words or more
    ("door code" names ``office_door_code``, "name" alone not ``cafe_name``), a plural ``s`` either way. An empty ``words`` names
    nothing."""
    if not words:
        return False
    keys = next((g for g in GROUPS if key in g), (key,))
    have = {w.lower() for w in WORD_RE.findall(" ".join((*keys, value)).replace("_", " "))}
    if not all(_forms(w.lower()) & have for w in words):
        return False
    said = {f for w in words for f in _forms(w.lower())}
    if said & {w.lower() for w in WORD_RE.findall(value)}:
        return True  # the value is named ("Coldplay")
    # Named by the key: one key of the meaning is all said, but for one word of a longer
    # target ("door code" names office_door_code; "name" alone does not name cafe_name).
    for k in keys:
        parts = [p for p in k.split("_") if p and p not in _KEY_GENERIC]
        missing = [p for p in parts if not _forms(p) & said]
        if len(missing) < len(parts) and len(missing) <= (1 if len(words) >= 2 else 0):
            return True
    return False


__all__ = ["CHANGE", "dropped_values", "forget_intent", "let_go_objects", "matches",
           "names_fact", "names_note", "request_targets", "target_words", "without"]


_NEG_FORGET = compile_rules("dont_forget")
_FORGET_VERB = compile_rules("forget_verbs")
_DELETE_VERB = compile_rules("delete_verbs")
_MEMORY_WORD = compile_rules("memory_words")
_STOP_REMEMBERING = compile_rules("stop_remembering")

CHANGE = compile_rules("change")
"""Words that say a known fact changed (:mod:`.lexicon` rule ``change``); a model
``FORGET key`` retires only with one."""

_FILLER = frozenset(w for w in entries(
    "forget_filler", "forget_verbs", "delete_verbs", "memory_words", "first_person",
    "first_person_object", "first_person_possessive") if "*" not in w and " " not in w)
"""Words of a forget request that name nothing: the lexicon's fillers, its forget and
delete verbs and the user's first-person words."""


def _users_own(user_message: str) -> str:
    """The message without the clauses someone else says or does ("My brother says you
    should … forget my real name": his wish, not the user's request)."""
    text = user_message
    for c in clauses(user_message):
        if c.subject == "other" and c.text:
            text = text.replace(c.text, " ", 1)
    return text


def forget_intent(user_message: str) -> bool:
    """Whether the user asks to forget or delete something remembered: a forget verb
    (not "don't forget", "I forgot"), "stop remembering …", or a delete verb together
    with a memory word ("remove the test_runner fact", "delete … from your memory"), in
    a clause of the user's own (not in what someone else says)."""
    text = _NEG_FORGET.sub(" ", _users_own(user_message))
    if _FORGET_VERB.search(text) or _STOP_REMEMBERING.search(text):
        return True
    return bool(_DELETE_VERB.search(text) and _MEMORY_WORD.search(text))


def target_words(target: str) -> list[str]:
    """The distinctive words of a target, lower-cased, in order, de-duplicated:
    ``"that I like Radiohead"`` → ``["radiohead"]``; ``"my phone number"`` →
    ``["phone", "number"]``; ``"test_runner"`` → ``["test", "runner"]``."""
    out: list[str] = []
    for raw in WORD_RE.findall(target.replace("_", " ")):
        w = raw.lower().replace("’", "'").removesuffix("'s")
        if w and w not in _FILLER and w not in out and (len(w) >= 2 or w.isdigit()):
            out.append(w)
    return out


def request_targets(user_message: str) -> list[list[str]]:
    """The word lists the user's forget request names, one per clause that holds a
    forget or delete verb: the words after the verb, fillers removed. ``[]`` when the
    message asks nothing to be forgotten."""
    if not forget_intent(user_message):
        return []
    text = _NEG_FORGET.sub(" ", _users_own(user_message))
    out: list[list[str]] = []
    for sentence in re.split(r"[.!?;\n]+", text):
        m = (_FORGET_VERB.search(sentence) or _DELETE_VERB.search(sentence)
             or _STOP_REMEMBERING.search(sentence))
        if m is None:
            continue
        words = target_words(sentence[m.end():])
        if words and words not in out:
            out.append(words)
    return out


_AFTER = r"\s+((?:\S+\s+){0,3}\S+)"  # the four words after a let-go phrase
_LET_GO = re.compile(lexicon_pattern("let_go", "let_go_loose") + _AFTER, re.I)
_LET_GO_CLEAR = re.compile(lexicon_pattern("let_go") + _AFTER, re.I)
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")
_CLAUSE_END = re.compile(r"[,;:()\u2014\u2013]|\s-\s")
_SOMEONE_ELSE = compile_rules("third_person", "relations")


def dropped_values(user_message: str, known: dict[str, str]) -> list[str]:
    """Keys of ``known`` (the active profile) whose value the user says they let go of:
    a value word within four words after "sold", "quit", "switched from", "no longer",
    "moved out of"… ("I sold the Civic" → the ``car`` fact whose value holds "Civic").
    Only distinctive words count (:func:`target_words`)."""
    spans = [m.group(1) for m in _LET_GO.finditer(user_message)]
    if not spans:
        return []
    said = {w[:5] for span in spans for w in target_words(span)}
    return [key for key, value in known.items()
            if any(w[:5] in said for w in target_words(value) if len(w) >= 3)]


def let_go_objects(user_message: str) -> list[tuple[str, str]]:
    """What the user says is no longer theirs, known to memory or not: ``(sentence,
    word)`` for each clear let-go phrase (lexicon rule ``let_go``: sold, quit, gave up,
    no longer, moved out of …, not the loose ``let_go_loose`` words such as "left" or
    "stopped", which also mean other things) followed, in its clause, by a distinctive
    word — the first one, the head of what was let go — unless someone else is the
    clause's subject (a third-person word or a relation before the phrase: "my brother
    sold his bike"). ``"I sold my car, I cycle everywhere now."`` → ``[("I sold my car,
    I cycle everywhere now.", "car")]``; ``[]`` when nothing is let go. The sentence is
    stripped of surrounding white space."""
    out: list[tuple[str, str]] = []
    for sentence in _SENTENCE.findall(user_message):
        for m in _LET_GO_CLEAR.finditer(sentence):
            subject = _CLAUSE_END.split(sentence[:m.start()])[-1]
            if _SOMEONE_ELSE.search(subject):
                continue  # "My brother sold his bike": not the user's
            clause = _CLAUSE_END.split(m.group(1), maxsplit=1)[0]
            words = target_words(clause)
            if words and (sentence.strip(), words[0]) not in out:
                out.append((sentence.strip(), words[0]))
    return out



_QUOTE_HEAD = re.compile(r"^(the user said:\s*)", re.I)
_JOIN = lexicon_pattern("clause_joins")
_PIECES = re.compile(rf"(\s*[,;]\s*(?:{_JOIN}\s+)?|\s+{_JOIN}\s+)", re.I)
_CONTENT = re.compile(r"[^\W\d_]{3,}|\d+")
_LIST = lexicon_pattern("list_joins")
_LIST_AFTER = rf"(?:\s*,\s*(?:{_LIST}\s+)?|\s+{_LIST}\s+)"


_SUBJECTS = word_set("first_person", "first_person_possessive", "first_person_verbs",
                     "third_person")


def _drop_list_member(text: str, word: str) -> str:
    """``text`` with ``word`` taken out of a list it is a member of ("likes Lego and
    horses" → "likes horses"), or unchanged. A connector followed by a subject ("Graz
    and I work …", "olives, and my partner …") joins clauses, not list members."""
    w = re.escape(word) + r"\w*"
    for rx, repl in ((rf"(?<![\w'’]){w}{_LIST_AFTER}(?=(\w[\w'’]*))", " "),
                     (rf"(?<=(\w))(?P<c>{_LIST_AFTER}){w}(?![\w'’])", "")):
        for m in re.finditer(rx, text, flags=re.I):
            after = m.group(1) if repl else ""
            if after and after.lower().replace("’", "'") in _SUBJECTS:
                continue
            if not repl and text[m.end():].lstrip()[:1] not in ("", ".", "!", "?", ",", ";"):
                continue  # "… and olives are …": not the list's last member
            return re.sub(r"\s{2,}", " ", text[:m.start()] + repl + text[m.end():]).replace(" .", ".")
    return text


def without(content: str, words: list[str], lists: bool = True) -> str | None:
    """A note's ``content`` with what a forget target's ``words`` name taken out, its
    other facts kept in the same words, or None when nothing of its own is left (the
    note goes). First a list member ("The user's daughter Klara likes Lego and horses."
    less Lego → "… likes horses."), else the clauses holding a target word ("The user
    said: I live in Graz and I work at a brewery." less "work" → "The user said: I live
    in Graz."); a note that is not the user's quoted sentence keeps its first clause (its
    subject) or goes. ``lists=False`` skips the list member (the words of one value,
    "designs bridges", are one clause, never two members). Pure; never raises."""
    if not words or not names_note(words, content):
        return content
    listed = content
    for word in words if lists else []:
        listed = _drop_list_member(listed, word)
    left = sum(1 for w in words if matches([w], listed))
    if listed != content and left <= 1 and not names_note(words, listed):
        return listed  # one list member went; at most its subject ("Klara") is left
    head_m = _QUOTE_HEAD.match(content)
    head = head_m.group(1) if head_m else ""
    body = content[len(head):]
    parts = _PIECES.split(body)
    clauses_ = parts[0::2]
    joins = parts[1::2]
    keep = [i for i, c in enumerate(clauses_)
            if not any(matches([w], c) for w in words)]
    if not keep or (not head and keep[0] != 0):
        return None
    out = clauses_[keep[0]]
    for i in keep[1:]:
        out += (joins[i - 1] if i - 1 < len(joins) else ", ") + clauses_[i]
    out = out.strip(" ,;")
    if not _CONTENT.search(out) or names_note(words, out):
        return None
    if not out.endswith((".", "!", "?")):
        out += "."
    return head + out[:1].upper() + out[1:] if head else out
