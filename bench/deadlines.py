"""Deadlines and dates said days ago, through formation and recall on the default model.

Each case is a formation-style conversation: the user says something dated in one
session ("My passport expires in three weeks."), the reflection forms memory from it as
it would, the memory is then moved ``ago`` days into the past (every timestamp of the
notes and facts, in ``memory.sqlite``: as if the words had been said then), and a new
session asks about it ("On which date does my passport expire?"). The statements are
built from today's date, so the expected answer is known: a date (right when the reply
names its day and month, or the weekday too for "next Friday"-style cases; one day
either way) or a number of days (right when the reply says ``N days`` with N within one
of the truth, or names the date).

Arms: "dates" (the default configuration: notes and index rows carry the day they were
written, a fact relative to its day carries that day, ``### world`` says what time it
is) and "no dates" (``memory.recallInjection.showDates``, ``memory.index.showDates`` and
``memory.profile.showDates`` false; the ``now:`` line stays, it has no switch). Each arm
is its own daemon on the embedded default model, run one after the other; memory is
cleared between cases.

Usage: ``python -m bench.deadlines [--runs N] [--write]``; raw replies in
``/tmp/bench-deadlines.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import apsw
import trio

from bench._results import machine_line, publish, utc_now
from bench.locomo_temporal import MONTHS, NO_DATES
from runtime.shell.client import open_client
from tests.daemon import run_daemon

SECTION = "## Deadlines and dates said days ago"
DAY_MS = 86_400_000


@dataclass
class Case:
    """One conversation: ``said`` ``ago`` days before ``asked``; the truth is a date
    (``days`` False) or the number of days from today to that date (``days`` True);
    ``also``: another reading of the words ("next Friday" said on a Thursday may be the
    next day or the week after), also right."""

    name: str
    said: str
    ago: int
    asked: str
    truth: date
    days: bool = False
    also: date | None = None


def _fmt(d: date) -> str:
    return f"{d.day} {MONTHS[d.month - 1].capitalize()} {d.year}"


def _weekday_after(d: date, weekday: int) -> date:
    """The first ``weekday`` (0 = Monday) strictly after ``d``."""
    return d + timedelta(days=(weekday - d.weekday() - 1) % 7 + 1)


def _weekday_before(d: date, weekday: int) -> date:
    """The last ``weekday`` (0 = Monday) strictly before ``d``."""
    return d - timedelta(days=(d.weekday() - weekday - 1) % 7 + 1)


def cases(today: date) -> list[Case]:
    """The conversations, dated from ``today`` (the daemon's local date)."""
    thesis = today + timedelta(days=23)
    wedding = today + timedelta(days=40)
    dentist_said = today - timedelta(days=6)
    passport_said = today - timedelta(days=5)
    job_said = today - timedelta(days=10)
    porto_said = today - timedelta(days=30)
    return [
        Case("thesis, absolute, days left", f"My thesis is due on {_fmt(thesis)}.", 0,
             "How many days are left until my thesis is due?", thesis, days=True),
        Case("wedding, absolute, said 3 days ago",
             f"My sister's wedding is on {_fmt(wedding)}, I'm so excited.", 3,
             "How many days until my sister's wedding?", wedding, days=True),
        Case("dentist, next Friday, said 6 days ago", "My dentist appointment is next Friday.",
             6, "On what date is my dentist appointment?", _weekday_after(dentist_said, 4),
             also=_weekday_after(dentist_said, 4) + timedelta(days=7)),
        Case("passport, in three weeks, said 5 days ago", "My passport expires in three weeks.",
             5, "On which date does my passport expire?", passport_said + timedelta(days=21)),
        Case("new job, last Monday, said 10 days ago",
             "I started my new job at the bakery last Monday.", 10,
             "On what date did I start my new job at the bakery?",
             _weekday_before(job_said, 0),
             also=_weekday_before(job_said, 0) - timedelta(days=7)),
        Case("moved, two weeks ago, said 30 days ago", "I moved to Porto two weeks ago.", 30,
             "On what date did I move to Porto, roughly?", porto_said - timedelta(days=14)),
    ]


_NUM_DAYS = re.compile(r"\b(\d{1,4})\s+(?:more\s+)?days?\b", re.I)
_WORD_MONTH = re.compile(r"\b(" + "|".join(m[:3] for m in MONTHS) + r")[a-z]*\.?", re.I)


def named_dates(text: str, year: int) -> set[date]:
    """Dates named in ``text`` as "7 May", "May 7th", "2026-05-07" (year assumed when
    missing: ``year`` and the next)."""
    out: set[date] = set()
    for y, m, d in re.findall(r"\b(\d{4})-(\d\d)-(\d\d)\b", text):
        try:
            out.add(date(int(y), int(m), int(d)))
        except ValueError:
            pass
    tokens = re.findall(r"[A-Za-z]+|\d+", text)
    for i, tok in enumerate(tokens):
        if not tok.isdigit() or not 1 <= int(tok) <= 31:
            continue
        for j in (i + 1, i - 1, i + 2):
            if 0 <= j < len(tokens) and _WORD_MONTH.fullmatch(tokens[j]) and (
                    tokens[j].lower() != "may" or tokens[j] == "May"):
                mon = next(k for k, n in enumerate(MONTHS, 1)
                           if n.startswith(tokens[j].lower()[:3]))
                for y in (year - 1, year, year + 1):
                    try:
                        out.add(date(y, mon, int(tok)))
                    except ValueError:
                        pass
                break
    return out


def right(reply: str, case: Case, today: date) -> bool:
    """Whether ``reply`` names the truth (one day either way), or for a days case says
    ``N days`` with N within one of the days from ``today``."""
    truths = [t for t in (case.truth, case.also) if t is not None]
    if any(abs((d - t).days) <= 1 for d in named_dates(reply, case.truth.year) for t in truths):
        return True
    if case.days:
        want = (case.truth - today).days
        return any(abs(int(n) - want) <= 1 for n in _NUM_DAYS.findall(reply))
    return False


def shift(state: Path, days: int) -> None:
    """Move every note's and fact's timestamps ``days`` days into the past."""
    if days <= 0:
        return
    conn = apsw.Connection(str(state / "memory.sqlite"))
    conn.set_busy_timeout(10_000)
    ms = days * DAY_MS
    with conn:
        conn.execute("UPDATE memories SET created_at = created_at - ?, updated_at = updated_at - ?",
                     (ms, ms))
        conn.execute("UPDATE profile_facts SET valid_from = valid_from - ?, created_at = "
                     "created_at - ?, updated_at = updated_at - ?", (ms, ms, ms))
    conn.close()


async def clear(c) -> None:
    for n in await c.memory("memory.notes.list", {"limit": 500}):
        await c.memory("memory.notes.forget", {"id": n["id"]})
    for f in await c.memory("memory.profile.list"):
        await c.memory("memory.profile.purge", {"key": f["key"]})


async def one(d, state: Path, case: Case, tag: str, today: date) -> dict[str, Any]:
    async with open_client(url=d.url, token=d.token) as c:
        await clear(c)
    async with open_client(url=d.url, token=d.token, session=f"{tag}-said") as c:
        await c.request({"type": "subscribe", "channels": ["reflection"]}, "subscribed")
        with trio.fail_after(300):
            frames = [f async for f in c.say(case.said)]
            event = await c.wait_for(lambda f: f.get("type") == "reflection"
                                     and f["turn"] == frames[-1]["turn"])
        formed = {"facts": {f["key"]: f["value"] for f in await c.memory("memory.profile.list")},
                  "notes": [n["content"] for n in await c.memory("memory.notes.list")]}
    shift(state, case.ago)
    reply, tail = "", ""
    async with open_client(url=d.url, token=d.token, session=f"{tag}-asked") as c:
        with trio.fail_after(300):
            async for f in c.say(case.asked, debug=True):
                if f.get("type") == "step" and f.get("step") == "prompt" and not tail:
                    tail = f.get("tail", "")
                if f.get("type") == "reply":
                    reply = f.get("text", "")
    return {"case": case.name, "reflection": event.get("outcome"), "formed": formed,
            "reply": reply, "truth": case.truth.isoformat(), "right": right(reply, case, today),
            "memory_in_prompt": any(w in tail for w in ("### recalled", "### memory-index",
                                                         "### profile", "### session-facts"))}


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    today = datetime.now().astimezone().date()
    runs: dict[str, list[dict]] = {"dates": [], "no dates": []}
    with tempfile.TemporaryDirectory() as tmp:
        for arm in runs:
            state = Path(tmp) / arm.replace(" ", "-")
            state.mkdir()
            if arm == "no dates":
                (state / "config.json").write_text(json.dumps({"memory": NO_DATES}))
            async with run_daemon(state, ready_timeout_s=600) as d:
                for r in range(args.runs):
                    for i, case in enumerate(cases(today)):
                        row = await one(d, state, case, f"r{r}-c{i}", today)
                        runs[arm].append(row)
                        print(f"  {arm} run {r + 1} {case.name}: right={row['right']} "
                              f"formed={row['formed']} reply={row['reply'][:100]!r} "
                              f"(truth {row['truth']})", file=sys.stderr, flush=True)
    return {"today": today.isoformat(), "runs": runs}


def render(out: dict[str, Any], command: str) -> str:
    runs = out["runs"]
    names = list(dict.fromkeys(r["case"] for r in runs["dates"]))

    def rate(rows: list[dict]) -> str:
        return f"{sum(r['right'] for r in rows)}/{len(rows)}"

    lines = [
        SECTION, "",
        f"Command: `{command}` ({utc_now()}; {machine_line()}; default model, today "
        f"{out['today']}). Said in one session, formed by the reflection, moved into the "
        "past, asked in a new session; right = the reply names the date (±1 day) or the "
        "number of days (±1).",
        "",
        "| case | dates (default) | no dates |",
        "|---|---|---|",
    ]
    for name in names:
        lines.append(f"| {name} | {rate([r for r in runs['dates'] if r['case'] == name])} | "
                     f"{rate([r for r in runs['no dates'] if r['case'] == name])} |")
    lines.append(f"| **all** | {rate(runs['dates'])} | {rate(runs['no dates'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run both arms, print (``--write``: record) the section."""
    p = argparse.ArgumentParser(prog="python -m bench.deadlines", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=2, help="passes over the cases (default 2)")
    p.add_argument("--write", action="store_true", help="write the section to bench/RESULTS.md")
    args = p.parse_args(argv)
    out = trio.run(measure, args)
    Path("/tmp/bench-deadlines.json").write_text(json.dumps(out, indent=1))
    command = "python -m bench.deadlines " + " ".join(argv if argv is not None else sys.argv[1:])
    publish(SECTION, render(out, command.strip()), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
