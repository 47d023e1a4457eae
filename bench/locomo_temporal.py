"""LoCoMo's temporal questions answered by the daemon, with and without the notes' dates.
Run as ``python -m bench.locomo --temporal`` or directly.

A fifth of LoCoMo's questions ask *when* ("When did Caroline go to the LGBTQ support
group?" -- "7 May 2023"). Their evidence is a dialog turn whose own words say only
"yesterday" or "last week": the answer needs the day the turn was said, which LoCoMo
gives per session (``session_<n>_date_time``, "1:56 pm on 8 May, 2023").

Method: every dialog turn of the dev conversations (``bench/data/locomo-dev.json``;
LoCoMo, Maharana et al., ACL 2024, CC BY-NC 4.0) becomes one note ``"Speaker: text"``
written at its session's date and time (``createdAt``), a project note of the
conversation (``workingDir`` ``/locomo/<sample_id>``, so recall sees only that
conversation), imported into one state directory with ``memory import``. Two daemons,
one after the other, serve copies of it on the default model (reflection off, so the
turns change no memory): "dates" with the default configuration (each recalled note and
index row carries the day it was written: ``- #12 8 May 2023: Caroline: …``), and "no
dates" with ``memory.recallInjection.showDates``, ``memory.index.showDates`` and
``memory.profile.showDates`` false (the lines as they were before). Each question is
asked once per arm, each in a new session in the conversation's directory.

Scored questions: the temporal ones (category 2) whose gold answer names a year, the
first ``--per-conversation`` of each conversation. An answer is right at the *year* when
it names the gold answer's year, at the *month* when it also names the gold answer's
month (gold "The sunday before 25 May 2023": May 2023); a gold answer with a day that
is not relative ("7 May 2023") is also checked at the *day* (that day, month and year
all named). Dates in the answer are read in the common English forms ("7 May 2023",
"May 7, 2023", "2023-05-07"). "evidence shown" counts the questions whose evidence turn
was in the prompt (``### recalled`` or ``### memory-index``): the dates can only help
there.

``--retrieval`` measures recall instead of answers, in process (no LLM): evidence
recall@5/10 of keyword and hybrid recall (``bench.locomo_rankers``) with and without
``timed_recall`` (``memory.recallInjection.timeWindows``: a question that names a time,
"on 24 October 2023", "in May 2023", "last week", recalls the notes written then first;
"now" is the day after the conversation's last session), over every question of
categories 1-4 and over those whose words name a time (``dates.time_window``).

Usage: ``python -m bench.locomo_temporal [--per-conversation N] [--retrieval] [--write]``;
raw answers in ``/tmp/bench-locomo-temporal.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import trio

from actors.store.context import timed_recall
from actors.store.dates import time_window
from actors.store.notes import MemoryStore
from actors.store.render import estimate_tokens
from actors.store.schema import open_database
from bench._results import machine_line, publish, utc_now
from runtime.shell.client import open_client
from tests.daemon import run_daemon

DATA = Path(__file__).resolve().parent / "data" / "locomo-dev.json"
SECTION = "## LoCoMo temporal questions: the notes' dates"
_SESSION = re.compile(r"session_(\d+)")
_STAMP = re.compile(r"(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})",
                    re.I)
MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december"]
_MONTH_RE = re.compile(r"\b(" + "|".join(m[:3] + f"(?:{m[3:]})?" if len(m) > 3 else m
                                         for m in MONTHS) + r")\b\.?", re.I)
_YEAR_RE = re.compile(r"\b(19\d\d|20\d\d)\b")
_ISO_RE = re.compile(r"\b(19\d\d|20\d\d)-(\d\d)-(\d\d)\b")
_RELATIVE_GOLD = re.compile(r"\b(before|after|week|weekend|around|early|late|mid|last|next"
                            r"|first|second|third|between|of)\b", re.I)
NO_DATES = {"recallInjection": {"showDates": False}, "index": {"showDates": False},
            "profile": {"showDates": False}}


def session_ms(stamp: str) -> int | None:
    """``"1:56 pm on 8 May, 2023"`` as Unix ms (UTC), None when it does not parse."""
    m = _STAMP.search(stamp or "")
    if not m:
        return None
    hour, minute, half, day, month, year = m.groups()
    try:
        mon = next(i for i, name in enumerate(MONTHS, 1) if name.startswith(month.lower()[:3]))
    except StopIteration:
        return None
    h = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    return int(datetime(int(year), mon, int(day), h, int(minute),
                        tzinfo=timezone.utc).timestamp() * 1000)


def date_parts(text: str) -> dict[str, set]:
    """The years, months (1-12) and (day, month, year) triples named in ``text``."""
    years = {int(y) for y in _YEAR_RE.findall(text)}
    months: set[int] = set()
    for m in _MONTH_RE.finditer(text):
        word = m.group(1).lower()
        if word == "may" and m.group(1) != "May":
            continue  # "may" the verb
        if len(word) >= 3:
            months.add(next(i for i, name in enumerate(MONTHS, 1) if name.startswith(word[:3])))
    days: set[tuple[int, int, int]] = set()
    for y, mo, d in _ISO_RE.findall(text):
        years.add(int(y))
        months.add(int(mo))
        days.add((int(d), int(mo), int(y)))
    tokens = re.findall(r"[A-Za-z]+|\d+", text)
    for i, tok in enumerate(tokens):
        if not tok.isdigit() or not 1 <= int(tok) <= 31:
            continue
        # "7 May 2023" / "May 7, 2023"
        for j in (i + 1, i - 1):
            if 0 <= j < len(tokens) and _MONTH_RE.fullmatch(tokens[j]):
                mon = next(k for k, name in enumerate(MONTHS, 1)
                           if name.startswith(tokens[j].lower()[:3]))
                near = [int(t) for t in tokens[max(0, i - 3):i + 4] if _YEAR_RE.fullmatch(t)]
                for y in near:
                    days.add((int(tok), mon, y))
    return {"years": years, "months": months, "days": days}


def score(answer: str, gold: str) -> dict[str, bool | None]:
    """Right at the year / month / day (None: the gold answer names none)."""
    g, a = date_parts(gold), date_parts(answer)
    year = bool(g["years"] & a["years"]) if g["years"] else None
    month = (bool(year and g["months"] & a["months"]) if g["months"] and g["years"] else None)
    exact = None
    if g["days"] and not _RELATIVE_GOLD.search(gold):
        exact = bool(g["days"] & a["days"])
    return {"year": year, "month": month, "day": exact}


def build_export(convs: list[dict], path: Path) -> dict[str, dict[str, str]]:
    """Write the import file; return ``{dia_id of each conversation: note text}`` per
    sample id (to see whether a question's evidence was shown)."""
    lines = [{"type": "atomic-agent.memory", "version": 1}]
    texts: dict[str, dict[str, str]] = {}
    nid = 0
    for conv in convs:
        c, sample = conv["conversation"], conv["sample_id"]
        texts[sample] = {}
        sessions = sorted((int(m.group(1)), v) for k, v in c.items()
                          if (m := _SESSION.fullmatch(k)) and isinstance(v, list))
        for n, turns in sessions:
            start = session_ms(c.get(f"session_{n}_date_time", ""))
            if start is None:
                continue
            for i, turn in enumerate(turns):
                nid += 1
                text = f"{turn['speaker']}: {turn['text']}"
                texts[sample][turn["dia_id"]] = text
                lines.append({"type": "note", "id": nid, "content": text,
                              "tags": [f"session_{n}"], "scope": "project",
                              "workingDir": f"/locomo/{sample}",
                              "sessionId": f"{sample}/session_{n}",
                              "createdAt": start + i * 1000})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return texts


def questions(convs: list[dict], per_conv: int) -> list[dict[str, Any]]:
    """The first ``per_conv`` temporal questions per conversation whose gold names a year."""
    out = []
    for conv in convs:
        picked = [q for q in conv["qa"] if q.get("category") == 2
                  and _YEAR_RE.search(str(q.get("answer", "")))][:per_conv]
        out += [{"sample": conv["sample_id"], "question": q["question"],
                 "gold": str(q["answer"]), "evidence": q.get("evidence", [])} for q in picked]
    return out


async def import_export(c, state: Path, export: Path) -> dict[str, Any]:
    """``memory.import`` of ``export`` through client ``c`` of the daemon on ``state``
    (which reads files in ``<state>/exports`` only: the file is copied there first);
    returns the op's result."""
    (state / "exports").mkdir(mode=0o700, exist_ok=True)
    shutil.copy(export, state / "exports" / export.name)
    res: dict[str, Any] = await c.memory("memory.import", {"path": export.name})
    print(f"imported: {res['added']['notes']} notes ({res['skipped']['notes']} already "
          "there)", file=sys.stderr, flush=True)
    return res


async def wait_for_vectors(c, timeout_s: float = 1800) -> dict[str, Any]:
    """Poll ``memory.stats`` every 2 s until the backfill has embedded every note (or
    embeddings are off, or ``timeout_s`` passed); return the stats' ``embeddings``."""
    with trio.move_on_after(timeout_s):
        while True:
            st = await c.memory("memory.stats")
            if st["embeddings"].get("vectors", 0) >= st["notes"] \
                    or not st["embeddings"].get("enabled", True):
                break
            await trio.sleep(2)
    print(f"embedded: {st['embeddings']}", file=sys.stderr, flush=True)
    return st["embeddings"]


async def ask(d, session: str, working_dir: str, text: str) -> tuple[str, str, float]:
    """One turn in a new session: (reply text, the first step's prompt tail, seconds)."""
    t0 = time.perf_counter()
    reply, tail = "", ""
    async with open_client(url=d.url, token=d.token, session=session,
                           working_dir=working_dir) as c:
        with trio.fail_after(600):
            async for f in c.say(text, debug=True):
                if f.get("type") == "step" and f.get("step") == "prompt" and not tail:
                    tail = f.get("tail", "")
                if f.get("type") == "reply":
                    reply = f.get("text", "")
    return reply, tail, time.perf_counter() - t0


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    convs = json.loads(args.data.read_text())
    qs = questions(convs, args.per_conversation)
    runs: dict[str, list[dict]] = {"dates": [], "no dates": []}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        frozen = {"memory": {"reflection": {"enabled": False},
                             "notes": {"maxEntries": 20000}}}
        (base / "config.json").write_text(json.dumps(frozen))
        texts = build_export(convs, Path(tmp) / "locomo.jsonl")
        async with run_daemon(base, ready_timeout_s=600) as d:
            async with open_client(url=d.url, token=d.token) as c:
                await import_export(c, base, Path(tmp) / "locomo.jsonl")
                await wait_for_vectors(c)  # both arms recall from the same vectors
        for arm in runs:
            state = Path(tmp) / arm.replace(" ", "-")
            shutil.copytree(base, state, ignore=shutil.ignore_patterns("*.pid", "daemon.json",
                                                                       "*.lock"))
            cfg = json.loads(json.dumps(frozen))
            if arm == "no dates":
                cfg["memory"].update(NO_DATES)
            (state / "config.json").write_text(json.dumps(cfg))
            async with run_daemon(state, ready_timeout_s=600) as d:
                await ask(d, f"warm-{len(arm)}", "/locomo/warm", "Hello!")
                for i, q in enumerate(qs):
                    reply, tail, secs = await ask(d, f"q{i}-{len(arm)}", f"/locomo/{q['sample']}",
                                                  q["question"])
                    shown = any(texts[q["sample"]].get(e, "\0")[:40] in tail
                                for e in q["evidence"])
                    row = {**q, "reply": reply, "shown": shown, "seconds": secs, "tail": tail,
                           **score(reply, q["gold"])}
                    runs[arm].append(row)
                    print(f"  {arm} {i + 1}/{len(qs)} ({secs:.1f} s) year={row['year']} "
                          f"month={row['month']} shown={shown}: {q['question']} -> "
                          f"{reply[:90]!r} (gold {q['gold']!r})", file=sys.stderr, flush=True)
    return {"questions": len(qs), "runs": runs}


def _rate(rows: list[dict], key: str) -> str:
    scored = [r[key] for r in rows if r[key] is not None]
    if not scored:
        return "–"
    return f"{sum(scored)}/{len(scored)} ({100 * sum(scored) / len(scored):.0f} %)"


def render(out: dict[str, Any], command: str) -> str:
    runs = out["runs"]
    lines = [
        SECTION, "",
        f"Command: `{command}` ({utc_now()}; {machine_line()}; default model, reflection "
        f"off). {out['questions']} temporal questions (category 2, gold answer names a "
        "year) of the LoCoMo dev conversations, each asked once per arm in a new session; "
        "every dialog turn a note written at its session's date.",
        "",
        "| | dates (default) | no dates |",
        "|---|---|---|",
    ]
    for key, label in (("year", "right year"), ("month", "right month and year"),
                       ("day", "right day (gold names a plain date)")):
        lines.append(f"| {label} | {_rate(runs['dates'], key)} | {_rate(runs['no dates'], key)} |")
    for arm_rows, name in ((runs["dates"], "dates"), (runs["no dates"], "no dates")):
        shown = [r for r in arm_rows if r["shown"]]
        lines.append(f"| {name}: evidence turn shown in the prompt | {len(shown)}/{len(arm_rows)} "
                     f"| right month among those: {_rate(shown, 'month')} |")
    tokens = {arm: sorted(estimate_tokens(r["tail"]) for r in rows) for arm, rows in runs.items()}
    lines.append(f"| prompt tail, median (estimated tokens) | "
                 f"{tokens['dates'][len(tokens['dates']) // 2]} | "
                 f"{tokens['no dates'][len(tokens['no dates']) // 2]} |")
    return "\n".join(lines) + "\n"


RETRIEVAL_SECTION = "## LoCoMo retrieval by the time a question names"
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")
DAY_MS = 86_400_000


def _dated_store(conv: dict) -> tuple[MemoryStore, dict[str, int], int]:
    """An in-memory store of ``conv``'s turns written at their sessions' dates; the
    dialog-id -> note-id map; "now" (the day after the last session)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "conv.jsonl"
        texts = build_export([conv], path)
        records = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    conn = open_database(":memory:")
    store = MemoryStore(conn, max_entries=100_000, dedup=False)
    ids: dict[str, int] = {}
    by_text = {text: dia for dia, text in texts[conv["sample_id"]].items()}
    with conn:
        for rec in records:
            note = store.store(rec["content"], tags=rec["tags"], session_id=rec["sessionId"],
                               now_ms=rec["createdAt"])
            ids.setdefault(by_text.get(rec["content"], ""), note.id)
    last = max(rec["createdAt"] for rec in records)
    return store, ids, last + DAY_MS


def retrieval(convs: list[dict]) -> dict[str, Any]:
    """Evidence recall@5/10 with and without the time window, all and time-named."""
    from bench import locomo_rankers as rankers

    hybrid = rankers.hybrid()
    sums: dict[tuple[str, str, int], float] = {}
    counts = {"all": 0, "named": 0}
    for conv in convs:
        store, ids, now = _dated_store(conv)
        conn = store.conn

        def keyword(question: str, k: int) -> list[int]:
            return [n.id for n in store.recall(question, k=k, bump=False)]

        def hybrid_rank(question: str, k: int) -> list[int]:
            return hybrid(conn, store, question, k)

        def timed(rank):
            def run(question: str, k: int) -> list[int]:
                window = time_window(question, now, "UTC")
                if window is None:
                    return rank(question, k)
                def recall_notes(query, *, k, working_dir=None, bump=False):
                    notes = (store.get(i) for i in rank(query, k))
                    return [n for n in notes if n is not None]
                return [n.id for n in timed_recall(recall_notes, store, question, window, k=k,
                                                   working_dir=None)]
            return run

        arms = {"keyword": keyword, "keyword + time": timed(keyword),
                "hybrid": hybrid_rank, "hybrid + time": timed(hybrid_rank)}
        for qa in conv["qa"]:
            if qa.get("category") not in (1, 2, 3, 4):
                continue
            evidence = {ids[f"D{a}:{b}"] for raw in qa.get("evidence", [])
                        for a, b in _EVIDENCE.findall(str(raw)) if f"D{a}:{b}" in ids}
            if not evidence:
                continue
            named = time_window(qa["question"], now, "UTC") is not None
            groups = ["all"] + (["named"] if named else [])
            for g in groups:
                counts[g] += 1
            for name, rank in arms.items():
                for k in (5, 10):
                    found = len(evidence & set(rank(qa["question"], k))) / len(evidence)
                    for g in groups:
                        sums[(name, g, k)] = sums.get((name, g, k), 0.0) + found
        conn.close()
        print(f"  {conv['sample_id']}: {counts}", file=sys.stderr, flush=True)
    return {"counts": counts, "recall": {f"{n}|{g}|{k}": v / counts[g]
                                         for (n, g, k), v in sums.items()}}


def render_retrieval(out: dict[str, Any], command: str) -> str:
    c, r = out["counts"], out["recall"]
    lines = [
        RETRIEVAL_SECTION, "",
        f"Command: `{command}` ({utc_now()}; {machine_line()}). LoCoMo dev, categories 1-4, "
        "one note per dialog turn written at its session's date; evidence recall@k.",
        "",
        f"| ranker | R@5, questions naming a time ({c['named']}) | R@10, naming a time | "
        f"R@5, all ({c['all']}) | R@10, all |",
        "|---|---|---|---|---|",
    ]
    for name in ("keyword", "keyword + time", "hybrid", "hybrid + time"):
        lines.append(f"| {name} | {100 * r[f'{name}|named|5']:.1f} % | "
                     f"{100 * r[f'{name}|named|10']:.1f} % | {100 * r[f'{name}|all|5']:.1f} % | "
                     f"{100 * r[f'{name}|all|10']:.1f} % |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Import, ask both arms, print (``--write``: record) the section; ``--retrieval``:
    the recall figures instead."""
    p = argparse.ArgumentParser(prog="python -m bench.locomo_temporal", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--per-conversation", type=int, default=5,
                   help="temporal questions asked per conversation (default 5; 6 conversations)")
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--retrieval", action="store_true",
                   help="measure recall with and without the time a question names (no LLM)")
    p.add_argument("--write", action="store_true", help="write the section to bench/RESULTS.md")
    args = p.parse_args(argv)
    command = "python -m bench.locomo_temporal " + " ".join(argv if argv is not None
                                                             else sys.argv[1:])
    if args.retrieval:
        out = retrieval(json.loads(args.data.read_text()))
        publish(RETRIEVAL_SECTION, render_retrieval(out, command.strip()), args.write)
        return 0
    out = trio.run(measure, args)
    Path("/tmp/bench-locomo-temporal.json").write_text(json.dumps(out, indent=1))
    publish(SECTION, render(out, command.strip()), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
