"""``bench/run``: every benchmark, or the ones named, and one summary.

Each benchmark is its own module (``python -m bench.<name>``) that measures a target of
docs/architecture.md §10 against a baseline taken in the same run and prints — and with
``--write`` records — its section of ``bench/RESULTS.md`` (machine, date, command, table with the
baseline, the ratio, the target and pass/fail). This runner runs them one after another
in fresh processes (each owns its trio run and its daemons), then writes the summary at
the top of ``bench/RESULTS.md``: the machine, the date, the command, and one row per
benchmark — what it checks, how many of its table rows meet / miss their targets, its
exit status and how long it took.

Modes:

* full (default): each benchmark's own default size; sections and summary are written.
* ``--quick``: each benchmark's quick mode (seconds to a minute each, smaller inputs,
  noisier figures) — what CI or a quick check runs; nothing is written unless
  ``--write`` is given.

Usage: ``bench/run [--quick] [--write | --no-write] [NAME ...]``; ``bench/run --list``.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from bench._results import RESULTS, ROOT, machine_line, replace_section, utc_now

SUMMARY = "## Summary (bench/run)"


@dataclass(frozen=True)
class Bench:
    """One benchmark module and what it checks."""

    name: str
    section: str
    checks: str
    full: tuple[str, ...] = ()
    quick: tuple[str, ...] = ("--quick",)


BENCHES = (
    Bench("ipc", "## IPC round trip",
          "request/reply through the root vs a raw socketpair echo, 100 B – 1 MiB: p50 ≤ 3×"),
    Bench("memory_turn", "## Memory work per turn",
          "memory work per turn (context + render + persist) at 1k notes: p99 ≤ 15 ms"),
    Bench("recall", "## Recall",
          "BM25 recall at 1k notes p99 ≤ 5 ms; at 100k notes (raised cap) p95 ≤ 25 ms"),
    Bench("scale", "## Scale",
          "recall, store and startup cost from 1k to 100k notes (raised cap): BM25 recall "
          "p95 ≤ 25 ms at 100k; table and bench/scale.png"),
    Bench("hybrid", "## Hybrid recall and backfill",
          "hybrid recall at 1k notes p99 ≤ 10 ms; backfill ≥ 200 notes/s"),
    Bench("locomo", "## LoCoMo retrieval",
          "LoCoMo dev evidence recall@10: BM25 ≥ 65 %, hybrid ≥ 72 %",
          ("--hybrid", "--ablation"), ("--quick",)),
    Bench("embedders", "## Local embedders",
          "wordllama vs MiniLM int8 in process: load, query latency, documents/s, RSS, "
          "paraphrases, LoCoMo dev hybrid R@10, same run (reported)"),
    Bench("lifecycle", "## Startup, shutdown and store throughput",
          "`serve` ready ≤ 2 s, shutdown (frame / SIGTERM) ≤ 3 s at 1k notes; store "
          "throughput through the daemon vs in process (reported)"),
    Bench("llm_server", "## Embedded LLM server: portable vs native build",
          "prompt eval and generation tokens/s of the portable server vs the native build "
          "(baseline), same run, same model (reported)",
          ("--model", "qwen2.5-coder-1.5b", "--model", "smollm2-135m")),
    Bench("formation", "## Memory formation",
          "memory formation through a daemon on the default model: recall ≥ 85 %, "
          "violations ≤ 2, median turn ≤ 10 s, reflections within their timeout",
          ("--repeat", "3")),
    Bench("chain", "## Conversation chains",
          "whole conversations through a daemon on the default model (statements in their "
          "own sessions, questions in new ones): ≥ 90 % of questions, 0 replies in the "
          "third person, every keep row",
          ("--repeat", "3")),
    Bench("latency", "## Real-model latency",
          "real-model turns against the server's floor: 1.0 steps per question, turn ≤ 1.15 "
          "× floor, first piece ≤ 1.5 s, memory-use turn ≤ 3 s, interference ≤ 1.2×, first "
          "turn after ready no slower than the tenth",
          ("--repeat", "3")),
    Bench("integrations", "## MCP and OpenAI API overhead",
          "a recall through MCP (stdio, HTTP) and a turn through the OpenAI-compatible API "
          "vs the same over the websocket, same run (reported)"),
    Bench("auth_flood", "## Wrong-token flood: no lock-out",
          "200 wrong-token connections a second while the websocket client, the CLI and "
          "MCP connect: every connect within 1 s, none refused"),
    Bench("turn", "## Turns through the daemon",
          "a turn's own cost beside the scripted LLM's; memory work p99 ≤ 15 ms"),
    Bench("reflection", "## Reflection on / off",
          "reply latency with reflection on / off under load: p50 ≤ 1.05"),
    Bench("load", "## Load",
          "10–200 clients × 20 turns: 100 clients with 0 errors and 0 lost writes; "
          "where it saturates"),
    Bench("soak", "## Soak",
          "50 clients × 10 min: flat memory, no fd / thread / task leaks, 0 errors"),
)
"""Every benchmark, in the order ``bench/run`` runs them (cheap first)."""

_RESULT = re.compile(r"^\|.*\|\s*$")
_VERDICT = re.compile(r"\b(PASS|FAIL|MISSED)\b")
_CELL = re.compile(r"[*_`\s]*(PASS|MET|FAIL|MISSED)\b")


def tally(section: str) -> tuple[int, int]:
    """(verdicts met, verdicts missed) in a benchmark's section: a table row whose cells
    say PASS / MET or FAIL / MISSED counts once; outside tables each "PASS", "FAIL" or
    "MISSED" word is one verdict (the benchmarks state single targets as sentences,
    e.g. "p99 … vs target ≤ 15 ms: PASS")."""
    met = missed = 0
    for line in section.splitlines():
        if _RESULT.match(line):
            cells = line.strip().strip("|").split("|")
            words = {m.group(1) for c in cells if (m := _CELL.match(c.strip()))}
            missed += bool(words & {"FAIL", "MISSED"})
            met += bool(words & {"PASS", "MET"}) and not words & {"FAIL", "MISSED"}
            continue
        for word in _VERDICT.findall(line):
            met += word == "PASS"
            missed += word != "PASS"
    return met, missed


def run_one(bench: Bench, quick: bool, write: bool) -> tuple[int, float, str]:
    """Run one benchmark in a fresh process; (exit status, seconds, its printed output).
    Its progress lines (stderr) pass through to ours."""
    args = [sys.executable, "-m", f"bench.{bench.name}",
            *(bench.quick if quick else bench.full), "--write" if write else "--no-write"]
    t0 = time.perf_counter()
    done = subprocess.run(args, cwd=ROOT, stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return done.returncode, time.perf_counter() - t0, done.stdout


def earlier_rows(text: str) -> dict[str, str]:
    """``{benchmark: row}`` of the summary table already in RESULTS.md (``text``)."""
    start = text.find(SUMMARY)
    if start == -1:
        return {}
    end = text.find("\n## ", start + 1)
    out = {}
    for line in text[start:end if end != -1 else len(text)].splitlines():
        m = re.match(r"^\| `(\w+)` \|", line)
        if m and line.count("|") == 7:  # the current layout: six columns
            out[m.group(1)] = line
    return out


def summary(rows: list[str], command: str, quick: bool, partial: bool = False) -> str:
    """The summary section (markdown); ``partial``: only some benchmarks ran now."""
    return (f"{SUMMARY}\n\n"
            f"- Machine: {machine_line()}\n- Date: {utc_now()}\n- Command: `{command}`"
            f"{' (quick mode: small inputs, noisy figures)' if quick else ''}\n\n"
            "| benchmark | checks | rows meeting / missing their target | exit | seconds | run |\n"
            "|---|---|---|---:|---:|---|\n" + "\n".join(rows) + "\n\n"
            + ("A benchmark not named in the command keeps its row (and its section) from "
               "the run given in its `run` column.\n\n" if partial else "")
            + "Each benchmark's own section below has the baseline measured in the same run, "
            "the ratio and the cause of every miss.\n")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; exit 1 if any exited non-zero."""
    p = argparse.ArgumentParser(prog="bench/run", description="Run every benchmark (or the "
                                "ones named) and summarise them in bench/RESULTS.md.",
                                epilog="benchmarks: " + ", ".join(b.name for b in BENCHES))
    p.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: all)")
    p.add_argument("--quick", action="store_true", help="every benchmark's quick mode")
    p.add_argument("--write", action=argparse.BooleanOptionalAction, default=None,
                   help="record sections and summary in bench/RESULTS.md "
                        "(default: yes for a full run, no for --quick)")
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = p.parse_args(argv)
    if args.list:
        for b in BENCHES:
            print(f"{b.name:12} {b.checks}")
        return 0
    known = {b.name: b for b in BENCHES}
    unknown = [n for n in args.names if n not in known]
    if unknown:
        p.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(known)}")
    chosen = [known[n] for n in args.names] if args.names else list(BENCHES)
    write = args.write if args.write is not None else not args.quick
    rows, failed = [], 0
    for bench in chosen:
        print(f"bench/run: {bench.name} …", file=sys.stderr, flush=True)
        code, seconds, out = run_one(bench, args.quick, write)
        met, missed = tally(out)
        failed += code != 0
        rows.append(f"| `{bench.name}` | {bench.checks} | {met} / {missed} | {code} | "
                    f"{seconds:.0f} | {utc_now()} |")
        print(out, flush=True)
        print(f"bench/run: {bench.name}: exit {code}, {met} rows met / {missed} missed, "
              f"{seconds:.0f} s", file=sys.stderr, flush=True)
    command = " ".join(["bench/run", *(argv if argv is not None else sys.argv[1:])]).strip()
    if write and args.names:  # a partial run: the others keep their rows
        ran = {b.name: row for b, row in zip(chosen, rows)}
        old = earlier_rows(RESULTS.read_text(encoding="utf-8")) if RESULTS.exists() else {}
        rows = [ran.get(b.name) or old[b.name] for b in BENCHES if b.name in ran or b.name in old]
    text = summary(rows, command, args.quick, partial=bool(args.names) and write)
    print(text)
    if write:
        _put_summary_first(text)
    return 1 if failed else 0


def _put_summary_first(text: str) -> None:
    """Replace the summary section, keeping it right under the file's title."""
    replace_section(RESULTS, SUMMARY, text)
    body = RESULTS.read_text(encoding="utf-8")
    start = body.index(SUMMARY)
    end = body.find("\n## ", start + 1)
    block = body[start:end + 1 if end != -1 else len(body)]
    rest = body[:start] + body[start + len(block):]
    title, _, tail = rest.partition("\n\n")
    RESULTS.write_text(f"{title}\n\n{block.rstrip()}\n\n{tail.lstrip()}", encoding="utf-8")


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `bench/run --list | head` ends quietly
    sys.exit(main())
