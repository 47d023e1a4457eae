"""Manage → Memory in the TUI: every key (docs/architecture.md §8), on real
data.

Rules: textual's headless pilot at 80×24 (``App.run_test``) inside ``asyncio.run`` (plain
sync tests under trio mode); one seeded daemon with a scripted llama-server for the
module (``tests.tui_support.env``). Writes made through the UI are checked through the
daemon afterwards with the project's client; pure helpers are tested at the end.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

pytest.importorskip("textual")

from textual.widgets import Input

from actors.agent.prompt import RESPOND
from actors.store.notes import MemoryStore
from runtime.shell.tui.dialogs import ConfirmScreen, DetailScreen, EditFactScreen, HelpScreen
from tests.tui_support import (
    SIZE,
    drawn_text,
    env,
    jump,
    open_browser,
    run,
    select,
    table_text,
    until,
)

__all__ = ["env"]  # the module-scoped fixture, imported


# ============================================================ Manage → Memory


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
            keys = [r.key for r in m.rows]
            await pilot.press("j")
            assert m.current().key == keys[1]
            await pilot.press("j", "k")
            assert m.current().key == keys[1]
            await select(pilot, m, lambda r: r.key == "editor")
            await pilot.press("enter")
            detail = await until(pilot, lambda: isinstance(app.screen, DetailScreen)
                                 and "version(s)" in app.screen.body_text() and app.screen)
            assert "helix" in detail.body_text() and "active" in detail.body_text()
            env.shot(app, "memory-profile-history")
            await pilot.press("escape")
            assert app.screen is m
            # notes: index rows, f filter, Enter detail with links, g expands
            await jump(pilot, m, "2")
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
            await select(pilot, m, lambda r: r.id == env.ids["rollback"])
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
            await jump(pilot, m, "3")
            await pilot.press("enter")
            detail = await until(pilot, lambda: isinstance(app.screen, DetailScreen)
                                 and "principle:" in app.screen.body_text() and app.screen)
            assert "Open ops/deploy.md" in detail.body_text()
            assert f"#{env.ids['checklist']} Deploy checklist" in detail.body_text()
            env.shot(app, "memory-lessons")
            await pilot.press("escape")
            # procedures: steps
            await jump(pilot, m, "4")
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
            await jump(pilot, m, "6")
            assert m.rows[0].target_id == env.ids["checklist"] and "+1" in table_text(m)
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
            await jump(pilot, m, "2")
            # / keyword search (the daemon's keyword-only op), Esc clears it
            await pilot.press("slash")
            assert app.focused is m.query_one("#search", Input)
            await pilot.press(*"rollback")
            await pilot.press("enter")
            await until(pilot, lambda: m.query_text == "rollback" and len(m.rows) == 1)
            assert m.rows[0].id == env.ids["rollback"] and "keyword search" in m.status_text()
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
            await pilot.press("enter")  # on an empty table: a message each, no crash
            assert "nothing to show here" in m.status_text()
            await pilot.press("d")
            assert "nothing to forget" in m.status_text()
            await pilot.press("e")
            assert "e edits a profile fact" in m.status_text()
            await pilot.press("slash")
            await pilot.press("escape")
            await until(pilot, lambda: not m.query_text and m.rows)
            # d forgets a note after y; n keeps it
            await select(pilot, m, lambda r: r.id == env.ids["scratch"])
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
            await until(pilot, lambda: all(r.id != env.ids["scratch"] for r in m.rows))
            assert env.memory("memory.notes.recall", {"id": env.ids["scratch"]}) == []
            # e edits a profile fact; an invalid value is refused in the editor
            await jump(pilot, m, "1")
            await select(pilot, m, lambda r: r.key == "shell")
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
            await until(pilot, lambda: any(getattr(r, "value", None) == "fish" for r in m.rows))
            # e on the contextual fact keeps its keywords
            await select(pilot, m, lambda r: r.key == "test_runner")
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
            await jump(pilot, m, "3")
            await pilot.press("d")
            assert "read-only" in m.status_text()
            await pilot.press("e")
            assert "edits a profile fact" in m.status_text()
            await pilot.press("f")
            assert "filters notes only" in m.status_text()
            # live: a write by another client shows without pressing r
            await jump(pilot, m, "1")
            env.memory("memory.profile.set", {"key": "pager", "value": "less [/] or [bold"})
            await until(pilot, lambda: "pager" in table_text(m), timeout=10, what="live update")
            await pilot.pause(0.1)  # drawn: stored brackets are shown as typed, never markup
            assert "less [/] or [bold" in drawn_text(app)
            # r refreshes; a toggles auto-refresh (every 5 s)
            loads = m.loads
            await pilot.press("r")
            await until(pilot, lambda: m.loads > loads and "active fact" in m.status_text(),
                        what="r reads the channel again")
            await pilot.press("a")
            assert m.auto_timer is not None and "auto" in str(m.query_one("#channels").content)
            await jump(pilot, m, "2")
            before = {r.id for r in m.rows}
            # a write made while this screen shows: picked up by the live event or the timer
            stored = env.memory("memory.notes.store", {"content": "Auto refresh sees this note"})
            await until(pilot, lambda: stored["id"] in {r.id for r in m.rows}, timeout=12)
            assert stored["id"] not in before
            await pilot.press("a")
            assert m.auto_timer is None and "auto-refresh off" in m.status_text()

    run(scenario)


def test_auto_refresh_polls_without_events(env):
    async def scenario() -> None:
        app = env.app()
        async with app.run_test(size=SIZE) as pilot:
            m = await open_browser(pilot)
            await jump(pilot, m, "2")
            m.memory_changed = lambda frame: None  # deaf to events: only the timer is left
            await pilot.press("a")
            stored = env.memory("memory.notes.store", {"content": "Seen by polling alone"})
            t0 = time.monotonic()
            await until(pilot, lambda: stored["id"] in {r.id for r in m.rows}, timeout=12)
            assert time.monotonic() - t0 < 8

    run(scenario)


# ====================================================== pure helpers (no daemon)


def test_parse_tail_reads_what_memory_gave_the_turn():
    from runtime.shell.tui.render import panel_lines, parse_tail

    tail = ("### memory-index\n- #1 [editor] The user edits code with vim every day\n\n"
            "### recalled\n- #2 [deploy] Deploy checklist lives in ops/deploy.md\n"
            "- #3 Friday deploys need approval\n\n### world\nworking directory: /x\n\n"
            "### conversation\nUSER: how do I deploy?\n\n### profile\n- name: Dana\n"
            "- test_runner: pytest\n\n### lessons\n*1 [deploy,ops] When deploying\n\n"
            f"### respond\n{RESPOND}\n\n")
    mem = parse_tail(tail)
    assert mem.recalled == [(2, "Deploy checklist lives in ops/deploy.md"),
                            (3, "Friday deploys need approval")]
    assert mem.facts == ["name: Dana", "test_runner: pytest"]
    assert mem.lessons == ["*1 [deploy,ops] When deploying"] and mem.index_size == 1
    lines = panel_lines(mem, 26)
    assert all(len(line) <= 26 for line in lines) and "(pending)" in " ".join(lines)
    assert parse_tail("no sections [b]at all[/b]").recalled == []


def test_rows_fit_and_keep_brackets():
    from actors.store.records import Lesson, Note
    from runtime.shell.tui.render import matches, one_line, row_cells

    note = Note(id=4, content="[b]not markup[/b]\n  spread   out " + "x" * 200,
                tags=["a", "b"], source="user", scope="all", working_dir=None, created_at=0,
                updated_at=0, archived=True)
    cells = row_cells(note, 80)
    assert cells[2].startswith("(archived) [b]not markup[/b] spread out")
    assert len(cells[2]) <= 52
    assert cells[2].endswith("…")
    assert one_line("a  b\nc", 0) == "" and one_line("abc", 2) == "a…"
    lesson = Lesson(id=1, activation="When deploying", principle="Check the list",
                    tags=["ops"], status="deprecated", success_count=0, failure_count=0,
                    parent_ids=[], working_dir=None, created_at=0, updated_at=0)
    assert row_cells(lesson)[2] == "When deploying (deprecated)"
    assert matches(lesson, "CHECK list") and not matches(lesson, "vim")


def test_notes_search_op_is_keyword_only_and_counts_no_recall(conn):
    from actors.store.profile import ProfileStore
    from actors.memory.ops import OPS, TOOL_NAMES
    from actors.memory.router import OpCall, run_op
    from actors.store.stores import StoreSet

    notes = MemoryStore(conn)
    a = notes.store("Deploys need the checklist", tags=["ops"]).id
    b = notes.store("Archived deploy runbook", tags=["old"]).id
    notes.set_archived(b, True)
    notes.store("I prefer pytest for unit work")

    def hybrid(*args: Any, **kw: Any) -> list:
        raise AssertionError("the vector side must not be asked")

    profiles = ProfileStore(conn)
    hits, change = run_op(StoreSet.of(profiles, notes), "memory.notes.search", {"query": "deploy"},
                          OpCall(recall=hybrid))
    assert {n.id for n in hits} == {a, b} and change == {}
    assert hits[0].score == 1.0
    tagged, _ = run_op(StoreSet.of(profiles, notes), "memory.notes.search", {"query": "deploy",
                                                               "tags": ["ops"], "k": 1})
    assert [n.id for n in tagged] == [a]
    counts = conn.execute("SELECT SUM(recall_count) FROM memories").fetchone()[0]
    assert counts == 0
    assert run_op(StoreSet.of(profiles, notes), "memory.notes.search", {"query": "???"})[0] == []
    assert not OPS["memory.notes.search"].writes and "memory.notes.search" not in TOOL_NAMES




def test_browser_details_new_entries_and_esc_after_search(env):
    """Esc after a search clears it (the browser stays), n adds a fact
    and a note, a fact's versions are numbered v1.. and say who wrote them, the profile
    table says when a fact is shown and by whom."""
    from runtime.shell.tui.dialogs import NewEntryScreen

    async def scenario() -> None:
        app = env.app()
        async with app.run_test(size=SIZE) as pilot:
            m = await open_browser(pilot)
            await until(pilot, lambda: "editor" in table_text(m))
            assert "always" in table_text(m)
            # n in the profile adds a fact
            await pilot.press("n")
            dialog = await until(pilot, lambda: isinstance(app.screen, NewEntryScreen)
                                 and app.screen)
            await pilot.press(*"pet")
            await pilot.press("enter")
            await pilot.press(*"a cat called Miso")
            await pilot.press("enter")
            await until(pilot, lambda: app.screen is m and "saved" in m.status_text())
            assert dialog is not None
            facts = {f["key"]: f for f in env.memory("memory.profile.list")}
            assert facts["pet"]["value"] == "a cat called Miso"
            assert facts["pet"]["source"] == "user"
            await until(pilot, lambda: "Miso" in table_text(m))
            # a fact's detail numbers its versions from v1 and says who wrote each
            env.memory("memory.profile.set", {"key": "pet", "value": "two cats"})
            await until(pilot, lambda: "two cats" in table_text(m))
            await select(pilot, m, lambda r: r.key == "pet")
            await pilot.press("enter")
            detail = await until(pilot, lambda: isinstance(app.screen, DetailScreen)
                                 and "2 version(s)" in app.screen.body_text() and app.screen)
            text = detail.body_text()
            assert "v1 " in text and "replaced by v2" in text and "by user" in text
            assert "v3" not in text
            await pilot.press("escape")
            # n in the notes adds a note; an empty one is refused in the dialog
            await jump(pilot, m, "2")
            await pilot.press("n")
            await until(pilot, lambda: isinstance(app.screen, NewEntryScreen))
            await pilot.press("enter")
            assert "content cannot be empty" in str(
                app.screen.query_one("#new-error").content)
            await pilot.press(*"Miso likes the balcony")
            await pilot.press("enter")
            await until(pilot, lambda: "Miso likes the balcony" in table_text(m))
            # Esc after a search clears the search and stays in the browser
            await pilot.press("slash")
            await pilot.press(*"balcony")
            await pilot.press("enter")
            await until(pilot, lambda: m.query_text == "balcony" and len(m.rows) == 1)
            await pilot.press("escape")
            await until(pilot, lambda: m.query_text == "" and len(m.rows) > 1)
            assert app.screen is m
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is app.chat)
            # n where nothing can be added says so
            m2 = await open_browser(pilot)
            await pilot.press("3")
            await until(pilot, lambda: m2.channel == "lessons")
            await pilot.press("n")
            assert "read-only" in m2.status_text()

    run(scenario)


def test_empty_channels_say_what_fills_them_and_the_panel_grows():
    from runtime.shell.tui.chat import panel_columns
    from runtime.shell.tui.render import channel_status

    assert "consolidator" in channel_status("lessons", 0)
    assert "memory import" in channel_status("procedures", 0)
    assert "n adds one" in channel_status("profile", 0)
    for channel in ("profile", "notes", "lessons", "procedures", "links"):
        assert len(channel_status(channel, 0)) <= 76, channel  # fits an 80-column status
    assert channel_status("lessons", 2) == "2 active lesson(s)"
    assert channel_status("votes", 0, voting_enabled=False).endswith("voting is off "
                                                                     "(memory.voting.enabled)")
    assert "match(es) for 'x'" in channel_status("notes", 0, query="x")
    assert panel_columns(80) == 30
    assert panel_columns(120) == 39 and panel_columns(300) == 64
