"""Load: N concurrent websocket clients × M turns against a scripted LLM of fixed latency
(target, docs/architecture.md §10: 100 concurrent websocket clients × 20 turns, 0 errors,
0 lost writes).

One real daemon (``atomic-agent serve``, default config: reflection, backfill, hybrid
recall on) and the scripted llama-server (``tests/fakes/llama_server.py``), which answers
every completion after ``--latency-ms`` (default 50 ms) with any number of requests in
parallel — so what grows with the load is the daemon's own cost, not the LLM's. For each
level of ``--clients`` (default 10, 50, 100, 200) every client connects, then runs
``--turns`` turns (default 20) back to back, storing one note after each turn (a write it
must get back later).

Per level: turns per second; latency of a turn as the client sees it (``say`` →
``turn.finished``) and the daemon's own share of it (client time − the turn's
``llmMs``, the time its LLM calls took); errors; CPU seconds and RSS of each process
(root, the four actors, the scripted LLM — they all share the 2 cores). After the level,
every acknowledged note is read back by id and every client's session must hold its
turns: anything missing is a **lost write**.

Baseline (same run): a single client running the same turns alone; the ratio is the
daemon's own p50 at the level / the single client's. Pass: at 100 clients,
0 errors and 0 lost writes. Where throughput stops growing with more clients is the
saturation point; the busiest process there is named.

Profile (``--profile``, on by default in full mode): the 100-client level is run once
more with py-spy sampling every process (:mod:`bench.profile`); the section then shows
each process's CPU per turn, its costliest functions, and the CPU ceiling that follows.

Usage: ``python -m bench.load [--quick] [--clients 10,50,100,200] [--turns 20]
[--no-write] [--no-profile]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import trio

from bench._results import MANY_CLIENTS, machine_line, percentile, publish, utc_now
from bench.profile import Profile, profiling, summarize
from bench.reflection import cpu_seconds
from bench.soak import process_names, sample
from runtime.shell.client import ClientError, open_client
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama

SECTION = "## Load"
TARGET_CLIENTS = 100
NOTES_CAP = 100_000
"""``memory.notes.maxEntries`` for the run: above every note the levels write."""
RULES = [{"grammar_contains": "reply", "response": '{"reply": "ok"}'}]
WORDS = "coffee lisbon pytest piano travel sister editor garden budget docker".split()


class Level:
    """What one load level measured."""

    def __init__(self, clients: int) -> None:
        self.clients = clients
        self.profiles: dict[str, Profile] = {}
        self.client_ms: list[float] = []
        self.own_ms: list[float] = []
        self.errors: Counter = Counter()
        self.notes: dict[int, str] = {}
        self.sessions: dict[str, int] = {}
        self.wall_s = 0.0
        self.cpu: dict[str, float] = {}
        self.rss_mib: dict[str, float] = {}
        self.lost = 0


async def client(url: str, token: str, idx: int, turns: int, level: Level,
                 start: trio.Event) -> None:
    """Connect, wait for the start, run ``turns`` turns each followed by a note."""
    try:
        async with open_client(url=url, token=token) as c:
            done = 0
            await start.wait()
            for t in range(turns):
                text = f"client {idx} turn {t}: {WORDS[(idx + t) % 10]} and {WORDS[t % 10]}"
                t0 = time.perf_counter()
                try:
                    with trio.fail_after(120):
                        finished: dict = {}
                        async for frame in c.say(text):
                            finished = frame
                        if finished.get("reason") != "reply":
                            level.errors[f"turn:{finished.get('reason') or finished.get('code')}"] += 1
                            continue
                        ms = (time.perf_counter() - t0) * 1000
                        level.client_ms.append(ms)
                        level.own_ms.append(ms - finished.get("timings", {}).get("llmMs", 0.0))
                        done += 1
                        note = await c.memory("memory.notes.store",
                                              {"content": f"load note {idx}/{t}: {text}"})
                        # What the daemon acknowledged: a near-duplicate is merged into
                        # an existing note (same id, its content), by design.
                        level.notes[note["id"]] = note["content"]
                except ClientError as exc:
                    level.errors[exc.code] += 1
                except trio.TooSlowError:
                    level.errors["timeout"] += 1
            level.sessions[c.session] = done
    except ClientError as exc:
        level.errors[f"connect:{exc.code}"] += 1


async def verify(url: str, token: str, level: Level) -> None:
    """Count acknowledged notes and turns that are not there any more (lost writes)."""
    async with open_client(url=url, token=token) as c:
        for note_id, text in level.notes.items():
            got = await c.memory("memory.notes.recall", {"id": note_id})
            level.lost += not got or got[0]["content"] != text
        listed = await c.request({"type": "sessions", "limit": 100_000}, "sessions.result")
        turns = {s["id"]: s["turns"] for s in listed["data"]}
        level.lost += sum(max(0, n - turns.get(sid, 0)) for sid, n in level.sessions.items())


async def run_level(url: str, token: str, root: int, fake_pid: int, clients: int,
                    turns: int, profile_pids: dict[str, int] | None = None) -> Level:
    """One level: connect every client, start them together, measure, verify. With
    ``profile_pids``, py-spy samples those processes while the turns run (not the
    connecting or the verification); the profiles land in ``level.profiles``."""
    level = Level(clients)
    start = trio.Event()
    with ExitStack() as stack:
        async with trio.open_nursery() as nursery:
            for i in range(clients):
                nursery.start_soon(client, url, token, i, turns, level, start)
            await trio.sleep(min(5.0, 0.05 * clients))  # let them connect
            if profile_pids:
                level.profiles = stack.enter_context(profiling(profile_pids))
            cpu0 = cpu_seconds(root, fake_pid)
            t0 = time.perf_counter()
            start.set()
        level.wall_s = time.perf_counter() - t0
    cpu1 = cpu_seconds(root, fake_pid)
    level.cpu = {k: v - cpu0.get(k, 0.0) for k, v in cpu1.items()}
    for pid, name in process_names(root).items():
        got = sample(pid)
        if got:
            level.rss_mib[name] = got["rss_kib"] / 1024
    await verify(url, token, level)
    return level


async def run(levels: list[int], turns: int, latency_ms: float, profile: bool = False
              ) -> tuple[Level, list[Level], tuple[Level, dict[str, Profile]] | None]:
    """The baseline (1 client), every level on one daemon, and with ``profile`` one more
    run of the :data:`TARGET_CLIENTS` level under py-spy (:mod:`bench.profile`) — a
    separate run, so the sampling does not touch the measured levels."""
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        state = tmp / "state"
        state.mkdir()
        # The note cap (default 1,000) would evict the oldest notes by design; raised so
        # that every acknowledged note must still be there.
        (state / "config.json").write_text(json.dumps(
            {"memory": {"notes": {"maxEntries": NOTES_CAP}}, **MANY_CLIENTS}))
        async with open_fake_llama(tmp / "fake", RULES, latency_ms=latency_ms) as fake:
            async with run_daemon(state, llm_url=fake.url) as d:
                await run_level(d.url, d.token, d.proc.pid, fake.pid, 2, 3)  # warm-up
                base = await run_level(d.url, d.token, d.proc.pid, fake.pid, 1, turns)
                out = []
                for n in levels:
                    print(f"load: {n} clients × {turns} turns …", file=sys.stderr, flush=True)
                    out.append(await run_level(d.url, d.token, d.proc.pid, fake.pid, n, turns))
                profiled = None
                if profile:
                    print(f"load: {TARGET_CLIENTS} clients again, under py-spy …",
                          file=sys.stderr, flush=True)
                    pids = {name: pid for pid, name in process_names(d.proc.pid).items()}
                    again = await run_level(d.url, d.token, d.proc.pid, fake.pid,
                                            TARGET_CLIENTS, turns, profile_pids=pids)
                    profiled = (again, again.profiles)
    return base, out, profiled


def render(base: Level, levels: list[Level], args: argparse.Namespace, command: str,
           profiled: tuple[Level, dict[str, Profile]] | None = None) -> tuple[str, bool]:
    """The RESULTS.md section and whether the load target passed; with
    ``profiled`` (the profiled repeat of the target level), where its CPU went."""
    b50 = percentile(base.own_ms, 50) if base.own_ms else float("nan")
    rows = ["| clients | turns/s | client p50 ms | client p99 ms | own p50 ms | own p99 ms | "
            "own p50 / 1 client | errors | lost writes | CPU s: root / memory / agent / "
            "reflection / backfill / LLM | busiest (cores) |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    names = ("root", "memory", "agent", "reflection", "backfill", "scripted LLM")
    ok, target_seen, prev_tps, saturation = True, False, 0.0, None
    for lv in [base, *levels]:
        turns_done = len(lv.client_ms)
        tps = turns_done / lv.wall_s if lv.wall_s else 0.0
        errors = sum(lv.errors.values())
        busiest = max(names, key=lambda n: lv.cpu.get(n, 0.0))
        cores = lv.cpu.get(busiest, 0.0) / lv.wall_s if lv.wall_s else 0.0
        if lv is not base and saturation is None and prev_tps and tps < prev_tps * 1.1:
            saturation = (lv.clients, busiest, cores, sum(lv.cpu.values()) / lv.wall_s)
        prev_tps = tps if lv is not base else prev_tps
        own50 = percentile(lv.own_ms, 50) if lv.own_ms else float("nan")
        rows.append(
            f"| {lv.clients} | {tps:.1f} | {percentile(lv.client_ms, 50) if lv.client_ms else 0:.1f} | "
            f"{percentile(lv.client_ms, 99) if lv.client_ms else 0:.1f} | {own50:.1f} | "
            f"{percentile(lv.own_ms, 99) if lv.own_ms else 0:.1f} | {own50 / b50:.2f}× | "
            f"{errors} | {lv.lost} | "
            + " / ".join(f"{lv.cpu.get(n, 0.0):.1f}" for n in names)
            + f" | {busiest} ({cores:.2f}) |")
        if lv.clients == TARGET_CLIENTS:
            target_seen = True
            ok &= errors == 0 and lv.lost == 0
    ok &= target_seen
    errs = sum((lv.errors for lv in levels), Counter())  # summed over the levels
    sat = ("throughput grew with every level (no saturation point reached)" if saturation is None
           else f"throughput stops growing at {saturation[0]} clients: the busiest process is "
                f"{saturation[1]} at {saturation[2]:.2f} cores, all processes together "
                f"{saturation[3]:.2f} of the machine's 2 cores")
    text = (f"{SECTION}\n\nTarget: {TARGET_CLIENTS} concurrent websocket clients × "
            f"{args.turns} turns, 0 errors, 0 lost writes.\n\n"
            f"- Machine: {machine_line()}\n- Date: {utc_now()}\n- Command: `{command}`\n"
            f"- Scripted llama-server at {args.latency_ms:g} ms per completion, unlimited "
            "parallel requests; every turn followed by a note write (note cap raised to "
            f"{NOTES_CAP:,}, so none is evicted); `own` = the client's "
            "time − the turn's `llmMs`; baseline = 1 client alone, same turns, same run\n\n"
            + "\n".join(rows) +
            f"\n\n{TARGET_CLIENTS} clients: "
            f"{'PASS' if ok else ('FAIL' if target_seen else 'not run')}"
            f"{' (errors: ' + ', '.join(f'{k} {v}' for k, v in errs.items()) + ')' if errs else ''}."
            f" Saturation: {sat}.\n")
    if profiled is not None:
        text += "\n" + profile_text(*profiled)
    return text, ok


def profile_text(level: Level, profiles: dict[str, Profile]) -> str:
    """The profile subsection: per-process CPU per turn and its hottest code, plus the
    CPU ceiling that follows from it (2 cores / CPU ms per turn)."""
    turns = len(level.client_ms)
    names = {"scripted LLM": "scripted LLM"}
    cpu = {names.get(k, k): v for k, v in level.cpu.items()}
    total_ms = 1000 * sum(cpu.values()) / max(1, turns)
    cores = len(os.sched_getaffinity(0))
    tps = turns / level.wall_s if level.wall_s else 0.0
    ceiling = 1000 * cores / total_ms if total_ms else 0.0
    verdict = bottleneck(cpu, level.wall_s, tps, ceiling)
    return (f"### Where the CPU goes at {level.clients} clients (py-spy, "
            f"{turns} turns run again under the profiler)\n\n"
            + summarize(profiles, cpu, turns) +
            f"\n\nAll processes together (scripted LLM included) spend {total_ms:.1f} ms of CPU "
            f"per turn, so {cores} cores cannot run more than {ceiling:.0f} turns/s; this "
            f"run made {tps:.1f} turns/s ({100 * tps / ceiling if ceiling else 0:.0f} % of that "
            f"ceiling). {verdict}\n")


def bottleneck(cpu: dict[str, float], wall_s: float, tps: float, ceiling: float) -> str:
    """One sentence naming what bounds throughput: one process near a full core, the
    machine's CPU as a whole, or neither (waiting, or other load on the machine)."""
    name, busiest = max(cpu.items(), key=lambda kv: kv[1]) if cpu else ("", 0.0)
    cores = busiest / wall_s if wall_s else 0.0
    if cores >= 0.9:
        return (f"Throughput is bound by one process: {name} uses {cores:.2f} of a core "
                "(a Python process runs on one core at a time).")
    if ceiling and tps >= 0.75 * ceiling:
        return ("Throughput is bound by the machine's CPU as a whole, shared by all the "
                f"processes: the busiest, {name}, uses only {cores:.2f} of a core.")
    return (f"Throughput is below the CPU ceiling (busiest process {name} at {cores:.2f} "
            f"of a core; load average {os.getloadavg()[0]:.2f}): the rest of the time is "
            "spent waiting, or other work on the machine took the cores.")


