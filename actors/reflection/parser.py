"""Parse a reflection completion into profile facts and notes. Pure, never raises.

``SET`` lines give profile facts and ``NOTE`` lines notes, each with a per-call cap;
invalid lines are logged and skipped, never failing the whole call.

The grammar (:mod:`actors.reflection.grammar`) is a request, not a contract: servers
without grammar support, or OpenAI-compatible backends, send prose, code fences, bullets
or CRLF. So parsing is line by line and every bad line is dropped and *counted*; the
caller (the reflection actor) logs the counts — this module does no I/O.

Line handling, in order:

1. Lone UTF-16 surrogates are removed from the whole text; the text is trimmed; an empty
   text or exactly ``NONE`` gives ``kind="none"``.
2. Lines are split on LF, CRLF and a lone CR (old Mac line ends), so no parsed value or
   body ever holds a CR or LF — the grammar's own ``[^\r\n]`` — and trimmed; empty
   lines, code-fence lines (starting with three backticks) and ``NONE`` lines are skipped.
   A leading bullet (``- ``, ``* ``, ``• ``) and wrapping single backticks are removed.
3. ``SET `` lines become :class:`ParsedFact`, ``NOTE `` lines :class:`ParsedNote`,
   ``FORGET `` lines a target in ``forgets`` (1..80 chars, trimmed, de-duplicated, at
   most 4); anything else is prose and only counted in ``ignored_lines``.
   A value, body or target keeps only its first sentence (:func:`first_sentence`: small
   models run on, append a stray `` NONE`` or paste the next line into the text).

``SET key=value [marker]``: the key is the text before the first ``=``, lower-cased with
spaces and hyphens turned into ``_``; it must match ``[a-z][a-z0-9_]{0,31}``. The value
is the rest (it may contain ``=``), trimmed, 1..200 chars — longer values are rejected,
never truncated. A trailing ``[...]`` segment that mentions ``pinned=``, ``keywords=``,
``valid_from=`` or ``supersedes=`` is the marker; any other trailing bracket (e.g.
``[tags=x]``) stays in the value. Duplicate keys: the last line wins, the position of
the first is kept.

``NOTE body [tag1, tag2]`` or ``NOTE body [tags=a,b]``:
the optional trailing tags marker is removed; tags are
lower-cased, must match ``[a-z0-9][a-z0-9_-]*``, ≤ 40 chars, de-duplicated, at most 8
(invalid tags are dropped, not the note). An empty body drops the line; a body over 500
chars is cut to 500. Notes are not de-duplicated.

Caps (``memory.reflection.maxFactsPerCall`` 3 / ``maxNotesPerCall`` 2): facts after the
first ``max_facts`` (after de-duplication) and notes after the first ``max_notes`` are
dropped and counted in ``dropped_over_cap``; ``max_notes=0`` disables notes.
"""

from __future__ import annotations

import re
from typing import Literal

import msgspec

from actors.policy.candidates import ParsedFact, ParsedNote

__all__ = [
    "ParsedFact",
    "ParsedNote",
    "ParsedReflection",
    "parse_reflection",
    "normalize_key",
    "KEY_RE",
    "VALUE_MAX_CHARS",
    "BODY_MAX_CHARS",
    "MAX_KEYWORDS",
    "MAX_TAGS",
    "MAX_FORGETS",
]

#: Profile key shape after normalisation (1..32 chars, as the grammar's ``key``).
KEY_RE = re.compile(r"[a-z][a-z0-9_]{0,31}")
#: Longest accepted ``SET`` value, chars; longer values are rejected.
VALUE_MAX_CHARS = 200
#: Longest stored ``NOTE`` body, chars; longer bodies are cut.
BODY_MAX_CHARS = 500
#: Most keywords kept on a contextual fact.
MAX_KEYWORDS = 8
#: Most tags kept on a note.
MAX_TAGS = 8
#: Longest keyword / tag, chars.
_ITEM_MAX_CHARS = 40
#: Most ``FORGET`` targets kept from one completion.
MAX_FORGETS = 4
#: Longest ``FORGET`` target, chars.
FORGET_MAX_CHARS = 80
#: Longest ``supersedes=`` target, chars.
_SUPERSEDES_MAX_CHARS = 120

