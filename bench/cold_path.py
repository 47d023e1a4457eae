"""The cold path on the default model: what fills lessons, procedures, links and votes,
and what it costs the reply.

Two fresh daemons (the embedded server with the default model unless ``--model`` /
``--llm-url``), the same pacing (say a turn, wait for its reflection, then
``--think`` seconds as a user reading and typing; a turn aborts side calls still
running, as in real use):

* **on** (default configuration): the formation dev conversations
  (``bench/data/formation-dev.json``, one session per case, memory never cleared) and
  then the scripted multi-session corpus (``bench/data/cold-corpus.json``: one user,
  four sessions, recurring topics); then one consolidator tick with
  ``memory consolidate --ignore-cooldown`` (the notes are minutes old). Then the
  corpus's statements are stored as notes (as ``memory notes store``, an MCP client or
  the agent's tool would: reflection turns most statements about the user into profile
  facts, not notes) and a second tick runs.
* **off** (``memory.links.similarityFloor`` 0, ``memory.consolidation.enabled`` false,
  voting off): the same conversations.
* **votes** (``--phases on,off,votes``): the default plus ``memory.voting.enabled``.

Reported: notes, links (by source), votes, lessons and procedures after the tick; the
tick's cost (duration, clusters, LLM calls); a lexical grounding score per lesson (the
share of its content words found in its parent notes: a proxy, the lessons are printed
in full so a reader can judge them); and the corpus turns' latency with the cold path
on vs off: whole turn (median, p95; it varies with the sampled reply's length) and time
to the first reply piece (what a user waits for; independent of the reply's length),
with their ratios (target ≤ 1.05), and the memory-context time per turn.

Usage: ``python -m bench.cold_path [--model NAME | --llm-url URL] [--formation N]
[--think S] [--phases on,off,votes] [--write]``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from bench._results import machine_line, percentile, publish, utc_now
from runtime.shell.client import open_client
from tests.daemon import run_daemon

DATA = Path(__file__).resolve().parent / "data"
SECTION = "## Cold path: links, votes, lessons"
CONFIGS = {
    "on": None,  # the default configuration: links by meaning, the consolidator
    "off": {"memory": {"voting": {"enabled": False},
                       "links": {"similarityFloor": 0, "autoGenerate": False},
                       "consolidation": {"enabled": False}}},
    "votes": {"memory": {"voting": {"enabled": True}}},  # default + the vote runner
}
REFLECTION_WAIT_S = 240
_WORD = re.compile(r"[a-z][a-z'-]{3,}")
_STOP = set("this that with from they them their there what when where which while would "
            "should could about after before into your have will been were also only "
            "user users user's like likes more most some such than then these those very "
            "make makes made help helps always often every".split())


def content_words(text: str) -> set[str]:
    """Lower-case words of 4+ letters minus stop words, cut to 5 letters (a crude stem)."""
    return {w[:5] for w in _WORD.findall(text.lower()) if w not in _STOP}


def grounding(lesson: dict, parents: list[str]) -> float:
    """Share of the lesson's content words (activation + principle) found in its parents."""
    words = content_words(lesson["activation"] + " " + lesson["principle"])
    have = content_words(" ".join(parents))
    return len(words & have) / len(words) if words else 0.0


async def say_all(url: str, token: str, sessions: list[tuple[str, list[str]]], think: float,
                  label: str, extra: list[dict] | None = None) -> list[float]:
    """Say every turn (one client session per entry); returns turn latencies (s) and
    appends to ``extra`` each turn's time to its first reply piece or step (s) and its
    memory-context time (ms)."""
    latencies = []
    extra = extra if extra is not None else []
    for n, (session, turns) in enumerate(sessions, 1):
        async with open_client(url=url, token=token, session=session) as s:
            await s.request({"type": "subscribe", "channels": ["reflection"]}, "subscribed")
            for text in turns:
                t0 = time.perf_counter()
                frames, first = [], None
                async for f in s.say(text):
                    if first is None and f.get("type") in ("reply.delta", "reply", "step"):
                        first = time.perf_counter() - t0
                    frames.append(f)
                latencies.append(time.perf_counter() - t0)
                timings = frames[-1].get("timings") or {}
                extra.append({"first_s": first if first is not None else latencies[-1],
                              "context_ms": timings.get("contextMs", 0.0)})
                turn = frames[-1].get("turn")
                with trio.move_on_after(REFLECTION_WAIT_S):
                    await s.wait_for(lambda f, t=turn: f.get("type") == "reflection"
                                     and f.get("turn") == t)
                await trio.sleep(think)
        print(f"  [{label}] session {n}/{len(sessions)} done; last turn "
              f"{latencies[-1]:.1f} s", file=sys.stderr, flush=True)
    return latencies


