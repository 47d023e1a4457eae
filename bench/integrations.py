"""The cost of the daemon's other doors: a recall through MCP (stdio and
Streamable HTTP) and a turn through the OpenAI-compatible API, beside the same work over
the websocket, measured in the same run against the same daemon.

A real daemon (default config) with memory seeded like an established user (1,000 notes,
40 facts: ``--notes``) and the scripted llama-server answering every completion at once:

1. **Recall**: ``memory.notes.recall`` (k 5) over the websocket (the baseline), then the
   same query as the MCP tool ``memory_notes_recall`` from the official SDK client over
   stdio (``atomic-agent mcp`` as a subprocess) and over Streamable HTTP (``atomic-agent mcp
   --http``). Each MCP call goes client → MCP server → websocket → memory actor and back,
   so the difference is the MCP hop.
2. **Context**: ``memory.context`` over the websocket vs the MCP tool ``memory_context``.
3. **Turn**: one turn over the websocket (``say`` → ``turn.finished``) vs one
   non-streamed ``POST /v1/chat/completions`` (httpx, keep-alive), each with the scripted
   LLM answering at once, so the difference is the HTTP API's own cost.

Each row: calls, p50 and p95 in ms, the p50 ratio to its websocket baseline, and the added
p50 in ms. Reported, with no target.

Usage: ``python -m bench.integrations [--quick] [--no-write]``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import httpx2
import trio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from bench._results import ROOT, machine_line, percentile, publish, utc_now
from bench.reflection import seed_memory
from runtime.shell.client import open_client
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama

SECTION = "## MCP and OpenAI API overhead"
RULES = [{"grammar_contains": "reply", "response": '{"reply": "ok"}'}]
QUERIES = ["what did I say about coffee and lisbon", "piano lessons", "my sister's garden",
           "docker budget", "travel with the editor"]


async def _timed(n: int, call) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        await call(i)
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def _mcp_http(state: Path) -> tuple[trio.Process, str]:
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "runtime.shell.cli", "mcp", "--http", "--port", "0", "--state-dir",
         str(state)], stderr=subprocess.PIPE, cwd=ROOT)
    buf = b""
    with trio.fail_after(30):
        while b"serving MCP" not in buf or not buf.endswith(b"\n"):
            buf += await proc.stderr.receive_some(4096)
    return proc, buf.decode().strip().splitlines()[-1].split(" at ", 1)[1].split(";")[0]


async def run(notes: int, calls: int, turns: int) -> dict[str, list[float]]:
    """Every measured series, by row name."""
    res: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="aa-bench-integrations-") as tmp_s:
        tmp = Path(tmp_s)
        state = tmp / "state"
        state.mkdir()
        seed_memory(state, notes, 40)
        async with open_fake_llama(tmp, RULES) as fake, run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as ws:
                async def ws_recall(i: int) -> None:
                    await ws.memory("memory.notes.recall", {"query": QUERIES[i % 5], "k": 5})

                async def ws_context(i: int) -> None:
                    await ws.memory("memory.context", {"message": QUERIES[i % 5]})

                async def ws_turn(i: int) -> None:
                    async for frame in ws.say(QUERIES[i % 5]):
                        assert frame.get("type") != "error", frame

                await _timed(10, ws_recall)  # warm-up (caches, first connection)
                res["recall: websocket"] = await _timed(calls, ws_recall)
                res["context: websocket"] = await _timed(calls, ws_context)
                await _timed(3, ws_turn)
                res["turn: websocket"] = await _timed(turns, ws_turn)

            params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), args=[
                "-m", "runtime.shell.cli", "mcp", "--state-dir", str(state)])
            async with Client(params) as mcp:
                res["recall: MCP stdio"], res["context: MCP stdio"] = await _mcp_series(
                    mcp, calls)

            proc, url = await _mcp_http(state)
            try:
                async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {d.token}"}) as h:
                    async with Client(streamable_http_client(url, http_client=h)) as mcp:
                        res["recall: MCP HTTP"], res["context: MCP HTTP"] = await _mcp_series(
                            mcp, calls)
            finally:
                proc.terminate()
                await proc.wait()

            async with httpx.AsyncClient(base_url=d.ready["openaiUrl"], timeout=60, headers={
                    "Authorization": f"Bearer {d.token}"}) as http:
                async def api_turn(i: int) -> None:
                    r = await http.post("/chat/completions", json={
                        "model": "atomic-agent", "user": "bench",
                        "messages": [{"role": "user", "content": QUERIES[i % 5]}]})
                    assert r.status_code == 200, r.text

                await _timed(3, api_turn)
                res["turn: OpenAI API"] = await _timed(turns, api_turn)
    return res


async def _mcp_series(mcp: Client, calls: int) -> tuple[list[float], list[float]]:
    async def recall(i: int) -> None:
        r = await mcp.call_tool("memory_notes_recall", {"query": QUERIES[i % 5], "k": 5})
        assert not r.is_error, r.content

    async def context(i: int) -> None:
        r = await mcp.call_tool("memory_context", {"message": QUERIES[i % 5]})
        assert not r.is_error, r.content

    await _timed(10, recall)
    return await _timed(calls, recall), await _timed(calls, context)


def main(argv: list[str] | None = None) -> int:
    """Measure, print the table, record it unless ``--no-write``."""
    p = argparse.ArgumentParser(prog="python -m bench.integrations",
                                description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="50 calls, 10 turns, no write")
    p.add_argument("--notes", type=int, default=1000)
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--turns", type=int, default=60)
    p.add_argument("--write", action=argparse.BooleanOptionalAction, default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.calls, args.turns = 50, 10
    write = args.write if args.write is not None else not args.quick
    res = trio.run(run, args.notes, args.calls, args.turns)
    rows = ["| path | calls | p50 ms | p95 ms | p50 ratio to websocket | added p50 ms |",
            "|---|---:|---:|---:|---:|---:|"]
    for name, samples in res.items():
        kind = name.split(":")[0]
        base = percentile(res[f"{kind}: websocket"], 50)
        p50 = percentile(samples, 50)
        rows.append(f"| {name} | {len(samples)} | {p50:.2f} | {percentile(samples, 95):.2f} | "
                    f"{p50 / base:.2f}× | {p50 - base:+.2f} |")
    command = " ".join(["python -m bench.integrations", *(argv if argv is not None
                                                           else sys.argv[1:])])
    text = (f"{SECTION}\n\nThe added latency of a recall through MCP and of a turn "
            "through the OpenAI-compatible API, beside the same work over the websocket, same "
            "run, same daemon (reported, no target).\n\n"
            f"- Machine: {machine_line()}\n- Date: {utc_now()}\n- Command: `{command.strip()}`\n"
            f"- Default config, memory seeded with {args.notes} notes and 40 facts; scripted "
            "llama-server answering at once; MCP through the official SDK client "
            "(`atomic-agent mcp` over stdio, and `--http`); the API through httpx "
            "(keep-alive, not streamed)\n\n" + "\n".join(rows) + "\n\n"
            "An MCP call crosses one more process (client → `atomic-agent mcp` → websocket → "
            "memory actor); a turn through the API is the websocket's turn plus HTTP "
            "parsing and the JSON answer.\n")
    publish(SECTION, text, write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
