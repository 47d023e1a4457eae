"""What the distilled stores (lessons, procedures) share: limits, validation, recall and
the base class :class:`DistilledStore`.

A distilled row is an *activation* (one sentence: when it applies) plus a body (a
lesson's principle, a procedure's steps), tagged, with counters and the ids it was
distilled from. Both tables have ``status`` (``active`` | ``deprecated``),
``success_count``, ``failure_count``, ``working_dir``, ``created_at``, ``updated_at`` and
``deprecated_at`` columns and an FTS5 table ``<table>_fts`` kept in sync by triggers
(schema v3 on; ``vote_score`` from v7).

* Recall is keyword-only: user text becomes a safe MATCH expression with **exact**
  (non-prefix) quoted tokens (``fts.build_match_query(prefix=False)``), OR joined,
  ranked by ``bm25()``. Text with nothing indexable recalls ``[]``; hostile text never
  raises.
* Deprecation is a status flip (``status='deprecated'``, ``deprecated_at``); nothing is
  deleted, deprecated rows stay readable by id but leave query recall and the index.

Times are Unix milliseconds; every write goes through ``schema.write_txn``.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, Generic, TypeVar, cast

import apsw
import msgspec
from structlog.typing import FilteringBoundLogger

from .columns import encode_json
from .errors import ValidationError, optional_text, require_int, require_positive_id
from .errors import now_ms as _now
from .fts import build_match_query, normalise_bm25
from .records import ACTIVATION_MAX_CHARS
from .recall import compile_terms, document_terms
from .sql import Connection, dialect, ids_binding, in_ids, write_txn

MAX_TAGS = 12
TAG_MAX_CHARS = 40
MAX_QUERY_CHARS = 500
RECALL_K_DEFAULT, RECALL_K_MAX = 2, 10
INDEX_LIMIT_DEFAULT, INDEX_LIMIT_MAX = 20, 100
STATUSES = ("active", "deprecated")

RERANK_POOL = 3
"""BM25 pool of a vote-aware recall: ``k × 3`` rows are reordered, ``k`` kept."""

INT_LIST = msgspec.json.Decoder(list[int])
"""Decoder of a JSON id-list column (``parent_ids`` ...), for :func:`decode_json_list`."""
STR_LIST = msgspec.json.Decoder(list[str])
"""Decoder of the JSON ``tags`` column, for :func:`decode_json_list`."""

_TAG_RE = re.compile(r"[a-z0-9][a-z0-9_-]*")


# -- validation ---------------------------------------------------------------------------


def bounded_text(value: object, field: str, max_chars: int) -> str:
    """Return ``value`` trimmed; 1..``max_chars`` chars after trimming, never cut.

    Raises:
        ValidationError: ``field`` (not a string, empty, too long).
    """
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
    return bounded_text(value, field, ACTIVATION_MAX_CHARS)


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
    """Normalise lesson/procedure tags the lenient way.

    ``None`` -> ``[]``. Each entry is trimmed and lower-cased; entries that are not
    strings, are empty, longer than ``max_chars`` (default 40) or do not fully match
    ``pattern`` (default ``[a-z0-9][a-z0-9_-]*``) are **silently dropped**, duplicates
    too (first kept), and only the first ``max_items`` (default 12) survivors are kept.

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


# -- JSON columns -------------------------------------------------------------------------


# -- recall -------------------------------------------------------------------------------


FTS_COLUMNS = {"lessons": ("activation", "principle", "tags"),
               "procedures": ("activation", "steps", "tags")}
"""The columns each table's keyword index holds (its FTS5 table's, in order)."""


def index_distilled(conn: Connection, table: str, row_id: int) -> None:
    """Keep a lesson's or procedure's keyword index after its row is written: FTS5's
    triggers do it on SQLite; on PostgreSQL its columns' tokens are written
    (:func:`actors.store.pg.search.index_row`)."""
    if dialect(conn) != "postgres":
        return
    from .pg.search import index_row

    columns = FTS_COLUMNS[table]
    found = conn.execute(f"SELECT {', '.join(columns)} FROM {table} WHERE id = ?",
                         (row_id,)).fetchall()
    if found:
        index_row(conn, table, row_id,
                  [document_terms(str(v or "")) for v in found[0]])


