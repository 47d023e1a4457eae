"""``atomic-agent memory consolidate``: run one consolidator tick now.

The tick runs in the daemon (its LLM, its reflection actor); this command asks for it
over the websocket (op ``memory.consolidate``), prints the progress frames
(``memory.consolidation``) to stderr as clusters are distilled, and the outcome on
stdout (or the whole report with ``--json``). Without a running daemon it explains
that the command needs one.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import msgspec
import trio

from actors.memory import ops
from actors.memory.ops import TickReport, args_of, reply_of

from .client import ClientError, DaemonClient, answers, result_data
from .outbound import ConsolidationFrame, ErrorFrame, MemoryResult, Subscribed
from .protocol import MemoryFrame, Subscribe

__all__ = ["add_parser", "consolidate", "report_text"]

_RESULT_WORDS = {"lesson": "lesson #{id}", "abstained": "no durable lesson (abstained)",
                 "failed": "failed (see the daemon log)", "changed": "skipped: a note changed"}


def add_parser(msub: Any, state_arg: Any) -> None:
    """Register ``memory consolidate`` on the ``memory`` subparsers."""
    p = msub.add_parser(
        "consolidate", help="distil clusters of linked notes into lessons now (daemon running)",
        description="Run one consolidator tick now instead of waiting for "
                    "memory.consolidation.intervalMs (6 h): clusters of at least "
                    "memory.consolidation.minClusterSize linked notes older than "
                    "memory.consolidation.cooldownMs (24 h) are each distilled by the LLM "
                    "into a lesson (and a procedure when the notes describe how to do "
                    "something); the notes are archived into it, never deleted. Links come "
                    "from the link generator after turns, or from `memory links add`. Needs "
                    "the running daemon (it uses the LLM); one LLM call per cluster.")
    state_arg(p)
    p.add_argument("--ignore-cooldown", action="store_true",
                   help="also consider notes younger than memory.consolidation.cooldownMs")
    p.add_argument("--json", action="store_true",
                   help="print the op's result as JSON (docs/protocol.md shapes)")


def report_text(report: TickReport) -> str:
    """One line for a tick report (``memory.consolidate``'s result)."""
    outcome = report.outcome
    if outcome in ("off", "busy"):
        return f"consolidation did not run: {report.reason}"
    parts = [f"{report.clusters} cluster(s)", f"{len(report.lessons)} lesson(s)",
             f"{len(report.procedures)} procedure(s)"]
    for count, word in ((report.abstained, "abstained"), (report.failed, "failed"),
                        (report.changed, "skipped (changed)")):
        if count:
            parts.append(f"{count} {word}")
    dep = sum(report.deprecated.values())
    if dep:
        parts.append(f"{dep} deprecated")
    line = f"consolidation {outcome}: " + ", ".join(parts) + \
        f" in {report.duration_ms / 1000:.1f} s"
    if report.clusters == 0:
        line += (" (no cluster of linked notes old enough: a cluster needs "
                 "memory.consolidation.minClusterSize (3) notes linked together; notes are "
                 "linked by meaning once embedded, or by `memory links add`)")
    return line


def _progress(frame: ConsolidationFrame) -> None:
    if frame.stage == "started":
        n = frame.clusters
        print(f"consolidating: {n} cluster(s) to distil" + (" …" if n else ""),
              file=sys.stderr, flush=True)
    elif frame.stage == "cluster":
        result = frame.result if isinstance(frame.result, str) else ""
        word = _RESULT_WORDS.get(result, result)
        index = frame.index if isinstance(frame.index, int) else None
        lesson = frame.lesson_id if isinstance(frame.lesson_id, int) else None
        print(f"  cluster {index}/{frame.clusters}: {word.format(id=lesson)}",
              file=sys.stderr, flush=True)


async def consolidate(c: DaemonClient, args: argparse.Namespace) -> int:
    """Run the tick, show progress, print the outcome; 1 when it did not run or every
    cluster failed."""
    if not hasattr(c, "ws"):
        raise ClientError("not_running", "memory consolidate needs the running daemon (it "
                                         "uses the LLM): start it with atomic-agent serve")
    await c.request(Subscribe(channels=["memory"], id="consolidate-sub"), Subscribed)
    rid = "consolidate"
    tick = ops.Consolidate(ignore_cooldown=bool(args.ignore_cooldown))
    await c.send(MemoryFrame(id=rid, op=tick.name, args=args_of(tick)))
    is_answer = answers(rid)
    while True:
        frame = await c.receive()
        if isinstance(frame, ConsolidationFrame):
            if not getattr(args, "json", False):
                _progress(frame)
            continue
        if isinstance(frame, (MemoryResult, ErrorFrame)) and is_answer(frame):
            break
        await trio.lowlevel.checkpoint()
    report = reply_of(tick, result_data(frame))
    if getattr(args, "json", False):
        print(json.dumps(msgspec.to_builtins(report), ensure_ascii=False))
    else:
        print(report_text(report))
    return 0 if report.outcome in ("ok", "none") else 1
