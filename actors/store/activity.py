"""The activity log: which client read or wrote which memory, when, with what outcome
(docs/dashboard.md, "Activity log").

On the SQLite engine it is a file of its own, ``<state>/activity.sqlite``, written only
by the memory actor (the one process every memory read and write passes through), so it
is never part of ``memory.sqlite``'s exports or backups, and losing it loses no memory. On
the PostgreSQL engine it is three tables of the server's schema (``activity``,
``activity_meta``, ``activity_totals``: :mod:`actors.store.pg.schema`), one tenant's rows
each, so a daemon on a server keeps nothing of its memory on its own disk
(docs/teams.md). The same statements run on both (:class:`ActivityLog` takes either
connection). Rows::

    activity(id INTEGER PRIMARY KEY, at INTEGER  -- unix ms
             client TEXT, op TEXT, ids TEXT       -- JSON list: note ids, fact keys, ...
             outcome TEXT,                         -- "ok" or an error code
             writes INTEGER,                       -- 1 when the op changes memory
             kind TEXT,                            -- write | refusal | read
             count INTEGER)                        -- folded repeats (refusals)

Three kinds of row, each with its own bound (:data:`BOUNDS`): **writes** (an op that
changed memory), **refusals** (any outcome but ``ok``) and **reads**. After each append
the oldest rows of a kind beyond its bound are deleted and counted (``meta`` row
``dropped``), so a flood of cheap reads or refused requests never pushes an app's writes
out of the log. A refusal repeating the one just logged for the same app and op within
:data:`FOLD_MS` is folded into it (its ``count`` goes up, its ``at`` moves on). What the
dashboard and ``activity`` count per app comes from running totals (table ``totals``),
never from the rows still kept. Entries come in batches (the actor buffers them and
appends every half second), one transaction per batch.
"""

from __future__ import annotations

import decimal
import json
import time
from pathlib import Path
from typing import TypedDict, cast

import msgspec

from runtime.services.sqlite_files import connect

from .sql import Connection, dialect

__all__ = ["BOUNDS", "FOLD_MS", "MAX_ENTRIES", "MAX_IDS", "ActivityEntry", "ActivityLog",
           "ActivityRow", "ClientTotals", "kind_of"]

MAX_ENTRIES = 20_000
"""Rows kept of the writes and of the reads each (oldest dropped first): a few MB."""
BOUNDS = {"write": MAX_ENTRIES, "refusal": 5_000, "read": MAX_ENTRIES}
"""Rows kept per kind: a kind's rows push out only older rows of the same kind."""
FOLD_MS = 60_000
"""A refusal repeating the last one of the same app and op within this is folded in."""
MAX_IDS = 20
"""Ids kept per entry (a recall of 50 notes records its first 20)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS activity (
    id INTEGER PRIMARY KEY,
    at INTEGER NOT NULL,
    client TEXT NOT NULL,
    op TEXT NOT NULL,
    ids TEXT NOT NULL DEFAULT '[]',
    outcome TEXT NOT NULL DEFAULT 'ok',
    writes INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS activity_client ON activity(client, id);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS totals (
    client TEXT PRIMARY KEY,
    reads INTEGER NOT NULL DEFAULT 0,
    writes INTEGER NOT NULL DEFAULT 0,
    refusals INTEGER NOT NULL DEFAULT 0,
    last_at INTEGER NOT NULL DEFAULT 0
);
"""
_V2 = """
ALTER TABLE activity ADD COLUMN kind TEXT NOT NULL DEFAULT 'read';
ALTER TABLE activity ADD COLUMN count INTEGER NOT NULL DEFAULT 1;
UPDATE activity SET kind = CASE WHEN outcome != 'ok' THEN 'refusal'
                                WHEN writes = 1 THEN 'write' ELSE 'read' END;
CREATE INDEX activity_kind ON activity(kind, id);
INSERT OR REPLACE INTO totals(client, reads, writes, refusals, last_at)
    SELECT client, SUM(kind = 'read'), SUM(kind = 'write'), SUM(kind = 'refusal'), MAX(at)
    FROM activity GROUP BY client;
"""
"""v2 of the file: the kind of each row and its folded count, and the running totals
(a v1 file's rows are counted into them once)."""


def kind_of(outcome: str, writes: bool) -> str:
    """``refusal`` for any outcome but ``ok``, else ``write`` or ``read``."""
    return "refusal" if outcome != "ok" else "write" if writes else "read"


