"""Typed failures of the memory actor.

Every failure the memory stores raise on purpose derives from :class:`MemoryFailure`
and carries a stable, machine-readable ``code`` (the ``error.code`` of a websocket
``memory.result`` answer, docs/protocol.md §6). Third-party errors (apsw) are translated once,
at the storage boundary (``schema.open_database`` / ``schema.migrate``), never leaked
as ``apsw.*`` types to callers that only know this module::

    MemoryFailure                code
     ├── ValidationError         "invalid_argument"   (bad caller input; field + message)
     ├── NotFound                "not_found"          (an id / key that does not exist)
     ├── SchemaTooNew            "schema_too_new"     (file written by a newer atomic-agent)
     ├── DatabaseCorrupt         "database_corrupt"   (not a database, truncated, malformed)
     ├── DatabaseBusy            "database_busy"      (write lock held past the busy timeout)
     ├── StorageFailure          "storage_full" / "storage_readonly" / "storage_error"
     │                                                (the disk refused a write)
     └── DatabaseUnavailable     "database_unavailable" (the PostgreSQL engine: the server
                                                      unreachable, or it refused the work)

Error texts never contain stored memory content, only field names, limits and ids.
"""

from __future__ import annotations

import sys
import unicodedata

from .clock import CLOCK

__all__ = [
    "MemoryFailure",
    "ValidationError",
    "DatabaseUnavailable",
    "NotFound",
    "SchemaTooNew",
    "DatabaseCorrupt",
    "DatabaseBusy",
    "StorageFailure",
    "OpFailed",
    "blank",
    "now_ms",
    "require_int",
    "require_positive_id",
    "optional_text",
    "string_list",
]


def blank(text: str) -> bool:
    """Whether ``text`` shows nothing: only whitespace, invisible format characters
    (Unicode category Cf: zero-width space and joiners, the byte order mark, word joiner)
    and control characters. "Ten zero-width spaces" is as empty as "" to a reader, so a
    note, fact value or tag made of them is refused like an empty one."""
    return all(ch.isspace() or unicodedata.category(ch) in ("Cf", "Cc") for ch in text)


class MemoryFailure(Exception):
    """Base class of every deliberate memory-actor failure.

    Attributes:
        code: stable machine-readable error code (class attribute, overridden by
            subclasses); sent to clients as ``error.code``.
        message: human-readable one-line description (also ``str(exc)``).
    """

    code: str = "memory_failure"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict[str, str]:
        """Return the wire shape ``{"code": ..., "message": ...}``."""
        return {"code": self.code, "message": str(self)}


class ValidationError(MemoryFailure):
    """Caller input broke a documented limit (the limits of notes.py and profile.py).

    Attributes:
        field: the offending argument (``content``, ``tags``, ``query``, ``id``,
            ``source``, ``scope``, ``workingDir``, ``sessionId``, ``k``, ``limit``,
            ``key``, ``value``, ``keywords``, ``pinned``, ``archived``, ``model``,
            ``dim``, ``vector``).
        message: what is wrong, e.g. ``"must be at most 4000 chars (got 4001)"``.

    ``str(exc)`` is ``"<field>: <message>"``.
    """

    code = "invalid_argument"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class NotFound(MemoryFailure):
    """A requested note id or profile key does not exist."""

    code = "not_found"


class SchemaTooNew(MemoryFailure):
    """The database file was written by a newer atomic-agent than this one.

    Raised by :func:`actors.store.schema.migrate` when ``PRAGMA user_version`` of the
    file is above ``SCHEMA_VERSION``; the file is left untouched (no downgrade).

    Attributes:
        file_version: the version stored in the file.
        code_version: the newest version this code knows (``SCHEMA_VERSION``).
    """

    code = "schema_too_new"

    def __init__(self, file_version: int, code_version: int) -> None:
        super().__init__(
            f"memory database schema version {file_version} is newer than the supported "
            f"version {code_version}; refusing to downgrade - upgrade atomic-agent to open it"
        )
        self.file_version = file_version
        self.code_version = code_version


class DatabaseCorrupt(MemoryFailure):
    """The file is not an SQLite database, is truncated, or is malformed.

    Translated from ``apsw.NotADBError`` / ``apsw.CorruptError``. The memory actor must
    never silently start empty on top of it: it moves the file aside and
    reports the event.

    Attributes:
        path: the database path that failed to open.
        detail: SQLite's own error text.
    """

    code = "database_corrupt"

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"memory database {path!r} is unreadable or corrupt: {detail}")
        self.path = path
        self.detail = detail


class DatabaseBusy(MemoryFailure):
    """Another process held the write lock longer than the busy timeout (5000 ms).

    The request failed as a whole (its transaction rolled back) and may be retried;
    the actor stays up and later writes work.
    """

    code = "database_busy"

    def __init__(self, detail: str) -> None:
        super().__init__(f"memory database is locked by another process: {detail}")


class OpFailed(MemoryFailure):
    """A client's op failed inside the memory actor for a reason no check caught (a bug,
    or a file system answer nobody expected). It is answered as an error reply
    (``internal_error``) and logged with its traceback; the actor stays up, because a
    client must never be able to crash it (six crashes in a row make the supervisor give
    the daemon up). A damaged database still crashes the actor, to be quarantined.

    Attributes:
        op: the op name.
    """

    code = "internal_error"

    def __init__(self, op: str, exc: BaseException) -> None:
        super().__init__(f"{op} failed inside the memory actor ({type(exc).__name__}: "
                         f"{str(exc)[:300]}); nothing else is affected and the failure is "
                         "logged")
        self.op = op


