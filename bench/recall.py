"""Recall latency at 1,000 and 100,000 notes.

Targets: recall at 1,000 notes p99 ≤ 5 ms (BM25); at 100,000 notes (raised cap)
p95 ≤ 25 ms (BM25).

Notes are realistic, varied text: a word-bigram Markov chain trained on every dialog
turn of LoCoMo dev (``bench/data/locomo-dev.json``, CC BY-NC 4.0) writes
"Speaker: 6 to 45 words" notes (speakers: the LoCoMo names plus 120 others), 20
notes per session. They are inserted with one ``INSERT`` per note in one transaction
(the FTS triggers index them exactly as ``MemoryStore.store`` would; ``store`` itself is
not under test here). Queries are the LoCoMo questions of categories 1–4, cycled.

Per size, on the same WAL file, interleaved query by query after a warm-up:

* ``raw FTS5`` (baseline): ``SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?
  ORDER BY rank LIMIT k`` with the same MATCH expression recall builds;
* ``MemoryStore.recall(q, k, bump=False)``: query building, BM25 pool, coverage,
  session context, row fetch;
* ``MemoryStore.recall(q, k)``: the same plus the recall-count bump (a write
  transaction), as the ``memory.notes.recall`` tool runs it.

At 1,000 notes also through the daemon: a real memory actor process started by
``runtime.open_supervisor``, timed around ``sup.request``, interleaved:
``ops.NotesRecall(query=…, k=5)`` (the tool's path: recall on the actor's read
connection, the recall counters bumped after the reply), ``BuildContext`` (recall k=3
plus gated profile, memory-index and lessons/procedures recall as configured by
default) and, as the floor of the actor path (IPC, decoding, dispatch),
``memory.notes.recall`` of one note by id.

Usage: ``python -m bench.recall [--quick]`` (``--quick``: fewer queries, 20,000 instead
of 100,000 notes, no ``bench/RESULTS.md`` write).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import msgspec
import trio

from actors import actor_spec
from actors.store.context import MemoryContext
from actors.memory import ops
from actors.memory.client import actor_memory
from actors.memory.messages import BuildContext
from actors.store.notes import MemoryStore
from actors.store.recall import build_recall_query
from actors.store.schema import open_database
from bench._results import machine_line, percentile, publish, utc_now
from bench.locomo import CATEGORIES, DATA
from runtime import open_supervisor
from runtime.services.config import ActorBoot, Config

SECTION = "## Recall"
K = 5
TARGET_P99_1K_MS = 5.0
TARGET_P95_100K_MS = 25.0
HOW = (
    "How recall gets there (`actors/store/recall.py`): the BM25 pool is `ORDER BY bm25() "
    "LIMIT n` on `memories_fts` (SQLite's top-n sorter; FTS5's `ORDER BY rank` sorts every "
    "hit) and `memories` is joined for those n rows only; from 20,000 notes on, words held "
    "by more than 5 % of the notes only score the notes that the rarer words pooled (their "
    "exact `bm25()` share is added in Python, Lucene's CommonTermsQuery idea), which is why "
    "recall beats the raw query at 100,000 notes. The previous recall joined and sorted "
    "every hit. Through the daemon, the actor path alone (a note by id) is the floor to "
    "subtract: recall there = in-process recall without the bump + that floor + the two "
    "processes sharing 2 cores. The memory actor reads on a second connection on its trio "
    "thread (no worker-thread hop) and bumps recall counters after the reply: p99 6.93 → "
    "5.86 ms. What is left of the floor is the Python/trio envelope path itself (a lookup "
    "by id spends 0.07 ms in SQLite of its ~1 ms round trip; cProfile of the actor: four "
    "scheduler passes, socket send/recv and msgpack per request), which is the IPC round "
    "trip's cost (\"IPC round trip\" above).")
_SQL_RAW = "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ? ORDER BY rank LIMIT ?"
_SQL_INSERT = (
    "INSERT INTO memories (content, content_key, tags, source, scope, session_id,"
    " created_at, updated_at) VALUES (?, ?, ?, 'agent', 'all', ?, ?, ?)"
)


def corpus(path: Path) -> tuple[list[str], list[str], list[str]]:
    """Return (turn texts, speaker names, category 1–4 questions) of LoCoMo dev."""
    convs = json.loads(path.read_text(encoding="utf-8"))
    texts, speakers, questions = [], set(), []
    for conv in convs:
        for key, turns in conv["conversation"].items():
            if re.fullmatch(r"session_\d+", key) and isinstance(turns, list):
                for turn in turns:
                    texts.append(turn["text"])
                    speakers.add(turn["speaker"])
        questions += [str(q["question"]) for q in conv["qa"] if q.get("category") in CATEGORIES]
    return texts, sorted(speakers), questions


class NoteWriter:
    """Word-bigram Markov chain over the turns; :meth:`note` writes one note."""

    def __init__(self, texts: list[str], speakers: list[str], seed: int = 7) -> None:
        self.rnd = random.Random(seed)
        self.chain: dict[str | None, list[str | None]] = defaultdict(list)
        for text in texts:
            words = text.split()
            for a, b in zip([None, *words], [*words, None]):
                self.chain[a].append(b)
        extra = "Alex Sam Kim Lee Noor Ivan Maya Omar Lena Tom Yuki Ravi Ana Ben Chen Dara"
        extra += " Eli Fay Gus Hana"
        self.names = speakers + [f"{n}{i}" for n in extra.split() for i in range(6)]

    def note(self) -> str:
        rnd, words, word = self.rnd, [], None
        length = rnd.randint(6, 45)
        while len(words) < length:
            word = rnd.choice(self.chain[word])
            if word is None:
                continue
            words.append(word)
        return f"{rnd.choice(self.names)}: {' '.join(words)}"


def populate(path: Path, writer: NoteWriter, notes: int, start: int = 0) -> None:
    """Create ``memory.sqlite`` at ``path`` with ``notes`` notes, 20 per session (or,
    with ``start``, add notes number ``start`` … ``start + notes - 1`` to it: sessions
    and timestamps continue where the previous call stopped)."""
    conn = open_database(str(path))
    with conn:
        conn.executemany(_SQL_INSERT, (
            (writer.note(), "", "[]", f"bench-{i // 20}", 1_700_000_000_000 + i,
             1_700_000_000_000 + i) for i in range(start, start + notes)))
    conn.close()


def run_local(path: Path, notes: int, questions: list[str], n: int) -> dict[str, list[float]]:
    """Interleave raw FTS5, recall and recall+bump over ``n`` questions; return ms."""
    conn = open_database(str(path))
    store = MemoryStore(conn, max_entries=max(notes, 1000))
    out: dict[str, list[float]] = defaultdict(list)
    for i in range(n + n // 10):
        q = questions[i % len(questions)]
        rq = build_recall_query(q)
        t0 = time.perf_counter()
        conn.execute(_SQL_RAW, (rq.match, K)).fetchall()
        t1 = time.perf_counter()
        store.recall(q, k=K, bump=False)
        t2 = time.perf_counter()
        store.recall(q, k=K)
        t3 = time.perf_counter()
        if i >= n // 10:  # the first tenth is warm-up
            out["raw"].append((t1 - t0) * 1000)
            out["recall"].append((t2 - t1) * 1000)
            out["recall+bump"].append((t3 - t2) * 1000)
    conn.close()
    return out


async def run_daemon(state_dir: Path, questions: list[str], n: int) -> dict[str, list[float]]:
    """Time the recall tool and ``BuildContext`` through a real memory actor; ms."""
    cfg = Config()
    cfg.memory.embeddings.enabled = False  # the BM25 target (hybrid: bench/hybrid.py)
    boot = msgspec.msgpack.encode(ActorBoot(state_dir=str(state_dir), config=cfg))
    async with open_supervisor([actor_spec("memory", config=boot)]) as sup:
        return await time_actor_reads(sup, questions, n)


async def time_actor_reads(sup: Any, questions: list[str], n: int, k: int = K,
                           again: bool = False) -> dict[str, list[float]]:
    """Time ``n`` rounds (after ``n // 10`` of warm-up) of ``memory.notes.recall`` (k),
    ``BuildContext`` and a recall by id (the actor path's floor) through the memory
    actor of ``sup``; ms per request under ``tool`` / ``context`` / ``by_id``. With
    ``again``, the same ``memory.notes.recall`` is sent a second time right after the
    first (``tool_again``: a server-embedded query vector is then in hand)."""
    out: dict[str, list[float]] = defaultdict(list)
    memory = actor_memory(sup.request)
    for i in range(n + n // 10):
        q = questions[i % len(questions)]
        t0 = time.perf_counter()
        await memory.run(ops.NotesRecall(query=q, k=k))
        if again:
            ta = time.perf_counter()
            await memory.run(ops.NotesRecall(query=q, k=k))
            if i >= n // 10:
                out["tool_again"].append((time.perf_counter() - ta) * 1000)
            t0 += time.perf_counter() - ta  # tool times the first request only
        t1 = time.perf_counter()
        await sup.request("memory", BuildContext(session="b", user_message=q), MemoryContext)
        t2 = time.perf_counter()
        await memory.run(ops.NotesRecall(id=1 + i % 1000))
        t3 = time.perf_counter()
        if i >= n // 10:
            out["tool"].append((t1 - t0) * 1000)
            out["context"].append((t2 - t1) * 1000)
            out["by_id"].append((t3 - t2) * 1000)
    return out


def _row(size: int, name: str, xs: list[float], raw: list[float] | None) -> str:
    p50, p95, p99 = (percentile(xs, q) for q in (50, 95, 99))
    ratio = f"{p50 / percentile(raw, 50):.2f}× / {p95 / percentile(raw, 95):.2f}×" if raw else "—"
    return f"| {size:,} | {name} | {len(xs)} | {p50:.2f} | {p95:.2f} | {p99:.2f} | {ratio} |"


def main(argv: list[str] | None = None) -> int:
    """Populate, measure, print the table; record it unless ``--quick``."""
    p = argparse.ArgumentParser(prog="python -m bench.recall", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer queries, 20k notes, no write")
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--write", action=argparse.BooleanOptionalAction, default=None)
    args = p.parse_args(argv)
    write = args.write if args.write is not None else not args.quick
    big = 20_000 if args.quick else 100_000
    n_small, n_big, n_daemon = (300, 200, 300) if args.quick else (2000, 1000, 2000)
    texts, speakers, questions = corpus(args.data)
    random.Random(3).shuffle(questions)
    rows = ["| notes | path | queries | p50 ms | p95 ms | p99 ms | ratio to raw p50 / p95 |",
            "|---:|---|---:|---:|---:|---:|---:|"]
    results: dict[tuple[int, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size, n in ((1000, n_small), (big, n_big)):
            state = Path(tmp) / f"n{size}"
            state.mkdir()
            t0 = time.perf_counter()
            populate(state / "memory.sqlite", NoteWriter(texts, speakers), size)
            print(f"{size:,} notes populated in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
            local = run_local(state / "memory.sqlite", size, questions, n)
            for name, label in (("raw", "raw FTS5 `ORDER BY rank LIMIT 5` (baseline)"),
                                ("recall", "`MemoryStore.recall(k=5, bump=False)`"),
                                ("recall+bump", "`MemoryStore.recall(k=5)` with bump")):
                results[(size, name)] = local[name]
                rows.append(_row(size, label, local[name], None if name == "raw" else local["raw"]))
            if size == 1000:
                daemon = trio.run(run_daemon, state, questions, n_daemon)
                results[(size, "tool")] = daemon["tool"]
                rows.append(_row(size, "`memory.notes.recall` (k=5) through the memory actor",
                                 daemon["tool"], None))
                rows.append(_row(size, "`BuildContext` through the memory actor",
                                 daemon["context"], None))
                rows.append(_row(size, "`memory.notes.recall` by id (the actor path's floor)",
                                 daemon["by_id"], None))
    p99_1k = percentile(results[(1000, "tool")], 99)
    p95_big = percentile(results[(big, "recall+bump")], 95)
    verdict = (f"Recall through the daemon at 1,000 notes p99 {p99_1k:.2f} ms vs ≤ "
               f"{TARGET_P99_1K_MS:g} ms: "
               f"{'PASS' if p99_1k <= TARGET_P99_1K_MS else 'FAIL'}; recall p95 at {big:,} notes "
               f"{p95_big:.2f} ms vs ≤ {TARGET_P95_100K_MS:g} ms: "
               f"{'PASS' if p95_big <= TARGET_P95_100K_MS else 'FAIL'} "
               "(in process, with the bump).")
    command = " ".join(["python -m bench.recall", *(argv if argv is not None else sys.argv[1:])])
    text = (f"{SECTION}\n\nTarget: recall at 1,000 notes p99 ≤ {TARGET_P99_1K_MS:g} ms (BM25); "
            f"at 100,000 notes (raised cap) p95 ≤ {TARGET_P95_100K_MS:g} ms.\n\n"
            f"- Machine: {machine_line()}\n- Date: {utc_now()}\n- Command: `{command.strip()}`\n"
            "- Notes: Markov-chain text from the LoCoMo dev turns, 6–45 words, 20 per session; "
            "queries: LoCoMo questions (categories 1–4), k = 5 (BuildContext: k = 3)\n\n"
            + "\n".join(rows) + f"\n\n{verdict}\n\n{HOW}\n")
    publish(SECTION, text, write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
