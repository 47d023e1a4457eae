"""Two field cases end to end through the memory actor: a busy database (a second
process holds the lock) and the pinned budget (it holds on every write path).

Rules: the lock holder is a real second process (``python -c`` with apsw); the memory
actor is a real child under ``open_supervisor``; wall-clock bounds only.
"""

from __future__ import annotations

import subprocess
import sys
import time

import msgspec
import pytest
import trio

from actors import actor_spec
from actors.memory.messages import ApplyReflection, ApplyResult, FactIn, NoteIn
from tests.memory_ops import memory_op
from actors.store.profile import ProfileStore
from actors.store.render import render_profile
from actors.store.schema import open_database
from actors.memory.ops import OPS
from actors.memory.router import run_op
from actors.store.stores import StoreSet
from runtime import ActorSpec, RemoteError, open_supervisor
from runtime.services.config import ActorBoot, Config

HOLD_LOCK = """
import sys, time
from actors.store.schema import open_database
c = open_database(sys.argv[1])
c.execute("BEGIN IMMEDIATE")
c.execute("INSERT INTO memories(content, content_key, tags, source, scope, created_at, updated_at)"
          " VALUES ('written by process A', 'written by process a', '[]', 'user', 'all', 1, 1)")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
c.execute("COMMIT")
"""


def memory_spec(tmp_path, **profile) -> list[ActorSpec]:
    cfg = Config()
    cfg.memory.embeddings.enabled = False
    for k, v in profile.items():
        setattr(cfg.memory.profile, k, v)
    return [actor_spec("memory", config=msgspec.msgpack.encode(
        ActorBoot(state_dir=str(tmp_path), config=cfg)))]


