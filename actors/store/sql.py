"""The SQL connection the stores are written against, whichever engine serves it.

A store module runs its statements on a :class:`Connection`: an ``apsw.Connection`` (the
SQLite engine) or an :class:`actors.store.pg.connection.PgConnection` (PostgreSQL), which
gives the same surface (``?`` placeholders, rows back, ``changes()``,
``last_insert_rowid()``, ``in_transaction``, ``with conn:`` for a savepoint). Most
statements are the same text on both; where they differ, the module picks its text by
:func:`dialect`. This module is pure: it imports neither driver.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal, Protocol

__all__ = ["Connection", "Cursor", "Dialect", "bytewise", "dialect", "ids_binding", "in_ids",
           "write_txn"]

Dialect = Literal["sqlite", "postgres"]


class Cursor(Protocol):
    """The rows of one statement."""

    def fetchall(self) -> list[tuple[Any, ...]]: ...

    def __iter__(self) -> Iterator[tuple[Any, ...]]: ...


class Connection(Protocol):
    """What the stores use of a connection (module docstring)."""

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, statements: str, bindings: Sequence[Any] | None = None) -> Any: ...

    def changes(self) -> int: ...

    def last_insert_rowid(self) -> int: ...

    def close(self) -> Any: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> Any: ...


def dialect(conn: object) -> Dialect:
    """``postgres`` for the PostgreSQL engine's connection, ``sqlite`` otherwise."""
    return "postgres" if getattr(conn, "dialect", None) == "postgres" else "sqlite"


def in_ids(conn: object, column: str) -> str:
    """``column`` is one of a list (ids, or names) bound as one parameter
    (:func:`ids_binding`): a JSON array read by ``json_each`` on SQLite, an array on
    PostgreSQL."""
    if dialect(conn) == "postgres":
        return f"{column} = ANY(?)"
    return f"{column} IN (SELECT value FROM json_each(?))"


def bytewise(conn: object, column: str) -> str:
    """``column`` compared byte by byte, as SQLite compares text: on PostgreSQL a text
    column sorts by the database's collation (``en_US.UTF-8`` puts ``home_city`` after
    ``homepage``: it skips the underscore), so an ``ORDER BY`` that must come out the
    same on both engines names ``COLLATE "C"``."""
    return f'{column} COLLATE "C"' if dialect(conn) == "postgres" else column


def ids_binding(conn: object, ids: Iterable[object]) -> object:
    """The one parameter :func:`in_ids` reads: ``ids`` as JSON text or as a list."""
    values = list(ids)
    if dialect(conn) == "postgres":
        return values
    return json.dumps(values)


@contextlib.contextmanager
def write_txn(conn: Connection) -> Iterator[Connection]:
    """Run a block of writes atomically; the writer lock is taken up front.

    Outside a transaction: ``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on any
    exception). Contention therefore happens at ``BEGIN``, where the busy timeout
    applies, instead of surfacing as an unretryable ``BusyError`` when a deferred read
    transaction tries to upgrade.

    On PostgreSQL ``BEGIN IMMEDIATE`` is a plain ``BEGIN``
    (:mod:`actors.store.pg.connection`). Inside an already open transaction
    (``conn.in_transaction``): a savepoint via ``with conn:``, so a caller can group several store writes (one reflection result)
    into one outer transaction and a failing inner write rolls back only itself.
    """
    if conn.in_transaction:
        with conn:
            yield conn
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
