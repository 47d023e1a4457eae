"""Sessions from the CLI, through a real daemon: reading memory,
metrics or the session list leaves no session behind; empty sessions left by older
versions are pruned at start; ``sessions list|show|delete`` manage conversations; a
mistyped ``--session`` is said plainly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import trio

from actors.agent.sessions import SessionStore
from runtime.shell.client import ClientError, open_client
from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama

RULES = [{"grammar_contains": "reply", "response": '{"reply": "Hello there."}'}]


def cli(state: Path, *argv: str, code: int = 0) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "runtime.shell.cli", "--state-dir", str(state),
                           *argv], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == code, (argv, done.returncode, done.stdout, done.stderr)
    return done


def stored_sessions(state: Path) -> list[str]:
    store = SessionStore(str(state / "sessions.sqlite"))
    try:
        return [s["id"] for s in store.list(1000)]
    finally:
        store.close()


async def run_cli(state: Path, *argv: str, code: int = 0) -> subprocess.CompletedProcess:
    return await trio.to_thread.run_sync(lambda: cli(state, *argv, code=code))


async def test_reading_leaves_no_session_and_empty_ones_are_pruned(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    old = SessionStore(str(state / "sessions.sqlite"))  # what an older version left behind
    for i in range(5):
        old.create(f"empty-{i}")
    old.close()
    async with open_fake_llama(tmp_path, RULES) as fake, run_daemon(state, llm_url=fake.url) as d:
        for argv in (["memory", "stats"], ["metrics"], ["memory", "profile", "list"],
                     ["memory", "notes", "list"], ["sessions"], ["sessions", "list"]):
            await run_cli(state, *argv)
        async with open_client(url=d.url, token=d.token) as c:  # a client that only watches
            await c.request({"type": "subscribe", "channels": ["memory"]}, "subscribed")
            assert c.created
        listed = json.loads((await run_cli(state, "sessions", "list", "--json")).stdout)
        assert listed == []
        assert "(no sessions yet" in (await run_cli(state, "sessions")).stdout
    assert stored_sessions(state) == []


async def test_sessions_list_show_delete_and_a_mistyped_session(tmp_path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path, RULES) as fake, run_daemon(state, llm_url=fake.url) as d:
        first = await run_cli(state, "ask", "--no-memory", "--session", "garden",
                              "I planted basil")
        assert "(new session 'garden': no session had that id" in first.stderr
        again = await run_cli(state, "ask", "--no-memory", "--session", "garden", "and mint")
        assert "no session" not in again.stderr
        await run_cli(state, "ask", "--no-memory", "hello")  # a fresh session, no notice
        listed = json.loads((await run_cli(state, "sessions", "list", "--json")).stdout)
        assert [s["turns"] for s in listed if s["id"] == "garden"] == [2]
        assert len(listed) == 2
        text = (await run_cli(state, "sessions")).stdout
        assert "garden  'I planted basil'  2 turns  updated 20" in text
        shown = (await run_cli(state, "sessions", "show", "garden")).stdout
        assert shown.startswith("session garden 'I planted basil': 2 turns, started 20")
        assert "] user: I planted basil" in shown and "] assistant: Hello there." in shown
        one = json.loads((await run_cli(state, "sessions", "show", "garden", "--messages", "1",
                                        "--json")).stdout)
        assert [m["text"] for m in one["messages"]] == ["Hello there."]
        missing = await run_cli(state, "sessions", "show", "gardn", code=1)
        assert "no session 'gardn'" in missing.stderr
        deleted = await run_cli(state, "sessions", "delete", "garden")
        assert "deleted session garden (its memory is kept)" in deleted.stdout
        await run_cli(state, "sessions", "delete", "garden", code=1)
        await run_cli(state, "sessions", "show", "garden", code=1)
        async with open_client(url=d.url, token=d.token) as c:
            try:
                await c.request({"type": "session.get", "session": "no/such"}, "session.result")
                raise AssertionError("a bad id was answered")
            except ClientError as exc:
                assert exc.code == "not_found"
    assert len(stored_sessions(state)) == 1


async def test_sessions_have_titles_that_can_be_renamed(tmp_path):
    """A session's title is its first user line, shortened, until it is given one
    (``sessions rename``, the ``session.rename`` frame); every listing shows it, and an
    empty title gives the first line back."""
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path, RULES) as fake, run_daemon(state, llm_url=fake.url):
        long_line = ("Can you help me plan a week of vegetarian dinners for a family of four "
                     "on a budget?")
        await run_cli(state, "ask", "--session", "dinners", long_line)
        await run_cli(state, "ask", "--session", "dinners", "and a dessert too")
        assert json.loads((await run_cli(state, "sessions", "--json")).stdout) == \
            json.loads((await run_cli(state, "sessions", "list", "--json")).stdout)
        listed = json.loads((await run_cli(state, "sessions", "list", "--json")).stdout)
        title = listed[0]["title"]
        assert title.endswith("…") and long_line.startswith(title[:-1]) and len(title) <= 60
        assert f"'{title}'" in (await run_cli(state, "sessions")).stdout
        renamed = await run_cli(state, "sessions", "rename", "dinners", "Week of dinners")
        assert "is now 'Week of dinners'" in renamed.stdout
        shown = json.loads((await run_cli(state, "sessions", "show", "dinners", "--json")).stdout)
        assert shown["title"] == "Week of dinners"
        assert "'Week of dinners'" in (await run_cli(state, "sessions", "show", "dinners")).stdout
        await run_cli(state, "sessions", "rename", "dinners", "")
        listed = json.loads((await run_cli(state, "sessions", "list", "--json")).stdout)
        assert listed[0]["title"] == title
        missing = await run_cli(state, "sessions", "rename", "nope", "x", code=1)
        assert "no session 'nope'" in missing.stderr
        too_long = await run_cli(state, "sessions", "rename", "dinners", "x" * 201, code=1)
        assert "at most 200 characters" in too_long.stderr
