"""memory.sqlite: connection setup, versioned migrations, write transactions.

Only the memory actor opens this file for writing (one writer per file). The schema is
reached through an ordered tuple of SQL scripts, :data:`MIGRATIONS`; the script at
position ``i`` produces version ``i + 1``. The version lives in ``PRAGMA user_version``
and is bumped inside the same transaction as its step, so a crash can never leave a
half-applied step marked as done. A file newer than the code is refused
(:class:`SchemaTooNew`), a file that is not a database is reported
(:class:`DatabaseCorrupt`), never silently replaced.

Schema:

* v1 ``profile_facts``: bi-temporal profile history, one active row per key
  (``superseded_by IS NULL``, enforced by a partial unique index).
* v2 ``memories`` (freeform notes) and ``memories_fts``: an FTS5 table
  (``porter unicode61``) holding ``aa_index_text(content)`` keyed by the note id, kept
  in sync by insert / delete / update-of-content triggers.
* v3 ``memory_vectors``, ``memory_links``, ``lessons`` + ``lessons_fts``,
  ``procedures`` + ``procedures_fts``, ``votes``.
* v4 ``idx_memories_utility``: the usefulness-aware eviction order.
* v5 ``memory_vectors`` rebuilt as a rowid table with ``idx_memory_vectors_scan``.

Because the triggers call ``aa_index_text``, every connection that writes these tables
must be opened with :func:`open_database` (or pass through :func:`register_functions`).
"""

from __future__ import annotations

from typing import cast

import apsw
import structlog

from runtime.services.sqlite_files import connect

from .clock import CLOCK, FUTURE_LIMIT_MS
from .errors import DatabaseCorrupt, SchemaTooNew
from .fts import index_text
from .sql import write_txn
from .wal import WAL_SIZE_LIMIT

log = structlog.get_logger("actors.store.schema")

__all__ = [
    "SCHEMA_VERSION",
    "MIGRATIONS",
    "FTS_TABLES",
    "APPLICATION_ID",
    "BUSY_TIMEOUT_MS",
    "open_database",
    "register_functions",
    "migrate",
    "user_version",
    "write_txn",
    "fts_integrity_check",
    "rebuild_fts",
]

#: ``PRAGMA application_id`` stamped by v1 ("AAG1"), so tools can tell the file apart.
APPLICATION_ID = 0x41414731
#: Busy timeout of every connection, in ms (several seconds, so concurrent
#: writers wait instead of failing with SQLITE_BUSY).
BUSY_TIMEOUT_MS = 5000

_V1 = f"""
PRAGMA application_id = {APPLICATION_ID};
CREATE TABLE profile_facts (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    key           TEXT    NOT NULL,
    value         TEXT    NOT NULL,
    pinned        INTEGER NOT NULL DEFAULT 1 CHECK (pinned IN (0, 1)),
    keywords      TEXT    NOT NULL DEFAULT '[]',
    valid_from    INTEGER NOT NULL,
    superseded_by INTEGER,
    supersedes    INTEGER,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
CREATE UNIQUE INDEX idx_profile_active_key ON profile_facts(key) WHERE superseded_by IS NULL;
CREATE INDEX idx_profile_key_history ON profile_facts(key, valid_from, id);
CREATE INDEX idx_profile_chain ON profile_facts(superseded_by);
"""

_V2 = """
CREATE TABLE memories (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    content          TEXT    NOT NULL,
    content_key      TEXT    NOT NULL DEFAULT '',
    tags             TEXT    NOT NULL DEFAULT '[]',
    source           TEXT    NOT NULL DEFAULT 'agent' CHECK (source IN ('agent', 'user')),
    scope            TEXT    NOT NULL DEFAULT 'all' CHECK (scope IN ('all', 'project')),
    working_dir      TEXT,
    session_id       TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    recall_count     INTEGER NOT NULL DEFAULT 0,
    last_recalled_at INTEGER,
    archived         INTEGER NOT NULL DEFAULT 0 CHECK (archived IN (0, 1))
);
CREATE INDEX idx_memories_updated ON memories(updated_at, id);
CREATE INDEX idx_memories_working_dir ON memories(working_dir);
CREATE INDEX idx_memories_content_key ON memories(content_key);
CREATE VIRTUAL TABLE memories_fts USING fts5(content, tokenize = 'porter unicode61');
CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, content) VALUES (new.id, aa_index_text(new.content));
END;
CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN
    DELETE FROM memories_fts WHERE rowid = old.id;
END;
CREATE TRIGGER memories_fts_au AFTER UPDATE OF id, content ON memories BEGIN
    DELETE FROM memories_fts WHERE rowid = old.id;
    INSERT INTO memories_fts(rowid, content) VALUES (new.id, aa_index_text(new.content));
END;
"""

