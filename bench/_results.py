"""Shared helpers of the benchmarks: percentiles, machine line, RESULTS.md sections."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "RESULTS.md"


def percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` in [0, 100] of ``samples`` (not empty)."""
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def machine_line() -> str:
    """Cores, architecture, OS and Python, plus the 1-minute load average now."""
    return (f"{os.cpu_count()} cores, {platform.machine()}, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}, "
            f"load average {os.getloadavg()[0]:.2f}")


def utc_now() -> str:
    """The current time as ``YYYY-MM-DD HH:MM UTC``."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def replace_section(path: Path, heading: str, text: str) -> None:
    """Create ``path`` or replace only the section that starts with ``heading``
    (a ``## …`` line) up to the next ``## `` heading."""
    old = path.read_text(encoding="utf-8") if path.exists() else "# Benchmark results\n"
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(old):
        new = pattern.sub(lambda _m: text.rstrip("\n") + "\n\n", old, count=1)
    else:
        new = old.rstrip("\n") + "\n\n" + text
    path.write_text(new.rstrip("\n") + "\n", encoding="utf-8")


def publish(heading: str, text: str, write: bool) -> None:
    """Print a benchmark's section and, when ``write``, put it into bench/RESULTS.md."""
    print(text)
    if write:
        replace_section(RESULTS, heading, text)


MANY_CLIENTS = {"server": {"maxPendingPerPeer": 1024}}
"""Config for a benchmark whose clients, all on loopback, connect at once: the gateway
refuses more than ``server.maxPendingPerPeer`` (16) connections from one address that
have not said hello yet, and every client of a benchmark shares 127.0.0.1."""


def only_cases(parser, every: list[dict], only: str | None) -> list[dict]:
    """The cases of ``every`` named in ``only`` (comma-separated ids; all when None); an
    unknown id is the ``parser``'s usage error."""
    if not only:
        return every
    wanted = set(only.split(","))
    unknown = wanted - {c["id"] for c in every}
    if unknown:
        parser.error(f"no such case: {', '.join(sorted(unknown))}")
    return [c for c in every if c["id"] in wanted]


def repeated(run, args, cases: list[dict]) -> list[dict]:
    """``trio.run(run, args, cases)`` ``args.repeat`` times (a fresh daemon each), saying
    which run it is on stderr; every run's results, in order."""
    import sys

    import trio

    results: list[dict] = []
    for n in range(args.repeat):
        if args.repeat > 1:
            print(f"== run {n + 1}/{args.repeat}", file=sys.stderr, flush=True)
        results += trio.run(run, args, cases)
    return results

