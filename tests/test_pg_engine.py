"""The PostgreSQL engine on a real server (``tests/pg.py``): migrations, tenants kept
apart by the database itself, clear failures. The stores' own behaviour on this engine is
tested by the store suites, parametrised over both engines (``engine_conn``)."""

from __future__ import annotations

import threading

import psycopg
import pytest

from actors.store.errors import DatabaseUnavailable, SchemaTooNew
from actors.store.pg.connection import MEMBER_ROLE, translate
from actors.store.pg.engine import connect_admin, open_engine_connection
from actors.store.pg.schema import SCHEMA_VERSION, migrate, schema_version
from actors.store.profile import ProfileStore


def test_translate_keeps_quoted_text_and_returns_new_ids() -> None:
    sql, returns, order = translate("SELECT '?', \"a?\" FROM t WHERE x = ? AND y LIKE '%a'")
    assert sql == "SELECT '?', \"a?\" FROM t WHERE x = %s AND y LIKE '%%a'"
    assert not returns and order is None
    sql, returns, _ = translate("INSERT INTO memories (content) VALUES (?)")
    assert sql.endswith("VALUES (%s) RETURNING id") and returns
    assert translate("INSERT OR IGNORE INTO memory_links (a) VALUES (?)") == (
        "INSERT INTO memory_links (a) VALUES (%s) ON CONFLICT DO NOTHING", False, None)
    assert translate("BEGIN IMMEDIATE")[0] == "BEGIN"
    assert translate("SELECT 1 WHERE a = ?1 OR b = ?1 AND c IS NOT ?2") == (
        "SELECT 1 WHERE a = %s OR b = %s AND c IS DISTINCT FROM %s", False, (0, 0, 1))


def test_migrating_twice_or_at_once_applies_each_step_once(pg_url: str) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with connect_admin(pg_url) as admin:
                migrate(admin)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with connect_admin(pg_url) as admin:
        assert migrate(admin) == SCHEMA_VERSION == schema_version(admin)
        tables = {r[0] for r in admin.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert {"profile_facts", "memories", "memory_vectors", "atomic_agent_schema"} <= tables


def test_a_newer_schema_is_refused_and_left_alone(pg_url: str) -> None:
    with connect_admin(pg_url) as admin:
        migrate(admin)
        admin.execute("UPDATE atomic_agent_schema SET value = 99 WHERE name = 'version'")
    with pytest.raises(SchemaTooNew, match="99 is newer than the supported version"):
        open_engine_connection(pg_url, "ana")
    with connect_admin(pg_url) as admin:
        assert schema_version(admin) == 99


def test_tenants_are_kept_apart_by_the_database(pg_url: str) -> None:
    ana, bob = open_engine_connection(pg_url, "ana"), open_engine_connection(pg_url, "bob")
    try:
        ProfileStore(ana).set("city", "Porto")
        ProfileStore(bob).set("city", "Oslo")
        assert [f.value for f in ProfileStore(ana).list()] == ["Porto"]
        assert [f.value for f in ProfileStore(bob).history("city")] == ["Oslo"]
        # A query naming the other tenant finds nothing: row-level security, not our SQL.
        assert ana.execute("SELECT count(*) FROM profile_facts WHERE tenant_id = ?",
                           ("bob",)).fetchall() == [(0,)]
        assert ana.execute("SELECT count(*) FROM profile_facts").fetchall() == [(1,)]
        # Nor can it write a row into the other's memory, or move one there.
        with pytest.raises(DatabaseUnavailable, match="row-level security"):
            ana.execute("INSERT INTO profile_facts (tenant_id, key, value, valid_from,"
                        " created_at, updated_at) VALUES ('bob', 'x', 'y', 1, 1, 1)")
        with pytest.raises(DatabaseUnavailable, match="row-level security"):
            ana.execute("UPDATE profile_facts SET tenant_id = 'bob'")
        # The login here is a superuser (who bypasses row-level security): sessions
        # run as the member role, which does not.
        assert ana.execute("SELECT current_user").fetchall() == [(MEMBER_ROLE,)]
        assert [f.value for f in ProfileStore(bob).list()] == ["Oslo"]
    finally:
        for c in (ana, bob):
            c.pool.close()


def test_an_unreachable_server_is_one_clear_line_without_the_password(tmp_path) -> None:
    url = f"postgresql://ana:s3cret@/memory?host={tmp_path}&port=1"
    with pytest.raises(DatabaseUnavailable) as caught:
        open_engine_connection(url, "ana")
    message = str(caught.value)
    assert message.startswith("the memory database is unavailable: cannot connect")
    assert "s3cret" not in message and "\n" not in message


def test_a_lost_connection_fails_the_request_and_the_pool_reconnects(pg_url: str,
                                                                    pg_server) -> None:
    conn = open_engine_connection(pg_url, "ana", size=1)
    try:
        ProfileStore(conn).set("city", "Porto")
        with psycopg.connect(pg_server.get_uri(), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = %s AND pid <> pg_backend_pid()",
                          (pg_url.rsplit("/", 1)[1].split("?")[0],))
        # The pool checks a session before lending it: the next request gets a fresh one.
        assert [f.value for f in ProfileStore(conn).list()] == ["Porto"]
    finally:
        conn.pool.close()