_V3 = """
CREATE TABLE memory_vectors (
    note_id    INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    model      TEXT    NOT NULL,
    dim        INTEGER NOT NULL CHECK (dim > 0),
    vector     BLOB    NOT NULL CHECK (length(vector) = dim * 4),
    created_at INTEGER NOT NULL,
    PRIMARY KEY (note_id, model)
) WITHOUT ROWID;
CREATE INDEX idx_memory_vectors_model ON memory_vectors(model);

CREATE TABLE memory_links (
    from_id    INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    to_id      INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    kind       TEXT    NOT NULL CHECK (kind IN ('RELATES_TO', 'CAUSED_BY', 'REFERENCES',
                                                'CONTRADICTS', 'DUPLICATES', 'SUPERSEDES')),
    weight     REAL    NOT NULL DEFAULT 1.0,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (from_id, to_id, kind),
    CHECK (from_id <> to_id)
) WITHOUT ROWID;
CREATE INDEX idx_memory_links_to ON memory_links(to_id);
CREATE INDEX idx_memory_links_kind ON memory_links(kind);

CREATE TABLE lessons (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    activation    TEXT    NOT NULL,
    principle     TEXT    NOT NULL,
    tags          TEXT    NOT NULL DEFAULT '[]',
    status        TEXT    NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'deprecated')),
    success_count INTEGER NOT NULL DEFAULT 0,
    failure_count INTEGER NOT NULL DEFAULT 0,
    parent_ids    TEXT    NOT NULL DEFAULT '[]',
    working_dir   TEXT,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    deprecated_at INTEGER
);
CREATE INDEX idx_lessons_status ON lessons(status);
CREATE INDEX idx_lessons_updated ON lessons(updated_at, id);
CREATE VIRTUAL TABLE lessons_fts USING fts5(activation, principle, tags,
                                            tokenize = 'porter unicode61');
CREATE TRIGGER lessons_fts_ai AFTER INSERT ON lessons BEGIN
    INSERT INTO lessons_fts(rowid, activation, principle, tags)
    VALUES (new.id, aa_index_text(new.activation), aa_index_text(new.principle),
            aa_index_text(new.tags));
END;
CREATE TRIGGER lessons_fts_ad AFTER DELETE ON lessons BEGIN
    DELETE FROM lessons_fts WHERE rowid = old.id;
END;
CREATE TRIGGER lessons_fts_au AFTER UPDATE OF id, activation, principle, tags ON lessons BEGIN
    DELETE FROM lessons_fts WHERE rowid = old.id;
    INSERT INTO lessons_fts(rowid, activation, principle, tags)
    VALUES (new.id, aa_index_text(new.activation), aa_index_text(new.principle),
            aa_index_text(new.tags));
END;

CREATE TABLE procedures (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    activation        TEXT    NOT NULL,
    steps             TEXT    NOT NULL,
    tags              TEXT    NOT NULL DEFAULT '[]',
    status            TEXT    NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'deprecated')),
    success_count     INTEGER NOT NULL DEFAULT 0,
    failure_count     INTEGER NOT NULL DEFAULT 0,
    use_count         INTEGER NOT NULL DEFAULT 0,
    parent_lesson_ids TEXT    NOT NULL DEFAULT '[]',
    parent_memory_ids TEXT    NOT NULL DEFAULT '[]',
    source            TEXT    NOT NULL DEFAULT 'consolidator'
                              CHECK (source IN ('consolidator', 'manual')),
    working_dir       TEXT,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    deprecated_at     INTEGER
);
CREATE INDEX idx_procedures_status ON procedures(status);
CREATE INDEX idx_procedures_updated ON procedures(updated_at, id);
CREATE VIRTUAL TABLE procedures_fts USING fts5(activation, steps, tags,
                                               tokenize = 'porter unicode61');
CREATE TRIGGER procedures_fts_ai AFTER INSERT ON procedures BEGIN
    INSERT INTO procedures_fts(rowid, activation, steps, tags)
    VALUES (new.id, aa_index_text(new.activation), aa_index_text(new.steps),
            aa_index_text(new.tags));
END;
CREATE TRIGGER procedures_fts_ad AFTER DELETE ON procedures BEGIN
    DELETE FROM procedures_fts WHERE rowid = old.id;
END;
CREATE TRIGGER procedures_fts_au AFTER UPDATE OF id, activation, steps, tags ON procedures BEGIN
    DELETE FROM procedures_fts WHERE rowid = old.id;
    INSERT INTO procedures_fts(rowid, activation, steps, tags)
    VALUES (new.id, aa_index_text(new.activation), aa_index_text(new.steps),
            aa_index_text(new.tags));
END;

CREATE TABLE votes (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    kind       TEXT    NOT NULL CHECK (kind IN ('memory', 'lesson', 'profile', 'procedure')),
    target_id  INTEGER NOT NULL,
    direction  INTEGER NOT NULL CHECK (direction IN (-1, 1)),
    session_id TEXT,
    turn_index INTEGER,
    created_at INTEGER NOT NULL
);
CREATE INDEX idx_votes_created ON votes(created_at);
CREATE INDEX idx_votes_target ON votes(kind, target_id);
"""

