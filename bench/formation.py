"""Memory formation: do stated facts land in memory, and nothing wrong with them?

Runs the memory-formation cases (``bench/data/formation-dev.json``; its ``about`` field
defines the scoring, implemented by :func:`score_case`) through a real daemon — by
default the embedded server with the default model, or ``--model NAME|PATH``, or your
own server with ``--llm-url`` — one fresh session per case, starting from an empty
memory (every active fact and note removed first). Each turn is said, its reply awaited,
then its reflection event; after the last turn, the active profile and notes are scored.

Prints, and with ``--write`` records in ``bench/RESULTS.md`` (one row per model; rows of
other models measured earlier are kept):

* recall — expected items found / expected items (target ≥ 90 % on the dev split);
* violations — forbid matches + ``absent_after`` failures + entries added by
  ``expect_nothing`` cases (target 0);
* precision — entries matching an expected or ``allow``-ed item / all entries (target
  ≥ 90 %); invented — entries holding a number or a name the user did not say (target
  0); stale — active notes stating an earlier value of a current fact (target 0);
* per-kind results; median and p95 turn latency (say → ``turn.finished``; target median
  ≤ 10 s) and the time from ``turn.finished`` until the turn's reflection lands (p50,
  p95; outcomes counted — target: every reflection lands within its timeout).

Usage: ``python -m bench.formation [--model NAME|PATH | --llm-url URL] [--cases N]
[--only ID,ID] [--quick] [--repeat N] [--write] [--verbose]``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from bench._results import RESULTS, machine_line, percentile, publish, utc_now
from runtime.services.models import DEFAULT_MODEL, MODELS
from runtime.shell.client import open_client
from tests.daemon import run_daemon

SECTION = "## Memory formation"
DATA = Path(__file__).resolve().parent / "data" / "formation-dev.json"
REFLECTION_WAIT_S = 240.0
"""Longest wait for one turn's reflection event (beyond any sane timeoutMs)."""


# ------------------------------------------------------------------ scoring


def entries(profile: list[dict], notes: list[dict]) -> list[tuple[str, str, str]]:
    """Active memory as ``(where, key, text)``: profile facts as ``"key value"``, notes
    as their content (key ``""``)."""
    out = [("profile", f["key"], f"{f['key']} {f['value']}") for f in profile]
    out += [("notes", "", n["content"]) for n in notes]
    return out


def _has_all(text: str, parts: list[str]) -> bool:
    low = text.lower()
    return all(p.lower() in low for p in parts)


_DIGITS = re.compile(r"\d+")
_NUMBER_NAMES = ("zero one two three four five six seven eight nine ten eleven twelve "
                 "thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty").split()
_WORDS = re.compile(r"[^\W_]+")


def invented(text: str, user_text: str) -> bool:
    """An entry holds a number, or a capitalised word past a sentence's start, that the
    user's turns do not (the data's ``about``): "June 30, 2024" for "in June"; a number
    the user spelled out counts as said ("six" is 6). Compared
    case-insensitively by the word's first five letters ("Brazilian" for "Brazil");
    the key of a profile entry (before its first space) is not checked. Names are not
    judged when the user wrote in another script than the entry (a Latin "Olya" for
    "Ольга" cannot be told from an invention by spelling); numbers always are."""
    said_digits = {d.lstrip("0") for d in _DIGITS.findall(user_text)}
    said_digits |= {str(n) for n, w in enumerate(_NUMBER_NAMES) if re.search(rf"\b{w}\b",
                                                                       user_text, re.I)}
    if any(d.lstrip("0") and d.lstrip("0") not in said_digits for d in _DIGITS.findall(text)):
        return True
    said = {w.lower()[:5] for w in _WORDS.findall(user_text)}
    latin = sum(1 for ch in user_text if ch.isascii() and ch.isalpha())
    if latin < sum(1 for ch in user_text if ch.isalpha()) / 2:
        return False
    for m in _WORDS.finditer(text):
        w, before = m.group(), text[:m.start()].rstrip()
        if not w[:1].isupper() or not before or before[-1] in ".!?:;\"(" or w.isupper():
            continue
        if w.lower() in ("the", "user", "i") or w.lower()[:5] in said:
            continue
        return True
    return False


