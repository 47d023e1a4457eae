"""The command line and start-up failures a user can hit.

Rules: every command runs as a real subprocess (``python -m runtime.shell.cli``) against a
state dir under ``tmp_path``; assertions are on exit status and the one stderr line.
No traceback may reach the user.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import apsw
import pytest
import trio

from runtime.shell.client import open_client
from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtime.shell.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("config, message", [
    ('{"memory": {"reflection": {"timeoutMs": -1}}}', "memory.reflection.timeoutMs: Expected `int` >= 100"),
    ('{"memory": {"bogus": 1}}', "memory.bogus: unknown key"),
    ('{"server": {"port": "eighty"}}', "server.port: Expected `int`, got `str`"),
    ("{nope", "not valid JSON"),
])
def test_bad_config_is_one_clear_line(tmp_path, config, message):
    (tmp_path / "config.json").write_text(config)
    for args in (["serve"], ["config", "show"]):
        r = cli(*args, "--state-dir", str(tmp_path))
        assert r.returncode == 2
        assert message in r.stderr and "Traceback" not in r.stderr
        assert r.stderr.count("\n") == 1


def test_config_show_prints_every_default(tmp_path):
    r = cli("config", "show", "--state-dir", str(tmp_path))
    assert r.returncode == 0
    for key in ('"timeoutMs": 10000', '"maxFactsPerCall": 3', '"maxEntries": 1000',
                '"recallDefaultK": 5', '"previewChars": 160', '"bruteForceCeiling": 2000'):
        assert key in r.stdout


def test_newer_schema_refuses_to_start_and_keeps_the_file(tmp_path):
    conn = apsw.Connection(str(tmp_path / "memory.sqlite"))
    conn.execute("CREATE TABLE precious(x); INSERT INTO precious VALUES (42); PRAGMA user_version = 99")
    conn.close()
    r = cli("serve", "--state-dir", str(tmp_path), "--port", "0", "--llm-url", "http://127.0.0.1:9")
    assert r.returncode == 1
    assert "SchemaTooNew" in r.stderr and "upgrade atomic-agent" in r.stderr
    assert "Traceback" not in r.stderr
    conn = apsw.Connection(str(tmp_path / "memory.sqlite"))
    assert conn.execute("SELECT x FROM precious").fetchall() == [(42,)]


async def test_corrupt_memory_file_is_quarantined_not_lost(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    garbage = b"this is not a database" * 100
    (state / "memory.sqlite").write_bytes(garbage)
    async with open_fake_llama(tmp_path, []) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                stats = await c.memory("memory.stats")
    moved = stats["quarantinedFile"]
    assert moved and moved.startswith(str(state / "memory.sqlite.corrupt-"))
    assert open(moved, "rb").read() == garbage


async def test_second_daemon_on_the_same_state_dir_is_refused(tmp_path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path, []) as fake:
        async with run_daemon(state, llm_url=fake.url):
            r = cli("serve", "--state-dir", str(state), "--port", "0", "--llm-url", fake.url)
            assert r.returncode == 1 and "another atomic-agent daemon" in r.stderr
            r = cli("memory", "profile", "list", "--state-dir", str(state))
            assert r.returncode == 0 and "(no profile facts)" in r.stdout
            r = cli("memory", "notes", "store", "a note from the CLI", "--tags", "cli",
                    "--state-dir", str(state))
            assert r.returncode == 0 and r.stdout.startswith("#1 [cli]")
            r = cli("memory", "notes", "list", "--state-dir", str(state))
            assert "a note from the CLI" in r.stdout
            r = cli("memory", "notes", "recall", "note", "--state-dir", str(state))
            from actors.store.dates import written_date  # the day, as the prompt shows it
            today = written_date(int(time.time() * 1000))
            # (score: keyword 1.00 for the only hit, or the hybrid blend once the query
            # embedder has attached in the background)
            assert re.match(rf"#1 \[cli\] {today} \(score [01]\.\d\d\) a note from the CLI",
                            r.stdout), r.stdout
            r = cli("memory", "notes", "forget", "99", "--state-dir", str(state))
            assert r.returncode == 1 and r.stderr.strip() == "atomic-agent: no note #99"


def test_client_commands_without_a_daemon_exit_3(tmp_path):
    r = cli("ask", "hello", "--state-dir", str(tmp_path))
    assert r.returncode == 3
    assert "no atomic-agent daemon is running" in r.stderr and "atomic-agent serve" in r.stderr


@pytest.mark.slow
def test_memory_commands_on_a_new_install_before_the_daemon_ever_ran(tmp_path):
    """A read on a state directory that does not exist says nothing was stored and what
    creates it, and creates nothing (a mistyped --state-dir leaves no directory); the first
    write creates it, private; an import of a missing file creates nothing."""
    state = tmp_path / "new-state"
    r = cli("memory", "profile", "list", "--state-dir", str(state))
    assert r.returncode == 1 and "nothing was stored there" in r.stderr
    assert "memory notes store" in r.stderr and not state.exists()
    r = cli("memory", "import", str(tmp_path / "missing.jsonl"), "--state-dir", str(state))
    assert r.returncode == 1 and "no such file" in r.stderr and not state.exists()
    r = cli("memory", "notes", "store", "I keep bees", "--state-dir", str(state))
    assert r.returncode == 0 and "I keep bees" in r.stdout, r.stderr
    assert state.is_dir() and state.stat().st_mode & 0o777 == 0o700
    r = cli("memory", "notes", "list", "--state-dir", str(state))
    assert r.returncode == 0 and "I keep bees" in r.stdout


@pytest.mark.parametrize("args", [[], ["serve"], ["ask"], ["chat"], ["memory"], ["memory", "profile"],
                                  ["memory", "notes", "recall"], ["config", "show"], ["metrics"],
                                  ["stop"]])
def test_every_command_has_help(args):
    r = cli(*args, "--help")
    assert r.returncode == 0 and "usage: atomic-agent" in r.stdout


async def test_memory_commands_work_on_a_stopped_daemon_and_the_daemon_sees_it(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    r = cli("memory", "notes", "store", "written while the daemon was down", "--state-dir", str(state))
    assert r.returncode == 0 and r.stdout.startswith("#1 ")
    r = cli("memory", "profile", "set", "editor", "helix", "--contextual", "editor,vim",
            "--state-dir", str(state))
    assert r.returncode == 0 and r.stdout.strip() == "~ editor: helix [keywords: editor, vim]"
    r = cli("memory", "stats", "--state-dir", str(state))
    assert r.returncode == 0 and '"offline": true' in r.stdout
    r = cli("memory", "notes", "archive", "#1", "--state-dir", str(state))
    assert r.returncode == 0 and r.stdout.strip().startswith("#1 archived")
    r = cli("memory", "notes", "list", "--archived", "archived", "--state-dir", str(state))
    assert "written while the daemon was down" in r.stdout
    r = cli("memory", "notes", "archive", "1", "--restore", "--state-dir", str(state))
    assert r.returncode == 0 and r.stdout.strip() == "#1 restored"
    r = cli("memory", "notes", "archive", "99", "--state-dir", str(state))
    assert r.returncode == 1 and "no note #99" in r.stderr and "Traceback" not in r.stderr
    r = cli("memory", "stats", "--state-dir", str(state))
    offline = json.loads(r.stdout)  # every count of the file, as the daemon reports it
    assert offline["notes"] == 1 and offline["profileFacts"] == 1
    assert offline["lessons"] == {"active": 0, "total": 0} and offline["links"] == 0
    assert offline["procedures"]["total"] == 0 and offline["votes"]["events"] == 0
    r = cli("memory", "notes", "store", "", "--state-dir", str(state))
    assert r.returncode == 1 and "content" in r.stderr and "Traceback" not in r.stderr
    async with open_fake_llama(tmp_path, []) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                notes = await c.memory("memory.notes.recall", {"query": "daemon down"})
                assert [n["content"] for n in notes] == ["written while the daemon was down"]
                facts = await c.memory("memory.profile.list")
                assert facts[0]["keywords"] == ["editor", "vim"] and not facts[0]["pinned"]


@pytest.mark.slow
def test_memory_reindex_embeds_missing_vectors_with_progress_and_prunes(tmp_path):
    """``memory reindex [--prune]`` on a stopped daemon's file."""
    import json as _json

    from actors.store.notes import MemoryStore
    from actors.store.schema import open_database
    from actors.store.vectors import VectorStore

    state = tmp_path / "state"
    state.mkdir()
    conn = open_database(str(state / "memory.sqlite"))
    notes = MemoryStore(conn)
    ids = [notes.store(f"note {i} about the garden and {i * 7} tomatoes").id for i in range(150)]
    VectorStore(conn).put("old-model", 2, [(ids[0], b"\x00" * 8)])  # a previous model's vector
    conn.close()
    first = cli("memory", "reindex", "--state-dir", str(state), "--batch", "40")
    assert first.returncode == 0, first.stderr
    result = _json.loads(first.stdout)
    assert result == {"model": "all-minilm-l6-v2-int8", "embedded": 150, "skipped": 0,
                      "missing": 0, "pruned": 0}
    # Progress on stderr: bar, done / total, rate, ETA.
    assert re.search(r"reindex: \[#{24}\] 150/150 notes .* notes/s\s+ETA 0:00", first.stderr)
    again = _json.loads(cli("memory", "reindex", "--state-dir", str(state)).stdout)
    assert again["embedded"] == 0  # nothing left to do
    stats = _json.loads(cli("memory", "stats", "--state-dir", str(state)).stdout)
    assert stats["offline"] and stats["embeddings"]["vectors"] == 150  # what reindex did
    assert stats["embeddings"]["otherModelVectors"] == 1  # the old model's, until --prune
    pruned = _json.loads(cli("memory", "reindex", "--prune", "--state-dir", str(state)).stdout)
    assert pruned["pruned"] == 1
    conn = open_database(str(state / "memory.sqlite"))
    models = conn.execute("SELECT model, count(*) FROM memory_vectors GROUP BY model").fetchall()
    conn.close()
    assert models == [("all-minilm-l6-v2-int8", 150)]  # the default model
    bad = cli("memory", "reindex", "--batch", "0", "--state-dir", str(state))
    assert bad.returncode != 0 and "--batch" in bad.stderr and "Traceback" not in bad.stderr


