"""Shared fixtures.

Rules for every test: no child process may survive a test. ``no_orphans`` (autouse)
snapshots this process's descendants before the test and fails if new ones are
still alive afterwards (tractor's reap-per-test idea); it kills them so one leak
does not cascade into other tests.

The fast tier: ``pytest_collection_modifyitems`` marks ``slow`` every test that starts a
real daemon (it reaches ``tests.daemon.run_daemon``: in its body, a helper or a fixture)
and every ``real_llm`` test; other tests that take a second or more carry
``@pytest.mark.slow`` (or a module's ``pytestmark``) themselves. ``-m "not slow"`` leaves
them all out.
"""

from __future__ import annotations

import inspect
import os
import signal
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.store.clock import CLOCK
from actors.store.recall import LIMITED
from actors.store.schema import open_database
from runtime.kernel import unicode
from runtime.services.backends import REFUSED_FIELDS
from tests.daemon import run_daemon
from tests.pg import pg_server, pg_url  # noqa: F401  (fixtures: a real PostgreSQL)

#: Calling one of these starts a real daemon: a test that reaches one is ``slow``.
DAEMON_STARTERS = (run_daemon,)


def _referenced(func: types.FunctionType) -> Iterator[object]:
    """The objects ``func``'s code (nested functions and lambdas included) names: its
    globals, and what it imports inside its body (``from tests.daemon import run_daemon``
    names both ``tests.daemon`` and ``run_daemon``)."""
    todo = [func.__code__]
    while todo:
        code = todo.pop()
        todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]
        modules = [sys.modules[n] for n in code.co_names if n in sys.modules]
        for name in code.co_names:
            yield func.__globals__.get(name)
            for module in modules:
                yield getattr(module, name, None)


def reaches(obj: object, targets: tuple, seen: set[int] | None = None) -> bool:
    """True if ``obj`` (a test, a fixture or a helper of this test suite) calls one of
    ``targets``, directly or through the suite's own helpers and classes (``tests.*``),
    as far as its code names them."""
    seen = set() if seen is None else seen
    obj = getattr(obj, "__func__", obj)  # a method
    inner = getattr(getattr(obj, "hypothesis", None), "inner_test", None)  # @given
    obj = inspect.unwrap(inner or obj)
    module = getattr(obj, "__module__", None) or ""
    if id(obj) in seen or not (module == "tests" or module.startswith("tests.")):
        return False
    seen.add(id(obj))
    if isinstance(obj, type):
        return any(reaches(v, targets, seen) for v in vars(obj).values()
                   if isinstance(v, (types.FunctionType, staticmethod, classmethod)))
    if not isinstance(obj, types.FunctionType):
        return False
    return any(any(ref is t for t in targets)
               or (isinstance(ref, (types.FunctionType, type)) and reaches(ref, targets, seen))
               for ref in _referenced(obj))


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("slow"):
            continue
        if item.get_closest_marker("real_llm"):
            item.add_marker(pytest.mark.slow)
            continue
        fixtures = getattr(item, "_fixtureinfo", None)
        defs = fixtures.name2fixturedefs.values() if fixtures else ()
        seen: set[int] = set()
        if (reaches(getattr(item, "obj", None), DAEMON_STARTERS, seen)
                or any(reaches(d.func, DAEMON_STARTERS, seen) for ds in defs for d in ds)):
            item.add_marker(pytest.mark.slow)


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


def sqlite_only(conn, why: str) -> None:
    """Skip the running test on the PostgreSQL engine, saying why (an SQLite mechanism
    under test, or a part that engine does not have yet)."""
    if getattr(conn, "dialect", "sqlite") == "postgres":
        pytest.skip(f"SQLite engine only: {why}")


@pytest.fixture(params=["sqlite", "postgres"])
def engine_conn(request, tmp_path):
    """The store's connection on each engine in turn: a migrated ``memory.sqlite`` under
    ``tmp_path``, then a fresh PostgreSQL database (``tests/pg.py``) as tenant ``t1``."""
    if request.param == "sqlite":
        c = open_database(str(tmp_path / "memory.sqlite"))
        yield c
        c.close()
        return
    from actors.store.pg.engine import open_engine_connection

    c = open_engine_connection(request.getfixturevalue("pg_url"), "t1", size=2)
    yield c
    c.close()
    c.pool.close()


@pytest.fixture(params=["sqlite", "postgres"])
def activity_log_on(request, tmp_path):
    """Open the activity log on each engine in turn: ``open(**bounds)`` gives
    ``<tmp>/activity.sqlite``, then tenant ``t1``'s tables on a fresh PostgreSQL
    database; every log opened is closed at the end."""
    from actors.store.activity import ActivityLog

    opened: list = []
    pg = None
    if request.param == "postgres":
        from actors.store.pg.engine import open_engine_connection

        pg = open_engine_connection(request.getfixturevalue("pg_url"), "t1", size=2)

    def open_log(**bounds):
        if pg is None:
            log = ActivityLog.open_file(tmp_path / "activity.sqlite", **bounds)
        else:
            log = ActivityLog(pg, **bounds)
        opened.append(log)
        return log

    yield open_log
    if pg is not None:
        pg.close()
    else:
        for log in opened:
            log.close()
