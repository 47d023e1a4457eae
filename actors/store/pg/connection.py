"""A PostgreSQL connection with the surface the stores use of an ``apsw.Connection``.

The store modules speak a small common SQL: ``?`` placeholders, ``execute`` returning
rows, ``changes()`` after a write, ``last_insert_rowid()`` after an insert, transactions
opened with ``BEGIN IMMEDIATE`` and savepoints with ``with conn:``.
:class:`PgConnection` gives them that over a psycopg 3 connection pool
(https://www.psycopg.org/psycopg3/docs/advanced/pool.html), so most store code runs on
both engines unchanged; the few statements that differ are chosen by
:func:`actors.store.sql.dialect` where they are written.

What it translates, and nothing more (:func:`translate`):

* ``?`` → ``%s`` outside quoted text, and every literal ``%`` → ``%%`` (psycopg's
  placeholder syntax, which it reads in quoted text too);
* ``BEGIN IMMEDIATE`` → ``BEGIN`` (a Postgres transaction takes row locks as it writes);
* numbered parameters (``?1 … ?1 … ?2``): each becomes ``%s``, its binding repeated in
  place;
* ``x IS ?`` / ``x IS NOT ?`` (SQLite's comparison that treats NULL as a value) →
  ``IS [NOT] DISTINCT FROM``;
* ``INSERT OR IGNORE INTO …`` → ``INSERT INTO … ON CONFLICT DO NOTHING``;
* an ``INSERT`` into a table with an ``id`` column gets ``RETURNING id``, which is what
  :meth:`PgConnection.last_insert_rowid` answers (``lastval()`` would be wrong on a
  pooled connection).

Every session the pool opens is set up by :func:`configure_session`: the tenant
(``app.tenant``), and, for a superuser login, ``SET ROLE`` to the member role, so that
row-level security applies (a superuser bypasses it; docs/teams.md).

Errors: every psycopg error becomes the store's own (:class:`DatabaseUnavailable`), with the
connection-lost ones saying so; the pool replaces a broken connection by itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from runtime.kernel.actor import first_line

from ..errors import DatabaseUnavailable

__all__ = ["ID_TABLES", "MEMBER_ROLE", "PgConnection", "PgCursor", "configure_session",
           "translate"]

MEMBER_ROLE = "atomic_agent_member"
"""The role whose rights every daemon session runs with: it owns nothing and bypasses
no row-level security (docs/teams.md, "Isolation")."""

ID_TABLES = frozenset({"profile_facts", "memories", "lessons", "procedures", "votes",
                       "activity"})
"""Tables whose rows have an ``id`` the insert returns (``last_insert_rowid``)."""

_TOKEN_RE = re.compile(
    r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\bIS\s+(?:NOT\s+)?\?\d*|\?\d*|%", re.IGNORECASE)
_IGNORE_RE = re.compile(r"^\s*INSERT\s+OR\s+IGNORE\s+INTO", re.IGNORECASE)
_BEGIN_RE = re.compile(r"^\s*BEGIN\s+(IMMEDIATE|DEFERRED|EXCLUSIVE)\b", re.IGNORECASE)
_INSERT_RE = re.compile(r"^\s*INSERT\s+INTO\s+([a-z_]+)\b", re.IGNORECASE)
_TRANSLATED: dict[str, tuple[str, bool, tuple[int, ...] | None]] = {}


def translate(sql: str) -> tuple[str, bool, tuple[int, ...] | None]:
    """``sql`` in psycopg's form, whether it returns the inserted row's id, and for a
    statement with numbered parameters (``?1``, ``?2``) the order the bindings are
    passed in (module docstring). Cached per text: the stores' statements are
    constants."""
    hit = _TRANSLATED.get(sql)
    if hit is not None:
        return hit
    order: list[int] = []
    numbered = False

    def one(m: re.Match[str]) -> str:
        nonlocal numbered
        token = m.group(0)
        if token.startswith("?") or token.upper().startswith("IS"):
            digits = token[token.index("?") + 1:]
            numbered = numbered or bool(digits)
            order.append(int(digits) - 1 if digits else len(order))
            if token.startswith("?"):
                return "%s"
            # SQLite's null-safe comparison with a value
            return "IS DISTINCT FROM %s" if "NOT" in token.upper() else \
                "IS NOT DISTINCT FROM %s"
        return token.replace("%", "%%")

    out = _BEGIN_RE.sub("BEGIN", sql)
    ignore = bool(_IGNORE_RE.match(out))
    if ignore:
        out = _IGNORE_RE.sub("INSERT INTO", out).rstrip().rstrip(";") + " ON CONFLICT DO NOTHING"
    out = _TOKEN_RE.sub(one, out)
    insert = _INSERT_RE.match(out)
    returns_id = bool(insert and insert.group(1).lower() in ID_TABLES
                      and "returning" not in out.lower())
    if returns_id:
        out = out.rstrip().rstrip(";") + " RETURNING id"
    result = (out, returns_id, tuple(order) if numbered else None)
    if len(_TRANSLATED) < 4096:
        _TRANSLATED[sql] = result
    return result


def configure_session(conn: psycopg.Connection[Any], tenant: str) -> None:
    """Set up a fresh pooled session: the tenant row-level security reads (a team's space
    is a tenant of its own),
    the member role for a superuser login, UTC. Raises psycopg errors as they come (the
    pool then retries the connection)."""
    with conn.cursor() as cur:
        cur.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        row = cur.fetchone()
        if row and row[0]:
            cur.execute(f"SET ROLE {MEMBER_ROLE}")
        cur.execute("SELECT set_config('app.tenant', %s, false),"
                    " set_config('TimeZone', 'UTC', false)",
                    (tenant,))
    conn.commit()


class PgCursor:
    """The rows of one statement, read eagerly (the connection goes back to the pool)."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self._rows = rows

    def fetchall(self) -> list[tuple[Any, ...]]:
        """Every row (each a tuple)."""
        return self._rows

    def fetchone(self) -> tuple[Any, ...] | None:
        """The first row, or None."""
        return self._rows[0] if self._rows else None

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self._rows)


