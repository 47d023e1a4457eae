"""Shared fixtures.

Rules for every test: no child process may survive a test. ``no_orphans`` (autouse)
snapshots this process's descendants before the test and fails if new ones are
still alive afterwards (tractor's reap-per-test idea); it kills them so one leak
does not cascade into other tests.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from actors.store.clock import CLOCK
from actors.store.recall import LIMITED
from actors.store.schema import open_database
from runtime.kernel import unicode
from runtime.services.backends import REFUSED_FIELDS


def actor_name(pid: int) -> str | None:
    """The actor a daemon process serves: its name ``aa-<actor>`` (``/proc/<pid>/comm``,
    set by ``runtime.kernel._child.serve_actor`` in forked and spawned actors alike), else
    ``--actor NAME`` in its command line; None for any other process or one gone."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if comm.startswith("aa-"):
        return comm[3:]
    if b"--actor" in argv[:-1]:
        return argv[argv.index(b"--actor") + 1].decode(errors="replace")
    return None


def descendants(pid: int | None = None) -> set[int]:
    """PIDs of all live descendants of ``pid`` (default: this process), via /proc."""
    root = pid or os.getpid()
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2 :].split()
        state, ppid = rest[0], int(rest[1])
        if state == "Z":
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


@pytest.fixture(autouse=True)
def fresh_process_state():
    """What the daemon keeps once per process starts afresh for each test: the store's
    wall clock (``actors.store.clock.CLOCK``: stamps a test wrote far in the future
    never hold another test's time back or forward) and the process-wide counters
    (``unicode.repairs``, ``recall.LIMITED``, ``backends.REFUSED_FIELDS``) that every
    Metrics snapshot reports."""
    def reset() -> None:
        CLOCK.floor, CLOCK.skews = 0, 0
        unicode._count = 0
        LIMITED.update(dict.fromkeys(LIMITED, 0))
        REFUSED_FIELDS.clear()
    reset()
    yield
    reset()


@pytest.fixture(autouse=True)
def no_orphans():
    before = descendants()
    yield
    deadline = time.monotonic() + 3.0
    leaked = descendants() - before
    while leaked and time.monotonic() < deadline:
        time.sleep(0.05)
        leaked = {p for p in leaked if pid_alive(p)}
    for pid in leaked:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not leaked, f"child processes survived the test: {sorted(leaked)}"


@pytest.fixture
def conn(tmp_path):
    """A migrated ``memory.sqlite`` connection under ``tmp_path``, closed afterwards."""
    c = open_database(str(tmp_path / "memory.sqlite"))
    yield c
    c.close()
