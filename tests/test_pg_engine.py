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


def test_a_tenant_bound_to_a_login_is_closed_to_every_other_login(pg_url: str) -> None:
    """With one database login per person and each tenant bound to its login
    (``atomic_agent_tenant_roles``), a daemon that claims someone else's tenant id in its
    config sees and writes nothing of theirs; a team's tenant bound to a group role is
    open to its members only. An unbound tenant works as before."""
    import re

    from actors.store.pg.schema import TENANT_ROLES

    def login(name: str) -> str:  # the same server and database, as another login
        return re.sub(r"^postgresql://[^@]*@", f"postgresql://{name}:pw@", pg_url)

    with connect_admin(pg_url) as admin:
        migrate(admin)
        for role in ("ana", "bob", "carol"):
            admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw' IN ROLE {MEMBER_ROLE}")
        admin.execute("CREATE ROLE garden NOLOGIN")
        admin.execute("GRANT garden TO ana, bob")
        admin.execute(f"INSERT INTO {TENANT_ROLES} VALUES ('p-ana', 'ana'), ('p-bob', 'bob'),"
                      " ('team:garden', 'garden')")
    conns = []
    try:
        ana = open_engine_connection(login("ana"), "p-ana")
        conns.append(ana)
        ProfileStore(ana).set("city", "Porto")
        bob_as_ana = open_engine_connection(login("bob"), "p-ana")  # a forged tenant id
        conns.append(bob_as_ana)
        assert ProfileStore(bob_as_ana).list() == []
        assert bob_as_ana.execute("SELECT count(*) FROM profile_facts").fetchall() == [(0,)]
        with pytest.raises(DatabaseUnavailable, match="row-level security"):
            ProfileStore(bob_as_ana).set("city", "Oslo")
        assert [f.value for f in ProfileStore(ana).list()] == ["Porto"]
        for name, sees in (("ana", True), ("bob", True), ("carol", False)):
            team = open_engine_connection(login(name), "team:garden")
            conns.append(team)
            if name == "ana":
                ProfileStore(team).set("meeting_day", "Thursday")
            assert bool(ProfileStore(team).list()) is sees, name
        carol = open_engine_connection(login("carol"), "p-carol")  # unbound: as before
        conns.append(carol)
        ProfileStore(carol).set("city", "Lima")
        assert [f.value for f in ProfileStore(carol).list()] == ["Lima"]
    finally:
        for c in conns:
            c.pool.close()


def test_a_server_without_pgvector_is_one_clear_line(pg_url: str) -> None:
    """A server whose pgvector is not installed: the schema is not made and the start
    fails with one line that says what to install (the extension's control file is
    hidden for the test, on the test server only)."""
    from pathlib import Path

    with connect_admin(pg_url) as admin:
        (share,) = admin.execute(
            "SELECT setting FROM pg_config WHERE name = 'SHAREDIR'").fetchone()
    control = Path(share) / "extension" / "vector.control"
    hidden = control.with_name("vector.control.hidden")
    control.rename(hidden)
    try:
        with pytest.raises(DatabaseUnavailable) as caught:
            open_engine_connection(pg_url, "t1")
    finally:
        hidden.rename(control)
    message = str(caught.value)
    assert "no pgvector extension" in message and "\n" not in message
    with connect_admin(pg_url) as admin:
        assert schema_version(admin) == 0  # nothing half made


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


def test_both_engines_rank_notes_and_lessons_alike(pg_url: str, tmp_path) -> None:
    """The same notes and lessons on SQLite and on PostgreSQL: every query recalls the
    same notes in the same order with the same scores (FTS5's BM25 both times), also
    with a tag filter, a CJK phrase, a prefix term and the common-word split."""
    from actors.store import recall
    from actors.store.lessons import LessonStore
    from actors.store.notes import MemoryStore
    from actors.store.schema import open_database

    lite = open_database(str(tmp_path / "memory.sqlite"))
    pg = open_engine_connection(pg_url, "ana")
    texts = [
        "Ana went camping in Yosemite with her sister last summer",
        "The camping stove broke on the second night",
        "Ana's sister Lea lives in Lyon and works as a nurse",
        "I like to drink coffee: 我喜欢喝咖啡 every morning",
        "Ёжиков видели в парке у дома",
        "Remember to renew the passport before the trip to Japan",
        "Lea asked what kind of yoga Ana does?",
        "Ana does hot yoga twice a week at the studio near work",
        "The deploy to staging failed because flyway baseline was missing",
    ] + [f"filler note number {i} about camping gear and coffee" for i in range(30)]
    try:
        stores = [MemoryStore(c, dedup=False) for c in (lite, pg)]
        for i, text in enumerate(texts):
            for store in stores:
                store.store(text, tags=["even"] if i % 2 == 0 else ["odd"],
                            session_id=f"s{i // 4}", now_ms=1000 + i)
        queries = ["camping trip", "Lea sister nurse", "咖啡", "ёжик", "yoga studio",
                   "what did the deploy to staging do", "coffee camping filler"]
        for query in queries:
            for tags in (None, ["even"]):
                got = [[(n.content, round(n.score or 0, 9)) for n in
                        s.recall(query, k=8, tags=tags, bump=False)] for s in stores]
                assert got[0] == got[1], (query, tags)
                assert got[0] or tags, query
        lessons = [LessonStore(c) for c in (lite, pg)]
        for store in lessons:
            store.create("when Ana plans a camping trip", "pack the spare stove",
                         parent_ids=[1], tags=["camping"])
            store.create("when deploying to staging", "run the flyway baseline first",
                         parent_ids=[9], tags=["deploy"])
        for query in ("camping stove", "staging deploy baseline"):
            a, b = ([(x.activation, round(x.score or 0, 9)) for x in s.recall(query, k=2)]
                    for s in lessons)
            assert a == b and a, query
        recall.COMMON_MIN_NOTES, saved = 1, recall.COMMON_MIN_NOTES
        try:
            split = [[n.content for n in s.recall("coffee camping filler note", k=8,
                                                  bump=False)] for s in stores]
        finally:
            recall.COMMON_MIN_NOTES = saved
        assert split[0] == split[1]
    finally:
        lite.close()
        pg.pool.close()


def test_a_version_1_database_is_brought_to_the_newest_with_its_rows(pg_url: str) -> None:
    """A database made by the first release (v1) migrates forward at the next start:
    its notes stay, and v2's vector index function is there for the member role."""
    from actors.store.notes import MemoryStore
    from actors.store.pg.engine import open_engine_connection, open_pool
    from actors.store.pg.connection import PgConnection
    from actors.store.vectors import VectorStore

    with connect_admin(pg_url) as admin:
        assert migrate(admin, stop_before=2) == 1
    old = PgConnection(open_pool(pg_url, "t1", size=2), owns_pool=True)
    kept = MemoryStore(old).store("a note written under schema v1").id
    old.close()
    conn = open_engine_connection(pg_url, "t1", size=2)
    try:
        assert schema_version_of(pg_url) == SCHEMA_VERSION
        assert [n.id for n in MemoryStore(conn).list(10)] == [kept]
        VectorStore(conn).put("M", 8, [(kept, bytes(32))])  # the index made on first use
        assert conn.execute("SELECT count(*) FROM pg_indexes WHERE indexname = "
                            "'memory_vectors_hnsw_8'").fetchall()[0][0] == 1
    finally:
        conn.close()


def schema_version_of(url: str) -> int:
    with connect_admin(url) as admin:
        return schema_version(admin)
