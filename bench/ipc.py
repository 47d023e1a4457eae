"""IPC round-trip benchmark (target, docs/architecture.md §10: IPC request/reply through
the root, p50 ≤ 3× a raw socketpair echo of the same bytes).

Run from the repository root::

    python -m bench.ipc            # full run, writes the "## IPC round trip" section
    python -m bench.ipc --quick    # fewer iterations, prints only (add --write to save)

Three measurements per payload size (default 100 B, 1 KiB, 10 KiB, 100 KiB, 1 MiB;
``--sizes``):

1. **baseline** — a raw ``socketpair`` echo between this process and a tiny child
   (``python -c``, blocking sockets on both sides, fd passed with ``pass_fds`` like
   the runtime does): one frame of ``u32 length + payload`` there and back.
2. **root → actor** — ``Supervisor.request("a", Echo(payload))`` answered by actor
   ``a``: the root's request/reply path (msgpack envelope, trio channel, one hop
   each way).
3. **actor → root → actor** — actor ``a`` times ``ctx.request("b", Echo(payload))``
   itself: request/reply *through the root* between two actors (two hops each way:
   a → root → b → root → a). This is the path the target names.

A fourth, diagnostic figure — **trio echo**, the same raw echo with trio streams on
both sides and no envelope — separates the event loop's own cost from the runtime's
(``ratio vs trio echo``); it is not the target's baseline.

A second table compares msgspec envelope layouts in process (``bench/ipc_layouts.py``):
the runtime's array-like Struct with an opaque ``Raw`` body against a map layout,
``gc=False``, a one-stage typed body and JSON, per payload size.

Both runtime rows are compared with the same baseline (the raw echo of the same
payload bytes); ratio = runtime p50 / baseline p50, target ≤ 3×. Times are
microseconds of wall clock (``perf_counter_ns``), percentiles over all iterations
after a warm-up of 10 %.

This module is also the benchmark's actor (``ActorSpec(module="bench.ipc")``): it
exposes ``open_actor`` like every actor module (``runtime/kernel/actor.py``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import msgspec
import trio

from bench._results import replace_section
from bench.ipc_floor import reap
from runtime.kernel.actor import ActorContext

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "RESULTS.md"
SECTION = "## IPC round trip"
TARGET_RATIO = 3.0
"""Target: runtime p50 ≤ 3 × raw socketpair echo p50."""
DEFAULT_SIZES = (100, 1024, 10 * 1024, 100 * 1024, 1024 * 1024)
"""Payload sizes (bytes): 100 B to 1 MiB."""
FULL_ITERS = {100: 3000, 1024: 3000, 10 * 1024: 2000, 100 * 1024: 1000, 1024 * 1024: 200}
QUICK_ITERS = {100: 300, 1024: 300, 10 * 1024: 300, 100 * 1024: 100, 1024 * 1024: 30}


# -------------------------------------------------------------------- the actor side
class _M(msgspec.Struct, tag_field="kind", tag=str.lower):
    """Base of the benchmark actor's messages."""


class Echo(_M):
    """Answer with ``payload`` unchanged (bytes)."""

    payload: bytes


class Loop(_M):
    """Time ``warmup + iters`` Echo round trips of ``size`` bytes to actor ``dest``
    (through the root) → list of ``iters`` durations in nanoseconds."""

    dest: str
    size: int
    iters: int
    warmup: int = 0


BenchMsg = Echo | Loop


class _Handler:
    """Benchmark actor: answers Echo, runs Loop (see the message docstrings)."""

    def __init__(self, ctx: ActorContext) -> None:
        self.ctx = ctx
        self.decoder = msgspec.msgpack.Decoder(BenchMsg)

    async def on_request(self, src: str, body: msgspec.Raw) -> bytes | list[int]:
        """Echo → the payload; Loop → durations (ns)."""
        match self.decoder.decode(body):
            case Echo(payload=payload):
                return payload
            case Loop(dest=dest, size=size, iters=iters, warmup=warmup):
                msg = Echo(payload=os.urandom(size))
                out: list[int] = []
                for i in range(warmup + iters):
                    t0 = time.perf_counter_ns()
                    await self.ctx.request(dest, msg, bytes)
                    if i >= warmup:
                        out.append(time.perf_counter_ns() - t0)
                return out

    async def on_cast(self, src: str, body: msgspec.Raw) -> None:
        """Casts are ignored."""


