"""What link expansion costs a reply: the same memory with and without links,
the same questions, each on its own llama-server, turns alternated so drift falls on both arms.

Link expansion (``memory.links.maxExpanded``; docs/architecture.md §4, step 4) is the only per-turn
work the cold path adds in the default configuration: the consolidator is periodic
(hours), the link generator and the vote runner are off, links by meaning are written
by the backfill actor after a note is embedded. So the cold path's reply-latency bar
(on ≤ 1.05 × off) is decided here: a recalled note's linked neighbours are
added to ``### recalled`` and make the prompt's tail longer, and every tail token is
prefilled before the first reply token (the stable prefix is cached by the server).

Method: one state directory is built with a daemon (default configuration, reflection
off so that turns do not change memory): LoCoMo dev conversation 0's observations are
stored as notes (``memory notes store``), embedded and linked by meaning by the daemon
itself. It is copied; the copy's links are deleted ("off": what the store looks like
with ``memory.links.similarityFloor`` 0). Two daemons then serve the copies, each on its
own embedded llama-server (so each server's prompt cache holds its own daemon's last
turn, as in real use: a shared server would mix the arms' cached prompts), and each of
``--questions`` of the conversation's questions is asked on both in ABBA order,
``--repeats`` times, each in a new session (only one daemon works at a time).
Reported: the tail's tokens (``/tokenize`` of the debug frame's tail), the server's
prompt processing time and tokens (``turn.finished`` ``promptMs`` / ``prefillTokens``:
what the tail costs, free of sampling), the time to the first reply piece (what a user
waits for; it includes any tokens the model writes before its reply text, and a whole
extra step when it calls a tool first: sampling, not the tail, decides those), the
whole turn, and their on/off ratios.

With the default configuration the expansion follows only links written by
``memory.links.add`` and the link generator, and the store has none: the "on" arm then
shows what links by meaning cost a turn when they are not expanded (they should cost
nothing). ``--expand-by-meaning`` measures what expanding them costs (the earlier
behaviour, and this project's default before the measurement).

Usage: ``python -m bench.link_expansion [--questions N] [--repeats R] [--notes N]
[--expand-by-meaning] [--write]``; raw figures in ``/tmp/bench-link-expansion.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import apsw
import httpx
import trio

from bench._results import machine_line, percentile, publish, utc_now
from runtime.shell.client import open_client
from tests.daemon import run_daemon

DATA = Path(__file__).resolve().parent / "data"
SECTION = "## Cold path: what link expansion costs a reply"
FROZEN = {"memory": {"reflection": {"enabled": False}}}  # turns leave memory unchanged


def observations(limit: int) -> list[str]:
    """LoCoMo dev conversation 0's observations (one note each), at most ``limit``."""
    conv = json.loads((DATA / "locomo-dev.json").read_text())[0]
    out: list[str] = []
    for _, by_speaker in sorted(conv["observation"].items(),
                                key=lambda kv: int(kv[0].split("_")[1])):
        for items in by_speaker.values():
            out += [text for text, _ in items]
    return out[:limit]


def questions(n: int) -> list[str]:
    """The first ``n`` single- and multi-hop questions of conversation 0 (categories 1-2)."""
    conv = json.loads((DATA / "locomo-dev.json").read_text())[0]
    return [q["question"] for q in conv["qa"] if q.get("category") in (1, 2)][:n]


async def build(state: Path, notes: list[str]) -> dict[str, int]:
    """Store ``notes`` through a daemon; wait until each is embedded and linked."""
    async with run_daemon(state, ready_timeout_s=600) as d:
        async with open_client(url=d.url, token=d.token) as c:
            for text in notes:
                await c.memory("memory.notes.store", {"content": text})
            with trio.move_on_after(600):
                while True:
                    st = await c.memory("memory.stats")
                    if st["embeddings"].get("vectors", 0) >= st["notes"]:
                        break
                    await trio.sleep(1)
            await trio.sleep(3)  # the last note's links
            st = await c.memory("memory.stats")
            links = len(await c.memory("memory.links.list", {"limit": 10000}))
            print(f"built: {st['notes']} notes, {links} links", file=sys.stderr, flush=True)
            return {"notes": st["notes"], "links": links}


