"""Keyword search on PostgreSQL with the SQLite engine's ranking, to the digit.

The SQLite engine ranks notes by FTS5's ``bm25()`` over the ``porter unicode61`` tokens
of each note's derived text (:func:`actors.store.fts.index_text`). Here every note keeps
those same tokens, with their positions, in a ``tsvector`` column (``search``, GIN
indexed), written by :func:`index_row` whenever a note's text is written
(:func:`actors.store.recall.index_note`); a query's
phrases become a ``tsquery`` (a term ``'camp'``, a prefix ``'ёжик':*``, a phrase of CJK
bigrams ``'我喜' <-> '喜欢'``), which finds every note FTS5's ``MATCH`` would. The
database finds; the score is computed here with FTS5's own formula and constants
(``fts5_aux.c``: k1 = 1.2, b = 0.75, ``idf = ln((N - n + 0.5) / (n + 0.5))``, 1e-6 when not
positive) from the tenant's note count, total length, and each phrase's document
frequency, so both engines pool and order the same notes (``ts_rank`` is not BM25:
https://www.postgresql.org/docs/current/textsearch-controls.html).

:func:`pool` answers rows in the shape of the SQLite pool query
(:data:`actors.store.recall._SQL_POOL`): ``(id, raw, coverage, corpus, *cols)``, with
``raw`` the negative BM25 like ``bm25()`` and ``cols`` all None for a note the filters
reject. This module builds SQL only; it imports no driver.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["SEARCHED", "Phrase", "corpus", "corpus_freqs", "doc_freqs", "index_row", "pool",
           "tsquery"]

Phrase = tuple[tuple[str, ...], bool]
"""A query phrase as :class:`actors.store.recall.RecallQuery` holds it: its index terms
and whether its last term is a prefix."""

_K1, _B = 1.2, 0.75


def _quote(token: str) -> str:
    return "'" + token.replace("\\", "\\\\").replace("'", "''") + "'"


def _like(prefix: str) -> str:
    """A LIKE pattern for lexemes starting with ``prefix``."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


MAX_LEXEME_BYTES = 2046
"""PostgreSQL's longest lexeme: a longer token is kept as its first 2,046 bytes (a
4,000-letter "word" is still found by its beginning)."""


def _fit(token: str) -> str:
    raw = token.encode("utf-8")
    if len(raw) <= MAX_LEXEME_BYTES:
        return token
    return raw[:MAX_LEXEME_BYTES].decode("utf-8", errors="ignore")


def _phrase_query(terms: Sequence[str], star: bool) -> str:
    out = " <-> ".join(_quote(_fit(t)) for t in terms)
    return out + ":*" if star else out


def tsquery(phrases: Iterable[Phrase], joiner: str = "|") -> str | None:
    """The ``tsquery`` literal of ``phrases`` joined by ``|`` (OR) or ``&`` (AND); None
    when no phrase has a term (FTS5 matches nothing for those either)."""
    parts = [f"({_phrase_query(t, star)})" for t, star in phrases if t]
    return f" {joiner} ".join(parts) if parts else None


SEARCHED = frozenset({"memories", "lessons", "procedures"})
"""The tables with a ``search`` column (names checked: they are put into SQL)."""


def index_row(conn: Any, table: str, row_id: int, columns: Sequence[Sequence[str]]) -> None:
    """Write a row's search tokens after its text is written: per indexed column, the
    tokens the SQLite engine's FTS5 table holds for it
    (:func:`actors.store.recall.document_terms`), one position apart between columns so
    that a phrase never spans two of them (as in FTS5), the length their sum."""
    if table not in SEARCHED:
        raise ValueError(f"no search column on {table!r}")
    tokens: list[str] = []
    where: dict[str, list[int]] = {}
    position = 0
    for column in columns:
        for token in column:
            position += 1
            where.setdefault(_fit(token), []).append(min(position, 16383))
            tokens.append(token)
        position += 1  # the gap between two columns
    vector = " ".join(f"{_quote(t)}:{','.join(map(str, ps))}" for t, ps in where.items())
    conn.execute(f"UPDATE {table} SET search = ?::tsvector, doc_len = ? WHERE id = ?",
                 (vector, len(tokens), row_id))


def _frequency(where: dict[str, list[int]], terms: tuple[str, ...], star: bool) -> int:
    """How often the phrase occurs in a note (its tokens' positions ``where``)."""
    if not terms:
        return 0
    last = terms[-1]
    ends = ([p for t, ps in where.items() if t.startswith(last) for p in ps] if star
            else where.get(last, []))
    if len(terms) == 1:
        return len(ends)
    starts = set(where.get(terms[0], []))
    found = 0
    for end in ends:
        begin = end - len(terms) + 1
        if begin in starts and all(begin + j in where.get(terms[j], ())
                                   for j in range(1, len(terms) - 1)):
            found += 1
    return found


