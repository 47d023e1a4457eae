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
