"""A full disk and a read-only state directory, for real.

The state directory lives on a small ``tmpfs`` mounted for the test (the machine lets
root mount one; where it does not, the tests are skipped with that reason):

* **full disk**: a running daemon whose filesystem fills up answers each write it cannot
  store with a typed error (``storage_full``), keeps serving reads, pings and other
  clients, restarts no actor, and stores again once space is freed; every write it
  acknowledged is there after a restart, FTS agrees with its table, nothing quarantined;
* **read-only state directory** (the tmpfs remounted read-only): ``serve`` refuses to
  start with one line naming the directory, an offline ``memory stats`` says the same,
  and the user's files are left as they were.

Never a traceback on stderr.
"""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import apsw
import pytest
import trio

from actors.store.schema import fts_integrity_check
from runtime.shell.client import ClientError, open_client
from tests.conftest import actor_name, descendants
from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama

DISK_MIB = 24
"""Size of the test filesystem: the daemon's files and logs plus room to fill."""
RULES = [{"grammar_contains": "reply", "response": '{"reply": "noted"}'}]
NOTE = "the user keeps a {i}th notebook about lighthouse restoration in the harbour " + "x" * 3000


@pytest.fixture
def small_disk(tmp_path):
    """A ``DISK_MIB`` MiB tmpfs mounted at ``tmp_path/disk``; unmounted afterwards."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MIB}m,mode=0755",
                           "tmpfs", str(mnt)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}): "
                    f"the full-disk and read-only tests need one")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(path: Path) -> int:
    """Write ``path`` until the filesystem is full (64 KiB, then 4 KiB writes); bytes."""
    written = 0
    with open(path, "wb", buffering=0) as f:
        for size in (64 * 1024, 4096):
            chunk = os.urandom(size)
            while True:
                try:
                    written += f.write(chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    return written


def _actor_pids(root: int) -> set[int]:
    """The daemon's actor processes (``aa-NAME``, forked or spawned)."""
    pids = {pid for pid in descendants(root) if actor_name(pid) is not None}
    assert pids, "no actor process found"
    return pids


async def test_a_full_disk_fails_writes_with_a_typed_error_and_loses_nothing(tmp_path, small_disk):
    state = small_disk / "state"
    acked: dict[int, str] = {}
    refused: dict[str, int] = {}
    async with open_fake_llama(tmp_path, RULES) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            actors = _actor_pids(d.proc.pid)
            async with open_client(url=d.url, token=d.token) as c, \
                    open_client(url=d.url, token=d.token) as other:
                for i in range(5):
                    text = NOTE.format(i=i)
                    acked[(await c.memory("memory.notes.store", {"content": text}))["id"]] = text
                frames = [f async for f in c.say("I restore lighthouses")]
                assert frames[-1]["reason"] == "reply"

                filler = small_disk / "filler"
                await trio.to_thread.run_sync(_fill, filler)
                # SQLite reuses free pages and WAL frames first: write until the disk says no.
                for i in range(5, 400):
                    text = NOTE.format(i=i)
                    try:
                        with trio.fail_after(30):
                            note = await c.memory("memory.notes.store", {"content": text})
                    except ClientError as exc:
                        refused[exc.code] = refused.get(exc.code, 0) + 1
                        assert "disk is full" in str(exc) and "nothing stored before" in str(exc)
                        if sum(refused.values()) >= 3:
                            break
                    else:
                        acked[note["id"]] = text
                assert refused == {"storage_full": 3}, refused
                # A turn on a full disk: answered, and never claims a save that failed.
                frames = [f async for f in c.say("and I sail")]
                last = frames[-1]
                assert last["type"] == "turn.finished", last
                if last["reason"] == "error":
                    assert any("not saved" in f.get("message", "") for f in frames), frames
                else:
                    assert last["reason"] == "reply"
                # New connections: a new session is created or refused with a typed
                # error (never an agent crash); an existing session reconnects.
                for _ in range(3):
                    try:
                        async with open_client(url=d.url, token=d.token):
                            pass
                    except ClientError as exc:
                        assert exc.code == "storage_full", exc
                        assert "session not stored: the disk is full" in str(exc)
                async with open_client(url=d.url, token=d.token, session=c.session) as again:
                    assert again.session == c.session
                # Reads, pings and the other client still work; no actor was restarted.
                got = await other.memory("memory.notes.recall", {"query": "lighthouse restoration"})
                assert got, "recall on a full disk"
                # memory stats says what the disk refused last, and when.
                last_error = (await other.memory("memory.stats"))["lastStorageError"]
                assert last_error["code"] == "storage_full" and last_error["at"] > 0
                await other.send({"type": "ping"})
                await other.wait_for(lambda f: f.get("type") == "pong")
                assert _actor_pids(d.proc.pid) == actors

                filler.unlink()  # space again: the same write now succeeds
                text = NOTE.format(i=999)
                acked[(await c.memory("memory.notes.store", {"content": text}))["id"]] = text
                frames = [f async for f in c.say("space is back")]
                assert frames[-1]["reason"] == "reply"
                assert _actor_pids(d.proc.pid) == actors
        stderr = d.stderr_path.read_text()
        assert "Traceback" not in stderr and "memory.storage_failed" in stderr

        async with run_daemon(state, llm_url=fake.url) as d2:
            async with open_client(url=d2.url, token=d2.token) as c:
                stats = await c.memory("memory.stats")
                for note_id, text in acked.items():
                    (note,) = await c.memory("memory.notes.recall", {"id": note_id})
                    assert note["content"] == text
    assert stats["quarantinedFile"] is None and stats["notes"] == len(acked)
    conn = apsw.Connection(str(state / "memory.sqlite"))
    fts_integrity_check(conn)
    assert conn.execute("SELECT count(*) FROM memories_fts").fetchone()[0] == len(acked)
    conn.close()


def _digests(state: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(state.iterdir()) if p.is_file()}


async def test_a_read_only_state_dir_refuses_start_with_one_line(tmp_path, small_disk):
    state = small_disk / "state"
    async with open_fake_llama(tmp_path, RULES) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                await c.memory("memory.notes.store", {"content": "kept on a read-only disk"})
    before = _digests(state)
    done = subprocess.run(["mount", "-o", "remount,ro", str(small_disk)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for argv, needle in ((["serve", "--port", "0", "--llm-url", "http://127.0.0.1:9"],
                          "is not writable: Read-only file system"),
                         (["memory", "stats"], "Read-only file system")):
        run = await trio.to_thread.run_sync(lambda a=argv: subprocess.run(
            [sys.executable, "-m", "runtime.shell.cli", "--state-dir", str(state), *a],
            capture_output=True, text=True, timeout=60, cwd=REPO, env=env))
        lines = [ln for ln in run.stderr.splitlines() if ln.startswith("atomic-agent:")]
        assert run.returncode != 0 and len(lines) == 1 and needle in lines[0], (argv, run.stderr)
        assert "Traceback" not in run.stderr and str(state) in lines[0]
    assert _digests(state) == before