def corpus_freqs(conn: Any, phrases: Sequence[Phrase], table: str = "memories"
                 ) -> tuple[int, int, list[int]]:
    """The tenant's row count and total token count in ``table`` (FTS5's N and total
    length) and, for each phrase, how many of those rows hold it: one statement, one
    pass over the tenant's rows (an aggregate ``FILTER`` per phrase)."""
    if table not in SEARCHED:
        raise ValueError(f"no search column on {table!r}")
    queries = [tsquery([p]) for p in phrases]
    live = [(i, q) for i, q in enumerate(queries) if q is not None]
    counts = "".join(", count(*) FILTER (WHERE search @@ ?::tsquery)" for _ in live)
    row = conn.execute(f"SELECT count(*), COALESCE(sum(doc_len), 0){counts} FROM {table}",
                       [q for _, q in live]).fetchall()[0]
    out = [0] * len(phrases)
    for (i, _), n in zip(live, row[2:]):
        out[i] = int(n)
    return int(row[0]), int(row[1]), out


def doc_freqs(conn: Any, phrases: Sequence[Phrase], table: str = "memories") -> list[int]:
    """For each phrase, how many of the tenant's rows of ``table`` (notes by default)
    hold it (:func:`corpus_freqs`)."""
    return corpus_freqs(conn, phrases, table)[2]


def corpus(conn: Any, table: str = "memories") -> tuple[int, int]:
    """The tenant's row count and total token count in ``table`` (FTS5's N and total
    length)."""
    rows, total, _ = corpus_freqs(conn, [], table)
    return rows, total


def pool(conn: Any, phrases: Sequence[Phrase], joiner: str, limit: int, *, cols: str,
         where: str, args: Sequence[object], newest_first: bool = False,
         with_corpus: bool = False, table: str = "memories", alias: str = "m",
         context: str = ", COALESCE(m.session_id, m.batch_id)") -> list[tuple[Any, ...]]:
    """The ``limit`` best rows of ``table`` (as ``alias``; notes by default) matching
    ``phrases`` (joined by ``|`` or ``&``), in the shape of the SQLite pool query
    (module docstring): ordered by BM25 (``raw`` ascending), or newest first with
    ``newest_first``; ``corpus`` is ``"<N> <total> <doc length>"`` with
    ``with_corpus``, else ``""``; ``context`` ends each row (a note's session)."""
    query = tsquery(phrases, joiner)
    if query is None:
        return []
    if table not in SEARCHED:
        raise ValueError(f"no search column on {table!r}")
    if not alias.isidentifier():
        raise ValueError(f"not an alias: {alias!r}")
    exact = sorted({_fit(t) for terms, star in phrases
                    for t in (terms[:-1] if star else terms)})
    prefixes = sorted({_like(_fit(terms[-1])) for terms, star in phrases if star and terms})
    # Each hit with only the lexemes of the query and their positions (unnest(tsvector)):
    # reading whole vectors back costs more than the search itself.
    sql = (f"SELECT {alias}.id, {alias}.doc_len, (TRUE{where}) AS passes, u.lexeme,"
           f" u.positions FROM {table} {alias} LEFT JOIN LATERAL unnest({alias}.search) u"
           f" ON (u.lexeme = ANY(?) OR u.lexeme LIKE ANY(?))"
           f" WHERE {alias}.search @@ ?::tsquery")
    found = conn.execute(sql, (*args, exact, prefixes, query)).fetchall()
    if not found:
        return []
    hits: dict[int, tuple[int, bool, dict[str, list[int]]]] = {}
    for note_id, size, passes, lexeme, positions in found:
        entry = hits.setdefault(int(note_id), (int(size), bool(passes), {}))
        if lexeme is not None:
            entry[2][lexeme] = list(positions)
    rows, total, freqs = corpus_freqs(conn, phrases, table)
    avgdl = total / rows if rows and total else 1.0
    idf = []
    for n in freqs:
        value = math.log((rows - n + 0.5) / (n + 0.5)) if rows else 0.0
        idf.append(value if value > 0 else 1e-6)
    scored: list[tuple[int, float, float, int, bool]] = []
    for note_id, (size, passes, where_) in hits.items():
        norm = _K1 * (1 - _B + _B * size / avgdl)
        score, held = 0.0, 0
        for (terms, star), weight in zip(phrases, idf):
            f = _frequency(where_, terms, star)
            if f:
                score += weight * f * (_K1 + 1) / (f + norm)
                held += 1
        scored.append((note_id, -score, held / len(phrases) if phrases else 0.0, size, passes))
    scored.sort(key=(lambda r: -r[0]) if newest_first else (lambda r: (r[1], r[0])))
    top = scored[:limit]
    wanted = [r[0] for r in top if r[4]]
    shown: dict[int, tuple[Any, ...]] = {}
    if wanted:
        for note_id, *row in conn.execute(
                f"SELECT {alias}.id, {cols}{context} FROM {table} {alias}"
                f" WHERE {alias}.id = ANY(?)", (wanted,)).fetchall():
            shown[int(note_id)] = tuple(row)
    width = len(next(iter(shown.values()))) if shown else 0
    out = []
    for note_id, raw, cover, size, _passes in top:
        text = f"{rows} {total} {size}" if with_corpus else ""
        row = shown.get(note_id) or (None,) * max(width, 1)
        out.append((note_id, raw, cover, text, *row))
    return out
