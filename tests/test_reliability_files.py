"""Corrupt and hostile state files through the real daemon.

Each case starts ``atomic-agent serve`` on a state directory prepared with one hostile
file and checks the outcome a user can act on:

* a corrupt ``memory.sqlite`` (random bytes, zeros, cut in half) is moved aside
  byte-for-byte (``memory.sqlite.corrupt-<ms>``), the daemon starts fresh and
  ``memory stats`` names the moved file — never a silent empty start over the data;
* a corrupt ``sessions.sqlite``, or either file from a newer schema, or a broken
  ``config.json``: the daemon refuses to start with one ``atomic-agent: …`` line that
  names the file and the problem, exit status ≠ 0, and the file is left untouched;
* never a Python traceback on stderr.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest
import trio

from actors.store.notes import MemoryStore
from actors.store.schema import open_database
from runtime.shell.client import open_client
from tests.daemon import run_daemon

DEAD_LLM = "http://127.0.0.1:9"  # no LLM is needed to start; turns are not the point here


def _seed_memory(state: Path) -> None:
    conn = open_database(str(state / "memory.sqlite"))
    MemoryStore(conn).store("a note the user cares about")
    conn.close()


def _garbage(path: Path) -> None:
    path.write_bytes(os.urandom(20_000))


def _zeros(path: Path) -> None:
    path.write_bytes(bytes(20_000))


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _bad_pages(path: Path) -> None:
    """A bad sector: random bytes over a run of pages in the middle of the file (the
    header and schema pages at the start stay readable)."""
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big") or 65536
    first = (len(data) // page) // 2
    data[first * page:(first + 4) * page] = os.urandom(4 * page)
    path.write_bytes(bytes(data))


def _newer(path: Path) -> None:
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA user_version = 99")
    conn.close()


def _sessions(state: Path) -> Path:
    from actors.agent.sessions import SessionStore

    SessionStore(str(state / "sessions.sqlite")).close()
    return state / "sessions.sqlite"


def _memory(state: Path) -> Path:
    _seed_memory(state)
    return state / "memory.sqlite"


CORRUPT_MEMORY: dict[str, Callable[[Path], None]] = {
    "random bytes": _garbage, "zero-filled": _zeros, "truncated": _truncate,
    "bad pages in the middle": _bad_pages}


@pytest.mark.parametrize("damage", list(CORRUPT_MEMORY))
async def test_corrupt_memory_file_is_moved_aside_and_reported(tmp_path, damage):
    state = tmp_path / "state"
    state.mkdir()
    path = _memory(state)
    CORRUPT_MEMORY[damage](path)
    for side in ("memory.sqlite-wal", "memory.sqlite-shm"):
        (state / side).unlink(missing_ok=True)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    async with run_daemon(state, llm_url=DEAD_LLM) as d:
        async with open_client(url=d.url, token=d.token) as c:
            with trio.fail_after(30):
                stats = await c.memory("memory.stats")
    moved = Path(stats["quarantinedFile"])
    assert moved.parent == state and moved.name.startswith("memory.sqlite.corrupt-")
    assert hashlib.sha256(moved.read_bytes()).hexdigest() == digest  # kept byte for byte
    assert stats["notes"] == 0
    assert "Traceback" not in d.stderr_path.read_text()
    assert "memory.quarantined" in d.stderr_path.read_text()


REFUSED: dict[str, tuple[Callable[[Path], Path | None], Callable[[Path], None] | None, str]] = {
    "sessions.sqlite random bytes": (_sessions, _garbage,
                                     "is not a readable sessions database"),
    "sessions.sqlite zero-filled": (_sessions, _zeros, "is not a readable sessions database"),
    "memory.sqlite newer schema": (_memory, _newer,
                                   "schema version 99 is newer than the supported version"),
    "sessions.sqlite newer schema": (_sessions, _newer, "has schema 99, newer than the supported"),
    "config.json wrong type": (lambda s: s / "config.json",
                               None, "memory.notes: Expected `object`, got `int`"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(REFUSED))
async def test_hostile_file_refuses_start_with_one_line_and_is_left_untouched(tmp_path, case):
    state = tmp_path / "state"
    state.mkdir()
    make, damage, message = REFUSED[case]
    path = make(state)
    if damage is None:
        path.write_text(json.dumps({"memory": {"notes": 5}}))
    else:
        damage(path)
    before = path.read_bytes()
    code, stderr = await _start_refused(state)
    lines = [line for line in stderr.splitlines() if line.startswith("atomic-agent:")]
    assert code != 0 and len(lines) == 1 and message in lines[0], (code, stderr[-2000:])
    assert "Traceback" not in stderr
    assert path.read_bytes() == before  # the user's file is left as it was
    assert not (state / "daemon.json").exists()


async def _start_refused(state: Path) -> tuple[int, str]:
    """Run serve until it exits; (exit status, stderr)."""
    import subprocess
    import sys

    from tests.daemon import REPO

    done = await trio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-m", "runtime.shell.cli", "serve", "--state-dir", str(state), "--port", "0",
         "--llm-url", DEAD_LLM], cwd=REPO, capture_output=True, text=True, timeout=60))
    return done.returncode, done.stderr


def _cli(*args: str) -> "subprocess.CompletedProcess[str]":
    import subprocess
    import sys

    from tests.daemon import REPO

    return subprocess.run([sys.executable, "-m", "runtime.shell.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


async def test_memory_recover_salvages_a_quarantined_file_without_duplicates(tmp_path):
    """A corrupt memory file is moved aside, and ``memory recover`` brings back
    what is still readable: notes (merged, never duplicated on a second run) and facts
    whose keys the live memory lacks (a fact written since is newer and kept)."""
    from actors.store.profile import ProfileStore

    state = tmp_path / "state"
    state.mkdir()
    conn = open_database(str(state / "memory.sqlite"))
    notes = MemoryStore(conn, max_entries=10_000)
    for i in range(300):
        notes.store(f"note {i}: " + " ".join(f"w{i}x{j}" for j in range(40)))
    profiles = ProfileStore(conn)
    profiles.set("name", "Dana")
    profiles.set("city", "Lisbon")
    conn.close()
    _bad_pages(state / "memory.sqlite")
    async with run_daemon(state, llm_url=DEAD_LLM) as d:
        async with open_client(url=d.url, token=d.token) as c:
            with trio.fail_after(30):
                assert (await c.memory("memory.stats"))["quarantinedFile"]
                await c.memory("memory.profile.set", {"key": "city", "value": "Porto"})
                await c.memory("memory.notes.store", {"content": "written after the damage"})
    running = _cli("memory", "recover", "--state-dir", str(state))
    result = json.loads(running.stdout)
    assert running.returncode == 0, running.stderr
    assert 200 < result["notesAdded"] < 300 and result["notesAlreadyThere"] == 0
    assert result["factsAdded"] == 1 and result["factsKeptNewer"] == 1  # city: Porto stays
    assert result["problems"] and "recover: reading" in running.stderr
    conn = open_database(str(state / "memory.sqlite"))
    try:
        count = conn.execute("SELECT count(*) FROM memories").fetchall()[0][0]
        facts = dict(conn.execute("SELECT key, value FROM profile_facts "
                                  "WHERE superseded_by IS NULL").fetchall())
    finally:
        conn.close()
    assert count == result["notesAdded"] + 1 and facts == {"name": "Dana", "city": "Porto"}
    again = json.loads(_cli("memory", "recover", "--state-dir", str(state)).stdout)
    assert again["notesAdded"] == 0 and again["notesAlreadyThere"] == result["notesAdded"]
    nothing = _cli("memory", "recover", "--state-dir", str(tmp_path / "empty"))
    assert nothing.returncode != 0 and "no quarantined memory file" in nothing.stderr
    assert "Traceback" not in nothing.stderr
