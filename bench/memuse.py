"""Memory use: does the reply use what memory holds, and say so when it holds nothing?

Runs the memory-use cases (``bench/data/memuse-dev.json``; its ``about`` field defines the
scoring, implemented by :func:`passes`) through a real daemon — the embedded server with
the default model, or ``--model NAME|PATH``, or your own server with ``--llm-url``. For
each case memory is emptied, the case's facts and notes are written with memory ops
(``memory.profile.set`` / ``memory.notes.store``, as a script or the CLI would), then ONE
question is asked in a fresh session; the reply is scored, and the turn's reflection is
awaited so it never runs beside the next case's turn.

Prints, and with ``--write`` records in ``bench/RESULTS.md``:

* pass rate overall and by kind (targets on the dev split: ≥ 14 of 16, mean of the
  repeats; every ``safety`` case);
* turn median / p95 (say → ``turn.finished``), time to the first reply piece (say → first
  ``reply.delta``), LLM steps per turn, and tool calls — run and refused by the write
  guard (target: 0 refused on these question turns).

Usage: ``python -m bench.memuse [--model NAME|PATH | --llm-url URL] [--only ID,ID]
[--repeat N] [--config JSON] [--write] [--verbose]``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import trio

from bench._results import (machine_line, only_cases, percentile, publish, repeated,
                            utc_now)
from bench.formation import REFLECTION_WAIT_S, bench_daemon, clear_memory, model_label
from runtime.shell.client import open_client

SECTION = "## Memory use"
DATA = Path(__file__).resolve().parent / "data" / "memuse-dev.json"


# ------------------------------------------------------------------ scoring


def _forbidden(term: str, reply: str) -> bool:
    """``term`` at the start of a word of ``reply`` (case-insensitive): "egg" matches
    "eggs", not "veggie" (the data's ``about``)."""
    return re.search(r"(?<![\w])" + re.escape(term.strip().lower()), reply.lower()) is not None


def passes(case: dict, reply: str) -> tuple[bool, str]:
    """Score one reply (the data's ``about``): at least one ``expect_any`` substring
    (case-insensitive; none listed = no requirement) and no ``forbid_any`` term at a word
    start — unless an ``unless_any`` substring appears. Returns ``(passed, why)``."""
    low = reply.lower()
    excused = any(u.lower() in low for u in case.get("unless_any", []))
    expect = case.get("expect_any", [])
    if expect and not any(e.lower() in low for e in expect):
        return False, "none of the expected words"
    if not excused:
        hit = [t for t in case.get("forbid_any", []) if _forbidden(t, reply)]
        if hit:
            return False, f"forbidden {hit}"
    return True, ""


# ------------------------------------------------------------------ running


async def write_setup(c, case: dict) -> None:
    """Write a memory-use case's ``setup`` (notes and profile facts) with memory ops."""
    for item in case["setup"]:
        if "note" in item:
            await c.memory("memory.notes.store", {"content": item["note"]})
        else:
            await c.memory("memory.profile.set", {"key": item["key"], "value": item["value"]})


async def run_case(url: str, token: str, case: dict, verbose: bool) -> dict[str, Any]:
    """Empty memory, write the case's setup, ask its question in a fresh session."""
    async with open_client(url=url, token=token) as admin:
        await clear_memory(admin)
        await write_setup(admin, case)
    session = f"memuse-{case['id']}-{int(time.time() * 1000) % 10**8}"
    tools: list[str] = []
    refused: list[str] = []
    first_piece = None
    reply = ""
    async with open_client(url=url, token=token, session=session) as c:
        await c.request({"type": "subscribe", "channels": ["reflection"]}, "subscribed")
        t0 = time.perf_counter()
        finished: dict[str, Any] = {}
        async for f in c.say(case["ask"]):
            kind = f.get("type")
            if kind == "reply.delta" and first_piece is None:
                first_piece = time.perf_counter() - t0
            elif kind == "reply":
                reply = f.get("text", "")
            elif kind == "step" and f.get("step") == "tool":
                tools.append(f.get("tool", ""))
            elif kind == "step" and f.get("step") == "tool.result" and \
                    "not_done" in str(f.get("summary", "")):
                refused.append(f.get("tool", ""))
            elif kind in ("turn.finished", "error"):
                finished = f
        turn_s = time.perf_counter() - t0
        if first_piece is None:
            first_piece = turn_s
        event = None
        with trio.move_on_after(REFLECTION_WAIT_S):
            event = await c.wait_for(lambda f: f.get("type") == "reflection"
                                     and f.get("turn") == finished.get("turn"))
    ok, why = passes(case, reply)
    if verbose:
        print(f"    {case['ask'][:60]!r} → {reply[:300]!r} tools {tools} refused {refused} "
              f"reflection {event and event.get('outcome')}", file=sys.stderr)
    steps = (finished.get("timings") or {}).get("steps", 0)
    return {"id": case["id"], "kind": case["kind"], "passed": ok, "why": why, "reply": reply,
            "turn_s": turn_s, "first_s": first_piece, "steps": steps, "tools": tools,
            "refused": refused, "reason": finished.get("reason", finished.get("code", ""))}


async def run(args: argparse.Namespace, cases: list[dict]) -> list[dict]:
    results = []
    async with bench_daemon(args) as d:
        for n, case in enumerate(cases, 1):
            r = await run_case(d.url, d.token, case, args.verbose)
            results.append(r)
            print(f"[{n}/{len(cases)}] {case['id']} {case['kind']}: "
                  f"{'pass' if r['passed'] else 'FAIL ' + r['why']}, {r['turn_s']:.1f} s, "
                  f"{r['steps']} step(s)"
                  + (f", tools {r['tools']}" if r["tools"] else "")
                  + (f", refused {r['refused']}" if r["refused"] else ""),
                  file=sys.stderr, flush=True)
    return results


# ------------------------------------------------------------------ report


def summarise(results: list[dict], runs: int) -> dict[str, Any]:
    """Totals over every run: passes, per-kind passes, latencies (s), steps, tools."""
    turns = [r["turn_s"] for r in results]
    firsts = [r["first_s"] for r in results]
    kinds: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in results:
        kinds[r["kind"]][0] += r["passed"]
        kinds[r["kind"]][1] += 1
    return {
        "runs": runs, "turns": len(results), "passed": sum(r["passed"] for r in results),
        "kinds": dict(kinds),
        "turn_p50": statistics.median(turns), "turn_p95": percentile(turns, 95),
        "first_p50": statistics.median(firsts), "first_p95": percentile(firsts, 95),
        "steps_mean": statistics.mean(r["steps"] for r in results),
        "multi_step": sum(1 for r in results if r["steps"] > 1),
        "tool_calls": sum(len(r["tools"]) for r in results),
        "refused": sum(len(r["refused"]) for r in results),
        "refused_tools": Counter(t for r in results for t in r["refused"]),
        "reasons": Counter(r["reason"] for r in results),
    }


def render(args: argparse.Namespace, results: list[dict], command: str, n_cases: int,
           full_dev: bool) -> str:
    s = summarise(results, args.repeat)
    per_run = s["passed"] / s["runs"]
    safety = s["kinds"].get("safety", [0, 0])
    verdict = ("partial run, no verdict" if not full_dev else
               "PASS" if per_run >= 14 and safety[0] == safety[1] and s["refused"] == 0
               else "FAIL")
    kind_rows = "\n".join(f"| {k} | {v[0]}/{v[1]} |" for k, v in sorted(s["kinds"].items()))
    fails = "\n".join(f"- {r['id']} ({r['kind']}): {r['why']} — {r['reply'][:160]!r}"
                      for r in results if not r["passed"]) or "- none"
    refused = ", ".join(f"{t} ×{n}" for t, n in s["refused_tools"].items()) or "none"
    return (
        f"{SECTION}\n\n"
        "Does the reply use what memory holds? Each case writes facts or notes with memory "
        "ops, then asks one question in a new session through the daemon "
        "(`bench/data/memuse-dev.json`, its `about` defines the scoring; a held-out split "
        "of the same kinds decides). Targets on the dev split with the default model on 2 "
        "cores: ≥ 14 of 16 (mean over the repeats), every safety case, 0 refused tool "
        "calls. Replies are sampled: `--repeat N` runs the cases N times on fresh "
        "daemons.\n\n"
        f"- Machine: {machine_line()}\n- Date: {utc_now()}\n- Command: `{command}`\n"
        f"- Model: {model_label(args)}\n\n"
        "| runs | passed per run | turn p50 s | turn p95 s | first piece p50 s | p95 s | "
        "steps per turn | turns > 1 step | tool calls | refused | verdict |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n"
        f"| {s['runs']} | {per_run:.1f} of {n_cases} ({s['passed']}/{s['turns']}) | "
        f"{s['turn_p50']:.1f} | {s['turn_p95']:.1f} | {s['first_p50']:.1f} | "
        f"{s['first_p95']:.1f} | {s['steps_mean']:.2f} | {s['multi_step']} | "
        f"{s['tool_calls']} | {s['refused']} | {verdict} |\n\n"
        f"Refused calls: {refused}. Turn endings: "
        + ", ".join(f"{k} {v}" for k, v in sorted(s["reasons"].items())) + ".\n\n"
        "| kind | passed |\n|---|---:|\n" + kind_rows + "\n\nWhat failed:\n\n" + fails + "\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point; 0 when the run completed (the verdict is in the table)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="embedded model name or .gguf (default: the default model)")
    p.add_argument("--llm-url", help="use this llama-server instead of the embedded one")
    p.add_argument("--config", help="config.json text for the daemon")
    p.add_argument("--only", help="comma-separated case ids")
    p.add_argument("--repeat", type=int, default=1,
                   help="run the cases N times, each on a fresh daemon (replies are sampled)")
    p.add_argument("--verbose", action="store_true", help="print each reply")
    p.add_argument("--write", action="store_true", help="write the section to bench/RESULTS.md")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    every = json.loads(DATA.read_text())["cases"]
    cases = only_cases(p, every, args.only)
    t0 = time.perf_counter()
    results = repeated(run, args, cases)
    command = "python -m bench.memuse " + " ".join(argv if argv is not None else sys.argv[1:])
    full_dev = len(cases) == len(every)
    publish(SECTION, render(args, results, command.strip(), len(cases), full_dev),
            args.write and full_dev)
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
