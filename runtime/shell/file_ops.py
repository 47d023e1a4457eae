"""The CLI's side of ``memory export``, ``backup`` and ``import`` with a daemon running.

The daemon reads and writes files only in its exports folder (``<state>/exports/``,
:mod:`actors.store.files`); the CLI, running as its user, moves files between there and
the path the user named: it asks the daemon to write a fresh file there and moves it to
the user's path (refusing an existing file without ``--overwrite``, and the state
directory's own files always), or copies the file to import there first. Its temporary
file in the folder is removed either way.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
import secrets
import shutil
from pathlib import Path
from typing import TypeVar

import msgspec

from actors.memory import ops
from actors.memory.client import MemoryRunner
from actors.store.errors import ValidationError
from actors.store.files import EXPORTS_DIR, FileRoom

from .client import ClientError

__all__ = ["export_to", "import_from", "exported_file"]

Written = TypeVar("Written", ops.ExportResult, ops.BackupResult)


def _invalid(exc: ValidationError) -> ClientError:
    return ClientError("invalid_argument", exc.message)


def _fresh_name(suffix: str) -> str:
    return f"cli-{secrets.token_hex(8)}{suffix}"


@contextlib.asynccontextmanager
async def exported_file(c: MemoryRunner, request: ops.MemoryOp[Written], suffix: str
                        ) -> AsyncIterator[tuple[Written, Path]]:
    """Run ``request`` (``memory.export`` / ``memory.backup``; its ``path`` replaced, no
    ``overwrite``) into a fresh file of the daemon's exports folder; yield ``(reply, path)`` and remove the
    file afterwards."""
    data = await c.run(msgspec.structs.replace(request, path=_fresh_name(suffix),
                                                 overwrite=False))
    path = Path(data.path)
    try:
        yield data, path
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


async def export_to(c: MemoryRunner, request: ops.Export | ops.Backup, file: str,
                    state_dir: Path) -> ops.ExportResult | ops.BackupResult:
    """``request`` (``memory.export`` or ``memory.backup``) to the user's ``file``: checked
    first (an existing file needs the request's ``overwrite``; nothing in ``state_dir``
    but its exports folder), written by the daemon in its folder, then moved into place
    through a private temporary file. Returns the op's reply with ``path`` = ``file``.
    Raises ClientError (``invalid_argument``)."""
    if isinstance(request, ops.Backup):
        return await _written_to(c, request, ".sqlite", file, request.overwrite, state_dir)
    return await _written_to(c, request, ".jsonl", file, request.overwrite, state_dir)


async def _written_to(c: MemoryRunner, request: ops.MemoryOp[Written], suffix: str, file: str,
                      overwrite: bool, state_dir: Path) -> Written:
    room = FileRoom(None, private=state_dir)
    try:
        target = room.target(str(Path(file).expanduser().absolute()), overwrite)
    except ValidationError as exc:
        raise _invalid(exc) from None
    async with exported_file(c, request, suffix) as (data, source):
        try:
            with room.writing(target) as tmp:
                shutil.copyfile(source, tmp)
        except ValidationError as exc:
            raise _invalid(exc) from None
        except OSError as exc:
            raise ClientError("invalid_argument", f"cannot copy the daemon's file {source} "
                                                  f"to {target}: {exc.strerror or exc}") from None
    return msgspec.structs.replace(data, path=str(target), bytes=target.stat().st_size)


async def import_from(c: MemoryRunner, file: str, state_dir: Path) -> ops.ImportResult:
    """``memory.import`` of the user's ``file``: read here (a regular file of at most
    :data:`~actors.store.files.MAX_IMPORT_BYTES`), copied into the daemon's exports
    folder (0600), imported, removed. Returns the op's data with ``path`` = ``file``.
    Raises ClientError (``invalid_argument``)."""
    room = FileRoom(None, private=state_dir)
    try:
        source, data = room.read(str(Path(file).expanduser().absolute()))
    except ValidationError as exc:
        raise _invalid(exc) from None
    folder = FileRoom(state_dir / EXPORTS_DIR)
    name = _fresh_name(".jsonl")
    try:
        with folder.writing(folder.target(name, overwrite=False)) as tmp:
            tmp.write_bytes(data)
    except ValidationError as exc:
        raise _invalid(exc) from None
    try:
        result = await c.run(ops.Import(path=name))
    except ClientError as exc:  # the daemon names its own copy: name the user's file
        raise ClientError(exc.code, str(exc).replace(name, str(source))) from None
    finally:
        with contextlib.suppress(OSError):
            (state_dir / EXPORTS_DIR / name).unlink()
    return msgspec.structs.replace(result, path=str(source))