def stale_notes(mem: list[tuple[str, str, str]], history: dict[str, list[str]]) -> list[str]:
    """Active notes holding an earlier value of an active fact (``history``: key → its
    earlier values, oldest first) and not its current value."""
    current = {k: t[len(k) + 1:] for w, k, t in mem if w == "profile"}
    out = []
    for key, earlier in history.items():
        now = current.get(key, "").lower()
        for old in earlier:
            words = [w.lower() for w in _WORDS.findall(old) if len(w) >= 3]
            if not words or old.lower() == now:
                continue
            for where, _k, text in mem:
                low = text.lower()
                if where == "notes" and all(w in low for w in words) and (
                        not now or now not in low) and text not in out:
                    out.append(text)
    return out


def score_case(case: dict, mem: list[tuple[str, str, str]],
               history: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """Score one case against active memory ``mem`` (see the data's ``about``):
    ``{"expected", "found", "violations", "entries", "precise", "invented", "stale",
    "details"}``; ``history``: each active fact's earlier values (for ``stale``)."""
    found, details = 0, []
    for item in case.get("expect", []):
        hit = any(any(_has_all(text, alt) for alt in item) for _w, _k, text in mem)
        found += hit
        if not hit:
            details.append(f"missing {item}")
    violations = 0
    for rule in case.get("forbid", []):
        for where, key, text in mem:
            if rule.get("where") and rule["where"] != where:
                continue
            if rule.get("key_re") and (where != "profile" or not re.search(rule["key_re"], key)):
                continue
            if _has_all(text, rule["all"]) and not any(
                    n.lower() in text.lower() for n in rule.get("none_of", [])):
                violations += 1
                details.append(f"forbidden {rule['all']} in {where}: {text[:80]!r}")
                break
    for parts in case.get("absent_after", []):
        if any(_has_all(text, parts) for _w, _k, text in mem):
            violations += 1
            details.append(f"still present {parts}")
    if case.get("expect_nothing") and mem:
        violations += len(mem)
        details.append(f"added {len(mem)} entries: {[t[:50] for _w, _k, t in mem]}")
    alternatives = [alt for item in case.get("expect", []) for alt in item] + case.get("allow", [])
    user_text = " ".join(case["turns"])
    precise = made_up = 0
    for where, key, text in mem:
        if any(_has_all(text, alt) for alt in alternatives):
            precise += 1
        else:
            details.append(f"imprecise {where}: {text[:80]!r}")
        checked = text[len(key) + 1:] if where == "profile" else text
        if invented(checked, user_text):
            made_up += 1
            details.append(f"invented {where}: {text[:80]!r}")
    stale = stale_notes(mem, history or {})
    details += [f"stale note: {t[:80]!r}" for t in stale]
    return {"expected": len(case.get("expect", [])), "found": found,
            "violations": violations, "entries": len(mem), "precise": precise,
            "invented": made_up, "stale": len(stale), "details": details}


# ------------------------------------------------------------------ running


async def clear_memory(c) -> None:
    """Remove every active profile fact and every note (the runner's fresh start)."""
    for fact in await c.memory("memory.profile.list"):
        await c.memory("memory.profile.remove", {"key": fact["key"]})
    while notes := await c.memory("memory.notes.list", {"limit": 200, "archived": "all"}):
        for note in notes:
            await c.memory("memory.notes.forget", {"id": note["id"]})


async def snapshot(c) -> tuple[list[tuple[str, str, str]], dict[str, list[str]]]:
    """Active memory as :func:`entries`, and each active fact's earlier values."""
    profile = await c.memory("memory.profile.list")
    notes = await c.memory("memory.notes.list", {"limit": 200})
    history = {}
    for f in profile:
        versions = await c.memory("memory.profile.history", {"key": f["key"]})
        history[f["key"]] = [v["value"] for v in versions if v["id"] != f["id"]]
    return entries(profile, notes), history


async def run_case(url: str, token: str, case: dict, verbose: bool) -> dict[str, Any]:
    """One case in a fresh session; returns its score plus timings and outcomes."""
    turns_s, land_s, outcomes = [], [], []
    async with open_client(url=url, token=token) as admin:
        await clear_memory(admin)
    session = f"formation-{case['id']}-{int(time.time() * 1000) % 10**8}"
    async with open_client(url=url, token=token, session=session) as c:
        await c.request({"type": "subscribe", "channels": ["reflection"]}, "subscribed")
        for text in case["turns"]:
            t0 = time.perf_counter()
            frames = [f async for f in c.say(text)]
            t_done = time.perf_counter()
            turns_s.append(t_done - t0)
            finished = frames[-1]
            turn = finished.get("turn")
            if verbose:
                reply = next((f.get("text", "") for f in frames if f.get("type") == "reply"), "")
                print(f"    {text[:60]!r} → {finished.get('reason')}: {reply[:80]!r}",
                      file=sys.stderr)
            event = None
            with trio.move_on_after(REFLECTION_WAIT_S):
                event = await c.wait_for(lambda f, t=turn: f.get("type") == "reflection"
                                         and f.get("turn") == t)
            if event is None:
                outcomes.append("no event")
                continue
            land_s.append(time.perf_counter() - t_done)
            outcomes.append(event["outcome"])
            if verbose:
                print(f"      reflection {event['outcome']} {event.get('latencyMs')} ms "
                      f"facts {event.get('factKeys')} notes {event.get('noteIds')} forgot "
                      f"{event.get('forgottenKeys')} {event.get('forgottenNoteIds')} "
                      f"{event.get('reason') or ''}", file=sys.stderr)
        mem, history = await snapshot(c)
    result = score_case(case, mem, history)
    result.update(turns_s=turns_s, land_s=land_s, outcomes=outcomes, kind=case["kind"],
                  id=case["id"], memory=[t for _w, _k, t in mem])
    return result


@asynccontextmanager
async def bench_daemon(args: argparse.Namespace, state: Path | None = None
                       ) -> AsyncIterator[Any]:
    """A daemon for a benchmark run on ``state`` (default: a fresh temporary state
    directory, removed afterwards): the embedded server with ``args.model`` (default
    model when None) or ``args.llm_url``, ``args.config`` as its config.json (written
    when the directory has none), debug logs with ``args.verbose``."""
    extra = ["--log-level", "debug"] if args.verbose else []
    if args.model:
        extra += ["--model", args.model]
    with tempfile.TemporaryDirectory() as tmp:
        state = state or Path(tmp) / "state"
        if args.config and not (state / "config.json").exists():
            state.mkdir(parents=True, exist_ok=True)
            (state / "config.json").write_text(args.config)
        async with run_daemon(state, llm_url=args.llm_url, extra=extra,
                              ready_timeout_s=600) as d:
            print(f"daemon ready: {d.ready['llmKind']}", file=sys.stderr)
            yield d


async def run(args: argparse.Namespace, cases: list[dict]) -> list[dict]:
    results = []
    async with bench_daemon(args) as d:
        seen = 0
        for n, case in enumerate(cases, 1):
            r = await run_case(d.url, d.token, case, args.verbose)
            results.append(r)
            if args.verbose:  # what the model wrote and what the guards dropped
                lines = d.stderr_path.read_text(errors="replace").splitlines()
                for line in lines[seen:]:
                    if '"reflection.completion"' in line or '"reflection.dropped"' in line:
                        rec = json.loads(line)
                        print(f"      {rec['event']}: "
                              f"{rec.get('text') or rec.get('reasons')} "
                              f"{rec.get('fact_keys') or ''}", file=sys.stderr)
                seen = len(lines)
            print(f"[{n}/{len(cases)}] {case['id']} {case['kind']}: found "
                  f"{r['found']}/{r['expected']}, violations {r['violations']}, turns "
                  f"{', '.join(f'{t:.1f}' for t in r['turns_s'])} s, reflection "
                  f"{', '.join(r['outcomes'])}"
                  + (f"; {'; '.join(r['details'])}" if r["details"] else ""),
                  file=sys.stderr, flush=True)
    return results


# ------------------------------------------------------------------ report


def summarise(results: list[dict]) -> dict[str, Any]:
    expected = sum(r["expected"] for r in results)
    found = sum(r["found"] for r in results)
    turns = [t for r in results for t in r["turns_s"]]
    land = [t for r in results for t in r["land_s"]]
    outcomes = Counter(o for r in results for o in r["outcomes"])
    return {"cases": len(results), "expected": expected, "found": found,
            "recall": found / expected if expected else 0.0,
            "violations": sum(r["violations"] for r in results),
            "turn_p50": statistics.median(turns) if turns else float("nan"),
            "turn_p95": percentile(turns, 95) if turns else float("nan"),
            "land_p50": statistics.median(land) if land else float("nan"),
            "land_p95": percentile(land, 95) if land else float("nan"),
            "outcomes": outcomes,
            "entries": sum(r.get("entries", 0) for r in results),
            "precise": sum(r.get("precise", 0) for r in results),
            "invented": sum(r.get("invented", 0) for r in results),
            "stale": sum(r.get("stale", 0) for r in results)}


def model_label(args: argparse.Namespace) -> str:
    if args.llm_url:
        return f"server at {args.llm_url}"
    name = args.model or DEFAULT_MODEL
    model = MODELS.get(name)
    return f"{model.title} (`{name}`)" if model else f"`{name}`"


HEADER = ("| model | cases | recall | violations | turn p50 s | turn p95 s | reflection "
          "lands p50 s | p95 s | outcomes | date | verdict | precision | invented | stale |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|---:|---:|")


def row(label: str, s: dict[str, Any], full_dev: bool, is_default: bool,
        recalls: list[float] | None = None) -> str:
    runs = len(recalls) if recalls else 1
    precision_share = s["precise"] / s["entries"] if s["entries"] else 1.0
    precision = f"{precision_share:.0%} ({s['precise']}/{s['entries']})"
    ok = (s["recall"] >= 0.90 and s["violations"] == 0 and s["turn_p50"] <= 10
          and precision_share >= 0.90 and s["invented"] == 0 and s["stale"] == 0
          and not (s["outcomes"]["timeout"] or s["outcomes"]["no event"]))
    if not full_dev:
        verdict = "partial run, no verdict"
    elif not is_default:
        verdict = "comparison (the targets are the default model's)"
    else:
        verdict = "PASS" if ok else "FAIL"
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(s["outcomes"].items()))
    spread = (f" [{min(recalls):.0%}–{max(recalls):.0%} over {len(recalls)} runs]"
              if recalls and len(recalls) > 1 else "")
    return (f"| {label} | {s['cases']} | {s['recall']:.0%} ({s['found']}/{s['expected']}){spread} | "
            f"{s['violations']} | {s['turn_p50']:.1f} | {s['turn_p95']:.1f} | "
            f"{s['land_p50']:.1f} | {s['land_p95']:.1f} | {outcomes} | {utc_now()} | {verdict} | "
            f"{precision} | {s['invented']} | {s['stale']} |")


