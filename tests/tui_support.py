"""Shared harness of the TUI tests (``tests/test_tui_chat.py``, ``tests/test_tui_memory.py``).

``env`` is a module-scoped fixture: one real daemon (``atomic-agent serve`` subprocess)
with a scripted llama-server, started from a trio loop in a thread (the tests are
asyncio: textual's pilot) and seeded first with notes, links, a lesson, a procedure, a
vote (voting on) and profile facts. Helpers wait on the UI with ``pilot.pause`` under a
wall-clock bound (real processes: no virtual time). SVG screenshots go to the module's
tmp dir, and to ``$TUI_SHOTS`` when set (that is how ``docs/tui-*.svg`` are made).
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from textual.widgets import DataTable, Input

from actors.store.lessons import LessonStore
from actors.store.links import LinkStore
from actors.store.notes import MemoryStore
from actors.store.procedures import ProcedureStore
from actors.store.profile import ProfileStore
from actors.store.schema import open_database
from actors.store.votes import VoteStore
from runtime.shell.client import open_client
from runtime.shell.tui import AtomicTUI
from runtime.shell.tui.browser import MemoryScreen
from runtime.shell.tui.render import CHANNELS
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama

REFLECTION = ("SET name=Dana\nSET city=Lisbon\n"
              "NOTE The user prefers pytest for testing. [tags=testing]\n")
RULES = [
    {"match": "### output", "times": 1, "response": REFLECTION},
    {"match": "### output", "response": "NONE"},
    {"grammar_contains": "reply", "match": "Remember that I drink green tea", "times": 1,
     "response": '{"tool": "memory.notes.store", "args": {"content": "Dana drinks green tea", '
                 '"tags": ["drinks"]}}'},
    {"grammar_contains": "reply", "match": "My name is Dana", "times": 1,
     "response": '{"reply": "Nice to meet you, Dana! I will remember that."}'},
    {"grammar_contains": "reply", "match": "Take your time", "times": 1, "delay_ms": 5000,
     "response": '{"reply": "Done, slowly."}'},
    {"grammar_contains": "reply", "response": '{"reply": "Noted."}'},
]
SIZE = (80, 24)


@dataclass
class Env:
    url: str
    token: str
    state: Path
    shots: list[Path]
    ids: dict[str, int]

    def app(self, session: str | None = None) -> AtomicTUI:
        return AtomicTUI(url=self.url, token=self.token, session=session)

    def memory(self, op: str, args: dict | None = None) -> Any:
        """Run one memory op through the project's client (a fresh trio loop)."""
        async def go() -> Any:
            async with open_client(url=self.url, token=self.token) as c:
                return await c.memory(op, args)
        return trio.run(go)

    def clients(self) -> int:
        """Websocket clients the daemon serves now, this helper's own not counted."""
        async def go() -> int:
            async with open_client(url=self.url, token=self.token) as c:
                return (await c.request({"type": "metrics"}, "metrics.result"))["clients"] - 1
        return trio.run(go)

    def shot(self, app: AtomicTUI, name: str) -> None:
        for folder in self.shots:
            app.save_screenshot(f"tui-{name}.svg", str(folder))


def _seed(state: Path) -> dict[str, int]:
    state.mkdir(parents=True)
    (state / "config.json").write_text(json.dumps({"memory": {"voting": {"enabled": True}}}))
    conn = open_database(str(state / "memory.sqlite"))
    notes = MemoryStore(conn)
    ids = {
        "checklist": notes.store("Deploy checklist lives in ops/deploy.md", tags=["deploy"]).id,
        "friday": notes.store("Friday deploys need approval from the lead", tags=["deploy"]).id,
        "rollback": notes.store("Rollbacks use the blue-green switch", tags=["ops"]).id,
        "vpn": notes.store("Old VPN config lives on the wiki [legacy]", tags=["vpn"]).id,
        "scratch": notes.store("Scratch note about the coffee machine", tags=["tmp"]).id,
    }
    notes.set_archived(ids["vpn"], True)
    links = LinkStore(conn)
    links.add(ids["rollback"], ids["checklist"], "REFERENCES")
    links.add(ids["checklist"], ids["friday"], "RELATES_TO")
    ids["lesson"] = LessonStore(conn).create(
        "When the user mentions deploy, check the checklist first",
        "Open ops/deploy.md and follow it before touching prod.",
        parent_ids=[ids["checklist"]], tags=["deploy", "ops"]).id
    ids["procedure"] = ProcedureStore(conn).create(
        "When a deploy is requested",
        ["Read the checklist", {"description": "Ask the lead for approval", "toolHint": None}],
        tags=["deploy"]).id
    VoteStore(conn, enabled=True).record("memory", ids["checklist"], 1, "s-seed", turn_index=1)
    profile = ProfileStore(conn)
    profile.set("editor", "helix", pinned=True)
    profile.set("test_runner", "pytest", pinned=False, keywords=["pytest", "test"])
    profile.set("shell", "zsh", pinned=True)
    conn.close()
    return ids


