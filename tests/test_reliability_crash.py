"""Crash points: nothing the daemon acknowledged is ever lost.

A real daemon (scripted llama-server) runs a write load from :data:`WRITERS` websocket
clients — notes, profile facts and chat turns (sessions) — while every actor is SIGKILLed
:data:`KILL_ROUNDS` times at seeded random moments, then the root itself is SIGKILLed
mid-load. After a restart on the same state directory:

* every note, fact and turn a client got an acknowledgement for is there, unchanged;
* FTS agrees with the notes table (FTS5 integrity check, same row count), every vector
  belongs to a note, no note or active fact is duplicated;
* the restarted daemon serves, and nothing was quarantined (no "starting empty").

While an actor is down only requests to it fail (typed error frames); the other sessions
keep working and the supervisor restarts it. The counts below are the ones
``docs/RELIABILITY.md`` reports (``tests/test_reliability_doc.py`` keeps them in step).
"""

from __future__ import annotations

import json
import os
import random
import signal
from collections import defaultdict
from pathlib import Path

import apsw
import trio

from actors.agent.sessions import SessionStore
from actors.store.schema import fts_integrity_check
from runtime.shell.client import ClientError, open_client
from tests.conftest import actor_name, descendants, pid_alive
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama

ACTORS = ("memory", "agent", "reflection", "backfill")
KILL_ROUNDS = 2
"""Each actor is SIGKILLed this many times during the load (per-actor restarts stay
below the supervisor's intensity limit of 5 in 60 s)."""
WRITERS = 3
SEED = 7
CRASH_POINTS = KILL_ROUNDS * len(ACTORS) + 1
"""SIGKILLs per run: every actor KILL_ROUNDS times, then the root once."""

WORDS = ("garden tomato violin kettle harbour pencil meadow lantern cobalt saffron walnut "
         "glacier orchard thimble compass juniper canyon velvet quartz falcon maple pebble "
         "lagoon ember sparrow tundra willow marble cedar dune beacon copper fennel granite "
         "heron ivory jasmine kayak lemon mango nutmeg opal prairie quill raven sage tulip "
         "umber vireo wasabi yarrow zephyr anchor basil cactus dahlia easel fjord gazebo "
         "hammock igloo jigsaw kiwi lilac mosaic nectar oyster parsley quiche radish").split()


def actor_pid(root: int, name: str) -> int | None:
    """PID of the actor process ``name`` under ``root`` (forked or spawned: ``actor_name``)."""
    for pid in descendants(root):
        if actor_name(pid) == name:
            return pid
    return None


class Load:
    """What the writers were told was stored, and what failed."""

    def __init__(self) -> None:
        self.notes: dict[int, str] = {}
        self.facts: dict[str, str] = {}
        self.turns: dict[str, list[str]] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)
        self.after_kill_ok = 0  # acknowledged writes between the first kill and the last

    def acked(self) -> int:
        return len(self.notes) + len(self.facts) + sum(map(len, self.turns.values()))


async def writer(url: str, token: str, idx: int, load: Load, killing: list[bool]) -> None:
    """Write notes, facts and turns until the connection dies (the root's SIGKILL)."""
    rng = random.Random(SEED * 100 + idx)
    async with open_client(url=url, token=token) as c:
        i = 0
        while True:
            i += 1
            try:
                with trio.fail_after(30):
                    if i % 3 == 1:
                        text = f"w{idx}n{i} " + " ".join(rng.sample(WORDS, 8))
                        note = await c.memory("memory.notes.store", {"content": text})
                        load.notes[note["id"]] = text
                    elif i % 3 == 2:
                        key, value = f"w{idx}_k{i}", f"value {i} " + rng.choice(WORDS)
                        await c.memory("memory.profile.set", {"key": key, "value": value})
                        load.facts[key] = value
                    else:
                        text = f"writer {idx} turn {i}: " + " ".join(rng.sample(WORDS, 4))
                        frames = [f async for f in c.say(text)]
                        last = frames[-1] if frames else {}
                        if last.get("reason") == "reply":
                            load.turns[c.session].append(text)
                        else:
                            load.errors[f"turn:{last.get('reason', last.get('code'))}"] += 1
                            continue
                if killing[0]:
                    load.after_kill_ok += 1
            except ClientError as exc:
                if exc.code == "closed":
                    return
                load.errors[exc.code] += 1
                await trio.sleep(0.05)
            except trio.TooSlowError:
                load.errors["timeout"] += 1


