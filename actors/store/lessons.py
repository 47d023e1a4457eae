"""LessonStore: distilled principles with keyword-only BM25 recall.

A lesson is an *activation* (one sentence: when it applies) plus a *principle* (1–3
sentences: what to do), tagged, with the ids of the notes it was distilled from. The
consolidator (cold path, anchor §7.6) creates them later; this module is the store it
writes through and the read path the per-turn context uses.

* Table ``lessons`` and FTS5 ``lessons_fts`` (``activation``, ``principle``, ``tags``,
  ``porter unicode61`` over ``aa_index_text``) exist since schema v3; triggers keep the
  index in sync.
* Recall is keyword-only: user text becomes a safe MATCH expression with **exact**
  (non-prefix) quoted tokens (``fts.build_match_query(prefix=False)``, anchor §2.1), OR
  joined, ranked by ``bm25()``. Text with nothing indexable recalls ``[]``; hostile text
  never raises.
* Deprecation is a status flip (``status='deprecated'``, ``deprecated_at``); nothing is
  deleted, deprecated rows stay readable by id but leave query recall
  and the index.

The helpers :func:`validate_activation`, :func:`validate_query`, :func:`clean_tags`,
:func:`validate_id_list` and :func:`fts_recall_rows` are shared with
``procedures.py``. Times are Unix milliseconds; every write goes through
``schema.write_txn``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import apsw
import msgspec
import structlog

from .errors import ValidationError, optional_text, require_int, require_positive_id
from .errors import now_ms as _now
from .fts import build_match_query, normalise_bm25
from .records import Lesson, LessonPointer
from .schema import write_txn

__all__ = [
    "Lesson",
    "LessonPointer",
    "LessonStore",
    "ACTIVATION_MAX_CHARS",
    "PRINCIPLE_MAX_CHARS",
    "MAX_TAGS",
    "TAG_MAX_CHARS",
    "MAX_QUERY_CHARS",
    "RECALL_K_DEFAULT",
    "RECALL_K_MAX",
    "INDEX_LIMIT_DEFAULT",
    "INDEX_LIMIT_MAX",
    "STATUSES",
    "validate_activation",
    "validate_principle",
    "validate_query",
    "clean_tags",
    "validate_id_list",
    "fts_recall_rows",
    "decode_json_list",
    "encode_json",
]

log = structlog.get_logger("actors.store.lessons")

#: Limits of anchor §2.7.
ACTIVATION_MAX_CHARS = 240
PRINCIPLE_MAX_CHARS = 800
MAX_TAGS = 12
TAG_MAX_CHARS = 40
MAX_QUERY_CHARS = 500
RECALL_K_DEFAULT, RECALL_K_MAX = 2, 10
INDEX_LIMIT_DEFAULT, INDEX_LIMIT_MAX = 20, 100
STATUSES = ("active", "deprecated")

_TAG_RE = re.compile(r"[a-z0-9][a-z0-9_-]*")
_INTS = msgspec.json.Decoder(list[int])
_STRS = msgspec.json.Decoder(list[str])


# -- shared validation helpers (also used by procedures.py) -------------------------------


def _bounded_text(value: object, field: str, max_chars: int) -> str:
    if not isinstance(value, str):
        raise ValidationError(field, "must be a string")
    value = value.strip()
    if not value:
        raise ValidationError(field, "must not be empty")
    if len(value) > max_chars:
        raise ValidationError(field, f"must be at most {max_chars} chars (got {len(value)})")
    return value


def validate_activation(value: object, field: str = "activation") -> str:
    """Return the activation trimmed; 1..240 chars after trimming, never cut.

    Raises:
        ValidationError: ``field`` (default ``activation``).
    """
    return _bounded_text(value, field, ACTIVATION_MAX_CHARS)


def validate_principle(value: object) -> str:
    """Return the principle trimmed; 1..800 chars after trimming, never cut.

    Raises:
        ValidationError: field ``principle``.
    """
    return _bounded_text(value, "principle", PRINCIPLE_MAX_CHARS)


def validate_query(query: object) -> str:
    """Return a recall query trimmed; it must be a string of at most 500 chars.

    Raises:
        ValidationError: field ``query``.
    """
    if not isinstance(query, str):
        raise ValidationError("query", "must be a string")
    query = query.strip()
    if len(query) > MAX_QUERY_CHARS:
        raise ValidationError("query", f"must be at most {MAX_QUERY_CHARS} chars")
    return query


def clean_tags(
    tags: object,
    *,
    pattern: re.Pattern[str] = _TAG_RE,
    max_chars: int = TAG_MAX_CHARS,
    max_items: int = MAX_TAGS,
) -> list[str]:
    """Normalise lesson/procedure tags the lenient way of anchor §2.7/§2.8.

    ``None`` -> ``[]``. Each entry is trimmed and lower-cased; entries that are not
    strings, are empty, longer than ``max_chars`` or do not fully match ``pattern``
    are **silently dropped**, duplicates too (first kept), and only the first
    ``max_items`` survivors are kept.

    Raises:
        ValidationError: field ``tags`` when ``tags`` is not a list/tuple.
    """
    if tags is None:
        return []
    if not isinstance(tags, (list, tuple)):
        raise ValidationError("tags", "must be a list of strings")
    out: list[str] = []
    for tag in tags:
        if not isinstance(tag, str):
            continue
        tag = tag.strip().lower()
        if not tag or len(tag) > max_chars or pattern.fullmatch(tag) is None:
            continue
        if tag not in out:
            out.append(tag)
        if len(out) >= max_items:
            break
    return out


def validate_id_list(value: object, field: str, *, required: bool) -> list[int]:
    """Validate a list of positive integer ids; de-duplicated, first order kept.

    ``None`` counts as ``[]``. With ``required`` the result must be non-empty.

    Raises:
        ValidationError: ``field`` (not a list, an entry not a positive int, empty
            while required).
    """
    if value is None:
        value = []
    if not isinstance(value, (list, tuple)):
        raise ValidationError(field, "must be a list of positive integers")
    out: list[int] = []
    for item in value:
        if not isinstance(item, int) or isinstance(item, bool) or item < 1:
            raise ValidationError(field, "every entry must be a positive integer")
        if item not in out:
            out.append(item)
    if required and not out:
        raise ValidationError(field, "must list at least one id")
    return out


def _clamp(value: object, field: str, lo: int, hi: int) -> int:
    return min(hi, max(lo, require_int(value, field)))


def fts_recall_rows(
    conn: apsw.Connection,
    *,
    table: str,
    cols: str,
    query: str,
    k: int,
    include_deprecated: bool,
    working_dir: str | None,
) -> list[tuple[tuple, float]]:
    """Run a keyword recall over ``<table>_fts`` and return ``(row, score)`` pairs.

    ``table`` and ``cols`` come from module constants (``lessons`` / ``procedures``),
    never from input. ``query`` is validated by the caller; it is turned into exact
    quoted tokens OR-joined (``build_match_query(prefix=False)``), ``[]`` when nothing
    indexable remains. Active rows only unless ``include_deprecated``; with
    ``working_dir`` only global rows and rows of that directory. Order BM25 best first,
    then id; scores normalised to [0, 1] (``fts.normalise_bm25``).
    """
    match = build_match_query(query, prefix=False)
    if match is None:
        return []
    sql = (
        f"SELECT {cols}, bm25({table}_fts) AS raw FROM {table}_fts"
        f" JOIN {table} t ON t.id = {table}_fts.rowid WHERE {table}_fts MATCH ?"
    )
    args: list[object] = [match]
    if not include_deprecated:
        sql += " AND t.status = 'active'"
    if working_dir is not None:
        sql += " AND (t.working_dir IS NULL OR t.working_dir = ?)"
        args.append(working_dir)
    sql += " ORDER BY raw, t.id LIMIT ?"
    args.append(k)
    rows = conn.execute(sql, tuple(args)).fetchall()
    scores = normalise_bm25([r[-1] for r in rows])
    return [(r[:-1], s) for r, s in zip(rows, scores)]


RERANK_POOL = 3
"""BM25 pool of a vote-aware recall: ``k × 3`` (anchor §7.2 ``rerankPoolMultiplier``)."""


def vote_rerank(conn: apsw.Connection, table: str, hits: list[tuple[tuple, float]], k: int,
                blend: float) -> list[tuple[tuple, float]]:
    """Anchor §7.2: order a BM25 pool by ``blend × vote_score + (1 − blend) ×
    (success_count − failure_count)``, descending, ties by BM25 rank; keep ``k``.
    ``blend`` is clamped into [0, 1]; ``table`` is a module constant. BM25 magnitude
    does not enter the score (as in the anchor's code)."""
    if not hits:
        return hits
    blend = min(1.0, max(0.0, float(blend)))
    ids = [row[0] for row, _ in hits]
    signals = {r[0]: blend * r[1] + (1 - blend) * (r[2] - r[3]) for r in conn.execute(
        f"SELECT id, vote_score, success_count, failure_count FROM {table}"
        " WHERE id IN (SELECT value FROM json_each(?))", (encode_json(ids),))}
    order = sorted(range(len(hits)), key=lambda i: (-signals.get(ids[i], 0.0), i))
    return [hits[i] for i in order[:k]]


def decode_json_list(raw: str | None, decoder: msgspec.json.Decoder) -> list:
    """Decode a JSON array column; ``[]`` for NULL, empty or malformed text."""
    if not raw:
        return []
    try:
        return decoder.decode(raw)
    except msgspec.DecodeError:
        return []


def encode_json(value: object) -> str:
    """Encode a value as compact JSON text (for the JSON columns)."""
    return msgspec.json.encode(value).decode()


# -- the store ----------------------------------------------------------------------------

_COLS = (
    "t.id, t.activation, t.principle, t.tags, t.status, t.success_count, t.failure_count,"
    " t.parent_ids, t.working_dir, t.created_at, t.updated_at, t.deprecated_at"
)
_SQL_GET = f"SELECT {_COLS} FROM lessons t WHERE t.id = ?"
_SQL_INSERT = (
    "INSERT INTO lessons (activation, principle, tags, parent_ids, working_dir,"
    " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_SQL_INDEX = (
    f"SELECT {_COLS} FROM lessons t WHERE t.status = 'active'"
    " ORDER BY t.updated_at DESC, t.id DESC LIMIT ?"
)
_SQL_DEPRECATE = (
    "UPDATE lessons SET status = 'deprecated', deprecated_at = ?, updated_at = ?"
    " WHERE id = ? AND status = 'active'"
)


def _row(row: Sequence, score: float | None = None) -> Lesson:
    return Lesson(
        row[0], row[1], row[2], decode_json_list(row[3], _STRS), row[4], row[5], row[6],
        decode_json_list(row[7], _INTS), row[8], row[9], row[10], row[11], score,
    )


class CountedTable:
    """Counters and counts shared by :class:`LessonStore` and ``ProcedureStore``:
    tables with a ``status`` column and ``<which>_count`` columns. Subclasses set
    ``TABLE`` (the table name, a constant) and ``COUNTERS`` (the counter names)."""

    TABLE = ""
    COUNTERS: tuple[str, ...] = ()
    conn: apsw.Connection

    def _bump(self, which: str, row_id: int, now_ms: int | None) -> bool:
        """Add 1 to ``<which>_count`` and refresh ``updated_at``; True if the row exists."""
        assert which in self.COUNTERS
        row_id = require_positive_id(row_id)
        now = _now(now_ms)
        sql = (f"UPDATE {self.TABLE} SET {which}_count = {which}_count + 1, "
               "updated_at = ? WHERE id = ?")
        with write_txn(self.conn):
            self.conn.execute(sql, (now, row_id))
            return self.conn.changes() > 0

    def bump_success(self, row_id: int, *, now_ms: int | None = None) -> bool:
        """Add 1 to ``success_count`` (and refresh ``updated_at``); True if it exists."""
        return self._bump("success", row_id, now_ms)

    def bump_failure(self, row_id: int, *, now_ms: int | None = None) -> bool:
        """Add 1 to ``failure_count`` (and refresh ``updated_at``); True if it exists."""
        return self._bump("failure", row_id, now_ms)

    def count_active(self) -> int:
        """Return the number of active rows."""
        sql = f"SELECT count(*) FROM {self.TABLE} WHERE status = 'active'"
        return self.conn.execute(sql).fetchall()[0][0]

    def count_all(self) -> int:
        """Return the number of rows of any status."""
        return self.conn.execute(f"SELECT count(*) FROM {self.TABLE}").fetchall()[0][0]


class LessonStore(CountedTable):
    """Create, read, recall and deprecate lessons.

    Args:
        conn: a connection from ``schema.open_database`` (migrated to >= v3).

    Every method raises :class:`ValidationError` for bad input; none raises for text
    content of a query.
    """

    TABLE = "lessons"
    COUNTERS = ("success", "failure")

    def __init__(self, conn: apsw.Connection) -> None:
        self.conn = conn

    def create(
        self,
        activation: str,
        principle: str,
        *,
        parent_ids: Sequence[int],
        tags: Sequence[str] | None = None,
        working_dir: str | None = None,
        now_ms: int | None = None,
    ) -> Lesson:
        """Insert an active lesson with zero counters and return it.

        Validation: activation 1..240 and principle 1..800 chars after
        trimming (too long is an error, never cut); tags per :func:`clean_tags`
        (invalid/excess dropped silently); ``parent_ids`` a non-empty list of positive
        ints (de-duplicated); ``working_dir`` trimmed, blank -> None.

        Raises:
            ValidationError: fields ``activation``, ``principle``, ``tags``,
                ``parentIds``, ``workingDir``, ``nowMs``.
        """
        activation = validate_activation(activation)
        principle = validate_principle(principle)
        tag_list = clean_tags(tags)
        parents = validate_id_list(parent_ids, "parentIds", required=True)
        working_dir = optional_text(working_dir, "workingDir")
        now = _now(now_ms)
        with write_txn(self.conn):
            self.conn.execute(_SQL_INSERT, (activation, principle, encode_json(tag_list),
                                            encode_json(parents), working_dir, now, now))
            lesson_id = self.conn.last_insert_rowid()
            return _row(self.conn.execute(_SQL_GET, (lesson_id,)).fetchall()[0])

    def get(self, lesson_id: int) -> Lesson | None:
        """Return the lesson with this id, any status, or None.

        Raises:
            ValidationError: field ``id`` (not a positive int).
        """
        rows = self.conn.execute(_SQL_GET, (require_positive_id(lesson_id),)).fetchall()
        return _row(rows[0]) if rows else None

    def recall(
        self,
        query: str,
        *,
        k: int = RECALL_K_DEFAULT,
        include_deprecated: bool = False,
        working_dir: str | None = None,
        score_blend: float | None = None,
    ) -> list[Lesson]:
        """Return up to ``k`` lessons matching ``query`` by BM25, best first.

        Args:
            query: any user text, at most 500 chars after trimming; nothing indexable
                -> ``[]``. Tokens match exactly (after Porter stemming), no prefix.
            k: clamped into [1, 10] (default 2, ``memory.lessons.recallK``).
            include_deprecated: also return deprecated rows (default: active only).
            working_dir: when given, only global lessons and that directory's.
            score_blend: when given, a BM25 pool of ``k × 3`` is reordered by votes and
                outcomes (:func:`vote_rerank`, anchor §7.2).

        Each lesson's ``score`` is in [0, 1], strongest hit 1.0.

        Raises:
            ValidationError: fields ``query``, ``k``, ``workingDir``.
        """
        query = validate_query(query)
        k = _clamp(k, "k", 1, RECALL_K_MAX)
        working_dir = optional_text(working_dir, "workingDir")
        pool = k if score_blend is None else k * RERANK_POOL
        hits = fts_recall_rows(self.conn, table="lessons", cols=_COLS, query=query, k=pool,
                               include_deprecated=bool(include_deprecated),
                               working_dir=working_dir)
        if score_blend is not None:
            hits = vote_rerank(self.conn, "lessons", hits, k, score_blend)
        return [_row(r, s) for r, s in hits]

    def list_index(self, limit: int = INDEX_LIMIT_DEFAULT) -> list[Lesson]:
        """Return active lessons, ``updated_at DESC, id DESC``; ``limit`` clamped into
        [1, 100] (default 20).

        Raises:
            ValidationError: field ``limit``.
        """
        limit = _clamp(limit, "limit", 1, INDEX_LIMIT_MAX)
        return [_row(r) for r in self.conn.execute(_SQL_INDEX, (limit,))]

    def mark_deprecated(self, lesson_id: int, reason: str = "manual", *,
                        now_ms: int | None = None) -> bool:
        """Deprecate an active lesson (``deprecated_at = updated_at = now``).

        Idempotent: returns True only when an active row was flipped; a deprecated or
        unknown id returns False and changes nothing. ``reason`` (``downvoted``,
        ``aged_out``, ``overflow``, ``manual`` ...) is logged, not stored.

        Raises:
            ValidationError: fields ``id``, ``nowMs``.
        """
        lesson_id = require_positive_id(lesson_id)
        now = _now(now_ms)
        with write_txn(self.conn):
            self.conn.execute(_SQL_DEPRECATE, (now, now, lesson_id))
            flipped = self.conn.changes() > 0
        if flipped:
            log.info("memory.lesson_deprecated", id=lesson_id, reason=str(reason))
        return flipped

