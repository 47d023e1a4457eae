"""Sampling profiles of the daemon's processes during a benchmark (py-spy), and
where their time went.

:func:`profiling` runs one ``py-spy record --nonblocking`` per process (root and each
actor) for as long as its block runs — py-spy samples from outside, without pausing the
process, so the load being measured is barely disturbed — and then
:func:`summarize` turns each raw profile into the lines a reader needs: the share of
samples spent in the most expensive functions of our own code (inclusive: the function
and what it calls) and the hottest leaf functions (self time, any library).

If py-spy is not installed (it is in the ``bench`` extra) the block runs unprofiled and
the summary says so in one line.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

RATE_HZ = 100
"""Samples per second per process (py-spy's default is 100)."""
OWN_CODE = ("actors/", "runtime/")
"""Frames from these paths are ours (the inclusive ranking lists only them)."""
GENERIC = re.compile(r"main|serve|<module>|run_actor|_serve|_serve\.<locals>\.run_request|"
                     r"\w+\.on_request|\w+\.on_cast|\w+\._dispatch(\.<locals>\.<lambda>)?|"
                     r"_run_module_as_main|_run_code")
"""Entry frames every sample passes through: not a finding, left out of the ranking."""


def py_spy() -> str | None:
    """Path of the py-spy executable (next to this interpreter first), or None."""
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else shutil.which("py-spy")


@dataclass
class Profile:
    """One process's samples, aggregated."""

    name: str
    samples: int = 0
    self_time: Counter = field(default_factory=Counter)
    inclusive: Counter = field(default_factory=Counter)

    def top_own(self, k: int = 5) -> list[tuple[str, float]]:
        """Our own functions with the largest inclusive share, ``(name, %)``; a wrapper
        whose share is within 2 points of one already listed (the same call chain) is
        left out."""
        out: list[tuple[str, float]] = []
        for frame, n in self.inclusive.most_common():
            func, _, path = frame.partition(" (")
            share = 100.0 * n / self.samples
            if (not path.startswith(OWN_CODE) or GENERIC.fullmatch(func)
                    or any(abs(share - p) < 2.0 for _, p in out)):
                continue
            out.append((func, share))
            if len(out) == k:
                break
        return out

    def top_self(self, k: int = 3) -> list[tuple[str, float]]:
        """The hottest leaf functions (any code), ``(name, %)``."""
        return [(f.partition(" (")[0], 100.0 * n / self.samples)
                for f, n in self.self_time.most_common(k)]


def parse_raw(name: str, path: Path) -> Profile:
    """Aggregate a ``py-spy record --format raw`` file (``frame;frame;… count`` lines)."""
    prof = Profile(name)
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return prof
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not count.isdigit() or not stack:
            continue
        n = int(count)
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]  # outermost first
        if not frames:
            continue
        prof.samples += n
        prof.self_time[frames[-1]] += n
        for f in set(frames):
            prof.inclusive[f] += n
    return prof


@contextmanager
def profiling(pids: dict[str, int]) -> Iterator[dict[str, Profile]]:
    """Profile ``{name: pid}`` while the block runs; the yielded dict is filled with one
    :class:`Profile` per process when the block exits (empty without py-spy)."""
    exe = py_spy()
    out: dict[str, Profile] = {}
    if exe is None:
        yield out
        return
    with tempfile.TemporaryDirectory(prefix="bench-pyspy-") as tmp:
        procs: dict[str, tuple[subprocess.Popen, Path]] = {}
        for name, pid in pids.items():
            dest = Path(tmp) / f"{name}.txt"
            procs[name] = (subprocess.Popen(
                [exe, "record", "--pid", str(pid), "--rate", str(RATE_HZ), "--nonblocking",
                 "--format", "raw", "--output", str(dest)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), dest)
        try:
            yield out
        finally:
            for proc, _ in procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
            for name, (proc, dest) in procs.items():
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                out[name] = parse_raw(name, dest)


def summarize(profiles: dict[str, Profile], cpu_s: dict[str, float], turns: int) -> str:
    """Markdown table: per process, CPU ms per turn, our costliest functions (inclusive
    share of its samples) and its hottest leaves; one line instead without py-spy."""
    if not profiles:
        return ("No profile: py-spy is not installed (`pip install -e '.[bench]'`).")
    rows = ["| process | CPU ms per turn | our costliest functions (inclusive % of samples) "
            "| hottest leaves (self %) |", "|---|---:|---|---|"]
    for name, prof in sorted(profiles.items(), key=lambda kv: -cpu_s.get(kv[0], 0.0)):
        if not prof.samples:
            rows.append(f"| {name} | {1000 * cpu_s.get(name, 0.0) / max(1, turns):.1f} | "
                        "(no samples) | |")
            continue
        own = ", ".join(f"`{f}` {p:.0f} %" for f, p in prof.top_own())
        leaves = ", ".join(f"`{f}` {p:.0f} %" for f, p in prof.top_self())
        rows.append(f"| {name} | {1000 * cpu_s.get(name, 0.0) / max(1, turns):.1f} | "
                    f"{own} | {leaves} |")
    return "\n".join(rows)


if __name__ == "__main__":  # a manual check: summarize raw files given as arguments
    for arg in sys.argv[1:]:
        prof = parse_raw(Path(arg).stem, Path(arg))
        print(arg, prof.samples, prof.top_own(), prof.top_self())