def fts_recall_rows(
    conn: Connection,
    *,
    table: str,
    cols: str,
    query: str,
    k: int,
    include_deprecated: bool,
    working_dir: str | None,
) -> list[tuple[apsw.SQLiteValues, float]]:
    """Run a keyword recall over ``<table>_fts`` and return ``(row, score)`` pairs.

    ``table`` and ``cols`` come from class constants (``lessons`` / ``procedures``),
    never from input. ``query`` is validated by the caller; it is turned into exact
    quoted tokens OR-joined (``build_match_query(prefix=False)``), ``[]`` when nothing
    indexable remains. Active rows only unless ``include_deprecated``; with
    ``working_dir`` only global rows and rows of that directory. Order BM25 best first,
    then id; scores normalised to [0, 1] (``fts.normalise_bm25``).
    """
    match = build_match_query(query, prefix=False)
    if match is None:
        return []
    if dialect(conn) == "postgres":
        return _pg_recall_rows(conn, table=table, cols=cols, match=match, k=k,
                               include_deprecated=include_deprecated,
                               working_dir=working_dir)
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
    scores = normalise_bm25([cast(float, r[-1]) for r in rows])
    return [(r[:-1], s) for r, s in zip(rows, scores)]


def _pg_recall_rows(conn: Connection, *, table: str, cols: str, match: str, k: int,
                    include_deprecated: bool, working_dir: str | None
                    ) -> list[tuple[Any, float]]:
    """:func:`fts_recall_rows` on PostgreSQL: the same BM25 (:mod:`.pg.search`), the
    same order (BM25, then id), the same normalised scores."""
    from .pg.search import pool

    query = compile_terms(match.split(" OR "))
    if query is None:
        return []
    where, args = "", []
    if not include_deprecated:
        where += " AND t.status = 'active'"
    if working_dir is not None:
        where += " AND (t.working_dir IS NULL OR t.working_dir = ?)"
        args.append(working_dir)
    rows = [r for r in pool(conn, list(query.phrases), "|", 1 << 30, cols=cols, where=where,
                            args=args, table=table, alias="t", context="")
            if r[4] is not None][:k]
    scores = normalise_bm25([cast(float, r[1]) for r in rows])
    return [(tuple(r[4:]), s) for r, s in zip(rows, scores)]


def vote_rerank(conn: Connection, table: str, hits: list[tuple[apsw.SQLiteValues, float]],
                k: int, blend: float) -> list[tuple[apsw.SQLiteValues, float]]:
    """Order a BM25 pool by ``blend × vote_score + (1 − blend) × (success_count −
    failure_count)``, descending, ties by BM25 rank; keep ``k``.

    ``hits`` are :func:`fts_recall_rows` pairs whose row starts with the id. ``blend``
    is clamped into [0, 1]; ``table`` is a class constant. BM25 magnitude does not
    enter the score.
    """
    if not hits:
        return hits
    blend = min(1.0, max(0.0, float(blend)))
    ids = [row[0] for row, _ in hits]
    signals = {r[0]: blend * r[1] + (1 - blend) * (r[2] - r[3]) for r in conn.execute(
        f"SELECT id, vote_score, success_count, failure_count FROM {table}"
        f" WHERE {in_ids(conn, 'id')}", (ids_binding(conn, ids),))}
    order = sorted(range(len(hits)), key=lambda i: (-signals.get(ids[i], 0.0), i))
    return [hits[i] for i in order[:k]]


# -- the base store -----------------------------------------------------------------------

RowT = TypeVar("RowT")


