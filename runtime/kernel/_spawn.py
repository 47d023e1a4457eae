"""Spawning an actor process, the handshake, and the cancellation ladder.

``spawn_actor`` makes a ``socketpair``, starts ``python -m runtime.kernel._child`` in a new
process session with the child's end passed by ``pass_fds``, and runs the
hello → boot → ready handshake under a deadline. ``stop_process`` is the one
cancellation ladder used everywhere: send cancel → wait (2 s) → SIGTERM → wait
(1 s) → SIGKILL → always reap. It runs shielded and bounded, so it is safe in
``finally`` blocks.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import msgspec
import structlog
import trio

from ._channel import Channel
from ._codec import DEFAULT_MAX_FRAME
from .errors import ActorCrashed, ActorTooSlow, ProtocolViolation, TransportClosed
from .messages import ENVELOPE_VERSION, Boot, ChildHello, Cancel, Envelope, Error, Ready

log = structlog.get_logger()

HELLO_TIMEOUT_S = 10.0
"""Seconds from exec to hello: Python start-up plus imports on a loaded 2-core box."""
READY_TIMEOUT_S = 30.0
"""Seconds from boot to ready: opening the database, loading the embedder."""
CANCEL_GRACE_S = 2.0
TERM_GRACE_S = 1.0
SOCKET_BUFFER_BYTES = 4 * 1024 * 1024
"""Send buffer asked for each root↔child socket (bytes): memory is only used while a
peer lags, and frames up to ~1 MiB then leave in one ``send``."""


@dataclass
class ActorSpec:
    """How to start one actor.

    Attributes:
        name: routing name (the daemon's are ``memory``, ``agent``, ``reflection``,
            ``backfill``: ``actors.actor_spec`` builds their specs).
        module: import path of the module with ``open_actor`` (the kernel imports it in
            the child; it knows no actor by name).
        config: msgpack bytes handed over in ``Boot`` (decoded by the actor).
        env: extra environment variables for the child.
        nice: added to the child's scheduling niceness (``os.nice``) before it serves:
            background actors (reflection, backfill) yield the 2 cores to the ones a
            reply waits for (reflection never delays the reply: docs/architecture.md
            §10).
    """

    name: str
    module: str
    config: bytes = b"\x80"  # msgpack empty map
    env: dict[str, str] = field(default_factory=dict)
    nice: int = 0


async def stop_process(
    proc: trio.Process,
    channel: Channel | None = None,
    *,
    cancel_grace_s: float = CANCEL_GRACE_S,
    term_grace_s: float = TERM_GRACE_S,
) -> int:
    """The cancellation ladder; returns the exit status. Never raises, never hangs.

    Steps: Cancel(id=0) over ``channel`` (if given and the process lives) → wait
    ``cancel_grace_s`` → SIGTERM → wait ``term_grace_s`` → SIGKILL → reap.
    """
    with trio.CancelScope(shield=True):
        if proc.returncode is None and channel is not None and not channel.closed:
            with trio.move_on_after(0.2):
                try:
                    await channel.send(Cancel(src="root", dest="", id=0))
                except TransportClosed:
                    pass
        for sig, grace in ((None, cancel_grace_s), (signal.SIGTERM, term_grace_s)):
            if proc.returncode is not None:
                break
            if sig is not None:
                try:
                    proc.send_signal(sig)
                except ProcessLookupError:
                    pass
            with trio.move_on_after(grace):
                await proc.wait()
        if proc.returncode is None:
            try:
                proc.kill()
            except ProcessLookupError:
                pass
        code = await proc.wait()
    return code


def set_buffer_size(sock: socket.socket, size: int | None = None) -> None:
    """Raise a channel socket's send buffer to :data:`SOCKET_BUFFER_BYTES` (the kernel
    caps it at ``net.core.wmem_max``; best effort): a frame up to about that size goes
    in one ``send`` instead of a trio write/wait loop (``bench/ipc.py``, 1 MiB row)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size or SOCKET_BUFFER_BYTES)
    except OSError:
        pass


async def spawn_actor(
    spec: ActorSpec,
    *,
    log_dir: str | None = None,
    log_level: str = "info",
    max_frame: int = DEFAULT_MAX_FRAME,
) -> tuple[trio.Process, Channel]:
    """Start ``spec`` and complete its handshake; returns (process, channel).

    Errors: ActorCrashed if the child exits or reports a crash during start-up
    (with its remote type and traceback), ActorTooSlow if hello/ready miss their
    deadlines, ProtocolViolation on a wrong hello. The process is always reaped on
    failure.
    """
    parent_sock, child_sock = socket.socketpair()
    for sock in (parent_sock, child_sock):
        set_buffer_size(sock)
    cmd = [sys.executable, "-m", "runtime.kernel._child", "--actor", spec.name,
           "--fd", str(child_sock.fileno()), "--module", spec.module, "--log-level", log_level]
    if log_dir:
        cmd += ["--log-dir", log_dir]
    if spec.nice:
        cmd += ["--nice", str(spec.nice)]
    env = {**os.environ, **spec.env}
    try:
        proc = await trio.lowlevel.open_process(
            cmd, pass_fds=(child_sock.fileno(),), start_new_session=True, env=env,
            stdin=subprocess.DEVNULL,
        )
    finally:
        child_sock.close()
    return await adopt_actor(spec, proc, parent_sock, max_frame=max_frame)


async def adopt_actor(spec: ActorSpec, proc: Any, sock: socket.socket, *,
                      max_frame: int = DEFAULT_MAX_FRAME) -> tuple[Any, Channel]:
    """Complete the handshake of an actor process already started (``proc``: a
    ``trio.Process``, or a ``runtime.kernel._fork.ForkedProcess``) whose end of the
    socketpair is ``sock``; returns (process, channel). Errors as
    :func:`spawn_actor`; the process is always reaped on failure."""
    channel = Channel.from_socket(sock, max_frame)
    try:
        await _handshake(spec, proc, channel)
    except BaseException:
        await stop_process(proc, channel, cancel_grace_s=0.5, term_grace_s=0.5)
        await channel.aclose()
        raise
    return proc, channel


async def _handshake(spec: ActorSpec, proc: trio.Process, channel: Channel) -> None:
    async def receive(deadline_s: float, stage: str) -> Envelope:
        try:
            with trio.fail_after(deadline_s):
                env = await channel.receive()
        except trio.TooSlowError:
            raise ActorTooSlow(f"actor {spec.name!r}: no {stage} within {deadline_s}s") from None
        except TransportClosed:
            code = None
            with trio.move_on_after(1.0):
                code = await proc.wait()
            raise ActorCrashed(spec.name, code) from None
        if isinstance(env, Error):
            raise ActorCrashed(spec.name, None, env.remote_type, env.traceback)
        return env

    hello = await receive(HELLO_TIMEOUT_S, "hello")
    if not isinstance(hello, ChildHello) or hello.name != spec.name:
        raise ProtocolViolation(f"actor {spec.name!r}: expected hello, got {hello!r}")
    if hello.version != ENVELOPE_VERSION:
        raise ProtocolViolation(
            f"actor {spec.name!r} speaks protocol {hello.version}, root speaks {ENVELOPE_VERSION}"
        )
    await channel.send(Boot(config=msgspec.Raw(spec.config)))
    ready = await receive(READY_TIMEOUT_S, "ready")
    if not isinstance(ready, Ready):
        raise ProtocolViolation(f"actor {spec.name!r}: expected ready, got {type(ready).__name__}")
    log.info("actor.started", child=spec.name, child_pid=hello.pid)