async def test_acknowledged_writes_survive_sigkill_of_every_actor_and_the_root(tmp_path):
    state = tmp_path / "state"
    rng = random.Random(SEED)
    load = Load()
    killing = [False]
    kills: list[str] = []
    # Caps far above what the writers reach: an evicted fact or note is not a lost one
    # (a fast machine writes over 1,000 facts here, past the default cap of 500).
    state.mkdir()
    (state / "config.json").write_text(json.dumps({"memory": {
        "profile": {"maxEntries": 1_000_000}, "notes": {"maxEntries": 1_000_000}}}))
    async with open_fake_llama(tmp_path, slots=2) as fake:
        async with run_daemon(state, llm_url=fake.url, expect_exit=None) as d:
            root = d.proc.pid
            async with trio.open_nursery() as nursery:
                for idx in range(WRITERS):
                    nursery.start_soon(writer, d.url, d.token, idx, load, killing)
                await trio.sleep(1.0)
                killing[0] = True
                for _ in range(KILL_ROUNDS):
                    for name in rng.sample(ACTORS, len(ACTORS)):
                        with trio.fail_after(20):
                            while (pid := actor_pid(root, name)) is None:
                                await trio.sleep(0.02)
                            os.kill(pid, signal.SIGKILL)
                            kills.append(name)
                            while actor_pid(root, name) in (None, pid):  # restarted
                                await trio.sleep(0.02)
                        await trio.sleep(rng.uniform(0.3, 1.0))
                killing[0] = False
                restarted = load.acked()
                await trio.sleep(rng.uniform(0.5, 1.0))  # load on the restarted actors
                late = load.acked()
                children = descendants(root)
                d.proc.send_signal(signal.SIGKILL)  # the last crash point: the root
                kills.append("root")
                await d.proc.wait()
                with trio.fail_after(15):  # the writers see their connections drop
                    while any(pid_alive(p) for p in children):
                        await trio.sleep(0.05)
        assert sorted(kills) == sorted([*ACTORS * KILL_ROUNDS, "root"])
        assert len(kills) == CRASH_POINTS
        assert load.acked() >= 30, (load.acked(), dict(load.errors))
        assert load.after_kill_ok > 0, "no write succeeded while actors were being killed"
        assert late > restarted, "no write succeeded after every actor was restarted"
        # Restart on the same state directory: it serves, nothing is quarantined.
        async with run_daemon(state, llm_url=fake.url) as d2:
            async with open_client(url=d2.url, token=d2.token) as c:
                stats = await c.memory("memory.stats")
    assert stats["quarantinedFile"] is None
    check_files(state, load)


def check_files(state: Path, load: Load) -> None:
    """Every acknowledged write is present; FTS, vectors and rows agree; no duplicates."""
    conn = apsw.Connection(str(state / "memory.sqlite"))  # the FTS5 check is a write
    try:
        notes = dict(conn.execute("SELECT id, content FROM memories").fetchall())
        lost = {i: t for i, t in load.notes.items() if notes.get(i) != t}
        assert not lost, f"{len(lost)} acknowledged notes lost or changed: {lost}"
        facts = dict(conn.execute(
            "SELECT key, value FROM profile_facts WHERE superseded_by IS NULL").fetchall())
        lost_facts = {k: v for k, v in load.facts.items() if facts.get(k) != v}
        assert not lost_facts, f"acknowledged facts lost: {lost_facts}"
        fts_integrity_check(conn)
        assert conn.execute("SELECT count(*) FROM memories_fts").fetchall()[0][0] == len(notes)
        assert conn.execute("SELECT count(*) FROM memory_vectors v LEFT JOIN memories m "
                            "ON m.id = v.note_id WHERE m.id IS NULL").fetchall()[0][0] == 0
        assert conn.execute("SELECT content FROM memories GROUP BY content "
                            "HAVING count(*) > 1").fetchall() == []
        assert conn.execute("SELECT key FROM profile_facts WHERE superseded_by IS NULL "
                            "GROUP BY key HAVING count(*) > 1").fetchall() == []
    finally:
        conn.close()
    sessions = SessionStore(str(state / "sessions.sqlite"))
    try:
        for session, texts in load.turns.items():
            stored = sessions.get(session)
            assert stored is not None, f"session {session} lost"
            said = [m.text for m in stored.messages if m.role == "user"]
            missing = [t for t in texts if t not in said]
            assert not missing, f"acknowledged turns lost from {session}: {missing}"
    finally:
        sessions.close()


INTENSITY_KILLS = 6
"""SIGKILLs of one actor in a row: one more than the 5 restarts allowed in 60 s."""


async def test_an_actor_that_keeps_dying_stops_the_daemon_cleanly_instead_of_looping(tmp_path):
    """The restart-intensity limit (5 in 60 s, Erlang/OTP style): the sixth crash in a
    row shuts the daemon down with one clear line and exit status 1, every child reaped,
    no traceback, and the data intact for the next start."""
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path) as fake:
        async with run_daemon(state, llm_url=fake.url, expect_exit=None) as d:
            root = d.proc.pid
            async with open_client(url=d.url, token=d.token) as c:
                kept = await c.memory("memory.notes.store", {"content": "kept across crashes"})
            children = descendants(root)
            with trio.fail_after(120):
                for _ in range(INTENSITY_KILLS):
                    while (pid := actor_pid(root, "reflection")) is None:
                        if d.proc.returncode is not None:
                            break
                        await trio.sleep(0.02)
                    if pid is None:
                        break
                    os.kill(pid, signal.SIGKILL)
                    while actor_pid(root, "reflection") == pid:
                        await trio.sleep(0.02)
                await d.proc.wait()
            with trio.fail_after(10):
                while any(pid_alive(p) for p in children):
                    await trio.sleep(0.05)
        assert d.proc.returncode == 1
        err = d.stderr_path.read_text()
        assert "atomic-agent: actor 'reflection' crashed 6 times within 60s; giving up; shutting down" in err
        assert "Traceback" not in err
        async with run_daemon(state, llm_url=fake.url) as d2:
            async with open_client(url=d2.url, token=d2.token) as c:
                notes = await c.memory("memory.notes.recall", {"id": kept["id"]})
    assert notes[0]["content"] == "kept across crashes"
