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
that key. Pure, no I/O; never raises for any ``str``.
"""

from __future__ import annotations

import re


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


__all__ = ["CHANGE", "dropped_values", "forget_intent", "matches", "request_targets",
           "target_words"]


_NEG_FORGET = re.compile(r"\b(?:don't|do not|never|not|won't|didn't|dont)\s+forget\b|"
                         r"\bforgot\b|\bforgetting\b|\bforgettable\b", re.I)
_FORGET_VERB = re.compile(
    r"\b(?:forget|unlearn|vergiss|vergessen|oublie|oubliez|olvida|olvídate|olvidate|"
    r"dimentica|esquece|esqueça|забудь|забудьте)\b", re.I)
_DELETE_VERB = re.compile(
    r"\b(?:delete|remove|erase|wipe|purge|scrub|clear|drop|lösche|löschen|entferne|"
    r"efface|supprime|borra|elimina|cancella|apaga|удали|удалите|сотри)\b", re.I)
_MEMORY_WORD = re.compile(
    r"\b(?:memory|memories|memorized|remember\w*|profile|fact|facts|note|notes|record|"
    r"records|gedächtnis|erinnerung|mémoire|memoria|memória|памяти|память)\b", re.I)
_STOP_REMEMBERING = re.compile(
    r"\b(?:stop|no longer|don't|do not)\s+(?:remembering|remember|keeping|storing|knowing)\b",
    re.I)

CHANGE = re.compile(
    r"\b(?:actually|now|no longer|not anymore|anymore|any more|moved|move|sold|switched|"
    r"changed|quit|left|stopped|gave up|used to|former|ex|instead|new|no more|divorced|"
    r"retired|replaced|umgezogen|jetzt|nicht mehr|maintenant|ahora|ya no|adesso|agora|"
    r"теперь|больше не|переехал|переехала)\b", re.I)
"""Words that say a known fact changed; a model ``FORGET key`` retires only with one."""

_FILLER = frozenset("""please pls kindly just also now then that this those these the a an
about everything anything all what which i i'm i’m i've me my mine myself you your yours
we our us it its is are was were be been am do does did have has had can could would
should will shall from of in on at to for with and or but that's said told say tell
mentioned mention wrote write know knowing known like likes liked love loves loved prefer
prefers preferred enjoy enjoys use uses used fan big really very much thing things stuff
part bit info information data detail details entry entries memory memories profile fact
facts note notes record records tool tools please forget delete remove erase wipe purge
scrub clear drop unlearn remembering remember keeping storing stored store saved save
again anymore any more there here fully completely entirely permanently right away
bitte das die der den dem mein meine meinen meinem mir mich ich du dein deine vergiss
lösche aus deinem gedächtnis s'il te plaît vous mon ma mes de la le les oublie efface
supprime por favor mi mis tu de la el olvida borra per favore il lo mio mia dimentica
cancella meu minha esquece apaga пожалуйста мой моя моё мое мои мне меня что это про
о об забудь удали из памяти сотри dass mag magst where when how who why whom whose
que qui quoi ce donde dónde dove onde где как кто into onto around without by up out off
under through after before since until fond keen obsessed crazy interested huge crazy
listening listen listened watching watch playing play eating eat drinking drink""".split())


def forget_intent(user_message: str) -> bool:
    """Whether the user asks to forget or delete something remembered: a forget verb
    (not "don't forget", "I forgot"), "stop remembering …", or a delete verb together
    with a memory word ("remove the test_runner fact", "delete … from your memory")."""
    text = _NEG_FORGET.sub(" ", user_message)
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
    text = _NEG_FORGET.sub(" ", user_message)
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


_LET_GO = re.compile(
    r"\b(?:sold|quit|left|dropped|ditched|stopped(?:\s+\w+ing)?|gave\s+up(?:\s+on)?|"
    r"got\s+rid\s+of|switched\s+(?:away\s+)?from|moved\s+(?:away\s+)?(?:from|out\s+of)|"
    r"no\s+longer(?:\s+\w+){0,2}|don't\s+(?:have|own|use|drive)|do\s+not\s+(?:have|own|use|drive)|"
    r"broke\s+up\s+with|divorced|replaced|retired\s+from|lost\s+my|"
    r"verkauft|gekündigt|vendu|quitté|vendí|dejé|venduto|lasciato|vendi|deixei|продал|продала|"
    r"бросил|бросила|уволился|уволилась)\s+((?:\S+\s+){0,3}\S+)", re.I)


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
