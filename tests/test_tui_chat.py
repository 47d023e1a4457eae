"""The TUI's chat screen, its commands and its failure paths (``atomic-agent tui``).

Rules: textual's headless pilot at 80×24 (``App.run_test``) inside ``asyncio.run`` (plain
sync tests under trio mode); one seeded daemon with a scripted llama-server for the
module (``tests.tui_support.env``), or a private one where the test stops it. Every
assertion is on text the daemon really produced or holds.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("textual")

from textual.widgets import Input

from runtime.shell.tui import AtomicTUI
from tests.daemon import REPO
from tests.tui_support import (
    SIZE,
    daemon_in_thread,
    env,
    run,
    say,
    until,
)

__all__ = ["env"]  # the module-scoped fixture, imported


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
            assert "editor: helix" in panel  # (the name: only when names are asked about)
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
            await say(pilot, "/title Greetings   only")
            await until(pilot, lambda: "now titled 'Greetings only'" in chat.transcript_text())
            await say(pilot, "/session")
            await until(pilot, lambda: "sessions (newest first" in chat.transcript_text())
            assert "* tui-first  'Greetings only'" in chat.transcript_text()
            await say(pilot, "/session tui-second")
            await until(pilot, lambda: app.bridge.session == "tui-second")
            assert "session tui-second" in chat.transcript_text()
            assert "hello" not in chat.transcript_text()
            await say(pilot, "/session")
            # a session is saved with its first turn; until then the list says so
            await until(pilot, lambda: "* tui-second  new: saved with its first turn"
                        in chat.transcript_text())
            listed = chat._last_sessions
            assert "tui-second" not in [s["id"] for s in listed]
            n = [s["id"] for s in listed].index("tui-first") + 1
            await say(pilot, f"/session {n}")
            await until(pilot, lambda: app.bridge.session == "tui-first")
            # switching back shows where the conversation stands
            await until(pilot, lambda: "earlier in this session" in chat.transcript_text())
            assert "you> hello" in chat.transcript_text()
            assert "agent> Noted." in chat.transcript_text()
            await say(pilot, "/session bad/id!")
            await until(pilot, lambda: "error:" in chat.transcript_text())
            assert "session ids are 1-64 characters" in chat.transcript_text()
            # the refused hello left us on the session we had
            assert app.bridge.session == "tui-first"
            await say(pilot, "hello again")
            await until(pilot, lambda: chat.transcript_text().count("Noted.") == 2
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
            from runtime.shell.tui.chat import MAX_BLOCKS
            for i in range(MAX_BLOCKS + 20):
                chat.add_line(f"line {i}")
            await pilot.pause()
            assert len(chat.query_one("#transcript").children) == MAX_BLOCKS
            assert f"line {MAX_BLOCKS + 19}" in chat.transcript_text()
            assert "/memory dump" not in chat.transcript_text()

    run(scenario)


# ================================================================ failure paths


def test_tui_without_a_daemon_is_one_clear_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "runtime.shell.cli", "tui", "--state-dir",
                        str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode == 3
    assert r.stderr.startswith("atomic-agent: no atomic-agent daemon is running for")
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_tui_help_names_the_keys():
    r = subprocess.run([sys.executable, "-m", "runtime.shell.cli", "tui", "--help"], cwd=REPO,
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


def test_the_real_command_runs_in_a_terminal_and_quits(env):
    """``atomic-agent tui`` in a pseudo-terminal (80×24): it draws, connects, and
    Ctrl+Q ends it with status 0 and no traceback."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    pid, fd = pty.fork()
    if pid == 0:  # the child: become the TUI (never back into pytest)
        try:
            os.chdir(REPO)
            os.environ.update(TERM="xterm-256color", COLUMNS="80", LINES="24")
            os.execv(sys.executable, [sys.executable, "-m", "runtime.shell.cli", "tui",
                                      "--state-dir", str(env.state), "--session", "tui-pty"])
        finally:
            os._exit(127)
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
        status = None
        while status is None and time.monotonic() < deadline + 10:  # bounded: a hung TUI
            done, code = os.waitpid(pid, os.WNOHANG)                  # fails, never blocks
            if done:
                status = code
            else:
                time.sleep(0.05)
        assert status is not None, f"the TUI did not exit after Ctrl+Q: {seen[-2000:]}"
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
    from runtime.shell.client import ClientError
    from runtime.shell.tui.bridge import as_client_error

    refused = ClientError("invalid_argument", "bad id")
    assert as_client_error(refused) is refused
    group = ExceptionGroup("x", [ExceptionGroup("y", [ValueError("v"), refused])])
    assert as_client_error(group) is refused
    other = as_client_error(ExceptionGroup("x", [KeyError("k")]))
    assert other.code == "failed" and "ExceptionGroup" in str(other)



