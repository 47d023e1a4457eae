"""The fast tier (``-m "not slow"``): every ``real_llm`` test is ``slow``, and so is every
test that starts a real daemon, found by ``tests.conftest.reaches`` through helpers,
fixtures and imports inside a test's body."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import DAEMON_STARTERS, reaches
from tests.daemon import run_daemon

TESTS = Path(__file__).resolve().parent


class _Collected:
    """A plugin that keeps the items a ``--collect-only`` run collected."""

    def __init__(self) -> None:
        self.items: list[pytest.Item] = []

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.items = list(session.items)


def test_slow_is_a_registered_marker(pytestconfig):
    assert any(line.startswith("slow:") for line in pytestconfig.getini("markers"))


def test_every_real_llm_test_is_marked_slow():
    files = sorted(str(p) for p in TESTS.glob("test_*.py")
                   if p.name != Path(__file__).name and "real_llm" in p.read_text())
    seen = _Collected()
    code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *files], plugins=[seen])
    assert code == pytest.ExitCode.OK
    real = [item for item in seen.items if item.get_closest_marker("real_llm")]
    assert len(real) >= 10, [item.nodeid for item in seen.items]
    assert [item.nodeid for item in real if not item.get_closest_marker("slow")] == []


async def _with_a_daemon(state: Path) -> None:
    async with run_daemon(state):
        pass


async def _through_a_helper(tmp_path):
    await _with_a_daemon(tmp_path)


async def _importing_it_in_the_body(tmp_path):
    from tests.daemon import run_daemon as start

    async with start(tmp_path):
        pass


def _in_a_nested_function(tmp_path):
    def inner():
        return run_daemon(tmp_path)
    return inner


def _without_a_daemon(tmp_path):
    return tmp_path / "state"


def test_a_test_that_starts_a_daemon_is_found_however_it_reaches_one():
    for test in (_with_a_daemon, _through_a_helper, _importing_it_in_the_body,
                 _in_a_nested_function):
        assert reaches(test, DAEMON_STARTERS), test.__name__
    assert not reaches(_without_a_daemon, DAEMON_STARTERS)
