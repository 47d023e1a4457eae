"""Who may talk to the daemon's listeners (runtime/shell/listen_guard.py): ``Host`` and
``Origin`` checked the same way on the websocket and the OpenAI API (and MCP), wrong
tokens slowed and counted, a non-loopback bind refused without ``server.allowRemote``,
connections that never say hello (or never send their body) let go in time, and a cap on
one address's waiting connections."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed, open_websocket_url

from runtime.shell.listen_guard import AuthThrottle, host_allowed, is_loopback, origin_allowed
from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama


def test_host_and_origin_rules():
    assert host_allowed("localhost:8765", "127.0.0.1")
    assert host_allowed("LOCALHOST:8765", "127.0.0.1") and host_allowed("[::1]:1", "127.0.0.1")
    assert host_allowed("127.0.0.1", "127.0.0.1") and host_allowed("127.1.2.3:9", "127.0.0.1")
    assert not host_allowed("evil.example:8765", "127.0.0.1")
    assert not host_allowed("localhost.evil.example", "127.0.0.1")
    assert not host_allowed(None, "127.0.0.1") and not host_allowed("", "127.0.0.1")
    assert host_allowed("box.lan:8765", "0.0.0.0", allow_remote=True)
    assert origin_allowed(None, []) and not origin_allowed("null", [])
    assert origin_allowed("HTTP://LOCALHOST:5173", ["http://localhost:5173/"])
    assert not origin_allowed("http://localhost:5174", ["http://localhost:5173"])
    assert is_loopback("::1") and is_loopback("localhost") and not is_loopback("0.0.0.0")


async def upgrade_status(port: int, host: str, origin: str | None = None) -> int:
    """The status line's code of a websocket upgrade sent with these headers."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    key = base64.b64encode(os.urandom(16)).decode()
    lines = ["GET / HTTP/1.1", f"Host: {host}", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
    if origin:
        lines.append(f"Origin: {origin}")
    async with stream:
        await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode())
        data = b""
        with trio.fail_after(10):
            while b"\r\n" not in data:
                data += await stream.receive_some(4096)
    return int(data.split(b" ", 2)[1])


async def test_every_listener_checks_host_origin_and_slows_wrong_tokens(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "config.json").write_text(json.dumps({
        "server": {"allowedOrigins": ["http://localhost:5173"], "handshakeTimeoutMs": 1500}}))
    async with open_fake_llama(tmp_path) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            port = int(d.url.rsplit(":", 1)[1])
            assert await upgrade_status(port, f"evil.example:{port}") == 421
            assert await upgrade_status(port, f"LOCALHOST:{port}") == 101
            assert await upgrade_status(port, f"localhost:{port}",
                                        origin="HTTP://LOCALHOST:5173") == 101
            assert await upgrade_status(port, f"localhost:{port}",
                                        origin="http://evil.example") == 403
            # a wrong token is answered after a pause, and counted
            async with open_websocket_url(d.url) as ws:
                t0 = time.monotonic()
                await ws.send_message(json.dumps({"type": "hello", "token": "x" * 43}))
                assert json.loads(await ws.get_message())["code"] == "unauthorized"
                assert time.monotonic() - t0 >= 0.4
            api = d.ready["openaiUrl"]
            auth = {"Authorization": f"Bearer {d.token}"}
            async with httpx.AsyncClient() as http:
                r = await http.get(f"{api}/models", headers={**auth, "Host": "evil.example"})
                assert r.status_code == 421
                r = await http.get(f"{api}/models", headers={**auth, "Host": "LOCALHOST"})
                assert r.status_code == 200
                r = await http.get(f"{api}/models", headers={"Authorization": "Bearer nope"})
                assert r.status_code == 401
                metrics = await _metrics(d)
    assert metrics["counters"]["auth.failed{listener=websocket}"] == 1
    assert metrics["counters"]["auth.failed{listener=openai_api}"] == 1
    assert metrics["counters"]["gateway.refused{reason=host}"] == 1
    assert metrics["counters"]["gateway.refused{reason=origin}"] == 1


async def _metrics(d) -> dict:
    from runtime.shell.client import open_client

    async with open_client(url=d.url, token=d.token) as c:
        return await c.request({"type": "metrics"}, "metrics.result")


