"""ProfileStore: validation, bi-temporal history, eviction.

Rules: each test opens its own migrated file under ``tmp_path``; time is passed
explicitly as ``now_ms`` wherever ordering matters (no clocks, no sleeps).
"""

from __future__ import annotations

import pytest

from actors.store.errors import ValidationError
from actors.store.profile import (
    PROFILE_KEY_MAX_LENGTH,
    PROFILE_VALUE_MAX_LENGTH,
    ProfileFact,
    ProfileStore,
)
from actors.store.sql import write_txn



@pytest.fixture
def conn(engine_conn):
    """Every test here runs on each engine (SQLite, PostgreSQL)."""
    return engine_conn


@pytest.fixture
def store(conn):
    return ProfileStore(conn)


# -- basics and history -------------------------------------------------------------


def test_set_get_list(store):
    fact = store.set("language", "ru", now_ms=1000)
    assert isinstance(fact, ProfileFact)
    assert (fact.key, fact.value, fact.pinned, fact.keywords) == ("language", "ru", True, [])
    assert fact.valid_from == fact.updated_at == 1000 and fact.superseded_by is None
    store.set("timezone", "Europe/Paris", now_ms=1001)
    assert store.get("language") == fact
    assert [f.key for f in store.list()] == ["language", "timezone"]
    assert store.get("missing") is None


def test_superseding_keeps_history(store):
    ru = store.set("language", "ru", now_ms=1000)
    en = store.set("language", "en", now_ms=2000)
    assert [f.value for f in store.list()] == ["en"]
    history = store.history("language")
    assert [f.value for f in history] == ["ru", "en"]
    assert history[0].id == ru.id and history[0].superseded_by == en.id
    assert history[0].updated_at == 2000 and history[0].valid_from == 1000
    assert history[1].active and not history[0].active
    row = store.conn.execute("SELECT supersedes FROM profile_facts WHERE id = ?", (en.id,))
    assert row.fetchall() == [(ru.id,)]


def test_keys_are_trimmed_and_case_folded(store):
    store.set("Preferred_Name", "Sam")
    store.set("  preferred_name ", "Alex")
    assert [(f.key, f.value) for f in store.list()] == [("preferred_name", "Alex")]
    assert store.get("PREFERRED_NAME").value == "Alex"
    assert len(store.history("preferred_name")) == 2


def test_identical_set_is_a_noop(store):
    """Duplicates: repeating a SET never creates a second row nor deletes the fact."""
    first = store.set("coffee", "oat flat white", now_ms=1)
    again = store.set("coffee", "oat flat white", now_ms=2)
    assert again == first
    assert len(store.history("coffee")) == 1


def test_one_current_value_per_key_latest_wins(store):
    """Contradictions: one current value per key, the latest write wins."""
    store.set("preferred_name", "Sam")
    store.set("preferred_name", "Alex", pinned=True)
    store.set("diet", "vegetarian", pinned=False, keywords=["food", "dinner"])
    store.set("diet", "eats fish", pinned=False, keywords=["food"])
    store.set("Preferred_Name", "Alex")
    facts = {f.key: f for f in store.list()}
    assert set(facts) == {"preferred_name", "diet"}
    assert facts["preferred_name"].value == "Alex" and facts["preferred_name"].pinned
    assert facts["diet"].value == "eats fish" and facts["diet"].keywords == ["food"]
    assert not facts["diet"].pinned


def test_omitted_options_are_kept(store):
    store.set("runner", "pytest", pinned=False, keywords=["python", "test"])
    updated = store.set("runner", "pytest -q")
    assert updated.pinned is False and updated.keywords == ["python", "test"]
    pinned = store.set("runner", "pytest -x", pinned=True)
    assert pinned.pinned and pinned.keywords == []
    assert store.set("fresh", "value").pinned is True


def test_keywords_only_kept_when_unpinned(store):
    fact = store.set("lang", "ru", pinned=True, keywords=["lang", "language"])
    assert fact.keywords == []
    # Keywords of a pinned fact are ignored, so even invalid ones do not fail.
    assert store.set("lang2", "en", pinned=True, keywords=["x" * 100]).keywords == []


def test_keywords_normalised(store):
    fact = store.set("runner", "pytest", pinned=False, keywords=[" Python ", "PYTEST", "python"])
    assert fact.keywords == ["python", "pytest"]


def test_remove_keeps_history(store):
    store.set("language", "ru", now_ms=1)
    store.set("language", "en", now_ms=2)
    assert store.remove("language", now_ms=3) is True
    assert store.remove("language") is False
    assert store.get("language") is None
    assert store.list() == []
    history = store.history("language")
    assert [f.value for f in history] == ["ru", "en"]
    assert history[1].superseded_by == history[1].id  # retired without successor
    assert store.set("language", "de").value == "de"
    assert [f.value for f in store.history("language")] == ["ru", "en", "de"]


def test_get_by_id_returns_history_rows(store):
    old = store.set("k", "v1")
    store.set("k", "v2")
    assert store.get_by_id(old.id).value == "v1"
    with pytest.raises(ValidationError):
        store.get_by_id(0)


# -- validation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["", "   ", "_lead", ".lead", "-lead", "has space", "ключ", "a/b", "a:b", "k" * 121, 42, None],
)
def test_invalid_keys(store, key):
    with pytest.raises(ValidationError) as info:
        store.set(key, "v")
    assert info.value.field == "key" and info.value.code == "invalid_argument"


@pytest.mark.parametrize("key", ["a", "A1", "user.name", "a-b_c.d", "9lives", "k" * PROFILE_KEY_MAX_LENGTH])
def test_valid_keys(store, key):
    assert store.set(key, "v").key == key.lower()


