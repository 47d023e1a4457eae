"""``--state-dir`` after a command group's name (``atomic-agent sessions --state-dir DIR
list``) is the state directory the command uses, as before the command or after its
action (``runtime/shell/cli.py``, ``build_parser``): the action's own option used to put
its default over the group's value, and the groups other than ``sessions`` did not take
it. In process, no daemon running."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from runtime.shell import cli


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.delenv("ATOMIC_AGENT_STATE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the default: never this one
    state = tmp_path / "state"
    state.mkdir()
    logging = structlog.get_config()  # (a command points it at capsys's stderr, closed after)
    yield state
    structlog.configure(**logging)


@pytest.mark.parametrize("argv", [
    ["sessions", "--state-dir", "{d}", "list"],
    ["sessions", "--state-dir", "{d}", "show", "abc"],
    ["sessions", "--state-dir", "{d}", "--limit", "3", "list", "--json"],
    ["sessions", "list", "--state-dir", "{d}"],
    ["--state-dir", "{d}", "sessions", "list"],
])
def test_sessions_looks_for_the_daemon_of_the_state_dir_given(
        state: Path, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main([a.format(d=state) for a in argv])
    err = capsys.readouterr().err
    assert code == 3, err
    assert f"no atomic-agent daemon is running for {state};" in err


def test_every_group_takes_the_state_dir_after_its_name(
        state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = str(state)
    assert cli.main(["config", "--state-dir", d, "set", "server.port", "9999"]) == 0
    assert json.loads((state / "config.json").read_text())["server"]["port"] == 9999
    assert cli.main(["clients", "--state-dir", d, "add", "editor", "--scopes", "read"]) == 0
    assert "editor" in (state / "clients.json").read_text()
    (state / "config.json").write_text(json.dumps(
        {"tools": {"mcpServers": {"time": {"command": "mcp-server-time"}}}}))
    capsys.readouterr()
    assert cli.main(["tools", "--state-dir", d, "list"]) == 0
    assert capsys.readouterr().out.split() == ["time", "stdio", "mcp-server-time"]
    assert cli.main(["memory", "--state-dir", d, "profile", "list"]) == 0
    assert "(no profile facts)" in capsys.readouterr().out
    assert (state / "memory.sqlite").exists()  # offline: the memory of this directory