async def phase(args: argparse.Namespace, name: str) -> dict[str, Any]:
    extra = ["--model", args.model] if args.model else []
    corpus = json.loads((DATA / "cold-corpus.json").read_text())["sessions"]
    stamp = int(time.time()) % 10**6
    corpus_sessions = [(f"corpus-{i}-{stamp}", turns) for i, turns in enumerate(corpus, 1)]
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        state.mkdir()
        if CONFIGS[name] is not None:
            (state / "config.json").write_text(json.dumps(CONFIGS[name]))
        async with run_daemon(state, llm_url=args.llm_url, extra=extra,
                              ready_timeout_s=600) as d:
            print(f"[{name}] daemon ready: {d.ready['llmKind']}", file=sys.stderr, flush=True)

            out: dict[str, Any] = {}
            if args.formation:  # every phase: the same memory under the corpus turns
                cases = json.loads((DATA / "formation-dev.json").read_text())["cases"]
                cases = cases[:args.formation]
                await say_all(d.url, d.token, [(f"formation-{c['id']}-{stamp}", c["turns"])
                                     for c in cases], args.think, f"{name}, formation")
            out["turns"] = []
            out["latencies"] = await say_all(d.url, d.token, corpus_sessions, args.think, name,
                                             out["turns"])
            if name != "on":
                if name == "votes":
                    async with open_client(url=d.url, token=d.token) as c:
                        out["votes"] = await c.memory("memory.votes.tail", {"limit": 1000})
                        out["counters"] = (await c.request(
                            {"type": "metrics"}, "metrics.result"))["counters"]
                return out
            await trio.sleep(args.think)
            async with open_client(url=d.url, token=d.token) as c:
                out["conversation"] = await tick(c)
                out["facts"] = len(await c.memory("memory.profile.list"))
                # The same corpus's statements stored as notes, as `memory notes store`,
                # an MCP client or the agent's tool write them: reflection turns most
                # statements about the user into profile facts, so notes are what the
                # consolidator gets from other writers.
                statements = [t for turns in corpus for t in turns if not t.endswith("?")]
                for text in statements:
                    await c.memory("memory.notes.store", {"content": text})
                with trio.move_on_after(120):  # until every note is embedded and linked
                    while True:
                        st = await c.memory("memory.stats")
                        if st["embeddings"].get("vectors", 0) >= st["notes"]:
                            break
                        await trio.sleep(1)
                await trio.sleep(2)
                out["stored"] = await tick(c)
                metrics = await c.request({"type": "metrics"}, "metrics.result")
                out["counters"] = metrics["counters"]
                out["notes_total"] = len(await c.memory(
                    "memory.notes.list", {"limit": 200, "archived": "all"}))
                out["links"] = len(await c.memory("memory.links.list", {"limit": 1000}))
                out["votes"] = await c.memory("memory.votes.tail", {"limit": 1000})
            return out


async def tick(c) -> dict[str, Any]:
    """One consolidator tick (``--ignore-cooldown``) and what it made."""
    t0 = time.perf_counter()
    report = await c.memory("memory.consolidate", {"ignoreCooldown": True})
    out: dict[str, Any] = {"report": report, "tick_s": time.perf_counter() - t0}
    lessons = []
    for lid in report["lessons"]:
        lesson = await c.memory("memory.lessons.get", {"id": lid})
        parents = []
        for pid in lesson["parentIds"]:
            parents += [n["content"] for n in await c.memory("memory.notes.recall", {"id": pid})]
        lesson["parents"] = parents
        lesson["grounding"] = grounding(lesson, parents)
        lessons.append(lesson)
    out["lessons"] = lessons
    out["procedures"] = [await c.memory("memory.procedures.get", {"id": pid})
                         for pid in report["procedures"]]
    return out


def _ms(xs: list[float]) -> tuple[float, float]:
    return statistics.median(xs), percentile(xs, 95)


def _tick_rows(name: str, t: dict[str, Any]) -> list[str]:
    r = t["report"]
    ground = (f"{statistics.mean(x['grounding'] for x in t['lessons']):.0%}"
              if t["lessons"] else "–")
    return [
        f"| {name}: tick outcome, clusters | {r['outcome']}, {r['clusters']} (abstained "
        f"{r['abstained']}, failed {r['failed']}, changed {r['changed']}) |",
        f"| {name}: lessons / procedures made | {len(r['lessons'])} / {len(r['procedures'])} |",
        f"| {name}: tick cost | {t['tick_s']:.1f} s ({t['tick_s'] / max(1, r['clusters']):.1f} s "
        "per cluster, one LLM call each) |",
        f"| {name}: lexical grounding (share of a lesson's content words in its parents) "
        f"| {ground} |",
    ]


def first(run: dict) -> float:
    """Median time to a turn's first reply piece (s): independent of the reply's length."""
    return statistics.median(t["first_s"] for t in run["turns"])


def ctx(run: dict) -> float:
    """Median memory-context time of a turn (ms, ``turn.finished`` timings)."""
    return statistics.median(t["context_ms"] for t in run["turns"])