_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_LINE_END_RE = re.compile(r"\r\n?|\n")
_KEYWORD_RE = re.compile(r"[a-z0-9][a-z0-9 _\-./]*")
_TAG_RE = re.compile(r"[a-z0-9][a-z0-9_-]*")
_MARKER_NAME_RE = re.compile(r"\b(?:pinned|keywords|valid_from|supersedes)\s*=", re.I)
_PINNED_RE = re.compile(r"\bpinned\s*=\s*([^\s,;\]]*)", re.I)
_KEYWORDS_AFTER_RE = re.compile(r"\bkeywords\s*=(.*)$", re.I | re.S)
_TAGS_MARKER_RE = re.compile(r"\s*\[\s*tags\s*=([^\[\]]*)\]\s*$", re.I)
#: The plain tag form, ``NOTE body [tag1, tag2]``: a trailing bracket holding only
#: tag-shaped words (each with a letter) separated by commas (no ``=``).
_TAG_ITEM = r"[A-Za-z0-9][\w-]*"
_TAG_LIST_RE = re.compile(  # each item needs a letter: "[2]" is a footnote, not a tag
    rf"\s*\[\s*((?=[\w-]*[A-Za-z]){_TAG_ITEM}(?:\s*,\s*(?=[\w-]*[A-Za-z]){_TAG_ITEM})*)\s*,?\s*\]\s*$")
_BULLETS = ("- ", "* ", "\u2022 ")
_TRAILING_NONE_RE = re.compile(r"\s+NONE\s*$")
#: Where a small model's run-on text goes off the rails: the end of the first sentence,
#: a quote opening a pasted line, or a directive word inside the text.
_RUN_ON_RE = re.compile(r"(?P<end>[.!?])\s+(?=[A-Z\"'(])|\s*\"\s*(?:and|or)\s+\"|"
                        r"\s+(?=(?:SET|NOTE|FORGET|NONE)\b)")
_ABBREVIATIONS = frozenset("""mr mrs ms dr prof st jr sr vs etc eg ie inc ltd co no mt ft
approx dept univ""".split())


def first_sentence(text: str) -> str:
    """``text`` up to the end of its first sentence (small models
    run on past the item — "The user prefers pytest. This is stored as …"), without a
    trailing ``NONE``; trimmed. "Dr. Smith" and "J. Smith" do not end a sentence."""
    text = _TRAILING_NONE_RE.sub("", text.strip())
    for m in _RUN_ON_RE.finditer(text):
        if m.group("end") == ".":
            word = re.findall(r"[\w.]+$", text[:m.start()])
            token = word[0].replace(".", "").lower() if word else ""
            if len(token) <= 1 or token in _ABBREVIATIONS:
                continue
        return text[:m.start() + (1 if m.group("end") else 0)].strip()
    return text.strip()


class ParsedReflection(msgspec.Struct, frozen=True):
    """Result of :func:`parse_reflection`.

    ``kind`` is ``"none"`` when no fact, note or forget survived, else ``"entries"``.
    ``facts`` / ``notes`` are capped and in output order; ``forgets`` are the ``FORGET``
    targets (at most :data:`MAX_FORGETS`). Counters (all ≥ 0):
    ``invalid_facts`` — ``SET`` lines dropped (bad key, empty or > 200-char value, no
    ``=``); ``invalid_notes`` — ``NOTE`` lines dropped (empty body);
    ``dropped_over_cap`` — valid facts/notes beyond ``max_facts`` / ``max_notes``;
    ``ignored_lines`` — non-empty lines that are neither ``SET`` nor ``NOTE`` (prose).
    """

    kind: Literal["none", "entries"]
    facts: list[ParsedFact] = []
    notes: list[ParsedNote] = []
    forgets: list[str] = []
    invalid_facts: int = 0
    invalid_notes: int = 0
    dropped_over_cap: int = 0
    ignored_lines: int = 0