def kept_rows(label: str) -> list[str]:
    """Rows of other models in the current RESULTS.md section."""
    text = RESULTS.read_text() if RESULTS.exists() else ""
    start = text.find(SECTION + "\n")
    if start == -1:
        return []
    end = text.find("\n## ", start + 1)
    body = text[start:end if end != -1 else len(text)]
    table = body[body.find("| model |"):].split("\n\n")[0]  # the model table only
    return [ln for ln in table.splitlines()[2:] if ln.startswith("| ")
            and not ln.startswith(f"| {label} |")]


def render(args: argparse.Namespace, results: list[dict], command: str, full_dev: bool) -> str:
    s = summarise(results)
    label = model_label(args)
    is_default = not args.llm_url and (args.model or DEFAULT_MODEL) == DEFAULT_MODEL
    rows = [row(label, s, full_dev, is_default, getattr(args, "recalls", None))] + kept_rows(label)
    kinds: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for r in results:
        k = kinds[r["kind"]]
        k[0] += 1
        k[1] += r["found"]
        k[2] += r["expected"]
        k[3] += r["violations"]
    kind_rows = "\n".join(f"| {kind} | {v[0]} | {v[1]}/{v[2]} | {v[3]} |"
                          for kind, v in sorted(kinds.items()))
    misses = "\n".join(f"- {r['id']} ({r['kind']}): {'; '.join(r['details'])}"
                       for r in results if r["details"]) or "- none"
    return (f"{SECTION}\n\n"
            "Facts stated in conversation land in memory through a real daemon, "
            "its embedded server and end-of-turn reflection, and what memory then holds is "
            "true, current and worth keeping. Cases: "
            "`bench/data/formation-dev.json` (dev split; a held-out split of the same kinds "
            "decides). Targets on the dev split with the default model on 2 cores: recall "
            "≥ 90 %, precision ≥ 90 % (entries matching an expected or allowed item / all "
            "entries), invented 0 (entries holding a number or name the user did not say), "
            "stale 0 (active notes stating a replaced value), violations 0, median turn ≤ 10 "
            "s, every reflection lands within its timeout (rows measured before precision, "
            "invented and stale existed have those cells empty). The agent's replies are sampled (temperature 0.2) and reflection reads "
            "them, so one run's recall moves by a few cases: `--repeat N` runs the cases N "
            "times, each on a fresh daemon, and gives the spread.\n\n"
            f"- Machine: {machine_line()}\n- Date: {utc_now()}\n- Command: `{command}`\n\n"
            f"{HEADER}\n" + "\n".join(rows) + "\n\n"
            f"Per kind ({label}):\n\n| kind | cases | found | violations |\n|---|---:|---:|---:|\n"
            f"{kind_rows}\n\nWhat missed ({label}):\n\n{misses}\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point; 0 when the run completed (the verdict is in the table)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help=f"embedded model name or .gguf (default {DEFAULT_MODEL})")
    p.add_argument("--llm-url", help="use this llama-server instead of the embedded one")
    p.add_argument("--config", help="config.json text for the daemon (e.g. a timeout)")
    p.add_argument("--cases", type=int, help="only the first N cases")
    p.add_argument("--only", help="comma-separated case ids")
    p.add_argument("--quick", action="store_true", help="the first 6 cases")
    p.add_argument("--repeat", type=int, default=1,
                   help="run the cases N times (fresh daemon each) and report the spread: "
                        "replies are sampled, so one run's recall varies by a few cases")
    p.add_argument("--verbose", action="store_true", help="replies and reflection events")
    p.add_argument("--write", action="store_true", help="write the section to bench/RESULTS.md")
    p.add_argument("--no-write", dest="write", action="store_false")
    args = p.parse_args(argv)
    cases = json.loads(DATA.read_text())["cases"]
    if args.only:
        wanted = set(args.only.split(","))
        cases = [c for c in cases if c["id"] in wanted]
    n = 6 if args.quick else args.cases
    if n:
        cases = cases[:n]
    full_dev = len(cases) == len(json.loads(DATA.read_text())["cases"])
    t0 = time.perf_counter()
    results, recalls = [], []
    for n in range(args.repeat):
        if args.repeat > 1:
            print(f"== run {n + 1}/{args.repeat}", file=sys.stderr, flush=True)
        batch = trio.run(run, args, cases)
        results += batch
        recalls.append(summarise(batch)["recall"])
    args.recalls = recalls
    command = "python -m bench.formation " + " ".join(argv if argv is not None else sys.argv[1:])
    text = render(args, results, command.strip(), full_dev)
    publish(SECTION, text, args.write and (full_dev or not args.quick))
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
