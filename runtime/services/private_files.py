"""Writing a private file whole or not at all.

:func:`replacing` gives a fresh temporary file beside the target — created ``0600`` with
``O_CREAT | O_EXCL | O_NOFOLLOW``, so a link planted under its name is never followed —
and renames it onto the target when the block ends without error (removed otherwise). A
reader never sees a half-written file, and nobody else can read it meanwhile. Used for the
token and ``daemon.json`` (``runtime/shell/state.py``) and for exports and backups
(``actors/store/files.py``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

__all__ = ["replacing"]


@contextlib.contextmanager
def replacing(target: Path) -> Iterator[Path]:
    """A fresh private temporary file (empty, closed) beside ``target``, renamed onto it
    when the block ends without error and removed otherwise. Raises OSError of the file
    system (creating, renaming)."""
    tmp = target.with_name(f".{target.name[:200]}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
