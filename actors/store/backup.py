"""A consistent copy of the memory database while the daemon runs (the ``memory.backup`` op).

:func:`backup_database` copies the whole database with SQLite's online backup API
(``apsw.Connection.backup``: page by page, under the source connection, so the copy is
one consistent snapshot even while the memory actor keeps writing) into a private
temporary file beside the target, checks that the copy opens, then renames it into place —
a failed or interrupted backup never leaves a half-written file under the target's name.
Where the target may be is the :class:`~actors.store.files.FileRoom`'s to say.
"""

from __future__ import annotations

import contextlib
import os
from typing import TypedDict

import apsw

from runtime.services.sqlite_files import connect

from .errors import ValidationError
from .files import FileRoom

__all__ = ["BackupResult", "backup_database"]


class BackupResult(TypedDict):
    """What :func:`backup_database` answers: the file written, its size and pages."""

    path: str
    bytes: int
    pages: int


def backup_database(conn: apsw.Connection, target: str, room: FileRoom, *,
                    overwrite: bool = False) -> BackupResult:
    """Copy ``conn``'s main database to the file ``target`` names in ``room``
    (:class:`~actors.store.files.FileRoom`); return ``{"path": str, "bytes": int,
    "pages": int}``.

    Raises ValidationError (field ``path``): a name the room refuses, a folder that does
    not exist, an existing file without ``overwrite`` (or one that is not a regular
    file), or a file that cannot be written.
    """
    path = room.target(target, overwrite)
    try:
        with room.writing(path) as tmp:
            dest = connect(str(tmp))
            try:
                with dest.backup("main", conn, "main") as copy:
                    while not copy.done:
                        copy.step(1024)  # pages per step; the source stays usable between
                    pages = copy.page_count
                dest.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
                dest.execute("PRAGMA quick_check").fetchall()
            finally:
                dest.close()
            for suffix in ("-journal", "-wal", "-shm"):
                with contextlib.suppress(OSError):
                    os.unlink(f"{tmp}{suffix}")
    except apsw.Error as exc:
        raise ValidationError("path", f"cannot write the backup to {path}: {exc}") from None
    return {"path": str(path), "bytes": path.stat().st_size, "pages": pages}
