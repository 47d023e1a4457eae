"""MemoryStore: freeform notes with FTS5/BM25 recall.

Notes live in ``memories``; ``memories_fts`` mirrors ``aa_index_text(content)`` through
triggers, so the index can never go stale after an update or delete. Recall
(``recall`` module): a safe MATCH expression without stopwords, a BM25 pool, term
coverage and same-session context; the strongest hit scores exactly 1.0.

Bounds: at most ``max_entries`` rows (default 1000); after every
insert the surplus is deleted in the same transaction, never the row just written, so
the cap holds after every commit. Eviction order: ``"utility"`` (default; keeps more
recall than FIFO) the least recalled first, ``recall_count, COALESCE(last_recalled_at,
0), updated_at, id`` ascending; ``"fifo"`` the oldest ``(updated_at, id)`` first. A note
equal to an active one after ``fts.content_key``, or near-identical to one
(``dedup.near_match``: token Jaccard >= 0.85), merges into it: same id,
tags united, ``updated_at`` refreshed; unless it negates or retracts it (a correction,
``corrections``): then both are kept, the new one ``SUPERSEDES`` the old, and recall
ranks a superseded note after the notes that are not.

Every write goes through ``schema.write_txn`` (``BEGIN IMMEDIATE``, or a savepoint
inside a caller's transaction). Times are Unix milliseconds.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from typing import Any, cast

import msgspec

from .cold import drop_derived
from .columns import decode_json_list, encode_json
from .corrections import link_correction, newest_first
from .dedup import NEAR_THRESHOLD, near_match
from .errors import (
    ValidationError,
    blank,
    optional_text,
    require_int,
    require_positive_id,
    string_list,
)
from .errors import now_ms as _now
from .fts import content_key
from .recall import build_recall_query, index_note, ranked_search, register_recall_functions
from .records import Note
from .sql import Connection, dialect, ids_binding, in_ids, write_txn

__all__ = [
    "DEFAULT_MAX_ENTRIES",
    "EVICTION_ORDERS",
    "MAX_CONTENT_CHARS",
    "MAX_QUERY_CHARS",
    "MAX_TAGS",
    "MAX_TAG_CHARS",
    "MemoryStore",
    "Note",
    "validate_content",
    "validate_tags",
]

#: Limits of notes and of the requests over them.
MAX_CONTENT_CHARS = 4000
MAX_TAGS = 16
MAX_TAG_CHARS = 40
MAX_QUERY_CHARS = 500
DEFAULT_MAX_ENTRIES = 1000
K_MIN, K_MAX, K_DEFAULT = 1, 50, 5
LIST_MAX = 200
SOURCES = ("agent", "user")
SCOPES = ("all", "project")
ARCHIVED_FILTERS = ("active", "archived", "all")

_TAGS_DECODER = msgspec.json.Decoder(list[str])


def validate_content(content: object, max_chars: int = MAX_CONTENT_CHARS) -> str:
    """Return ``content`` trimmed; it must be non-empty and at most ``max_chars``
    chars after trimming (never truncated).

    Raises:
        ValidationError: field ``content``.
    """
    if not isinstance(content, str):
        raise ValidationError("content", "must be a string")
    content = content.strip()
    if blank(content):
        raise ValidationError("content", "must not be empty (nothing visible)")
    if len(content) > max_chars:
        raise ValidationError(
            "content", f"must be at most {max_chars} chars (got {len(content)})"
        )
    return content


def validate_tags(tags: object) -> list[str]:
    """Return tags trimmed and de-duplicated (first occurrence wins, case kept).

    ``None`` -> ``[]``; otherwise a list/tuple of at most 16 strings (counted before
    de-duplication), each non-empty after trimming and at most 40 chars.

    Raises:
        ValidationError: field ``tags``.
    """
    return string_list(tags, "tags", max_items=MAX_TAGS, max_chars=MAX_TAG_CHARS)


def _decode_tags(raw: str | None) -> list[str]:
    return decode_json_list(raw, _TAGS_DECODER)


_COLS = (
    "m.id, m.content, m.tags, m.source, m.scope, m.working_dir, m.created_at,"
    " m.updated_at, m.archived, m.origin, m.session_id, m.turn_id, m.recall_count,"
    " m.last_recalled_at"
)
_SQL_GET = f"SELECT {_COLS} FROM memories m WHERE m.id = ?"
_SQL_INSERT = (
    "INSERT INTO memories (content, content_key, tags, source, scope, working_dir,"
    " session_id, created_at, updated_at, origin, turn_id, batch_id)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SQL_MERGE = (
    "UPDATE memories SET tags = ?, updated_at = {greatest}(updated_at, ?),"
    " recall_count = recall_count + 1 WHERE id = ?"
)
#: The larger of two values: SQLite's two-argument max(), PostgreSQL's GREATEST.
_GREATEST = {"sqlite": "max", "postgres": "GREATEST"}
#: Eviction orders (``ORDER BY`` of the rows to delete first), by constructor name.
EVICTION_ORDERS: dict[str, str] = {
    "utility": "vote_score, recall_count, COALESCE(last_recalled_at, 0), updated_at, id",
    "fifo": "updated_at, id",
}
_SQL_EVICT = (
    "DELETE FROM memories WHERE id IN ("
    " SELECT id FROM memories WHERE id <> ? ORDER BY {order} LIMIT ?)"
)
_SQL_BUMP = (
    "UPDATE memories SET recall_count = recall_count + 1, last_recalled_at = ?"
    " WHERE {ids}"
)
#: Every required tag (a JSON array) is among the note's.
_SQL_TAGS_ALL = {
    "sqlite": (" AND NOT EXISTS (SELECT 1 FROM json_each(?) AS req"
               " WHERE req.value NOT IN (SELECT value FROM json_each(m.tags)))"),
    "postgres": " AND m.tags::jsonb @> ?::jsonb",
}
_SQL_SCOPE_PROJECT = " AND m.working_dir = ?"
_SQL_SCOPE_VISIBLE = " AND (m.scope = 'all' OR m.working_dir = ?)"
_SQL_NEWEST = " ORDER BY m.updated_at DESC, m.id DESC LIMIT ?"
_SQL_ARCHIVED = {"active": " WHERE m.archived = 0", "archived": " WHERE m.archived = 1", "all": ""}
def _row(row: Sequence[Any], score: float | None = None) -> Note:
    """Map a ``_COLS`` row (plus optional score) to a Note."""
    return Note(row[0], row[1], _decode_tags(row[2]), row[3], row[4], row[5], row[6], row[7],
                score, bool(row[8]), row[9], row[10], row[11], row[12], row[13])


class MemoryStore:
    """CRUD, eviction and BM25 recall over ``memories``.

    Args:
        conn: a connection from ``schema.open_database`` (migrated).
        max_entries: hard row cap (``memory.notes.maxEntries``, default 1000).
        max_content_chars: per-note ceiling (``memory.notes.maxContentChars``, 4000).
        dedup: merge identical and near-identical notes; default on.
        near_threshold: token Jaccard in [0, 1] from which a note counts as
            near-identical (default 0.85); None merges exact duplicates only.
        eviction: ``"utility"`` (default: least recalled first) or ``"fifo"``
            (oldest ``updated_at`` first), see :data:`EVICTION_ORDERS`.

    Raises ``ValueError`` for a non-positive cap, a threshold outside [0, 1] or an
    unknown eviction order; methods raise ``ValidationError``.
    """

    def __init__(
        self,
        conn: Connection,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_content_chars: int = MAX_CONTENT_CHARS,
        dedup: bool = True,
        near_threshold: float | None = NEAR_THRESHOLD,
        eviction: str = "utility",
    ) -> None:
        for name, value in (("max_entries", max_entries), ("max_content_chars", max_content_chars)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer")
        if near_threshold is not None and (
            isinstance(near_threshold, bool)
            or not isinstance(near_threshold, (int, float))
            or not 0.0 <= near_threshold <= 1.0
        ):
            raise ValueError("near_threshold must be a number in [0, 1] or None")
        if eviction not in EVICTION_ORDERS:
            raise ValueError(f"eviction must be one of {sorted(EVICTION_ORDERS)}")
        self.conn = conn
        self.max_entries = max_entries
        self.max_content_chars = max_content_chars
        self.dedup = bool(dedup)
        self.near_threshold = None if near_threshold is None else float(near_threshold)
        self.eviction = eviction
        self._sql_evict = _SQL_EVICT.format(order=EVICTION_ORDERS[eviction])
        #: Notes this store deleted so far (evictions and forgets): the memory actor
        #: compares it around a write to know whether its vector cache must be dropped.
        self.deletions = 0
        register_recall_functions(conn)

    # -- writes ---------------------------------------------------------------------

    def store(
        self,
        content: str,
        *,
        tags: list[str] | None = None,
        source: str = "agent",
        scope: str = "all",
        working_dir: str | None = None,
        session_id: str | None = None,
        now_ms: int | None = None,
        origin: str | None = None,
        turn_id: str | None = None,
        batch_id: str | None = None,
    ) -> Note:
        """Store a note (or merge it into an identical one) and return it. ``origin``
        and ``turn_id`` record who wrote it and in which turn (:class:`Note`; a merge
        keeps the existing note's); ``batch_id`` names the writer's batch (one client
        connection, one import) for a note written outside a session, so that recall's
        context step finds the notes written before and after it (schema v10).

        Validation: content trimmed, 1..max_content_chars chars; tags per
        :func:`validate_tags`; source ``agent|user``; scope ``all|project``; scope
        ``project`` needs a non-empty ``working_dir``; ``working_dir`` / ``session_id``
        trimmed, empty -> None.

        In one transaction: merge into an active note of the same scope and working
        dir with the same :func:`content_key` or a near-identical text
        (``dedup.near_match``; tags united, at most 16, existing first;
        ``updated_at`` = now; ``recall_count`` + 1; content and id kept), else insert
        and evict the surplus above ``max_entries`` in the store's eviction order
        (never the new row). A near-identical text that negates or retracts the note it
        matches ("Is not allergic …", "No longer works …") is inserted, never merged,
        and ``SUPERSEDES`` it (link origin ``correction``).

        Raises:
            ValidationError: fields ``content``, ``tags``, ``source``, ``scope``,
                ``workingDir``, ``sessionId``, ``nowMs``.
        """
        content = validate_content(content, self.max_content_chars)
        tags = validate_tags(tags)
        if source not in SOURCES:
            raise ValidationError("source", "must be 'agent' or 'user'")
        if scope not in SCOPES:
            raise ValidationError("scope", "must be 'all' or 'project'")
        working_dir = optional_text(working_dir, "workingDir")
        session_id = optional_text(session_id, "sessionId")
        batch_id = optional_text(batch_id, "batchId")
        if scope == "project" and working_dir is None:
            raise ValidationError("workingDir", "is required when scope is 'project'")
        now = _now(now_ms)
        key = content_key(content)
        conn = self.conn
        with write_txn(conn):
            found = (near_match(conn, content, key, scope, working_dir, self.near_threshold)
                     if self.dedup else None)
            if found is not None and not found.corrects:
                merged = _decode_tags(found.tags)
                merged += [t for t in tags if t not in merged][: MAX_TAGS - len(merged)]
                conn.execute(_SQL_MERGE.format(greatest=_GREATEST[dialect(conn)]),
                             (encode_json(merged), now, found.id))
                return self._get(found.id)
            conn.execute(
                _SQL_INSERT,
                (content, key, encode_json(tags), source, scope, working_dir, session_id, now,
                 now, origin, turn_id, batch_id),
            )
            note_id = conn.last_insert_rowid()
            index_note(conn, note_id, content)
            if found is not None:  # a correction is linked to what it corrects
                link_correction(conn, note_id, found.id, now)
            self._evict(note_id)
            return self._get(note_id)

    def _get(self, note_id: int) -> Note:
        return _row(self.conn.execute(_SQL_GET, (note_id,)).fetchall()[0])

    def _evict(self, keep_id: int) -> int:
        """Delete the rows above the cap in eviction order, never ``keep_id``; return
        the count."""
        excess = self.count() - self.max_entries
        if excess <= 0:
            return 0
        self.conn.execute(self._sql_evict, (keep_id, excess))
        evicted = self.conn.changes()
        self.deletions += evicted
        return evicted

    def forget(self, note_id: int) -> bool:
        """Delete a note (FTS row, vectors and links follow, and any lesson or procedure
        distilled from it, :func:`cold.drop_derived`); True if it existed.

        Raises:
            ValidationError: field ``id`` (not a positive int).
        """
        note_id = require_positive_id(note_id)
        with write_txn(self.conn):
            self.conn.execute("DELETE FROM memories WHERE id = ?", (note_id,))
            deleted = self.conn.changes() > 0
            if deleted:  # what was distilled from it goes too (cold.drop_derived)
                drop_derived(self.conn, [note_id])
        self.deletions += deleted
        return deleted

    def set_archived(self, note_id: int, archived: bool = True, *, now_ms: int | None = None) -> bool:
        """Set or clear the archive flag (``updated_at`` = now); True if the note exists.

        Archived notes stay readable by id and reachable by recall, but leave
        :meth:`list_index` and ``list(archived="active")``.
        """
        note_id = require_positive_id(note_id)
        now = _now(now_ms)
        with write_txn(self.conn):
            self.conn.execute(
                "UPDATE memories SET archived = ?, updated_at = ? WHERE id = ?",
                (int(bool(archived)), now, note_id),
            )
            return self.conn.changes() > 0

    def bump_recall(self, ids: Iterable[int], now_ms: int | None = None) -> int:
        """Add 1 to ``recall_count`` and stamp ``last_recalled_at`` for each id.

        Unknown ids are ignored; returns the number of rows updated.
        """
        id_list = [require_positive_id(i) for i in ids]
        if not id_list:
            return 0
        now = _now(now_ms)
        with write_txn(self.conn):
            self.conn.execute(_SQL_BUMP.format(ids=in_ids(self.conn, "id")),
                              (now, ids_binding(self.conn, sorted(set(id_list)))))
            return self.conn.changes()

    # -- reads ----------------------------------------------------------------------

    def recall(
        self,
        query: str,
        *,
        k: int = K_DEFAULT,
        scope: str | None = None,
        working_dir: str | None = None,
        tags: list[str] | None = None,
        bump: bool = True,
        now_ms: int | None = None,
    ) -> list[Note]:
        """Return up to ``k`` notes matching ``query``, best first (``recall`` module).

        Args:
            query: any user text, at most 500 chars after trimming; text with nothing
                indexable (empty, punctuation, emoji) returns ``[]``.
            k: clamped into [1, 50] (default 5, ``memory.notes.recallDefaultK``).
            scope: ``"project"`` -> only notes of ``working_dir`` (``[]`` without
                one); ``"all"`` -> every note; ``None`` -> global notes plus those of
                ``working_dir`` when given, else every note.
            tags: required tags, all must be present (AND).
            bump: add 1 to ``recall_count`` / stamp ``last_recalled_at`` of the hits.
            now_ms: bump time, Unix ms.

        Ranking (``recall.ranked_search``): BM25 of the best ``max(4k, 32)`` hits x
        the fraction of query terms a note holds, + half the score of each note of
        the same session up to two ids away, x 0.7 for a note ending in a question
        mark. ``score`` = relevance / best: in [0, 1],
        strongest 1.0. Archived notes are included; every hit matches a query term.
        A note superseded by another note (a correction) comes after the notes
        that are not (``corrections.newest_first``).

        Raises:
            ValidationError: fields ``query``, ``k``, ``scope``, ``workingDir``,
                ``tags``.
        """
        if not isinstance(query, str):
            raise ValidationError("query", "must be a string")
        query = query.strip()
        if len(query) > MAX_QUERY_CHARS:
            raise ValidationError("query", f"must be at most {MAX_QUERY_CHARS} chars")
        k = min(K_MAX, max(K_MIN, require_int(k, "k")))
        filters = self._filters(scope, working_dir, tags)
        rq = build_recall_query(query)
        if rq is None or filters is None:
            return []
        where, args = filters
        hits = ranked_search(self.conn, rq, k, cols=_COLS, where=where, args=args)
        notes = newest_first(self.conn, [_row(r, s) for r, s in hits])
        if bump and notes:
            self.bump_recall([n.id for n in notes], now_ms)
        return notes

    def _filters(self, scope: str | None, working_dir: str | None,
                 tags: list[str] | None) -> tuple[str, list[object]] | None:
        """The ``where`` / ``args`` of recall's scope, working-dir and tag filters; None
        when nothing can match (``scope="project"`` without a working dir).

        Raises:
            ValidationError: fields ``scope``, ``workingDir``, ``tags``.
        """
        if scope is not None and scope not in SCOPES:
            raise ValidationError("scope", "must be 'all' or 'project'")
        working_dir = optional_text(working_dir, "workingDir")
        required = validate_tags(tags)
        if scope == "project" and working_dir is None:
            return None
        where = ""
        args: list[object] = []
        if scope == "project":
            where += _SQL_SCOPE_PROJECT
            args.append(working_dir)
        elif scope is None and working_dir is not None:
            where += _SQL_SCOPE_VISIBLE
            args.append(working_dir)
        if required:
            where += _SQL_TAGS_ALL[dialect(self.conn)]
            args.append(encode_json(required))
        return where, args

    def visible(self, ids: Iterable[int], *, scope: str | None = None,
                working_dir: str | None = None,
                tags: list[str] | None = None) -> dict[int, Note]:
        """The notes of ``ids`` that pass recall's filters (archived included), by id:
        hybrid recall's meaning-only candidates get the keyword query's filters.

        Raises:
            ValidationError: fields ``scope``, ``workingDir``, ``tags``.
        """
        filters = self._filters(scope, working_dir, tags)
        wanted = [i for i in ids if isinstance(i, int) and i > 0]
        if filters is None or not wanted:
            return {}
        where, args = filters
        sql = f"SELECT {_COLS} FROM memories m WHERE {in_ids(self.conn, 'm.id')}{where}"
        return {r[0]: _row(r) for r in self.conn.execute(
            sql, (ids_binding(self.conn, wanted), *args))}

    def get(self, note_id: int) -> Note | None:
        """Return the note with this id (archived included) or None.

        Raises:
            ValidationError: field ``id`` (not a positive int).
        """
        rows = self.conn.execute(_SQL_GET, (require_positive_id(note_id),)).fetchall()
        return _row(rows[0]) if rows else None

    def list(self, limit: int = 50, archived: str = "active") -> list[Note]:
        """Return notes newest first (``updated_at DESC, id DESC``).

        ``limit`` is clamped into [1, 200]; ``archived`` is ``"active"`` (default),
        ``"archived"`` or ``"all"``.

        Raises:
            ValidationError: fields ``limit``, ``archived``.
        """
        limit = min(LIST_MAX, max(1, require_int(limit, "limit")))
        if archived not in ARCHIVED_FILTERS:
            raise ValidationError("archived", "must be 'active', 'archived' or 'all'")
        sql = f"SELECT {_COLS} FROM memories m{_SQL_ARCHIVED[archived]}{_SQL_NEWEST}"
        return [_row(r) for r in self.conn.execute(sql, (limit,))]

    def list_index(
        self,
        limit: int = 20,
        *,
        exclude_ids: Iterable[int] = (),
        working_dir: str | None = None,
    ) -> builtins.list[Note]:
        """Return the most recently updated non-archived notes (``### memory-index``).

        Order ``updated_at DESC, id DESC`` (the renderer re-sorts by id); ``limit``
        clamped into [1, 200] (``memory.index.limit`` default 20); ids in
        ``exclude_ids`` (already in ``### recalled``) are skipped before the limit
        applies. With ``working_dir``: global notes plus that directory's notes.
        """
        limit = min(LIST_MAX, max(1, require_int(limit, "limit")))
        working_dir = optional_text(working_dir, "workingDir")
        excluded = sorted({require_int(i, "excludeIds") for i in exclude_ids})
        sql = f"SELECT {_COLS} FROM memories m WHERE m.archived = 0"
        args: list[object] = []
        if excluded:
            sql += f" AND NOT ({in_ids(self.conn, 'm.id')})"
            args.append(ids_binding(self.conn, excluded))
        if working_dir is not None:
            sql += _SQL_SCOPE_VISIBLE
            args.append(working_dir)
        sql += _SQL_NEWEST
        args.append(limit)
        return [_row(r) for r in self.conn.execute(sql, tuple(args))]

    def written_between(self, start_ms: int, end_ms: int, *, limit: int = 3,
                        working_dir: str | None = None) -> builtins.list[Note]:
        """Non-archived notes written (``created_at``, Unix ms) in ``[start_ms, end_ms)``,
        newest first, at most ``limit`` (clamped into [1, 200]); with ``working_dir``
        global notes plus that directory's. What "what did I say last week?" recalls
        when no note of that week matches the question's words."""
        limit = min(LIST_MAX, max(1, require_int(limit, "limit")))
        sql = (f"SELECT {_COLS} FROM memories m WHERE m.archived = 0"
               " AND m.created_at >= ? AND m.created_at < ?")
        args: list[object] = [int(start_ms), int(end_ms)]
        if working_dir is not None:
            sql += _SQL_SCOPE_VISIBLE
            args.append(optional_text(working_dir, "workingDir"))
        sql += " ORDER BY m.created_at DESC, m.id DESC LIMIT ?"
        args.append(limit)
        return [_row(r) for r in self.conn.execute(sql, tuple(args))]

    def count(self) -> int:
        """Return the number of stored notes (archived included)."""
        return cast(int, self.conn.execute("SELECT count(*) FROM memories").fetchall()[0][0])
