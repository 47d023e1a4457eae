"""``atomic-agent mcp``: the daemon's memory over MCP, driven by the official
SDK's own client over both transports (stdio: the server launched as a subprocess;
Streamable HTTP on loopback with the daemon token), against a real daemon; a daemon
that is not running is one clear tool error; bad arguments are tool errors that name
the problem; the HTTP transport refuses a wrong key and a browser origin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama

READ_ONLY = {"memory_profile_list", "memory_profile_history", "memory_notes_recall",
             "memory_notes_search", "memory_notes_get", "memory_lessons_list",
             "memory_lessons_get", "memory_procedures_list", "memory_procedures_get",
             "memory_context"}
DESTRUCTIVE = {"memory_profile_remove", "memory_notes_forget"}
ADDITIVE = {"memory_profile_set", "memory_notes_store"}


def _stdio(state_dir: Path) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, cwd=str(REPO), args=[
        "-m", "runtime.shell.cli", "mcp", "--state-dir", str(state_dir)])


def _text(result) -> str:
    return "".join(part.text for part in result.content)


async def _ok(client: Client, tool: str, args: dict) -> object:
    result = await client.call_tool(tool, args)
    assert not result.is_error, (tool, _text(result))
    return json.loads(_text(result)) if _text(result)[:1] in "[{" else _text(result)


async def _error(client: Client, tool: str, args: dict) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error, (tool, args, _text(result))
    return _text(result)


async def _exercise(client: Client) -> None:
    """The whole tool surface on one connection: catalog, writes, reads, context, errors."""
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == READ_ONLY | DESTRUCTIVE | ADDITIVE
    for name, t in tools.items():
        assert t.annotations is not None and t.description, name
        assert t.annotations.read_only_hint is (name in READ_ONLY), name
        if name not in READ_ONLY:
            assert t.annotations.destructive_hint is (name in DESTRUCTIVE), name
        assert t.input_schema["type"] == "object"
    assert tools["memory_notes_get"].input_schema["properties"]["id"]["type"] == "integer"
    assert tools["memory_context"].input_schema["required"] == ["message"]

    fact = await _ok(client, "memory_profile_set", {"key": "home_city", "value": "Lisbon"})
    assert fact["key"] == "home_city" and fact["value"] == "Lisbon"
    note = await _ok(client, "memory_notes_store", {
        "content": "The user keeps two beehives on the roof of their flat", "tags": ["bees"]})
    got = await _ok(client, "memory_notes_get", {"id": note["id"]})
    assert (got["id"], got["content"], got["tags"]) == (note["id"], note["content"], ["bees"])
    hits = await _ok(client, "memory_notes_recall", {"query": "how are my beehives?"})
    assert [h["id"] for h in hits] == [note["id"]]
    assert [h["id"] for h in await _ok(client, "memory_notes_search",
                                       {"query": "beehives"})] == [note["id"]]
    assert [f["key"] for f in await _ok(client, "memory_profile_list", {})] == ["home_city"]
    context = await _ok(client, "memory_context", {"message": "any news about my beehives?"})
    assert "### recalled" in context and "beehives on the roof" in context
    assert "### profile" in context and "home_city: Lisbon" in context
    assert await _ok(client, "memory_lessons_list", {}) == []
    assert await _ok(client, "memory_procedures_list", {}) == []

    # errors: the SDK's schema check, then the daemon's own code
    text = await _error(client, "memory_notes_get", {"id": "seven"})
    assert text.startswith("invalid_argument: id: Expected `int`, got `str`"), text
    assert "pydantic" not in text and "notes_getArguments" not in text
    assert "invalid_argument: value: Object missing required field `value`" in await _error(
        client, "memory_profile_set", {"key": "name"})
    assert "invalid_argument: key" in await _error(client, "memory_profile_set",
                                                   {"key": "Bad Key!", "value": "x"})
    assert "not_found" in await _error(client, "memory_lessons_get", {"id": 99})

    assert await _ok(client, "memory_notes_forget", {"id": note["id"]}) == {"removed": True}
    assert f"not_found: no note #{note['id']}" in await _error(
        client, "memory_notes_get", {"id": note["id"]})
    assert await _ok(client, "memory_profile_remove", {"key": "home_city"}) == {"removed": True}
    history = await _ok(client, "memory_profile_history", {"key": "home_city"})
    assert [v["value"] for v in history] == ["Lisbon"]
    assert await _ok(client, "memory_context", {"message": "beehives"}) \
        == "(memory has nothing for this message)"


async def test_mcp_over_stdio_serves_every_tool_of_the_running_daemon(tmp_path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path) as fake, run_daemon(state, llm_url=fake.url):
        async with Client(_stdio(state)) as client:
            assert client.server_info.name == "atomic-agent"
            await _exercise(client)


async def test_mcp_without_a_daemon_answers_one_clear_error_then_works_once_it_runs(tmp_path):
    state = tmp_path / "state"
    async with Client(_stdio(state)) as client:
        text = await _error(client, "memory_profile_list", {})
        assert "not_running: no atomic-agent daemon is running" in text
        assert f"atomic-agent serve --state-dir {state}" in text
        assert "Traceback" not in text
        async with open_fake_llama(tmp_path) as fake:
            async with run_daemon(state, llm_url=fake.url):
                await _ok(client, "memory_profile_set", {"key": "name", "value": "Ada"})
            # the daemon stopped under the open MCP session: one error, no crash …
            assert "not_running" in await _error(client, "memory_profile_list", {})
            async with run_daemon(state, llm_url=fake.url):
                # … and the next daemon is found again
                facts = await _ok(client, "memory_profile_list", {})
                assert [f["value"] for f in facts] == ["Ada"]
    assert not (tmp_path / "state" / "memory.sqlite-journal").exists()


async def _start_http(state: Path, *extra: str) -> tuple[trio.Process, str]:
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "runtime.shell.cli", "mcp", "--http", "--port", "0",
         "--state-dir", str(state), *extra], stderr=subprocess.PIPE, cwd=REPO)
    buf = b""
    with trio.fail_after(30):
        while b"serving MCP" not in buf or not buf.endswith(b"\n"):
            chunk = await proc.stderr.receive_some(4096)
            assert chunk, buf
            buf += chunk
    line = buf.decode().strip().splitlines()[-1]
    return proc, line.split(" at ", 1)[1].split(";", 1)[0]


async def test_mcp_over_streamable_http_needs_the_token_and_refuses_browser_origins(tmp_path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path) as fake, run_daemon(state, llm_url=fake.url) as d:
        proc, url = await _start_http(state)
        try:
            assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
            auth = {"Authorization": f"Bearer {d.token}"}
            async with httpx2.AsyncClient(headers=auth) as http:
                async with Client(streamable_http_client(url, http_client=http)) as client:
                    await _exercise(client)
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            accept = {"Accept": "application/json, text/event-stream"}
            async with httpx2.AsyncClient() as http:
                for headers in ({}, {"Authorization": "Bearer wrong"},
                                {"Authorization": d.token}):
                    r = await http.post(url, json=ping, headers=headers | accept)
                    assert r.status_code == 401 and "unauthorized" in r.text
                r = await http.post(url, json=ping, headers=auth | accept | {
                    "Origin": "https://evil.example"})
                assert r.status_code == 403
        finally:
            proc.terminate()
            with trio.fail_after(10):
                assert await proc.wait() == 0


@pytest.mark.slow
async def test_mcp_cli_refuses_bad_options_in_one_line(tmp_path):
    for argv, expected in ((["--port", "80"], "--port needs --http"),
                           (["--http", "--port", "70000"], "--port must be 0-65535")):
        done = subprocess.run([sys.executable, "-m", "runtime.shell.cli", "mcp", "--state-dir",
                               str(tmp_path), *argv], capture_output=True, text=True, cwd=REPO,
                              timeout=60)
        assert done.returncode == 2 and expected in done.stderr
        assert "Traceback" not in done.stderr and done.stdout == ""
    busy = trio.socket.socket()
    await busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    done = subprocess.run([sys.executable, "-m", "runtime.shell.cli", "mcp", "--http", "--port",
                           str(port), "--state-dir", str(tmp_path)], capture_output=True,
                          text=True, cwd=REPO, timeout=60)
    busy.close()
    assert done.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr
