"""The files memory ops read and write: export, backup and import (docs/protocol.md).

A client names a file in ``memory.export``, ``memory.backup`` and ``memory.import``. The
daemon must never become a way to write or read any file its user can reach — the token,
the live database, a device node — so a :class:`FileRoom` decides where those ops may
touch the disk:

* **In the daemon** the room is one folder, ``<state>/exports/`` (0700): a client names a
  file there (``memory-2026-12-03.jsonl``; an absolute path is accepted only when it lies
  in that folder). The CLI copies the result to wherever its user asked, and copies a file
  to import into the folder first (``runtime/shell/cli.py``).
* **Offline** (the CLI on the file, no daemon) the user's own process writes where the
  user says, but never onto the state directory's own files (the live database, its WAL,
  the token), and only regular files.

Every check raises :class:`~actors.store.errors.ValidationError` (field ``path``, the
``invalid_argument`` reply), never a bare ``ValueError``/``OSError``: a NUL byte or a
300-character name used to crash the memory actor, and six such frames made the
supervisor give up. Writes go through a temporary file created with ``O_EXCL`` beside the
target and renamed into place; an existing target must be a regular file (not a link, a
device or a folder). Reads open with ``O_NONBLOCK`` (a FIFO never blocks the actor) and
take only a regular file of at most :data:`MAX_IMPORT_BYTES`.

In the daemon's folder every step goes through one handle on the folder, opened
``O_DIRECTORY | O_NOFOLLOW`` when the op begins (``openat``-style ``dir_fd`` calls, and
``/proc/self/fd/<fd>/<name>`` where a library takes a path, as SQLite does for a backup):
a folder swapped for a symbolic link while an export runs cannot redirect a write, and
one swapped before it is refused. Temporary files a killed export left behind are removed
when the memory actor starts (:meth:`FileRoom.remove_stale`).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from runtime.services.private_files import replacing

from .errors import ValidationError

__all__ = ["EXPORTS_DIR", "MAX_IMPORT_BYTES", "FileRoom"]

EXPORTS_DIR = "exports"
"""The folder under the state directory the daemon reads and writes files in."""
MAX_IMPORT_BYTES = 128 * 1024 * 1024
"""Largest file ``memory.import`` reads (bytes). An import is parsed whole before its one
transaction (~2× the file in memory); an export of 100,000 notes is ~60 MB."""
NAME_MAX = 255
"""Longest file name (bytes, UTF-8), as on ext4, XFS, APFS and NTFS."""
PATH_MAX = 4096
"""Longest path (bytes, UTF-8), Linux's ``PATH_MAX``."""


def _refuse(message: str) -> ValidationError:
    return ValidationError("path", message)


_TMP_RE = re.compile(r"^\..+\.\d+-[0-9a-f]{8}\.tmp$")
"""A temporary file of a write (:func:`runtime.services.private_files.replacing`'s and
:meth:`FileRoom.writing`'s names)."""
_PROC_FD = Path("/proc/self/fd")


