"""The local embedders side by side: wordllama (256-d static token table) and
all-MiniLM-L6-v2 int8 ONNX (384-d transformer, the default), measured in
the same run.

Per model, in this process (2 cores): load time; query latency (one text, purpose
``query``, p50/p99 of 300); document throughput (640 LoCoMo-like turns in one call, as the
backfill embeds); the process's RSS growth; paraphrase look-ups (12 stored facts, 12
questions with little word overlap: top-1 right); and LoCoMo dev evidence recall@10 of
``hybrid_recall`` (``bench.locomo``'s hybrid ranker, default settings) beside keyword
recall. The held-out LoCoMo conversations are not in ``bench/data``.

Usage: ``python -m bench.embedders [--quick] [--no-write]``; ``--quick`` uses two
LoCoMo conversations and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict

import numpy as np

from actors.store.hybrid import KEYWORD_POOL_PER_K
from bench import locomo
from bench import locomo_rankers as rankers
from bench._results import machine_line, percentile, publish, utc_now
from runtime.services.embeddings.embedder import LOCAL_MODELS
from runtime.services.embeddings.providers import load_local

SECTION = "## Local embedders"
FACTS = ["I prefer pytest for unit work", "My sister lives in Lyon",
         "I drink oat flat whites every morning", "The standup moved to Tuesdays at 9:30",
         "Our dog Pixel is afraid of thunderstorms", "I am learning the cello",
         "My flat is on the fourth floor without a lift", "I was born in 1991 in Recife",
         "My partner works night shifts at the hospital", "I am allergic to peanuts",
         "I commute by bike, about 12 km each way", "My laptop is a ThinkPad X1"]
QUESTIONS = ["what testing framework do I like?", "where is my sibling based?",
             "how do I take my coffee?", "when is the daily team meeting?",
             "which pet gets scared by storms?", "what instrument am I studying?",
             "do I have to climb stairs to get home?", "how old am I and where am I from?",
             "what does my significant other do for a living?",
             "is there any food I must avoid?", "how do I get to work?",
             "what computer do I use?"]


def _rss_mb() -> float:
    """This process's resident memory now (``/proc/self/status`` VmRSS), MB."""
    with open("/proc/self/status", encoding="ascii") as f:
        return int(f.read().split("VmRSS:")[1].split()[0]) / 1024


def measure(model: str, convs: list[dict]) -> dict:
    """Every figure of the module docstring for one model."""
    before = _rss_mb()
    t0 = time.perf_counter()
    emb = load_local(model)
    load_s = time.perf_counter() - t0
    loaded_mb = _rss_mb() - before  # the model, its runtime and their imports
    lat = []
    for i in range(300):
        t = time.perf_counter()
        emb.embed([QUESTIONS[i % len(QUESTIONS)]], "query")
        lat.append((time.perf_counter() - t) * 1000)
    turns = [t["text"] for c in convs for s in c["conversation"].values()
             if isinstance(s, list) for t in s][:640]
    t = time.perf_counter()
    emb.embed(turns, "document")
    docs_per_s = len(turns) / (time.perf_counter() - t)
    docs = emb.embed(FACTS, "document")
    right = int(((emb.embed(QUESTIONS, "query") @ docs.T).argmax(axis=1)
                 == np.arange(len(FACTS))).sum())
    table, ms, _n = locomo.evaluate(convs, {"recall": locomo.memory_recall,
                                            "hybrid": rankers.hybrid(model=model)},
                                    defaultdict(int))
    rankers.reset()
    return {"load_s": load_s, "q50": percentile(lat, 50), "q99": percentile(lat, 99),
            "docs_per_s": docs_per_s, "rss_mb": loaded_mb, "paraphrase": right,
            "recall": table["recall"]["all"]["R@10"], "hybrid": table["hybrid"]["all"]["R@10"],
            "hybrid_ms": ms["hybrid"],
            "by_cat": {c: table["hybrid"][c]["R@10"] for c in (1, 2, 3, 4)}}


def main(argv: list[str] | None = None) -> int:
    """Measure every local model, print the table, record it unless ``--no-write``."""
    p = argparse.ArgumentParser(prog="python -m bench.embedders",
                                description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="two conversations, no write")
    p.add_argument("--write", action=argparse.BooleanOptionalAction, default=None)
    args = p.parse_args(argv)
    write = args.write if args.write is not None else not args.quick
    convs = json.loads(locomo.DATA.read_text(encoding="utf-8"))
    if args.quick:
        convs = convs[:2]
    results = {model: measure(model, convs) for model in LOCAL_MODELS}
    base = results[LOCAL_MODELS[0]]
    rows = ["| model | load s | query p50 ms | query p99 ms | documents/s | RSS +MB | "
            "paraphrase top-1 | LoCoMo keyword R@10 | **hybrid R@10** | hybrid ms/query | "
            "hybrid R@10 multi-hop / temporal / open / single |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for model, r in results.items():
        cats = " / ".join(f"{100 * r['by_cat'][c]:.1f}" for c in (1, 2, 3, 4))
        rows.append(f"| {model} | {r['load_s']:.2f} | {r['q50']:.2f} | {r['q99']:.2f} | "
                    f"{r['docs_per_s']:.0f} | {r['rss_mb']:.0f} | {r['paraphrase']}/12 | "
                    f"{100 * r['recall']:.1f} | {100 * r['hybrid']:.1f} | "
                    f"{r['hybrid_ms']:.2f} | {cats} |")
    other = results[LOCAL_MODELS[1]]
    command = " ".join(["python -m bench.embedders", *(argv if argv is not None
                                                       else sys.argv[1:])])
    text = (f"{SECTION}\n\nThe in-process embedders side by side, same run "
            f"(the default model: {rankers.EMBEDDER_MODEL[0]}; its speed through the daemon "
            "is in \"Hybrid recall and backfill\").\n\n"
            f"- Machine: {machine_line()}\n- Date: {utc_now()}\n- Command: `{command.strip()}`\n"
            f"- LoCoMo dev, {len(convs)} conversation(s), categories 1-4; hybrid = "
            f"`bench.locomo`'s hybrid ranker (keyword pool ×{KEYWORD_POOL_PER_K}, vectorWeight "
            f"{rankers.VECTOR_WEIGHT}, seed-001 "
            "slots); RSS +MB = resident memory added by loading the model (imports "
            "included)\n\n" + "\n".join(rows) + "\n\n"
            f"MiniLM vs wordllama in this run: hybrid R@10 "
            f"{100 * (other['hybrid'] - base['hybrid']):+.1f} points, query embedding "
            f"{other['q50'] / max(base['q50'], 1e-6):.0f}× slower at p50, paraphrases "
            f"{other['paraphrase']}/12 vs {base['paraphrase']}/12.\n")
    publish(SECTION, text, write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
