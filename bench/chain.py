"""Whole conversations: what a person says over several sessions, and what the next reply
does with it.

Runs the conversation-chain cases (``bench/data/chain-dev.json``; its ``about`` field
defines the scoring, implemented by :func:`score_question`) through a real daemon — the
embedded server with the default model, or ``--model NAME|PATH``, or your own server with
``--llm-url``. For each case memory is emptied; each of its sessions is said in a new
session, turn by turn, and every turn's reflection is awaited (memory forms by reflection
only: nothing is written directly); then each question is asked in a fresh session and its
own reflection awaited too (what a question turn stores is memory as well). After the
questions, each ``keep`` word must still be in active memory.

Prints, and with ``--write`` records in ``bench/RESULTS.md``:

* questions passed, overall and by kind (dev target, mean of ``--repeat N``: ≥ 90 %);
* replies that speak of the user in the third person or as the user (target 0);
* ``keep`` rows: memory the agent must not have changed (target: every one);
* replies with invented specifics, where the benchmark can tell (:func:`invented_specifics`);
* turn median / p95 and LLM steps per turn, memory tool calls made in question turns.

Usage: ``python -m bench.chain [--model NAME|PATH | --llm-url URL] [--only ID,ID]
[--repeat N] [--config JSON] [--write] [--verbose]``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import trio

from bench._results import (machine_line, only_cases, percentile, publish, repeated,
                            utc_now)
from bench.formation import REFLECTION_WAIT_S, bench_daemon, clear_memory, model_label
from bench.memuse import _forbidden
from runtime.shell.client import open_client

SECTION = "## Conversation chains"
DATA = Path(__file__).resolve().parent / "data" / "chain-dev.json"

_SENTENCE_END = re.compile(r"[.!?。！？]+(?=\s|$)")
_CODE_BLOCK = re.compile(r"```.*?(```|\Z)", re.S)


# ------------------------------------------------------------------ scoring


def sentence_count(reply: str) -> int:
    """Sentences in ``reply`` outside code blocks: runs of ``.!?`` followed by a space or
    the end, plus a last sentence without one."""
    prose = _CODE_BLOCK.sub(" ", reply).strip()
    if not prose:
        return 0
    ends = list(_SENTENCE_END.finditer(prose))
    tail = prose[ends[-1].end():].strip() if ends else prose
    return len(ends) + (1 if tail else 0)


def score_question(question: dict, reply: str) -> tuple[bool, str]:
    """One reply against one question (the data's ``about``): one of ``expect_any`` and
    one of ``expect_also`` (case-insensitive substrings; omitted = no requirement), none
    of ``forbid_any`` at the start of a word unless one of ``unless_any`` appears, and at
    most ``max_sentences`` sentences. Returns ``(passed, why)``."""
    low = reply.lower()
    for field in ("expect_any", "expect_also"):
        want = question.get(field, [])
        if want and not any(w.lower() in low for w in want):
            return False, f"none of {field}"
    excused = any(u.lower() in low for u in question.get("unless_any", []))
    if not excused:
        hit = [t for t in question.get("forbid_any", []) if _forbidden(t, reply)]
        if hit:
            return False, f"forbidden {hit}"
    most = question.get("max_sentences")
    if most is not None and sentence_count(reply) > most:
        return False, f"more than {most} sentences"
    return True, ""


_THIRD_VERBS = ("is", "has", "lives", "works", "can", "was", "likes", "loves", "prefers",
                "wants", "uses", "does", "doesn't", "enjoys", "said", "mentioned", "will",
                "would", "should", "needs", "'s")


def third_person(reply: str, user_name: str | None) -> str:
    """Why ``reply`` speaks of the user in the third person or as the user, or ``""``
    (the data's ``about``): "the user", "<Name> is/has/lives/works/can …", "I'm <Name>" /
    "I am <Name>" / "as <Name>"."""
    low = reply.lower()
    if re.search(r"\bthe user(?:'s|s)?\b", low):
        return "'the user'"
    if not user_name:
        return ""
    name = re.escape(user_name.lower())
    if re.search(rf"\b(?:i'm|i am|as) {name}\b", low):
        return f"as {user_name}"
    verbs = "|".join(re.escape(v) for v in _THIRD_VERBS)
    if re.search(rf"\b{name}(?:\s+(?:{verbs})\b|'s\b)", low):
        return f"'{user_name} …' in the third person"
    return ""


_MONTHS = ("january february march april may june july august september october november "
           "december").split()
_NUMBER = re.compile(r"\d[\d,.]*")


def invented_specifics(reply: str, said: str) -> list[str]:
    """Specifics ``reply`` states that nothing said holds, where this benchmark can tell:
    a month name or a number of two or more digits absent from ``said`` (the case's
    statements and the question). A computed answer ("1,800" from 3,000 − 1,200) is counted
    too, so the figure is read beside the pass rate, never alone."""
    low_said = said.lower()
    said_numbers = {n.strip(".,").replace(",", "") for n in _NUMBER.findall(said)}
    out = []
    prose = _CODE_BLOCK.sub(" ", reply).lower()
    for month in _MONTHS:
        if re.search(rf"\b{month}\b", prose) and month not in low_said:
            out.append(month)
    for n in _NUMBER.findall(prose):
        n = n.strip(".,").replace(",", "")
        if len(n) >= 2 and n not in said_numbers:
            out.append(n)
    return out


# ------------------------------------------------------------------ running


async def _turn(c, text: str) -> dict[str, Any]:
    """Say ``text`` on client ``c``; wait for the turn's reflection. Returns the reply,
    timings, tool calls and the reflection event (None when it never came)."""
    t0 = time.perf_counter()
    reply, tools, finished = "", [], {}
    async for f in c.say(text):
        kind = f.get("type")
        if kind == "reply":
            reply = f.get("text", "")
        elif kind == "step" and f.get("step") == "tool":
            tools.append(f"{f.get('tool', '')} {json.dumps(f.get('args', {}))}")
        elif kind in ("turn.finished", "error"):
            finished = f
    turn_s = time.perf_counter() - t0
    event = None
    if finished.get("turn"):
        with trio.move_on_after(REFLECTION_WAIT_S):
            event = await c.wait_for(lambda f: f.get("type") == "reflection"
                                     and f.get("turn") == finished.get("turn"))
    return {"reply": reply, "turn_s": turn_s, "tools": tools,
            "steps": (finished.get("timings") or {}).get("steps", 0),
            "reason": finished.get("reason", finished.get("code", "")),
            "reflection": event}


def _reflection_text(event: dict | None) -> str:
    if not event:
        return "no reflection event"
    return (f"reflection {event.get('outcome')} facts {event.get('factKeys')} notes "
            f"{event.get('noteIds')} forgot {event.get('forgottenKeys')} "
            f"{event.get('forgottenNoteIds')}")


async def _memory_text(c) -> str:
    """Active memory as one lower-cased text: every fact as "key value" and every note."""
    profile = await c.memory("memory.profile.list")
    notes = await c.memory("memory.notes.list", {"limit": 200})
    return "\n".join([f"{f['key']} {f['value']}" for f in profile]
                     + [n["content"] for n in notes]).lower()


async def run_case(url: str, token: str, case: dict, verbose: bool) -> list[dict[str, Any]]:
    """Empty memory, say the case's sessions, ask its questions; one row per question
    plus one per ``keep`` word (``{"keep": word, "kept": bool}``)."""
    async with open_client(url=url, token=token) as admin:
        await clear_memory(admin)
    stamp = int(time.time() * 1000) % 10**8
    said = []
    for n, session in enumerate(case["sessions"]):
        async with open_client(url=url, token=token, session=f"chain-{case['id']}-s{n}-{stamp}") as c:
            await c.request({"type": "subscribe", "channels": ["reflection"]}, "subscribed")
            for text in session:
                said.append(text)
                t = await _turn(c, text)
                if verbose:
                    print(f"    say {text[:70]!r}\n      → {t['reply'][:200]!r}\n      "
                          f"tools {t['tools']} {_reflection_text(t['reflection'])}",
                          file=sys.stderr)
    rows: list[dict[str, Any]] = []
    for n, q in enumerate(case["questions"]):
        async with open_client(url=url, token=token, session=f"chain-{case['id']}-q{n}-{stamp}") as c:
            await c.request({"type": "subscribe", "channels": ["reflection"]}, "subscribed")
            t = await _turn(c, q["ask"])
        ok, why = score_question(q, t["reply"])
        row = {"id": case["id"], "kind": case["kind"], "ask": q["ask"],
               "scored": not q.get("unscored"), "passed": ok, "why": why,
               "third": third_person(t["reply"], case.get("user_name")),
               "invented": invented_specifics(t["reply"], " ".join(said + [q["ask"]])),
               **t}
        row["reflection"] = _reflection_text(t["reflection"])
        rows.append(row)
        if verbose:
            print(f"    ask {q['ask'][:70]!r}\n      → {t['reply'][:300]!r}\n      tools "
                  f"{t['tools']} {row['reflection']}", file=sys.stderr)
    if case.get("keep"):
        async with open_client(url=url, token=token) as admin:
            memory = await _memory_text(admin)
        for word in case["keep"]:
            rows.append({"id": case["id"], "kind": case["kind"], "keep": word,
                         "kept": word.lower() in memory})
    return rows


async def run(args: argparse.Namespace, cases: list[dict]) -> list[dict]:
    results: list[dict] = []
    async with bench_daemon(args) as d:
        for n, case in enumerate(cases, 1):
            rows = await run_case(d.url, d.token, case, args.verbose)
            results += rows
            qs = [r for r in rows if "keep" not in r and r["scored"]]
            keeps = [r for r in rows if "keep" in r]
            line = ", ".join(("pass" if r["passed"] else "FAIL " + r["why"])
                             + (f" (third person: {r['third']})" if r["third"] else "")
                             for r in qs)
            line += "".join(f", keep {r['keep']!r} {'kept' if r['kept'] else 'LOST'}"
                            for r in keeps)
            print(f"[{n}/{len(cases)}] {case['id']} {case['kind']}: {line}",
                  file=sys.stderr, flush=True)
    return results


# ------------------------------------------------------------------ report


def summarise(results: list[dict], runs: int) -> dict[str, Any]:
    """Totals over every run: scored questions passed (overall and per kind), third-person
    replies, keep rows kept, invented specifics, turn latencies (s), steps per turn."""
    asked = [r for r in results if "keep" not in r]
    scored = [r for r in asked if r["scored"]]
    keeps = [r for r in results if "keep" in r]
    kinds: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in scored:
        kinds[r["kind"]][0] += r["passed"]
        kinds[r["kind"]][1] += 1
    turns = [r["turn_s"] for r in asked]
    return {
        "runs": runs, "questions": len(scored), "passed": sum(r["passed"] for r in scored),
        "kinds": dict(kinds), "third": [r for r in asked if r["third"]],
        "keeps": len(keeps), "kept": sum(r["kept"] for r in keeps),
        "lost": [r for r in keeps if not r["kept"]],
        "invented": [r for r in asked if r["invented"]],
        "turn_p50": statistics.median(turns) if turns else 0.0,
        "turn_p95": percentile(turns, 95) if turns else 0.0,
        "steps_mean": statistics.mean(r["steps"] for r in asked) if asked else 0.0,
        "tool_calls": sum(len(r["tools"]) for r in asked),
    }


def render(args: argparse.Namespace, results: list[dict], command: str, full_dev: bool) -> str:
    s = summarise(results, args.repeat)
    share = s["passed"] / s["questions"] if s["questions"] else 0.0
    verdict = ("partial run, no verdict" if not full_dev else
               "PASS" if share >= 0.90 and not s["third"] and s["kept"] == s["keeps"]
               else "FAIL")
    kind_rows = "\n".join(f"| {k} | {v[0]}/{v[1]} |" for k, v in sorted(s["kinds"].items()))
    fails = "\n".join(f"- {r['id']} ({r['kind']}) {r['ask'][:60]!r}: {r['why']} — "
                      f"{r['reply'][:160]!r}" for r in results
                      if "keep" not in r and r["scored"] and not r["passed"]) or "- none"
    third = "\n".join(f"- {r['id']}: {r['third']} — {r['reply'][:120]!r}"
                      for r in s["third"]) or "- none"
    lost = ", ".join(f"{r['id']} {r['keep']!r}" for r in s["lost"]) or "none"
    invented = "\n".join(f"- {r['id']} {r['ask'][:50]!r}: {', '.join(r['invented'])}"
                         for r in s["invented"]) or "- none"
    return (
        f"{SECTION}\n\n"
        "Whole conversations through the daemon: each case's statements in sessions of "
        "their own (memory forms by reflection only), then each question in a fresh "
        "session (`bench/data/chain-dev.json`, its `about` defines the scoring; a held-out "
        "split of the same kinds decides). Dev targets with the default model on 2 cores: "
        "≥ 90 % of questions (over the repeats), 0 replies in the third person, every "
        "`keep` row. Replies are sampled: `--repeat N` runs the cases N times on fresh "
        "daemons.\n\n"
        f"- Machine: {machine_line()}\n- Date: {utc_now()}\n- Command: `{command}`\n"
        f"- Model: {model_label(args)}\n\n"
        "| runs | questions passed | third person | keep rows kept | replies with invented "
        "specifics | turn p50 s | turn p95 s | steps per turn | memory tool calls | verdict |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n"
        f"| {s['runs']} | {share:.0%} ({s['passed']}/{s['questions']}) | {len(s['third'])} | "
        f"{s['kept']}/{s['keeps']} | {len(s['invented'])} | {s['turn_p50']:.1f} | "
        f"{s['turn_p95']:.1f} | {s['steps_mean']:.2f} | {s['tool_calls']} | {verdict} |\n\n"
        "| kind | passed |\n|---|---:|\n" + kind_rows + "\n\nWhat failed:\n\n" + fails
        + "\n\nThird person:\n\n" + third + f"\n\nKeep rows lost: {lost}.\n\n"
        "Invented specifics (a month or a number of two or more digits nothing said holds; "
        "computed answers count too):\n\n" + invented + "\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point; 0 when the run completed (the verdict is in the table)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="embedded model name or .gguf (default: the default model)")
    p.add_argument("--llm-url", help="use this llama-server instead of the embedded one")
    p.add_argument("--config", help="config.json text for the daemon")
    p.add_argument("--only", help="comma-separated case ids")
    p.add_argument("--data", type=Path, default=DATA,
                   help="cases file in the dev split's format (default: the dev split)")
    p.add_argument("--repeat", type=int, default=1,
                   help="run the cases N times, each on a fresh daemon (replies are sampled)")
    p.add_argument("--verbose", action="store_true", help="print each turn and reflection")
    p.add_argument("--write", action="store_true", help="write the section to bench/RESULTS.md")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    try:
        every = json.loads(args.data.read_text())["cases"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        p.error(f"cannot read cases from {args.data}: {exc}")
    cases = only_cases(p, every, args.only)
    t0 = time.perf_counter()
    results = repeated(run, args, cases)
    command = "python -m bench.chain " + " ".join(argv if argv is not None else sys.argv[1:])
    full_dev = len(cases) == len(every) and args.data == DATA
    publish(SECTION, render(args, results, command.strip(), full_dev), args.write and full_dev)
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
