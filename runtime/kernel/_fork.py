"""The daemon's first start of its actors by ``fork`` (target: ``serve`` ready ≤ 2 s,
docs/architecture.md §10).

A spawned actor is a fresh interpreter that spends ~0.5 s of CPU importing trio,
msgspec, structlog, httpx, apsw and numpy before it can answer; four of them on 2 cores
kept ``serve`` above its 2 s ready target whatever their order (``bench.lifecycle``). So
``serve`` imports every actor's module once in the root, before ``trio.run``, and forks
the four children from there: each starts with its modules already loaded and goes
straight to :func:`runtime.kernel._child.serve_actor`. The root then adopts them
(:func:`runtime.kernel._spawn.adopt_actor`: the same hello / boot / ready handshake and
deadlines as a spawned actor). Restarts after a crash spawn a fresh interpreter as
before (``python -m runtime.kernel._child``): forking a process that runs trio is not safe.

Rules for the forked child (it starts as a copy of the root before ``trio.run``: no
trio loop, no database open, no thread of ours; numpy's OpenBLAS has started its
worker thread by then, and rebuilds its pool in the child through its own
``pthread_atfork`` handlers, which ``tests/test_fork_start.py`` exercises with hybrid
recall in forked children):

* its own session (``setsid``, as a spawned child's ``start_new_session``), stdin on
  ``/dev/null``, SIGINT ignored, named ``aa-<actor>`` (``/proc/<pid>/comm``);
* every other descriptor of the root's that matters is pointed at ``/dev/null``
  (``dup2``, so no Python object can later close a reused number): the state lock, and
  the root's ends of every actor's socketpair, so that when the root dies each child
  reads EOF and exits (a copy of another child's root end would keep its socket open);
* it never returns into the root's code: it leaves with ``os._exit`` (no atexit
  handlers or finalizers of the root's objects run in it).

:class:`ForkedProcess` gives the supervisor what it uses of ``trio.Process``: ``pid``,
``returncode``, ``wait`` (a pidfd the trio loop polls, then ``waitpid``),
``send_signal``, ``terminate``, ``kill``.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import signal
import socket
import sys
import traceback
from collections.abc import Sequence

import trio

from ._spawn import ActorSpec, set_buffer_size

__all__ = ["ForkedProcess", "fork_actors", "reap_unadopted"]


class ForkedProcess:
    """A child created by :func:`fork_actors`: the subset of ``trio.Process`` the
    supervisor uses. ``returncode`` is None while it runs, then its exit status (a
    negative signal number when a signal ended it, as ``subprocess``)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._returncode: int | None = None
        self._pidfd: int | None = os.pidfd_open(pid)
        self._wait_lock: trio.Lock | None = None

    def _reap(self, block: bool = False) -> None:
        if self._returncode is not None:
            return
        pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        if pid:
            self._returncode = os.waitstatus_to_exitcode(status)
            if self._pidfd is not None:
                try:  # wake any other task parked on it (inside trio.run only)
                    trio.lowlevel.notify_closing(self._pidfd)
                except RuntimeError:
                    pass
                os.close(self._pidfd)
                self._pidfd = None

    @property
    def returncode(self) -> int | None:
        """The exit status once the child has exited (reaped on the spot), else None."""
        self._reap()
        return self._returncode

    def poll(self) -> int | None:
        """Same as :attr:`returncode`."""
        return self.returncode

    async def wait(self) -> int:
        """Wait (cancellably) until the child exits; its exit status. Several tasks
        may wait at once (the supervisor's loop and its shutdown both do), as with
        ``trio.Process``: one at a time polls the pidfd."""
        if self._wait_lock is None:
            self._wait_lock = trio.Lock()
        async with self._wait_lock:
            while self.returncode is None:
                assert self._pidfd is not None
                # ClosedResourceError: reaped meanwhile by a `returncode` poll elsewhere.
                with contextlib.suppress(trio.ClosedResourceError):
                    await trio.lowlevel.wait_readable(self._pidfd)
        assert self._returncode is not None
        return self._returncode

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` unless the child has been reaped (an unreaped child keeps its
        pid, so the signal cannot reach another process)."""
        if self._returncode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        """SIGTERM."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)


def fork_actors(specs: Sequence[ActorSpec], *, log_dir: str | None, log_level: str,
                keep_from_children: Sequence[int] = ()
                ) -> dict[str, tuple[ForkedProcess, socket.socket]]:
    """Import each spec's module, then fork one child per spec (module docstring).

    Must be called before ``trio.run`` (module docstring: threads).
    ``keep_from_children``: the root's descriptors a child must not hold (the state
    lock). Returns ``{name: (process, the root's end of its socketpair)}``; an actor
    that could not be forked (``OSError``) is left out, so the caller spawns it the
    usual way. Raises whatever importing an actor's module raises (the caller falls
    back to spawning, where the error is reported as that actor's start failure).
    """
    if not hasattr(os, "pidfd_open"):  # a Python built without it: spawn them all
        return {}
    modules = {s.name: importlib.import_module(s.module)
               for s in specs}
    # Everything imported so far is long-lived: move it out of the collector's reach
    # (Python's gc.freeze recipe for fork without exec), so that collections in the
    # children neither scan nor write to the pages they share with the root.
    gc.freeze()
    sys.stdout.flush()
    sys.stderr.flush()
    out: dict[str, tuple[ForkedProcess, socket.socket]] = {}
    for spec in specs:
        try:
            parent, child = socket.socketpair()
        except OSError:
            continue
        for sock in (parent, child):
            set_buffer_size(sock)
        drop = [*keep_from_children, parent.fileno(), *(s.fileno() for _, s in out.values())]
        try:
            pid = os.fork()
        except OSError:
            parent.close()
            child.close()
            continue
        if pid == 0:  # the child: never returns
            _child_main(spec, modules[spec.name], child, drop, log_dir, log_level)
        child.close()
        try:
            out[spec.name] = (ForkedProcess(pid), parent)
        except (OSError, AttributeError):  # no pidfd (old kernel or build): cannot
            # supervise it this way; the caller spawns this one
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            parent.close()
    return out


def _child_main(spec: ActorSpec, module: object, sock: socket.socket, drop: list[int],
                log_dir: str | None, log_level: str) -> None:
    """The forked child's whole life (module docstring); leaves with ``os._exit``."""
    code = 1
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        for fd in drop:
            os.dup2(devnull, fd)
        os.close(devnull)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.environ.update(spec.env)
        from ._child import serve_actor

        # sock is the forked end of a socketpair (a socket.socket: sendmsg, fileno);
        # serve_actor is typed for the trio socket its spawned twin gets.
        code = serve_actor(spec.name, sock, module,  # type: ignore[arg-type]
                           log_dir=log_dir, log_level=log_level, nice=spec.nice)
    except BaseException:  # noqa: BLE001 - the child's last words, then exit 1
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def reap_unadopted(children: dict[str, tuple[ForkedProcess, socket.socket]]) -> None:
    """Kill and reap forked children still running after the root's ``trio.run``
    (never adopted: the start failed before the supervisor took them); close the
    root's ends. Blocking; SIGKILL makes it quick."""
    for proc, sock in children.values():
        sock.close()
        if proc.poll() is None:
            proc.kill()
            proc._reap(block=True)
