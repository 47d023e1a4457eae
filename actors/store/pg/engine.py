"""Opening the PostgreSQL engine: the admin session that migrates, the tenant's pool.

:func:`open_pool` checks the server once (one clear line when it is unreachable, has no
pgvector or a newer schema), migrates it, then opens the pool whose every session is
the tenant's (:func:`~actors.store.pg.connection.configure_session`). The URL is never
put in an error or a log line: psycopg's messages name the host, never the password,
and ours say "the memory database".
"""

from __future__ import annotations

import functools
import logging
import os
import re
import secrets
import time
import weakref
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from runtime.kernel.actor import first_line
from runtime.services.config import TENANT_PATTERN, StoreConfig

from ..errors import DatabaseUnavailable
from .connection import PgConnection, configure_session
from .schema import migrate

__all__ = ["TENANT_FILE", "connect_admin", "open_engine_connection", "open_pool", "open_postgres",
           "open_team", "team_tenant", "tenant_of", "url_of"]

logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
# (each failed reconnection would print two lines on the daemon's stderr; the memory actor
# says once that the server is away, and once that it is back)

CONNECT_TIMEOUT_S = 10
"""Seconds to reach the server at start, and to get a pooled session later."""


def connect_admin(url: str) -> psycopg.Connection[Any]:
    """An autocommit session as the URL's own role (migrations run in it). Raises
    DatabaseUnavailable: unreachable server, bad credentials, no such database."""
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as exc:
        raise DatabaseUnavailable("cannot connect to the PostgreSQL server: "
                                  f"{first_line(exc)}") from None


IDLE_CHECK_S = 1.0
"""A session lent again within this many seconds of its return is not checked first."""


class IdleCheck:
    """The pool's ``check`` and ``reset`` callbacks: a session idle in the pool for more
    than :data:`IDLE_CHECK_S` is checked with a round trip before it is lent
    (``ConnectionPool.check_connection``), so one the server dropped meanwhile (a
    restart) is replaced, not handed out; one returned moments ago is lent as it is.
    Checking every loan cost a round trip per statement — a third of a turn's time in
    the memory actor (py-spy, ``python -m bench.turn --engine postgres``). A session that
    broke within the last second fails its statement (``DatabaseUnavailable``: nothing
    of that request is stored) and the pool discards it."""

    def __init__(self) -> None:
        self.returned: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()

    def reset(self, conn: psycopg.Connection[Any]) -> None:
        """Note when ``conn`` came back to the pool."""
        self.returned[conn] = time.monotonic()

    def check(self, conn: psycopg.Connection[Any]) -> None:
        """Raise (the pool then replaces ``conn``) when ``conn`` was idle long enough to
        be worth a check and the check fails."""
        if time.monotonic() - self.returned.get(conn, 0.0) > IDLE_CHECK_S:
            ConnectionPool.check_connection(conn)


def open_pool(url: str, tenant: str, *, size: int = 4) -> ConnectionPool[Any]:
    """The tenant's pool of ``size`` sessions (opened now, so a bad URL fails here).
    Raises DatabaseUnavailable."""
    idle = IdleCheck()
    pool: ConnectionPool[Any] = ConnectionPool(
        url, min_size=1, max_size=size, open=False, timeout=CONNECT_TIMEOUT_S,
        kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
        configure=functools.partial(configure_session, tenant=tenant),
        check=idle.check, reset=idle.reset, reconnect_timeout=0,
        name=f"atomic-agent-{tenant}")
    try:
        pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
    except Exception as exc:  # psycopg_pool.PoolTimeout, psycopg.Error
        pool.close()
        raise DatabaseUnavailable(f"cannot open sessions on the PostgreSQL server: {exc}"
                                  ) from None
    return pool


def open_engine_connection(url: str, tenant: str, *, size: int = 4) -> PgConnection:
    """Migrate the database (admin session), then the tenant's :class:`PgConnection`.
    Raises DatabaseUnavailable, SchemaTooNew."""
    admin = connect_admin(url)
    try:
        migrate(admin)
    finally:
        admin.close()
    return PgConnection(open_pool(url, tenant, size=size), owns_pool=True)


TENANT_FILE = "tenant"
"""``<state>/tenant``: the tenant id a daemon made for itself (``memory.store.tenant``
unset), kept so that it is the same person after a restart."""


def tenant_of(state_dir: Path, configured: str | None) -> str:
    """The daemon's tenant: ``memory.store.tenant``, else the id in ``<state>/tenant``,
    made once (``p-`` and 16 hex digits) and kept (0600)."""
    if configured:
        return configured
    path = state_dir / TENANT_FILE
    try:
        found = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        found = ""
    if re.fullmatch(TENANT_PATTERN, found):
        return found
    made = f"p-{secrets.token_hex(8)}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(made + "\n")
    return made


def url_of(state_dir: Path, url: str | None, url_file: str | None) -> str:
    """The server URL: ``memory.store.url``, or the first line of ``urlFile`` (relative to
    the state directory). Raises DatabaseUnavailable naming the file (never its text)."""
    if url:
        return url
    if not url_file:
        raise DatabaseUnavailable("memory.store.engine is postgres but neither "
                                  "memory.store.url nor memory.store.urlFile is set")
    path = Path(url_file).expanduser()
    path = path if path.is_absolute() else state_dir / path
    try:
        text = path.read_text(encoding="utf-8").strip().splitlines()
    except OSError as exc:
        raise DatabaseUnavailable(f"cannot read memory.store.urlFile {path}: "
                                  f"{exc.strerror or exc}") from None
    if not text or not text[0].startswith(("postgresql://", "postgres://")):
        raise DatabaseUnavailable(f"memory.store.urlFile {path} does not start with a "
                                  "postgresql:// URL")
    return text[0].strip()


def open_postgres(state_dir: Path, store: StoreConfig) -> tuple[PgConnection, PgConnection]:
    """The memory actor's writer and reader connections on the configured server (one
    pool of ``memory.store.poolSize`` sessions): the schema migrated first, the tenant's
    sessions after. Raises DatabaseUnavailable, SchemaTooNew (one line each)."""
    url = url_of(state_dir, store.url, store.url_file)
    writer = open_engine_connection(url, tenant_of(state_dir, store.tenant),
                                    size=max(2, store.pool_size))
    return writer, PgConnection(writer.pool)


def team_tenant(team: str) -> str:
    """The tenant id of team ``team``'s shared space (``team:<name>``: no person's id has
    a colon)."""
    return f"team:{team}"


def open_team(state_dir: Path, store: StoreConfig
              ) -> tuple[PgConnection, PgConnection] | None:
    """The writer and reader connections to the team space of ``memory.store.team``
    (None without one), on a pool of its own (two sessions). Raises
    DatabaseUnavailable."""
    if not store.team:
        return None
    url = url_of(state_dir, store.url, store.url_file)
    writer = PgConnection(open_pool(url, team_tenant(store.team), size=2), owns_pool=True)
    return writer, PgConnection(writer.pool)
