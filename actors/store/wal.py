"""Keeping the write-ahead log bounded (https://www.sqlite.org/wal.html).

SQLite checkpoints the WAL into the database file every 1,000 pages, but it can only
start the log over once no reader still looks at an older snapshot: a long-running
outside reader (a backup tool, a ``sqlite3`` shell left open, a dashboard) made the WAL
grow by 100 MB in 30 s, and the file never shrank afterwards. Two bounds:

* ``PRAGMA journal_size_limit`` (:data:`WAL_SIZE_LIMIT`, set by
  :func:`actors.store.schema.open_database`): whenever the log starts over, the file is
  cut back to this size;
* :func:`idle_checkpoint`: the memory actor calls it when no write came for
  :data:`IDLE_CHECKPOINT_S`: a passive checkpoint (never waits on readers), then, when
  everything was copied and no reader is behind, ``TRUNCATE`` to zero bytes.

:func:`wal_state` is what ``memory stats`` shows: the log's size, the frames not yet
copied, and — when a reader holds the log back — the other processes that have the
database open (from ``/proc`` on Linux; empty elsewhere).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypedDict, cast

import apsw

__all__ = ["IDLE_CHECKPOINT_S", "WAL_SIZE_LIMIT", "Holder", "WalState", "holders",
           "idle_checkpoint", "wal_state"]

WAL_SIZE_LIMIT = 4 * 1024 * 1024
"""Bytes the WAL file is cut back to whenever the log starts over."""
IDLE_CHECKPOINT_S = 30.0
"""Seconds without a write before the memory actor checkpoints and truncates the WAL."""


class Holder(TypedDict):
    """Another process that has the database open (:func:`holders`)."""

    pid: int
    command: str


class WalState(TypedDict):
    """``memory stats``' ``wal`` block (:func:`wal_state`)."""

    bytes: int
    pendingFrames: int
    heldBackBy: list[Holder]


def idle_checkpoint(conn: apsw.Connection, busy_timeout_ms: int) -> dict[str, int]:
    """Checkpoint without waiting: ``{"busy", "frames", "copied"}`` from ``PRAGMA
    wal_checkpoint(PASSIVE)``; when every frame was copied, the WAL is truncated to zero
    (``TRUNCATE``, tried without a busy wait; ``conn``'s ``busy_timeout_ms`` is put back
    after). ``frames - copied`` frames are held back by a reader. Raises apsw errors of
    the database (the caller's to translate)."""
    busy, frames, copied = cast(tuple[int, int, int],
                                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()[0])
    if frames > 0 and frames == copied and not busy:
        conn.setbusytimeout(0)
        try:
            busy, frames, copied = cast(
                tuple[int, int, int],
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()[0])
        except apsw.BusyError:
            pass
        finally:
            conn.setbusytimeout(busy_timeout_ms)
    return {"busy": int(busy), "frames": max(0, frames), "copied": max(0, copied)}


def holders(db: Path, me: int | None = None) -> list[Holder]:
    """Other processes with ``db`` (or its ``-wal``) open: ``[{"pid", "command"}]``, read
    from ``/proc/<pid>/fd`` (Linux; ``[]`` where there is none or it cannot be read).
    ``me``: a pid to leave out (default this process)."""
    me = os.getpid() if me is None else me
    targets = {str(db), f"{db}-wal"}
    out: list[Holder] = []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        if pid == me:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if not any(os.readlink(f"/proc/{pid}/fd/{fd}") in targets for fd in fds):
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            continue
        out.append({"pid": pid, "command": command[:200]})
    return out


def wal_state(db: Path, last: dict[str, int] | None) -> WalState:
    """``memory stats``' ``wal`` block: ``bytes`` (the WAL file's size), ``pendingFrames``
    (not copied at the last checkpoint, ``last``), and ``heldBackBy``: the other processes
    that have the database open (this one and its parent, the daemon's root, left out),
    listed only while frames are pending."""
    try:
        size = os.stat(f"{db}-wal").st_size
    except OSError:
        size = 0
    pending = (last["frames"] - last["copied"]) if last else 0
    held = [h for h in holders(db) if h["pid"] != os.getppid()] if pending > 0 else []
    return {"bytes": size, "pendingFrames": pending, "heldBackBy": held}
