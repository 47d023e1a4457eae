"""Rendering of memory into prompt-tail section bodies (docs/architecture.md §5).

Formats, preview clipping and the token estimate are this module's functions; the
default budgets are ``### profile`` 512 tokens, ``### recalled`` 400,
``### memory-index`` 300, ``### lessons`` 300 and ``### procedures`` 400
(``memory.*.maxTokens``). The functions return section *bodies*; the prompt builder
adds the ``### name`` heading and omits empty bodies.

Security: stored memory is data, not instructions. Every rendered fact or
note is exactly one line starting with ``- ``: line breaks inside stored text are
flattened, and inside the line every run of two or more ``#`` is broken with zero-width
spaces (``#\\u200b#\\u200b#``) so it can never read as a ``### `` heading; chat-template
role markers (``<|im_start|>``, ``<|eot_id|>``, ``<start_of_turn>``, ``[INST]``) and
memory-block delimiters (``<memory>``, ``</memory>``) are broken the same way.
"""

from __future__ import annotations

import re
import unicodedata
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Protocol

from actors.policy.instructions import INERT, inert, reads_as_instruction

from .dates import day_note, relative_to_now, written_date
from .fts import contains_cjk, fold_latin
from .records import Note, ProfileFact

__all__ = [
    "TRUNCATION_MARKER",
    "NO_PROFILE",
    "estimate_tokens",
    "truncate_to_tokens",
    "gate_profile",
    "keyword_hits",
    "render_profile",
    "render_session_facts",
    "render_recalled",
    "render_index",
    "render_lessons",
    "render_procedures",
    "PointerRow",
    "neutralise",
    "clip_preview",
    "note_day",
]

#: Marker written over the end of a clipped section.
TRUNCATION_MARKER = "\n… [truncated]"
#: Sentinel body of an empty profile.
NO_PROFILE = "(no profile)"
_ZW = "\u200b"