async def test_stop_returns_once_the_daemon_has_exited_so_the_next_command_runs(tmp_path):
    """README: ``atomic-agent stop; atomic-agent memory reindex; atomic-agent serve`` --
    ``stop`` waits until the daemon has let go of its lock (a newcomer found that reindex
    and serve refused to run because stop returned while the daemon was still exiting)."""
    from runtime.shell.state import lock_is_free

    state = tmp_path / "state"
    async with open_fake_llama(tmp_path, []) as fake:
        async with run_daemon(state, llm_url=fake.url):
            assert not lock_is_free(state)
            stop = await trio.to_thread.run_sync(cli, "stop", "--state-dir", str(state))
            assert stop.returncode == 0, stop.stderr
            assert stop.stdout.splitlines() == ["daemon is shutting down…", "daemon stopped"]
            assert lock_is_free(state)
            reindex = await trio.to_thread.run_sync(cli, "memory", "reindex", "--state-dir",
                                                    str(state))
            assert reindex.returncode == 0, reindex.stderr
    bad = cli("stop", "--timeout", "0", "--state-dir", str(state))
    assert bad.returncode == 2 and "--timeout" in bad.stderr


async def test_failed_turns_say_why_and_exit_1_also_with_json(tmp_path):
    """A turn that fails on the LLM side names the cause on stderr (not only with --json)
    and exits 1; empty and not-found results say so; stop without a daemon is exit 3."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "config.json").write_text(
        '{"llm": {"fallbacks": [{"url": "http://127.0.0.1:10", "api": "openai-chat"}]}}')
    async with run_daemon(state, llm_url="http://127.0.0.1:9"):
        plain = await trio.to_thread.run_sync(lambda: cli("ask", "hello", "--state-dir", str(state)))
        as_json = await trio.to_thread.run_sync(
            lambda: cli("ask", "hello", "--json", "--state-dir", str(state)))
        empty = await trio.to_thread.run_sync(lambda: cli("ask", "  ", "--state-dir", str(state)))
        recall = await trio.to_thread.run_sync(
            lambda: cli("memory", "notes", "recall", "zebra", "--state-dir", str(state)))
        zero = await trio.to_thread.run_sync(
            lambda: cli("ask", "hi", "--timeout", "0", "--state-dir", str(state)))
    assert plain.returncode == 1 and "turn ended: error: every LLM backend failed" in plain.stderr
    assert "127.0.0.1:9" in plain.stderr and "127.0.0.1:10" in plain.stderr
    assert "primary: primary" not in plain.stderr
    assert as_json.returncode == 1 and '"reason": "error"' in as_json.stdout
    assert empty.returncode == 1 and "the message is empty" in empty.stderr
    assert recall.returncode == 0 and recall.stdout.strip() == "(no matching notes)"
    assert zero.returncode == 2 and "more than 0 seconds" in zero.stderr
    stop = cli("stop", "--state-dir", str(state))
    assert stop.returncode == 3 and "no atomic-agent daemon is running" in stop.stderr
    assert "Traceback" not in plain.stderr + as_json.stderr + empty.stderr + stop.stderr


@pytest.mark.slow
def test_state_dir_is_accepted_before_the_command_too(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    before = cli("--state-dir", str(state), "memory", "notes", "store", "kept before")
    assert before.returncode == 0, before.stderr
    after = cli("memory", "notes", "list", "--state-dir", str(state))
    assert "kept before" in after.stdout
    # the command's own --state-dir wins
    other = cli("--state-dir", str(tmp_path / "elsewhere"), "memory", "notes", "list",
                "--state-dir", str(state))
    assert "kept before" in other.stdout
