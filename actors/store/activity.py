"""The activity log: which client read or wrote which memory, when, with what outcome
(docs/dashboard.md, "Activity log").

Its own SQLite file, ``<state>/activity.sqlite``, written only by the memory actor (the
one process every memory read and write passes through), so it is never part of
``memory.sqlite``'s exports or backups, and losing it loses no memory. Rows::

    activity(id INTEGER PRIMARY KEY, at INTEGER  -- unix ms
             client TEXT, op TEXT, ids TEXT       -- JSON list: note ids, fact keys, ...
             outcome TEXT,                         -- "ok" or an error code
             writes INTEGER)                       -- 1 when the op changes memory

Bounded: after each append the oldest rows beyond :data:`MAX_ENTRIES` are deleted and
counted (``meta`` row ``dropped``), so the file stays a few MB whatever the traffic.
Entries come in batches (the actor buffers them and appends every half second), one
transaction per batch.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import apsw
import msgspec

from runtime.services.sqlite_files import connect

__all__ = ["MAX_ENTRIES", "MAX_IDS", "ActivityEntry", "ActivityLog"]

MAX_ENTRIES = 20_000
"""Rows kept (oldest dropped first): about 2-3 MB of SQLite."""
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
"""


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


class ActivityLog:
    """``<state>/activity.sqlite`` (module docstring). Methods run in one thread at a
    time (the caller serialises them); apsw errors propagate."""

    def __init__(self, path: Path, max_entries: int = MAX_ENTRIES) -> None:
        self.path = path
        self.max_entries = max_entries
        self.conn = connect(str(path))  # (a state dir that is not UTF-8 goes by its URI)
        self.conn.setbusytimeout(2000)
        self.conn.execute("PRAGMA journal_mode=WAL").fetchall()
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute(_SCHEMA)

    def append(self, entries: list[ActivityEntry]) -> None:
        """Write ``entries`` in one transaction, then drop the oldest rows beyond the
        bound (counted in :meth:`dropped`)."""
        if not entries:
            return
        with self.conn:
            self.conn.executemany(
                "INSERT INTO activity(at, client, op, ids, outcome, writes) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(e.at, e.client[:80], e.op[:80], json.dumps(e.ids[:MAX_IDS]), e.outcome[:40],
                  int(e.writes)) for e in entries])
            last = self._int("SELECT MAX(id) FROM activity")
            cut = last - self.max_entries
            if cut > 0:
                gone = self._int("SELECT COUNT(*) FROM activity WHERE id <= ?", cut)
                if gone:
                    self.conn.execute("DELETE FROM activity WHERE id <= ?", (cut,))
                    self.conn.execute(
                        "INSERT INTO meta(name, value) VALUES ('dropped', ?) ON CONFLICT(name) "
                        "DO UPDATE SET value = value + excluded.value", (gone,))

    def entries(self, *, limit: int = 100, client: str | None = None,
                before: int | None = None, op_prefix: str | None = None,
                reads: bool = True) -> list[dict[str, Any]]:
        """Newest first: ``{"id", "at", "client", "op", "ids", "outcome", "writes"}``, at
        most ``limit`` (1..1000), only ``client``'s when given, only ids below ``before``
        (the next page), only ops starting with ``op_prefix``; without ``reads``, only
        writes and refusals (what changed memory, and what was stopped)."""
        where: list[str] = ["1"]
        args: list[Any] = []
        if not reads:
            where.append("(writes = 1 OR outcome != 'ok')")
        if client:
            where.append("client = ?")
            args.append(client)
        if before:
            where.append("id < ?")
            args.append(before)
        if op_prefix:
            where.append("substr(op, 1, ?) = ?")
            args += [len(op_prefix), op_prefix]
        rows = self.conn.execute(
            f"SELECT id, at, client, op, ids, outcome, writes FROM activity "
            f"WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT ?",
            (*args, max(1, min(limit, 1000)))).fetchall()
        return [{"id": r[0], "at": r[1], "client": r[2], "op": r[3],
                 "ids": json.loads(str(r[4])), "outcome": r[5], "writes": bool(r[6])}
                for r in rows]

    def clients(self) -> list[dict[str, Any]]:
        """Each client seen: ``{"client", "reads", "writes", "lastAt"}``, latest first."""
        rows = self.conn.execute(
            "SELECT client, COUNT(*), SUM(writes), MAX(at) FROM activity GROUP BY client "
            "ORDER BY MAX(at) DESC").fetchall()
        return [{"client": r[0], "reads": int(r[1] or 0) - int(r[2] or 0),
                 "writes": int(r[2] or 0), "lastAt": r[3]} for r in rows]

    def dropped(self) -> int:
        """Rows dropped for the bound since the file was made."""
        return self._int("SELECT value FROM meta WHERE name = 'dropped'")

    def count(self) -> int:
        """Rows kept now."""
        return self._int("SELECT COUNT(*) FROM activity")

    def _int(self, sql: str, *args: Any) -> int:
        """The first column of the first row as an int (0 for no row or NULL)."""
        rows = self.conn.execute(sql, args).fetchall()
        value = rows[0][0] if rows else None
        return int(value) if isinstance(value, (int, float)) else 0

    def close(self) -> None:
        self.conn.close()


def now_ms() -> int:
    return int(time.time() * 1000)
