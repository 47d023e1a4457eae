"""``atomic-agent config show|get|set|unset``: edit config.json by key,
checked before it is written; an unknown key names the nearest ones; ``show`` while a
daemon runs prints what that daemon uses (its ``--llm-url`` included)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama


def cli(state: Path, *argv: str, code: int = 0) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "runtime.shell.cli", "--state-dir", str(state),
                           "config", *argv], capture_output=True, text=True, cwd=REPO,
                          timeout=60)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == code, (argv, done.stdout, done.stderr)
    return done


@pytest.mark.slow
def test_get_set_unset_with_checks_and_suggestions(tmp_path):
    state = tmp_path
    assert cli(state, "get", "memory.reflection.timeoutMs").stdout == "60000\n"
    done = cli(state, "set", "memory.reflection.timeoutMs", "90000")
    assert "set memory.reflection.timeoutMs = 90000" in done.stdout
    assert cli(state, "get", "memory.reflection.timeoutMs").stdout == "90000\n"
    cli(state, "set", "server.allowedOrigins", '["http://localhost:3000"]')
    cli(state, "set", "llm.model", "qwen2.5-coder-0.5b")  # plain text is a string
    written = json.loads((state / "config.json").read_text())
    assert written == {"memory": {"reflection": {"timeoutMs": 90000}},
                       "server": {"allowedOrigins": ["http://localhost:3000"]},
                       "llm": {"model": "qwen2.5-coder-0.5b"}}
    assert (state / "config.json").stat().st_mode & 0o777 == 0o600
    before = (state / "config.json").read_text()
    bad = cli(state, "set", "memory.reflection.timeoutMs", "5", code=2)
    assert "refused: memory.reflection.timeoutMs: Expected `int` >= 100; config.json is " \
        "unchanged" in bad.stderr
    typo = cli(state, "set", "memory.reflection.timeoutMS", "5", code=2)
    assert "did you mean memory.reflection.timeoutMs" in typo.stderr
    assert "did you mean memory.reflection.timeoutMs" in cli(
        state, "get", "memory.reflection.timeoutMS", code=2).stderr
    assert "is a block of settings" in cli(state, "set", "memory", "3", code=2).stderr
    assert (state / "config.json").read_text() == before  # refused: the file is untouched
    assert "removed llm.model" in cli(state, "unset", "llm.model").stdout
    assert "was not set" in cli(state, "unset", "llm.model").stdout
    assert "llm" not in json.loads((state / "config.json").read_text())  # no empty block left
    (state / "config.json").write_text('{"memory": {"reflecton": {}}}')
    shown = cli(state, "show", code=2)
    assert "memory.reflecton: unknown key; did you mean memory.reflection" in shown.stderr


async def test_show_while_the_daemon_runs_prints_what_it_uses(tmp_path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path) as fake, run_daemon(state, llm_url=fake.url):
        done = cli(state, "show")
        shown = json.loads(done.stdout)
        assert shown["llm"]["url"] == fake.url  # serve --llm-url, not in config.json
        assert "the running daemon's configuration" in done.stderr
        changed = cli(state, "set", "agent.maxSteps", "6")
        assert "keeps its configuration until it restarts" in changed.stderr
        assert json.loads(cli(state, "show").stdout)["agent"]["maxSteps"] == 4
        got = cli(state, "get", "agent.maxSteps")
        assert got.stdout == "6\n"
        assert "the running daemon uses 4 until it restarts" in got.stderr


def test_a_config_written_with_a_byte_order_mark_is_read(tmp_path):
    """Windows editors save UTF-8 with a BOM; the file is read as the JSON it holds."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "config.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(
        {"server": {"port": 9123}}).encode())
    done = subprocess.run([sys.executable, "-m", "runtime.shell.cli", "--state-dir", str(state),
                           "config", "get", "server.port"], capture_output=True, text=True,
                          cwd=REPO, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "9123", done.stderr