def main(argv: list[str] | None = None) -> int:
    """Run the levels and print (and unless ``--no-write``/``--quick``, record) them."""
    p = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.split("\n")[0])
    p.add_argument("--clients", default="10,50,100,200",
                   help="comma-separated client counts (default 10,50,100,200)")
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--latency-ms", type=float, default=50.0)
    p.add_argument("--quick", action="store_true", help="10 and 100 clients × 5 turns, no write")
    p.add_argument("--write", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--profile", action=argparse.BooleanOptionalAction, default=None,
                   help=f"run {TARGET_CLIENTS} clients once more under py-spy and show where "
                        "the CPU goes (default: on, off with --quick)")
    args = p.parse_args(argv)
    try:
        levels = [int(x) for x in args.clients.split(",") if x.strip()]
    except ValueError:
        p.error(f"--clients: a comma-separated list of integers, got {args.clients!r}")
    if args.quick:
        levels, args.turns = [10, TARGET_CLIENTS], 5
    write = args.write if args.write is not None else not args.quick
    profile = args.profile if args.profile is not None else not args.quick
    base, results, profiled = trio.run(run, levels, args.turns, args.latency_ms, profile)
    command = " ".join(["python -m bench.load", *(argv if argv is not None else sys.argv[1:])])
    text, ok = render(base, results, args, command.strip(), profiled)
    publish(SECTION, text, write)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
