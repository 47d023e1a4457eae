"""Scale: how recall, store and startup cost grow from 1,000 to 100,000 notes, with the
note cap raised: a table and a PNG plot in ``bench/`` (target, docs/architecture.md §10:
at 100,000 notes BM25 recall p95 ≤ 25 ms).

One ``memory.sqlite`` grows through the sizes (default 1k, 3k, 10k, 30k, 100k;
``--quick`` 1k, 3k, 10k). Notes and queries are those of ``bench.recall``: Markov-chain
text trained on the LoCoMo dev turns (``bench/data/locomo-dev.json``), 20 notes per
session, inserted in bulk (``bench.recall.populate``: one ``INSERT`` per note, one
transaction, the FTS triggers index them as ``MemoryStore.store`` would); queries are the
LoCoMo questions of categories 1–4. The cap is raised through the config key
``memory.notes.maxEntries`` (:data:`NOTES_CAP`), so nothing is evicted; embeddings are off
(the BM25 figures; hybrid recall is ``bench.hybrid``'s).

At each size, in this order:

* **startup** — the memory actor as the daemon starts it: a real actor process
  (``runtime.open_supervisor``) from spawn to ready (``PRAGMA quick_check``, migrations,
  both connections, the stores), and its stop (WAL checkpoint, close), ``--starts``
  times; plus the same opening in process (``open_or_quarantine`` + ``open_reader`` +
  ``open_stores`` + a count), which is the part that grows with the file. ``serve``
  ready as a whole is ``bench.lifecycle``'s (at 1,000 notes).
* **recall** — ``bench.recall.run_local``: raw FTS5 ``ORDER BY rank LIMIT 5`` (the
  baseline), ``MemoryStore.recall(k=5, bump=False)`` and ``MemoryStore.recall(k=5)``
  with the recall-count bump (the tool's path, the figure the target is judged on, as in
  ``bench.recall``), interleaved query by query after a warm-up; ms.
* **store** — ``MemoryStore.store`` of ``--stores`` new notes, one transaction each, with
  the store's dedup (exact and near-identical lookup) and cap check, ms per note.

The table has one row per size and, for each cost, its ratio to the 1,000-note row (the
growth). With ``--write`` (the default in full mode) the section goes to
``bench/RESULTS.md`` and the plot to ``bench/scale.png`` (matplotlib, the ``bench``
extra; when it is missing the plot is skipped with one line saying so).

Usage: ``python -m bench.scale [--quick] [--sizes 1000,3000,...] [--queries N]
[--stores N] [--starts N] [--write | --no-write]``.
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
from actors.store.stores import open_or_quarantine, open_reader, open_stores
from actors.memory import ops
from actors.memory.client import actor_memory
from actors.store.schema import open_database
from bench._results import ROOT, machine_line, percentile, publish, utc_now
from bench.locomo import DATA
from bench.recall import NoteWriter, corpus, populate, run_local
from runtime import open_supervisor
from runtime.kernel import _log
from runtime.services.config import ActorBoot, Config

SECTION = "## Scale"
SIZES = (1_000, 3_000, 10_000, 30_000, 100_000)
QUICK_SIZES = (1_000, 3_000, 10_000)
TARGET_SIZE = 100_000
TARGET_P95_MS = 25.0
"""Target: BM25 recall at 100,000 notes (raised cap) p95 ≤ 25 ms."""
NOTES_CAP = 1_000_000
"""``memory.notes.maxEntries`` for the run: above every size, so nothing is evicted."""
PLOT = ROOT / "bench" / "scale.png"


def bench_config() -> Config:
    """The default config with the note cap raised to :data:`NOTES_CAP` and embeddings
    off (BM25 only)."""
    cfg = Config()
    cfg.memory.notes.max_entries = NOTES_CAP
    cfg.memory.embeddings.enabled = False
    return cfg


def open_in_process_ms(path: Path, cfg: Config) -> float:
    """Milliseconds to open ``path`` as the memory actor does before it is ready (quick
    check and migrations on the writer connection, the read connection, every store,
    one note count), in this process; both connections closed afterwards."""
    t0 = time.perf_counter()
    conn, _ = open_or_quarantine(path)
    reader = open_reader(path)
    stores = open_stores(conn, cfg.memory)
    open_stores(reader, cfg.memory)
    stores.notes.count()
    ms = (time.perf_counter() - t0) * 1000
    reader.close()
    conn.close()
    return ms


async def actor_start_stop(state: Path, cfg: Config) -> tuple[float, float]:
    """Start a memory actor process on ``state`` and stop it; (ms from spawn to ready,
    ms to stop it after one request by id)."""
    boot = msgspec.msgpack.encode(ActorBoot(state_dir=str(state), config=cfg))
    t0 = time.perf_counter()
    async with open_supervisor([actor_spec("memory", config=boot)],
                               log_level="warning") as sup:
        t1 = time.perf_counter()
        await actor_memory(sup.request).run(ops.NotesRecall(id=1))
        t2 = time.perf_counter()
    return (t1 - t0) * 1000, (time.perf_counter() - t2) * 1000


def store_ms(path: Path, cfg: Config, texts: list[str]) -> list[float]:
    """``MemoryStore.store`` of each of ``texts`` (one transaction each) through the
    stores the config builds; ms per note."""
    conn = open_database(str(path))
    notes = open_stores(conn, cfg.memory).notes
    out = []
    for text in texts:
        t0 = time.perf_counter()
        notes.store(text)
        out.append((time.perf_counter() - t0) * 1000)
    conn.close()
    return out


def note_count(path: Path) -> int:
    """The number of notes in ``path``."""
    conn = open_database(str(path))
    try:
        return conn.execute("SELECT count(*) FROM memories").fetchall()[0][0]
    finally:
        conn.close()


def measure(args: argparse.Namespace) -> list[dict]:
    """Grow the file through ``args.sizes`` and measure every cost at each; one dict of
    figures (ms) per size."""
    texts, speakers, questions = corpus(args.data)
    random.Random(3).shuffle(questions)
    writer = NoteWriter(texts, speakers)
    fresh = NoteWriter(texts, speakers, seed=13)
    cfg = bench_config()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        state.mkdir()
        path = state / "memory.sqlite"
        populated = 0
        for size in args.sizes:
            missing = size - (note_count(path) if path.exists() else 0)
            t0 = time.perf_counter()
            if missing > 0:
                populate(path, writer, missing, start=populated)
                populated += missing
            print(f"scale: {size:,} notes ({missing:,} added in {time.perf_counter() - t0:.1f} s)",
                  file=sys.stderr, flush=True)
            starts = [trio.run(actor_start_stop, state, cfg) for _ in range(args.starts)]
            opens = [open_in_process_ms(path, cfg) for _ in range(max(3, args.starts))]
            mib = path.stat().st_size / 2**20
            local = run_local(path, size, questions, args.queries)
            stores = store_ms(path, cfg, [fresh.note() for _ in range(args.stores)])
            rows.append({"size": size, "mib": mib, "raw": local["raw"], "recall": local["recall"],
                         "bump": local["recall+bump"], "store": stores,
                         "ready": [s[0] for s in starts], "stop": [s[1] for s in starts],
                         "open": opens})
            print(f"scale: {size:,} notes: recall p95 {percentile(local['recall+bump'], 95):.2f} ms, "
                  f"store p50 {percentile(stores, 50):.2f} ms, actor ready "
                  f"{percentile(rows[-1]['ready'], 50):.0f} ms", file=sys.stderr, flush=True)
    return rows


COSTS = (
    # (key, percentile, label in the plot)
    ("bump", 50, "recall p50 (with bump)"),
    ("bump", 95, "recall p95 (with bump)"),
    ("raw", 95, "raw FTS5 p95 (baseline)"),
    ("store", 50, "store p50"),
    ("open", 50, "open in process p50"),
    ("ready", 50, "memory actor ready p50"),
    ("stop", 50, "memory actor stop p50"),
)


def render(rows: list[dict], command: str) -> tuple[str, bool | None]:
    """The RESULTS.md section and the target's verdict at 100,000 notes (None when
    that size was not measured)."""
    first = rows[0]

    def cell(r: dict, key: str, q: float, growth: bool = True) -> str:
        v = percentile(r[key], q)
        if not growth:
            return f"{v:.2f}"
        return f"{v:.2f} ({v / percentile(first[key], q):.1f}×)"

    table = ["| notes | file MiB | raw FTS5 p95 ms (baseline) | recall p50 ms | recall p95 ms "
             "(growth) | recall p99 ms | store p50 ms (growth) | store p95 ms | open in process "
             "ms (growth) | memory actor ready ms (growth) | memory actor stop ms |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        table.append(
            f"| {r['size']:,} | {r['mib']:.1f} | {cell(r, 'raw', 95)} | "
            f"{cell(r, 'bump', 50, False)} | {cell(r, 'bump', 95)} | "
            f"{cell(r, 'bump', 99, False)} | {cell(r, 'store', 50)} | "
            f"{cell(r, 'store', 95, False)} | {cell(r, 'open', 50)} | "
            f"{percentile(r['ready'], 50):.0f} ({percentile(r['ready'], 50) / percentile(first['ready'], 50):.1f}×) | "
            f"{percentile(r['stop'], 50):.0f} |")
    at = next((r for r in rows if r["size"] == TARGET_SIZE), None)
    ok: bool | None = None
    if at is None:
        verdict = (f"{TARGET_SIZE:,} notes were not measured in this run (largest: "
                   f"{rows[-1]['size']:,}), so the target is not judged here.")
    else:
        p95 = percentile(at["bump"], 95)
        ok = p95 <= TARGET_P95_MS
        verdict = (f"BM25 recall at {TARGET_SIZE:,} notes p95 {p95:.2f} ms vs ≤ "
                   f"{TARGET_P95_MS:g} ms: {'PASS' if ok else 'FAIL'} (in process, with the "
                   "bump, as `bench.recall`).")
    growth = rows[-1]["size"] / first["size"]
    text = (f"{SECTION}\n\nHow recall, store and startup cost grow from {first['size']:,} to "
            f"{rows[-1]['size']:,} notes ({growth:g}× the notes), the note cap raised "
            f"(`memory.notes.maxEntries` = {NOTES_CAP:,}). Target: at {TARGET_SIZE:,} notes "
            f"BM25 recall p95 ≤ {TARGET_P95_MS:g} ms.\n\n"
            f"- Machine: {machine_line()}\n- Date: {utc_now()}\n- Command: `{command}`\n"
            f"- Notes: `bench.recall`'s Markov text from the LoCoMo dev turns, 20 per session, "
            "one file grown through the sizes; queries: LoCoMo questions (categories 1–4), "
            f"k = 5, {len(first['bump'])} per size after a warm-up; {len(first['store'])} "
            "stores per size (`MemoryStore.store`, one transaction each, dedup on); memory "
            f"actor started and stopped {len(first['ready'])}× per size; embeddings off "
            "(BM25)\n"
            "- Growth: each figure in parentheses is its ratio to the first row; recall is "
            "`MemoryStore.recall(k=5)` with the recall-count bump; open in process = what the "
            "actor does before it is ready (`PRAGMA quick_check`, migrations, both "
            "connections, the stores); actor ready = spawn → ready of a real actor process\n\n"
            + "\n".join(table) + f"\n\n{verdict}\n")
    return text, ok


def plot(rows: list[dict], path: Path) -> str:
    """Draw every cost of :data:`COSTS` against the note count (log x, ms on a log y)
    into ``path``; return one line saying where it went, or why it was skipped."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError as exc:
        return (f"plot skipped: matplotlib is not installed ({exc}); install the `bench` extra: "
                ".venv/bin/pip install -e '.[bench]'")
    sizes = [r["size"] for r in rows]
    fig, ax = plt.subplots(figsize=(10, 5), dpi=110)
    for key, q, label in COSTS:
        ax.plot(sizes, [percentile(r[key], q) for r in rows], marker="o", label=label)
    ax.axhline(TARGET_P95_MS, color="grey", linestyle=":", linewidth=1)
    ax.annotate(f"target at {TARGET_SIZE:,}: recall p95 ≤ {TARGET_P95_MS:g} ms",
                (sizes[0], TARGET_P95_MS), textcoords="offset points", xytext=(2, 4),
                fontsize=8, color="grey")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sizes, [f"{s // 1000}k" if s % 1000 == 0 else f"{s:,}" for s in sizes])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("notes in memory.sqlite")
    ax.set_ylabel("ms")
    ax.set_title("atomic-agent: cost against note count (bench/scale.py)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))  # off the lines
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return f"plot written to {path}"


def main(argv: list[str] | None = None) -> int:
    """Measure every size, print the table; with ``--write`` (default unless ``--quick``)
    record the section and draw ``bench/scale.png``. Exit 1 when the 100,000-note target
    is missed."""
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="1k, 3k, 10k notes, fewer queries and stores, no write")
    p.add_argument("--sizes", default=None,
                   help="comma-separated note counts, ascending (default 1k,3k,10k,30k,100k)")
    p.add_argument("--queries", type=int, default=None,
                   help="recall queries per size (default 1,000; --quick 200)")
    p.add_argument("--stores", type=int, default=None,
                   help="notes stored per size (default 300; --quick 100)")
    p.add_argument("--starts", type=int, default=None,
                   help="memory actor starts per size (default 3; --quick 2)")
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--write", action=argparse.BooleanOptionalAction, default=None)
    args = p.parse_args(argv)
    try:
        sizes = ([int(x) for x in args.sizes.split(",") if x.strip()] if args.sizes
                 else list(QUICK_SIZES if args.quick else SIZES))
    except ValueError:
        p.error(f"--sizes: a comma-separated list of integers, got {args.sizes!r}")
    if not sizes or sizes != sorted(set(sizes)) or sizes[0] < 1:
        p.error("--sizes: positive note counts in ascending order")
    args.sizes = sizes
    args.queries = args.queries or (200 if args.quick else 1000)
    args.stores = args.stores or (100 if args.quick else 300)
    args.starts = args.starts or (2 if args.quick else 3)
    write = args.write if args.write is not None else not args.quick
    _log.configure_cli("warning")  # the supervisor's own lifecycle lines stay out of the output
    rows = measure(args)
    command = " ".join(["python -m bench.scale", *(argv if argv is not None else sys.argv[1:])])
    text, ok = render(rows, command.strip())
    publish(SECTION, text, write)
    if write:
        print(plot(rows, PLOT), file=sys.stderr)
    return 1 if ok is False else 0


if __name__ == "__main__":
    sys.exit(main())
