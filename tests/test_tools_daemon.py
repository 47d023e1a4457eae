"""The daemon keeps the user's MCP servers running (``actors/tools/actor.py``): a real
daemon with ``mcp-server-time``, a server written with the SDK, one that cannot start
and one disabled. What a person sees: one warning line at start for the broken one,
``/health`` and ``metrics`` naming it, the others up with their tools; a server that
dies is started again; the daemon's stop leaves no server process behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import trio

from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama

TIME = str(Path(sys.executable).parent / "mcp-server-time")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}").exists() \
        else "X"
    return state != "Z"


async def _metrics(state: Path) -> dict:
    r = await trio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-m", "runtime.shell.cli", "metrics", "--json", "--state-dir",
         str(state)], cwd=REPO, capture_output=True, text=True, timeout=60))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


async def test_the_daemon_keeps_its_tool_servers_and_says_which_is_down(tmp_path: Path) -> None:
    state, pids = tmp_path / "state", tmp_path / "notes.pids"
    state.mkdir()
    (state / "config.json").write_text(json.dumps({"tools": {"mcpServers": {
        "time": {"command": TIME},
        "notes": {"command": sys.executable, "args": [
            "-m", "tests.fakes.mcp_tool_server", "--pid-file", str(pids)], "cwd": str(REPO)},
        "broken": {"command": "/no/such/program"},
        "later": {"command": TIME, "enabled": False},
    }}}))
    async with open_fake_llama(tmp_path, []) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            base = d.ready["openaiUrl"].removesuffix("/v1")
            def warned() -> list[str]:
                return [ln for ln in d.stderr_path.read_text().splitlines()
                        if ln.startswith("atomic-agent: warning:") and "MCP server" in ln]

            with trio.fail_after(60):  # the start-up report comes after the ready line
                while not warned():
                    await trio.sleep(0.2)
            await trio.sleep(0.5)
            lines = warned()
            assert len(lines) == 1 and "'broken' could not start" in lines[0], lines
            servers = {s["name"]: s for s in (await _metrics(state))["actors"]["tools"]["servers"]}
            assert servers["time"]["state"] == "up"
            assert {t["name"] for t in servers["time"]["tools"]} == {"get_current_time",
                                                                      "convert_time"}
            assert servers["notes"]["state"] == "up"
            assert servers["broken"]["state"] == "down"
            assert servers["later"]["state"] == "disabled"
            async with httpx.AsyncClient(base_url=base, timeout=30) as http:
                health = (await http.get("/health")).json()
            assert health["status"] == "degraded"
            error = servers["broken"]["error"]
            assert error.startswith("MCP server 'broken' could not start: "), error
            assert [p for p in health["problems"] if "MCP server" in p] == [
                "MCP server 'broken' is down: "
                + error.removeprefix("MCP server 'broken' ")]  # the name once
            text = await trio.to_thread.run_sync(lambda: subprocess.run(
                [sys.executable, "-m", "runtime.shell.cli", "metrics", "--state-dir",
                 str(state)], cwd=REPO, capture_output=True, text=True, timeout=60).stdout)
            assert "MCP servers: broken DOWN (could not start: " in text
            assert "time up (2 tools)" in text
            # The notes server dies: it is noticed (a ping) and started again.
            first = int(pids.read_text().split()[0])
            os.kill(first, 9)
            with trio.fail_after(40):
                while True:
                    await trio.sleep(1)
                    notes = next(s for s in (await _metrics(state))["actors"]["tools"][
                        "servers"] if s["name"] == "notes")
                    if notes["state"] == "up" and notes["restarts"] >= 1:
                        break
            started = [int(p) for p in pids.read_text().split()]
            assert len(started) == 2 and _alive(started[1])
    # The daemon stopped: no server it started is left running.
    with trio.fail_after(10):
        while _alive(started[1]):
            await trio.sleep(0.2)


async def test_a_call_answers_with_the_tools_text_or_says_why_there_is_none(
        tmp_path: Path) -> None:
    """The tools actor's CallTool, in process on a real server: the result's text, the
    tool's own error, an unknown server, and a server that died (the call says so and
    the keeper starts it again)."""
    from actors.tools.actor import ToolsActor
    from actors.tools.messages import CallTool
    from runtime.services.config import ActorBoot, parse_config

    log, pids = tmp_path / "calls.jsonl", tmp_path / "pids"
    cfg = parse_config(json.dumps({"tools": {"mcpServers": {"notes": {
        "command": sys.executable, "cwd": str(REPO), "timeoutMs": 20000,
        "args": ["-m", "tests.fakes.mcp_tool_server", "--log", str(log), "--pid-file",
                 str(pids)]}}}}))
    actor = ToolsActor(None, ActorBoot(state_dir=str(tmp_path), config=cfg))  # type: ignore[arg-type]
    kept = actor.kept["notes"]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.keep, kept)
        with trio.fail_after(30):
            await kept.first_done.wait()
        assert kept.status.state == "up", kept.status
        found = await actor.call(CallTool(server="notes", tool="lookup",
                                          arguments={"word": "sprint"}))
        assert found.ok and found.text == "sprint: a word the team uses" and not found.is_error
        bad = await actor.call(CallTool(server="notes", tool="lookup", arguments={}))
        assert bad.ok and bad.is_error  # the server's own validation error, as text
        nowhere = await actor.call(CallTool(server="git", tool="git_status"))
        assert not nowhere.ok and nowhere.error == "no MCP server named 'git'"
        os.kill(int(pids.read_text().split()[0]), 9)
        with trio.fail_after(20):
            while True:
                gone = await actor.call(CallTool(server="notes", tool="lookup",
                                                 arguments={"word": "x"}))
                if not gone.ok:
                    break
                await trio.sleep(0.2)
        assert "notes" in gone.error
        with trio.fail_after(30):  # started again: the broken call woke the keeper
            while not (kept.status.state == "up" and kept.status.restarts >= 1):
                await trio.sleep(0.2)
        nursery.cancel_scope.cancel()
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert {"tool": "lookup", "args": {"word": "sprint"}} in calls
