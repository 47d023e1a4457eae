"""Every MCP server program the daemon started is gone once it has stopped, one still
starting included (``runtime/services/mcp_stdio.py``): a program that never answers the
MCP initialize and ignores its closed stdin used to outlive ``atomic-agent stop``,
re-parented to PID 1, because the SDK's transport gave it 2 s where the daemon's stop
gives the tools actor 0.8 s."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import trio

from runtime.services.config import parse_config
from runtime.services.mcp_tools import open_server
from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama


def _slow_server(marker: str) -> dict[str, object]:
    """A program that never speaks MCP and ignores its stdin; ``marker`` finds it."""
    return {"command": sys.executable,
            "args": ["-c", f"import time  # {marker}\ntime.sleep(1000)"]}


def _pids_of(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def _kill_all(marker: str) -> None:
    for pid in _pids_of(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


async def test_stop_leaves_no_server_that_was_still_starting(tmp_path: Path) -> None:
    marker = f"mcp-slow-{os.getpid()}-{time.monotonic_ns()}"
    state = tmp_path / "state"
    state.mkdir()
    (state / "config.json").write_text(json.dumps(
        {"tools": {"mcpServers": {"slow": _slow_server(marker)}}}))
    try:
        async with open_fake_llama(tmp_path, []) as fake:
            async with run_daemon(state, llm_url=fake.url):
                with trio.fail_after(30):
                    while not _pids_of(marker):
                        await trio.sleep(0.1)
                started = _pids_of(marker)
                stop = await trio.to_thread.run_sync(lambda: subprocess.run(
                    [sys.executable, "-m", "runtime.shell.cli", "stop", "--state-dir",
                     str(state)], cwd=REPO, capture_output=True, text=True, timeout=60))
                assert stop.returncode == 0, stop.stderr
        with trio.move_on_after(5):
            while _pids_of(marker):
                await trio.sleep(0.1)
        assert _pids_of(marker) == [], f"left running after the stop: {started}"
    finally:
        _kill_all(marker)


async def test_a_cancelled_start_stops_the_program_at_once(tmp_path: Path) -> None:
    """In process: cancelling ``open_server`` while the program has not answered the
    initialize reaps it well within the daemon's 0.8 s for an actor to stop."""
    marker = f"mcp-slow-{os.getpid()}-{time.monotonic_ns()}"
    cfg = parse_config(json.dumps({"tools": {"mcpServers": {"slow": _slow_server(marker)}}}))
    cancelled_at = 0.0
    try:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                async def cancel_once_started() -> None:
                    nonlocal cancelled_at
                    with trio.fail_after(20):
                        while not _pids_of(marker):
                            await trio.sleep(0.02)
                    cancelled_at = time.monotonic()
                    scope.cancel()

                nursery.start_soon(cancel_once_started)
                async with open_server("slow", cfg.tools.mcp_servers["slow"], tmp_path):
                    raise AssertionError("a program that never answers came up")
        took = time.monotonic() - cancelled_at
        assert scope.cancelled_caught
        assert _pids_of(marker) == []
        assert took < 0.8, f"the stop took {took:.2f} s"
    finally:
        _kill_all(marker)