async def test_waiting_connections_are_capped_and_let_go_in_time(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "config.json").write_text(json.dumps({
        "server": {"maxPendingPerPeer": 3, "handshakeTimeoutMs": 1000}}))
    async with open_fake_llama(tmp_path) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            port = int(d.url.rsplit(":", 1)[1])
            async with trio.open_nursery() as nursery:
                closed: list[float] = []
                why: list[str] = []

                async def silent() -> None:  # upgraded, never says hello
                    t0 = time.monotonic()
                    async with open_websocket_url(d.url) as ws:
                        try:
                            why.append(json.loads(await ws.get_message())["code"])
                        except ConnectionClosed as exc:  # pushed out by a newer one
                            why.append(str(exc.reason.reason).split(":")[0])
                    closed.append(time.monotonic() - t0)

                for _ in range(3):
                    nursery.start_soon(silent)
                await trio.sleep(0.3)
                # the places are full of silent connections: the right token still gets
                # in at once (the oldest silent one goes), never a 429
                from runtime.shell.client import open_client

                with trio.fail_after(1):
                    async with open_client(url=d.url, token=d.token) as c:
                        await c.request({"type": "ping"}, "pong")
                # a raw connection that never sends its upgrade is closed too
                raw = await trio.open_tcp_stream("127.0.0.1", port)
                with trio.fail_after(5):
                    assert await raw.receive_some(10) == b""
                await raw.aclose()
            assert len(closed) == 3 and max(closed) < 3
            assert sorted(why) == ["hello_required"] * 3, why
            # and the address may connect again
            async with open_client(url=d.url, token=d.token) as c:
                await c.request({"type": "ping"}, "pong")
                metrics = await c.request({"type": "metrics"}, "metrics.result")
            async with httpx.AsyncClient() as http:  # a body announced, never sent
                async with await trio.open_tcp_stream("127.0.0.1", int(
                        d.ready["openaiUrl"].rsplit(":", 1)[1].split("/")[0])) as s:
                    await s.send_all(
                        b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
                        b"Authorization: Bearer " + d.token.encode() + b"\r\n"
                        b"Content-Type: application/json\r\nContent-Length: 500\r\n\r\n{")
                    with trio.fail_after(5):
                        head = await s.receive_some(4096)
                    assert head.startswith(b"HTTP/1.1 408")
    assert metrics["counters"]["gateway.refused{reason=pending_per_peer}"] == 1
    assert metrics["counters"]["gateway.closed{reason=hello_timeout}"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("allow", [False, True])
def test_a_remote_bind_needs_allow_remote(tmp_path, allow):
    state = tmp_path / "state"
    state.mkdir()
    (state / "config.json").write_text(json.dumps({"server": {"allowRemote": allow}}))
    cmd = [sys.executable, "-m", "runtime.shell.cli", "serve", "--state-dir", str(state),
           "--host", "0.0.0.0", "--port", "0", "--llm-url", "http://127.0.0.1:9"]
    if not allow:
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=60)
        assert done.returncode != 0 and "server.allowRemote" in done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        return
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO)
    try:
        ready = json.loads(proc.stdout.readline())
        assert ready["event"] == "ready"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert "warning: listening on 0.0.0.0" in err and "in clear" in err


async def test_the_mcp_http_guard_applies_the_same_rules():
    from runtime.shell.mcp_server import BearerGuard

    reached: list[int] = []

    async def app(scope, receive, send) -> None:
        reached.append(1)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    throttle = AuthThrottle(delay_s=0.01)  # this process's own counters stay untouched
    guard = BearerGuard(app, "tok", "127.0.0.1", ["http://localhost:5173"], throttle)

    async def status(**headers: str) -> int:
        sent: list[dict] = []

        async def send(message: dict) -> None:
            sent.append(message)

        scope = {"type": "http", "headers": [(k.lower().encode(), v.encode())
                                             for k, v in headers.items()]}
        await guard(scope, None, send)
        return sent[0]["status"]

    ok = {"Host": "LOCALHOST:8767", "Authorization": "Bearer tok"}
    assert await status(**ok) == 200
    assert await status(**{**ok, "Host": "evil.example:8767"}) == 421
    assert await status(**{**ok, "Origin": "HTTP://LOCALHOST:5173"}) == 200
    assert await status(**{**ok, "Origin": "http://evil.example"}) == 403
    assert await status(Host="localhost", Authorization="Bearer nope") == 401
    assert len(reached) == 2 and throttle.failures == {"mcp": 1}
