"""Which way of writing a note's date does the default model read best?

The format chosen for ``### recalled`` and ``### memory-index`` rows was measured here,
on LoCoMo's temporal questions (see :mod:`bench.locomo_temporal` for the data, the
notes' dates and the scoring). For each question the memory context is built once with
keyword recall (``k`` 3, index 20, in process, one store per conversation), then
rendered in each variant, put in the agent's real tail (``build_tail``, the ``now:``
line included) after its real stable prefix, and sent to the embedded llama-server of
one daemon on the default model with the reply-only grammar (one step, no tools, so
only the format differs):

* ``none`` -- no dates (the rows as they were before dates);
* ``colon`` -- ``- #17 [tag] 22 Dec 2022: text`` in both sections (the default);
* ``colon-recalled-only`` -- the same in ``### recalled`` only;
* ``paren`` -- ``- #17 [tag] (22 Dec 2022) text``;
* ``said-end`` -- ``- #17 [tag] text (said 22 Dec 2022)``.

Usage: ``python -m bench.date_formats [--per-conversation N] [--write]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import trio

from actors.agent.now import now_line
from actors.agent.prompt import REPLY_GRAMMAR, STABLE_PREFIX, TailInput, build_tail
from actors.store import render
from actors.store.context import RecallPlan, RenderBudget, build_context
from actors.store.tail import render_context
from actors.store.notes import MemoryStore
from actors.store.profile import ProfileStore
from actors.store.schema import open_database
from actors.store.stores import StoreSet
from bench._results import machine_line, publish, utc_now
from bench.locomo_temporal import DATA, build_export, questions, score
from runtime.services.llm import chat_prompt
from tests.daemon import run_daemon

SECTION = "## How a note's date is written: what the default model reads best"
_DEFAULT_LINE = render._note_line


def _paren(note, preview, superseded=None, date=""):
    when = f" ({date})" if date else ""
    return render.neutralise(f"- #{note.id}{render._tags_part(note.tags)}{when} {preview}")


def _said_end(note, preview, superseded=None, date=""):
    when = f" (said {date})" if date else ""
    return render.neutralise(f"- #{note.id}{render._tags_part(note.tags)} {preview}{when}")


# name -> (line function, dates in ### recalled, dates in ### memory-index)
VARIANTS: dict[str, tuple[Callable[..., str], bool, bool]] = {
    "none": (_DEFAULT_LINE, False, False),
    "colon": (_DEFAULT_LINE, True, True),
    "colon-recalled-only": (_DEFAULT_LINE, True, False),
    "paren": (_paren, True, True),
    "said-end": (_said_end, True, True),
}


def stores(convs: list[dict]) -> dict[str, tuple[ProfileStore, MemoryStore]]:
    """One in-memory store per conversation, every dialog turn a note at its date."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for conv in convs:
            path = Path(tmp) / "conv.jsonl"
            build_export([conv], path)
            conn = open_database(":memory:")
            notes = MemoryStore(conn, max_entries=100_000, dedup=False)
            for line in path.read_text().splitlines()[1:]:
                rec = json.loads(line)
                notes.store(rec["content"], tags=rec["tags"], now_ms=rec["createdAt"])
            out[conv["sample_id"]] = (ProfileStore(conn), notes)
    return out


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    convs = json.loads(args.data.read_text())
    by_conv = stores(convs)
    qs = questions(convs, args.per_conversation)
    rows: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        async with run_daemon(Path(tmp) / "state", ready_timeout_s=600) as d:
            async with httpx.AsyncClient(timeout=600) as http:
                for i, q in enumerate(qs):
                    profiles, notes = by_conv[q["sample"]]
                    ctx = build_context(StoreSet.of(profiles, notes), q["question"],
                                        RecallPlan(k=3, index_limit=20), bump=False)
                    for name, (line, recalled_dates, index_dates) in VARIANTS.items():
                        render._note_line = line
                        try:
                            sections = render_context(ctx, RenderBudget(dates=recalled_dates,
                                                                        index_dates=index_dates))
                        finally:
                            render._note_line = _DEFAULT_LINE
                        tail = build_tail(TailInput(
                            memory=sections, history=[("user", q["question"])],
                            world="working directory: (none)\n" + now_line(),
                            context_window=4096, reply_reserve=256))
                        body = {"prompt": chat_prompt(STABLE_PREFIX, tail),
                                "grammar": REPLY_GRAMMAR, "n_predict": 128, "temperature": 0.2,
                                "cache_prompt": True, "id_slot": 0}
                        content = (await http.post(f"{d.ready['llm']}/completion",
                                                   json=body)).json().get("content", "")
                        try:
                            reply = str(json.loads(content)["reply"])
                        except (ValueError, KeyError, TypeError):
                            reply = content
                        rows[name].append({**q, "reply": reply, **score(reply, q["gold"])})
                        print(f"  {i + 1}/{len(qs)} {name}: {reply[:80]!r} (gold {q['gold']!r})",
                              file=sys.stderr, flush=True)
    return {"questions": len(qs), "rows": rows}


def _rate(rows: list[dict], key: str) -> str:
    scored = [r[key] for r in rows if r[key] is not None]
    return f"{sum(scored)}/{len(scored)}" if scored else "–"


def render_table(out: dict[str, Any], command: str) -> str:
    lines = [
        SECTION, "",
        f"Command: `{command}` ({utc_now()}; {machine_line()}; default model, reply-only "
        f"grammar, temperature 0.2). {out['questions']} LoCoMo dev temporal questions; the "
        "same recalled notes in every variant. Answers naming today's date (the `now:` "
        "line) instead of the note's are counted in the last column.",
        "",
        "| variant | right year | right month and year | right day | answered with today's year |",
        "|---|---|---|---|---|",
    ]
    year = utc_now()[:4]
    for name, rows in out["rows"].items():
        today = sum(year in r["reply"] for r in rows)
        lines.append(f"| {name} | {_rate(rows, 'year')} | {_rate(rows, 'month')} | "
                     f"{_rate(rows, 'day')} | {today}/{len(rows)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Measure every variant, print (``--write``: record) the section."""
    p = argparse.ArgumentParser(prog="python -m bench.date_formats", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--per-conversation", type=int, default=4,
                   help="temporal questions per conversation (default 4; 6 conversations)")
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--write", action="store_true", help="write the section to bench/RESULTS.md")
    args = p.parse_args(argv)
    out = trio.run(measure, args)
    Path("/tmp/bench-date-formats.json").write_text(json.dumps(out, indent=1))
    command = "python -m bench.date_formats " + " ".join(argv if argv is not None
                                                          else sys.argv[1:])
    publish(SECTION, render_table(out, command.strip()), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
