"""Counters and histograms kept per actor and aggregated by the root.

Names follow the seeds (``agent.memory.reflection`` with an ``outcome`` label,
``agent.memory.reflection.latency_ms`` …). A snapshot is plain data so it crosses
the process boundary as a msgpack map: ``{"counters": {"name{label=v}": n},
"histograms": {"name": {"count", "sum", "buckets": {le: n}}}, "gauges": {"tasks": n}}``
(``tasks``: trio tasks alive in that process when the snapshot was taken — the soak
compares it idle before and after a load to find task leaks).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

import msgspec
import trio

from runtime.kernel import unicode

PROCESS_COUNTERS: list[Callable[[], dict[str, int]]] = []
"""Sources of counters kept once per process by modules that have no ``Metrics`` of their
own (lone surrogates repaired, request fields refused, clock steps, recalls limited):
each returns ``{name: count}``; every :meth:`Metrics.snapshot` adds the non-zero ones.
Register with :func:`count_process_wide`."""


def count_process_wide(source: Callable[[], dict[str, int]]) -> None:
    """Add ``source`` to :data:`PROCESS_COUNTERS` (once per process, at import)."""
    PROCESS_COUNTERS.append(source)


count_process_wide(lambda: {"text.repaired": unicode.repairs()})  #

LATENCY_BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)
"""Upper bounds (ms) of latency histogram buckets; a last ``+Inf`` bucket is implied."""


class MetricsRequest(msgspec.Struct, tag="metrics", tag_field="kind"):
    """Ask an actor for its metrics snapshot (every actor answers it)."""


def _key(name: str, labels: dict[str, str] | None) -> str:
    if not labels:
        return name
    inner = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


class Metrics:
    """A process-local registry: ``inc`` counters, ``observe`` histogram samples."""

    def __init__(self) -> None:
        self.counters: dict[str, int] = {}
        self.histograms: dict[str, dict[str, Any]] = {}

    def inc(self, name: str, labels: dict[str, str] | None = None, by: int = 1) -> None:
        """Add ``by`` to counter ``name{labels}``."""
        key = _key(name, labels)
        self.counters[key] = self.counters.get(key, 0) + by

    def observe(self, name: str, value: float) -> None:
        """Record one sample (e.g. a latency in ms) in histogram ``name``."""
        h = self.histograms.setdefault(
            name, {"count": 0, "sum": 0.0, "buckets": [0] * (len(LATENCY_BUCKETS_MS) + 1)})
        h["count"] += 1
        h["sum"] += float(value)
        h["buckets"][bisect.bisect_left(LATENCY_BUCKETS_MS, value)] += 1

    def snapshot(self) -> dict[str, Any]:
        """Plain-data copy; histogram buckets keyed by their upper bound (``inf`` last).
        Counters include the non-zero :data:`PROCESS_COUNTERS` of this process."""
        hist = {}
        for name, h in self.histograms.items():
            bounds = [str(b) for b in LATENCY_BUCKETS_MS] + ["inf"]
            hist[name] = {"count": h["count"], "sum": round(h["sum"], 3),
                          "buckets": dict(zip(bounds, h["buckets"]))}
        counters = dict(self.counters)
        for source in PROCESS_COUNTERS:
            counters.update((name, n) for name, n in source().items() if n)
        return {"counters": counters, "histograms": hist, "gauges": {"tasks": live_tasks()}}


def live_tasks() -> int:
    """Trio tasks alive in this process's run, counted from the root task down through
    every nursery (``trio.lowlevel``); 0 outside a trio run."""
    try:
        todo = [trio.lowlevel.current_root_task()]
    except RuntimeError:
        return 0
    count = 0
    while todo:
        task = todo.pop()
        if task is None:
            continue
        count += 1
        for nursery in task.child_nurseries:
            todo.extend(nursery.child_tasks)
    return count


def merge_snapshots(snaps: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Aggregate per-actor snapshots ``{actor: snapshot}`` into one (sums), keeping the
    per-actor view under ``actors``."""
    counters: dict[str, int] = {}
    hist: dict[str, dict[str, Any]] = {}
    for snap in snaps.values():
        for k, v in snap.get("counters", {}).items():
            counters[k] = counters.get(k, 0) + v
        for k, h in snap.get("histograms", {}).items():
            agg = hist.setdefault(k, {"count": 0, "sum": 0.0, "buckets": {}})
            agg["count"] += h["count"]
            agg["sum"] += h["sum"]
            for b, n in h["buckets"].items():
                agg["buckets"][b] = agg["buckets"].get(b, 0) + n
    return {"counters": counters, "histograms": hist, "actors": snaps}
