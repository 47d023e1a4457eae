"""``bench/run``: lists every benchmark module, refuses unknown names, counts
verdicts the way the sections state them, and runs a benchmark end to end in quick mode
without touching ``bench/RESULTS.md``."""

from __future__ import annotations

import importlib
import subprocess
from pathlib import Path

import pytest

from bench.runner import BENCHES, tally

REPO = Path(__file__).resolve().parent.parent
RUN = REPO / "bench" / "run"


def test_every_registered_benchmark_is_a_module_with_main_and_its_section():
    for bench in BENCHES:
        module = importlib.import_module(f"bench.{bench.name}")
        assert callable(module.main), bench.name
        assert module.SECTION == bench.section, bench.name


def test_list_and_unknown_names():
    listed = subprocess.run([RUN, "--list"], capture_output=True, text=True, check=True)
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [b.name for b in BENCHES]
    bad = subprocess.run([RUN, "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown benchmark(s) nope" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_tally_counts_table_rows_and_sentences_once():
    section = "\n".join([
        "## X", "",
        "| size | ratio | target | result |", "|---|---|---|---|",
        "| 100 B | 10× | ≤ 3× | FAIL |",
        "| 10 KiB | 2× | ≤ 3× | PASS |",
        "| 1 MiB | 2× | ≤ 3× | **MISSED**: cause |",
        "", "p99 9.0 ms vs target ≤ 10 ms: PASS; backfill 150/s vs ≥ 200: MISSED.",
        "Passing notes are not verdicts.",
    ])
    assert tally(section) == (2, 3)


@pytest.mark.slow
def test_quick_run_of_one_benchmark_prints_its_table_and_the_summary():
    before = (REPO / "bench" / "RESULTS.md").read_bytes()
    done = subprocess.run([RUN, "--quick", "ipc"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert "| size | path | baseline p50" in done.stdout  # the benchmark's own table
    assert "## Summary (bench/run)" in done.stdout and "quick mode" in done.stdout
    row = next(line for line in done.stdout.splitlines() if line.startswith("| `ipc` |"))
    met, missed = (int(x) for x in row.split("|")[3].split("/"))
    assert met + missed == 10  # five sizes × two paths, each row with a verdict
    assert "Traceback" not in done.stderr
    assert (REPO / "bench" / "RESULTS.md").read_bytes() == before  # quick: not written


def test_a_partial_run_keeps_the_other_benchmarks_summary_rows():
    from bench.runner import SUMMARY, earlier_rows, summary

    rows = ["| `ipc` | c | 1 / 9 | 0 | 26 | 2026-11-30 12:00 UTC |",
            "| `recall` | c | 2 / 1 | 0 | 95 | 2026-11-30 12:05 UTC |"]
    text = "# Benchmark results\n\n" + summary(rows, "bench/run", False) + "\n## IPC round trip\n"
    assert SUMMARY in text
    got = earlier_rows(text)
    assert got == {"ipc": rows[0], "recall": rows[1]}
    assert earlier_rows("# Benchmark results\n") == {}
