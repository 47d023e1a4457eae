"""Startup, shutdown and store throughput of ``atomic-agent serve`` (targets,
docs/architecture.md §10: ``serve`` ready (without the embedded LLM) ≤ 2 s; shutdown ≤ 3 s).

A state dir is seeded offline with ``--notes`` notes (default 1,000, the default note
cap) through ``MemoryStore`` with the default config: Markov-chain text from the LoCoMo
dev turns (``bench.recall.NoteWriter``), the WAL checkpointed. Every start below runs on
a fresh copy of it. The daemon is a real ``atomic-agent serve`` subprocess
(``tests.daemon.run_daemon``) with its default config (memory, agent, reflection and
backfill actors, hybrid recall with the local embedder); its LLM is the scripted
llama-server (``tests/fakes/llama_server.py``, started once), so no embedded LLM starts.

1. **Ready**, ``--reps`` × 3 starts (default 10 × 3; ``--quick`` 3 × 3): from spawning
   the process to its JSON ready line on stdout, and to the moment a websocket client
   holds its ``welcome`` (connect + ``hello``) — the target's figure. The daemon's own
   ``startupMs`` (measured inside ``trio.run``: token, actors, gateway) is shown beside.
   Baseline, interleaved start by start: a bare interpreter that imports the stack,
   ``python -c "import trio, msgspec, apsw"``, so the ratio shows what is ours.
2. **Shutdown**, the same starts, in turn, ``--reps`` each: from sending the
   ``shutdown`` frame (on the connected client), SIGTERM with that client still
   connected, or SIGTERM after it disconnected, to the process's exit (status 0). In
   order: stop accepting → agent, reflection, backfill stopped → memory checkpoints and
   closes → clients closed → exit.
3. **Store throughput** (no target: informational): ``--store-notes``
   distinct notes (default 1,000; ``--quick`` 200), each a ``memory.notes.store`` frame,
   from one client one after another, then from 8 clients at once (the notes split
   between them), each on a fresh daemon; notes per second and the client's latency per
   store. Baseline: ``MemoryStore.store`` of the same notes in process on a copy of the
   same file, one transaction per note (what the memory actor runs per request). The
   state is at the default cap (1,000 notes), so every store also evicts one note, in
   both paths; the daemon also casts every new note to the backfill actor, which embeds
   it in the background (niced) on the same 2 cores.

Usage: ``python -m bench.lifecycle [--quick] [--reps N] [--notes N] [--store-notes N]
[--write | --no-write]`` (``--quick``: 3 × 3 starts, 200 stored notes, no write).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import trio

from actors.store.stores import open_stores
from actors.store.schema import open_database, write_txn
from bench._results import machine_line, percentile, publish, utc_now
from bench.locomo import DATA
from bench.recall import NoteWriter, corpus
from runtime.services.config import Config
from runtime.shell.client import DaemonClient, open_client
from tests.daemon import Daemon, run_daemon
from tests.fakes.llama_server import open_fake_llama

SECTION = "## Startup, shutdown and store throughput"
TARGET_READY_S = 2.0
"""Target: ``serve`` ready (without the embedded LLM) ≤ 2 s."""
TARGET_SHUTDOWN_S = 3.0
"""Target: shutdown ≤ 3 s."""
CONCURRENT_CLIENTS = 8
WARMUP_NOTES = 20
BASELINE_CODE = "import trio, msgspec, apsw"
RULES = [{"grammar_contains": "reply", "response": '{"reply": "ok"}'}]
WHERE = (
    "Where the time goes (the daemon's logs, `<state>/logs/*.log`): spawn → ready is the "
    "root's interpreter start and imports — its own and, since the fork start "
    "(`runtime/kernel/_fork.py`), every actor's module too (trio, msgspec, structlog, httpx, apsw, "
    "numpy: about 1 s of CPU on one core, `python -X importtime`) — then the four children "
    "forked from it with their modules loaded, which open their files and answer the "
    "handshake (`startupMs`, inside `trio.run`). Before the fork start each actor was a "
    "fresh interpreter importing the same modules (~0.5 s of CPU each): four of them on "
    "2 cores kept ready above 2 s whatever their order (the \"actors spawned\" row measures "
    "that start in the same run, `ATOMIC_AGENT_FORK_START=0`). Restarts still spawn fresh "
    "interpreters. Shutdown: the actors stop within a fraction of a second, then the "
    "gateway closes each connection while its reader still runs, so the close handshake "
    "takes one round trip.")
STOPS = ("frame", "sigterm", "sigterm-idle")
"""How a start is stopped: the ``shutdown`` frame, SIGTERM with a client connected,
SIGTERM with none."""


def seed_state(state: Path, writer: NoteWriter, notes: int) -> int:
    """Create the state dir ``state`` whose ``memory.sqlite`` holds ``notes`` notes,
    stored through ``MemoryStore`` (default config: dedup on, so a near-duplicate note
    is replaced by another until the count is reached) in one transaction, the WAL
    checkpointed; return the note count."""
    state.mkdir(parents=True)
    conn = open_database(str(state / "memory.sqlite"))
    stores = open_stores(conn, Config().memory)
    with write_txn(conn):
        i = 0
        while stores.notes.count() < notes:
            stores.notes.store(writer.note(), session_id=f"seed-{i // 20}")
            i += 1
    count = stores.notes.count()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    conn.close()
    return count


def fresh_copy(template: Path, dest: Path) -> Path:
    """A copy of the seeded state dir ``template`` at ``dest`` (the daemon never ran
    there); return ``dest``."""
    shutil.copytree(template, dest)
    return dest


async def baseline_start_s() -> float:
    """Seconds for a bare interpreter to import trio, msgspec and apsw and exit."""
    t0 = time.perf_counter()
    await trio.run_process([sys.executable, "-c", BASELINE_CODE])
    return time.perf_counter() - t0


async def start_stop(state: Path, llm_url: str, how: str, env: dict | None = None
                     ) -> dict[str, float]:
    """Start ``serve`` on ``state`` (with ``env`` as its whole environment when given),
    connect a client, stop it by ``how`` (one of :data:`STOPS`); seconds spawn → ready
    line (``ready_s``), spawn → ``welcome`` (``welcome_s``), the daemon's own
    ``startupMs`` in seconds (``own_s``), and stop request → process exit (``stop_s``)."""
    t0 = time.perf_counter()
    async with run_daemon(state, llm_url=llm_url, env=env) as d:
        t_line = time.perf_counter()
        async with open_client(url=d.url, token=d.token) as c:
            t_welcome = time.perf_counter()
            await c.request({"type": "ping"}, "pong")
            if how != "sigterm-idle":
                t_stop, t_exit = await _stop(d, c if how == "frame" else None)
        if how == "sigterm-idle":
            t_stop, t_exit = await _stop(d, None)
    return {"ready_s": t_line - t0, "welcome_s": t_welcome - t0,
            "own_s": d.ready.get("startupMs", 0) / 1000, "stop_s": t_exit - t_stop}


async def _stop(d: Daemon, client: DaemonClient | None) -> tuple[float, float]:
    """Send ``client`` the ``shutdown`` frame (or, with None, SIGTERM to the daemon) and
    wait for the process to exit; (perf_counter at the request, at the exit)."""
    t_stop = time.perf_counter()
    if client is not None:
        await client.send({"type": "shutdown"})
    else:
        d.proc.send_signal(signal.SIGTERM)
    with trio.fail_after(60):
        await d.proc.wait()
    return t_stop, time.perf_counter()


async def run_lifecycle(template: Path, tmp: Path, llm_url: str, reps: int
                        ) -> tuple[list[float], dict[str, list[dict[str, float]]]]:
    """``reps`` starts for each way to stop of :data:`STOPS`, in turn, each after one
    baseline interpreter start and, every third start, one start with the actors spawned
    instead of forked (``ATOMIC_AGENT_FORK_START=0``, under ``"spawned"``: the start-up
    before ``runtime/kernel/_fork.py``, measured in the same run); (baseline seconds, runs by
    way to stop)."""
    base: list[float] = []
    runs: dict[str, list[dict[str, float]]] = {how: [] for how in (*STOPS, "spawned")}
    spawned_env = {**os.environ, "ATOMIC_AGENT_FORK_START": "0"}
    for i in range(len(STOPS) * reps):
        how = STOPS[i % len(STOPS)]
        base.append(await baseline_start_s())
        if i % len(STOPS) == 0:
            state = fresh_copy(template, tmp / f"spawned-{i}")
            runs["spawned"].append(await start_stop(state, llm_url, "sigterm", spawned_env))
        state = fresh_copy(template, tmp / f"start-{i}")
        runs[how].append(await start_stop(state, llm_url, how))
        print(f"lifecycle: start {i + 1}/{len(STOPS) * reps} ({how}): ready "
              f"{runs[how][-1]['welcome_s']:.2f} s, stop {runs[how][-1]['stop_s']:.2f} s",
              file=sys.stderr, flush=True)
    return base, runs


def store_in_process(state: Path, warmup: list[str], notes: list[str]
                     ) -> tuple[float, list[float]]:
    """``MemoryStore.store`` of ``notes`` on ``state``'s file, one transaction each,
    after ``warmup``; (seconds for ``notes``, ms per store)."""
    conn = open_database(str(state / "memory.sqlite"))
    store = open_stores(conn, Config().memory).notes
    for text in warmup:
        store.store(text)
    ms: list[float] = []
    t0 = time.perf_counter()
    for text in notes:
        t = time.perf_counter()
        store.store(text)
        ms.append((time.perf_counter() - t) * 1000)
    seconds = time.perf_counter() - t0
    conn.close()
    return seconds, ms


async def store_through_daemon(state: Path, llm_url: str, warmup: list[str], notes: list[str],
                               clients: int) -> tuple[float, list[float], int]:
    """``memory.notes.store`` of ``notes`` through a fresh daemon on ``state`` from
    ``clients`` connected clients at once (the notes split round robin), after
    ``warmup`` from one client; (seconds, ms per store as the client saw it, errors)."""
    ms: list[float] = []
    errors = 0

    async def one(url: str, token: str, part: list[str], go: trio.Event) -> None:
        nonlocal errors
        async with open_client(url=url, token=token) as c:
            await go.wait()
            for text in part:
                t = time.perf_counter()
                try:
                    await c.memory("memory.notes.store", {"content": text})
                except Exception:  # noqa: BLE001 - counted, the table shows it
                    errors += 1
                    continue
                ms.append((time.perf_counter() - t) * 1000)

    async with run_daemon(state, llm_url=llm_url) as d:
        async with open_client(url=d.url, token=d.token) as c:
            for text in warmup:
                await c.memory("memory.notes.store", {"content": text})
        go = trio.Event()
        async with trio.open_nursery() as nursery:
            for k in range(clients):
                nursery.start_soon(one, d.url, d.token, notes[k::clients], go)
            await trio.sleep(0.3)  # let every client connect
            t0 = time.perf_counter()
            go.set()
        seconds = time.perf_counter() - t0
    return seconds, ms, errors


async def run(args: argparse.Namespace) -> dict:
    """Seed, then the starts and stops, then the store throughput; every figure."""
    texts, speakers, _ = corpus(args.data)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        template = tmp / "template"
        t0 = time.perf_counter()
        seeded = seed_state(template, NoteWriter(texts, speakers), args.notes)
        print(f"lifecycle: {seeded:,} notes seeded in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr, flush=True)
        fresh = NoteWriter(texts, speakers, seed=11)
        warmup = [fresh.note() for _ in range(WARMUP_NOTES)]
        notes = [f"{fresh.note()} (#{i})" for i in range(args.store_notes)]
        async with open_fake_llama(tmp / "fake", RULES) as fake:
            base, runs = await run_lifecycle(template, tmp, fake.url, args.reps)
            store: dict[str, tuple[float, list[float], int]] = {}
            for clients in (1, CONCURRENT_CLIENTS):
                state = fresh_copy(template, tmp / f"store-{clients}")
                store[f"daemon-{clients}"] = await store_through_daemon(
                    state, fake.url, warmup, notes, clients)
                print(f"lifecycle: {clients} client(s) stored {len(notes)} notes in "
                      f"{store[f'daemon-{clients}'][0]:.1f} s", file=sys.stderr, flush=True)
            state = fresh_copy(template, tmp / "store-local")
            seconds, ms = await trio.to_thread.run_sync(store_in_process, state, warmup, notes)
            store["local"] = (seconds, ms, 0)
    return {"seeded": seeded, "base": base, "runs": runs, "store": store,
            "store_notes": len(notes)}


def _s(xs: list[float]) -> tuple[float, float]:
    return percentile(xs, 50), max(xs)


def render(res: dict, args: argparse.Namespace, command: str) -> tuple[str, bool]:
    """The RESULTS.md section and whether both targets passed."""
    runs = res["runs"]
    starts = [r for how in STOPS for r in runs[how]]
    b50, bmax = _s(res["base"])
    rows = ["| measure | runs | p50 s | max s | baseline p50 s | ratio p50 | target | result |",
            "|---|---:|---:|---:|---:|---:|---:|---|"]
    ok = True
    base_cell = f"{b50:.3f}"

    def row(name: str, xs: list[float], target: float | None, baseline: bool) -> None:
        nonlocal ok
        p50, mx = _s(xs)
        verdict = "—"
        if target is not None:
            met = mx <= target  # every start / stop must make it, not just the median
            ok &= met
            verdict = "PASS" if met else "FAIL"
        rows.append(f"| {name} | {len(xs)} | {p50:.3f} | {mx:.3f} | "
                    f"{base_cell if baseline else '—'} | "
                    f"{f'{p50 / b50:.1f}×' if baseline else '—'} | "
                    f"{f'≤ {target:g} s (max)' if target else '—'} | {verdict} |")

    rows.append(f"| baseline: `python -c \"{BASELINE_CODE}\"` | {len(res['base'])} | "
                f"{b50:.3f} | {bmax:.3f} | — | — | — | — |")
    row("`serve` spawn → ready line on stdout", [r["ready_s"] for r in starts], None, True)
    row("`serve` spawn → client holds `welcome` (ready)", [r["welcome_s"] for r in starts],
        TARGET_READY_S, True)
    row("daemon's own `startupMs` (inside `trio.run`: token, actors, gateway)",
        [r["own_s"] for r in starts], None, False)
    if runs.get("spawned"):
        row("the same, actors spawned, not forked (`ATOMIC_AGENT_FORK_START=0`): spawn → "
            "`welcome`", [r["welcome_s"] for r in runs["spawned"]], None, True)
    row("`shutdown` frame (client connected) → process exit",
        [r["stop_s"] for r in runs["frame"]], TARGET_SHUTDOWN_S, False)
    row("SIGTERM (client connected) → process exit", [r["stop_s"] for r in runs["sigterm"]],
        TARGET_SHUTDOWN_S, False)
    row("SIGTERM (no client connected) → process exit",
        [r["stop_s"] for r in runs["sigterm-idle"]], TARGET_SHUTDOWN_S, False)

    st = res["store"]
    local_s, local_ms, _ = st["local"]
    n = res["store_notes"]
    local_rate = n / local_s
    srows = ["| path | clients | notes | seconds | notes/s | p50 ms per store | p99 ms per store | "
             "errors | in-process notes/s (baseline) | daemon / in-process |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
             f"| `MemoryStore.store` in process (baseline) | — | {n:,} | {local_s:.2f} | "
             f"{local_rate:.0f} | {percentile(local_ms, 50):.2f} | {percentile(local_ms, 99):.2f} | "
             f"0 | {local_rate:.0f} | 1.00× |"]
    for clients in (1, CONCURRENT_CLIENTS):
        seconds, ms, errors = st[f"daemon-{clients}"]
        rate = len(ms) / seconds
        srows.append(f"| `memory.notes.store` through the daemon | {clients} | {n:,} | "
                     f"{seconds:.2f} | {rate:.0f} | {percentile(ms, 50):.2f} | "
                     f"{percentile(ms, 99):.2f} | {errors} | {local_rate:.0f} | "
                     f"{rate / local_rate:.2f}× |")
    cap = Config().memory.notes.max_entries
    cap_note = (f"at the default cap of {cap:,} notes, so each store also evicts one in both "
                "paths" if res["seeded"] >= cap else f"below the default cap of {cap:,} notes")
    ready_p50, ready_max = _s([r["welcome_s"] for r in starts])
    stops = [r["stop_s"] for r in starts]
    text = (f"{SECTION}\n\nTarget: `serve` ready (without the embedded LLM) ≤ "
            f"{TARGET_READY_S:g} s; shutdown ≤ {TARGET_SHUTDOWN_S:g} s. Store throughput "
            "has no target there: it is reported, not judged.\n\n"
            f"- Machine: {machine_line()}\n- Date: {utc_now()}\n- Command: `{command}`\n"
            f"- State: a fresh copy per start of a state dir seeded offline with "
            f"{res['seeded']:,} notes (Markov text from the LoCoMo dev turns) through "
            "`MemoryStore`; default config (reflection, backfill, hybrid recall with the local "
            "embedder); LLM: the scripted llama-server, so no embedded LLM starts; starts "
            "stopped in turn by the `shutdown` frame, by SIGTERM with the client connected and "
            "by SIGTERM after it left, each after one baseline interpreter start\n\n"
            + "\n".join(rows) +
            f"\n\n{WHERE}\n\nReady p50 {ready_p50:.2f} s, max {ready_max:.2f} s vs ≤ {TARGET_READY_S:g} s; "
            f"shutdown p50 {percentile(stops, 50):.2f} s, max {max(stops):.2f} s vs ≤ "
            f"{TARGET_SHUTDOWN_S:g} s (every run must make it: the verdicts are on the max)."
            + (f" Forked / spawned actors, ready p50: {ready_p50:.2f} / "
               f"{percentile([r['welcome_s'] for r in runs['spawned']], 50):.2f} s "
               f"({ready_p50 / percentile([r['welcome_s'] for r in runs['spawned']], 50):.2f}×)."
               if runs.get("spawned") else "") + "\n\n"
            f"Store throughput (informational; a fresh daemon per row, {cap_note}; every new "
            "note is also cast to the backfill actor, which embeds it in the background):\n\n"
            + "\n".join(srows) + "\n")
    return text, ok


def main(argv: list[str] | None = None) -> int:
    """Measure, print the section and (unless ``--quick``/``--no-write``) record it;
    exit 1 when a target is missed."""
    p = argparse.ArgumentParser(prog="python -m bench.lifecycle",
                                description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="3 × 3 starts, 200 stored notes, no write")
    p.add_argument("--reps", type=int, default=None,
                   help="starts per way to stop (3 ways; default 10; --quick 3)")
    p.add_argument("--notes", type=int, default=1000, help="notes seeded in the state (1,000)")
    p.add_argument("--store-notes", type=int, default=None,
                   help="notes stored per throughput row (default 1,000; --quick 200)")
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--write", action=argparse.BooleanOptionalAction, default=None)
    args = p.parse_args(argv)
    args.reps = args.reps or (3 if args.quick else 10)
    args.store_notes = args.store_notes or (200 if args.quick else 1000)
    if args.reps < 1 or args.notes < 1 or args.store_notes < CONCURRENT_CLIENTS:
        p.error(f"--reps and --notes must be ≥ 1, --store-notes ≥ {CONCURRENT_CLIENTS}")
    write = args.write if args.write is not None else not args.quick
    res = trio.run(run, args)
    command = " ".join(["python -m bench.lifecycle", *(argv if argv is not None else sys.argv[1:])])
    text, ok = render(res, args, command.strip())
    publish(SECTION, text, write)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
