"""A second stage by the bundled model: does reading the candidates beat the order?

Hybrid recall's top 20 holds ~80 % of LoCoMo's dev evidence and its top 10 only ~74 %:
the candidates are there, the order is not. This measures the lever nobody had: the
default model reads the first stage's top ``--candidates`` notes (numbered, each cut to
``--chars`` characters) with the question and answers, under a grammar, the numbers of the
relevant ones, most relevant first; the final top 10 is those, then the rest in the first
stage's order. Evidence recall@10 of both orders on the same seeded, stratified sample of
category 1-4 questions (``bench.locomo``'s in-process stores, hybrid recall with the
default embedder), and the seconds the second stage costs per query, the server's
prompt and generation time included.

The model runs on the embedded llama.cpp server as the daemon starts it (``llm.server``
``auto``, 2 threads), one request at a time, no prompt shared between questions.

Usage: ``python -m bench.locomo_rerank [--questions N] [--candidates N] [--write]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import httpx
import trio

from bench import locomo_rankers as rankers
from bench._results import machine_line, publish, utc_now
from bench.locomo import CATEGORIES, DATA, load_conversation
from runtime.services.llama import run_llama_server
from runtime.services.models import resolve_model

SECTION = "## LoCoMo retrieval: a second stage by the bundled model"
K = 10
INSTRUCTION = (
    "Below is a question and numbered notes from past conversations. Which notes help "
    "answer the question? Reply with the numbers of the helpful notes as a JSON list, most "
    "helpful first (at most {k}); [] if none helps.")


def grammar(n: int) -> str:
    """GBNF for a JSON list of distinct-looking note numbers below ``n`` (≤ 100)."""
    nums = " | ".join(f'"{i}"' for i in range(n))
    return (f'root ::= "[" ( num ( ", " num )* )? "]"\n'
            f"num ::= {nums}\n")


def prompt(question: str, notes: list[str], chars: int) -> list[dict[str, str]]:
    """The chat messages of one second-stage request."""
    listed = "\n".join(f"[{i}] {text[:chars]}" for i, text in enumerate(notes))
    return [{"role": "system", "content": INSTRUCTION.format(k=K)},
            {"role": "user", "content": f"Question: {question}\n\nNotes:\n{listed}"}]


def parse_choice(text: str, n: int) -> list[int]:
    """The model's numbers, in its order, each once, only those below ``n``."""
    try:
        raw = json.loads(text)
    except ValueError:
        return []
    out: list[int] = []
    for x in raw if isinstance(raw, list) else []:
        if isinstance(x, int) and 0 <= x < n and x not in out:
            out.append(x)
    return out


def reorder(first: list[int], chosen: list[int]) -> list[int]:
    """The chosen candidates (indices into ``first``) first, then the others in order."""
    picked = [first[i] for i in chosen]
    return picked + [x for x in first if x not in picked]


