"""Memory as the agent reads it: about "you", not "the user".

Reflection writes notes in the third person ("The user is allergic to shellfish.", "The
user said: I sold my car.") because they are records about someone. Put in front of the
model that way, the 1.5B model answered in the same voice: "Since the user is allergic
to shellfish, they might …", "Tariq lives in Rotterdam, his birthday …", and once
repeated an introduction as its own ("Hello! I'm Sofia, …"). :func:`second_person`
rewrites a memory text for the agent's prompt so that it speaks of the person the model
is talking to: "You are allergic to shellfish.", "You said: you sold your car.", "your
daughter Klara …" (the user's quoted words are turned to "you" as well: quoted as "I",
the model read them as its own and answered "… and we're expecting our first child"). English third-person forms only; anything else is returned as is.
The stored text never changes (``memory notes show`` prints what was stored).

Pure; never raises for any ``str``.
"""

from __future__ import annotations

import re

__all__ = ["second_person", "without_name"]

_IRREGULAR = {"is": "are", "was": "were", "has": "have", "does": "do", "doesn't": "don't",
              "isn't": "aren't", "wasn't": "weren't", "hasn't": "haven't",
              "does not": "do not", "is not": "are not", "has not": "have not",
              "was not": "were not"}
_ADVERBS = ("never", "always", "usually", "often", "also", "still", "sometimes", "rarely",
            "now", "no longer", "mostly", "only", "just", "really", "already", "currently",
            "recently")
_SUBJECT = re.compile(
    r"\b(?:the user|the person)(?P<adv>(?:\s+(?:" + "|".join(_ADVERBS) + r"))*)"
    r"(?:\s+(?P<verb>(?:does|is|has|was)(?:n't|\s+not)?|[a-z]+(?:s|ed))\b)?", re.I)
_SAID = re.compile(r"^(?:the user|the person) said:\s*(?P<quote>.+?)\s*$", re.I | re.S)
_POSSESSIVE = re.compile(r"\b(?:the user|the person)(?:'s|’s|s')(?=\s)", re.I)
_OBJECT = re.compile(r"\b(?:to|for|with|about|of|by|from|than|like|asks?|told|tell|tells)\s+"
                     r"(?:the user|the person)\b", re.I)


_FIRST = {"i'm": "you're", "i am": "you are", "i was": "you were", "i've": "you've",
          "i'd": "you'd", "i'll": "you'll", "i": "you", "me": "you", "my": "your",
          "mine": "yours", "myself": "yourself", "we're": "you're", "we are": "you are",
          "we were": "you were", "we've": "you've", "we'd": "you'd", "we'll": "you'll",
          "we": "you", "us": "you", "our": "your", "ours": "yours",
          "ourselves": "yourselves"}
_FIRST_RE = re.compile(r"(?<![\w'’])(?:" + "|".join(
    re.escape(k).replace("'", "['’]").replace(r"\ ", r"\s+")
    for k in sorted(_FIRST, key=len, reverse=True)) + r")(?![\w'’])", re.I)


def _first_to_second(quote: str) -> str:
    """The user's own sentence spoken back to them: "I'm", "my", "we" → "you're",
    "your", "you" (English; other languages are returned as they are). "US" in capitals
    is a country and stays."""
    def swap(m: re.Match[str]) -> str:
        word = m.group(0)
        if word == "US":
            return word
        out = _FIRST[re.sub(r"\s+", " ", word.lower().replace("’", "'"))]
        first = m.start() == 0 or quote[:m.start()].rstrip().endswith((".", "!", "?"))
        return _cap(out, first)

    return _FIRST_RE.sub(swap, quote)


def _verb(verb: str) -> str:
    low = verb.lower()
    if low in _IRREGULAR:
        return _IRREGULAR[low]
    if low.endswith("ed") or not low.endswith("s") or low.endswith("ss"):
        return verb  # past tense, or not a third-person form
    if low.endswith("ies") and len(low) > 4:
        return verb[:-3] + "y"
    if low.endswith(("ches", "shes", "sses", "xes", "zes", "oes")):
        return verb[:-2]
    return verb[:-1]


def _cap(text: str, first: bool) -> str:
    return text[:1].upper() + text[1:] if first else text


def second_person(text: str) -> str:
    """``text`` with the user in the second person (module doc): "The user said: I sold
    my car" → "You said: you sold your car"; "the user's" → "your"; "the user" + verb → "you" + the verb's plain
    form ("lives" → "live", "is" → "are", "doesn't" → "don't"); "to the user" → "to
    you"."""
    said = _SAID.match(text.strip())
    if said:
        return "You said: " + _first_to_second(said.group("quote").strip().strip('"“”'))

    def possessive(m: re.Match[str]) -> str:
        return _cap("your", m.start() == 0 or text[:m.start()].rstrip().endswith((".", "!", "?")))

    out = _POSSESSIVE.sub(possessive, text)
    out = _OBJECT.sub(lambda m: m.group(0)[:m.group(0).lower().rfind("the ")] + "you", out)

    def subject(m: re.Match[str]) -> str:
        first = m.start() == 0 or out[:m.start()].rstrip().endswith((".", "!", "?", ":", ";"))
        verb = m.group("verb")
        return (_cap("you", first) + (m.group("adv") or "")
                + (f" {_verb(verb)}" if verb else ""))

    return _SUBJECT.sub(subject, out)


def without_name(text: str, name: str) -> str:
    """``text`` (already in the second person) with the user's own ``name`` left out:
    "you're Tariq" / "I'm Tariq" / "my name is Tariq" go, "Tariq's" is "your", any other
    "Tariq" is "you". Shown a quoted introduction, the model spoke of the user by name
    ("Since Tariq is a pescatarian, …"). A name of two letters or fewer is left alone."""
    name = name.strip()
    if len(name) < 3 or not re.search(rf"\b{re.escape(name)}\b", text, re.I):
        return text
    n = re.escape(name)
    # "you're Sofia, 29, a vet" keeps "you're 29, a vet"; "you're Tariq." goes whole
    out = re.sub(rf"\b(you(?:'|’)re|you are|i(?:'|’)m|i am)\s+{n}\b\s*,\s*", r"\1 ", text,
                 flags=re.I)
    out = re.sub(rf"\b(?:you(?:'|’)re|you are|i(?:'|’)m|i am|(?:my|your) name is|call me|"
                 rf"it(?:'|’)s)\s+{n}\b\s*[,.;!]?\s*", "", out, flags=re.I)
    out = re.sub(rf"\b{n}(?:'s|’s)(?=\s)", "your", out, flags=re.I)
    out = re.sub(rf"\b{n}\b", "you", out, flags=re.I)
    out = re.sub(r"\s{2,}", " ", out).replace(" ,", ",").strip()
    if not re.search(r"[^\W\d_]{3,}", out.removeprefix("You said:")):
        return text  # nothing but the name was said: kept as it is
    return out

