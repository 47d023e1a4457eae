"""Bootloader of every actor process: ``python -m runtime._child --actor NAME --fd N``.

Started by :mod:`runtime._spawn` in its own process session with one end of a
``socketpair`` passed as file descriptor ``N``. Configures logging, imports the
actor's module (``--module``, default ``actors.<NAME>.actor``), and runs
:func:`runtime.actor.run_actor` under ``trio.run``. Exit status: 0 after an orderly
shutdown or when orphaned, 1 after a crash, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import socket
import sys

import trio

from . import _log
from ._channel import Channel
from .actor import run_actor


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, then serve the actor until shutdown; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m runtime._child")
    parser.add_argument("--actor", required=True)
    parser.add_argument("--fd", required=True, type=int)
    parser.add_argument("--module", default=None)
    parser.add_argument("--log-dir", default=None)
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--nice", type=int, default=0)
    args = parser.parse_args(argv)
    if args.nice:
        os.nice(args.nice)
    _log.configure(args.actor, log_dir=args.log_dir, level=args.log_level)
    # SIGINT goes to the root only (own session), but ignore it anyway: the root drives
    # shutdown through the cancellation ladder.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    module = importlib.import_module(args.module or f"actors.{args.actor}.actor")
    sock = socket.socket(fileno=args.fd)
    sock.setblocking(False)

    async def _run() -> int:
        return await run_actor(args.actor, Channel.from_socket(sock), module.open_actor)

    return trio.run(_run)


if __name__ == "__main__":
    sys.exit(main())