@asynccontextmanager
async def open_actor(ctx: ActorContext, config: bytes) -> AsyncIterator[_Handler]:
    """Actor entry point (no resources to open)."""
    yield _Handler(ctx)


# ------------------------------------------------------------------ the raw baselines
_ECHO_CHILD = r"""
import socket, sys
s = socket.socket(fileno=int(sys.argv[1]))
buf = bytearray(4 + int(sys.argv[2]))
view = memoryview(buf)
def fill(start, end):
    while start < end:
        n = s.recv_into(view[start:end])
        if not n:
            return False
        start += n
    return True
while fill(0, 4):
    size = int.from_bytes(buf[:4], "big")
    if not fill(4, 4 + size):
        break
    s.sendall(view[:4 + size])
"""

_TRIO_ECHO_CHILD = r"""
import socket, sys, trio
async def main():
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(socket.socket(fileno=int(sys.argv[1]))))
    buf = bytearray()
    async def fill(n):
        while len(buf) < n:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return False
            buf.extend(chunk)
        return True
    while await fill(4):
        size = int.from_bytes(buf[:4], "big")
        if not await fill(4 + size):
            break
        await stream.send_all(bytes(buf[:4 + size]))
        del buf[:4 + size]
trio.run(main)
"""


def _echo_child(source: str, max_size: int) -> tuple[socket.socket, subprocess.Popen]:
    """Start a ``python -c`` echo child on one end of a socketpair (``pass_fds``), with
    the runtime's socket buffer size (``runtime.kernel._spawn.SOCKET_BUFFER_BYTES``)."""
    from runtime.kernel._spawn import set_buffer_size

    parent, child = socket.socketpair()
    for sock in (parent, child):
        set_buffer_size(sock)  # the same send buffer the runtime's channels get
    proc = subprocess.Popen([sys.executable, "-c", source, str(child.fileno()), str(max_size)],
                            pass_fds=(child.fileno(),))
    child.close()
    return parent, proc


