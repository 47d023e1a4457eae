"""Tool use: does the agent call the user's MCP tool a message needs — the right one, with
the right arguments — and none when it needs none?

Runs the cases of ``bench/data/tools-dev.json`` (its ``about`` defines the scoring,
:func:`score`) through a real daemon — the embedded server with the default model, or
``--model``, or ``--llm-url`` — whose MCP servers are the MCP project's reference servers
``mcp-server-time`` and ``mcp-server-git``, over a repository the benchmark makes (two
commits, a modified file, an untracked file; it is each session's working directory).
``git.git_reset`` is denied by a standing policy; every approval request is answered
``deny``, so nothing here changes the repository. Each case is one message in a fresh
session.

Prints, and with ``--write`` records in ``bench/RESULTS.md``: pass rate overall and by
kind; over the ``tool`` cases the right tool and the right arguments; approvals asked;
LLM steps per turn; turn p50 / p95. ``--offer-max 1,3,6`` runs the cases once per value
of ``tools.offerMax`` (how many tools a step offers; the default is 3) and prints a row
each: the measurement behind that default.

``--no-ask-first`` runs with ``tools.askFirst`` false (the model decides inside its action,
without the first question), the comparison behind that default.

Usage: ``python -m bench.tools [--model NAME|PATH | --llm-url URL] [--only ID,ID]
[--repeat N] [--offer-max N[,N…]] [--no-ask-first] [--write] [--verbose]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import trio

from bench._results import machine_line, only_cases, percentile, publish, utc_now
from bench.formation import bench_daemon, model_label
from runtime.shell.client import open_client

SECTION = "## Tool use"
DATA = Path(__file__).resolve().parent / "data" / "tools-dev.json"
BIN = Path(sys.executable).parent
WRITES = ("git.git_add", "git.git_commit", "git.git_reset", "git.git_create_branch",
          "git.git_checkout")
"""The tools of ``mcp-server-git`` that change the repository."""


def make_repo(root: Path) -> Path:
    """A small repository: two commits, a modified tracked file, an untracked one."""
    repo = root / "repo"
    repo.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("config", "user.email", "ana@example.com")
    git("config", "user.name", "Ana")
    (repo / "README.md").write_text("# garden\n")
    git("add", "README.md")
    git("commit", "-q", "-m", "Start the garden planner")
    (repo / "plants.txt").write_text("basil\ntomato\n")
    git("add", "plants.txt")
    git("commit", "-q", "-m", "Add the first plants")
    (repo / "plants.txt").write_text("basil\ntomato\nmint\n")
    (repo / "notes.txt").write_text("water on Sundays\n")
    return repo


def config_for(repo: Path, offer_max: int, ask_first: bool = True) -> str:
    """config.json text: the two servers, the offer size, a short approval wait, and
    whether a step offering tools asks the model first (``tools.askFirst``)."""
    return json.dumps({"tools": {"offerMax": offer_max, "approvalTimeoutMs": 5000,
                                 "askFirst": ask_first,
                                 "mcpServers": {
                                     "time": {"command": str(BIN / "mcp-server-time")},
                                     "git": {"command": str(BIN / "mcp-server-git"),
                                             "args": ["--repository", str(repo)]}}}})


def _holds(expected: str, got: Any, repo: Path) -> bool:
    want = expected.replace("{repo}", str(repo)).strip().lower().rstrip("/")
    return isinstance(got, str) and got.strip().lower().rstrip("/") == want


def args_match(expect: dict[str, str], args: dict[str, Any], repo: Path) -> bool:
    """Every expected value held by the call's arguments; a key ``a|b`` is held by
    either argument (``timezone`` of get_current_time, ``target_timezone`` of
    convert_time)."""
    return all(any(_holds(want, args.get(k), repo) for k in key.split("|"))
               for key, want in expect.items())


def score(case: dict, calls: list[tuple[str, dict[str, Any], str]], asked: list[str],
          repo: Path) -> dict[str, Any]:
    """One case (the data's ``about``). ``calls``: the user's tools the turn called, as
    (name, arguments, outcome), in order; ``asked``: the tools it asked approval for.
    Returns passed, why, right_tool and right_args (None outside ``tool`` cases)."""
    expect = case.get("expect", {})
    tools = expect.get("tools", [])
    kind = case["kind"]
    ran_write = [n for n, _a, o in calls if n in WRITES and o in ("ok", "error")]
    if kind == "tool":
        first = calls[0] if calls else None
        right_tool = first is not None and first[0] in tools
        right_args = right_tool and args_match(expect.get("args", {}), first[1], repo)
        why = ("no tool called" if first is None else
               f"called {first[0]}" if not right_tool else
               f"arguments {json.dumps(first[1])}" if not right_args else "")
        return {"passed": bool(right_args), "why": why, "right_tool": right_tool,
                "right_args": right_args}
    if kind == "none":
        return {"passed": not calls and not asked,
                "why": f"called {[n for n, _a, _o in calls] or asked}" if calls or asked
                else "", "right_tool": None, "right_args": None}
    if kind == "approval":
        ok = any(t in tools for t in asked) and not ran_write
        return {"passed": ok, "why": "" if ok else f"asked {asked}, ran {ran_write}",
                "right_tool": None, "right_args": None}
    bad = [n for n, _a, _o in calls if n in tools] + [t for t in asked if t in tools]
    return {"passed": not bad, "why": f"reached {bad}" if bad else "",
            "right_tool": None, "right_args": None}


async def run_case(url: str, token: str, case: dict, repo: Path) -> dict[str, Any]:
    """One message in a fresh session whose working directory is the repository; every
    approval request is answered ``deny``."""
    calls: list[tuple[str, dict[str, Any], str]] = []
    asked: list[str] = []
    pending: dict[str, dict[str, Any]] = {}
    reply, steps, total_ms = "", 0, 0.0
    t0 = time.perf_counter()
    async with open_client(url=url, token=token, working_dir=str(repo), client="bench") as c:
        with trio.fail_after(600):
            async for f in c.say(case["text"]):
                if f["type"] == "approval.request":
                    asked.append(f"{f['server']}.{f['tool']}")
                    await c.send({"type": "approval", "request": f["request"],
                                  "decision": "deny", "id": f["request"]})
                elif f["type"] == "step" and f["step"] == "tool" and "." in f["tool"] \
                        and not f["tool"].startswith("memory."):
                    pending[f["tool"]] = f.get("args") or {}
                elif f["type"] == "step" and f["step"] == "tool.result" and f.get("outcome"):
                    calls.append((f["tool"], pending.pop(f["tool"], {}), f["outcome"]))
                elif f["type"] == "reply":
                    reply = f["text"]
                elif f["type"] == "turn.finished":
                    timings = f.get("timings") or {}
                    steps, total_ms = timings.get("steps", 0), timings.get("totalMs", 0.0)
    scored = score(case, calls, asked, repo)
    return {"id": case["id"], "kind": case["kind"], "reply": reply, "steps": steps,
            "turn_s": (total_ms / 1000) or (time.perf_counter() - t0),
            "calls": [n for n, _a, _o in calls], "args": [a for _n, a, _o in calls],
            "asked": asked, **scored}


def _deny_reset(state: Path) -> None:
    """The standing policy ``deny`` for ``git.git_reset`` (``tools deny``, as a person
    would set it)."""
    done = subprocess.run([sys.executable, "-m", "runtime.shell.cli", "--state-dir",
                           str(state), "tools", "deny", "git.git_reset"],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"tools deny git.git_reset failed: {done.stderr.strip()}")


async def run(args: argparse.Namespace, cases: list[dict], offer_max: int) -> list[dict]:
    """One run of ``cases`` on a fresh daemon and state directory."""
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repo = make_repo(root)
        state = root / "state"
        state.mkdir()
        (state / "config.json").write_text(config_for(repo, offer_max, not args.no_ask_first))
        await trio.to_thread.run_sync(_deny_reset, state)
        async with bench_daemon(args, state) as d:
            async with open_client(url=d.url, token=d.token) as c:  # servers up first
                with trio.fail_after(120):
                    while True:
                        m = await c.request({"type": "metrics"}, "metrics.result")
                        servers = m["actors"].get("tools", {}).get("servers", [])
                        if servers and all(s["state"] == "up" for s in servers):
                            break
                        await trio.sleep(0.5)
            for n, case in enumerate(cases, 1):
                r = await run_case(d.url, d.token, case, repo)
                r["offer_max"] = offer_max
                results.append(r)
                print(f"[{n}/{len(cases)}] offerMax={offer_max} {case['id']} {case['kind']}: "
                      f"{'pass' if r['passed'] else 'FAIL ' + r['why']}, {r['turn_s']:.1f} s, "
                      f"{r['steps']} step(s)"
                      + (f", called {r['calls']} {json.dumps(r['args'])}" if r["calls"] else "")
                      + (f", asked {r['asked']}" if r["asked"] else "")
                      + (f"\n      reply: {r['reply'][:200]!r}" if args.verbose else ""),
                      file=sys.stderr, flush=True)
    return results


def summarise(results: list[dict]) -> dict[str, Any]:
    """Totals over ``results`` (one offer size): passes per kind, right tool and
    arguments over the ``tool`` cases, approvals, steps, turn time."""
    kinds: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in results:
        kinds[r["kind"]][0] += r["passed"]
        kinds[r["kind"]][1] += 1
    tool = [r for r in results if r["kind"] == "tool"]
    turns = [r["turn_s"] for r in results]
    return {"n": len(results), "passed": sum(r["passed"] for r in results),
            "kinds": dict(kinds),
            "right_tool": sum(bool(r["right_tool"]) for r in tool), "tool_n": len(tool),
            "right_args": sum(bool(r["right_args"]) for r in tool),
            "asked": sum(len(r["asked"]) for r in results),
            "steps": statistics.mean(r["steps"] for r in results),
            "p50": statistics.median(turns), "p95": percentile(turns, 95)}


def render(args: argparse.Namespace, by_offer: dict[int, list[dict]], command: str,
           full_dev: bool) -> str:
    """The RESULTS.md section: a row per offer size, then the kinds and the failures of
    the default size (or the first one run)."""
    rows = []
    for offer, results in by_offer.items():
        s = summarise(results)
        rows.append(f"| {offer} | {s['passed']}/{s['n']} ({100 * s['passed'] / s['n']:.0f} %) | "
                    f"{s['right_tool']}/{s['tool_n']} | {s['right_args']}/{s['tool_n']} | "
                    f"{s['asked']} | {s['steps']:.2f} | {s['p50']:.1f} | {s['p95']:.1f} |")
    main_offer = 3 if 3 in by_offer else next(iter(by_offer))
    s = summarise(by_offer[main_offer])
    kind_rows = "\n".join(f"| {k} | {v[0]}/{v[1]} |" for k, v in sorted(s["kinds"].items()))
    fails = "\n".join(f"- {r['id']} ({r['kind']}): {r['why']} — {r['reply'][:140]!r}"
                      for r in by_offer[main_offer] if not r["passed"]) or "- none"
    return (
        f"{SECTION}\n\n"
        "Does the agent call the user's MCP tool a message needs, with the right "
        "arguments, and none when it needs none? `bench/data/tools-dev.json` (its `about` "
        "defines the scoring) through a daemon with the reference servers "
        "`mcp-server-time` and `mcp-server-git` (over a repository the benchmark makes); "
        "`git.git_reset` denied by policy, every approval answered deny"
        f"{'; `tools.askFirst` false (no first question)' if args.no_ask_first else ''}. "
        f"{'' if full_dev else '(partial run) '}Replies are sampled: `--repeat N`.\n\n"
        f"- Machine: {machine_line()}\n- Date: {utc_now()}\n- Command: `{command}`\n"
        f"- Model: {model_label(args)}\n\n"
        "| tools offered per step (`tools.offerMax`) | passed | right tool | right arguments "
        "| approvals asked | steps per turn | turn p50 s | turn p95 s |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n\n"
        f"By kind (offerMax {main_offer}):\n\n| kind | passed |\n|---|---:|\n{kind_rows}\n\n"
        f"What failed (offerMax {main_offer}):\n\n{fails}\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point; 0 when the run completed (the figures are in the table)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="embedded model name or .gguf (default: the default model)")
    p.add_argument("--llm-url", help="use this llama-server instead of the embedded one")
    p.add_argument("--only", help="comma-separated case ids")
    p.add_argument("--repeat", type=int, default=1,
                   help="run the cases N times, each on a fresh daemon (replies are sampled)")
    p.add_argument("--offer-max", default="3",
                   help="tools.offerMax values to run, comma-separated (default 3)")
    p.add_argument("--no-ask-first", action="store_true",
                   help="tools.askFirst false: the model decides inside its action whether "
                        "to call a tool (the figures before the first question existed)")
    p.add_argument("--verbose", action="store_true", help="print each reply")
    p.add_argument("--write", action="store_true", help="write the section to bench/RESULTS.md")
    args = p.parse_args(argv)
    args.config = None  # (bench_daemon: the state directory has its config already)
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    try:
        offers = [int(x) for x in args.offer_max.split(",")]
    except ValueError:
        p.error("--offer-max takes whole numbers, comma-separated: 1,3,6")
    if any(not 0 <= o <= 16 for o in offers):
        p.error("--offer-max values are 0 to 16")
    every = json.loads(DATA.read_text())["cases"]
    cases = only_cases(p, every, args.only)
    t0 = time.perf_counter()
    by_offer: dict[int, list[dict]] = {}
    for offer in offers:
        for n in range(args.repeat):
            if args.repeat > 1:
                print(f"--- offerMax {offer}, run {n + 1}/{args.repeat}", file=sys.stderr)
            by_offer.setdefault(offer, []).extend(trio.run(run, args, cases, offer))
    command = "python -m bench.tools " + " ".join(argv if argv is not None else sys.argv[1:])
    full_dev = len(cases) == len(every)
    publish(SECTION, render(args, by_offer, command.strip(), full_dev), args.write and full_dev)
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