def unlink(state: Path) -> None:
    """Delete every link of the copy (the store as it is with links by meaning off)."""
    conn = apsw.Connection(str(state / "memory.sqlite"))
    with conn:
        conn.execute("DELETE FROM memory_links")
    conn.close()


async def ask(url: str, token: str, llm: str, session: str, text: str) -> dict[str, Any]:
    """One turn in a new session: first reply piece (s), whole turn (s), tail tokens."""
    async with open_client(url=url, token=token, session=session) as s:
        t0 = time.perf_counter()
        first, tail, timings = None, "", {}
        async for f in s.say(text, debug=True):
            if f.get("type") == "turn.finished":
                timings = f.get("timings") or {}
            kind = f.get("type")
            if kind == "step" and f.get("step") == "prompt" and not tail:
                tail = f.get("tail", "")
            if first is None and kind in ("reply.delta", "reply"):
                first = time.perf_counter() - t0
        total = time.perf_counter() - t0
    async with httpx.AsyncClient(timeout=30) as http:
        tokens = len((await http.post(f"{llm}/tokenize", json={"content": tail})).json()["tokens"])
    return {"first_s": first if first is not None else total, "total_s": total,
            "steps": timings.get("steps", 0), "prompt_ms": timings.get("promptMs", 0.0),
            "prefill_tokens": timings.get("prefillTokens", 0),
            "tail_tokens": tokens, "recalled": tail.count("\n*") if tail else 0}


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    qs = questions(args.questions)
    with tempfile.TemporaryDirectory() as tmp:
        on, off = Path(tmp) / "on", Path(tmp) / "off"
        on.mkdir()
        cfg = json.loads(json.dumps(FROZEN))
        if args.expand_by_meaning:
            cfg["memory"]["links"] = {"expandByMeaning": True}
        (on / "config.json").write_text(json.dumps(cfg))
        built = await build(on, observations(args.notes))
        shutil.copytree(on, off, ignore=shutil.ignore_patterns("*.pid", "daemon.json", "*.lock"))
        unlink(off)
        runs: dict[str, list[dict]] = {"on": [], "off": []}
        async with run_daemon(on, ready_timeout_s=600) as a:
            async with run_daemon(off, ready_timeout_s=600) as b:
                arms = {"on": a, "off": b}
                # One warm-up turn per arm: the stable prefix is prefilled once per slot.
                for name, d in arms.items():
                    await ask(d.url, d.token, d.ready["llm"], f"warm-{name}", "Hello!")
                for rep in range(args.repeats):
                    for i, q in enumerate(qs):
                        order = ("on", "off") if (i + rep) % 2 == 0 else ("off", "on")
                        for name in order:
                            d = arms[name]
                            r = await ask(d.url, d.token, d.ready["llm"], f"q{rep}-{i}-{name}", q)
                            r["question"] = q
                            runs[name].append(r)
                        print(f"  rep {rep + 1} q {i + 1}/{len(qs)}: first on "
                              f"{runs['on'][-1]['first_s']:.2f} s off "
                              f"{runs['off'][-1]['first_s']:.2f} s, tail tokens "
                              f"{runs['on'][-1]['tail_tokens']}/{runs['off'][-1]['tail_tokens']}",
                              file=sys.stderr, flush=True)
        return {"built": built, "runs": runs}


