"""The long fuzz run: the CI fuzz tests with many more examples and a fresh seed.

CI replays a fixed set of hostile inputs on every change (``tests/fuzzing.py``). This
bench runs the very same tests — websocket frames, CLI arguments, model outputs and tool
arguments, reflection completions, LLM and embedding HTTP responses — with every example
count multiplied by ``--scale`` (default 10) and hypothesis seeded with ``--seed``
(default: random, printed), so each run explores inputs CI never sent. A failure is
replayed with the same command (same ``--scale`` and ``--seed``).

Output: per module, what was fuzzed and how many, the seconds it took and pass/fail; the
section goes to ``bench/RESULTS.md`` under "Fuzz (long run)".

Usage: ``python -m bench.fuzz [--scale N] [--seed S] [--only NAME] [--no-write]``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import random
import subprocess
import sys
import time

from bench._results import ROOT, machine_line, publish, utc_now

SECTION = "## Fuzz (long run)"
MODULES = ("tests.test_reliability_fuzz", "tests.test_reliability_inputs",
           "tests.test_reliability_http")
"""Fuzz test modules, each with a ``FUZZ_COUNTS`` dict (what → inputs per CI run)."""


def counts(module: str) -> dict[str, int]:
    """``FUZZ_COUNTS`` of ``module`` (per CI run); {} when it has none."""
    return dict(getattr(importlib.import_module(module), "FUZZ_COUNTS", {}))


def run_module(module: str, scale: int, seed: int) -> tuple[bool, float, str]:
    """Run one module's tests under pytest at ``scale``; (passed, seconds, last line)."""
    env = {**os.environ, "ATOMIC_AGENT_FUZZ_SCALE": str(scale)}
    path = module.replace(".", "/") + ".py"
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                           f"--hypothesis-seed={seed}", path],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    if done.returncode != 0:
        print(done.stdout[-6000:], file=sys.stderr)
    return done.returncode == 0, time.perf_counter() - t0, (lines[-1] if lines else "")


def main(argv: list[str] | None = None) -> int:
    """Run every fuzz module at ``--scale``; print (and record) the section."""
    p = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__.split("\n")[0])
    p.add_argument("--scale", type=int, default=10, help="examples × this (default 10)")
    p.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: random)")
    p.add_argument("--only", choices=[m.rsplit(".", 1)[1] for m in MODULES],
                   help="run one module")
    p.add_argument("--write", action=argparse.BooleanOptionalAction, default=True,
                   help="record the section in bench/RESULTS.md (default: yes)")
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    modules = [m for m in MODULES if args.only is None or m.endswith(args.only)]
    rows = ["| module | fuzzed (inputs) | seconds | result |", "|---|---|---:|---|"]
    ok = True
    for module in modules:
        print(f"fuzz: {module} × {args.scale} (seed {seed}) …", file=sys.stderr, flush=True)
        passed, seconds, last = run_module(module, args.scale, seed)
        ok &= passed
        what = ", ".join(f"{n * args.scale:,} {k}" for k, n in counts(module).items())
        rows.append(f"| `{module.rsplit('.', 1)[1]}` | {what} | {seconds:.0f} | "
                    f"{'PASS' if passed else 'FAIL'}: {last} |")
        print(f"fuzz: {module}: {'PASS' if passed else 'FAIL'} in {seconds:.0f} s ({last})",
              file=sys.stderr, flush=True)
    command = " ".join(["python -m bench.fuzz", f"--scale {args.scale}", f"--seed {seed}",
                        *([f"--only {args.only}"] if args.only else [])])
    text = (f"{SECTION}\n\nThe CI fuzz tests with {args.scale}× the examples and a "
            "fresh seed (CI replays a fixed seed). Each input must get a typed answer, the "
            "daemon must keep serving others and lose nothing.\n\n"
            f"- Machine: {machine_line()}\n- Date: {utc_now()}\n- Command: `{command}` "
            "(replays this run)\n\n" + "\n".join(rows) + "\n")
    publish(SECTION, text, args.write and args.only is None)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
