"""Real-model latency: where a turn's time goes, measured against the model's own floor.

Drives a real daemon (the embedded server with the default model, or ``--model`` /
``--llm-url``) through the memory-use dev questions (``bench/data/memuse-dev.json``: memory
written with memory ops, one question in a fresh session) and the formation dev turns
(``bench/data/formation-dev.json``: statements the reflection then writes down), and
records for every turn, from its ``turn.finished`` timings (the server's own counts) and
the client's clock:

* steps (LLM calls), prompt tokens of the turn's completions, of which evaluated and of
  which served from the server's prompt cache, generated tokens;
* time to the first reply piece (``say`` → first ``reply.delta``) and the whole turn
  (``say`` → ``turn.finished``);
* the **floor**: the server's own prompt + generation time of the turn's last completion
  (``floorMs``) — what the model alone needs for the answer — and the ratio turn / floor.

Three more questions are answered with one short probe question that needs neither a tool
nor memory (:data:`PROBE`):

* **the first turn after the ready line**, asked as soon as ``serve`` says ready, against
  the tenth turn of the run (a memory-use question, with its longer prompt), and the
  first turn after a **restart** on the same state directory (the warmed prompt
  prefixes restored from ``<state>/llm-cache``);
* **interference**: right after each formation turn, while its reflection runs on the
  server's other slot, the probe is asked in another session (*busy*,
  :data:`BUSY_PROBE`); once the reflection has landed, and what it wrote is cleared so
  that both probes see the same (empty) memory, the same question opened by another word
  is asked (*quiet*, :data:`QUIET_PROBE`: the same text again would be served whole from
  the server's prompt cache). Only busy probes that started before the reflection landed
  count; the ratio is busy / quiet (medians);
* **a short question on a warm server**: the quiet probes' first reply piece.

Targets on 2 cores (medians, quiet machine): 1.0 steps per memory-use question, turn ≤ 1.15
× floor, first reply piece ≤ 1.5 s for the probe on a warm server, memory-use turn ≤ 3 s,
interference ≤ 1.2×, the first turn after ready (or it says it is warming up) and after a
restart no slower than the tenth.

**Levers** (``--arm NAME=JSON``, two or more): each arm is a config overlay (merged over
``--config``; ``{models}`` stands for the embedded models' folder, for a draft model's
path) run on its own fresh daemon, the arms' order rotated from run to run; the report is
then the "Real-model latency: levers" table, every arm against the first.

Usage: ``python -m bench.latency [--model NAME|PATH | --llm-url URL] [--repeat N] [--quick]
[--phases memuse,formation] [--questions N] [--statements N] [--arm NAME=JSON ...]
[--config JSON] [--write]``; ``--quick`` runs 4 questions and 4 statements (no verdict, no
RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import trio

from bench._results import machine_line, percentile, publish, utc_now
from bench.formation import REFLECTION_WAIT_S, bench_daemon, clear_memory, model_label
from bench.memuse import DATA as MEMUSE_DATA
from bench.memuse import write_setup
from runtime.services.models import model_dir
from runtime.shell.client import open_client

SECTION = "## Real-model latency"
FORMATION_DATA = Path(__file__).resolve().parent / "data" / "formation-dev.json"
PROBE = "Which day of the week comes after Tuesday?"
"""A short question that needs no tool and no memory."""
BUSY_PROBE = "Quick question: which day of the week comes after Tuesday?"
QUIET_PROBE = "Short question: which day of the week comes after Tuesday?"
"""The busy and the quiet probe: the same question, so that both replies are as long
(another question, with a shorter answer, made the busy probe look slower than it was),
each opened by another word, so that the quiet one is not a prompt the server's cache
already holds whole (the busy probe's, asked just before): both evaluate the same tail."""

TARGETS = {"steps": 1.0, "floor_ratio": 1.15, "first_piece_s": 1.5, "memuse_turn_s": 3.0,
           "interference": 1.2}
"""The targets on 2 cores (medians), see the module docstring."""


async def _turn(url: str, token: str, session: str, text: str, *,
                reflection: bool = False, into: dict[str, Any] | None = None
                ) -> dict[str, Any]:
    """Say ``text`` in ``session`` on a new connection; the turn's figures (put in
    ``into`` as soon as the turn ends, when given). With ``reflection``, then also wait
    for the turn's reflection: its outcome and ``latencyMs`` (None if it did not land
    within the wait)."""
    async with open_client(url=url, token=token, session=session) as c:
        if reflection:
            await c.request({"type": "subscribe", "channels": ["reflection"]}, "subscribed")
        t0 = time.perf_counter()
        first = None
        finished: dict[str, Any] = {}
        async for f in c.say(text):
            if f.get("type") == "reply.delta" and first is None:
                first = time.perf_counter() - t0
            elif f.get("type") in ("turn.finished", "error"):
                finished = f
        end = time.perf_counter()
        out = into if into is not None else {}
        out.update(_figures(finished, end - t0, first))
        out["end"] = end
        if reflection:
            event = None
            with trio.move_on_after(REFLECTION_WAIT_S):
                event = await c.wait_for(lambda f: f.get("type") == "reflection"
                                         and f.get("turn") == finished.get("turn"))
            out["reflection"] = event.get("outcome") if event else "timeout"
            out["reflection_ms"] = event.get("latencyMs", 0.0) if event else None
        return out


def _figures(finished: dict[str, Any], turn_s: float, first: float | None) -> dict[str, Any]:
    """One turn's figures from its ``turn.finished`` frame and the client's clock."""
    t = finished.get("timings") or {}
    prompt, evaluated = t.get("promptTokens", 0), t.get("prefillTokens", 0)
    floor_ms = t.get("floorMs", 0.0)
    return {"turn_s": turn_s, "first_s": first if first is not None else turn_s,
            "steps": t.get("steps", 0), "prompt": prompt, "evaluated": evaluated,
            "cached": max(0, prompt - evaluated), "generated": t.get("generatedTokens", 0),
            "floor_s": floor_ms / 1000, "ratio": turn_s * 1000 / floor_ms if floor_ms else None,
            "reason": finished.get("reason", finished.get("code", ""))}


def _session(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns() % 10**10}"


async def run(args: argparse.Namespace, questions: list[dict],
              statements: list[dict]) -> list[dict[str, Any]]:
    """One run on a fresh state directory: :func:`_phases` on a new daemon, then the
    probe as the first turn after a restart on the same state directory."""
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        async with bench_daemon(args, state) as d:
            await _phases(args, d.url, d.token, questions, statements, rows)
        async with bench_daemon(args, state) as d:  # a restart: the warmed prefixes restored
            _keep(args, rows, "restart", "-", await _turn(d.url, d.token, _session("restart"),
                                                          PROBE))
    return rows


def _keep(args: argparse.Namespace, rows: list[dict[str, Any]], phase: str, case: str,
          r: dict[str, Any]) -> None:
    r.update(phase=phase, case=case, order=len(rows) + 1, arm=args.arm_name)
    rows.append(r)
    print(f"  {args.arm_name + ' ' if args.arm_name else ''}{phase:10s} {case:4s} "
          f"{r['turn_s']:5.1f} s, first {r['first_s']:4.1f} s, "
          f"{r['steps']} step(s), prompt {r['prompt']} (evaluated {r['evaluated']}), "
          f"generated {r['generated']}, floor {r['floor_s']:.1f} s",
          file=sys.stderr, flush=True)


async def _phases(args: argparse.Namespace, url: str, token: str, questions: list[dict],
                  statements: list[dict], rows: list[dict[str, Any]]) -> None:
    """The first turn after ready, the memory-use questions, then the formation
    statements each with a busy and a quiet probe, on one running daemon."""
    keep = partial(_keep, args, rows)
    keep("first", "-", await _turn(url, token, _session("first"), PROBE))
    for case in questions if "memuse" in args.phases else ():
        async with open_client(url=url, token=token) as admin:
            await clear_memory(admin)
            await write_setup(admin, case)
        keep("memuse", case["id"], await _turn(url, token, _session("memuse"), case["ask"],
                                               reflection=True))
    for case in statements if "formation" in args.phases else ():
        async with open_client(url=url, token=token) as admin:
            await clear_memory(admin)
        session = _session("formation")
        for text in case["turns"]:
            async with trio.open_nursery() as nursery:
                said: dict[str, Any] = {}

                async def statement() -> None:
                    await _turn(url, token, session, text, reflection=True, into=said)

                nursery.start_soon(statement)
                while "end" not in said:  # the turn's end: its reflection starts now
                    await trio.sleep(0.01)
                busy = await _turn(url, token, _session("probe"), BUSY_PROBE)
                busy["busy_start"] = busy["end"] - busy["turn_s"] - said["end"]
            keep("formation", case["id"], said)
            landed = said.get("reflection_ms")
            ran = said.get("reflection") not in ("none", "timeout") and landed is not None
            busy["overlapped"] = ran and busy["busy_start"] * 1000 < landed
            keep("busy", case["id"], busy)
            async with open_client(url=url, token=token) as admin:
                await clear_memory(admin)  # the busy probe's memory: what it wrote goes
            keep("quiet", case["id"], await _turn(url, token, _session("probe"),
                                                  QUIET_PROBE))


def _med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _fmt(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def summarise(rows: list[dict[str, Any]], runs: int) -> dict[str, Any]:
    """Per phase medians and the targets' figures, over every run."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["phase"], []).append(r)
    busy = [r for r in by.get("busy", []) if r.get("overlapped")]
    quiet = by.get("quiet", [])
    tenth = [r for r in rows if r["order"] == 10]
    ratios = [r["ratio"] for r in rows if r["ratio"] and r["phase"] in ("memuse", "formation")]
    memuse = by.get("memuse", [])
    return {
        "phases": by, "runs": runs,
        "steps": _med([r["steps"] for r in memuse]),
        "multi_step": sum(1 for r in memuse if r["steps"] > 1),
        "floor_ratio": _med(ratios),
        "first_piece_s": _med([r["first_s"] for r in quiet]),
        "memuse_turn_s": _med([r["turn_s"] for r in memuse]),
        "interference": (statistics.median(r["turn_s"] for r in busy)
                         / statistics.median(r["turn_s"] for r in quiet))
        if busy and quiet else None,
        "busy_overlapped": len(busy), "busy_all": len(by.get("busy", [])),
        "first_after_ready_s": _med([r["turn_s"] for r in by.get("first", [])]),
        "first_after_restart_s": _med([r["turn_s"] for r in by.get("restart", [])]),
        "tenth_s": _med([r["turn_s"] for r in tenth]),
    }


def render(args: argparse.Namespace, rows: list[dict[str, Any]], command: str,
           full: bool) -> str:
    s = summarise(rows, args.repeat)
    lines = []
    for phase, label in (("first", "first turn after ready (probe)"),
                         ("memuse", "memory-use questions"),
                         ("formation", "formation statements"),
                         ("busy", "probe while a reflection runs"),
                         ("quiet", "probe after the reflection landed"),
                         ("restart", "first turn after a restart (probe)")):
        rs = s["phases"].get(phase, [])
        if not rs:
            continue
        turn = [r["turn_s"] for r in rs]
        lines.append(
            f"| {label} | {len(rs)} | {statistics.mean(r['steps'] for r in rs):.2f} | "
            f"{_fmt(_med([r['prompt'] for r in rs]), 0)} | "
            f"{_fmt(_med([r['evaluated'] for r in rs]), 0)} | "
            f"{_fmt(_med([r['cached'] for r in rs]), 0)} | "
            f"{_fmt(_med([r['generated'] for r in rs]), 0)} | "
            f"{_fmt(_med([r['first_s'] for r in rs]))} | {_fmt(_med(turn))} | "
            f"{_fmt(percentile(turn, 95))} | {_fmt(_med([r['floor_s'] for r in rs]))} | "
            f"{_fmt(_med([r['ratio'] for r in rs if r['ratio']]), 2)} |")

    def verdict(name: str, ok: bool | None) -> str:
        if not full:
            return "no verdict (partial run)"
        return "—" if ok is None else "PASS" if ok else "FAIL"

    first, tenth = s["first_after_ready_s"], s["tenth_s"]
    restart = s["first_after_restart_s"]
    checks = [
        ("steps per memory-use question (median)", _fmt(s["steps"], 2) +
         f" ({s['multi_step']} turns took more than one)", f"{TARGETS['steps']:.1f}",
         verdict("steps", None if s["steps"] is None else s["steps"] <= TARGETS["steps"])),
        ("turn / floor (median, questions and statements)", _fmt(s["floor_ratio"], 2),
         f"≤ {TARGETS['floor_ratio']}", verdict("ratio", None if s["floor_ratio"] is None
                                                else s["floor_ratio"] <= TARGETS["floor_ratio"])),
        ("first reply piece of the probe on a warm server (s)", _fmt(s["first_piece_s"], 2),
         f"≤ {TARGETS['first_piece_s']}", verdict("first", None if s["first_piece_s"] is None
                                                  else s["first_piece_s"]
                                                  <= TARGETS["first_piece_s"])),
        ("memory-use turn (s, median)", _fmt(s["memuse_turn_s"], 2),
         f"≤ {TARGETS['memuse_turn_s']}", verdict("memuse", None if s["memuse_turn_s"] is None
                                                  else s["memuse_turn_s"]
                                                  <= TARGETS["memuse_turn_s"])),
        ("interference: probe while a reflection runs / after (medians)",
         _fmt(s["interference"], 2) + f" ({s['busy_overlapped']} of {s['busy_all']} busy "
         "probes overlapped a reflection)", f"≤ {TARGETS['interference']}",
         verdict("interference", None if s["interference"] is None
                 else s["interference"] <= TARGETS["interference"])),
        ("first turn after ready vs the tenth turn (s)", f"{_fmt(first, 2)} vs {_fmt(tenth, 2)}",
         "no slower", verdict("ready", None if first is None or tenth is None
                              else first <= tenth * 1.05)),
        ("first turn after a restart vs the tenth turn (s)",
         f"{_fmt(restart, 2)} vs {_fmt(tenth, 2)}", "no slower",
         verdict("restart", None if restart is None or tenth is None
                 else restart <= tenth * 1.05)),
    ]
    check_rows = "\n".join(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in checks)
    return (
        f"{SECTION}\n\n"
        "Where a turn's time goes on the real model, against the model's own floor (the "
        "server's prompt + generation time of the turn's last completion). Memory-use dev "
        "questions (memory written with ops, one question in a fresh session) and formation "
        "dev statements (each followed by a probe question while its reflection runs on the "
        "other slot, and again once it landed); token counts and the floor are the server's "
        "own (`turn.finished` timings); times are the client's, `say` → first `reply.delta` "
        "and → `turn.finished`. `bench/latency.py` explains each figure.\n\n"
        f"- Machine: {machine_line()}\n- Date: {utc_now()}\n- Command: `{command}`\n"
        f"- Model: {model_label(args)}; runs: {args.repeat}; probes: {PROBE!r} (first, "
        f"restart), {BUSY_PROBE!r} (busy), {QUIET_PROBE!r} (quiet)\n\n"
        "| turns | n | steps | prompt tokens p50 | evaluated p50 | cached p50 | "
        "generated p50 | first piece p50 s | turn p50 s | turn p95 s | floor p50 s | "
        "turn / floor p50 |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        + "\n".join(lines) + "\n\n"
        "| target | measured | target | verdict |\n|---|---|---|---|\n" + check_rows + "\n")


LEVERS_SECTION = "## Real-model latency: levers"


def parse_arm(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME=JSON`` → (name, config overlay); ``{models}`` in the JSON becomes the
    embedded models' directory (for a draft model's path). Raises ValueError."""
    name, eq, body = text.partition("=")
    if not eq or not name.strip():
        raise ValueError(f"--arm takes NAME=JSON, not {text!r}")
    try:
        overlay = json.loads(body.replace("{models}", str(model_dir())) or "{}")
    except json.JSONDecodeError as exc:
        raise ValueError(f"--arm {name}: the config overlay is not JSON ({exc})") from None
    if not isinstance(overlay, dict):
        raise ValueError(f"--arm {name}: the JSON must be an object")
    return name.strip(), overlay


def merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """``overlay`` laid over ``base``, objects merged key by key (lists replaced)."""
    out = dict(base)
    for key, value in overlay.items():
        out[key] = (merge(out[key], value) if isinstance(value, dict)
                    and isinstance(out.get(key), dict) else value)
    return out


def render_levers(args: argparse.Namespace, arms: list[tuple[str, dict[str, Any]]],
                  rows: list[dict[str, Any]], command: str) -> str:
    """The levers table: per arm the medians that a lever moves, and each against the
    first arm (the baseline) of the same run."""
    lines = []
    base: dict[str, float | None] = {}
    for n, (name, overlay) in enumerate(arms):
        mine = [r for r in rows if r["arm"] == name]
        s = summarise(mine, args.repeat)
        memuse = s["phases"].get("memuse", [])
        quiet = s["phases"].get("quiet", [])
        fig = {"memuse": s["memuse_turn_s"], "first": _med([r["first_s"] for r in memuse]),
               "gen_s": _med([r["turn_s"] - r["first_s"] for r in memuse]),
               "quiet": _med([r["turn_s"] for r in quiet]),
               "interference": s["interference"]}
        if n == 0:
            base = fig

        def vs(key: str) -> str:
            a, b = fig[key], base.get(key)
            return "" if n == 0 or a is None or not b else f" ({a / b:.2f}×)"

        steps = statistics.mean(r["steps"] for r in memuse) if memuse else None
        lines.append(
            f"| {name} | `{json.dumps(overlay)}` | {len(memuse)} | {_fmt(steps, 2)} | "
            f"{_fmt(_med([r['evaluated'] for r in memuse]), 0)} | "
            f"{_fmt(_med([r['generated'] for r in memuse]), 0)} | "
            f"{_fmt(fig['first'], 2)}{vs('first')} | {_fmt(fig['gen_s'], 2)}{vs('gen_s')} | "
            f"{_fmt(fig['memuse'], 2)}{vs('memuse')} | {_fmt(fig['quiet'], 2)}{vs('quiet')} | "
            f"{_fmt(fig['interference'], 2)} |")
    return (
        f"{LEVERS_SECTION}\n\n"
        "Each lever on and off in the same run: every arm on its own fresh daemon, the arms' "
        "order rotated from run to run so that a noisy minute does not fall on one arm. "
        "Memory-use questions (`say` → first reply piece, the rest of the reply, the whole "
        "turn) and, with the formation phase, the quiet probe and the interference ratio; "
        "the figure in brackets is the arm against the first arm (the baseline).\n\n"
        f"- Machine: {machine_line()}\n- Date: {utc_now()}\n- Command: `{command}`\n"
        f"- Model: {model_label(args)}; runs: {args.repeat}; phases: {', '.join(args.phases)}\n\n"
        "| arm | config | questions | steps | evaluated p50 | generated p50 | first piece p50 s | "
        "first piece → end p50 s | turn p50 s | quiet probe p50 s | interference |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n" + "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point; 0 when the run completed (the verdicts are in the table)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="embedded model name or .gguf (default: the default model)")
    p.add_argument("--llm-url", help="use this llama-server instead of the embedded one")
    p.add_argument("--config", help="config.json text for the daemon")
    p.add_argument("--repeat", type=int, default=1,
                   help="run everything N times, each on a fresh daemon (replies are sampled)")
    p.add_argument("--quick", action="store_true",
                   help="4 questions and 4 statements; no verdict, no RESULTS.md")
    p.add_argument("--verbose", action="store_true", help="debug logs in the daemon")
    p.add_argument("--write", action="store_true", help="write the section to bench/RESULTS.md")
    p.add_argument("--arm", action="append", default=[], metavar="NAME=JSON",
                   help="a lever to measure: a config overlay (JSON, '{models}' = the models' "
                        "directory); give two or more, the first is the baseline, e.g. "
                        "--arm base={} --arm ngram='{\"llm\": {\"serverArgs\": "
                        "[\"--spec-type\", \"ngram-simple\"]}}'")
    p.add_argument("--phases", default="memuse,formation",
                   help="which turns to run: memuse, formation or both (default both)")
    p.add_argument("--questions", type=int, metavar="N",
                   help="only the first N memory-use questions (default all 16)")
    p.add_argument("--statements", type=int, metavar="N",
                   help="only the first N formation cases (default all 35)")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    args.phases = [x.strip() for x in args.phases.split(",") if x.strip()]
    if not args.phases or set(args.phases) - {"memuse", "formation"}:
        p.error("--phases takes memuse, formation or memuse,formation")
    try:
        arms = [parse_arm(a) for a in args.arm]
        base_config = json.loads(args.config) if args.config else {}
    except ValueError as exc:
        p.error(str(exc))
    if not isinstance(base_config, dict):
        p.error("--config must be a JSON object")
    if len(arms) == 1:
        p.error("--arm: give at least two (the first is the baseline)")
    args.arm_name = ""
    questions = json.loads(MEMUSE_DATA.read_text())["cases"]
    statements = json.loads(FORMATION_DATA.read_text())["cases"]
    if args.quick:
        questions, statements = questions[:4], statements[:4]
    for flag, n in (("--questions", args.questions), ("--statements", args.statements)):
        if n is not None and n < 1:
            p.error(f"{flag} must be at least 1")
    questions = questions[:args.questions] if args.questions else questions
    statements = statements[:args.statements] if args.statements else statements
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for n in range(args.repeat):
        print(f"== run {n + 1}/{args.repeat}", file=sys.stderr, flush=True)
        if not arms:
            rows += trio.run(run, args, questions, statements)
            continue
        for name, overlay in arms[n % len(arms):] + arms[:n % len(arms)]:
            one = argparse.Namespace(**vars(args))
            one.arm_name, one.config = name, json.dumps(merge(base_config, overlay))
            rows += trio.run(run, one, questions, statements)
    command = "python -m bench.latency " + " ".join(argv if argv is not None else sys.argv[1:])
    if arms:
        publish(LEVERS_SECTION, render_levers(args, arms, rows, command.strip()),
                args.write and not args.quick)
    else:
        publish(SECTION, render(args, rows, command.strip(), not args.quick),
                args.write and not args.quick)
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
