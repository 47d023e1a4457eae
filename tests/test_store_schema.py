"""Schema, migrations, connection settings and transactions of memory.sqlite.

Rules: every test works on its own file under ``tmp_path`` (never ``:memory:``, so WAL and
file-level failures are real); no wall-clock sleeps; connections opened here are closed
by the test. Migration tests step through every historical version with
``migrate(conn, stop_before=N)``, write a row the way that version could, then migrate
fully and check the row survived and is usable.
"""

from __future__ import annotations

import os

import apsw
import pytest

from actors.store.errors import (
    DatabaseCorrupt,
    MemoryFailure,
    NotFound,
    SchemaTooNew,
    ValidationError,
)
from actors.store.notes import MemoryStore
from actors.store.profile import ProfileStore
from actors.store.schema import (
    APPLICATION_ID,
    MIGRATIONS,
    SCHEMA_VERSION,
    fts_integrity_check,
    migrate,
    open_database,
    rebuild_fts,
    user_version,
    write_txn,
)
from actors.store.vectors import VectorStore


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "memory.sqlite")


@pytest.fixture
def conn(db_path):
    c = open_database(db_path)
    yield c
    c.close()


def _tables(conn) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}


def _triggers(conn) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'trigger'")}


# -- fresh file and connection settings -------------------------------------------------


def test_schema_version_matches_migrations():
    assert SCHEMA_VERSION == len(MIGRATIONS) >= 3


def test_fresh_file_reaches_current_version_with_all_tables(conn):
    assert user_version(conn) == SCHEMA_VERSION
    expected = {
        "profile_facts",
        "memories",
        "memories_fts",
        "memory_vectors",
        "memory_links",
        "lessons",
        "lessons_fts",
        "procedures",
        "procedures_fts",
        "votes",
    }
    assert expected <= _tables(conn)
    assert {"memories_fts_ai", "memories_fts_ad", "memories_fts_au"} <= _triggers(conn)
    assert conn.execute("PRAGMA application_id").fetchall()[0][0] == APPLICATION_ID


