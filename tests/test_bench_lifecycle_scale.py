"""``bench.lifecycle`` and ``bench.scale`` in quick mode at a tiny size: each prints its
table with every row, states its verdicts the way ``bench/run`` counts them, and writes
nothing (neither ``bench/RESULTS.md`` nor ``bench/scale.png``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.runner import tally

pytestmark = pytest.mark.slow  # each runs a benchmark in a subprocess

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "RESULTS.md"
PLOT = REPO / "bench" / "scale.png"


def _snapshot() -> tuple[bytes, bytes | None]:
    return RESULTS.read_bytes(), PLOT.read_bytes() if PLOT.exists() else None


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"})


def test_lifecycle_quick_prints_its_rows_and_writes_nothing():
    before = _snapshot()
    done = _run("bench.lifecycle", "--quick", "--reps", "1", "--notes", "200",
                "--store-notes", "16")
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: a target missed
    assert "Traceback" not in done.stderr
    out = done.stdout
    assert out.startswith("## Startup, shutdown and store throughput")
    for row in ("| baseline: `python -c \"import trio, msgspec, apsw\"` | 3 |",
                "| `serve` spawn → ready line on stdout | 3 |",
                "| `serve` spawn → client holds `welcome` (ready) | 3 |",
                "| `shutdown` frame (client connected) → process exit | 1 |",
                "| SIGTERM (client connected) → process exit | 1 |",
                "| SIGTERM (no client connected) → process exit | 1 |",
                "| `MemoryStore.store` in process (baseline) | — | 16 |",
                "| `memory.notes.store` through the daemon | 1 | 16 |",
                "| `memory.notes.store` through the daemon | 8 | 16 |"):
        assert row in out, row
    met, missed = tally(out)
    assert met + missed == 4  # ready and the three ways to stop; throughput is not judged
    assert (missed == 0) == (done.returncode == 0)
    assert _snapshot() == before  # quick: nothing written


def test_scale_quick_prints_one_row_per_size_and_writes_nothing():
    before = _snapshot()
    done = _run("bench.scale", "--quick", "--sizes", "300,600", "--queries", "30",
                "--stores", "10", "--starts", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    out = done.stdout
    assert out.startswith("## Scale")
    rows = [line for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split("|")[1].strip() for r in rows] == ["300", "600"]
    assert rows[0].count("(1.0×)") == 5  # the first row is the growth baseline of each cost
    assert "100,000 notes were not measured in this run" in out
    assert tally(out) == (0, 0)  # the target is judged at 100,000 notes only
    assert "plot" not in done.stderr  # no --write: no plot either
    assert _snapshot() == before