def render(runs_by: dict[str, dict], command: str) -> str:
    on, off = runs_by["on"], runs_by["off"]
    med_on, p95_on = _ms(on["latencies"])
    med_off, p95_off = _ms(off["latencies"])
    c = on["counters"]
    links_sim = c.get("agent.memory.links_written{source=similarity}", 0)
    links_gen = c.get("agent.memory.links_written{source=generator}", 0)
    voted = runs_by.get("votes")
    votes = voted["votes"] if voted else []
    up = sum(1 for v in votes if v["direction"] > 0)
    runs = {k.split("=")[1].rstrip("}"): v for k, v in (voted or {}).get("counters", {}).items()
            if k.startswith("agent.memory.vote_runner{")}
    lines = [
        SECTION, "",
        f"`{command}` — {utc_now()}; {machine_line()}", "",
        "| | figure |", "|---|---:|",
        f"| profile facts after the conversations | {on['facts']} |",
        f"| notes at the end (conversations + the corpus stored as notes) | {on['notes_total']} |",
        f"| links: by similarity / by the LLM generator (off by default) | {links_sim} / "
        f"{links_gen} (total edges {on['links']}) |",
        "| vote runner (phase \"votes\" only; off by default): calls by outcome | "
        + (", ".join(f"{k} {v}" for k, v in sorted(runs.items())) or "–") + " |",
        f"| votes applied (up / down), phase \"votes\" | {len(votes)} ({up} / {len(votes) - up}) |",
        *_tick_rows("after the conversations", on["conversation"]),
        *_tick_rows("after storing the corpus as notes", on["stored"]),
        f"| corpus turn latency, cold path on: median / p95 | {med_on:.1f} / {p95_on:.1f} s |",
        f"| corpus turn latency, cold path off: median / p95 | {med_off:.1f} / {p95_off:.1f} s |",
        f"| ratio on / off: median / p95 (target ≤ 1.05) | {med_on / med_off:.2f} / "
        f"{p95_on / p95_off:.2f} |",
        f"| time to the first reply piece, on / off: median (ratio) | "
        f"{first(on):.2f} / {first(off):.2f} s ({first(on) / first(off):.2f}) |",
        f"| memory context per turn, on / off: median | {ctx(on):.1f} / {ctx(off):.1f} ms |",
        *([f"| time to the first reply piece, default + vote runner: median (ratio to off) | "
           f"{first(voted):.2f} s ({first(voted) / first(off):.2f}) |"] if voted else []),
        *([f"| corpus turn latency, default + vote runner: median / p95; ratio to off | "
           f"{_ms(voted['latencies'])[0]:.1f} / {_ms(voted['latencies'])[1]:.1f} s; "
           f"{_ms(voted['latencies'])[0] / med_off:.2f} / "
           f"{_ms(voted['latencies'])[1] / p95_off:.2f} |"] if voted else []),
        "",
        "Lessons and procedures as made (activation → principle; parents), to judge:", "",
    ]
    for t in (on["conversation"], on["stored"]):
        for x in t["lessons"]:
            lines.append(f"- *{x['id']} [{','.join(x['tags'])}] {x['activation']} → "
                         f"{x['principle']} (grounding {x['grounding']:.0%}); parents: "
                         + " | ".join(p[:90] for p in x["parents"]))
        for p in t["procedures"]:
            steps = "; ".join(s["description"] for s in p["steps"])
            lines.append(f"- >{p['id']} {p['activation']}: {steps}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run both phases and print (``--write``: record) the section."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="embedded model name or .gguf (default: the default model)")
    p.add_argument("--llm-url", help="use this llama-server instead of the embedded one")
    p.add_argument("--formation", type=int, default=30,
                   help="formation dev cases said before the corpus in every phase "
                        "(default all 30)")
    p.add_argument("--phases", default="on,off",
                   help="comma-separated: on (default config), off (cold path off), votes "
                        "(default + the vote runner); default on,off")
    p.add_argument("--think", type=float, default=5.0,
                   help="seconds between a turn's reflection and the next turn (default 5)")
    p.add_argument("--write", action="store_true", help="write the section to bench/RESULTS.md")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    names = [n for n in args.phases.split(",") if n]
    if not {"on", "off"} <= set(names) or set(names) - set(CONFIGS):
        p.error("--phases must include on and off, and only on, off, votes")
    runs = {name: trio.run(phase, args, name) for name in names}
    raw = Path(tempfile.gettempdir()) / "bench-cold-path.json"
    raw.write_text(json.dumps(runs))  # kept, so a report can be re-rendered
    print(f"raw figures: {raw}", file=sys.stderr)
    command = "python -m bench.cold_path " + " ".join(argv if argv is not None else sys.argv[1:])
    publish(SECTION, render(runs, command.strip()), args.write)
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