#: Ordered migration scripts; ``MIGRATIONS[i]`` upgrades version ``i`` to ``i + 1``.
#: Append only: never edit a released step, add a new one.
_V4 = """
CREATE INDEX idx_memories_utility
    ON memories(recall_count, COALESCE(last_recalled_at, 0), updated_at, id);
"""
"""v4: the usefulness-aware eviction order of ``MemoryStore`` (it keeps more recall than FIFO):
without it a full 100k-note store scans the table on every insert (34 ms → 0.75 ms)."""

_V5 = """
CREATE TABLE memory_vectors_v5 (
    id         INTEGER PRIMARY KEY,
    note_id    INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    model      TEXT    NOT NULL,
    dim        INTEGER NOT NULL CHECK (dim > 0),
    vector     BLOB    NOT NULL CHECK (length(vector) = dim * 4),
    created_at INTEGER NOT NULL,
    UNIQUE (note_id, model)
);
INSERT INTO memory_vectors_v5 (note_id, model, dim, vector, created_at)
    SELECT note_id, model, dim, vector, created_at FROM memory_vectors;
DROP TABLE memory_vectors;
ALTER TABLE memory_vectors_v5 RENAME TO memory_vectors;
CREATE INDEX idx_memory_vectors_scan ON memory_vectors(model, dim, note_id);
"""
"""v5: ``memory_vectors`` as a rowid table. In the v3 ``WITHOUT ROWID`` table a 1 KiB
vector exceeds an index page's local payload, so every row spilled to an overflow page
and hybrid recall's scan of 1,000 vectors took ~14 ms; rowid leaves hold it inline. The
``(model, dim, note_id)`` index serves the scan newest first and the stale count."""

_V6 = """
ALTER TABLE profile_facts ADD COLUMN source TEXT;
ALTER TABLE profile_facts ADD COLUMN session_id TEXT;
ALTER TABLE profile_facts ADD COLUMN turn_id TEXT;
ALTER TABLE memories ADD COLUMN origin TEXT;
ALTER TABLE memories ADD COLUMN turn_id TEXT;
"""
"""v6: provenance. Who wrote a fact version or a note — ``reflection``, the
agent's ``tool`` call, the ``user`` (CLI, TUI, MCP, …) or an ``import`` — and in which
session and turn. Rows written before v6 have NULL (unknown)."""

_V7 = """
ALTER TABLE memories ADD COLUMN vote_score REAL NOT NULL DEFAULT 0;
ALTER TABLE memories ADD COLUMN consolidated_into INTEGER;
ALTER TABLE memories ADD COLUMN consolidating_at INTEGER;
ALTER TABLE lessons ADD COLUMN vote_score REAL NOT NULL DEFAULT 0;
ALTER TABLE procedures ADD COLUMN vote_score REAL NOT NULL DEFAULT 0;
ALTER TABLE profile_facts ADD COLUMN vote_score REAL NOT NULL DEFAULT 0;
DROP INDEX idx_memories_utility;
CREATE INDEX idx_memories_utility
    ON memories(vote_score, recall_count, COALESCE(last_recalled_at, 0), updated_at, id);
CREATE INDEX idx_memories_consolidated ON memories(consolidated_into)
    WHERE consolidated_into IS NOT NULL;
"""
"""v7: the cold path. ``vote_score`` on notes, lessons,
procedures and profile facts (the vote runner's clamped sum, decayed per consolidator
tick; the source of truth, ``votes`` is only the audit log); on notes the consolidator's
``consolidated_into`` (the lesson a note was archived into, never cleared) and
``consolidating_at`` (the lease, Unix ms). The utility eviction order puts the vote
first, so its index is rebuilt with it."""