class StorageFailure(MemoryFailure):
    """The disk refused the request's write: full, read-only, or an I/O error.

    Translated from ``apsw.FullError`` (``SQLITE_FULL``, code ``storage_full``),
    ``apsw.ReadOnlyError`` (``SQLITE_READONLY``, ``storage_readonly``) and
    ``apsw.IOError`` (``SQLITE_IOERR``: EROFS, EIO …, ``storage_error``) by
    :meth:`from_apsw`. SQLite rolled the transaction back, so nothing of the request
    was stored and everything stored before is intact; the actor stays up, reads keep
    working, and the same request succeeds once space is freed (a full disk must not stop
    the daemon). Never raised for a damaged file (that is :class:`DatabaseCorrupt`).

    Attributes:
        detail: SQLite's own error text.
    """

    code = "storage_error"
    CAUSES = {"storage_full": "the disk is full",
              "storage_readonly": "the state directory is read-only",
              "storage_error": "an I/O error"}

    def __init__(self, code: str, detail: str, *, what: str = "memory",
                 reading: bool = False) -> None:
        cause = self.CAUSES.get(code, "an I/O error")
        if reading:
            message = f"{what} could not be read: {cause} ({detail})"
        else:
            message = (f"{what} not stored: {cause} ({detail}); nothing stored before is "
                       f"lost - free space or fix the state directory and retry")
        super().__init__(message)
        self.code = code
        self.detail = detail

    @classmethod
    def from_apsw(cls, exc: BaseException, *, what: str = "memory",
                  reading: bool = False) -> StorageFailure | None:
        """The StorageFailure for an apsw storage error, or None for any other error.
        ``what`` names the data in the message ("memory", "the session"); ``reading``
        words it for a failed read instead of a refused write."""
        # apsw as this process loaded it: the error types stay pure (talking to memory
        # loads no SQLite), and where apsw was never loaded no error can be one of its.
        apsw = sys.modules.get("apsw")
        if apsw is None:
            return None
        # SQLite may roll back by itself on SQLITE_FULL; the rollback that follows then
        # fails ("cannot rollback - no transaction is active") with the FullError only
        # as its context: look through the chain of causes.
        seen: BaseException | None = exc
        for _ in range(4):
            if seen is None:
                break
            for klass, code in ((apsw.FullError, "storage_full"),
                                (apsw.ReadOnlyError, "storage_readonly"),
                                (apsw.IOError, "storage_error")):
                if isinstance(seen, klass):
                    return cls(code, str(seen), what=what, reading=reading)
            seen = seen.__cause__ or seen.__context__
        return None


class DatabaseUnavailable(MemoryFailure):
    """The PostgreSQL engine (docs/teams.md) could not do the request: the server is
    unreachable, the connection was lost mid-request, or the server refused it (no
    pgvector, no right to create the schema).

    Whatever the request wrote was in one transaction the server rolled back: nothing of
    it is stored, everything acknowledged before is; the pool reconnects by itself and
    the same request succeeds once the server answers.

    Attributes:
        detail: the driver's first line (never the server's URL or password).
    """

    code = "database_unavailable"

    def __init__(self, detail: str) -> None:
        super().__init__(f"the memory database is unavailable: {detail}")
        self.detail = detail


# -- argument checks shared by the stores (each raises ValidationError) ----------------


def now_ms(value: object = None) -> int:
    """Return ``value`` as a Unix-ms timestamp, or for ``None`` the store's current time
    (``clock.CLOCK``: the wall clock, never going backwards, even when the system
    clock steps back).

    Raises:
        ValidationError: field ``nowMs`` when ``value`` is not an int (bools refused).
    """
    if value is None:
        return CLOCK.now()
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValidationError("nowMs", "must be an integer (Unix ms)")
    return value


def require_int(value: object, field: str) -> int:
    """Return ``value`` if it is an int (bools refused), else raise ValidationError(field)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValidationError(field, "must be an integer")
    return value


def require_positive_id(value: object, field: str = "id") -> int:
    """Return ``value`` if it is an int >= 1 (bools refused), else raise
    ValidationError(field) -- ``get(0)`` / ``remove(-1)`` are errors, never no-ops."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValidationError(field, "must be a positive integer")
    return value


def optional_text(value: object, field: str) -> str | None:
    """Return ``value`` trimmed, ``None`` for ``None`` or blank text (the
    ``workingDir`` / ``sessionId`` rule: blank means absent); a non-string raises
    ValidationError(field)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(field, "must be a string or null")
    value = value.strip()
    return value or None


def string_list(
    value: object, field: str, *, max_items: int, max_chars: int, lower: bool = False
) -> list[str]:
    """Validate a list of short strings (note tags, profile keywords).

    ``None`` -> ``[]``; otherwise a list/tuple of at most ``max_items`` entries (counted
    before de-duplication), each a string that is non-empty after trimming and at most
    ``max_chars`` chars. Returns the trimmed (and, with ``lower``, lower-cased) entries,
    duplicates dropped, first occurrence kept.

    Raises:
        ValidationError: ``field``, naming the broken limit.
    """
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise ValidationError(field, "must be a list of strings")
    if len(value) > max_items:
        raise ValidationError(field, f"at most {max_items} entries (got {len(value)})")
    out: list[str] = []
    for item in value:
        if not isinstance(item, str):
            raise ValidationError(field, "every entry must be a string")
        item = item.strip().lower() if lower else item.strip()
        if blank(item):
            raise ValidationError(field, "entries must not be empty")
        if len(item) > max_chars:
            raise ValidationError(field, f"each entry must be at most {max_chars} chars")
        if item not in out:
            out.append(item)
    return out