def render(out: dict[str, Any], command: str, heading: str) -> str:
    on, off = out["runs"]["on"], out["runs"]["off"]

    def med(rows: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    def p95(rows: list[dict], key: str) -> float:
        return percentile([r[key] for r in rows], 95)

    # A turn whose model called a tool first waits a whole extra LLM step for its first
    # reply piece (sampling decides, not the tail): the paired figure keeps the questions
    # both arms answered in one step, so it shows the tail's prefill alone.
    one = [(a, b) for a, b in zip(on, off) if a["steps"] == 1 and b["steps"] == 1]
    pairs = [a["first_s"] / b["first_s"] for a, b in one if b["first_s"] > 0]
    prefill = [(a, b) for a, b in one if a["prompt_ms"] > 0 and b["prompt_ms"] > 0]
    lines = [
        heading, "",
        f"Command: `{command}` ({utc_now()}; {machine_line()}; default model). Store: "
        f"{out['built']['notes']} notes (LoCoMo dev conversation 0's observations), "
        f"{out['built']['links']} links by meaning in \"on\", none in \"off\"; "
        f"{len(on)} turns per arm, ABBA order, one embedded llama-server per arm.",
        "",
        "| | on (links) | off (no links) | on / off |",
        "|---|---|---|---|",
        f"| tail tokens (median) | {med(on, 'tail_tokens'):.0f} | {med(off, 'tail_tokens'):.0f} "
        f"| {med(on, 'tail_tokens') / med(off, 'tail_tokens'):.2f} |",
        f"| prompt processing of one-step turns ({len(prefill)} pairs), server-reported, "
        f"median (ms) | {statistics.median(a['prompt_ms'] for a, _ in prefill):.0f} | "
        f"{statistics.median(b['prompt_ms'] for _, b in prefill):.0f} | "
        f"{statistics.median(a['prompt_ms'] / b['prompt_ms'] for a, b in prefill):.2f} "
        "(median of per-question ratios) |" if prefill else
        "| prompt processing (server-reported) | – | – | – |",
        f"| prefill tokens of one-step turns (median) | "
        f"{statistics.median(a['prefill_tokens'] for a, _ in one) if one else 0:.0f} | "
        f"{statistics.median(b['prefill_tokens'] for _, b in one) if one else 0:.0f} | |",
        f"| time to first reply piece, median (s) | {med(on, 'first_s'):.2f} | "
        f"{med(off, 'first_s'):.2f} | {med(on, 'first_s') / med(off, 'first_s'):.2f} |",
        f"| time to first reply piece, p95 (s) | {p95(on, 'first_s'):.2f} | "
        f"{p95(off, 'first_s'):.2f} | {p95(on, 'first_s') / p95(off, 'first_s'):.2f} |",
        f"| first reply piece, questions both arms answered in one step ({len(one)}), "
        f"median (s) | {statistics.median(a['first_s'] for a, _ in one):.2f} | "
        f"{statistics.median(b['first_s'] for _, b in one):.2f} | "
        f"{statistics.median(pairs):.2f} (median of per-question ratios) |" if one else
        "| first reply piece, questions both arms answered in one step | – | – | – |",
        f"| whole turn, median (s) | {med(on, 'total_s'):.2f} | {med(off, 'total_s'):.2f} | "
        f"{med(on, 'total_s') / med(off, 'total_s'):.2f} |",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Build, measure both arms, print (``--write``: record) the section."""
    p = argparse.ArgumentParser(prog="python -m bench.link_expansion", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--notes", type=int, default=200, help="notes stored (default 200; conversation 0 has 184)")
    p.add_argument("--questions", type=int, default=16, help="questions asked (default 16)")
    p.add_argument("--repeats", type=int, default=2, help="passes over the questions")
    p.add_argument("--expand-by-meaning", action="store_true",
                   help="set memory.links.expandByMeaning (both arms): the prompt's link "
                        "expansion also follows links by meaning (off by default)")
    p.add_argument("--write", action="store_true", help="write the section to bench/RESULTS.md")
    args = p.parse_args(argv)
    out = trio.run(measure, args)
    Path("/tmp/bench-link-expansion.json").write_text(json.dumps(out, indent=1))
    command = "python -m bench.link_expansion " + " ".join(argv if argv is not None
                                                            else sys.argv[1:])
    heading = SECTION + (": links by meaning expanded" if args.expand_by_meaning
                         else ": the default (links by meaning not expanded)")
    publish(heading, render(out, command.strip(), heading), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