_V8 = """
ALTER TABLE memory_links ADD COLUMN origin TEXT NOT NULL DEFAULT 'manual'
    CHECK (origin IN ('manual', 'similarity', 'model', 'correction'));
UPDATE memory_links SET origin = 'similarity' WHERE kind = 'RELATES_TO' AND weight < 1.0;
"""
"""v8: where a link came from: ``manual`` (``memory.links.add``: a person or a
client), ``similarity`` (links by meaning, written after a note is embedded), ``model``
(the LLM link generator) or ``correction`` (the store: a note that negates a
near-identical older one supersedes it). Only links by meaning are left out of the prompt's link
expansion by default (they add no recall and cost the first reply token:
bench/RESULTS.md "Cold path"). Links written under v7 with kind ``RELATES_TO`` and a
weight below 1 were links by meaning (their weight is the cosine; the other writers
used 1.0), so they are marked so."""

_V9 = """
DELETE FROM memories_fts;
INSERT INTO memories_fts(rowid, content) SELECT id, aa_index_text(content) FROM memories;
DELETE FROM lessons_fts;
INSERT INTO lessons_fts(rowid, activation, principle, tags)
    SELECT id, aa_index_text(activation), aa_index_text(principle), aa_index_text(tags)
    FROM lessons;
DELETE FROM procedures_fts;
INSERT INTO procedures_fts(rowid, activation, steps, tags)
    SELECT id, aa_index_text(activation), aa_index_text(steps), aa_index_text(tags)
    FROM procedures;
"""
"""v9: the FTS tables re-derived once the indexed text folds Latin diacritics
(``fts.fold_latin``): "pho" finds "phở", "lodz" finds "Łódź", and the other way round.
The same statements as :func:`rebuild_fts`, in the migration's transaction."""

_V10 = """
ALTER TABLE memories ADD COLUMN batch_id TEXT;
"""
"""v10: the writer's batch of a note written outside a session: one client connection's
stores (a websocket client, the MCP server, a script), one ``memory import``. Recall's
context step treats ``COALESCE(session_id, batch_id)`` as the note's context, so notes
written in a row by one writer are neighbours whether or not a session wrote them
(``recall`` step 4)."""

_V11 = """
ALTER TABLE profile_facts ADD COLUMN removed_by TEXT;
ALTER TABLE profile_facts ADD COLUMN removed_turn_id TEXT;
"""
"""v11: who ended a fact version, beside who wrote it: the writer that removed or
replaced it (``agent for <app>``, ``reflection for <app>``, ``dashboard``, ``tui``, an
app's name, ``evicted`` for the unpinned cap) and the turn that did it, if a turn did.
Versions ended before v11 have NULL (unknown)."""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11)
#: The newest schema version this code knows (``len(MIGRATIONS)``).
SCHEMA_VERSION: int = len(MIGRATIONS)

#: FTS5 tables with the base table, its columns, and the version that created them.
FTS_TABLES: tuple[tuple[str, str, tuple[str, ...], int], ...] = (
    ("memories_fts", "memories", ("content",), 2),
    ("lessons_fts", "lessons", ("activation", "principle", "tags"), 3),
    ("procedures_fts", "procedures", ("activation", "steps", "tags"), 3),
)


