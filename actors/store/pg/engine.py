"""Opening the PostgreSQL engine: the admin session that migrates, the tenant's pool.

:func:`open_pool` checks the server once (one clear line when it is unreachable, has no
pgvector or a newer schema), migrates it, then opens the pool whose every session is
the tenant's (:func:`~actors.store.pg.connection.configure_session`). The URL is never
put in an error or a log line: psycopg's messages name the host, never the password,
and ours say "the memory database".
"""

from __future__ import annotations

import functools
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from ..errors import DatabaseUnavailable
from .connection import PgConnection, configure_session
from .schema import migrate

__all__ = ["connect_admin", "open_engine_connection", "open_pool"]

CONNECT_TIMEOUT_S = 10
"""Seconds to reach the server at start, and to get a pooled session later."""


def connect_admin(url: str) -> psycopg.Connection[Any]:
    """An autocommit session as the URL's own role (migrations run in it). Raises
    DatabaseUnavailable: unreachable server, bad credentials, no such database."""
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc) else repr(exc)
        raise DatabaseUnavailable(f"cannot connect to the PostgreSQL server: {first}") from None


def open_pool(url: str, tenant: str, *, size: int = 4, team: str | None = None,
              team_write: bool = False) -> ConnectionPool[Any]:
    """The tenant's pool of ``size`` sessions (opened now, so a bad URL fails here).
    Raises DatabaseUnavailable."""
    pool: ConnectionPool[Any] = ConnectionPool(
        url, min_size=1, max_size=size, open=False, timeout=CONNECT_TIMEOUT_S,
        kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
        configure=functools.partial(configure_session, tenant=tenant, team=team,
                                    team_write=team_write),
        check=ConnectionPool.check_connection, reconnect_timeout=0,
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
    return PgConnection(open_pool(url, tenant, size=size))
