"""``atomic-agent memory backup``: a consistent copy of memory.sqlite
with SQLite's online backup, taken by the running daemon while it writes, or directly
when none runs; bad targets are one clear error and leave nothing behind."""

from __future__ import annotations

import subprocess
import sys

import apsw
import pytest
import trio

from actors.store.schema import open_database
from runtime.shell.client import ClientError, open_client
from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama


def _notes_in(path) -> list[str]:
    conn = open_database(str(path))
    try:
        assert conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]
        conn.execute("INSERT INTO memories_fts(memories_fts) VALUES('integrity-check')")
        return [r[0] for r in conn.execute("SELECT content FROM memories ORDER BY id")]
    finally:
        conn.close()


async def test_a_backup_while_the_daemon_writes_is_one_consistent_snapshot(tmp_path):
    acked: list[str] = []
    async with open_fake_llama(tmp_path) as fake:
        async with run_daemon(tmp_path / "state", llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c, \
                    open_client(url=d.url, token=d.token) as w:
                stop = trio.Event()

                async def writer() -> None:
                    i = 0
                    while not stop.is_set():
                        i += 1
                        text = f"note {i} about the lighthouse"
                        await w.memory("memory.notes.store", {"content": text})
                        acked.append(text)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(writer)
                    await trio.sleep(0.5)
                    before = list(acked)
                    done = await c.memory("memory.backup", {"path": "copy.db"})
                    stop.set()
                copy = tmp_path / "state" / "exports" / "copy.db"
                assert done["path"] == str(copy) and done["bytes"] > 0
                try:  # the daemon writes in its exports folder only
                    await c.memory("memory.backup", {"path": str(tmp_path / "copy.db")})
                    raise AssertionError("a path outside the exports folder was accepted")
                except ClientError as exc:
                    assert exc.code == "invalid_argument" and "exports" in str(exc)
                try:
                    await c.memory("memory.backup", {"path": "copy.db"})
                    raise AssertionError("an existing file was overwritten")
                except ClientError as exc:
                    assert "--overwrite" in str(exc)
    copied = _notes_in(copy)
    assert copied[:len(before)] == before  # everything acknowledged before it, in order
    assert set(copied) <= set(acked)
    assert copy.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in copy.parent.iterdir()] == ["copy.db"]  # no temporary left


@pytest.mark.slow
def test_the_command_backs_up_a_stopped_daemons_memory(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    run = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "runtime.shell.cli", "--state-dir", str(state), "memory", *a],
        cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run("notes", "store", "kept in the copy").returncode == 0
    done = run("backup", str(tmp_path / "copy.sqlite"))
    assert done.returncode == 0 and done.stdout.startswith("backed up memory to ")
    assert _notes_in(tmp_path / "copy.sqlite") == ["kept in the copy"]
    again = run("backup", str(tmp_path / "copy.sqlite"))
    assert again.returncode == 1 and "--overwrite" in again.stderr and "Traceback" not in again.stderr
    assert run("backup", "--overwrite", str(tmp_path / "copy.sqlite")).returncode == 0
    missing = run("backup", str(tmp_path / "no" / "such" / "dir.sqlite"))
    assert missing.returncode == 1 and "no such folder" in missing.stderr
    assert apsw.Connection(str(tmp_path / "copy.sqlite")).execute(
        "PRAGMA journal_mode").fetchall() == [("delete",)]  # one self-contained file
