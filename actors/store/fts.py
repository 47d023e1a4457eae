"""Full-text helpers: the indexed form of stored text and safe FTS5 MATCH queries.

Two functions share one tokenisation so that what is indexed and what is queried always
agree:

* :func:`index_text` turns stored text into the text the FTS5 tables index. It is
  registered on every connection as the deterministic SQL function ``aa_index_text``
  (see ``schema.register_functions``) and called by the sync triggers, so the FTS tables
  hold the *derived* text while the base tables keep the original.
* :func:`build_match_query` turns any user text into an FTS5 MATCH expression that can
  never carry FTS5 syntax.

Two small text helpers live here as well: :func:`content_key` (the normalised form used
to detect duplicate notes) and :func:`normalise_bm25` (BM25 to a 0..1 score).

Scripts written without spaces (Han, Hiragana, Katakana, Hangul, Thai,
Lao, Khmer, Myanmar, Bopomofo) are the reason for the derived text. ``porter unicode61``
would keep a whole Chinese sentence as one token, so ``咖啡`` could never find
``我喜欢喝咖啡``. Instead every run of such characters is indexed as overlapping
character bigrams separated by spaces (``我喜 喜欢 欢喝 喝咖 咖啡``), and Latin/digit
runs glued to it are split off (``部署v2版本`` indexes ``v2`` as its own token). A query
word in those scripts becomes the phrase of its bigrams (``喝咖啡`` ->
``"喝咖 咖啡"``), a single character becomes a prefix term. Space-delimited scripts are
left to ``unicode61`` untouched (apart from NFKC normalisation), so Porter stemming and
prefix matching behave as usual ("cat" finds "cats", "ёжик" finds "ёжиков").
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence

__all__ = [
    "CJK_RANGES",
    "build_match_query",
    "cjk_grams",
    "contains_cjk",
    "content_key",
    "fold_latin",
    "index_text",
    "is_cjk_char",
    "normalise_bm25",
    "query_terms",
    "quote_terms",
]

#: Code-point ranges (inclusive) of scripts written without spaces between words,
#: handled by bigram indexing. Punctuation blocks such as
#: U+3000..U+3004 (ideographic space, 、。) are deliberately left out.
CJK_RANGES: tuple[tuple[int, int], ...] = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x1780, 0x17FF),  # Khmer
    (0x2E80, 0x2FDF),  # CJK radicals, Kangxi radicals
    (0x3005, 0x3007),  # 々 〆 〇
    (0x3021, 0x3029),  # Hangzhou numerals
    (0x3031, 0x3035),  # kana repeat marks
    (0x3038, 0x303C),
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3100, 0x312F),  # Bopomofo
    (0x3130, 0x318F),  # Hangul compatibility Jamo
    (0x31A0, 0x31BF),  # Bopomofo extended
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xA960, 0xA97F),  # Hangul Jamo extended-A
    (0xAC00, 0xD7FF),  # Hangul syllables, Jamo extended-B
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFFDC),  # half-width Katakana and Hangul
    (0x1B000, 0x1B16F),  # Kana supplement / extended
    (0x20000, 0x323AF),  # CJK extensions B..H, compatibility supplement
)

_TRAILING_PUNCT = ".!?;,:。！？；，、…"
_WS_RE = re.compile(r"\s+")
_ASCII_WORD_RE = re.compile(r"[a-z0-9]+")

_CJK_CLASS = "".join(
    f"\\U{lo:08x}-\\U{hi:08x}" if lo != hi else f"\\U{lo:08x}" for lo, hi in CJK_RANGES
)
_CJK_CHAR_RE = re.compile(f"[{_CJK_CLASS}]")
_CJK_RUN_RE = re.compile(f"[{_CJK_CLASS}]+")


#: English function words dropped from recall queries (``actors.store.recall``) and
#: from the agent's choice of MCP tools (``actors.agent.toolbox``): the NLTK English list
#: (articles, pronouns, auxiliaries, prepositions, conjunctions, question words) plus the
#: pieces that the letter/digit split leaves of contractions (``didn't`` -> ``didn``, ``t``).
#: Lower-case, compared after NFKC + lower-casing. Content words ("like", "kind",
#: "favorite") are deliberately kept: removing them measured no better on LoCoMo.
_STOPWORD_TEXT = """
a about above after again against all am an and any are as at be because been before being
below between both but by can cannot could did do does doing down during each few for from
further had has have having he her here hers herself him himself his how i if in into is it
its itself let me more most my myself no nor not of off on once only or other ought our ours
ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were
what when where which while who whom why with would you your yours yourself yourselves
s t d ll m re ve didn doesn don isn wasn weren aren hasn haven hadn couldn wouldn shouldn won
mustn shan needn mightn
"""
STOPWORDS: frozenset[str] = frozenset(_STOPWORD_TEXT.split())


def is_cjk_char(ch: str) -> bool:
    """Return True when the single character ``ch`` belongs to a script written
    without spaces (:data:`CJK_RANGES`)."""
    return _CJK_CHAR_RE.match(ch) is not None


def contains_cjk(text: str) -> bool:
    """Return True when ``text`` contains at least one character of
    :data:`CJK_RANGES` (used by the profile keyword gate: such keywords match as
    substrings: they have no spaces to split on)."""
    return _CJK_CHAR_RE.search(text) is not None


def _is_mark(ch: str) -> bool:
    return unicodedata.category(ch)[0] == "M"


def _cjk_units(run: str) -> list[str]:
    """Split a CJK run into sub-runs of letters/digits.

    Combining marks are dropped without breaking a sub-run (Thai vowel signs, which
    ``unicode61`` would treat as separators); any other non-alphanumeric character
    (``・``, Thai ``๏``) ends the sub-run.
    """
    subruns: list[str] = []
    current: list[str] = []
    for ch in run:
        if ch.isalnum():
            current.append(ch)
        elif _is_mark(ch):
            continue
        elif current:
            subruns.append("".join(current))
            current = []
    if current:
        subruns.append("".join(current))
    return subruns


def _bigrams(subrun: str) -> list[str]:
    if len(subrun) < 2:
        return [subrun]
    return [subrun[i : i + 2] for i in range(len(subrun) - 1)]


def cjk_grams(word: str) -> list[str]:
    """Return the overlapping character bigrams of a CJK word (a single character
    stays itself), split at non-letter/digit characters as :func:`index_text` does."""
    grams: list[str] = []
    for sub in _cjk_units(word):
        grams.extend(_bigrams(sub))
    return grams


_FOLD_LETTERS = str.maketrans({
    "ł": "l", "Ł": "L", "ø": "o", "Ø": "O", "đ": "d", "Đ": "D", "ð": "d", "Ð": "D",
    "ħ": "h", "Ħ": "H", "ı": "i", "ŧ": "t", "Ŧ": "T", "ß": "ss", "ẞ": "SS", "æ": "ae",
    "Æ": "AE", "œ": "oe", "Œ": "OE", "þ": "th", "Þ": "Th"})
"""Latin letters whose stroke or ligature no Unicode decomposition removes."""
_LATIN_BASE_END = 0x0250  # Basic Latin .. Latin Extended-B: the bases of decomposed letters


def fold_latin(text: str) -> str:
    """``text`` with Latin letters stripped of their diacritics: every combining mark
    that follows a Latin base letter after canonical decomposition (NFD) is dropped
    (``phở`` → ``pho``, ``café`` and NFD ``cafe\u0301`` → ``cafe``), and ``ł ø đ ß æ œ þ``
    become ``l o d ss ae oe th``. Marks of other scripts are kept: a Devanagari vowel sign
    or a Cyrillic ``й`` is part of the word. ASCII text is returned as is. Applied to both
    sides of keyword matching, it makes a search typed without accents find what was
    written with them and the other way round (what ``unicode61 remove_diacritics 2``
    does for FTS5, plus the letters it leaves alone)."""
    if text.isascii():
        return text
    out: list[str] = []
    latin = False
    for ch in unicodedata.normalize("NFD", text.translate(_FOLD_LETTERS)):
        if unicodedata.combining(ch):
            if latin:
                continue
        else:
            latin = ord(ch) < _LATIN_BASE_END and ch.isalpha()
        out.append(ch)
    return unicodedata.normalize("NFC", "".join(out))


def index_text(text: str | None) -> str:
    """Return the text the FTS5 tables index for stored ``text``.

    Shape: NFKC-normalised ``text``, Latin diacritics folded (:func:`fold_latin`), in
    which every run of :data:`CJK_RANGES`
    characters is replaced by its overlapping bigrams, space-separated and padded with
    spaces (so glued Latin/digit runs become separate tokens). Text without such
    characters is returned NFKC-normalised and otherwise unchanged. ``None`` -> ``""``.

    Deterministic and pure: it is registered as the SQL function ``aa_index_text`` and
    used inside triggers, so changing its output requires a migration that rebuilds the
    FTS tables (``schema.rebuild_fts``).
    """
    if not text:
        return ""
    text = fold_latin(unicodedata.normalize("NFKC", text))
    if _CJK_CHAR_RE.search(text) is None:
        return text
    parts: list[str] = []
    pos = 0
    for m in _CJK_RUN_RE.finditer(text):
        parts.append(text[pos : m.start()])
        grams: list[str] = []
        for sub in _cjk_units(m.group()):
            grams.extend(_bigrams(sub))
        parts.append(" " + " ".join(grams) + " ")
        pos = m.end()
    parts.append(text[pos:])
    return "".join(parts)


def query_terms(text: str) -> list[tuple[str, bool]]:
    """Tokenise user text the way :func:`index_text` + ``unicode61`` index it.

    Returns ``(term, is_cjk)`` pairs in first-occurrence order, without duplicates.
    Text is NFKC-normalised, lower-cased and Latin diacritics folded; words are runs of Unicode letters/digits
    (combining marks continue a word, ``_`` and all punctuation separate). A CJK term
    is a sub-run of CJK letters/digits. Nothing of FTS5 syntax survives: quotes,
    ``*``, ``-``, ``:``, ``^``, ``+`` and parentheses are separators.
    """
    if text.isascii():  # fast path, same result: ASCII letters/digits, nothing else
        return [(w, False) for w in dict.fromkeys(_ASCII_WORD_RE.findall(text.lower()))]
    text = fold_latin(unicodedata.normalize("NFKC", text).lower())
    if text.isascii():  # "phở" asked as "phở" or "pho": the same terms
        return [(w, False) for w in dict.fromkeys(_ASCII_WORD_RE.findall(text))]
    terms: list[tuple[str, bool]] = []
    seen: set[tuple[str, bool]] = set()
    word: list[str] = []
    cjk: list[str] = []

    def flush(buf: list[str], is_cjk: bool) -> None:
        if buf:
            term = ("".join(buf), is_cjk)
            buf.clear()
            if term not in seen:
                seen.add(term)
                terms.append(term)

    for ch in text:
        if is_cjk_char(ch):
            flush(word, False)
            if ch.isalnum():
                cjk.append(ch)
            elif not _is_mark(ch):
                flush(cjk, True)
        elif ch.isalnum():
            flush(cjk, True)
            word.append(ch)
        elif word and _is_mark(ch):
            word.append(ch)
        else:
            flush(word, False)
            flush(cjk, True)
    flush(word, False)
    flush(cjk, True)
    return terms


def quote_terms(
    terms: Iterable[tuple[str, bool]], *, prefix: bool | Callable[[str], bool]
) -> list[str]:
    """Turn ``(term, is_cjk)`` pairs from :func:`query_terms` into quoted FTS5 terms.

    A word becomes ``"word"``, plus ``*`` (prefix match) when ``prefix`` is True or a
    callable that returns True for it. A CJK word of two or more characters becomes the
    quoted phrase of its bigrams (never a prefix); a single CJK character is ``"x"*``
    unless ``prefix`` is False. Duplicates are dropped, order kept. Only letters,
    digits, combining marks and spaces ever appear between the quotes.
    """
    parts: list[str] = []
    for term, is_cjk in terms:
        if is_cjk:
            for sub in _cjk_units(term):
                grams = _bigrams(sub)
                if len(grams) == 1 and len(grams[0]) == 1:
                    parts.append(f'"{grams[0]}"' + ("*" if prefix is not False else ""))
                else:
                    parts.append('"' + " ".join(grams) + '"')
        else:
            star = prefix if isinstance(prefix, bool) else prefix(term)
            parts.append(f'"{term}"' + ("*" if star else ""))
    return list(dict.fromkeys(parts))


def build_match_query(text: str, *, prefix: bool = True) -> str | None:
    """Build a safe FTS5 MATCH expression from arbitrary user text.

    Every word becomes a double-quoted string token, with ``*`` appended when
    ``prefix`` is true (the notes form; lessons/procedures use
    ``prefix=False``), and the terms are joined with ``OR`` (lenient: any term may
    match, BM25 ranks). A CJK word of two or more characters becomes the quoted phrase
    of its bigrams (no ``*``); a single CJK character is a (prefix) term. Operators
    typed by the user (AND/OR/NOT/NEAR) end up as ordinary quoted words. Notes recall
    uses the refined builder ``recall.build_recall_query`` (stopwords, prefix length).

    Example: ``'Staging flyway_BASELINE?'`` ->
    ``'"staging"* OR "flyway"* OR "baseline"*'``; ``'部署v2'`` -> ``'"部署" OR "v2"*'``.

    Returns ``None`` when nothing indexable remains (empty, whitespace, punctuation,
    emoji only, or a non-string): callers treat that as "no keyword hits", never as an
    error. Never raises.
    """
    if not isinstance(text, str) or not text:
        return None
    parts = quote_terms(query_terms(text), prefix=bool(prefix))
    return " OR ".join(parts) if parts else None


def content_key(content: str) -> str:
    """Return the dedup key of a note text.

    NFKC, case-folded, whitespace runs collapsed to one space, trimmed, trailing
    punctuation (``.!?;,:`` and CJK equivalents) stripped.
    """
    text = _WS_RE.sub(" ", unicodedata.normalize("NFKC", content).casefold()).strip()
    return text.rstrip(_TRAILING_PUNCT + " ")


def normalise_bm25(raw: Sequence[float]) -> list[float]:
    """Map raw ``bm25()`` values (negative, more negative = better) to [0, 1].

    ``score = raw / best`` where ``best`` is the most negative value of the hit set, so
    the strongest hit scores exactly 1.0 and a more negative raw value never yields a
    lower score. Degenerate input (no negative value) scores 1.0 everywhere.
    """
    if not raw:
        return []
    best = min(raw)
    if not best < 0:
        return [1.0] * len(raw)
    return [min(1.0, max(0.0, r / best)) for r in raw]