def test_charset_message(store):
    with pytest.raises(ValidationError, match=r"\[a-zA-Z0-9_.-\]"):
        store.set("bad key", "v")


@pytest.mark.parametrize("value", ["", "   ", "\n", "x" * (PROFILE_VALUE_MAX_LENGTH + 1), 7, None])
def test_invalid_values(store, value):
    with pytest.raises(ValidationError) as info:
        store.set("k", value)
    assert info.value.field == "value"


def test_value_is_not_trimmed_and_max_length_ok(store):
    assert store.set("padded", "  spaced  ").value == "  spaced  "
    assert len(store.set("long", "x" * PROFILE_VALUE_MAX_LENGTH).value) == PROFILE_VALUE_MAX_LENGTH


@pytest.mark.parametrize(
    "keywords",
    [[f"k{i}" for i in range(9)], [""], ["  "], ["x" * 41], "python", [3], {"a": 1}],
)
def test_invalid_keywords(store, keywords):
    with pytest.raises(ValidationError) as info:
        store.set("k", "v", pinned=False, keywords=keywords)
    assert info.value.field == "keywords"
    assert store.get("k") is None  # nothing written


def test_max_keywords_ok(store):
    kws = [f"k{i}" for i in range(8)]
    assert store.set("k", "v", pinned=False, keywords=kws).keywords == kws
    assert store.set("k2", "v", pinned=False, keywords=["x" * 40]).keywords == ["x" * 40]


def test_invalid_pinned(store):
    with pytest.raises(ValidationError) as info:
        store.set("k", "v", pinned="yes")
    assert info.value.field == "pinned"


def test_read_methods_validate_keys(store):
    for method in (store.get, store.remove, store.history):
        with pytest.raises(ValidationError):
            method("bad key")


def test_constructor_rejects_bad_cap(conn):
    for cap in (0, -1, 1.5, True):
        with pytest.raises(ValueError):
            ProfileStore(conn, max_unpinned=cap)


# -- eviction ----------------------------------------------------------------------------


def test_unpinned_cap_evicts_oldest(conn):
    store = ProfileStore(conn, max_unpinned=3)
    for i in range(4):
        store.set(f"topic{i}", f"v{i}", pinned=False, keywords=["x"], now_ms=1000 + i)
    assert [f.key for f in store.list()] == ["topic1", "topic2", "topic3"]
    assert store.count_unpinned() == 3
    # Evicted like remove: the row stays in history.
    assert [f.value for f in store.history("topic0")] == ["v0"]


def test_pinned_facts_never_counted_nor_evicted(conn):
    store = ProfileStore(conn, max_unpinned=2)
    store.set("name", "Alex", now_ms=1)
    store.set("language", "ru", now_ms=2)
    for i in range(5):
        store.set(f"ctx{i}", "v", pinned=False, keywords=["k"], now_ms=10 + i)
        assert store.count_unpinned() <= 2
    keys = [f.key for f in store.list()]
    assert "name" in keys and "language" in keys
    assert keys.count("ctx3") == 1 and keys.count("ctx4") == 1 and len(keys) == 4


def test_just_written_row_survives_eviction(conn):
    store = ProfileStore(conn, max_unpinned=2)
    store.set("a", "v", pinned=False, keywords=["k"], now_ms=5000)
    store.set("b", "v", pinned=False, keywords=["k"], now_ms=6000)
    # Written with the oldest timestamp of all: still must not be the one evicted.
    newest = store.set("c", "v", pinned=False, keywords=["k"], now_ms=1)
    keys = [f.key for f in store.list()]
    assert newest.key in keys and len(keys) == 2 and "a" not in keys


def test_lowered_cap_applies_on_next_write(conn):
    big = ProfileStore(conn, max_unpinned=10)
    for i in range(5):
        big.set(f"t{i}", "v", pinned=False, keywords=["k"], now_ms=i + 1)
    small = ProfileStore(conn, max_unpinned=2)
    assert small.count_unpinned() == 5  # nothing happens at construction
    small.set("t9", "v", pinned=False, keywords=["k"], now_ms=100)
    assert small.count_unpinned() == 2
    assert {f.key for f in small.list()} == {"t4", "t9"}


# -- outer transactions ---------------------------------------------------------------------


def test_writes_join_an_outer_transaction(conn, store):
    with write_txn(conn):
        store.set("a", "1")
        store.set("b", "2")
        store.remove("a")
        assert conn.in_transaction
    assert [f.key for f in store.list()] == ["b"]


def test_outer_transaction_rollback_discards_all(conn, store):
    store.set("keep", "yes")
    with pytest.raises(RuntimeError):
        with write_txn(conn):
            store.set("a", "1")
            store.set("keep", "no")
            raise RuntimeError("abort reflection")
    assert [(f.key, f.value) for f in store.list()] == [("keep", "yes")]
    assert len(store.history("keep")) == 1


def test_facts_list_in_the_same_key_order_on_either_engine(conn):
    """Byte order, as SQLite sorts. On PostgreSQL the list names ``COLLATE "C"``
    (:func:`actors.store.sql.bytewise`): a database whose collation is a language's
    (``en_US.UTF-8`` skips the underscore, putting ``home_city`` after ``homepage``)
    would otherwise list them in another order. This machine has no language locale
    for the test server to use, so here both engines show byte order either way; the
    statement is checked to run with the collation named."""
    from actors.store.sql import bytewise

    store = ProfileStore(conn)
    for key in ("homepage", "home_city", "home", "zeta", "a_b", "ab"):
        store.set(key, "x")
    keys = [f.key for f in store.list()]
    assert keys == sorted(keys) == ["a_b", "ab", "home", "home_city", "homepage", "zeta"]
    if getattr(conn, "dialect", "sqlite") == "postgres":
        assert bytewise(conn, "key") == 'key COLLATE "C"'