def test_bridge_matches_answers_by_id_and_serialises_session_opens(env):
    """Every request carries an ``id``: an ``error`` answer reaches its own request and
    the answers after it stay matched (no stray error in the transcript); two session
    switches at once run one after the other and leave one connection."""
    from actors.memory import ops
    from runtime.shell.client import ClientError
    from runtime.shell.outbound import ErrorFrame
    from runtime.shell.protocol import Subscribe
    from runtime.shell.tui.bridge import BridgeFrame, DaemonBridge

    async def scenario() -> None:
        frames: list[BridgeFrame] = []
        bridge = DaemonBridge(None, frames.append, url=env.url, token=env.token)
        try:
            first = await bridge.connect("tui-bridge-a")
            assert env.clients() == 1
            with pytest.raises(ClientError) as refused:
                await bridge._call(bridge._request, Subscribe(channels=["nope"]))
            assert refused.value.code == "invalid_argument"
            assert await bridge.cancel() is False  # no turn runs
            # a session is saved with its first turn: opening one leaves nothing behind
            assert first not in [s["id"] for s in await bridge.sessions()]
            assert await bridge.history(first) == []
            assert [f for f in frames if isinstance(f, ErrorFrame)] == []
            got = await asyncio.gather(bridge.switch("tui-bridge-b"),
                                       bridge.switch("tui-bridge-c"))
            assert sorted(got) == ["tui-bridge-b", "tui-bridge-c"]
            assert bridge.session in got and env.clients() == 1
            assert (await bridge.run(ops.Stats()))["notes"] >= 1
        finally:
            await asyncio.to_thread(bridge.close)
        assert env.clients() == 0

    run(scenario)


def test_the_memory_panel_takes_a_third_of_a_wide_terminal(env):
    async def scenario() -> None:
        app = env.app(session="tui-wide")
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.bridge.session == "tui-wide")
            panel = app.chat.query_one("#panel")
            await until(pilot, lambda: panel.outer_size.width == 39, what="panel width")

    run(scenario)


def test_a_tool_call_asks_in_a_dialog(tmp_path):
    """A turn that wants to run one of the user's MCP tools that changes something opens a
    dialog with the call; ``y`` runs it once, ``n`` denies it, and the transcript says
    which (docs/tools.md)."""
    import json

    state, log = tmp_path / "state", tmp_path / "calls.jsonl"
    state.mkdir()
    (state / "config.json").write_text(json.dumps({"tools": {"mcpServers": {"notes": {
        "command": sys.executable, "args": ["-m", "tests.fakes.mcp_tool_server", "--log",
                                            str(log)], "cwd": str(REPO)}}}}))
    rules = []
    for word in ("alpha", "beta"):
        match = f"line {word} to the team notes"
        rules += [{"grammar_contains": '"none" |', "match": match, "times": 1,
                   "response": "notes.append_note"},
                  {"grammar_contains": "notes.append_note", "match": match, "times": 1,
                   "response": json.dumps({"tool": "notes.append_note",
                                           "args": {"text": word}})}]
    rules.append({"grammar_contains": "reply", "response": '{"reply": "Done."}'})

    async def scenario(url: str, token: str) -> None:
        from runtime.shell.tui.dialogs import ApprovalScreen

        app = AtomicTUI(url=url, token=token, session="tui-tools")
        async with app.run_test(size=SIZE) as pilot:
            chat = app.chat
            await until(pilot, lambda: app.bridge.session == "tui-tools")
            await say(pilot, "append the line alpha to the team notes file")
            # (the screen is pushed before its widgets are mounted: wait for both)
            await until(pilot, lambda: isinstance(app.screen, ApprovalScreen)
                        and bool(app.screen.query("#question")), what="dialog")
            text = str(app.screen.query_one("#question").content)
            assert 'notes.append_note {"text": "alpha"}' in text
            assert "Append a line to the team's notes file." in text
            await pilot.press("y")
            await until(pilot, lambda: "[tool] allowed once" in chat.transcript_text()
                        and not chat.busy, what="allowed")
            await say(pilot, "append the line beta to the team notes file")
            await until(pilot, lambda: isinstance(app.screen, ApprovalScreen)
                        and bool(app.screen.query("#question")), what="dialog 2")
            await pilot.press("n")
            await until(pilot, lambda: "[tool] denied" in chat.transcript_text()
                        and not chat.busy, what="denied")
            assert "I did not run notes.append_note: you did not allow it." in \
                chat.transcript_text()

    with daemon_in_thread(tmp_path, rules) as (url, token):
        run(lambda: scenario(url, token))
    assert [json.loads(x)["args"]["text"] for x in log.read_text().splitlines()] == ["alpha"]