class FileRoom:
    """Where memory ops may read and write (module docstring).

    ``folder``: the one folder the daemon uses (created 0700 on first use), or None for
    the offline CLI (any folder). ``private``: a folder whose files are never written or
    read through an op (the state directory: the live database, its WAL, the token)."""

    def __init__(self, folder: Path | None, private: Path | None = None) -> None:
        self.folder = folder
        self.private = private.resolve() if private is not None else None

    def _path(self, name: object) -> Path:
        """The checked path ``name`` stands for (no file system access but ``resolve``)."""
        if not isinstance(name, str) or not name.strip():
            raise _refuse("give a file name")
        if "\x00" in name:
            raise _refuse("a file name cannot hold a NUL character")
        try:
            encoded = name.encode("utf-8")
        except UnicodeEncodeError:
            raise _refuse("a file name must be valid Unicode") from None
        if len(encoded) > PATH_MAX:
            raise _refuse(f"path too long ({len(encoded)} bytes; at most {PATH_MAX})")
        path = Path(name)
        if any(len(part.encode("utf-8")) > NAME_MAX for part in path.parts):
            raise _refuse(f"a file name is at most {NAME_MAX} bytes")
        if self.folder is not None:
            return self._in_folder(path, name)
        if not path.is_absolute():
            raise _refuse("must be an absolute path (the daemon's working directory is "
                          "not yours)")
        try:
            parent = path.parent.resolve()
        except (OSError, RuntimeError) as exc:
            raise _refuse(f"cannot use {name}: {exc}") from None
        if self.private is not None and (parent == self.private
                                         or self.private in parent.parents
                                         and parent.name != EXPORTS_DIR):
            raise _refuse(f"{path} is in the state directory, which holds the live "
                          "memory; choose a file outside it")
        return parent / path.name

    def _in_folder(self, path: Path, name: str) -> Path:
        assert self.folder is not None
        folder = self.folder.resolve()
        if path.is_absolute():
            if path.parent.resolve() != folder:
                raise _refuse(f"the daemon reads and writes files only in {folder}; give a "
                              "file name there (the CLI copies files to and from any path)")
            path = Path(path.name)
        if len(path.parts) != 1 or path.name in (".", "..") or name.startswith("."):
            raise _refuse(f"give a plain file name in {folder} (no folders, no leading dot)")
        return folder / path.name

    @contextlib.contextmanager
    def _held(self) -> Iterator[int]:
        """A handle on the daemon's folder for one op (module docstring); ValidationError
        when the folder is a link or cannot be opened."""
        assert self.folder is not None
        try:
            fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as exc:
            raise _refuse(f"cannot use {self.folder}: {exc.strerror or exc} (it must be a "
                          "real folder, not a link)") from None
        try:
            yield fd
        finally:
            os.close(fd)

    def remove_stale(self) -> int:
        """Remove the temporary files a killed write left in the daemon's folder; the
        number removed (0 offline, or when the folder cannot be read)."""
        if self.folder is None:
            return 0
        removed = 0
        try:
            with self._held() as fd:
                for name in os.listdir(fd):
                    if _TMP_RE.match(name):
                        with contextlib.suppress(OSError):
                            os.unlink(name, dir_fd=fd)
                            removed += 1
        except ValidationError:
            return 0
        return removed

    def folder_ready(self) -> Path | None:
        """Create the daemon's folder (0700) when missing; the folder, or None offline.
        Raises ValidationError when it cannot be made or is not a real folder."""
        if self.folder is None:
            return None
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = os.lstat(self.folder)
        except OSError as exc:
            raise _refuse(f"cannot create {self.folder}: {exc.strerror or exc}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise _refuse(f"{self.folder} is not a folder")
        return self.folder

    def target(self, name: str, overwrite: bool) -> Path:
        """The path a backup or export named ``name`` is written to. Raises
        ValidationError: a bad or disallowed name, a missing folder, an existing file
        without ``overwrite``, or an existing entry that is not a regular file."""
        self.folder_ready()
        path = self._path(name)
        try:
            if self.folder is not None:
                with self._held() as fd:
                    st = os.lstat(path.name, dir_fd=fd)
            else:
                if not path.parent.is_dir():
                    raise _refuse(f"no such folder: {path.parent}")
                st = os.lstat(path)
        except FileNotFoundError:
            return path
        except OSError as exc:
            raise _refuse(f"cannot use {path}: {exc.strerror or exc}") from None
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(f"{path} exists and is not a regular file; choose another name")
        if not overwrite:
            raise _refuse(f"{path} exists; choose another name, or overwrite it "
                          "(--overwrite)")
        return path

    @contextlib.contextmanager
    def writing(self, target: Path) -> Iterator[Path]:
        """:func:`runtime.services.private_files.replacing` for ``target``: a fresh
        private temporary file beside it, renamed onto it when the block ends without
        error. OSError of the file system becomes ValidationError naming ``target``. In
        the daemon's folder the file is made, written and renamed through one handle on
        the folder (module docstring); the path yielded reaches it through that handle."""
        if self.folder is None:
            try:
                with replacing(target) as tmp:
                    yield tmp
            except OSError as exc:
                raise _refuse(f"cannot write {target}: {exc.strerror or exc}") from None
            return
        with self._held() as fd:
            name = f".{target.name[:200]}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
            try:
                os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                                 0o600, dir_fd=fd))
            except OSError as exc:
                raise _refuse(f"cannot write {target}: {exc.strerror or exc}") from None
            try:
                yield (_PROC_FD / str(fd) / name) if _PROC_FD.is_dir() else self.folder / name
                os.replace(name, target.name, src_dir_fd=fd, dst_dir_fd=fd)
            except OSError as exc:
                raise _refuse(f"cannot write {target}: {exc.strerror or exc}") from None
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=fd)

    @contextlib.contextmanager
    def opened(self, name: str, limit: int = MAX_IMPORT_BYTES) -> Iterator[tuple[Path, BinaryIO]]:
        """``(path, binary file)`` of the regular file ``name`` names, at most ``limit``
        bytes, open for the block (an import reads it line by line, more than once).
        Raises ValidationError: a bad or disallowed name, a missing file, a link (in the
        daemon's folder), a FIFO, device or folder, a file over ``limit``."""
        path = self._path(name)
        flags = os.O_RDONLY | os.O_NONBLOCK | (os.O_NOFOLLOW if self.folder else 0)
        try:
            if self.folder is not None:
                with self._held() as folder_fd:
                    fd = os.open(path.name, flags, dir_fd=folder_fd)
            else:
                fd = os.open(path, flags)
        except FileNotFoundError:
            raise _refuse(f"no such file: {path}") from None
        except OSError as exc:
            raise _refuse(f"cannot read {path}: {exc.strerror or exc}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _refuse(f"{path} is not a regular file")
            if st.st_size > limit:
                raise _refuse(f"{path} is {st.st_size / 1e6:.0f} MB; an import reads at "
                              f"most {limit / 1e6:.0f} MB")
            os.set_blocking(fd, True)
            f = os.fdopen(fd, "rb")
        except OSError as exc:
            os.close(fd)
            raise _refuse(f"cannot read {path}: {exc.strerror or exc}") from None
        except BaseException:
            os.close(fd)
            raise
        with f:
            yield path, f

    def read(self, name: str, limit: int = MAX_IMPORT_BYTES) -> tuple[Path, bytes]:
        """``(path, bytes)`` of the regular file ``name`` names, at most ``limit`` bytes
        (:meth:`opened`'s checks and errors)."""
        with self.opened(name, limit) as (path, f):
            try:
                data = f.read(limit + 1)
            except OSError as exc:
                raise _refuse(f"cannot read {path}: {exc.strerror or exc}") from None
        if len(data) > limit:
            raise _refuse(f"{path} grew past {limit / 1e6:.0f} MB while being read")
        return path, data