def test_connection_pragmas(conn):
    assert conn.execute("PRAGMA journal_mode").fetchall()[0][0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchall()[0][0] == 1  # NORMAL
    assert conn.execute("PRAGMA foreign_keys").fetchall()[0][0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchall()[0][0] == 5000
    assert conn.execute("PRAGMA recursive_triggers").fetchall()[0][0] == 1


def test_migrate_twice_is_noop(conn):
    before = conn.execute("SELECT sql FROM sqlite_schema ORDER BY name").fetchall()
    assert migrate(conn) == SCHEMA_VERSION
    assert migrate(conn) == SCHEMA_VERSION
    assert conn.execute("SELECT sql FROM sqlite_schema ORDER BY name").fetchall() == before


def test_reopen_keeps_data(db_path):
    c = open_database(db_path)
    MemoryStore(c).store("persisted note")
    ProfileStore(c).set("language", "ru")
    c.close()
    c = open_database(db_path)
    assert [n.content for n in MemoryStore(c).recall("persisted")] == ["persisted note"]
    assert ProfileStore(c).get("language").value == "ru"
    c.close()


def test_stop_before_applies_only_earlier_versions(db_path):
    c = open_database(db_path, apply_migrations=False)
    assert user_version(c) == 0
    assert migrate(c, stop_before=1) == 0
    assert migrate(c, stop_before=2) == 1
    assert "profile_facts" in _tables(c) and "memories" not in _tables(c)
    assert migrate(c, stop_before=3) == 2
    assert "memories" in _tables(c) and "memory_vectors" not in _tables(c)
    assert migrate(c) == SCHEMA_VERSION
    c.close()


# -- migrating from every earlier version -----------------------------------------------


def _write_at_version(c, version: int) -> None:
    """Write rows using only the tables that exist at ``version``."""
    if version >= 1:
        c.execute(
            "INSERT INTO profile_facts (key, value, pinned, keywords, valid_from,"
            " created_at, updated_at) VALUES ('language', 'ru', 1, '[]', 1, 1, 1)"
        )
    if version >= 2:
        c.execute(
            "INSERT INTO memories (content, tags, source, scope, created_at, updated_at)"
            " VALUES ('green tea every morning', '[\"food\"]', 'user', 'all', 5, 5)"
        )
    if version >= 3:
        c.execute(
            "INSERT INTO memory_vectors (note_id, model, dim, vector, created_at)"
            " VALUES (1, 'm', 2, ?, 7)",
            (b"\x00" * 8,),
        )


@pytest.mark.parametrize("start", range(0, SCHEMA_VERSION + 1))
def test_migrate_from_every_earlier_version(db_path, start):
    c = open_database(db_path, apply_migrations=False)
    assert migrate(c, stop_before=start + 1) == start
    _write_at_version(c, start)
    c.close()

    c = open_database(db_path)  # migrates fully
    assert user_version(c) == SCHEMA_VERSION
    profiles, notes = ProfileStore(c), MemoryStore(c)
    if start >= 1:
        assert profiles.get("language").value == "ru"
    if start >= 2:
        hits = notes.recall("tea")
        assert [n.content for n in hits] == ["green tea every morning"]
        assert hits[0].tags == ["food"] and hits[0].source == "user"
    if start >= 3:
        assert VectorStore(c).count("m") == 1
    # The migrated file is fully usable.
    notes.store("written after migration")
    profiles.set("timezone", "Europe/Paris")
    assert notes.recall("migration")[0].content == "written after migration"
    assert fts_integrity_check(c)
    c.close()


def test_v8_marks_the_links_v7_wrote_by_meaning(db_path):
    """v7's links by meaning (RELATES_TO, weight = a cosine below 1) become
    ``similarity``; every other link (a person's, weight 1.0 by default) ``manual``."""
    c = open_database(db_path, apply_migrations=False)
    migrate(c, stop_before=8)
    for content in ("a", "b", "c"):
        c.execute("INSERT INTO memories (content, tags, source, scope, created_at, updated_at)"
                  " VALUES (?, '[]', 'user', 'all', 1, 1)", (content,))
    c.execute("INSERT INTO memory_links (from_id, to_id, kind, weight, created_at) VALUES"
              " (1, 2, 'RELATES_TO', 0.52, 1), (1, 3, 'RELATES_TO', 1.0, 1),"
              " (2, 3, 'CAUSED_BY', 0.4, 1)")
    assert migrate(c) == SCHEMA_VERSION
    rows = c.execute("SELECT from_id, to_id, origin FROM memory_links ORDER BY 1, 2").fetchall()
    assert rows == [(1, 2, "similarity"), (1, 3, "manual"), (2, 3, "manual")]
    c.close()


def test_v9_reindexes_notes_with_latin_diacritics_folded(db_path):
    """Text indexed before v9 kept its accents ("phở"); v9 re-derives every FTS row, so
    a search typed without them finds it."""
    c = open_database(db_path, apply_migrations=False)
    migrate(c, stop_before=9)
    c.execute("INSERT INTO memories (content, tags, source, scope, created_at, updated_at)"
              " VALUES ('The user had phở in Łódź', '[]', 'user', 'all', 1, 1)")
    c.execute("DELETE FROM memories_fts")  # as v8's index text had it: accents kept
    c.execute("INSERT INTO memories_fts(rowid, content) VALUES (1, 'The user had phở in Łódź')")
    find = lambda q: c.execute("SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?",  # noqa: E731
                               (q,)).fetchall()
    assert find('"lodz"') == []
    assert migrate(c) == SCHEMA_VERSION
    assert find('"pho"') == [(1,)] and find('"lodz"') == [(1,)]
    c.close()


# -- refusing files -----------------------------------------------------------------


def test_newer_file_is_refused_and_left_untouched(db_path):
    c = open_database(db_path)
    c.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    c.close()
    with pytest.raises(SchemaTooNew) as info:
        open_database(db_path)
    err = info.value
    assert err.code == "schema_too_new"
    assert err.file_version == SCHEMA_VERSION + 1 and err.code_version == SCHEMA_VERSION
    text = str(err)
    assert str(SCHEMA_VERSION + 1) in text and str(SCHEMA_VERSION) in text
    assert "upgrade atomic-agent" in text and "newer than the supported" in text
    raw = apsw.Connection(db_path)
    assert user_version(raw) == SCHEMA_VERSION + 1
    raw.close()


def test_migrate_refuses_newer_file_directly(db_path):
    c = open_database(db_path, apply_migrations=False)
    c.execute("PRAGMA user_version = 99")
    with pytest.raises(SchemaTooNew):
        migrate(c)
    c.close()


def test_garbage_file_is_database_corrupt(db_path):
    with open(db_path, "wb") as fh:
        fh.write(os.urandom(4096))
    with pytest.raises(DatabaseCorrupt) as info:
        open_database(db_path)
    assert info.value.code == "database_corrupt"
    assert info.value.path == db_path


def test_text_file_is_database_corrupt(db_path):
    with open(db_path, "w") as fh:
        fh.write("this is not a database\n" * 100)
    with pytest.raises(DatabaseCorrupt):
        open_database(db_path)


@pytest.mark.parametrize("keep", [50, 100, 4096])
def test_truncated_file_is_database_corrupt(db_path, tmp_path, keep):
    c = open_database(db_path)
    store = MemoryStore(c)
    for i in range(200):
        store.store(f"note number {i} " + "x" * 200)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
    data = open(db_path, "rb").read()
    target = str(tmp_path / f"truncated-{keep}.sqlite")
    with open(target, "wb") as fh:
        fh.write(data[:keep])
    with pytest.raises(DatabaseCorrupt):
        open_database(target)


def test_error_hierarchy_and_codes():
    assert issubclass(ValidationError, MemoryFailure)
    assert issubclass(NotFound, MemoryFailure)
    assert issubclass(SchemaTooNew, MemoryFailure)
    assert issubclass(DatabaseCorrupt, MemoryFailure)
    err = ValidationError("content", "must not be empty")
    assert (err.code, err.field, err.message) == ("invalid_argument", "content", "must not be empty")
    assert str(err) == "content: must not be empty"
    assert err.to_dict() == {"code": "invalid_argument", "message": "content: must not be empty"}
    assert NotFound("note 3").code == "not_found"


# -- transactions ---------------------------------------------------------------------


def test_store_writes_begin_immediate(conn):
    statements: list[str] = []

    def trace(_cursor, sql, _bindings):
        statements.append(sql.strip().upper())
        return True

    conn.exec_trace = trace
    MemoryStore(conn).store("traced note")
    ProfileStore(conn).set("traced", "yes")
    conn.exec_trace = None
    begins = [s for s in statements if s.startswith("BEGIN")]
    assert begins and all(s == "BEGIN IMMEDIATE" for s in begins)


def test_write_txn_rolls_back_on_error(conn):
    store = MemoryStore(conn)
    with pytest.raises(RuntimeError):
        with write_txn(conn):
            store.store("never committed")
            raise RuntimeError("boom")
    assert store.count() == 0
    assert not conn.in_transaction


def test_write_txn_nested_is_one_outer_transaction(conn):
    store, profiles = MemoryStore(conn), ProfileStore(conn)
    with write_txn(conn):
        store.store("first")
        with pytest.raises(ValidationError):
            store.store("   ")  # rejected before writing; outer txn goes on
        with pytest.raises(RuntimeError):
            with write_txn(conn):  # savepoint: only this part rolls back
                store.store("inner, rolled back")
                raise RuntimeError("inner")
        profiles.set("drink", "tea")
        assert conn.in_transaction
    assert [n.content for n in store.list()] == ["first"]
    assert profiles.get("drink").value == "tea"


def test_deferred_read_then_write_raises_busy_documented(db_path):
    """Why writes start with BEGIN IMMEDIATE: a deferred transaction that read before
    another connection wrote cannot become a write transaction and fails busy
    (https://www.sqlite.org/isolation.html)."""
    c1 = open_database(db_path)
    c2 = open_database(db_path)
    c1.setbusytimeout(200)
    c2.setbusytimeout(200)
    ProfileStore(c1).set("city", "Paris")
    c2.execute("BEGIN")
    c2.execute("SELECT value FROM profile_facts WHERE key = 'city'").fetchall()
    ProfileStore(c1).set("diet", "vegan")  # commits while c2 holds a read snapshot
    with pytest.raises(apsw.BusyError):
        c2.execute("UPDATE profile_facts SET value = 'Lyon' WHERE key = 'city'")
    c2.execute("ROLLBACK")
    # The store's own helper does the same read-modify-write without BusyError.
    ProfileStore(c2).set("city", "Lyon")
    assert ProfileStore(c1).get("city").value == "Lyon"
    c1.close()
    c2.close()


# -- integrity, triggers, cascades --------------------------------------------------------


def test_partial_unique_index_allows_one_active_row_per_key(conn):
    ProfileStore(conn).set("language", "ru")
    with pytest.raises(apsw.ConstraintError):
        conn.execute(
            "INSERT INTO profile_facts (key, value, pinned, keywords, valid_from,"
            " created_at, updated_at) VALUES ('language', 'en', 1, '[]', 1, 1, 1)"
        )


def test_insert_or_replace_keeps_fts_consistent(conn):
    store = MemoryStore(conn)
    note = store.store("green tea every morning")
    conn.execute(
        "INSERT OR REPLACE INTO memories (id, content, tags, source, scope, created_at,"
        " updated_at) VALUES (?, 'black coffee every morning', '[]', 'agent', 'all', 1, 1)",
        (note.id,),
    )
    assert store.recall("tea") == []
    assert [n.id for n in store.recall("coffee")] == [note.id]
    assert conn.execute("SELECT count(*) FROM memories_fts").fetchall()[0][0] == 1
    fts_integrity_check(conn)


def test_deleting_a_note_cascades_vectors_and_links(conn):
    store = MemoryStore(conn)
    a, b = store.store("note a"), store.store("note b")
    VectorStore(conn).put("m", 2, [(a.id, b"\x00" * 8), (b.id, b"\x00" * 8)])
    conn.execute(
        "INSERT INTO memory_links (from_id, to_id, kind, created_at) VALUES (?, ?, 'RELATES_TO', 1)",
        (a.id, b.id),
    )
    assert store.forget(a.id)
    assert VectorStore(conn).count("m") == 1
    assert conn.execute("SELECT count(*) FROM memory_links").fetchall()[0][0] == 0


def test_lessons_and_procedures_fts_triggers(conn):
    conn.execute(
        "INSERT INTO lessons (activation, principle, tags, created_at, updated_at)"
        " VALUES ('部署之前', 'Run the staging migration first', '[\"deploy\"]', 1, 1)"
    )
    conn.execute(
        "INSERT INTO procedures (activation, steps, created_at, updated_at)"
        " VALUES ('release', '[{\"description\": \"os.fs.glob the files\"}]', 1, 1)"
    )
    hit = conn.execute("SELECT rowid FROM lessons_fts WHERE lessons_fts MATCH '\"部署\"'").fetchall()
    assert hit == [(1,)]
    hit = conn.execute("SELECT rowid FROM procedures_fts WHERE procedures_fts MATCH '\"glob\"'").fetchall()
    assert hit == [(1,)]
    conn.execute("DELETE FROM lessons")
    assert conn.execute("SELECT count(*) FROM lessons_fts").fetchall()[0][0] == 0
    assert fts_integrity_check(conn) == ["memories_fts", "lessons_fts", "procedures_fts"]


def test_rebuild_fts_reindexes_everything(conn):
    store = MemoryStore(conn)
    store.store("我喜欢喝咖啡")
    store.store("Sister lives in Lyon")
    conn.execute("DELETE FROM memories_fts")
    assert store.recall("Lyon") == []
    assert rebuild_fts(conn) == 2
    assert len(store.recall("Lyon")) == 1 and len(store.recall("咖啡")) == 1
    fts_integrity_check(conn)


_STRESS_WRITER = """
import sys
from actors.store.profile import ProfileStore
from actors.store.schema import open_database, write_txn

path, tag = sys.argv[1], sys.argv[2]
conn = open_database(path)
store = ProfileStore(conn)
for i in range(200):
    key = ("city", "diet", "pet")[i % 3]
    with write_txn(conn):  # read-modify-write through the store's transaction helper
        current = store.get(key)
        store.set(key, f"{tag}-{i}-after-{current.value if current else 'none'}")
conn.close()
"""


def test_two_processes_read_modify_write_without_busy(db_path):
    """BEGIN IMMEDIATE under stress: 2 processes x 200 SETs, no BusyError, nothing lost."""
    import subprocess
    import sys

    open_database(db_path).close()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _STRESS_WRITER, db_path, tag],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for tag in ("A", "B")
    ]
    try:
        results = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_out, err) in zip(procs, results):
        assert p.returncode == 0, err.decode()
    c = open_database(db_path)
    store = ProfileStore(c)
    total = c.execute("SELECT count(*) FROM profile_facts").fetchall()[0][0]
    assert total == 400
    for key in ("city", "diet", "pet"):
        history = store.history(key)
        assert history[-1].active and store.get(key).id == history[-1].id
        # Each write saw the value committed just before it (no lost update).
        for prev, cur in zip(history, history[1:]):
            assert cur.value.endswith(f"-after-{prev.value}")
    c.close()