def sample(convs: list[dict], per_category: int, seed: int) -> list[tuple[int, int]]:
    """``(conversation index, question index)`` pairs: per category a seeded sample."""
    rng = random.Random(seed)
    by_cat: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for ci, conv in enumerate(convs):
        for qi, qa in enumerate(conv["qa"]):
            if qa.get("category") in CATEGORIES and qa.get("evidence"):
                by_cat[qa["category"]].append((ci, qi))
    picked: list[tuple[int, int]] = []
    for cat in sorted(by_cat):
        pool = by_cat[cat]
        picked += rng.sample(pool, min(per_category, len(pool)))
    return sorted(picked)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    """First stage and second stage for every sampled question."""
    convs = json.loads(Path(args.data).read_text())
    wanted = sample(convs, args.per_category, args.seed)
    hybrid = rankers.hybrid()
    rows: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        url, desc = await nursery.start(lambda task_status: run_llama_server(
            model=resolve_model(args.model).path, parallel=1, ctx_size=8192, server="auto",
            threads=2, task_status=task_status))
        print(f"server: {desc}", file=sys.stderr, flush=True)
        async with httpx.AsyncClient(base_url=url, timeout=600) as client:
            for ci, conv in enumerate(convs):
                mine = {qi for c, qi in wanted if c == ci}
                if not mine:
                    continue
                conn, store, questions = load_conversation(conv, Counter())
                by_text = {q: (cat, ev) for q, cat, ev in questions}
                for qi in sorted(mine):
                    question = str(conv["qa"][qi]["question"])
                    if question not in by_text:
                        continue
                    cat, evidence = by_text[question]
                    first = hybrid(conn, store, question, args.candidates)
                    notes = [store.get(i).content for i in first]  # type: ignore[union-attr]
                    t0 = time.perf_counter()
                    resp = (await client.post("/v1/chat/completions", json={
                        "messages": prompt(question, notes, args.chars),
                        "grammar": grammar(len(first)), "temperature": 0,
                        "max_tokens": 64, "cache_prompt": False})).json()
                    secs = time.perf_counter() - t0
                    text = resp["choices"][0]["message"]["content"]
                    chosen = parse_choice(text, len(first))
                    second = reorder(first, chosen)
                    row = {"category": cat, "question": question, "seconds": secs,
                           "chosen": len(chosen),
                           "prompt_tokens": resp.get("usage", {}).get("prompt_tokens", 0),
                           "first": len(evidence & set(first[:K])) / len(evidence),
                           "second": len(evidence & set(second[:K])) / len(evidence),
                           "pool": len(evidence & set(first)) / len(evidence)}
                    rows.append(row)
                    print(f"  {len(rows)}/{len(wanted)} cat {cat} {secs:.1f} s chose "
                          f"{len(chosen)}: R@10 {row['first']:.2f} -> {row['second']:.2f} "
                          f"(pool {row['pool']:.2f})", file=sys.stderr, flush=True)
                conn.close()
        nursery.cancel_scope.cancel()
    return {"rows": rows, "candidates": args.candidates, "chars": args.chars,
            "server": desc}


def render(out: dict[str, Any], command: str) -> str:
    rows = out["rows"]
    lines = [
        SECTION, "",
        f"The default model reads hybrid recall's top {out['candidates']} (each note cut to "
        f"{out['chars']} characters) and names the helpful ones under a grammar; they go "
        "first, the rest keep their order. Evidence recall@10 of both orders on the same "
        "questions; \"pool\" is the share of the evidence among the candidates (the "
        "second stage's ceiling).",
        "",
        f"- Machine: {machine_line()}; server: {out['server']}",
        f"- Date: {utc_now()}",
        f"- Command: `{command}`",
        "",
        "| category | questions | first stage R@10 | second stage R@10 | pool | seconds "
        "per query p50 | notes chosen p50 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for cat in [*CATEGORIES, None]:
        got = [r for r in rows if cat is None or r["category"] == cat]
        if not got:
            continue
        name = "all" if cat is None else f"{cat} {CATEGORIES[cat]}"
        mean = lambda key: 100 * statistics.fmean(r[key] for r in got)  # noqa: E731
        lines.append(f"| {name} | {len(got)} | {mean('first'):.1f} % | {mean('second'):.1f} % "
                     f"| {mean('pool'):.1f} % | "
                     f"{statistics.median(r['seconds'] for r in got):.1f} | "
                     f"{statistics.median(r['chosen'] for r in got):.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Measure, print (``--write``: record) the section; rows in /tmp."""
    p = argparse.ArgumentParser(prog="python -m bench.locomo_rerank", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--per-category", type=int, default=25,
                   help="questions per category (default 25; categories 1-4)")
    p.add_argument("--candidates", type=int, default=20, help="first-stage notes read (≤ 100)")
    p.add_argument("--chars", type=int, default=160, help="characters shown per note")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--write", action="store_true", help="write the section to bench/RESULTS.md")
    args = p.parse_args(argv)
    if not 1 <= args.candidates <= 100 or args.per_category < 1 or args.chars < 20:
        p.error("--candidates 1..100, --per-category >= 1, --chars >= 20")
    out = trio.run(measure, args)
    Path("/tmp/bench-locomo-rerank.json").write_text(json.dumps(out, indent=1))
    command = "python -m bench.locomo_rerank " + " ".join(argv if argv is not None
                                                          else sys.argv[1:])
    publish(SECTION, render(out, command.strip()), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