def _lost(exc: psycopg.Error) -> bool:
    """Whether ``exc`` says the session is gone (no SQLSTATE: the client lost it; class
    08 connection exception; 57P operator intervention: the server shut down)."""
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith(("08", "57P"))


def _failure(exc: psycopg.Error) -> DatabaseUnavailable:
    first = first_line(exc)
    if _lost(exc):
        return DatabaseUnavailable("the PostgreSQL server is unreachable or the connection "
                                   f"was lost ({first}); nothing of this request was stored")
    return DatabaseUnavailable(f"PostgreSQL refused the request: {first}")


class PgConnection:
    """A pool of sessions of one tenant, used the way the stores use an
    ``apsw.Connection`` (module docstring). Not thread-safe: one thread at a time, as
    with apsw.

    Args:
        pool: an open :class:`psycopg_pool.ConnectionPool` whose ``configure`` is
            :func:`configure_session` (:func:`actors.store.pg.engine.open_pool`).
        owns_pool: :meth:`close` closes the pool too.
    """

    dialect = "postgres"

    def __init__(self, pool: ConnectionPool[Any], *, owns_pool: bool = False) -> None:
        self.pool = pool
        self.owns_pool = owns_pool
        self._txn: psycopg.Connection[Any] | None = None
        self._savepoints = 0
        self._changes = 0
        self._last_id = 0

    # -- the apsw surface -------------------------------------------------------------

    @property
    def in_transaction(self) -> bool:
        """Whether a ``BEGIN`` is open on this connection."""
        return self._txn is not None

    def execute(self, statements: str, bindings: Sequence[Any] | None = None) -> PgCursor:
        """Run one statement (``?`` placeholders); its rows. Raises DatabaseUnavailable."""
        word = statements.strip().rstrip(";").upper()
        if word.startswith("BEGIN"):
            self._begin()
            return PgCursor([])
        if word in ("COMMIT", "END", "ROLLBACK"):
            self._end(commit=word != "ROLLBACK")
            return PgCursor([])
        sql, returns_id, order = translate(statements)
        if order is not None and bindings is not None:
            bindings = [bindings[i] for i in order]
        if self._txn is not None:
            return self._run(self._txn, sql, bindings, returns_id)
        try:
            with self.pool.connection() as conn:
                return self._run(conn, sql, bindings, returns_id)
        except psycopg.Error as exc:
            raise _failure(exc) from None

    def _run(self, conn: psycopg.Connection[Any], sql: str, bindings: Sequence[Any] | None,
             returns_id: bool) -> PgCursor:
        try:
            with conn.cursor() as cur:
                # Always a tuple, so psycopg reads ``%%`` as ``%`` in every statement.
                cur.execute(sql, tuple(bindings) if bindings is not None else ())
                rows: list[tuple[Any, ...]] = cur.fetchall() if cur.description else []
                if cur.description is None or returns_id:
                    self._changes = max(cur.rowcount, 0)
        except psycopg.Error as exc:
            raise _failure(exc) from None
        if returns_id:
            if rows:
                self._last_id = int(rows[0][0])
            return PgCursor([])
        return PgCursor(rows)

    def changes(self) -> int:
        """Rows the last INSERT, UPDATE or DELETE changed."""
        return self._changes

    def last_insert_rowid(self) -> int:
        """The id of the row the last ``INSERT`` into an id table added."""
        return self._last_id

    def __enter__(self) -> PgConnection:
        """A savepoint inside the open transaction (a transaction when none is open),
        as apsw's ``with conn:``."""
        if self._txn is None:
            self._begin()
            self._savepoints = -1  # this block owns the transaction itself
            return self
        self._savepoints += 1
        self.execute(f"SAVEPOINT aa_{self._savepoints}")
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._savepoints == -1:
            self._savepoints = 0
            self._end(commit=kind is None)
            return
        name = f"aa_{self._savepoints}"
        self._savepoints -= 1
        if self._txn is None:
            return  # the connection was lost: the transaction is gone already
        if kind is None:
            self.execute(f"RELEASE SAVEPOINT {name}")
        else:
            self.execute(f"ROLLBACK TO SAVEPOINT {name}")
            self.execute(f"RELEASE SAVEPOINT {name}")

    def close(self) -> None:
        """End an open transaction (rolled back); close the pool when this connection
        owns it (the others on it share it)."""
        if self._txn is not None:
            self._end(commit=False)
        if self.owns_pool:
            self.pool.close()

    # -- transactions -----------------------------------------------------------------

    def _begin(self) -> None:
        if self._txn is not None:
            raise DatabaseUnavailable("a transaction is already open on this connection")
        try:
            conn = self.pool.getconn()
        except psycopg.Error as exc:
            raise _failure(exc) from None
        except Exception as exc:  # psycopg_pool.PoolTimeout: no server within the timeout
            raise DatabaseUnavailable(f"no PostgreSQL connection: {exc}") from None
        try:
            conn.execute("BEGIN")
        except psycopg.Error as exc:
            self.pool.putconn(conn)
            raise _failure(exc) from None
        self._txn = conn

    def _end(self, commit: bool) -> None:
        conn, self._txn = self._txn, None
        self._savepoints = 0
        if conn is None:
            return
        try:
            conn.execute("COMMIT" if commit else "ROLLBACK")
        except psycopg.Error as exc:
            raise _failure(exc) from None
        finally:
            self.pool.putconn(conn)