def _sql_index_text(value: object) -> str:
    """SQL adapter of :func:`fts.index_text`: tolerate non-text column values."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    elif not isinstance(value, str):
        value = str(value)
    return index_text(value)


def register_functions(conn: apsw.Connection) -> None:
    """Register ``aa_index_text(text) -> text`` (:func:`fts.index_text`) on ``conn``.

    Deterministic and innocuous, so SQLite may call it from triggers even when
    ``trusted_schema`` is off. Idempotent (re-registering replaces it).
    """
    conn.create_scalar_function(
        "aa_index_text",
        # apsw types every scalar function as variadic; this one is registered for 1 argument
        _sql_index_text,  # type: ignore[arg-type]  # (apsw's typing, see above)
        1,
        deterministic=True,
        flags=apsw.SQLITE_INNOCUOUS,
    )


def open_database(path: str, *, apply_migrations: bool = True, check: bool = False
                  ) -> apsw.Connection:
    """Open (or create) the memory database at ``path`` and return the connection.

    Connection settings (WAL so readers never block the writer): ``journal_mode=WAL``,
    ``synchronous=NORMAL``, ``journal_size_limit`` :data:`.wal.WAL_SIZE_LIMIT`, busy timeout :data:`BUSY_TIMEOUT_MS` (5000 ms),
    ``foreign_keys=ON`` (vector/link cascades), ``recursive_triggers=ON`` (so that
    ``INSERT OR REPLACE`` fires the FTS delete trigger), and the ``aa_index_text`` SQL
    function. With ``apply_migrations`` (default) the schema is brought to
    :data:`SCHEMA_VERSION` via :func:`migrate`; pass ``False`` to open a file as-is
    (tests stepping through old versions). With ``check``, ``PRAGMA quick_check`` runs
    before any migration (≈10 ms per MB): a file with a damaged page is reported corrupt
    before anything is written to it.

    Raises:
        DatabaseCorrupt: the file is not an SQLite database, or is truncated/malformed
            (``apsw.NotADBError`` / ``apsw.CorruptError``). The connection is closed
            and the file left untouched for the caller to move aside.
        SchemaTooNew: the file's ``user_version`` is above :data:`SCHEMA_VERSION`.
    """
    conn = connect(path)  # (also a path that is not UTF-8)
    try:
        conn.setbusytimeout(BUSY_TIMEOUT_MS)
        register_functions(conn)
        conn.execute("PRAGMA journal_mode = WAL").fetchall()
        conn.execute("PRAGMA synchronous = NORMAL")
        # Whenever the log starts over, its file is cut back to this size (.wal).
        conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}").fetchall()
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA recursive_triggers = ON")
        # Sorts and temporary indexes in memory, not in a temp file that a small /tmp
        # partition could fill while the state directory has room.
        conn.execute("PRAGMA temp_store = MEMORY")
        # Force the schema to be read now, so a truncated file fails here.
        conn.execute("SELECT count(*) FROM sqlite_schema").fetchall()
        if check:
            problems = [cast(str, r[0]) for r in conn.execute("PRAGMA quick_check(5)").fetchall()]
            if problems != ["ok"]:
                raise apsw.CorruptError("; ".join(problems)[:500])
        if apply_migrations:
            migrate(conn)
            repair_future_stamps(conn)
            CLOCK.observe(newest_stamp(conn))
    except (apsw.NotADBError, apsw.CorruptError) as exc:
        # Leave a damaged file as it is: no WAL checkpoint into it on close.
        conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        conn.close()
        raise DatabaseCorrupt(path, str(exc)) from exc
    except BaseException:
        conn.close()
        raise
    return conn


_STAMPED = (("memories", "updated_at"), ("memories", "last_recalled_at"),
            ("memories", "consolidating_at"), ("profile_facts", "updated_at"),
            ("profile_facts", "valid_from"), ("lessons", "updated_at"),
            ("procedures", "updated_at"), ("memory_links", "created_at"))


_TIMES = (("memories", ("created_at", "updated_at", "last_recalled_at", "consolidating_at")),
          ("profile_facts", ("valid_from", "created_at", "updated_at")),
          ("lessons", ("created_at", "updated_at", "deprecated_at")),
          ("procedures", ("created_at", "updated_at", "deprecated_at")),
          ("memory_links", ("created_at",)))
"""Every time column of the store (Unix ms)."""


def repair_future_stamps(conn: apsw.Connection) -> int:
    """Set every stored time more than :data:`~actors.store.clock.FUTURE_LIMIT_MS` ahead
    of the wall clock to now (a store poisoned before imports refused such times: one
    ``createdAt`` in 2100 dated every later write 2100); returns the rows changed, logged
    once as ``memory.clock_repaired`` when any."""
    now = CLOCK.source()
    limit = now + FUTURE_LIMIT_MS
    changed: dict[str, int] = {}
    with write_txn(conn):
        for table, columns in _TIMES:
            for col in columns:
                conn.execute(f"UPDATE {table} SET {col} = ? WHERE {col} > ?", (now, limit))
                if n := conn.changes():
                    changed[f"{table}.{col}"] = n
    if changed:
        log.warning("memory.clock_repaired", columns=changed,
                    hint="times from the future (an old import) were set to now")
    return sum(changed.values())


def newest_stamp(conn: apsw.Connection) -> int | None:
    """The newest Unix-ms timestamp stored in a migrated database (None when empty):
    the floor of the store's clock (``clock.CLOCK``, which never goes backwards)."""
    sql = " UNION ALL ".join(f"SELECT max({col}) FROM {table}" for table, col in _STAMPED)
    stamps = [r[0] for r in conn.execute(sql) if r[0] is not None]
    return max(stamps) if stamps else None


