"""``atomic-agent memory recover [FILE]``: salvage a quarantined memory file.

When the memory actor finds ``memory.sqlite`` corrupt it moves the file aside
(``memory.sqlite.corrupt-<ms>``), starts fresh and says so; it never starts empty over
the user's data silently. This command reads whatever is still readable in such a file
— by default the newest ``memory.sqlite.corrupt-*`` of the state directory — and writes
it into the live ``memory.sqlite`` through the normal stores:

* **notes** (content, tags, source, scope, working dir, session, created time) through
  ``MemoryStore.store``; a note whose exact text is already there is skipped untouched
  and a near-identical one merges, so running the command twice adds nothing;
* **active profile facts** through ``ProfileStore.set``, but only for keys the live file
  does not have: a fact written since the quarantine is newer and wins.

Rows are read table by table with a full scan; when a damaged page stops the scan, the
remaining ids are probed one by one (up to the table's last AUTOINCREMENT id, at most
:data:`PROBE_LIMIT` probes), so one bad page loses only its own rows. Vectors, lessons,
procedures, links and votes are not salvaged (the backfill re-embeds the notes).

It works on the files directly, so it refuses to run while a daemon owns the state
directory. The damaged file is left in place; delete it once satisfied.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO, cast

import apsw

from actors.store.stores import open_stores
from actors.store.errors import MemoryFailure
from actors.store.schema import open_database, write_txn
from runtime.services.config import Config
from runtime.services.sqlite_files import connect

from .client import ClientError

__all__ = ["PROBE_LIMIT", "newest_quarantined", "recover", "salvage"]

PROBE_LIMIT = 100_000
"""Most single-id probes per table after a scan stopped on a damaged page."""

_NOTE_COLUMNS = "id, content, tags, source, scope, working_dir, session_id, created_at"
_FACT_COLUMNS = "id, key, value, pinned, keywords"


def newest_quarantined(state_dir: Path) -> Path | None:
    """The most recent ``memory.sqlite.corrupt-<ms>`` in ``state_dir`` (not its -wal/-shm)."""
    found = [p for p in state_dir.glob("memory.sqlite.corrupt-*")
             if p.name.rsplit("-", 1)[-1].isdigit()]
    return max(found, key=lambda p: int(p.name.rsplit("-", 1)[-1]), default=None)


def _rows(conn: apsw.Connection, table: str, columns: str, where: str = "") -> tuple[
        list[tuple[Any, ...]], int]:
    """Every readable row of ``table`` (by id) and how many reads failed."""
    rows: dict[int, tuple[Any, ...]] = {}
    failed = 0
    try:
        for row in conn.execute(f"SELECT {columns} FROM {table} {where} ORDER BY id"):
            rows[row[0]] = row
        return list(rows.values()), 0
    except apsw.Error:
        failed += 1
    try:
        top = cast(list[tuple[int]], conn.execute(
            "SELECT seq FROM sqlite_sequence WHERE name = ?", (table,)).fetchall())
        last = int(top[0][0]) if top else max(rows, default=0) + 1000
    except apsw.Error:
        last = max(rows, default=0) + 1000
    start = max(rows, default=0) + 1
    probe = f"SELECT {columns} FROM {table} WHERE id = ? {where.replace('WHERE', 'AND')}"
    for note_id in range(start, min(last, start + PROBE_LIMIT) + 1):
        try:
            for row in conn.execute(probe, (note_id,)):
                rows[row[0]] = row
        except apsw.Error:
            failed += 1
    return [rows[i] for i in sorted(rows)], failed


def salvage(path: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[str]]:
    """Read notes and active facts from a damaged file (from a copy: never written).

    Returns ``(notes, facts, problems)``: rows in ``_NOTE_COLUMNS`` / ``_FACT_COLUMNS``
    order and one line per table that could not be read completely.

    Raises:
        ClientError ``unrecoverable``: not an SQLite file at all, or its schema is gone.
    """
    with tempfile.TemporaryDirectory() as tmp:
        # A copy with its -wal beside it (open_or_quarantine moves both): the commits
        # not yet checkpointed are read too, and the damaged file itself is never written.
        copy = Path(tmp) / "salvage.sqlite"
        shutil.copyfile(path, copy)
        wal = path.with_name(path.name + "-wal")
        if wal.exists():
            shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
        try:
            conn = connect(str(copy))
        except apsw.Error as exc:
            raise ClientError("unrecoverable", f"{path}: nothing can be read ({exc})") from None
        try:
            return _salvage(conn)
        except apsw.Error as exc:
            raise ClientError("unrecoverable", f"{path}: nothing can be read ({exc})") from None
        finally:
            conn.close()


def _salvage(conn: apsw.Connection) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]],
                                              list[str]]:
    conn.execute("SELECT count(*) FROM sqlite_schema").fetchall()
    problems: list[str] = []
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type='table'")}
    notes: list[tuple[Any, ...]] = []
    facts: list[tuple[Any, ...]] = []
    if "memories" in tables:
        notes, failed = _rows(conn, "memories", _NOTE_COLUMNS)
        if failed:
            problems.append(f"memories: {failed} unreadable read(s); salvaged {len(notes)}")
    if "profile_facts" in tables:
        facts, failed = _rows(conn, "profile_facts", _FACT_COLUMNS,
                              "WHERE superseded_by IS NULL")
        if failed:
            problems.append(f"profile_facts: {failed} unreadable read(s); salvaged "
                            f"{len(facts)}")
    if not tables & {"memories", "profile_facts"}:
        problems.append("no notes or profile tables are readable")
    return notes, facts, problems


def _loads(text: Any) -> list[str]:
    try:
        value = json.loads(text) if isinstance(text, str) else []
    except ValueError:
        return []
    return [t for t in value if isinstance(t, str)] if isinstance(value, list) else []


def _write(state_dir: Path, cfg: Config, notes: list[tuple[Any, ...]],
           facts: list[tuple[Any, ...]]) -> dict[str, int]:
    try:
        conn = open_database(str(state_dir / "memory.sqlite"))
    except MemoryFailure as exc:
        raise ClientError(exc.code, str(exc)) from None
    s = open_stores(conn, cfg.memory)
    counts = {"notesAdded": 0, "notesAlreadyThere": 0, "notesInvalid": 0,
              "factsAdded": 0, "factsKeptNewer": 0, "factsInvalid": 0}
    try:
        newest = cast(int, conn.execute(
            "SELECT COALESCE(max(id), 0) FROM memories").fetchall()[0][0])
        with write_txn(conn):
            for _id, content, tags, source, scope, wd, session, created in notes:
                if conn.execute("SELECT 1 FROM memories WHERE content = ? LIMIT 1",
                                (content,)).fetchall():
                    counts["notesAlreadyThere"] += 1  # no merge: recall counts stay as they are
                    continue
                try:
                    note = s.notes.store(content, tags=_loads(tags), source=source or "agent",
                                         scope=scope or "all", working_dir=wd,
                                         session_id=session, now_ms=created)
                except MemoryFailure:
                    counts["notesInvalid"] += 1
                    continue
                if note.id > newest:
                    counts["notesAdded"] += 1
                    newest = note.id
                else:
                    counts["notesAlreadyThere"] += 1
            for _id, key, value, pinned, keywords in facts:
                if s.profiles.get(key) is not None:
                    counts["factsKeptNewer"] += 1
                    continue
                try:
                    s.profiles.set(key, value, pinned=bool(pinned),
                                   keywords=None if pinned else _loads(keywords))
                    counts["factsAdded"] += 1
                except MemoryFailure:
                    counts["factsInvalid"] += 1
    finally:
        conn.close()
    return counts


def recover(state_dir: Path, cfg: Config, file: Path | None = None, *,
            out: TextIO = sys.stderr) -> dict[str, Any]:
    """Salvage ``file`` (default: the newest quarantined file) into the live memory.

    Returns ``{"file", "notesFound", "factsFound", "problems", …counts}``. Raises
    ``ClientError``: ``not_found`` (no such file / nothing quarantined), ``unrecoverable``,
    or a memory failure's code for the live file.
    """
    path = file or newest_quarantined(state_dir)
    if path is None:
        raise ClientError("not_found", f"no quarantined memory file (memory.sqlite.corrupt-*) "
                          f"in {state_dir}")
    if not path.is_file():
        raise ClientError("not_found", f"no file at {path}")
    print(f"recover: reading {path}", file=out)
    notes, facts, problems = salvage(path)
    for line in problems:
        print(f"recover: {line}", file=out)
    counts = _write(state_dir, cfg, notes, facts)
    print(f"recover: {counts['notesAdded']} note(s) and {counts['factsAdded']} fact(s) added; "
          f"the damaged file is left at {path}", file=out)
    return {"file": str(path), "notesFound": len(notes), "factsFound": len(facts),
            "problems": problems, **counts}