def raw_echo(sock: socket.socket, size: int, n_iter: int) -> list[int]:
    """Round-trip times (ns) of ``n_iter`` raw echoes of a ``u32 + size`` byte frame,
    blocking sockets on this side too (after a 10 % warm-up)."""
    frame = size.to_bytes(4, "big") + os.urandom(size)
    back = bytearray(len(frame))
    view = memoryview(back)
    warm = max(1, n_iter // 10)
    times: list[int] = []
    for i in range(warm + n_iter):
        t0 = time.perf_counter_ns()
        sock.sendall(frame)
        got = 0
        while got < len(frame):
            n = sock.recv_into(view[got:])
            if not n:
                raise RuntimeError("echo child closed the socket")
            got += n
        if i >= warm:
            times.append(time.perf_counter_ns() - t0)
    if back != frame:
        raise RuntimeError("echo child returned different bytes")
    return times


async def trio_echo(stream: trio.SocketStream, size: int, n_iter: int) -> list[int]:
    """Like :func:`raw_echo`, but trio streams on both sides: the floor any trio-based
    transport pays (a diagnostic column, not the target's baseline)."""
    frame = size.to_bytes(4, "big") + os.urandom(size)
    warm = max(1, n_iter // 10)
    times: list[int] = []
    for i in range(warm + n_iter):
        t0 = time.perf_counter_ns()
        await stream.send_all(frame)
        got = 0
        while got < len(frame):
            chunk = await stream.receive_some(65536)
            if not chunk:
                raise RuntimeError("trio echo child closed the socket")
            got += len(chunk)
        if i >= warm:
            times.append(time.perf_counter_ns() - t0)
    return times


async def checkpoint_us(n: int = 20_000) -> float:
    """Mean cost (µs) of one trio checkpoint (``await trio.sleep(0)``) on this machine:
    every trio send/receive pays a few, which is why the trio echo sits above the raw one."""
    t0 = time.perf_counter_ns()
    for _ in range(n):
        await trio.sleep(0)
    return (time.perf_counter_ns() - t0) / n / 1000.0


# --------------------------------------------------------------- the runtime figures
async def measure(sizes: Sequence[int], iters: dict[int, int]) -> dict[str, dict[int, list[int]]]:
    """All four figures, interleaved size by size so load drift hits them alike.

    Returns ``{"raw" | "trio" | "direct" | "relayed": {size: [ns, …]}}``; the two echo
    children and the two actors are started once and always stopped.
    """
    from runtime import ActorSpec, open_supervisor

    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    specs = [ActorSpec(name=n, module="bench.ipc", env=env) for n in ("a", "b")]
    out: dict[str, dict[int, list[int]]] = {"raw": {}, "trio": {}, "direct": {}, "relayed": {}}
    raw_sock, raw_proc = _echo_child(_ECHO_CHILD, max(sizes))
    trio_sock, trio_proc = _echo_child(_TRIO_ECHO_CHILD, max(sizes))
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(trio_sock))
    try:
        async with open_supervisor(specs, log_level="warning") as sup:
            # One throw-away pass over every path first: children finish importing and
            # caches warm up, so the first size measured is not penalised.
            for size, n_iter, keep in [(sizes[0], 50, False)] + [(s, iters[s], True) for s in sizes]:
                if not keep:
                    raw_echo(raw_sock, size, n_iter)
                    await trio_echo(stream, size, n_iter)
                    for _ in range(n_iter):
                        await sup.request("a", Echo(payload=b"x" * size), bytes)
                    await sup.request("a", Loop(dest="b", size=size, iters=n_iter), list[int])
                    continue
                warm = max(1, n_iter // 10)
                out["raw"][size] = raw_echo(raw_sock, size, n_iter)  # blocks the loop: fine here
                out["trio"][size] = await trio_echo(stream, size, n_iter)
                msg = Echo(payload=os.urandom(size))
                times: list[int] = []
                for i in range(warm + n_iter):
                    t0 = time.perf_counter_ns()
                    reply = await sup.request("a", msg, bytes)
                    if i >= warm:
                        times.append(time.perf_counter_ns() - t0)
                if reply != msg.payload:
                    raise RuntimeError("actor returned different bytes")
                out["direct"][size] = times
                out["relayed"][size] = await sup.request(
                    "a", Loop(dest="b", size=size, iters=n_iter, warmup=warm), list[int])
    finally:
        raw_sock.close()
        await stream.aclose()
        for proc in (raw_proc, trio_proc):
            reap(proc)
    return out


# ---------------------------------------------------------------------- reporting
@dataclass
class Row:
    """One table row: a path at one payload size (times in µs)."""

    size: int
    path: str
    base_p50: float
    base_p99: float
    p50: float
    p99: float
    trio_p50: float = 0.0

    @property
    def ratio(self) -> float:
        """Runtime p50 / baseline p50."""
        return self.p50 / self.base_p50 if self.base_p50 else float("inf")

    @property
    def trio_ratio(self) -> float:
        """Runtime p50 / trio echo p50 (diagnostic: overhead above the event loop)."""
        return self.p50 / self.trio_p50 if self.trio_p50 else float("inf")

    @property
    def ok(self) -> bool:
        """Whether the ratio meets :data:`TARGET_RATIO`."""
        return self.ratio <= TARGET_RATIO


def percentile_us(times_ns: Sequence[int], q: float) -> float:
    """The ``q``-th percentile (nearest rank, q in [0, 100]) of ns samples, in µs."""
    ordered = sorted(times_ns)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1] / 1000.0


def human_size(n: int) -> str:
    """100 → "100 B", 10240 → "10 KiB", 1048576 → "1 MiB"."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def table(rows: Sequence[Row]) -> str:
    """The results as a markdown table."""
    lines = [
        "| size | path | baseline p50 µs | baseline p99 µs | runtime p50 µs | runtime p99 µs "
        "| ratio p50 | target | result | trio echo p50 µs | ratio vs trio echo |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {human_size(r.size)} | {r.path} | {r.base_p50:.1f} | {r.base_p99:.1f} | "
            f"{r.p50:.1f} | {r.p99:.1f} | {r.ratio:.2f}× | ≤ {TARGET_RATIO:g}× | "
            f"{'PASS' if r.ok else 'FAIL'} | {r.trio_p50:.1f} | {r.trio_ratio:.2f}× |")
    return "\n".join(lines)


def breakdown(rows: Sequence[Row], got: dict[str, dict[int, list[int]]],
              floor: dict[str, float]) -> str:
    """Markdown: the smallest size's round trip built up step by step (p50 µs), from
    the raw echo to the runtime paths (:mod:`bench.ipc_floor`)."""
    small = rows[0].size
    direct = next(r for r in rows if r.size == small and r.path == "root → actor")
    relayed = next(r for r in rows if r.size == small and r.path != "root → actor")
    steps = [("raw socketpair echo, blocking sockets (the target's baseline)", direct.base_p50),
             ("trio echo: the same with trio streams on both sides", direct.trio_p50),
             ("runtime channel ping-pong: envelope, framing, fast paths; answered inline",
              floor["inline"]),
             ("… answered from a task per request in its own cancel scope (the actor loop)",
              floor["task"]),
             ("root → actor: `Supervisor.request` (the caller parks; the reader task wakes it)",
              direct.p50),
             ("actor → root → actor: two hops each way through the root", relayed.p50)]
    lines = [f"| step ({human_size(small)}, p50) | µs | added µs | × raw echo |",
             "|---|---:|---:|---:|"]
    prev = None
    for name, us in steps:
        added = "" if prev is None else f"{us - prev:+.1f}"
        lines.append(f"| {name} | {us:.1f} | {added} | {us / direct.base_p50:.2f}× |")
        prev = us
    return "\n".join(lines)


def section(rows: Sequence[Row], command: str, iters: dict[int, int], ckpt_us: float,
            layouts: str = "", steps: str = "") -> str:
    """The whole ``## IPC round trip`` section (markdown, trailing newline); ``layouts``
    is the envelope-layout table (:func:`bench.ipc_layouts.layouts_table`)."""
    machine = (f"{os.cpu_count()} cores (nproc {len(os.sched_getaffinity(0))}), "
               f"{platform.machine()}, {platform.system()} {platform.release()}, "
               f"Python {platform.python_version()}, trio {trio.__version__}, "
               f"msgspec {msgspec.__version__}; one trio checkpoint = {ckpt_us:.1f} µs, "
               f"load average {os.getloadavg()[0]:.2f} at the end")
    failed = [r for r in rows if not r.ok]
    verdict = ("Every row meets the target." if not failed else
               f"{len(failed)} of {len(rows)} rows miss the target. Against the trio echo "
               f"floor the runtime costs {min(r.trio_ratio for r in rows):.2f}–"
               f"{max(r.trio_ratio for r in rows):.2f}× (the actor → root → actor path has "
               "twice the hops of the echo).")
    counts = ", ".join(f"{human_size(s)}: {n}" for s, n in iters.items())
    return (
        f"{SECTION}\n\n"
        f"Target: IPC request/reply through the root, p50 ≤ {TARGET_RATIO:g}× a raw "
        "socketpair echo of the same bytes.\n\n"
        f"- Machine: {machine}\n"
        f"- Date: {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}\n"
        f"- Command: `{command}`\n"
        f"- Iterations per size (after a 10 % warm-up): {counts}\n\n"
        f"{table(rows)}\n\n{verdict}\n\n"
        "Baseline: a `python -c` child echoing `u32 length + payload` over a socketpair "
        "(blocking sockets both sides, the runtime's socket buffer size). `root → actor`: "
        "`Supervisor.request` to an actor that returns the payload (one hop each way). `actor → root → actor`: an actor "
        "timing `ctx.request` to a second actor through the root (two hops each way), "
        "the path the target names. Both compared with the same one-hop raw echo. "
        "`trio echo` (diagnostic, not the target's baseline): the same raw echo with trio "
        "streams on both sides and no envelope, i.e. the floor of any trio transport.\n"
        + (f"\n### Where a small round trip's time goes\n\n{steps}\n\n"
           "The target's 3× of the raw echo is below what trio itself costs on this "
           "machine (the trio echo row: a trio scheduler pass is ~10 µs here, and a "
           "wake-up through epoll costs more than a blocking `recv`). Above it the "
           "runtime adds its envelope and framing (channel row), one scheduling step on "
           "the callee — its task per request, so that a `cancel` can stop one request "
           " — and one on the caller — the hand-off from the "
           "channel's reader task.\n" if steps else "")
        + (f"\n### Envelope layouts (msgspec), one hop in process\n\n{layouts}\n\n"
           "Each cell: encode the actor's message and the envelope, then decode both "
           "(median of 5 interleaved blocks, µs) and the frame's bytes. The runtime keeps "
           "array + Raw: the root routes a frame by decoding only its envelope and "
           "forwards the body as received; the codec is a few µs of a round trip of "
           "hundreds, so the layout is not what the round trip costs.\n"
           if layouts else "")
    )


def write_section(path: Path, text: str) -> None:
    """Create ``path`` or replace only its ``## IPC round trip`` section."""
    replace_section(path, SECTION, text)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the table; write RESULTS.md (full runs or --write).

    Exit status: 0, or 1 with ``--check`` when a row misses the target.
    """
    parser = argparse.ArgumentParser(prog="python -m bench.ipc", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations; no write")
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                        help="comma-separated payload sizes in bytes")
    parser.add_argument("--iters", type=int, default=None, help="iterations for every size")
    parser.add_argument("--write", action=argparse.BooleanOptionalAction, default=None,
                        help="write bench/RESULTS.md (default: yes unless --quick)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a row fails")
    args = parser.parse_args(argv)
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    table_iters = QUICK_ITERS if args.quick else FULL_ITERS
    iters = {s: args.iters or table_iters.get(s, 300 if args.quick else 1000) for s in sizes}

    from runtime.kernel import _log

    _log.configure("bench", level="warning")
    ckpt = trio.run(checkpoint_us)
    got = trio.run(measure, sizes, iters)
    from bench.ipc_floor import ping_pong

    small = sizes[0]
    floor = {mode: percentile_us(trio.run(ping_pong, mode, small, iters[small]), 50)
             for mode in ("inline", "task")}
    from bench.ipc_layouts import layouts_table, measure_layouts

    layouts = layouts_table(measure_layouts(sizes, 0.1 if args.quick else 0.5), sizes, human_size)
    rows: list[Row] = []
    for size in sizes:
        base = got["raw"][size]
        b50, b99 = percentile_us(base, 50), percentile_us(base, 99)
        for path, samples in (("root → actor", got["direct"][size]),
                              ("actor → root → actor", got["relayed"][size])):
            rows.append(Row(size, path, b50, b99, percentile_us(samples, 50),
                            percentile_us(samples, 99), percentile_us(got["trio"][size], 50)))
    steps = breakdown(rows, got, floor)
    print(table(rows))
    print(f"\n{steps}")
    print(f"\n{layouts}")
    print(f"\none trio checkpoint: {ckpt:.1f} µs; load average {os.getloadavg()[0]:.2f}")
    command = "python -m bench.ipc " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    if args.write if args.write is not None else not args.quick:
        write_section(RESULTS, section(rows, command.strip(), iters, ckpt, layouts, steps))
        print(f"\nwrote {SECTION!r} to {RESULTS}")
    return 1 if args.check and not all(r.ok for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