@contextmanager
def daemon_in_thread(tmp: Path, rules: list[dict] | None = None
                     ) -> Iterator[tuple[str, str]]:
    """Run the scripted llama-server (``rules``, default :data:`RULES`) and
    ``atomic-agent serve`` on ``tmp / "state"`` from a trio loop in a thread (the tests
    themselves are asyncio); yields (url, token); on exit the daemon gets SIGTERM and
    both are reaped (tests.daemon)."""
    started: queue.Queue = queue.Queue()
    stop = threading.Event()

    ended: list[BaseException] = []  # what the daemon's block raised (exit status …)

    def hold() -> None:
        async def main() -> None:
            try:
                async with open_fake_llama(tmp, RULES if rules is None else rules,
                                           slots=2) as fake, \
                        run_daemon(tmp / "state", llm_url=fake.url) as d:
                    started.put((d.url, d.token))
                    while not stop.is_set():
                        await trio.sleep(0.05)
            except BaseException as exc:
                started.put(exc)
                raise
        try:
            trio.run(main)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            ended.append(exc)

    thread = threading.Thread(target=hold, name="tui-daemon")
    thread.start()
    got = started.get(timeout=120)
    if isinstance(got, BaseException):
        thread.join(10)
        raise got
    try:
        yield got
    finally:
        stop.set()
        thread.join(30)
        assert not thread.is_alive()
        if ended:  # e.g. run_daemon's check of the exit status: the test fails with it
            raise ended[0]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """One seeded daemon for the module (see :func:`daemon_in_thread`)."""
    tmp = tmp_path_factory.mktemp("tui")
    ids = _seed(tmp / "state")
    shots = [tmp]
    if os.environ.get("TUI_SHOTS"):
        shots.append(Path(os.environ["TUI_SHOTS"]))
    with daemon_in_thread(tmp) as (url, token):
        yield Env(url, token, tmp / "state", shots, ids)


async def until(pilot, cond: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    """Let the app run until ``cond()`` is truthy; AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    if os.environ.get("TUI_DEBUG"):
        import inspect
        print("until", inspect.stack()[1].lineno, what, flush=True)
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            screen = pilot.app.screen
            seen = (pilot.app.chat.transcript_text() + "\n--- panel ---\n"
                    + pilot.app.chat.panel_text()) if screen is pilot.app.chat else repr(screen)
            raise AssertionError(f"timed out waiting for {what or cond}; screen:\n{seen}")
        await pilot.pause(0.05)


async def say(pilot, text: str) -> None:
    box = pilot.app.chat.query_one("#say", Input)
    box.focus()
    box.value = text
    await pilot.press("enter")


def run(scenario: Callable[[], Any]) -> None:
    asyncio.run(scenario())


async def select(pilot, m: MemoryScreen, pred: Callable[[dict], bool]) -> dict:
    """Move the cursor with ``k`` to the top, then ``j`` down to the first row for
    which ``pred`` holds; AssertionError when there is none."""
    for _ in range(len(m.rows)):
        await pilot.press("k")
    for _ in range(len(m.rows)):
        row = m.current()
        if row is not None and pred(row):
            return row
        await pilot.press("j")
    raise AssertionError(f"no such row in {m.channel}: {m.rows}")


def drawn_text(app) -> str:
    """What the terminal shows now: the text of textual's SVG screenshot, markup and
    entities resolved (so a test sees the characters drawn, not the data behind them)."""
    import html
    import re

    svg = app.export_screenshot()
    spans = re.findall(r"<text[^>]*>(.*?)</text>", svg, flags=re.S)
    return html.unescape("".join(re.sub(r"<[^>]+>", "", t) for t in spans)).replace("\xa0", " ")


def table_text(screen: MemoryScreen) -> str:
    table = screen.query_one(DataTable)
    return "\n".join(" ".join(str(c) for c in table.get_row_at(i)) for i in range(table.row_count))


async def jump(pilot, m: MemoryScreen, key: str) -> None:
    """Press channel key ``key`` (``1``–``6``) and wait until that channel's rows show."""
    channel = CHANNELS[int(key) - 1]
    await pilot.press(key)
    await until(pilot, lambda: m.channel == channel and m.rows, what=f"{channel} rows")


async def open_browser(pilot) -> MemoryScreen:
    app = pilot.app
    await until(pilot, lambda: app.bridge.session is not None, what="connect")
    await pilot.press("f2")
    screen = app.memory_screen
    await until(pilot, lambda: app.screen is screen and screen.rows, what="browser rows")
    return screen

