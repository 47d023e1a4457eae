"""Duplicate detection for notes on store.

Two levels, both limited to active (non-archived) notes of the same scope and working
dir:

* **exact**: the same ``fts.content_key`` (NFKC, case-folded, whitespace collapsed,
  trailing punctuation stripped), found through ``idx_memories_content_key``;
* **near-identical**: among the top :data:`NEAR_CANDIDATES` (5) notes of that scope by
  BM25 for the rarest words of the new text, the one with the highest token Jaccard
  similarity ``|A ∩ B| / |A ∪ B|``, if it reaches the threshold (default
  :data:`NEAR_THRESHOLD` = 0.85). Tokens are the
  lower-cased Unicode letter/digit words longer than 2 characters, and,
  also shorter words with a digit (so "room 12" and "room 14" stay
  two notes), plus the character bigrams of CJK words (so unspaced scripts can be
  near-identical too). Texts with fewer than :data:`NEAR_MIN_TOKENS` (3) such tokens
  only merge when exactly equal: on one or two tokens Jaccard cannot tell "note a" from
  "note b". The incoming tags need not be a subset of the candidate's: the
  merge unites them (``{home}`` merged with ``{plants}`` gives ``{home, plants}``).

Cost per ``store`` (bench/recall.py corpus, 2-core machine): ~0.4 ms exact only, ~2 ms
with near-identical detection at 1,000 notes, ~12 ms at 100,000 notes.

The caller (``MemoryStore.store``) merges into the returned note: same id, tags united,
``updated_at`` refreshed, ``recall_count`` + 1. A near-identical text whose negation
cues differ (:func:`corrections.polarity`: "Is not allergic …" against "Is allergic
…", a correction) is never merged: :func:`near_match` reports it as corrected,
and the store keeps both, the new one superseding the old.
"""

from __future__ import annotations

from typing import NamedTuple, cast

from .corrections import polarity
from .fts import cjk_grams, query_terms
from .recall import STOPWORDS, doc_freqs, index_terms
from .sql import Connection, dialect

__all__ = [
    "NEAR_CANDIDATES",
    "NEAR_MIN_TOKENS",
    "NEAR_THRESHOLD",
    "NearMatch",
    "jaccard",
    "jaccard_tokens",
    "near_match",
]


#: Default Jaccard threshold for a near-identical merge.
NEAR_THRESHOLD = 0.85
#: How many BM25 candidates are compared (the top 5).
NEAR_CANDIDATES = 5
#: Both texts need at least this many Jaccard tokens for a near-identical merge.
NEAR_MIN_TOKENS = 3
#: Candidates are looked for with this many of the rarest terms of the new text ...
NEAR_QUERY_TERMS = 4
#: ... chosen among this many of its longest words / CJK bigrams.
NEAR_LOOKUP_TERMS = 16
#: Negation words are compared by polarity, not by overlap: "Is not allergic …" and
#: "Is allergic …" score as the same words, then the differing cue makes them distinct.
_CUE_WORDS = frozenset({"not", "never", "none", "nor", "neither", "without", "cannot",
                        "anymore"})

_SQL_EXACT = (
    "SELECT id, tags FROM memories WHERE content_key = ? AND scope = ?"
    " AND working_dir IS ? AND archived = 0 ORDER BY id LIMIT 1"
)
# The best 4 * NEAR_CANDIDATES by BM25, then those of the scope, best NEAR_CANDIDATES.
_SQL_NEAR = (
    "SELECT m.id, m.tags, m.content FROM ("
    " SELECT rowid, bm25(memories_fts) AS raw FROM memories_fts"
    " WHERE memories_fts MATCH ? ORDER BY raw LIMIT ?) f"
    " JOIN memories m ON m.id = f.rowid"
    " WHERE m.scope = ? AND m.working_dir IS ? AND m.archived = 0 ORDER BY f.raw LIMIT ?"
)