def hold_lock(db, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(db), str(seconds)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


async def notes(sup) -> list[str]:
    data = (await memory_op(sup, "memory.notes.list")).data
    return sorted(n["content"] for n in data)


@pytest.mark.slow
async def test_a_write_waits_for_the_other_process_and_both_notes_exist(tmp_path):
    async with open_supervisor(memory_spec(tmp_path)) as sup:
        journal = await memory_op(sup, "memory.notes.list")
        assert journal.data == []
        a = hold_lock(tmp_path / "memory.sqlite", 1.5)
        t0 = time.monotonic()
        with trio.fail_after(20):
            result = await sup.request("memory", ApplyReflection(
                session="s", turn="t", notes=[NoteIn(body="Prefers aisle seats", tags=["travel"])]),
                ApplyResult)
        assert len(result.note_ids) == 1 and time.monotonic() - t0 >= 1.0
        a.wait(10)
        assert await notes(sup) == ["Prefers aisle seats", "written by process A"]


@pytest.mark.slow
async def test_a_lock_held_past_the_busy_timeout_is_a_visible_error_not_a_drop(tmp_path):
    async with open_supervisor(memory_spec(tmp_path)) as sup:
        await memory_op(sup, "memory.notes.list")
        a = hold_lock(tmp_path / "memory.sqlite", 7)
        with trio.fail_after(20):
            with pytest.raises(RemoteError) as info:
                await sup.request("memory", ApplyReflection(
                    session="s", turn="t", notes=[NoteIn(body="Prefers aisle seats")]), ApplyResult)
        assert info.value.code == "database_busy"
        a.wait(20)
        # the actor is still the same, and later writes work
        await memory_op(sup, "memory.notes.store", {"content": "after the lock"})
        assert await notes(sup) == ["after the lock", "written by process A"]


def pinned_chars(conn) -> int:
    facts = [f for f in ProfileStore(conn).list() if f.pinned]
    return len(render_profile(facts, 10_000))


LONG = "elderly grey cat called Pixel who needs a pill every evening and a warm blanket"


@pytest.mark.slow
async def test_the_pinned_budget_holds_on_every_write_path(tmp_path):
    # 1. the store itself (bulk import/restore would call it), 2. the tool/websocket op,
    # 3. reflection through the memory actor, 4. the offline CLI (same run_op).
    write_ops = {name for name, spec in OPS.items() if spec.writes}
    assert {n for n in write_ops if n.startswith("memory.profile.")} == {
        "memory.profile.set", "memory.profile.remove", "memory.profile.purge"}, (
        "a new profile write path needs a pinned-budget test")  # (remove and purge only delete)
    conn = open_database(str(tmp_path / "direct.sqlite"))
    store = ProfileStore(conn, pinned_budget_chars=200)
    store.set("name", "Dana Q. Example, who likes long names", pinned=True)
    store.set("city", "Lisbon, Portugal, near the river", pinned=True)
    store.set("job", "software engineer on distributed databases", pinned=True)
    assert 130 <= pinned_chars(conn) <= 160  # the case's starting state: ~150 chars pinned
    fact = store.set("pet", LONG, pinned=True)
    assert not fact.pinned and fact.warning and "pinnedBudgetChars=200" in fact.warning
    assert fact.keywords == ["pet"]
    assert pinned_chars(conn) <= 200
    data, _ = run_op(StoreSet.of(store, __import__("actors.store.notes", fromlist=["MemoryStore"]).MemoryStore(conn)),
                     "memory.profile.set", {"key": "pet2", "value": LONG})
    assert data.pinned is False and data.warning
    assert pinned_chars(conn) <= 200
    conn.close()

    async with open_supervisor(memory_spec(tmp_path, pinned_budget_chars=200)) as sup:
        await memory_op(sup, "memory.profile.set", {
            "key": "name", "value": "Dana Q. Example, who likes long names"})
        await sup.request("memory", ApplyReflection(session="s", turn="t", facts=[
            FactIn(key="city", value="Lisbon, Portugal, near the river"),
            FactIn(key="job", value="software engineer on distributed databases"),
            FactIn(key="pet", value=LONG)]), ApplyResult)
        over_ws = await memory_op(sup, "memory.profile.set", {
            "key": "pet3", "value": LONG})
        assert over_ws.data["pinned"] is False and "pinnedBudgetChars" in over_ws.data["warning"]
    conn = open_database(str(tmp_path / "memory.sqlite"))
    assert pinned_chars(conn) <= 200
    assert {f.key: f.pinned for f in ProfileStore(conn).list()} == {
        "name": True, "city": True, "job": True, "pet": False, "pet3": False}
    conn.close()

    from tests.test_cli import cli
    (tmp_path / "config.json").write_text('{"memory": {"profile": {"pinnedBudgetChars": 200}}}')
    r = cli("memory", "profile", "set", "pet4", LONG, "--state-dir", str(tmp_path))
    assert r.returncode == 0 and r.stdout.startswith("~ pet4:")
    assert "pinnedBudgetChars=200" in r.stderr


def test_archive_op_hides_from_index_keeps_recall_and_filters_lists(conn):
    from actors.store.profile import ProfileStore

    profiles, notes = ProfileStore(conn), __import__('actors.store.notes', fromlist=['MemoryStore']).MemoryStore(conn)
    a = notes.store("archived note about gardening")
    b = notes.store("active note about gardening")
    data, change = run_op(StoreSet.of(profiles, notes), "memory.notes.archive", {"id": a.id})
    assert data.archived is True and change == {"ids": [a.id]}
    assert [n.id for n in notes.list_index(20)] == [b.id]
    assert {n.id for n in notes.recall("gardening")} == {a.id, b.id}
    assert [n.id for n in run_op(StoreSet.of(profiles, notes), "memory.notes.list", {"archived": "archived"})[0]] == [a.id]
    assert len(run_op(StoreSet.of(profiles, notes), "memory.notes.list", {"archived": "all"})[0]) == 2
    restored, _ = run_op(StoreSet.of(profiles, notes), "memory.notes.archive", {"id": a.id, "archived": False})
    assert restored.archived is False
    with pytest.raises(Exception) as info:
        run_op(StoreSet.of(profiles, notes), "memory.notes.archive", {"id": 999})
    assert getattr(info.value, "code", "") == "not_found"


async def test_memory_actor_counts_and_times_its_requests(tmp_path):
    from runtime.services.metrics import MetricsRequest

    async with open_supervisor(memory_spec(tmp_path)) as sup:
        await memory_op(sup, "memory.notes.store", {"content": "x y z"})
        await memory_op(sup, "memory.notes.list")
        snap = await sup.request("memory", MetricsRequest(), dict)
    assert snap["counters"] == {"agent.memory.requests{kind=memory.notes.store}": 1,
                                "agent.memory.requests{kind=memory.notes.list}": 1}
    assert snap["histograms"]["agent.memory.request_ms"]["count"] == 2


@pytest.mark.slow
async def test_reads_are_not_queued_behind_a_write_waiting_for_the_lock(tmp_path):
    # Reads run on the actor's read connection: while a write waits for another
    # process's lock, recall, list and BuildContext still answer at once.
    from actors.store.context import MemoryContext
    from actors.memory.messages import BuildContext

    async with open_supervisor(memory_spec(tmp_path)) as sup:
        await memory_op(sup, "memory.notes.store", {"content": "Dana prefers pytest"})
        a = hold_lock(tmp_path / "memory.sqlite", 2.0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(memory_op, sup, "memory.notes.store", {"content": "queued behind the lock"})
            await trio.sleep(0.2)  # the write now waits for the lock
            t0 = time.monotonic()
            hits = (await memory_op(sup, "memory.notes.recall", {"query": "pytest"})).data
            ctx = await sup.request("memory", BuildContext(session="s", user_message="pytest?"),
                                    MemoryContext)
            assert time.monotonic() - t0 < 1.0
            assert [n["content"] for n in hits] == ["Dana prefers pytest"]
            assert [n.content for n in ctx.recalled] == ["Dana prefers pytest"]
        a.wait(10)
        assert await notes(sup) == ["Dana prefers pytest", "queued behind the lock",
                                    "written by process A"]
    # both surfacings were counted (after the replies, before shutdown's checkpoint)
    conn = open_database(str(tmp_path / "memory.sqlite"))
    assert conn.execute("SELECT recall_count FROM memories WHERE content = 'Dana prefers pytest'"
                        ).fetchall() == [(2,)]