def user_version(conn: apsw.Connection) -> int:
    """Return ``PRAGMA user_version`` (the schema version; 0 for a new file)."""
    return cast(int, conn.execute("PRAGMA user_version").fetchall()[0][0])


def migrate(conn: apsw.Connection, stop_before: int | None = None) -> int:
    """Apply pending migrations and return the resulting schema version.

    Steps ``current + 1`` .. ``SCHEMA_VERSION`` run in order, each in its own
    ``BEGIN IMMEDIATE`` transaction together with its ``PRAGMA user_version`` bump; the
    version is re-read inside the transaction, so two processes migrating at once
    apply each step once. Idempotent: a second call is a no-op.

    Args:
        conn: a connection (``aa_index_text`` is registered on it if missing).
        stop_before: apply only versions below this one (``stop_before=2`` leaves the
            file at v1), as in sqlite-migrate; ``None`` migrates fully.

    Raises:
        SchemaTooNew: the file's version is above :data:`SCHEMA_VERSION` (nothing is
            changed).
        DatabaseCorrupt: SQLite reports the file as not a database / malformed.
    """
    register_functions(conn)
    target = SCHEMA_VERSION if stop_before is None else min(stop_before - 1, SCHEMA_VERSION)
    try:
        current = user_version(conn)
        if current > SCHEMA_VERSION:
            raise SchemaTooNew(current, SCHEMA_VERSION)
        for version in range(current + 1, target + 1):
            with write_txn(conn):
                now = user_version(conn)
                if now > SCHEMA_VERSION:
                    raise SchemaTooNew(now, SCHEMA_VERSION)
                if now >= version:
                    continue
                conn.execute(MIGRATIONS[version - 1])
                # user_version cannot be bound; ``version`` is our own int.
                conn.execute(f"PRAGMA user_version = {int(version)}")
        return user_version(conn)
    except (apsw.NotADBError, apsw.CorruptError) as exc:
        raise DatabaseCorrupt(conn.filename or ":memory:", str(exc)) from exc


def fts_integrity_check(conn: apsw.Connection) -> list[str]:
    """Run FTS5's own ``integrity-check`` on every FTS table present.

    Returns the names of the tables that were checked. Raises ``apsw.CorruptError``
    (not translated: this is a diagnostic) when an index is inconsistent.
    """
    checked: list[str] = []
    for table, _base, _cols, _version in FTS_TABLES:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?", (table,)
        ).fetchall()
        if exists:
            # Table names come from the FTS_TABLES constant, never from input.
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
            checked.append(table)
    return checked


def rebuild_fts(conn: apsw.Connection) -> int:
    """Re-derive every FTS table from its base table with ``aa_index_text``.

    For use by a future migration when :func:`fts.index_text` changes. Runs in one
    write transaction (or a savepoint of the caller's). Returns the number of base rows
    indexed.
    """
    total = 0
    with write_txn(conn):
        for table, base, cols, _version in FTS_TABLES:
            exists = conn.execute(
                "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?", (table,)
            ).fetchall()
            if not exists:
                continue
            col_list = ", ".join(cols)
            derived = ", ".join(f"aa_index_text({c})" for c in cols)
            conn.execute(f"DELETE FROM {table}")
            conn.execute(
                f"INSERT INTO {table}(rowid, {col_list}) SELECT id, {derived} FROM {base}"
            )
            total += conn.changes()
    return total
