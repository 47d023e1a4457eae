"""A consistent copy of the memory database while the daemon runs (issue 18, backup).

:func:`backup_database` copies the whole database with SQLite's online backup API
(``apsw.Connection.backup``: page by page, under the source connection, so the copy is
one consistent snapshot even while the memory actor keeps writing) into a temporary file
beside the target, checks that the copy opens, then renames it into place — a failed or
interrupted backup never leaves a half-written file under the target's name.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import apsw

from runtime.services.sqlite_files import connect

from .errors import ValidationError

__all__ = ["backup_database", "checked_target"]


def checked_target(target: str, overwrite: bool) -> Path:
    """``target`` as a Path a file may be written to; ValidationError (field ``path``)
    for a relative path, a folder that does not exist, or an existing file without
    ``overwrite``. Shared by backup and export."""
    path = Path(target)
    if not path.is_absolute():
        raise ValidationError("path", "must be an absolute path (the daemon's working "
                                      "directory is not yours)")
    if not path.parent.is_dir():
        raise ValidationError("path", f"no such folder: {path.parent}")
    if path.exists() and not overwrite:
        raise ValidationError("path", f"{path} exists; choose another name, or overwrite it "
                                      f"(--overwrite)")
    return path


def backup_database(conn: apsw.Connection, target: str, *, overwrite: bool = False) -> dict:
    """Copy ``conn``'s main database to ``target`` (an absolute path); return
    ``{"path": str, "bytes": int, "pages": int}``.

    Raises ValidationError (field ``path``): a relative path, a folder that does not
    exist, an existing file without ``overwrite``, or a file that cannot be written.
    """
    path = checked_target(target, overwrite)
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        dest = connect(str(tmp))
        try:
            with dest.backup("main", conn, "main") as copy:
                while not copy.done:
                    copy.step(1024)  # pages per step; the source stays usable in between
                pages = copy.page_count
            dest.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
            os.chmod(tmp, 0o600)  # memory is private, like the state directory
            dest.execute("PRAGMA quick_check").fetchall()
        finally:
            dest.close()
        os.replace(tmp, path)
    except (apsw.Error, OSError) as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise ValidationError("path", f"cannot write the backup to {path}: {exc}") from None
    return {"path": str(path), "bytes": path.stat().st_size, "pages": pages}