class ActivityEntry(msgspec.Struct, array_like=True, frozen=True):
    """One memory read or write: ``at`` unix ms, ``client`` (a client token's name, a
    program's declared name, ``agent``, ``reflection`` ...), ``op`` (a memory operation
    name, ``turn.context`` or ``reflection``), ``ids`` (note ids and fact keys, at most
    :data:`MAX_IDS`), ``outcome`` (``ok`` or the error code), ``writes`` (the op changes
    memory)."""

    at: int
    client: str
    op: str
    ids: list[int | str]
    outcome: str = "ok"
    writes: bool = False


class ActivityRow(TypedDict):
    """One row of :meth:`ActivityLog.entries` (``count``: the folded repeats of a
    refusal, else 1)."""

    id: int
    at: int
    client: str
    op: str
    ids: list[int | str]
    outcome: str
    writes: bool
    count: int


class ClientTotals(TypedDict):
    """One client's running totals (:meth:`ActivityLog.clients`)."""

    client: str
    reads: int
    writes: int
    refusals: int
    lastAt: int


class ActivityLog:
    """The activity log on ``conn`` (module docstring): an ``apsw.Connection`` to
    ``<state>/activity.sqlite`` (:meth:`open_file`) or the PostgreSQL engine's
    connection, whose schema already holds the tables. Methods run in one thread at a
    time (the caller serialises them); the driver's errors propagate (on PostgreSQL,
    :class:`actors.store.errors.DatabaseUnavailable`)."""

    def __init__(self, conn: Connection, max_entries: int = MAX_ENTRIES,
                 bounds: dict[str, int] | None = None) -> None:
        self.conn = conn
        self.max_entries = max_entries
        self.bounds = dict(bounds or {**BOUNDS, "write": max_entries, "read": max_entries})
        pg = dialect(conn) == "postgres"
        self._meta = "activity_meta" if pg else "meta"
        self._totals = "activity_totals" if pg else "totals"
        # Each table's key within the tenant (PostgreSQL keys rows by tenant too).
        self._meta_key = "tenant_id, name" if pg else "name"
        self._totals_key = "tenant_id, client" if pg else "client"
        self._greatest = "GREATEST" if pg else "MAX"
        self.path: Path | None = None
        """The SQLite file (None on PostgreSQL)."""

    @classmethod
    def open_file(cls, path: Path, max_entries: int = MAX_ENTRIES,
                  bounds: dict[str, int] | None = None) -> ActivityLog:
        """The log in the SQLite file ``path`` (made, or brought to v2, here). Raises
        apsw.Error, OSError."""
        conn = connect(str(path))  # (a state dir that is not UTF-8 goes by its URI)
        try:
            conn.setbusytimeout(2000)
            conn.execute("PRAGMA journal_mode=WAL").fetchall()
            conn.execute("PRAGMA synchronous=NORMAL")
            with conn:
                conn.execute(_SCHEMA)
                if int(conn.execute("PRAGMA user_version").fetchall()[0][0] or 0) < 2:
                    conn.execute(_V2)
                    conn.execute("PRAGMA user_version = 2")
        except BaseException:
            conn.close()
            raise
        log = cls(conn, max_entries, bounds)
        log.path = path
        return log

    def append(self, entries: list[ActivityEntry]) -> None:
        """Write ``entries`` in one transaction (a refusal repeating the last one of its
        app and op within :data:`FOLD_MS` folded into it), add them to the running
        totals, then drop the oldest rows of each kind beyond its bound (counted in
        :meth:`dropped`)."""
        if not entries:
            return
        with self.conn:
            for e in entries:
                kind = kind_of(e.outcome, e.writes)
                client, op, outcome = e.client[:80], e.op[:80], e.outcome[:40]
                self.conn.execute(
                    f"INSERT INTO {self._totals}(client, reads, writes, refusals, last_at) "
                    f"VALUES (?, ?, ?, ?, ?) ON CONFLICT({self._totals_key}) DO UPDATE SET "
                    f"reads = {self._totals}.reads + excluded.reads, "
                    f"writes = {self._totals}.writes + excluded.writes, "
                    f"refusals = {self._totals}.refusals + excluded.refusals, "
                    f"last_at = {self._greatest}({self._totals}.last_at, excluded.last_at)",
                    (client, int(kind == "read"), int(kind == "write"),
                     int(kind == "refusal"), e.at))
                if kind == "refusal":
                    last = self.conn.execute(
                        "SELECT id, op, outcome, at FROM activity WHERE client = ? "
                        "ORDER BY id DESC LIMIT 1", (client,)).fetchall()
                    if last and last[0][1] == op and last[0][2] == outcome \
                            and e.at - cast(int, last[0][3]) <= FOLD_MS:
                        self.conn.execute("UPDATE activity SET count = count + 1, at = ? "
                                          "WHERE id = ?", (e.at, last[0][0]))
                        continue
                self.conn.execute(
                    "INSERT INTO activity(at, client, op, ids, outcome, writes, kind) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (e.at, client, op, json.dumps(e.ids[:MAX_IDS]), outcome, int(e.writes),
                     kind))
            for kind, bound in self.bounds.items():
                kept = self._int("SELECT COUNT(*) FROM activity WHERE kind = ?", kind)
                if kept > bound:
                    self.conn.execute(
                        "DELETE FROM activity WHERE id IN (SELECT id FROM activity WHERE "
                        "kind = ? ORDER BY id LIMIT ?)", (kind, kept - bound))
                    self.conn.execute(
                        f"INSERT INTO {self._meta}(name, value) VALUES ('dropped', ?) "
                        f"ON CONFLICT({self._meta_key}) "
                        f"DO UPDATE SET value = {self._meta}.value + excluded.value",
                        (kept - bound,))

    def entries(self, *, limit: int = 100, client: str | None = None,
                before: int | None = None, op_prefix: str | None = None,
                reads: bool = True) -> list[ActivityRow]:
        """Newest first: ``{"id", "at", "client", "op", "ids", "outcome", "writes",
        "count"}`` (``count``: the folded repeats of a refusal, else 1), at
        most ``limit`` (1..1000), only ``client``'s when given, only ids below ``before``
        (the next page), only ops starting with ``op_prefix``; without ``reads``, only
        writes and refusals (what changed memory, and what was stopped)."""
        where: list[str] = ["1 = 1"]
        args: list[str | int] = []
        if not reads:
            where.append("kind != 'read'")
        if client:
            where.append("client = ?")
            args.append(client)
        if before:
            where.append("id < ?")
            args.append(before)
        if op_prefix:
            where.append("substr(op, 1, ?) = ?")
            args += [len(op_prefix), op_prefix]
        rows = cast(list[tuple[int, int, str, str, str, str, int, int]], self.conn.execute(
            f"SELECT id, at, client, op, ids, outcome, writes, count FROM activity "
            f"WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT ?",
            (*args, max(1, min(limit, 1000)))).fetchall())
        return [{"id": r[0], "at": r[1], "client": r[2], "op": r[3],
                 "ids": json.loads(str(r[4])), "outcome": r[5], "writes": bool(r[6]),
                 "count": r[7]}
                for r in rows]

    def clients(self) -> list[ClientTotals]:
        """Each client seen: ``{"client", "reads", "writes", "refusals", "lastAt"}``,
        latest first — running totals since the file was made, whatever rows the bounds
        have dropped since."""
        rows = cast(list[tuple[str, int, int, int, int]], self.conn.execute(
            f"SELECT client, reads, writes, refusals, last_at FROM {self._totals} "
            "ORDER BY last_at DESC").fetchall())
        return [{"client": r[0], "reads": r[1], "writes": r[2], "refusals": r[3],
                 "lastAt": r[4]} for r in rows]

    def dropped(self) -> int:
        """Rows dropped for the bound since the file was made."""
        return self._int(f"SELECT value FROM {self._meta} WHERE name = 'dropped'")

    def count(self) -> int:
        """Rows kept now."""
        return self._int("SELECT COUNT(*) FROM activity")

    def _int(self, sql: str, *args: str | int) -> int:
        """The first column of the first row as an int (0 for no row or NULL)."""
        rows = self.conn.execute(sql, args).fetchall()
        value = rows[0][0] if rows else None
        return int(value) if isinstance(value, (int, float, decimal.Decimal)) else 0

    def close(self) -> None:
        """Close the connection (on PostgreSQL, a connection on the memory store's pool,
        which the store closes)."""
        self.conn.close()


def now_ms() -> int:
    return int(time.time() * 1000)