class DistilledStore(ABC, Generic[RowT]):
    """Read, recall, count, bump and deprecate the rows of one distilled table.

    Subclasses set the class constants (never input): ``TABLE`` (``lessons`` |
    ``procedures``), ``COLS`` (the ``t.``-prefixed select list, id first), ``COUNTERS``
    (the ``<which>_count`` columns :meth:`_bump` may touch), ``DEPRECATED_EVENT`` (the
    log event of a deprecation) and ``LOG`` (their module's logger), and implement
    :meth:`_row` (a ``COLS`` row plus an optional score -> the record Struct).

    Args:
        conn: a connection from ``schema.open_database`` (migrated to >= v3).

    Methods raise :class:`ValidationError` for bad input; query text never raises.
    """

    TABLE: ClassVar[str] = ""
    COLS: ClassVar[str] = ""
    COUNTERS: ClassVar[tuple[str, ...]] = ()
    DEPRECATED_EVENT: ClassVar[str] = ""
    LOG: ClassVar[FilteringBoundLogger]
    _sql_get: ClassVar[str]
    _sql_index: ClassVar[str]
    _sql_deprecate: ClassVar[str]

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls._sql_get = f"SELECT {cls.COLS} FROM {cls.TABLE} t WHERE t.id = ?"
        cls._sql_index = (
            f"SELECT {cls.COLS} FROM {cls.TABLE} t WHERE t.status = 'active'"
            " ORDER BY t.updated_at DESC, t.id DESC LIMIT ?"
        )
        cls._sql_deprecate = (
            f"UPDATE {cls.TABLE} SET status = 'deprecated', deprecated_at = ?,"
            " updated_at = ? WHERE id = ? AND status = 'active'"
        )

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    @staticmethod
    @abstractmethod
    def _row(row: Sequence[Any], score: float | None = None) -> RowT:
        """A ``COLS`` row (and its recall score, if any) as the table's record Struct."""

    def _insert(self, sql: str, args: tuple[object, ...]) -> RowT:
        """Run one INSERT in a write transaction and return the new row, read back."""
        with write_txn(self.conn):
            self.conn.execute(sql, args)
            row_id = self.conn.last_insert_rowid()
            index_distilled(self.conn, self.TABLE, row_id)
            return self._row(self.conn.execute(self._sql_get, (row_id,)).fetchall()[0])

    def _get(self, row_id: int) -> RowT | None:
        rows = self.conn.execute(self._sql_get, (require_positive_id(row_id),)).fetchall()
        return self._row(rows[0]) if rows else None

    def recall(
        self,
        query: str,
        *,
        k: int = RECALL_K_DEFAULT,
        include_deprecated: bool = False,
        working_dir: str | None = None,
        score_blend: float | None = None,
    ) -> list[RowT]:
        """Return up to ``k`` rows matching ``query`` by BM25, best first.

        Args:
            query: any user text, at most 500 chars after trimming; nothing indexable
                -> ``[]``. Tokens match exactly (after Porter stemming), no prefix.
            k: clamped into [1, 10] (default 2, ``memory.lessons.recallK`` /
                ``memory.procedures.recallK``).
            include_deprecated: also return deprecated rows (default: active only).
            working_dir: when given, only global rows and that directory's.
            score_blend: when given, a BM25 pool of ``k × 3`` is reordered by votes and
                outcomes (:func:`vote_rerank`).

        Each row's ``score`` is in [0, 1], strongest hit 1.0.

        Raises:
            ValidationError: fields ``query``, ``k``, ``workingDir``.
        """
        query = validate_query(query)
        k = _clamp(k, "k", 1, RECALL_K_MAX)
        working_dir = optional_text(working_dir, "workingDir")
        pool = k if score_blend is None else k * RERANK_POOL
        hits = fts_recall_rows(self.conn, table=self.TABLE, cols=self.COLS, query=query,
                               k=pool, include_deprecated=bool(include_deprecated),
                               working_dir=working_dir)
        if score_blend is not None:
            hits = vote_rerank(self.conn, self.TABLE, hits, k, score_blend)
        return [self._row(r, s) for r, s in hits]

    def list_index(self, limit: int = INDEX_LIMIT_DEFAULT) -> list[RowT]:
        """Return active rows, ``updated_at DESC, id DESC``; ``limit`` clamped into
        [1, 100] (default 20).

        Raises:
            ValidationError: field ``limit``.
        """
        limit = _clamp(limit, "limit", 1, INDEX_LIMIT_MAX)
        return [self._row(r) for r in self.conn.execute(self._sql_index, (limit,))]

    def _deprecate(self, row_id: int, reason: str, now_ms: int | None) -> bool:
        """Flip an active row to deprecated (``deprecated_at = updated_at = now``); True
        only when an active row was flipped. ``reason`` is logged, not stored."""
        row_id = require_positive_id(row_id)
        now = _now(now_ms)
        with write_txn(self.conn):
            self.conn.execute(self._sql_deprecate, (now, now, row_id))
            flipped = self.conn.changes() > 0
        if flipped:
            self.LOG.info(self.DEPRECATED_EVENT, id=row_id, reason=str(reason))
        return flipped

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
        """Add 1 to ``success_count`` (and refresh ``updated_at``); True if it exists.

        Raises:
            ValidationError: fields ``id``, ``nowMs``.
        """
        return self._bump("success", row_id, now_ms)

    def bump_failure(self, row_id: int, *, now_ms: int | None = None) -> bool:
        """Add 1 to ``failure_count`` (and refresh ``updated_at``); True if it exists.

        Raises:
            ValidationError: fields ``id``, ``nowMs``.
        """
        return self._bump("failure", row_id, now_ms)

    def count_active(self) -> int:
        """Return the number of active rows."""
        sql = f"SELECT count(*) FROM {self.TABLE} WHERE status = 'active'"
        return cast(int, self.conn.execute(sql).fetchall()[0][0])

    def count_all(self) -> int:
        """Return the number of rows of any status."""
        return cast(int, self.conn.execute(f"SELECT count(*) FROM {self.TABLE}").fetchall()[0][0])
