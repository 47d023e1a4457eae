"""Memory work per turn: context + render + persist (target, docs/architecture.md §10:
p99 ≤ 15 ms).

What one turn costs the memory side, measured on a real ``memory.sqlite`` with
``--notes`` notes (default 1,000, the default cap) and 20 profile facts:

* ``daemon``: ``BuildContext`` through the root to a real memory actor process
  (BM25 recall with recall bumps, gated profile, memory-index), rendering the three
  sections, and persisting the session (``SessionStore.save``) — the same calls the
  agent makes, from outside the agent.
* ``in-process`` (baseline, same run): the same three steps on a connection in this
  process, no IPC. The ratio is the price of the actor boundary.

Queries are drawn from the notes' own vocabulary, so every turn recalls.
Usage: ``python -m bench.memory_turn [--quick] [--notes N] [--turns N] [--no-write]``.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import trio

from actors import actor_spec
from actors.agent.sessions import Message, SessionStore
from actors.memory.messages import BuildContext
from actors.store.context import MemoryContext, build_context
from actors.store.tail import render_context
from actors.store.notes import MemoryStore
from actors.store.profile import ProfileStore
from actors.store.schema import open_database
from actors.store.stores import StoreSet
from bench._results import machine_line, percentile, publish, utc_now
from runtime import open_supervisor
from runtime.services.config import ActorBoot, Config

SECTION = "## Memory work per turn"
TARGET_P99_MS = 15.0
WORDS = ("python pytest lisbon coffee deploy staging docker rust trio websocket sqlite "
         "memory garden sister lyon piano marathon budget invoice travel tokyo recipe "
         "kubernetes backup laptop keyboard editor helix vim cat dog music jazz").split()


def populate(path: Path, notes: int, seed: int = 7) -> list[str]:
    """Create ``notes`` notes and 20 facts; return a list of query messages."""
    rnd = random.Random(seed)
    conn = open_database(str(path))
    store = MemoryStore(conn, max_entries=max(notes, 1000))
    profiles = ProfileStore(conn)
    for i in range(notes):
        words = rnd.sample(WORDS, 8)
        store.store(f"Note {i}: the user mentioned {' '.join(words)} on day {i % 365}.",
                    tags=[words[0]])
    for i in range(20):
        profiles.set(f"fact_{i}", f"value {i} {WORDS[i]}", pinned=i < 10,
                     keywords=None if i < 10 else [WORDS[i]])
    conn.close()
    return [f"what did I say about {rnd.choice(WORDS)} and {rnd.choice(WORDS)}?"
            for _ in range(200)]


def render(mem: MemoryContext) -> dict[str, str]:
    return render_context(mem)


def persist(store: SessionStore, state, text: str) -> None:
    state.messages.append(Message("user", text, int(time.time() * 1000)))
    state.messages = state.messages[-40:]
    store.save(state)


def run_in_process(db: Path, sessions: SessionStore, queries: list[str], turns: int) -> list[float]:
    conn = open_database(str(db))
    notes, profiles = MemoryStore(conn), ProfileStore(conn)
    state = sessions.create("bench-local")
    out = []
    for i in range(turns):
        q = queries[i % len(queries)]
        t0 = time.perf_counter()
        render(build_context(StoreSet.of(profiles, notes), q))
        persist(sessions, state, q)
        out.append((time.perf_counter() - t0) * 1000)
    conn.close()
    return out


async def run_daemon(state_dir: Path, sessions: SessionStore, queries: list[str],
                     turns: int) -> list[float]:
    boot = msgspec.msgpack.encode(ActorBoot(state_dir=str(state_dir), config=Config()))
    out = []
    async with open_supervisor([actor_spec("memory", config=boot)]) as sup:
        state = sessions.create("bench-daemon")
        for i in range(turns):
            q = queries[i % len(queries)]
            t0 = time.perf_counter()
            mem = await sup.request("memory", BuildContext(session="bench", user_message=q),
                                    MemoryContext)
            render(mem)
            persist(sessions, state, q)
            out.append((time.perf_counter() - t0) * 1000)
    return out


def main(argv: list[str] | None = None) -> int:
    """Run both variants interleaved in one process; print and record the table."""
    p = argparse.ArgumentParser(prog="python -m bench.memory_turn",
                                description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="200 turns, no RESULTS.md write")
    p.add_argument("--notes", type=int, default=1000)
    p.add_argument("--turns", type=int, default=None)
    p.add_argument("--write", action=argparse.BooleanOptionalAction, default=None)
    args = p.parse_args(argv)
    turns = args.turns or (200 if args.quick else 2000)
    write = args.write if args.write is not None else not args.quick
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        print(f"populating {args.notes} notes …", file=sys.stderr)
        queries = populate(state / "memory.sqlite", args.notes)
        sessions = SessionStore(str(state / "sessions.sqlite"))
        local = run_in_process(state / "memory.sqlite", sessions, queries, turns // 10)  # warm-up
        daemon = trio.run(run_daemon, state, sessions, queries, turns)
        local = run_in_process(state / "memory.sqlite", sessions, queries, turns)
        sessions.close()
    rows = []
    for name, xs in (("in-process (baseline)", local), ("through the memory actor", daemon)):
        rows.append((name, percentile(xs, 50), percentile(xs, 95), percentile(xs, 99)))
    ratio = rows[1][1] / rows[0][1]
    ok = rows[1][3] <= TARGET_P99_MS
    table = ["| path | p50 ms | p95 ms | p99 ms |", "|---|---:|---:|---:|"]
    table += [f"| {n} | {a:.2f} | {b:.2f} | {c:.2f} |" for n, a, b, c in rows]
    verdict = (f"p99 through the actor {rows[1][3]:.2f} ms vs target ≤ {TARGET_P99_MS:g} ms: "
               f"{'PASS' if ok else 'FAIL'}; p50 ratio actor / in-process {ratio:.2f}×.")
    command = " ".join(["python -m bench.memory_turn", *(argv if argv is not None else sys.argv[1:])])
    text = (f"{SECTION}\n\nTarget: memory work per turn (context + render + persist) "
            f"p99 ≤ {TARGET_P99_MS:g} ms.\n\n- Machine: {machine_line()}\n- Date: {utc_now()}\n"
            f"- Command: `{command.strip()}`\n- {args.notes} notes, 20 profile facts, {turns} turns "
            "each way\n\n" + "\n".join(table) + f"\n\n{verdict}\n")
    publish(SECTION, text, write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
