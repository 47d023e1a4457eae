"""Opening SQLite files whose path is not valid UTF-8.

apsw takes file names as ``str`` and hands SQLite their UTF-8 bytes, so a path with a
byte that is not UTF-8 (Python holds it as a ``surrogateescape`` code point: ``caf\\udce9``
for ``caf`` 0xE9) cannot be passed as it is. SQLite's URI file names can carry any
byte percent-encoded (``file:/tmp/caf%E9/memory.sqlite``), so :func:`connect` opens such
a path through its URI, losslessly; every other path is opened exactly as before.
"""

from __future__ import annotations

import os
import urllib.parse

import apsw

from runtime.kernel.unicode import has_lone_surrogates

__all__ = ["connect"]

DEFAULT_FLAGS = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE


def connect(path: str, flags: int = DEFAULT_FLAGS) -> apsw.Connection:
    """``apsw.Connection(path, flags=flags)``; a ``path`` holding undecodable bytes
    (lone surrogates) is opened as its percent-encoded ``file:`` URI instead
    (``SQLITE_OPEN_URI``). Raises what apsw raises."""
    if has_lone_surrogates(path):
        raw = os.fsencode(os.path.abspath(path))
        uri = "file:" + urllib.parse.quote(raw, safe="/")
        return apsw.Connection(uri, flags=flags | apsw.SQLITE_OPEN_URI)
    return apsw.Connection(path, flags=flags)
