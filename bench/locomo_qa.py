"""LoCoMo question answering end to end: does recall make the answers right?

Evidence recall@k (``bench.locomo``) says whether the right turns were found; this says
whether the reply is right. Every dialog turn of the dev conversations
(``bench/data/locomo-dev.json``; LoCoMo, Maharana et al., ACL 2024, CC BY-NC 4.0) is
imported into a daemon as one note at its session's date (``bench.locomo_temporal``'s
file: a project note of ``/locomo/<sample_id>``, its LoCoMo session as its session), the
backfill embeds them all, and each sampled question is asked as one turn in a new session
in its conversation's directory, on the default model, reflection off. Three arms, each
question asked once per arm:

* **recall** -- the daemon as it is: ``### recalled`` holds what hybrid recall finds;
* **oracle** -- the question's gold evidence turns in ``### recalled`` instead (the ``say``
  frame's ``recalled``), everything else the same, the section's token budget included:
  the reader's best with this prompt;
* **none** -- a daemon with no memory at all (an empty state directory, same config).

``recall`` and ``oracle`` alternate on one daemon (which goes first swaps every question),
``none`` runs after them on its own daemon. Scores (``bench.locomo_answers``): LoCoMo's
own token F1 for categories 1-4 (its normalisation, Porter stemming, comma-split
sub-answers for multi-hop, the first ``;`` part for open-domain) and the lenient "gold
answer contained"; category 5 (adversarial: nothing in the conversation answers it) as
abstention, by LoCoMo's phrase check and by the lenient one. ``recall / oracle`` is how
much of the reader's best the retrieval gives; ``none / oracle`` what the model knows or
guesses without memory. Also: whether the recall arm's prompt showed an evidence turn,
prompt tokens per question (the server's count) and seconds per question.

The default run asks a fixed, seeded, stratified sample (``--per-category``, 20 per
category, drawn evenly from the conversations) and prints 95 % confidence intervals
(normal approximation of the mean over questions); ``--full`` asks every question
(~1,000 x 3 turns: hours on 2 cores).

Usage: ``python -m bench.locomo_qa [--per-category N | --full] [--seed S] [--category C]
[--write]``;
every answer in ``/tmp/bench-locomo-qa.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import apsw
import trio

from bench._results import machine_line, publish, utc_now
from bench.locomo_answers import score_answer
from bench.locomo_temporal import DATA, build_export, import_export, wait_for_vectors
from runtime.shell.client import open_client
from tests.daemon import run_daemon

SECTION = "## LoCoMo question answering"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop",
              5: "adversarial"}
ARMS = ("recall", "oracle", "none")
CONFIG = {"memory": {"reflection": {"enabled": False}, "notes": {"maxEntries": 20000}}}
RAW = Path("/tmp/bench-locomo-qa.json")
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")
Z95 = 1.96


def sample_questions(convs: list[dict], per_category: int | None, seed: int
                     ) -> list[dict[str, Any]]:
    """The questions to ask: every one with ``per_category`` None, else per category a
    seeded sample of that many, dealt round-robin from the conversations (each
    conversation's own questions shuffled), so that every conversation contributes."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for cat in CATEGORIES:
        pools = []
        for conv in convs:
            qs = [{"sample": conv["sample_id"], "category": cat,
                   "question": str(q["question"]),
                   "gold": str(q.get("answer", q.get("adversarial_answer", ""))),
                   "evidence": [f"D{a}:{b}" for raw in q.get("evidence", [])
                                for a, b in _EVIDENCE.findall(str(raw))]}
                  for q in conv["qa"] if q.get("category") == cat]
            rng.shuffle(qs)
            pools.append(qs)
        picked: list[dict[str, Any]] = []
        while any(pools) and (per_category is None or len(picked) < per_category):
            for pool in pools:
                if pool and (per_category is None or len(picked) < per_category):
                    picked.append(pool.pop())
        out += picked
    return out


def note_ids(db: Path, texts: dict[str, dict[str, str]]) -> dict[tuple[str, str], int]:
    """``(sample, dia_id) -> note id`` in the imported database (by text and directory)."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    by = {(wd, content): nid for nid, content, wd in
          conn.execute("SELECT id, content, working_dir FROM memories")}
    conn.close()
    return {(sample, dia): by[(f"/locomo/{sample}", text)]
            for sample, turns in texts.items() for dia, text in turns.items()
            if (f"/locomo/{sample}", text) in by}


async def ask(d, session: str, working_dir: str, text: str,
              recalled: list[int] | None) -> dict[str, Any]:
    """One turn in a new session: reply, first prompt tail, timings, seconds."""
    t0 = time.perf_counter()
    row: dict[str, Any] = {"reply": "", "tail": "", "timings": {}, "reason": None}
    async with open_client(url=d.url, token=d.token, session=session,
                           working_dir=working_dir) as c:
        with trio.fail_after(600):
            async for f in c.say(text, debug=True, recalled=recalled):
                if f.get("type") == "step" and f.get("step") == "prompt" and not row["tail"]:
                    row["tail"] = f.get("tail", "")
                elif f.get("type") == "reply":
                    row["reply"] = f.get("text", "")
                elif f.get("type") == "turn.finished":
                    row["timings"], row["reason"] = f.get("timings", {}), f.get("reason")
    row["seconds"] = time.perf_counter() - t0
    return row


def _state(root: Path, name: str) -> Path:
    state = root / name
    state.mkdir()
    (state / "config.json").write_text(json.dumps(CONFIG))
    return state


async def _ingest(state: Path, export: Path, llm_url: str | None) -> None:
    """Import ``export`` and wait until the backfill has embedded every note (recall
    reads the vectors)."""
    async with run_daemon(state, llm_url=llm_url, ready_timeout_s=600) as d:
        async with open_client(url=d.url, token=d.token) as c:
            await import_export(c, state, export)
            await wait_for_vectors(c)


def _log(arm: str, i: int, n: int, q: dict, row: dict) -> None:
    print(f"  {arm:6} {i + 1}/{n} cat {q['category']} ({row['seconds']:.1f} s) "
          f"f1={row['f1']:.2f}: {q['question'][:60]!r} -> {row['reply'][:70]!r} "
          f"(gold {q['gold'][:40]!r})", file=sys.stderr, flush=True)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Ingest, ask every arm, return ``{"questions": [...], "runs": {arm: [rows]}}``."""
    convs = json.loads(Path(args.data).read_text())
    qs = sample_questions(convs, None if args.full else args.per_category, args.seed)
    if getattr(args, "category", None):  # the same sample, one category's questions
        qs = [q for q in qs if q["category"] in args.category]
    runs: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        export = root / "locomo.jsonl"
        texts = build_export(convs, export)
        base = _state(root, "memory")
        await _ingest(base, export, args.llm_url)
        ids = note_ids(base / "memory.sqlite", texts)

        def score(arm: str, i: int, q: dict, row: dict) -> None:
            row.update(score_answer(row["reply"], q["gold"], q["category"]))
            shown = [texts[q["sample"]].get(e, "\0")[:40] for e in q["evidence"]]
            row["evidence_shown"] = bool(shown) and any(s in row["tail"] for s in shown)
            row["tail_chars"] = len(row.pop("tail"))
            runs[arm].append({**q, **row})
            _log(arm, i, len(qs), q, row)

        async with run_daemon(base, llm_url=args.llm_url, ready_timeout_s=600) as d:
            await ask(d, "warm-up", "/locomo/warm-up", "Hello!", None)
            for i, q in enumerate(qs):
                order = ("recall", "oracle") if i % 2 == 0 else ("oracle", "recall")
                for arm in order:
                    gold = [ids[(q["sample"], e)] for e in q["evidence"]
                            if (q["sample"], e) in ids]
                    row = await ask(d, f"qa-{arm}-{i}", f"/locomo/{q['sample']}",
                                    q["question"], gold if arm == "oracle" else None)
                    score(arm, i, q, row)
        empty = _state(root, "no-memory")
        async with run_daemon(empty, llm_url=args.llm_url, ready_timeout_s=600) as d:
            await ask(d, "warm-up", "/locomo/warm-up", "Hello!", None)
            for i, q in enumerate(qs):
                score("none", i, q, await ask(d, f"qa-none-{i}", f"/locomo/{q['sample']}",
                                              q["question"], None))
    return {"questions": len(qs), "per_category": None if args.full else args.per_category,
            "seed": args.seed, "runs": runs}


def mean_ci(values: list[float]) -> tuple[float, float]:
    """(mean, half-width of its 95 % interval, normal approximation); (nan, nan) if empty."""
    if not values:
        return math.nan, math.nan
    m = statistics.fmean(values)
    if len(values) < 2:
        return m, math.nan
    return m, Z95 * statistics.stdev(values) / math.sqrt(len(values))


def _cell(values: list[float], pct: bool = False) -> str:
    m, h = mean_ci(values)
    if math.isnan(m):
        return "–"
    scale = 100 if pct else 1
    unit = " %" if pct else ""
    fmt = ".0f" if pct else ".2f"
    tail = "" if math.isnan(h) else f" ± {scale * h:{fmt}}"
    return f"{scale * m:{fmt}}{tail}{unit}"


def _ratio(a: list[float], b: list[float]) -> str:
    if not a or not b or statistics.fmean(b) == 0:
        return "–"
    return f"{statistics.fmean(a) / statistics.fmean(b):.2f}"


def summary(out: dict[str, Any]) -> dict[str, Any]:
    """Per arm and category: F1, contained/abstained, counts; pooled 1-4; ratios."""
    runs = out["runs"]
    table: dict[str, dict[str, Any]] = defaultdict(dict)
    for arm, rows in runs.items():
        for cat in CATEGORIES:
            got = [r for r in rows if r["category"] == cat]
            lenient = "abstained" if cat == 5 else "contained"
            table[arm][cat] = {"n": len(got), "f1": [r["f1"] for r in got],
                               "lenient": [float(r[lenient]) for r in got]}
        qa = [r for r in rows if r["category"] != 5]
        table[arm]["all"] = {"n": len(qa), "f1": [r["f1"] for r in qa],
                             "lenient": [float(r["contained"]) for r in qa]}
    return table


def render(out: dict[str, Any], command: str) -> str:
    runs, table = out["runs"], summary(out)
    size = ("every question" if out["per_category"] is None else
            f"a seeded stratified sample of {out['per_category']} questions per category "
            f"(seed {out['seed']})")
    lines = [
        SECTION, "",
        "Does recall make the answers right? Each LoCoMo dev question asked as one turn in "
        "a new session on the default model, with three contexts: **recall** (the daemon's "
        "own `### recalled`), **oracle** (the question's gold evidence turns in its place, "
        "same budget) and **none** (no memory). LoCoMo's token F1 (its normalisation and "
        "stemming; multi-hop by sub-answer) and the lenient *contained* (the whole gold "
        "answer is in the reply); category 5 (adversarial) is scored as abstention "
        "(LoCoMo's phrase check as F1, the lenient reading beside it). Cells: mean ± the "
        "95 % interval's half-width.",
        "",
        f"- Machine: {machine_line()}",
        f"- Date: {utc_now()}",
        f"- Command: `{command}`",
        f"- Questions: {out['questions']} ({size}); {len(runs['recall'])} turns per arm",
        "",
        "| category | n | recall F1 | oracle F1 | none F1 | recall / oracle | none / oracle "
        "| recall contained | oracle contained | none contained |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for cat in [*CATEGORIES, "all"]:
        if cat == 5:
            continue
        name = "all (1-4)" if cat == "all" else f"{cat} {CATEGORIES[cat]}"
        r, o, n = table["recall"][cat], table["oracle"][cat], table["none"][cat]
        lines.append(
            f"| {name} | {r['n']} | {_cell(r['f1'])} | {_cell(o['f1'])} | {_cell(n['f1'])} | "
            f"{_ratio(r['f1'], o['f1'])} | {_ratio(n['f1'], o['f1'])} | "
            f"{_cell(r['lenient'], True)} | {_cell(o['lenient'], True)} | "
            f"{_cell(n['lenient'], True)} |")
    r5, o5, n5 = (table[a][5] for a in ARMS)
    lines += [
        "",
        f"Category 5 (adversarial, {r5['n']} questions; the right answer is that the "
        "conversation does not say): abstained by LoCoMo's check (\"no information "
        "available\" / \"not mentioned\") recall "
        f"{_cell(r5['f1'], True)}, oracle {_cell(o5['f1'], True)}, none {_cell(n5['f1'], True)}; "
        f"by the lenient reading recall {_cell(r5['lenient'], True)}, oracle "
        f"{_cell(o5['lenient'], True)}, none {_cell(n5['lenient'], True)}.",
        "",
        "| arm | evidence in the prompt | prompt tokens p50 | evaluated p50 | generated p50 "
        "| steps | seconds per question p50 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for arm in ARMS:
        rows = runs[arm]
        t = [r["timings"] for r in rows]
        med = lambda key: statistics.median(x.get(key, 0) for x in t) if t else 0  # noqa: E731
        shown = sum(r["evidence_shown"] for r in rows if r["category"] != 5)
        qa = sum(1 for r in rows if r["category"] != 5)
        lines.append(
            f"| {arm} | {shown}/{qa} | {med('promptTokens'):.0f} | {med('prefillTokens'):.0f} "
            f"| {med('generatedTokens'):.0f} | "
            f"{statistics.fmean(x.get('steps', 1) for x in t) if t else 0:.2f} | "
            f"{statistics.median(r['seconds'] for r in rows) if rows else 0:.1f} |")
    lines += [
        "",
        "How this differs from published LoCoMo figures: theirs read the context with "
        "GPT-class models prompted for \"a short phrase\", and some judge answers with an "
        "LLM; here the reader is the bundled 1.5B model answering as the agent does (a "
        "reply to a person, often a sentence, which token F1 penalises and *contained* "
        "does not), on one machine's 2 cores. Compare arms of the same run, not this "
        "table's F1 with a paper's.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the arms, print (``--write``: record) the section; raw rows in /tmp."""
    p = argparse.ArgumentParser(prog="python -m bench.locomo_qa", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--per-category", type=int, default=20,
                   help="questions per category in the sample (default 20; 5 categories)")
    p.add_argument("--full", action="store_true", help="every question (hours on 2 cores)")
    p.add_argument("--seed", type=int, default=7, help="the sample's seed (default 7)")
    p.add_argument("--category", type=int, action="append", choices=sorted(CATEGORIES),
                   help="ask only this category's questions of the same sample (repeatable; "
                        "5: the adversarial ones, scored as abstention)")
    p.add_argument("--data", type=Path, default=DATA, help="LoCoMo-format conversations")
    p.add_argument("--llm-url", help="use this llama-server instead of the embedded one")
    p.add_argument("--write", action="store_true", help="write the section to bench/RESULTS.md")
    args = p.parse_args(argv)
    if args.per_category < 1:
        p.error("--per-category must be at least 1")
    if not Path(args.data).is_file():
        p.error(f"--data: no such file: {args.data}")
    command = "python -m bench.locomo_qa " + " ".join(argv if argv is not None
                                                       else sys.argv[1:])
    out = trio.run(measure, args)
    RAW.write_text(json.dumps(out, indent=1))
    publish(SECTION, render(out, command.strip()), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