def jaccard_tokens(text: str) -> frozenset[str]:
    """Return the Jaccard token set of ``text`` (see the module docstring)."""
    tokens: set[str] = set()
    for term, is_cjk in query_terms(text):
        if is_cjk:
            tokens.update(cjk_grams(term))
        elif len(term) > 2 or any(ch.isdigit() for ch in term):
            tokens.add(term)
    return frozenset(tokens)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """``|a ∩ b| / |a ∪ b|``; 0.0 when both are empty."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def _candidate_query(conn: Connection, text: str) -> list[str] | None:
    """The quoted terms (to be OR-ed) of the :data:`NEAR_QUERY_TERMS` rarest index terms of ``text`` that other
    notes contain (words without stopwords, CJK bigrams each on its own: a
    near-identical CJK run is not the same phrase). A near duplicate holds >= 85 % of
    the words, so it holds most of these and their IDF puts it on top; OR-ing every
    word of a note instead costs ~50 ms at 100k notes. Document frequencies:
    ``recall.doc_freqs``, for the :data:`NEAR_LOOKUP_TERMS` longest words only."""
    pieces: list[str] = []
    for term, is_cjk in query_terms(text):
        if is_cjk:
            pieces += cjk_grams(term)
        elif term not in STOPWORDS:
            pieces.append(term)
    pieces = sorted(dict.fromkeys(pieces), key=len, reverse=True)[:NEAR_LOOKUP_TERMS]
    stems = {p: t[0] for p in pieces if len(t := index_terms(p)) == 1}
    if not stems:
        return None
    df = doc_freqs(conn, list(stems.values()))
    ranked = sorted((df[s], p) for p, s in stems.items() if df.get(s))
    chosen = [f'"{p}"' for _n, p in ranked[:NEAR_QUERY_TERMS]]
    return chosen or None


def _candidates(conn: Connection, match: list[str], scope: str, working_dir: str | None
                ) -> list[tuple[int, str, str]]:
    """``(id, tags, content)`` of the best :data:`NEAR_CANDIDATES` active notes of the
    scope among the ``4 *`` that BM25 ranks best for the OR of the ``match`` terms."""
    if dialect(conn) == "postgres":
        from .pg.search import pool

        phrases = [(index_terms(w.strip('"')), False) for w in match]
        rows = pool(conn, phrases, "|", 4 * NEAR_CANDIDATES, cols="m.id, m.tags, m.content",
                    where=" AND m.scope = ? AND m.working_dir IS ? AND m.archived = 0",
                    args=(scope, working_dir))
        return [cast(tuple[int, str, str], tuple(r[4:7])) for r in rows
                if r[4] is not None][:NEAR_CANDIDATES]
    return cast(list[tuple[int, str, str]], conn.execute(
        _SQL_NEAR, (" OR ".join(match), 4 * NEAR_CANDIDATES, scope, working_dir,
                    NEAR_CANDIDATES)).fetchall())


class NearMatch(NamedTuple):
    """What a new note's text found among the active notes: ``id`` and raw ``tags``
    JSON of that note; ``corrects`` is True when it is near-identical but the cues of
    negation differ (:func:`corrections.polarity`): the new note corrects it and is
    stored on its own, never merged."""

    id: int
    tags: str
    corrects: bool = False


def near_match(
    conn: Connection,
    content: str,
    key: str,
    scope: str,
    working_dir: str | None,
    threshold: float | None,
) -> NearMatch | None:
    """The note ``content`` duplicates (``corrects`` False: merge into it) or corrects
    (``corrects`` True), or None.

    Exact duplicates (same ``key``) first. Then, with a ``threshold``, the candidate
    with the highest Jaccard score at or above it among those of the same polarity (a
    duplicate); failing that, the best one of another polarity (a correction: "Is not
    allergic to …" against "Is allergic to …").

    Args:
        conn: the store's connection (inside its write transaction).
        content: the validated (trimmed) new text; ``key`` its ``content_key``.
        scope / working_dir: only notes with exactly these values are candidates.
        threshold: near-identical Jaccard threshold in [0, 1]; None = exact only.
    """
    rows = conn.execute(_SQL_EXACT, (key, scope, working_dir)).fetchall()
    if rows:
        note_id, text = cast(tuple[int, str], rows[0][:2])
        return NearMatch(note_id, text)
    if threshold is None:
        return None
    tokens = jaccard_tokens(content)
    match = _candidate_query(conn, content) if len(tokens) >= NEAR_MIN_TOKENS else None
    if match is None:
        return None
    cues = polarity(content)
    best: dict[bool, tuple[float, int, str]] = {}
    for note_id, tags, other in _candidates(conn, match, scope, working_dir):
        other_tokens = jaccard_tokens(other)
        if len(other_tokens) < NEAR_MIN_TOKENS:
            continue
        score = jaccard(tokens - _CUE_WORDS, other_tokens - _CUE_WORDS)
        corrects = polarity(other) != cues
        top = best.get(corrects)
        if top is None or score > top[0] or (score == top[0] and note_id < top[1]):
            best[corrects] = (score, note_id, tags)
    for corrects in (False, True):
        top = best.get(corrects)
        if top is not None and top[0] >= threshold:
            return NearMatch(top[1], top[2], corrects)
    return None
