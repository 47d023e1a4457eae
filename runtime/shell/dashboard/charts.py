"""The dashboard's pictures as plain data for its templates, which draw them as inline
SVG (no script, no chart library): memory over time as grouped bars per day, and
counts from ``metrics`` as horizontal bars.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


__all__ = ["Bar", "DayChart", "count_bars", "days_chart"]

DAY_MS = 86_400_000


@dataclass(frozen=True)
class Bar:
    """One rectangle: ``x``, ``y``, ``w``, ``h`` in the chart's pixels, its series
    ``css`` class, the ``title`` a pointer shows, and its ``label`` and ``count``."""

    x: float
    y: float
    w: float
    h: float
    css: str
    title: str
    label: str = ""
    count: int = 0


@dataclass(frozen=True)
class DayChart:
    """Grouped daily bars: ``bars``, the day ``labels`` (``(x, text)``), the chart's
    ``width`` and ``height`` and its ``peak`` (the tallest count)."""

    bars: list[Bar]
    labels: list[tuple[float, str]]
    width: int
    height: int
    peak: int


def _day(ms: int) -> str:
    return time.strftime("%Y-%m-%d", time.localtime(ms / 1000))


def days_chart(series: dict[str, list[int]], *, days: int = 14, now_ms: int | None = None,
               width: int = 640, height: int = 160) -> DayChart:
    """Bars per local day for the last ``days`` days: ``series`` maps a name (its CSS
    class) to event times (unix ms); each day has one bar per series."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    names = [_day(now - (days - 1 - i) * DAY_MS) for i in range(days)]
    index = {name: i for i, name in enumerate(names)}
    counts = {s: [0] * days for s in series}
    for s, stamps in series.items():
        for ms in stamps:
            i = index.get(_day(ms))
            if i is not None:
                counts[s][i] += 1
    peak = max([1] + [c for row in counts.values() for c in row])
    slot = width / days
    bar_w = max(2.0, (slot - 6) / max(1, len(series)))
    plot_h = height - 34  # room for the counts above the bars and the days below
    bars: list[Bar] = []
    for d in range(days):
        for k, s in enumerate(series):
            n = counts[s][d]
            h = plot_h * n / peak
            bars.append(Bar(round(d * slot + 3 + k * bar_w, 1), round(plot_h - h + 14, 1),
                            round(bar_w - 1, 1), round(h, 1), s, f"{names[d]}: {n} {s}",
                            s, n))
    labels = [(round(d * slot + slot / 2, 1), "today" if d == days - 1 else names[d][8:])
              for d in range(days)]
    return DayChart(bars, labels, width, height, peak)


def count_bars(counts: dict[str, int], *, width: int = 250, row: int = 18) -> list[Bar]:
    """Horizontal bars for ``{label: count}`` (biggest first), scaled to ``width`` (the
    template leaves room for the label before and the count after each bar)."""
    peak = max([1, *counts.values()])
    return [Bar(0, i * row, round(width * n / peak, 1), row - 4, "count", f"{label}: {n}",
                label, n)
            for i, (label, n) in enumerate(sorted(counts.items(), key=lambda kv: -kv[1]))]
