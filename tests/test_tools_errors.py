"""What a person is told when an MCP server misbehaves (docs/tools.md): one line of ours,
never the mcp SDK's tracebacks (they go to the server's log,
``runtime/services/mcp_tools.py``); the server's name said once in ``/health`` and
``metrics``; an HTTP server that refuses the token said so. Real programs and a real
HTTP server on loopback."""

from __future__ import annotations

import contextlib
import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.tools.messages import down_reason
from runtime.services.config import parse_config
from runtime.services.mcp_tools import ToolServerError, open_server
from runtime.shell.metrics_summary import summarize
from tests.daemon import REPO


@contextlib.contextmanager
def _http_answering(status: int, body: bytes = b"",
                    content_type: str = "application/json") -> Iterator[str]:
    """A loopback HTTP server that answers every request with ``status`` and ``body``;
    yields its MCP URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            if status == 401:
                self.send_header("WWW-Authenticate", 'Bearer realm="mcp"')
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_DELETE = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _add(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runtime.shell.cli", "tools", "add",
                           "--state-dir", str(state), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def _said(run: subprocess.CompletedProcess[str]) -> list[str]:
    out = run.stdout + run.stderr
    assert "Traceback" not in out, out
    return [line for line in out.splitlines() if line.startswith("atomic-agent: ")]


def test_a_program_writing_nonsense_is_one_line_and_the_detail_is_in_its_log(
        tmp_path: Path) -> None:
    state = tmp_path / "state"
    run = _add(state, "p-echo", "--", "echo", '{"jsonrpc":"2.0"}')
    assert run.returncode != 0
    said = _said(run)
    assert len(said) == 1 and "MCP server 'p-echo' could not start" in said[0], said
    log = (state / "logs" / "mcp-p-echo.log").read_text()
    assert "not a JSON-RPC message on stdout" in log


def test_the_sdks_own_tracebacks_go_to_the_servers_log(tmp_path: Path) -> None:
    """An HTTP server answering JSON that is not JSON: the SDK logs the parse error with
    its traceback (``logger.exception``), which Python printed on the terminal."""
    state = tmp_path / "state"
    with _http_answering(200, b"{not json") as url:
        run = _add(state, "garbled", "--url", url)
    assert run.returncode != 0
    said = _said(run)
    assert len(said) == 1 and "MCP server 'garbled'" in said[0], said
    log = (state / "logs" / "mcp-garbled.log").read_text()
    assert "mcp SDK ERROR" in log and "Traceback" in log


async def test_an_http_server_that_refuses_the_token_is_said_so(tmp_path: Path) -> None:
    with _http_answering(401, b"") as url:
        cfg = parse_config(json.dumps({"tools": {"mcpServers": {"docs": {
            "url": url, "timeoutMs": 10000}}}})).tools.mcp_servers["docs"]
        with pytest.raises(ToolServerError) as caught:
            async with open_server("docs", cfg, tmp_path):
                pass
    assert str(caught.value) == ("MCP server 'docs' refused the connection: HTTP 401 "
                                 "Unauthorized (check its headers or tokenFile)")


def test_a_server_that_is_down_is_named_once() -> None:
    error = "MCP server 'nope' could not start: [Errno 2] No such file or directory"
    assert down_reason("nope", error) == "could not start: [Errno 2] No such file or directory"
    assert down_reason("nope", "MCP server 'nope': its working directory '/x' does not "
                               "exist") == "its working directory '/x' does not exist"
    assert down_reason("other", error) == error
    text = summarize({"counters": {}, "actors": {"tools": {"servers": [
        {"name": "nope", "state": "down", "error": error, "restarts": 3}]}}})
    assert ("MCP servers: nope DOWN (could not start: [Errno 2] No such file or directory; "
            "restarts 3)") in text
