"""Bootloader of every actor process: ``python -m runtime.kernel._child --actor NAME --fd N``.

Started by :mod:`runtime.kernel._spawn` in its own process session with one end of a
``socketpair`` passed as file descriptor ``N``. Imports the actor's module
(``--module MODULE``, required), names the process ``aa-<NAME>``,
configures logging and runs :func:`runtime.kernel.actor.run_actor` under ``trio.run``
(:func:`serve_actor`, which the daemon's fork start calls too, :mod:`runtime.kernel._fork`).
Exit status: 0 after an orderly shutdown or when orphaned, 1 after a crash, 2 on bad
arguments.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import os
import signal
import socket
import sys
from types import ModuleType

import trio

from . import _log
from ._channel import Channel
from .actor import run_actor

PR_SET_NAME = 15
"""``prctl`` option that sets the calling thread's name (``linux/prctl.h``)."""


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, then serve the actor until shutdown; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m runtime.kernel._child")
    parser.add_argument("--actor", required=True)
    parser.add_argument("--fd", required=True, type=int)
    parser.add_argument("--module", required=True)
    parser.add_argument("--log-dir", default=None)
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--nice", type=int, default=0)
    args = parser.parse_args(argv)
    if args.nice:
        os.nice(args.nice)  # before the imports: a background actor starts niced too
    module = importlib.import_module(args.module)
    return serve_actor(args.actor, socket.socket(fileno=args.fd), module,
                       log_dir=args.log_dir, log_level=args.log_level, started="spawned")


def serve_actor(name: str, sock: socket.socket, module: ModuleType, *,
                log_dir: str | None = None, log_level: str = "info", nice: int = 0,
                started: str = "forked") -> int:
    """Serve actor ``name`` (``module.open_actor``) over ``sock`` under ``trio.run``
    until shutdown; returns the exit code (module docstring). Shared by this bootloader
    and the fork start (:mod:`runtime.kernel._fork`); ``started`` ("forked" or "spawned")
    shows in the process title."""
    if nice:
        os.nice(nice)
    set_process_name(name, started)
    _log.configure(name, log_dir=log_dir, level=log_level)
    # SIGINT goes to the root only (own session), but ignore it anyway: the root drives
    # shutdown through the cancellation ladder.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock.setblocking(False)

    async def _run() -> int:
        return await run_actor(name, Channel.from_socket(sock), module.open_actor)

    return trio.run(_run)


def set_process_name(actor: str, started: str = "") -> None:
    """Title this process ``atomic-agent: <actor> actor (<started>)`` (its command line,
    what ``ps`` and ``ps aux`` show: ``setproctitle``; ``started`` says whether it was
    forked at start-up or spawned, as at a restart) and name it ``aa-<actor>`` (``/proc/<pid>/comm``,
    what ``top`` and ``ps -o comm`` show; Linux keeps 15 bytes), so an actor is found the
    same way whether it was spawned or forked. Best effort: nothing happens where
    ``setproctitle`` or ``prctl`` is missing."""
    try:
        import setproctitle  # it also sets comm (to its title's start): named after it

        setproctitle.setproctitle(f"atomic-agent: {actor} actor"
                                  + (f" ({started})" if started else ""))
    except ImportError:
        pass
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_NAME, f"aa-{actor}".encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass


if __name__ == "__main__":
    sys.exit(main())