_HASH_RUN_RE = re.compile(r"#{2,}")
_ROLE_RE = re.compile(
    r"<\|"  # <|im_start|>, <|eot_id|>, <|endoftext|> ...
    r"|\|>"
    r"|<\s*/?\s*(?:memory|system|user|assistant|tool\w*|think|s|start_of_turn|end_of_turn)\b"
    r"|\[\s*/?\s*(?:INST|SYS)\s*\]",
    re.IGNORECASE,
)
#: Line separators other than CR/LF (str.splitlines set).
_OTHER_BREAK_RE = re.compile("[\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
_WS_RE = re.compile(r"\s+")


def estimate_tokens(text: str) -> int:
    """Estimate the tokens of ``text`` without a tokenizer.

    ``0`` for ``""``; otherwise ``max(ceil(chars / 3.6), ceil(words * 1.4))`` where
    ``words`` counts whitespace-separated pieces. Over-counts on purpose. Integer
    arithmetic, so results are exact at the boundaries.
    """
    if not text:
        return 0
    by_chars = (len(text) * 10 + 35) // 36
    by_words = (len(text.split()) * 14 + 9) // 10
    return max(by_chars, by_words)


def truncate_to_tokens(text: str, max_tokens: int) -> str:
    """Clip ``text`` to at most ``max_tokens`` estimated tokens.

    ``max_tokens <= 0`` -> ``""``; fits -> unchanged; otherwise the longest prefix that
    fits *with* :data:`TRUNCATION_MARKER` (``"\\n… [truncated]"``) written over its end.
    When such a prefix would not be longer than the marker + 1 char, the longest
    fitting prefix is returned without marker. The cut may land mid-line.
    """
    if max_tokens <= 0:
        return ""
    if estimate_tokens(text) <= max_tokens:
        return text

    def longest(fits: Callable[[int], bool]) -> int:
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid - 1
        return lo

    plain = longest(lambda n: estimate_tokens(text[:n]) <= max_tokens)
    mark = len(TRUNCATION_MARKER)
    if plain <= mark + 1:
        return text[:plain]
    marked = longest(
        lambda n: n <= mark
        or estimate_tokens(text[: n - mark] + TRUNCATION_MARKER) <= max_tokens
    )
    if marked <= mark + 1:
        return text[:plain]
    return text[: marked - mark] + TRUNCATION_MARKER


def neutralise(text: str) -> str:
    """Break heading and role-marker syntax inside one rendered line.

    Runs of 2+ ``#`` get zero-width spaces between the hashes; ``<|``, ``|>``,
    ``<memory>``/``</memory>``, ``<system>``…, ``<start_of_turn>``, ``[INST]`` get one
    after their first character. A single ``#`` (``#42``, ``C#``) is kept.
    """
    text = _HASH_RUN_RE.sub(lambda m: _ZW.join(m.group()), text)
    return _ROLE_RE.sub(lambda m: m.group()[0] + _ZW + m.group()[1:], text)


def _one_line(text: str) -> str:
    """Collapse every whitespace run (line breaks included) into one space, trimmed."""
    return _WS_RE.sub(" ", text).strip()


def clip_preview(text: str, preview_chars: int) -> str:
    """Clip to ``preview_chars``: longer text keeps ``preview_chars - 1`` chars plus
    ``…`` (total exactly ``preview_chars``); ``preview_chars <= 1`` hard-slices
    (no room for the ``…``)."""
    if len(text) <= preview_chars:
        return text
    if preview_chars <= 1:
        return text[: max(preview_chars, 0)]
    return text[: preview_chars - 1] + "…"


def _flatten_value(value: str) -> str:
    """Profile value on one line: CRLF/LF -> `` \\n ``, lone CR -> `` \\r `` (literal
    backslash sequences, so the fact stays one line); other line separators -> space."""
    value = value.replace("\r\n", " \\n ").replace("\n", " \\n ").replace("\r", " \\r ")
    return _OTHER_BREAK_RE.sub(" ", value)


@lru_cache(maxsize=256)
def _folded(text: str) -> str:
    """``text`` as keywords are matched: NFKC, case-folded, Latin diacritics folded.
    Cached: the gate folds the same message once per keyword of every unpinned fact."""
    return fold_latin(unicodedata.normalize("NFKC", text).casefold())


@lru_cache(maxsize=1024)
def _keyword_re(keyword: str) -> re.Pattern[str]:
    return re.compile(r"(?<![^\W_])" + re.escape(keyword) + r"(?![^\W_])")


def keyword_hits(keyword: str, message: str) -> bool:
    """True when ``keyword`` occurs in ``message`` as a whole word, case-insensitively.

    Anything that is not a letter or digit (spaces, punctuation, ``_``) is a boundary:
    ``ci`` hits "Run the CI pipeline" but not "disciple"; ``ai`` does not hit "Maine".
    A keyword containing characters of scripts written without spaces (``fts.CJK_RANGES``)
    matches as a plain substring. Both sides are NFKC-normalised and Latin diacritics
    folded (``fts.fold_latin``): ``café`` hits "cafe", "Café" and a decomposed "café".
    """
    kw = _folded(keyword.strip())
    if not kw or not message:
        return False
    msg = _folded(message)
    if contains_cjk(kw):
        return kw in msg
    return _keyword_re(kw).search(msg) is not None


def gate_profile(
    facts: Iterable[ProfileFact], user_message: str | None, *, gate: bool = True
) -> list[ProfileFact]:
    """Select the facts for ``### profile`` (the contextual keyword gate).

    Pinned facts always pass; an unpinned fact passes only when one of its keywords
    hits ``user_message`` (:func:`keyword_hits`); no message -> no contextual fact.
    ``gate=False`` (``memory.profile.contextualKeywordGate``) passes every fact.
    Input order is kept.
    """
    facts = list(facts)
    if not gate:
        return facts
    message = user_message or ""
    return [
        f
        for f in facts
        if f.pinned or any(keyword_hits(kw, message) for kw in f.keywords)
    ]


def _profile_line(fact: ProfileFact, before: ProfileFact | None = None,
                  zone: str | None = None, dates: bool = False,
                  now_ms: int | None = None) -> str:
    if reads_as_instruction(f"{fact.key.replace('_', ' ')} {fact.value}"):
        return f"- {neutralise(fact.key)}: {INERT}"  # stored text never acts
    line = f"- {neutralise(fact.key)}: {neutralise(_flatten_value(fact.value))}"
    if not dates:
        return line
    if before is not None:
        since = written_date(before.updated_at, zone)  # when the earlier value was replaced
        since_part = f"since {since}; " if since else ""
        return f"{line} ({since_part}before: {neutralise(_flatten_value(before.value))})"
    text = f"{fact.key} {fact.value}"  # passport_expires_in = three weeks
    relative = relative_to_now(text)
    day = day_note(text, fact.valid_from if relative else None, _now(now_ms), zone)
    if relative:
        said = written_date(fact.valid_from, zone)
        return f"{line} (said {said}: {day})" if day else f"{line} (said {said})"
    return f"{line} ({day})" if day else line


def _now(now_ms: int | None) -> int:
    return int(time.time() * 1000) if now_ms is None else now_ms


def render_profile(
    facts: Sequence[ProfileFact], max_tokens: int = 512, *, empty: str = NO_PROFILE,
    before: Mapping[int, ProfileFact] | None = None, zone: str | None = None,
    dates: bool = False, now_ms: int | None = None,
) -> str:
    """Render the ``### profile`` body.

    One line ``- key: value`` per fact, pinned facts first, then contextual ones, key
    order inside each group; line breaks in values become literal `` \\n ``. With
    ``dates`` (``memory.profile.showDates``), in ``zone``, ``now_ms`` (default
    the wall clock) being today:

    * a fact that replaced an earlier value of its key (``before`` maps the fact's id to
      the version it superseded, ``ProfileStore.predecessors``) ends in `` (since 3 Nov
      2026; before: Lyon)`` -- "where did I live before?";
    * one whose value only means something from the day it was said
      (``dates.relative_to_now``: "next Friday") ends in `` (said 26 Nov 2026: 27 Nov
      2026, 5 days ago)`` -- the day it names read from then (``dates.day_note``);
    * one that names a day ends in `` (25 Dec 2026, in 23 days)``: the default model
      cannot count days itself.

    Budget
    ``max_tokens`` (``memory.profile.maxTokens``, default 512) with whole lines only:
    lines that do not fit are skipped (later, shorter ones may still fit) and a final
    line ``… [truncated] N more profile fact(s) not shown (memory.profile.maxTokens)``
    counts them ("fact" when N = 1). No facts -> ``empty`` (default ``(no profile)``)
    if it fits the budget, else ``""``.
    """
    if max_tokens <= 0:
        return ""
    if not facts:
        return empty if estimate_tokens(empty) <= max_tokens else ""
    ordered = sorted(facts, key=lambda f: (not f.pinned, f.key))
    lines = [_profile_line(f, (before or {}).get(f.id), zone, dates, now_ms) for f in ordered]
    body = "\n".join(lines)
    if estimate_tokens(body) <= max_tokens:
        return body

    def marker(n: int) -> str:
        noun = "fact" if n == 1 else "facts"
        return f"… [truncated] {n} more profile {noun} not shown (memory.profile.maxTokens)"

    # Reserve room for the widest marker this call can emit.
    reserve = marker(len(lines))
    kept: list[str] = []
    for line in lines:
        if estimate_tokens("\n".join([*kept, line, reserve])) <= max_tokens:
            kept.append(line)
    dropped = len(lines) - len(kept)
    out = "\n".join([*kept, marker(dropped)])
    return out if estimate_tokens(out) <= max_tokens else "\n".join(kept)


def render_session_facts(facts: Sequence[ProfileFact], *, max_tokens: int = 200,
                         zone: str | None = None, dates: bool = False,
                         now_ms: int | None = None) -> str:
    """Render the ``### session-facts`` body (the session's known facts, the last
    8); ``""`` for none.

    One line ``- key: value`` per fact in the given order (the order they were written
    in this session, oldest first), neutralised and, with ``dates``, dated like
    ``### profile`` (in ``zone``) without the earlier value; clipped by
    :func:`truncate_to_tokens` at ``max_tokens`` (``memory.sessionFacts.maxTokens``,
    default 200).
    """
    return truncate_to_tokens("\n".join(_profile_line(f, None, zone, dates, now_ms)
                                        for f in facts),
                              max_tokens)


def _tags_part(tags: Sequence[str]) -> str:
    if not tags:
        return ""
    return " [" + ", ".join(_one_line(t) for t in tags) + "]"


def _note_line(note: Note, preview: str, superseded: Mapping[int, int] | None = None,
               date: str = "") -> str:
    newer = (superseded or {}).get(note.id)
    mark = f" (superseded by #{newer})" if newer is not None else ""
    when = f" {date}:" if date else ""
    if reads_as_instruction(note.content):
        preview = INERT  # stored text never acts, however it got in
    if note.space == "team":
        mark += " (shared by your team)"
    return neutralise(f"- #{note.id}{_tags_part(note.tags)}{mark}{when} {preview}")


def _date(note: Note, dates: bool, zone: str | None) -> str:
    return written_date(note.created_at, zone) if dates else ""


def note_day(note: Note, dates: bool, zone: str | None, now_ms: int | None) -> str:
    """`` (18 Dec 2026, in 16 days)``: the day the note's text names, read from the day
    it was written ("yesterday", "in three weeks"), and how far it is from today."""
    if not dates:
        return ""
    day = day_note(note.content, note.created_at, _now(now_ms), zone)
    return f" ({neutralise(day)})" if day else ""


def render_recalled(
    notes: Sequence[Note], *, preview_chars: int = 160, max_tokens: int = 400,
    superseded: Mapping[int, int] | None = None, dates: bool = False,
    zone: str | None = None, now_ms: int | None = None,
) -> str:
    """Render the ``### recalled`` body; ``""`` for no notes.

    One line per note in the given (rank) order: ``- #<id>`` + `` [tag1, tag2]`` when
    tagged + `` (superseded by #<newer>)`` when ``superseded`` maps its id (a later
    note negates or retracts it) + with ``dates``, `` 8 May 2023:`` -- the day the note
    was written, in ``zone`` (``dates.written_date``) -- + a space + the
    preview: the whole content with whitespace runs collapsed, clipped by
    :func:`clip_preview` to ``preview_chars`` (default 160) + with ``dates``, when the
    text names a day, `` (7 May 2023)`` or `` (18 Dec 2026, in 16 days)`` -- read from
    the day it was written ("yesterday"), counted from ``now_ms`` (``dates.day_note``).
    The block is clipped by :func:`truncate_to_tokens` at ``max_tokens`` (default 400),
    dates included.
    """
    lines = [_note_line(n, clip_preview(_one_line(n.content), preview_chars), superseded,
                        _date(n, dates, zone)) + note_day(n, dates, zone, now_ms)
             for n in notes]
    return truncate_to_tokens("\n".join(lines), max_tokens)


def _first_line(content: str) -> str:
    for line in content.replace("\r\n", "\n").split("\n"):
        line = _one_line(line)
        if line:
            return line
    return ""


def render_index(
    notes: Sequence[Note], *, preview_chars: int = 60, max_tokens: int = 300,
    superseded: Mapping[int, int] | None = None, dates: bool = False,
    zone: str | None = None,
) -> str:
    """Render the ``### memory-index`` body; ``""`` for no notes.

    Notes re-sorted by id ascending; one line ``- #<id>[ [tags]][ (superseded by
    #<newer>)][ 8 May 2023:] <preview>`` (the date with ``dates``, as in
    :func:`render_recalled`) where the preview is the first non-empty line of the
    content clipped to ``preview_chars`` (default 60). Clipped by
    :func:`truncate_to_tokens` at ``max_tokens`` (300), dates included.
    """
    ordered = sorted(notes, key=lambda n: n.id)
    lines = [_note_line(n, clip_preview(_first_line(n.content), preview_chars), superseded,
                        _date(n, dates, zone))
             for n in ordered]
    return truncate_to_tokens("\n".join(lines), max_tokens)


class PointerRow(Protocol):
    """What the lessons / procedures renderers read of a row: ``LessonPointer``,
    ``Lesson``, ``ProcedurePointer`` and ``Procedure`` all qualify."""

    id: int
    activation: str
    tags: list[str]


def _pointer_line(marker: str, row: PointerRow) -> str:
    tags = [_one_line(t) for t in row.tags if _one_line(t)]
    tag_part = f" [{','.join(tags)}]" if tags else ""
    return neutralise(f"{marker}{row.id}{tag_part} {inert(_one_line(row.activation))}")


def render_lessons(lessons: Sequence[PointerRow], *, max_tokens: int = 300) -> str:
    """Render the ``### lessons`` body; ``""`` for no lessons.

    One line per lesson in the given (recall) order: ``*<id>`` + `` [a,b]`` when
    tagged (comma **without** space) + a space + the activation with every whitespace
    run (line breaks included) collapsed to one space. Never the principle. Heading
    and role-marker syntax is neutralised (:func:`neutralise`). The block is clipped by
    :func:`truncate_to_tokens` at ``max_tokens`` (``memory.lessons.maxTokens``, 300).
    """
    lines = [_pointer_line("*", row) for row in lessons]
    return truncate_to_tokens("\n".join(lines), max_tokens)


def render_procedures(procedures: Sequence[PointerRow], *, max_tokens: int = 400) -> str:
    """Render the ``### procedures`` body; ``""`` for no procedures.

    One pointer line per procedure in the given order: ``><id>`` + `` [a,b]`` when
    tagged + a space + the one-line activation. Never the steps. Neutralised like
    :func:`render_lessons`; clipped at ``max_tokens`` (``memory.procedures.maxTokens``,
    400). (A ``vote_score DESC`` order would apply once votes are scored; until
    then the recall order is kept.)
    """
    lines = [_pointer_line(">", row) for row in procedures]
    return truncate_to_tokens("\n".join(lines), max_tokens)