_NONE = ParsedReflection(kind="none")


def normalize_key(raw: str) -> str | None:
    """Return the profile key for ``raw`` or None when it is not a valid key.

    Trims, lower-cases, turns spaces and hyphens into ``_`` and checks
    ``[a-z][a-z0-9_]{0,31}``. ``"Preferred Editor"`` → ``"preferred_editor"``.
    """
    key = raw.strip().lower().replace(" ", "_").replace("-", "_")
    return key if KEY_RE.fullmatch(key) else None


def _clean_list(raw: str, pattern: re.Pattern[str], limit: int) -> list[str]:
    """Comma-split, trim, lower-case, validate, de-duplicate and cap a marker list."""
    raw = raw.strip()
    if raw.startswith("[") and raw.endswith("]"):
        raw = raw[1:-1]
    out: list[str] = []
    for item in raw.split(","):
        item = item.strip().lower()
        if (
            item
            and len(item) <= _ITEM_MAX_CHARS
            and pattern.fullmatch(item)
            and item not in out
        ):
            out.append(item)
            if len(out) >= limit:
                break
    return out


def _split_marker(payload: str) -> tuple[str, str | None]:
    """Split ``payload`` into (value, marker content) at a trailing fact marker.

    Scans ``[`` positions from the right so nested brackets inside the marker
    (``keywords=[a,b]``) and unrelated earlier brackets both work.
    """
    if not payload.endswith("]"):
        return payload, None
    pos = payload.rfind("[")
    while pos >= 0:
        content = payload[pos + 1 : -1]
        if _MARKER_NAME_RE.search(content):
            return payload[:pos].rstrip(), content
        pos = payload.rfind("[", 0, pos)
    return payload, None


def _parse_marker(marker: str) -> tuple[bool, list[str], str | None, str | None]:
    """Parse fact marker content into (pinned, keywords, supersedes, valid_from)."""
    pinned = True
    keywords: list[str] = []
    supersedes: str | None = None
    valid_from: str | None = None
    if ";" not in marker and _KEYWORDS_AFTER_RE.search(marker):
        # Comma form: "[pinned=false, keywords=deploy]" (a fallback).
        m = _PINNED_RE.search(marker)
        if m:
            pinned = m.group(1).strip().lower() != "false"
        kw = _KEYWORDS_AFTER_RE.search(marker)
        keywords = _clean_list(kw.group(1) if kw else "", _KEYWORD_RE, MAX_KEYWORDS)
    else:
        for clause in marker.split(";"):
            name, sep, val = clause.partition("=")
            if not sep:
                continue
            name = name.strip().lower()
            val = val.strip()
            if name == "pinned":
                pinned = val.lower() != "false"
            elif name == "keywords":
                keywords = _clean_list(val, _KEYWORD_RE, MAX_KEYWORDS)
            elif name == "supersedes":
                target = val.lower()
                if len(target) <= _SUPERSEDES_MAX_CHARS and KEY_RE.fullmatch(target):
                    supersedes = target
            elif name == "valid_from":
                valid_from = "now" if val == "now" else None
    if pinned:
        keywords = []
    return pinned, keywords, supersedes, valid_from


def _parse_set(payload: str) -> ParsedFact | None:
    """Parse the text after ``SET `` into a fact, or None when the line is invalid."""
    value_part, marker = _split_marker(_TRAILING_NONE_RE.sub("", payload.strip()))
    if marker is None:
        value_part = first_sentence(value_part).rstrip(".")
    raw_key, sep, value = value_part.partition("=")
    if not sep:
        return None
    key = normalize_key(raw_key)
    value = value.strip()
    if key is None or not value or len(value) > VALUE_MAX_CHARS:
        return None
    if marker is None:
        return ParsedFact(key=key, value=value)
    pinned, keywords, supersedes, valid_from = _parse_marker(marker)
    return ParsedFact(
        key=key,
        value=value,
        pinned=pinned,
        keywords=keywords,
        supersedes=supersedes,
        valid_from=valid_from,
    )


