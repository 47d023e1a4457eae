"""The state directory is private and boring: 0700 and 0600 whatever the directory was
before, no symbolic link followed, the token made atomically and long enough, a bad
token one line, and a WAL that an outside reader cannot grow without bound."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from actors.store.schema import open_database
from actors.store.wal import WAL_SIZE_LIMIT, holders, idle_checkpoint
from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


async def test_a_loose_state_dir_is_tightened_and_everything_made_is_private(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)
    (state / "config.json").write_text("{}")
    os.chmod(state / "config.json", 0o644)
    target = tmp_path / "elsewhere.json"
    target.write_text("untouched")
    (state / "daemon.json.tmp").symlink_to(target)  # a planted link is never followed
    async with open_fake_llama(tmp_path) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            from runtime.shell.client import open_client

            async with open_client(url=d.url, token=d.token) as c:
                await c.memory("memory.notes.store", {"content": "The user keeps bees"})
                stats = await c.memory("memory.stats")
            made = sorted(p.name for p in state.iterdir())
            for name in ("memory.sqlite", "memory.sqlite-wal", "sessions.sqlite", "token",
                         "daemon.json", "config.json", "daemon.lock"):
                assert mode(state / name) == 0o600, (name, oct(mode(state / name)), made)
            assert mode(state) == 0o700 and mode(state / "logs") == 0o700
            assert all(mode(p) == 0o600 for p in (state / "logs").iterdir())
    assert target.read_text() == "untouched"
    assert stats["wal"]["bytes"] >= 0 and stats["wal"]["heldBackBy"] == []


def serve(state: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtime.shell.cli", "serve", "--state-dir",
                           str(state), "--port", "0", "--llm-url", "http://127.0.0.1:9"],
                          capture_output=True, text=True, cwd=REPO, timeout=60)


@pytest.mark.parametrize("kind", ["symlink", "directory", "fifo", "short", "logs-link"])
def test_a_bad_token_or_linked_state_file_is_one_line(tmp_path, kind):
    state = tmp_path / "state"
    state.mkdir()
    secret = tmp_path / "secret"
    secret.write_text("x" * 43 + "\n")
    match kind:
        case "symlink":
            (state / "token").symlink_to(secret)
        case "directory":
            (state / "token").mkdir()
        case "fifo":
            os.mkfifo(state / "token")
        case "short":
            (state / "token").write_text("a\n")
        case "logs-link":
            (state / "logs").symlink_to(tmp_path)
    done = serve(state)
    assert done.returncode != 0 and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.startswith("atomic-agent: ")
    assert secret.read_text() == "x" * 43 + "\n"
    assert not (state / "daemon.json").exists()


async def test_an_empty_token_is_replaced_atomically_with_a_warning(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "token").write_text("")
    async with open_fake_llama(tmp_path) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            token = (state / "token").read_text().strip()
            assert token == d.token and len(token) >= 43
    assert "the token" in d.stderr_path.read_text() and "was empty" in \
        d.stderr_path.read_text()
    assert [p.name for p in state.iterdir() if p.name.startswith(".token")] == []


def test_an_outside_reader_holds_the_wal_back_until_it_leaves(tmp_path):
    db = tmp_path / "memory.sqlite"
    conn = open_database(str(db))
    conn.execute("CREATE TABLE filler(x BLOB)")
    reader = apsw.Connection(str(db))
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM sqlite_schema").fetchall()  # an old snapshot
    for _ in range(300):
        conn.execute("INSERT INTO filler VALUES (randomblob(8000))")
    held = idle_checkpoint(conn, 5000)
    assert held["frames"] > held["copied"]  # the reader holds the log back
    assert os.getpid() in {h["pid"] for h in holders(db, me=-1)}
    reader.execute("COMMIT")
    done = idle_checkpoint(conn, 5000)
    assert done["frames"] == done["copied"] and os.stat(f"{db}-wal").st_size == 0
    limit = conn.execute("PRAGMA journal_size_limit").fetchall()[0][0]
    assert limit == WAL_SIZE_LIMIT
    conn.close()
    reader.close()


def test_a_recycled_pid_in_daemon_json_reads_as_not_running(tmp_path):
    """After a crash, daemon.json may name a pid another program now has: nobody holds
    the daemon's lock, so the CLI says "not running" (exit 3), not "cannot connect"."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "daemon.json").write_text(json.dumps({
        "url": "ws://127.0.0.1:9", "pid": os.getpid(), "tokenFile": str(state / "token")}))
    done = subprocess.run([sys.executable, "-m", "runtime.shell.cli", "--state-dir", str(state),
                           "stop"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 3 and "no atomic-agent daemon is running" in done.stderr
