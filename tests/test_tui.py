"""The terminal UI (``atomic-agent tui``) driven by textual's headless pilot.

Rules: one real daemon (``atomic-agent serve`` subprocess) with a scripted llama-server
serves the whole module; it is started before the tests from a trio loop in a thread
and seeded first with notes, links, a lesson, a procedure, a vote (voting on) and
profile facts. Each test runs the app with ``App.run_test(size=(80, 24))`` inside
``asyncio.run`` (textual is asyncio; these are plain sync tests under trio mode) and
asserts on what the daemon really holds, read back through the project's client.
Waits poll the UI with ``pilot.pause`` under a wall-clock bound (real processes: no
virtual time). SVG screenshots go to the module's tmp dir, and to ``$TUI_SHOTS`` when
set (that is how ``docs/tui-*.svg`` are made).
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("textual")

from textual.widgets import DataTable, Input

from actors.memory.lessons import LessonStore
from actors.memory.links import LinkStore
from actors.memory.notes import MemoryStore
from actors.memory.procedures import ProcedureStore
from actors.memory.profile import ProfileStore
from actors.memory.schema import open_database
from actors.memory.votes import VoteStore
from runtime.client import open_client
from runtime.tui import AtomicTUI
from runtime.tui.browser import MemoryScreen
from runtime.tui.dialogs import ConfirmScreen, DetailScreen, EditFactScreen, HelpScreen
from tests.daemon import REPO, run_daemon
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
def daemon_in_thread(tmp: Path) -> Iterator[tuple[str, str]]:
    """Run the scripted llama-server and ``atomic-agent serve`` on ``tmp / "state"``
    from a trio loop in a thread (the tests themselves are asyncio); yields (url,
    token); on exit the daemon gets SIGTERM and both are reaped (tests.daemon)."""
    started: queue.Queue = queue.Queue()
    stop = threading.Event()

    def hold() -> None:
        async def main() -> None:
            try:
                async with open_fake_llama(tmp, RULES, slots=2) as fake, \
                        run_daemon(tmp / "state", llm_url=fake.url) as d:
                    started.put((d.url, d.token))
                    while not stop.is_set():
                        await trio.sleep(0.05)
            except BaseException as exc:
                started.put(exc)
                raise
        trio.run(main)

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


def table_text(screen: MemoryScreen) -> str:
    table = screen.query_one(DataTable)
    return "\n".join(" ".join(str(c) for c in table.get_row_at(i)) for i in range(table.row_count))


# ================================================================= the chat screen


def test_chat_streams_replies_tools_and_memory_panel(env):
    async def scenario() -> None:
        app = env.app(session="tui-chat")
        async with app.run_test(size=SIZE) as pilot:
            chat = app.chat
            await until(pilot, lambda: app.bridge.session == "tui-chat", what="connect")
            await say(pilot, "My name is Dana, I live in Lisbon and I prefer pytest for testing.")
            await until(pilot, lambda: "Nice to meet you, Dana!" in chat.transcript_text()
                        and not chat.busy, what="reply")
            # reflection lands: the panel says what it wrote, with values fetched back
            await until(pilot, lambda: "fact city = Lisbon" in chat.panel_text(), what="wrote")
            panel = chat.panel_text()
            assert "ok in" in panel and "fact name = Dana" in panel
            assert "The user prefers" in panel
            # second turn recalls seeded notes by keyword and injects pinned facts
            await say(pilot, "how do I deploy on friday?")
            await until(pilot, lambda: chat.transcript_text().count("Noted.") >= 1
                        and not chat.busy, what="second reply")
            panel = chat.panel_text()
            assert f"#{env.ids['friday']} Friday deploys" in panel
            assert "editor: helix" in panel and "name: Dana" in panel
            # a tool step shows in the transcript, and in the panel's "wrote"
            await say(pilot, "Remember that I drink green tea")
            await until(pilot, lambda: "[tool] memory.notes.store" in chat.transcript_text()
                        and not chat.busy, what="tool")
            assert "tool notes.store" in chat.panel_text()
            env.shot(app, "chat")
            # /memory dump prints the active profile into the transcript
            await say(pilot, "/memory dump")
            await until(pilot, lambda: "active profile:" in chat.transcript_text())
            assert "* editor: helix" in chat.transcript_text()
            assert "~ test_runner: pytest [keywords: pytest, test]" in chat.transcript_text()
            # bad commands get a message, never a crash
            await say(pilot, "/bogus thing")
            await until(pilot, lambda: "unknown command '/bogus thing'" in chat.transcript_text())
        notes = env.memory("memory.notes.search", {"query": "green tea"})
        assert notes[0]["content"] == "Dana drinks green tea"  # "green" also finds blue-green

    run(scenario)


def test_session_lists_and_switches(env):
    async def scenario() -> None:
        app = env.app(session="tui-first")
        async with app.run_test(size=SIZE) as pilot:
            chat = app.chat
            await until(pilot, lambda: app.bridge.session == "tui-first")
            await say(pilot, "hello")
            await until(pilot, lambda: "Noted." in chat.transcript_text() and not chat.busy)
            await say(pilot, "/session")
            await until(pilot, lambda: "sessions (newest first" in chat.transcript_text())
            assert "* tui-first" in chat.transcript_text()
            await say(pilot, "/session tui-second")
            await until(pilot, lambda: app.bridge.session == "tui-second")
            assert "session tui-second" in chat.transcript_text()
            assert "hello" not in chat.transcript_text()
            await say(pilot, "/session")
            await until(pilot, lambda: "* tui-second" in chat.transcript_text())
            # by number: the list is newest first, so 2 is tui-first
            listed = chat._last_sessions
            n = [s["id"] for s in listed].index("tui-first") + 1
            await say(pilot, f"/session {n}")
            await until(pilot, lambda: app.bridge.session == "tui-first")
            await say(pilot, "/session bad/id!")
            await until(pilot, lambda: "error:" in chat.transcript_text())
            assert "session ids are 1-64 characters" in chat.transcript_text()
            # the refused hello left us on the session we had
            assert app.bridge.session == "tui-first"
            await say(pilot, "hello again")
            await until(pilot, lambda: chat.transcript_text().count("Noted.") == 1
                        and not chat.busy, what="a turn after the refused switch")
            # too long for one frame: refused here, the connection stays up
            await say(pilot, "x" * 600_000)
            await until(pilot, lambda: "that message is too long" in chat.transcript_text())
            await say(pilot, "/session new")
            await until(pilot, lambda: (app.bridge.session or "").startswith("s-"))

    run(scenario)


def test_cancel_busy_and_memory_command(env):
    async def scenario() -> None:
        app = env.app(session="tui-cancel")
        async with app.run_test(size=SIZE) as pilot:
            chat = app.chat
            await until(pilot, lambda: app.bridge.session == "tui-cancel")
            await say(pilot, "/cancel")
            await until(pilot, lambda: "no turn is running" in chat.transcript_text())
            await say(pilot, "Take your time with this one")
            await until(pilot, lambda: chat.turn is not None, what="turn.started")
            await say(pilot, "and another thing")
            await until(pilot, lambda: "a turn is still running" in chat.transcript_text())
            await pilot.press("escape")
            await until(pilot, lambda: "(turn ended: cancelled)" in chat.transcript_text()
                        and not chat.busy, what="cancelled")
            assert "Done, slowly." not in chat.transcript_text()
            # /memory opens Manage → Memory; Esc comes back with the input focused
            await say(pilot, "/memory")
            await until(pilot, lambda: app.screen is app.memory_screen)
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is chat)
            assert app.focused is chat.query_one("#say", Input)
            await say(pilot, "/help")
            await until(pilot, lambda: "/memory dump" in chat.transcript_text())
            # a long session keeps the newest MAX_BLOCKS blocks
            from runtime.tui.chat import MAX_BLOCKS
            for i in range(MAX_BLOCKS + 20):
                chat.add_line(f"line {i}")
            await pilot.pause()
            assert len(chat.query_one("#transcript").children) == MAX_BLOCKS
            assert f"line {MAX_BLOCKS + 19}" in chat.transcript_text()
            assert "/memory dump" not in chat.transcript_text()

    run(scenario)


# ============================================================ Manage → Memory


async def open_browser(pilot) -> MemoryScreen:
    app = pilot.app
    await until(pilot, lambda: app.bridge.session is not None, what="connect")
    await pilot.press("f2")
    screen = app.memory_screen
    await until(pilot, lambda: app.screen is screen and screen.rows, what="browser rows")
    return screen


def test_browser_channels_keys_and_details(env):
    async def scenario() -> None:
        app = env.app()
        async with app.run_test(size=SIZE) as pilot:
            m = await open_browser(pilot)
            assert m.channel == "profile"
            await until(pilot, lambda: "editor" in table_text(m))
            env.shot(app, "memory-profile")
            # 1-6 jump, [ ] cycle
            for key, channel in (("2", "notes"), ("3", "lessons"), ("4", "procedures"),
                                 ("5", "links"), ("6", "votes"), ("1", "profile")):
                await pilot.press(key)
                await until(pilot, lambda ch=channel: m.loaded == ch and m.rows, what=channel)
                assert m.status_text().startswith(f"{len(m.rows)} ")
            await pilot.press("right_square_bracket")
            assert m.channel == "notes"
            await pilot.press("left_square_bracket", "left_square_bracket")
            assert m.channel == "votes"
            await pilot.press("right_square_bracket")
            assert m.channel == "profile"
            # j / k move; Enter on a fact shows its history
            await until(pilot, lambda: len(m.rows) >= 3)
            keys = [r["key"] for r in m.rows]
            await pilot.press("j")
            assert m.current()["key"] == keys[1]
            await pilot.press("j", "k")
            assert m.current()["key"] == keys[1]
            await select(pilot, m, lambda r: r["key"] == "editor")
            await pilot.press("enter")
            detail = await until(pilot, lambda: isinstance(app.screen, DetailScreen)
                                 and "version(s)" in app.screen.body_text() and app.screen)
            assert "helix" in detail.body_text() and "active" in detail.body_text()
            env.shot(app, "memory-profile-history")
            await pilot.press("escape")
            assert app.screen is m
            # notes: index rows, f filter, Enter detail with links, g expands
            await pilot.press("2")
            await until(pilot, lambda: m.channel == "notes" and m.rows)
            assert "Old VPN config" not in table_text(m)
            env.shot(app, "memory-notes")
            await pilot.press("f")
            await until(pilot, lambda: m.archive == "archived" and "Old VPN config" in table_text(m))
            assert len(m.rows) == 1 and "[legacy]" in table_text(m)
            await pilot.press("f")
            await until(pilot, lambda: m.archive == "all" and "Rollbacks" in table_text(m)
                        and "Old VPN" in table_text(m))
            await pilot.press("f")
            await until(pilot, lambda: m.archive == "active" and "Old VPN" not in table_text(m))
            await select(pilot, m, lambda r: r["id"] == env.ids["rollback"])
            await pilot.press("enter")
            detail = await until(pilot, lambda: isinstance(app.screen, DetailScreen)
                                 and "links (" in app.screen.body_text() and app.screen)
            text = detail.body_text()
            assert "Rollbacks use the blue-green switch" in text
            assert f"-REFERENCES-> #{env.ids['checklist']}" in text and "Deploy checklist" in text
            await pilot.press("g")
            await until(pilot, lambda: "1 hop(s)" in detail.body_text())
            assert f"#{env.ids['friday']}" not in detail.body_text().split("neighbourhood")[1]
            await pilot.press("g")
            await until(pilot, lambda: "2 hop(s)" in detail.body_text())
            hood = detail.body_text().split("neighbourhood")[1]
            assert f"-RELATES_TO-> #{env.ids['friday']} Friday deploys" in hood
            env.shot(app, "memory-note-detail")
            await pilot.press("escape")
            # lessons: principle and parents
            await pilot.press("3")
            await until(pilot, lambda: m.channel == "lessons" and m.rows)
            await pilot.press("enter")
            detail = await until(pilot, lambda: isinstance(app.screen, DetailScreen)
                                 and "principle:" in app.screen.body_text() and app.screen)
            assert "Open ops/deploy.md" in detail.body_text()
            assert f"#{env.ids['checklist']} Deploy checklist" in detail.body_text()
            env.shot(app, "memory-lessons")
            await pilot.press("escape")
            # procedures: steps
            await pilot.press("4")
            await until(pilot, lambda: m.channel == "procedures" and m.rows)
            await pilot.press("enter")
            detail = await until(pilot, lambda: isinstance(app.screen, DetailScreen)
                                 and "steps:" in app.screen.body_text() and app.screen)
            assert "2. Ask the lead for approval" in detail.body_text()
            await pilot.press("escape")
            # links: edges
            await pilot.press("5")
            await until(pilot, lambda: m.channel == "links" and len(m.rows) >= 2)
            assert "REFERENCES" in table_text(m) and "RELATES_TO" in table_text(m)
            env.shot(app, "memory-links")
            await pilot.press("enter")
            detail = await until(pilot, lambda: isinstance(app.screen, DetailScreen)
                                 and "from #" in app.screen.body_text() and app.screen)
            await pilot.press("escape")
            # votes: the audit tail (voting is on in this state dir)
            await pilot.press("6")
            await until(pilot, lambda: m.channel == "votes" and m.rows)
            assert m.rows[0]["targetId"] == env.ids["checklist"] and "+1" in table_text(m)
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, DetailScreen)
                        and "session s-seed" in app.screen.body_text())
            await pilot.press("escape")
            # ? help, Esc back to chat
            await pilot.press("question_mark")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen))
            env.shot(app, "memory-help")
            await pilot.press("escape")
            assert app.screen is m
            await pilot.press("escape")
            assert app.screen is app.chat

    run(scenario)


def test_search_forget_edit_and_live_updates(env):
    async def scenario() -> None:
        app = env.app()
        async with app.run_test(size=SIZE) as pilot:
            m = await open_browser(pilot)
            await pilot.press("2")
            await until(pilot, lambda: m.channel == "notes" and m.rows)
            # / keyword search (the daemon's keyword-only op), Esc clears it
            await pilot.press("slash")
            assert app.focused is m.query_one("#search", Input)
            await pilot.press(*"rollback")
            await pilot.press("enter")
            await until(pilot, lambda: m.query_text == "rollback" and len(m.rows) == 1)
            assert m.rows[0]["id"] == env.ids["rollback"] and "keyword search" in m.status_text()
            await pilot.press("slash")
            m.query_one("#search", Input).value = "x" * 600
            await pilot.press("enter")
            assert "too long" in m.status_text()
            await pilot.press("escape")
            await until(pilot, lambda: m.query_text == "" and len(m.rows) > 1)
            # nothing matches → empty table and a message, no crash
            await pilot.press("slash")
            m.query_one("#search", Input).value = "!!! ???"
            await pilot.press("enter")
            await until(pilot, lambda: m.query_text == "!!! ???" and "0 match" in m.status_text())
            await pilot.press("enter", "d", "e")  # on an empty table
            await pilot.press("slash")
            await pilot.press("escape")
            await until(pilot, lambda: not m.query_text and m.rows)
            # d forgets a note after y; n keeps it
            await select(pilot, m, lambda r: r["id"] == env.ids["scratch"])
            await pilot.press("d")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("n")
            assert "kept" in m.status_text()
            assert env.memory("memory.notes.recall", {"id": env.ids["scratch"]})
            await pilot.press("d")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            env.shot(app, "memory-forget")
            await pilot.press("y")
            await until(pilot, lambda: f"forgot note #{env.ids['scratch']}" in m.status_text())
            await until(pilot, lambda: all(r["id"] != env.ids["scratch"] for r in m.rows))
            assert env.memory("memory.notes.recall", {"id": env.ids["scratch"]}) == []
            # e edits a profile fact; an invalid value is refused in the editor
            await pilot.press("1")
            await until(pilot, lambda: m.channel == "profile" and m.rows)
            await select(pilot, m, lambda r: r["key"] == "shell")
            await pilot.press("e")
            editor = await until(pilot, lambda: isinstance(app.screen, EditFactScreen)
                                 and app.screen)
            box = editor.query_one("#value", Input)
            assert box.value == "zsh"
            box.value = "   "
            await pilot.press("enter")
            assert "cannot be empty" in str(editor.query_one("#edit-error").content)
            box.value = "y" * 2001
            await pilot.press("enter")
            await until(pilot, lambda: "not saved" in str(editor.query_one("#edit-error").content))
            box.value = "fish"
            await pilot.press("enter")
            await until(pilot, lambda: "saved shell" in m.status_text())
            facts = {f["key"]: f for f in env.memory("memory.profile.list")}
            assert facts["shell"]["value"] == "fish" and facts["shell"]["pinned"] is True
            await until(pilot, lambda: any(r.get("value") == "fish" for r in m.rows))
            # e on the contextual fact keeps its keywords
            await select(pilot, m, lambda r: r["key"] == "test_runner")
            await pilot.press("e")
            editor = await until(pilot, lambda: isinstance(app.screen, EditFactScreen)
                                 and app.screen)
            editor.query_one("#value", Input).value = "pytest -x"
            await pilot.press("enter")
            await until(pilot, lambda: "saved test_runner" in m.status_text())
            fact = {f["key"]: f for f in env.memory("memory.profile.list")}["test_runner"]
            assert fact["pinned"] is False and fact["keywords"] == ["pytest", "test"]
            # d on a fact removes it (history kept)
            await pilot.press("d")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("y")
            await until(pilot, lambda: "forgot test_runner" in m.status_text())
            assert "test_runner" not in {f["key"] for f in env.memory("memory.profile.list")}
            # d and e where they do not apply say so
            await pilot.press("3")
            await until(pilot, lambda: m.channel == "lessons" and m.rows)
            await pilot.press("d")
            assert "read-only" in m.status_text()
            await pilot.press("e")
            assert "edits a profile fact" in m.status_text()
            await pilot.press("f")
            assert "filters notes only" in m.status_text()
            # live: a write by another client shows without pressing r
            await pilot.press("1")
            await until(pilot, lambda: m.channel == "profile" and m.rows)
            env.memory("memory.profile.set", {"key": "pager", "value": "less"})
            await until(pilot, lambda: "pager" in table_text(m), timeout=10, what="live update")
            # r refreshes; a toggles auto-refresh (every 5 s)
            await pilot.press("r")
            await until(pilot, lambda: "active fact" in m.status_text())
            await pilot.press("a")
            assert m.auto_timer is not None and "auto" in str(m.query_one("#channels").content)
            await pilot.press("2")
            await until(pilot, lambda: m.channel == "notes" and m.rows)
            before = {r["id"] for r in m.rows}
            m._stale = False
            # a write made while this screen shows: picked up by the live event or the timer
            stored = env.memory("memory.notes.store", {"content": "Auto refresh sees this note"})
            await until(pilot, lambda: stored["id"] in {r["id"] for r in m.rows}, timeout=12)
            assert stored["id"] not in before
            await pilot.press("a")
            assert m.auto_timer is None and "auto-refresh off" in m.status_text()

    run(scenario)


def test_auto_refresh_polls_without_events(env):
    async def scenario() -> None:
        app = env.app()
        async with app.run_test(size=SIZE) as pilot:
            m = await open_browser(pilot)
            await pilot.press("2")
            await until(pilot, lambda: m.channel == "notes" and m.rows)
            m.memory_changed = lambda frame: None  # deaf to events: only the timer is left
            await pilot.press("a")
            stored = env.memory("memory.notes.store", {"content": "Seen by polling alone"})
            t0 = time.monotonic()
            await until(pilot, lambda: stored["id"] in {r["id"] for r in m.rows}, timeout=12)
            assert time.monotonic() - t0 < 8

    run(scenario)


# ================================================================ failure paths


def test_tui_without_a_daemon_is_one_clear_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "runtime.cli", "tui", "--state-dir",
                        str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode == 3
    assert r.stderr.startswith("atomic-agent: no atomic-agent daemon is running for")
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_tui_help_names_the_keys():
    r = subprocess.run([sys.executable, "-m", "runtime.cli", "tui", "--help"], cwd=REPO,
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    for words in ("/memory dump", "/session", "j/k move", "[ ] cycle channel", "1-6 jump",
                  "/ keyword search", "d forget", "e edit a fact", "80x24", "--session"):
        assert words in text, words


def test_app_exits_cleanly_when_the_daemon_refuses(env):
    async def scenario() -> None:
        app = AtomicTUI(url=env.url, token="wrong-token")
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.failure is not None, what="failure")
        assert "wrong token" in app.failure and app.return_code == 1

    run(scenario)


def test_a_daemon_that_stops_is_reported_not_a_crash(tmp_path):
    (tmp_path / "state").mkdir()

    async def scenario(url: str, token: str, stopped: threading.Event) -> None:
        app = AtomicTUI(url=url, token=token, session="tui-gone")
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.bridge.session == "tui-gone")
            await pilot.press("f2")
            m = app.memory_screen
            await until(pilot, lambda: m.loaded == "profile")
            assert "0 active fact(s)" in m.status_text()
            await pilot.press("6")  # voting is off in this fresh state dir: the tail says so
            await until(pilot, lambda: m.loaded == "votes")
            assert "voting is off (memory.voting.enabled)" in m.status_text()
            await pilot.press("enter")  # an empty table: a message, no detail
            assert "nothing to show" in m.status_text()
            stopped.set()  # the daemon is stopped by the thread below
            await until(pilot, lambda: "connection to the daemon was lost"
                        in app.chat.transcript_text(), what="lost")
            await pilot.press("r")  # the browser says so too
            await until(pilot, lambda: "error:" in m.status_text(), what="browser error")
            await pilot.press("escape")
            await say(pilot, "anyone there?")
            await until(pilot, lambda: "error: not connected" in app.chat.transcript_text())
            assert "/session tui-gone reconnects" in app.chat.transcript_text()
            await say(pilot, "/session tui-gone")  # no daemon: one more error line
            await until(pilot, lambda: "cannot connect" in app.chat.transcript_text())
        assert app.return_code in (None, 0)

    stopped = threading.Event()
    with daemon_in_thread(tmp_path) as (url, token):
        failures: list[BaseException] = []  # the UI runs beside this thread, which stops
        runner = threading.Thread(target=_record, args=(   # the daemon when told to
            failures, asyncio.run, scenario(url, token, stopped)))
        runner.start()
        deadline = time.monotonic() + 60
        while runner.is_alive() and not stopped.wait(0.2) and time.monotonic() < deadline:
            pass
    runner.join(60)
    assert not runner.is_alive()
    if failures:
        raise failures[0]


def _record(failures: list[BaseException], fn: Callable[..., Any], *args: Any) -> None:
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001 - re-raised by the test thread
        failures.append(exc)


# ====================================================== pure helpers (no daemon)


def test_parse_tail_reads_what_memory_gave_the_turn():
    from runtime.tui.render import panel_lines, parse_tail

    tail = ("### memory-index\n- #1 [editor] The user edits code with vim every day\n\n"
            "### recalled\n- #2 [deploy] Deploy checklist lives in ops/deploy.md\n"
            "- #3 Friday deploys need approval\n\n### world\nworking directory: /x\n\n"
            "### conversation\nUSER: how do I deploy?\n\n### profile\n- name: Dana\n"
            "- test_runner: pytest\n\n### lessons\n*1 [deploy,ops] When deploying\n\n"
            "### respond\nRespond now with one JSON action.\n\n")
    mem = parse_tail(tail)
    assert mem.recalled == [(2, "Deploy checklist lives in ops/deploy.md"),
                            (3, "Friday deploys need approval")]
    assert mem.facts == ["name: Dana", "test_runner: pytest"]
    assert mem.lessons == ["*1 [deploy,ops] When deploying"] and mem.index_size == 1
    lines = panel_lines(mem, 26)
    assert all(len(line) <= 26 for line in lines) and "(pending)" in " ".join(lines)
    assert parse_tail("no sections [b]at all[/b]").recalled == []


def test_rows_fit_and_keep_brackets():
    from runtime.tui.render import matches, one_line, row_cells

    note = {"id": 4, "content": "[b]not markup[/b]\n  spread   out " + "x" * 200,
            "tags": ["a", "b"], "score": None, "archived": True}
    cells = row_cells("notes", note, 80)
    assert cells[2].startswith("(archived) [b]not markup[/b] spread out")
    assert len(cells[2]) <= 52
    assert cells[2].endswith("…")
    assert one_line("a  b\nc", 0) == "" and one_line("abc", 2) == "a…"
    lesson = {"id": 1, "activation": "When deploying", "principle": "Check the list",
              "tags": ["ops"], "status": "deprecated"}
    assert row_cells("lessons", lesson)[2] == "When deploying (deprecated)"
    assert matches("lessons", lesson, "CHECK list") and not matches("lessons", lesson, "vim")


def test_notes_search_op_is_keyword_only_and_counts_no_recall(conn):
    from actors.memory.profile import ProfileStore
    from actors.memory.tools import OPS, TOOL_NAMES, run_op

    notes = MemoryStore(conn)
    a = notes.store("Deploys need the checklist", tags=["ops"]).id
    b = notes.store("Archived deploy runbook", tags=["old"]).id
    notes.set_archived(b, True)
    notes.store("I prefer pytest for unit work")

    def hybrid(*args: Any, **kw: Any) -> list:
        raise AssertionError("the vector side must not be asked")

    profiles = ProfileStore(conn)
    hits, change = run_op(profiles, notes, "memory.notes.search", {"query": "deploy"},
                          recall=hybrid)
    assert {n.id for n in hits} == {a, b} and change == {}
    assert hits[0].score == 1.0
    tagged, _ = run_op(profiles, notes, "memory.notes.search", {"query": "deploy",
                                                               "tags": ["ops"], "k": 1})
    assert [n.id for n in tagged] == [a]
    counts = conn.execute("SELECT SUM(recall_count) FROM memories").fetchone()[0]
    assert counts == 0
    assert run_op(profiles, notes, "memory.notes.search", {"query": "???"})[0] == []
    assert not OPS["memory.notes.search"].writes and "memory.notes.search" not in TOOL_NAMES


def test_the_real_command_runs_in_a_terminal_and_quits(env):
    """``atomic-agent tui`` in a pseudo-terminal (80×24): it draws, connects, and
    Ctrl+Q ends it with status 0 and no traceback."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    pid, fd = pty.fork()
    if pid == 0:  # the child: become the TUI
        os.chdir(REPO)
        os.environ.update(TERM="xterm-256color", COLUMNS="80", LINES="24")
        os.execv(sys.executable, [sys.executable, "-m", "runtime.cli", "tui", "--state-dir",
                                  str(env.state), "--session", "tui-pty"])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    seen = b""
    deadline = time.monotonic() + 60
    try:
        while b"tui-pty" not in seen and time.monotonic() < deadline:
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    seen += os.read(fd, 65536)
                except OSError:
                    break
        assert b"tui-pty" in seen, seen[-2000:]
        os.write(fd, b"\x11")  # Ctrl+Q
        while time.monotonic() < deadline:
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                seen += chunk
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    assert os.waitstatus_to_exitcode(status) == 0, seen[-2000:]
    assert b"Traceback" not in seen


def test_bridge_errors_reach_the_ui_as_one_type():
    from runtime.client import ClientError
    from runtime.tui.bridge import as_client_error

    refused = ClientError("invalid_argument", "bad id")
    assert as_client_error(refused) is refused
    group = ExceptionGroup("x", [ExceptionGroup("y", [ValueError("v"), refused])])
    assert as_client_error(group) is refused
    other = as_client_error(ExceptionGroup("x", [KeyError("k")]))
    assert other.code == "failed" and "ExceptionGroup" in str(other)
