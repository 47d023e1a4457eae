"""Keyword recall on long pasted messages and very common words.

Auto-recall turns the user's message into an OR of terms, so its cost grows with the
message's length and with how common its words are. Recall now ORs at most
``recall.MAX_QUERY_TERMS`` (24) terms, the rarest, and a search that runs past
``recall.RECALL_BUDGET_MS`` is interrupted. This measures ``MemoryStore.recall`` (k 5,
no bump) at 20,000 and 100,000 notes written in the reflection style the case
describes ("User prefers …", "User likes …", a third with common words; one note holds
"passport"), inserted the way ``bench.recall`` does (one INSERT each; FTS triggers), for:

* a 10-word question (the baseline: every other row is reported as a ratio to it);
* a 500-word message as the turn's context recalls it (``context.recall_query``: its
  first 500 characters) and whole (what ``ranked_search`` would get without that cut);
* a 20 KB pasted log (~530 distinct words), whole;
* ``a``, ``I``, ``user``, ``the the the`` and ``passport``.

Each query runs ``--runs`` times interleaved after a warm-up; p50 / p95 in ms. Also
reported: the OR terms of the 500-word message before and after the cap, and whether
``passport`` still finds its note.

Usage: ``python -m bench.recall_long [--sizes 20000,100000] [--runs 60] [--write]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from actors.store import recall as recall_mod
from actors.store.context import recall_query
from actors.store.fts import content_key
from actors.store.notes import MemoryStore
from actors.store.schema import open_database, write_txn
from bench._results import machine_line, percentile, publish, utc_now

SECTION = "## Recall on long messages and common words"
VERBS = "prefers likes wants uses enjoys keeps avoids needs plans visits".split()
THINGS = ("tea coffee jazz hiking maps ferns bikes tennis chess sushi pasta rain snow "
          "trains boats novels poetry cameras gardens museums mountains rivers deserts "
          "markets bakeries violins drums kites puzzles lanterns").split()
COMMON = "the a i to at on in".split()
QUESTION_10 = "remind me what I said about my passport renewal trip"
_SQL_INSERT = ("INSERT INTO memories (content, content_key, tags, source, scope, created_at,"
               " updated_at) VALUES (?, ?, '[]', 'agent', 'all', ?, ?)")


def note(rnd: random.Random, i: int) -> str:
    """One reflection-style note; about a third carry common words."""
    words = ["User", rnd.choice(VERBS), *rnd.sample(THINGS, 3), f"item{i % 997}"]
    if rnd.random() < 0.35:
        words[2:2] = rnd.sample(COMMON, 3)
    return " ".join(words)


def pasted(rnd: random.Random, words: int) -> str:
    """A pasted text of ``words`` words from a ~530-word vocabulary of log-like tokens."""
    vocab = [f"{w}{n}" for w in ("worker", "queue", "shard", "error", "retry", "node",
                                 "batch", "token", "socket", "cache", "disk")
             for n in range(48)] + THINGS + COMMON + VERBS
    return " ".join(rnd.choice(vocab) for _ in range(words))


def build(path: Path, size: int) -> None:
    rnd = random.Random(11)
    conn = open_database(str(path))
    now = int(time.time() * 1000)
    with write_txn(conn):
        for i in range(size):
            text = note(rnd, i) if i != size // 2 else "User renewed their passport in March"
            conn.execute(_SQL_INSERT, (text, content_key(text), now, now))
    conn.close()


def measure(path: Path, runs: int) -> dict[str, object]:
    rnd = random.Random(5)
    long500 = pasted(rnd, 500)
    log20k = pasted(rnd, 3000)[:20_000]
    queries = {
        "10-word question (baseline)": QUESTION_10,
        "500-word message, as the turn recalls it": recall_query(long500),
        "500-word message, whole": long500,
        "20 KB pasted log, whole": log20k,
        "a": "a", "I": "I", "user": "user", "the the the": "the the the", "passport": "passport",
    }
    conn = open_database(str(path))
    store = MemoryStore(conn, max_entries=1_000_000)
    before = recall_mod.build_recall_query(long500)
    after = recall_mod.cap_terms(before)
    found = [n.content for n in store.recall("passport", bump=False)]
    times: dict[str, list[float]] = {name: [] for name in queries}
    for name, q in queries.items():  # warm-up
        _search(store, q)
    for _ in range(runs):
        for name, q in queries.items():
            t0 = time.perf_counter()
            _search(store, q)
            times[name].append((time.perf_counter() - t0) * 1000)
    conn.close()
    return {"times": times, "terms": (len(before.parts), len(after.parts)),
            "passport": any("passport" in c for c in found),
            "limited": dict(recall_mod.LIMITED)}


def _search(store: MemoryStore, text: str) -> list:
    """Recall as ``memory.notes.recall`` would, without its 500-char argument check."""
    q = recall_mod.build_recall_query(text)
    if q is None:
        return []
    return recall_mod.ranked_search(store.conn, q, 5, cols="m.id, m.content")


def render(results: dict[int, dict], runs: int, command: str) -> str:
    lines = [SECTION, "",
             f"Command: `{command}` ({utc_now()}; {machine_line()}). `MemoryStore`-level "
             f"recall (k 5, no bump), {runs} interleaved runs per query; ratio = p50 / the "
             f"10-word question's p50 at the same size.", "",
             "| notes | query | p50 ms | p95 ms | ratio |", "|---|---|---|---|---|"]
    for size, r in results.items():
        times = r["times"]
        base = statistics.median(times["10-word question (baseline)"])
        for name, xs in times.items():
            med = statistics.median(xs)
            lines.append(f"| {size:,} | {name} | {med:.2f} | {percentile(xs, 95):.2f} | "
                         f"{med / base:.2f} |")
    size, r = next(iter(results.items()))
    lines += ["", f"The 500-word message ORs {r['terms'][0]} terms uncapped, "
              f"{r['terms'][1]} capped (the longest). `passport` finds its note: "
              f"{'yes' if all(x['passport'] for x in results.values()) else 'NO'}. "
              f"Queries interrupted by the {recall_mod.RECALL_BUDGET_MS} ms budget: "
              f"{sum(x['limited']['budget'] for x in results.values())}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Build each size, measure, print (``--write``: record) the section."""
    p = argparse.ArgumentParser(prog="python -m bench.recall_long", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="20000,100000", help="note counts (default 20000,100000)")
    p.add_argument("--runs", type=int, default=60, help="runs per query (default 60)")
    p.add_argument("--write", action="store_true", help="write the section to bench/RESULTS.md")
    args = p.parse_args(argv)
    results: dict[int, dict] = {}
    for size in (int(s) for s in args.sizes.split(",") if s):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "memory.sqlite"
            t0 = time.perf_counter()
            build(path, size)
            print(f"built {size:,} notes in {time.perf_counter() - t0:.0f} s", file=sys.stderr,
                  flush=True)
            results[size] = measure(path, args.runs)
    command = "python -m bench.recall_long " + " ".join(argv if argv is not None else sys.argv[1:])
    publish(SECTION, render(results, args.runs, command.strip()), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
