"""Where a small IPC round trip's time goes (``bench/ipc.py``'s breakdown table).

Two ping-pongs between this process and a child over a socketpair, both sides using the
runtime's own :class:`runtime.kernel._channel.Channel` (envelope codec, framing, the direct
send/receive fast paths) with no supervisor and no actor loop:

* **channel, inline** — the child answers each frame from its reader loop: the cost of
  the transport alone, to set beside the plain trio echo;
* **channel, task per request** — the child answers from a new task in a cancel scope
  per frame, as the actor loop does (each request must be cancellable on its own,
  docs/architecture.md §2): what that one scheduling step adds.

The rest, up to ``root → actor``, is the caller's side: ``Supervisor.request`` parks on
an event that the channel's reader task sets (another scheduling step).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import trio

from runtime.kernel._calls import encode_body
from runtime.kernel._channel import Channel
from runtime.kernel._spawn import set_buffer_size
from runtime.kernel.messages import Request

_CHILD = r"""
import socket, sys, trio
from runtime.kernel._channel import Channel

async def main():
    ch = Channel.from_socket(socket.socket(fileno=int(sys.argv[1])))
    per_task = sys.argv[2] == "task"
    async with trio.open_nursery() as nursery:
        while True:
            try:
                _, raw = await ch.receive_raw()
            except Exception:
                return
            if per_task:
                async def reply(raw=raw):
                    with trio.CancelScope():
                        await ch.send_raw(raw)
                nursery.start_soon(reply)
            else:
                await ch.send_raw(raw)
trio.run(main)
"""


def reap(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """Wait for an echo child whose socket was closed (it exits on EOF); kill it after
    ``grace_s`` seconds."""
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def ping_pong(mode: str, size: int, n_iter: int) -> list[int]:
    """Round-trip times (ns) of ``n_iter`` Request envelopes of a ``size``-byte payload
    echoed by a child in ``mode`` ``"inline"`` or ``"task"`` (after a 10 % warm-up)."""
    ours, theirs = socket.socketpair()
    for sock in (ours, theirs):
        set_buffer_size(sock)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [root, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(theirs.fileno()), mode],
                            pass_fds=(theirs.fileno(),), env=env)
    theirs.close()
    chan = Channel.from_socket(ours)
    msg = Request(src="root", dest="a", id=1, body=encode_body(os.urandom(size)))
    warm = max(1, n_iter // 10)
    times: list[int] = []
    try:
        for i in range(warm + n_iter):
            t0 = time.perf_counter_ns()
            await chan.send(msg)
            await chan.receive_raw()
            if i >= warm:
                times.append(time.perf_counter_ns() - t0)
    finally:
        await chan.aclose()
        reap(proc)
    return times
