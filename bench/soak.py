"""Soak: many clients for a long time, looking for leaks.

A real daemon (``atomic-agent serve``, default config: reflection, backfill with the local
embedder, hybrid recall on) and the scripted llama-server (``--latency-ms``, default 50)
serve ``--clients`` websocket clients (default 50) for ``--minutes`` (default 10). Each
client loops: a chat turn, and every third round a note stored and a recall, with a short
random pause; every ``--reconnect-every`` rounds it reconnects (sessions come and go).

Every ``SAMPLE_S`` seconds each daemon process (root, the four actors) is sampled from
``/proc``: resident memory (VmRSS), open file descriptors and threads. The first
``WARMUP_S`` seconds are warm-up (imports, the model load, caches filling); the figures
compare the first sample after warm-up with the last one.

Pass: 0 errors, no actor restarted, and in the second half of the run — the steady
state, when a leak shows as the same steady growth while a cache or the allocator's
high-water mark of the first minutes does not — every process's RSS grows by at most
``RSS_LATE_GROWTH_LIMIT`` (2 %), and its descriptors and threads never exceed the first
half's highest count by more than ``FD_SLACK`` (4: sockets of clients in the middle of
reconnecting; a leak keeps setting new highs, while a pool such as httpx's connections to
the LLM rises and falls with the load). The growth since warm-up is shown
beside it. Task leaks: each process's live trio tasks (the ``metrics`` frame) are counted
with the daemon idle before the clients start and after they stop; after may exceed
before by at most ``TASK_SLACK``. The section is written to ``bench/RESULTS.md``.

Usage: ``python -m bench.soak [--clients N] [--minutes M] [--quick] [--no-write]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import trio

from bench._results import MANY_CLIENTS, machine_line, publish, utc_now
from runtime.shell.client import ClientError, open_client
from tests.conftest import actor_name, descendants
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama

SECTION = "## Soak"
SAMPLE_S = 10.0
WARMUP_S = 60.0
RSS_LATE_GROWTH_LIMIT = 0.02
FD_SLACK = 4
TASK_SLACK = 2
"""Trio tasks a process may hold more when idle after the load than before it (a
connection pool's reaper, a lazily started background task)."""
RULES = [{"grammar_contains": "reply", "response": '{"reply": "ok"}'}]
WORDS = ("coffee lisbon pytest piano travel sister editor garden budget docker kettle "
         "harbour violin meadow lantern cobalt saffron walnut glacier orchard").split()


def sample(pid: int) -> dict[str, int] | None:
    """RSS (KiB), open fds and threads of ``pid`` from /proc; None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {"rss_kib": int(fields["VmRSS"].split()[0]), "fds": fds,
            "threads": int(fields["Threads"].strip())}


def process_names(root: int) -> dict[int, str]:
    """``{pid: name}`` of the root and its actors (``tests.conftest.actor_name``)."""
    names = {root: "root"}
    for pid in descendants(root):
        if (name := actor_name(pid)) is not None:
            names[pid] = name
    return names


async def client_loop(url: str, token: str, idx: int, until: float, reconnect_every: int,
                      counts: Counter, errors: Counter) -> None:
    """One client until ``until`` (trio time): turns, notes, recalls, reconnects."""
    rng = random.Random(idx)
    rounds = 0
    while trio.current_time() < until:
        async with open_client(url=url, token=token) as c:
            for _ in range(reconnect_every):
                if trio.current_time() >= until:
                    return
                rounds += 1
                try:
                    with trio.fail_after(60):
                        frames = [f async for f in c.say(
                            f"client {idx} says {' '.join(rng.sample(WORDS, 3))}")]
                        last = frames[-1] if frames else {}
                        if last.get("reason") != "reply":
                            errors[f"turn:{last.get('reason') or last.get('code')}"] += 1
                        counts["turns"] += 1
                        if rounds % 3 == 0:
                            await c.memory("memory.notes.store", {
                                "content": f"client {idx} round {rounds}: "
                                           + " ".join(rng.sample(WORDS, 6))})
                            await c.memory("memory.notes.recall",
                                           {"query": " ".join(rng.sample(WORDS, 2))})
                            counts["memory_ops"] += 2
                except ClientError as exc:
                    errors[exc.code] += 1
                except trio.TooSlowError:
                    errors["timeout"] += 1
                await trio.sleep(rng.uniform(0.05, 0.5))


async def run(clients: int, minutes: float, latency_ms: float, reconnect_every: int
              ) -> dict:
    """Run the soak; returns samples per process, counts and errors."""
    samples: dict[str, list[tuple[float, dict[str, int]]]] = {}
    counts: Counter = Counter()
    errors: Counter = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        async with open_fake_llama(Path(tmp), RULES, latency_ms=latency_ms) as fake:
            state = Path(tmp) / "state"
            state.mkdir()
            (state / "config.json").write_text(json.dumps(MANY_CLIENTS))
            async with run_daemon(state, llm_url=fake.url) as d:
                tasks_before = await idle_tasks(d.url, d.token)
                t0 = trio.current_time()
                until = t0 + minutes * 60
                async with trio.open_nursery() as nursery:
                    for idx in range(clients):
                        nursery.start_soon(client_loop, d.url, d.token, idx, until,
                                           reconnect_every, counts, errors)
                    while trio.current_time() < until:
                        now = trio.current_time() - t0
                        for pid, name in process_names(d.proc.pid).items():
                            got = sample(pid)
                            if got is not None:
                                samples.setdefault(name, []).append((now, got))
                        print(f"soak: {now:5.0f} s  turns {counts['turns']}  errors "
                              f"{sum(errors.values())}", file=sys.stderr, flush=True)
                        await trio.sleep(SAMPLE_S)
                tasks_after = await idle_tasks(d.url, d.token)
                shutdown = d
            restarts = shutdown.stderr_path.read_text().count("actor.restarting")
    return {"samples": samples, "counts": counts, "errors": errors,
            "shutdown_s": shutdown.shutdown_s, "restarts": restarts,
            "tasks": (tasks_before, tasks_after)}


async def idle_tasks(url: str, token: str) -> dict[str, int]:
    """Trio tasks alive per process (the ``metrics`` frame's ``tasks``) once the daemon
    is idle: no turn, reflection or client but this probe (waits up to 60 s for the
    last reflections to finish, as they do after a turn)."""
    async with open_client(url=url, token=token) as c:
        m: dict = {"tasks": {}}
        with trio.move_on_after(60) as waited:
            while True:
                m = await c.request({"type": "metrics"}, "metrics.result")
                if m["clients"] == 1 and m["tasks"] == (await c.request(
                        {"type": "metrics"}, "metrics.result"))["tasks"]:
                    break
                await trio.sleep(1.0)
        if waited.cancelled_caught:
            print("soak: the daemon did not settle within 60 s; task counts are unsettled",
                  file=sys.stderr)
        return m["tasks"]


def render(result: dict, args: argparse.Namespace, command: str) -> tuple[str, bool]:
    """The RESULTS.md section and whether every check passed."""
    rows = ["| process | RSS after warm-up MiB | RSS at mid-run MiB | RSS at end MiB | growth | "
            "growth in the 2nd half | fds warm → mid → end | threads warm → mid → end | "
            "idle trio tasks before → after |",
            "|---|---:|---:|---:|---:|---:|---|---|---|"]
    why: list[str] = []  # every check that failed, said in the section
    if result["errors"] or result["restarts"]:
        why.append(f"{sum(result['errors'].values())} error(s), "
                   f"{result['restarts']} restart(s)")
    for name in ("root", "memory", "agent", "reflection", "backfill"):
        xs = result["samples"].get(name, [])
        warm = [s for t, s in xs if t >= min(WARMUP_S, args.minutes * 30)]
        if len(warm) < 2:
            rows.append(f"| {name} | – | – | – | – | – | – | – | – |")
            why.append(f"{name}: fewer than 2 samples after the warm-up")
            continue
        first, mid, last = warm[0], warm[len(warm) // 2], warm[-1]
        growth = last["rss_kib"] / first["rss_kib"] - 1
        late = last["rss_kib"] / mid["rss_kib"] - 1  # a plateau shows ≈ 0 here, a leak not
        if late > RSS_LATE_GROWTH_LIMIT:
            why.append(f"{name}: RSS grew {late * 100:.1f} % in the 2nd half")
        # A leak sets new highs; a pool (httpx's to the LLM) moves up and down with load.
        first_half = warm[: len(warm) // 2 + 1]
        for key in ("fds", "threads"):
            high, early = (max(s[key] for s in warm[len(warm) // 2:]),
                           max(s[key] for s in first_half))
            if high > early + FD_SLACK:
                why.append(f"{name}: {key} reached {high} in the 2nd half, first-half high "
                           f"{early} (+{FD_SLACK} allowed)")
        before, after = (t.get(name) for t in result["tasks"])
        if before is None or after is None or after - before > TASK_SLACK:
            why.append(f"{name}: idle trio tasks {before} → {after}")
        rows.append(f"| {name} | {first['rss_kib'] / 1024:.1f} | {mid['rss_kib'] / 1024:.1f} | "
                    f"{last['rss_kib'] / 1024:.1f} | {growth * 100:+.1f} % | "
                    f"{late * 100:+.1f} % | {first['fds']} → {mid['fds']} → {last['fds']} | "
                    f"{first['threads']} → {mid['threads']} → {last['threads']} | "
                    f"{before} → {after} |")
    ok = not why
    c = result["counts"]
    errors = ", ".join(f"{k} {v}" for k, v in result["errors"].items()) or "0"
    text = (f"{SECTION}\n\n{args.clients} clients for {args.minutes:g} min with "
            "reflection and backfill on: flat memory per process, no growing descriptors "
            "or threads, 0 errors. Pass: in the second half (steady state) RSS grows "
            f"≤ {RSS_LATE_GROWTH_LIMIT * 100:g} % and fds / threads stay within {FD_SLACK} of the "
            "first half's highest, per process; idle trio tasks the same before and after; "
            "0 errors, 0 restarts.\n\n"
            f"- Machine: {machine_line()}\n- Date: {utc_now()}\n- Command: `{command}`\n"
            f"- Scripted llama-server at {args.latency_ms:g} ms per completion; each client "
            "loops turn (+ note + recall every third round), reconnecting every "
            f"{args.reconnect_every} rounds; samples every {SAMPLE_S:g} s, warm-up "
            f"{min(WARMUP_S, args.minutes * 30):g} s\n\n" + "\n".join(rows) +
            f"\n\nTurns {c['turns']}, memory ops {c['memory_ops']}, errors: {errors}, actor "
            f"restarts {result['restarts']}, shutdown {result['shutdown_s'] or 0:.2f} s: "
            f"{'PASS' if ok else 'FAIL'}.\n" + (f"\nWhat failed: {'; '.join(why)}.\n" if why else ""))
    return text, ok


def main(argv: list[str] | None = None) -> int:
    """Run the soak and print (and unless ``--no-write``, record) its section."""
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--latency-ms", type=float, default=50.0)
    p.add_argument("--reconnect-every", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="10 clients, 1 minute, not recorded")
    p.add_argument("--write", action=argparse.BooleanOptionalAction, default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.clients, args.minutes = 10, 1.0
    write = args.write if args.write is not None else not args.quick
    t0 = time.perf_counter()
    result = trio.run(run, args.clients, args.minutes, args.latency_ms, args.reconnect_every)
    command = " ".join(["python -m bench.soak", *(argv if argv is not None else sys.argv[1:])])
    text, ok = render(result, args, command.strip())
    publish(SECTION, text, write)
    print(f"soak: done in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