def _parse_note(payload: str) -> ParsedNote | None:
    """Parse the text after ``NOTE `` into a note, or None when the body is empty."""
    body = first_sentence(payload)
    tags: list[str] = []
    m = _TAGS_MARKER_RE.search(body) or _TAG_LIST_RE.search(body)
    if m:
        tags = _clean_list(m.group(1), _TAG_RE, MAX_TAGS)
        body = body[: m.start()].rstrip()
    if not body:
        return None
    if len(body) > BODY_MAX_CHARS:
        body = body[:BODY_MAX_CHARS].rstrip()
    return ParsedNote(body=body, tags=tags)


def _clean_line(line: str) -> str:
    """Trim a line, remove one leading bullet and wrapping single backticks."""
    line = line.strip()
    for bullet in _BULLETS:
        if line.startswith(bullet):
            line = line[len(bullet) :].lstrip()
            break
    if len(line) >= 2 and line[0] == "`" and line[-1] == "`" and not line.startswith("``"):
        line = line[1:-1].strip()
    return line


def parse_reflection(
    text: str, *, max_facts: int = 3, max_notes: int = 2, keep_duplicates: bool = False
) -> ParsedReflection:
    """Parse a reflection completion (see the module docstring for every rule).

    ``keep_duplicates``: return every ``SET`` line in order instead of the last per key
    (the reflection actor lets its guards pick the first one that survives: a small
    model's later lines are its least reliable). ``text``: the raw completion, any
    ``str``. ``max_facts`` / ``max_notes``: per-call
    caps (``memory.reflection.maxFactsPerCall`` = 3,
    ``maxNotesPerCall`` = 2; 0 disables the channel; negative values count as 0).

    Returns a :class:`ParsedReflection`; never raises on any text — each bad line is
    dropped and counted, never the whole call.
    """
    text = _SURROGATE_RE.sub("", text).strip()
    if not text or text == "NONE":
        return _NONE

    facts: dict[str, ParsedFact] = {}
    all_facts: list[ParsedFact] = []
    notes: list[ParsedNote] = []
    forgets: list[str] = []
    invalid_facts = invalid_notes = ignored = 0

    for raw_line in _LINE_END_RE.split(text):
        line = _clean_line(raw_line)
        if not line or line.startswith("```") or line == "NONE":
            continue
        if line.startswith("SET "):
            fact = _parse_set(line[4:])
            if fact is None:
                invalid_facts += 1
            else:
                if keep_duplicates:
                    all_facts.append(fact)
                facts[fact.key] = fact  # last wins, first position kept
        elif line.startswith("NOTE "):
            note = _parse_note(line[5:])
            if note is None:
                invalid_notes += 1
            else:
                notes.append(note)
        elif line.startswith("FORGET "):
            target = first_sentence(line[7:]).rstrip(".")
            if 0 < len(target) <= FORGET_MAX_CHARS and target.lower() not in (
                    t.lower() for t in forgets) and len(forgets) < MAX_FORGETS:
                forgets.append(target)
            else:
                ignored += 1
        else:
            ignored += 1

    max_facts = max(0, max_facts)
    max_notes = max(0, max_notes)
    fact_list = all_facts if keep_duplicates else list(facts.values())
    dropped = max(0, len(fact_list) - max_facts) + max(0, len(notes) - max_notes)
    fact_list = fact_list[:max_facts]
    notes = notes[:max_notes]
    return ParsedReflection(
        kind="entries" if fact_list or notes or forgets else "none",
        facts=fact_list,
        notes=notes,
        forgets=forgets,
        invalid_facts=invalid_facts,
        invalid_notes=invalid_notes,
        dropped_over_cap=dropped,
        ignored_lines=ignored,
    )
