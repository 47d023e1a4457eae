"""Memory and time: the day each note was written, a profile
fact's earlier value, and ``### session-facts``.

Rules: rendering tests build ``Note`` / ``ProfileFact`` values directly; context tests
open their own migrated file under ``tmp_path`` and write with explicit ``now_ms`` so
every date is known. Budgets are checked with the renderer's own ``estimate_tokens``.
"""

from __future__ import annotations

from datetime import datetime, timezone

import msgspec
import pytest

from actors.store.context import RecallPlan, RenderBudget, TurnScope, build_context

from actors.store.tail import render_context
from actors.store.dates import written_date
from actors.store.notes import MemoryStore, Note
from actors.store.profile import ProfileStore
from actors.store.render import estimate_tokens, render_index, render_recalled
from actors.store.schema import open_database
from actors.store.stores import StoreSet
from runtime.services.config import Config


def ms(*when: int) -> int:
    return int(datetime(*when, tzinfo=timezone.utc).timestamp() * 1000)


NOW = ms(2026, 12, 2, 10)  # a Wednesday


def note(nid: int, content: str, at: int, tags=()) -> Note:
    return Note(id=nid, content=content, tags=list(tags), source="user", scope="all",
                working_dir=None, created_at=at, updated_at=at)


@pytest.fixture
def stores(tmp_path):
    conn = open_database(str(tmp_path / "memory.sqlite"))
    yield ProfileStore(conn), MemoryStore(conn)
    conn.close()


def test_the_written_date_is_compact_and_in_the_users_zone():
    late = ms(2023, 5, 7, 23, 30)  # already 8 May in Paris
    assert written_date(late, "UTC") == "7 May 2023"
    assert written_date(late, "Europe/Paris") == "8 May 2023"
    assert written_date(late, "Nowhere/Atlantis")  # unknown zone: the machine's, never raises
    assert written_date(10**18) == ""  # beyond datetime's years


def test_recalled_and_index_lines_carry_the_day_the_note_was_written():
    notes = [note(3, "Moved to Berlin", ms(2026, 11, 3, 12), tags=["home"]),
             note(1, "Thesis is due March 14th", ms(2026, 2, 1, 9))]
    feb20 = ms(2026, 2, 20, 12)
    assert render_recalled(notes, dates=True, zone="UTC", now_ms=feb20).splitlines() == [
        "- #3 [home] 3 Nov 2026: Moved to Berlin",
        "- #1 1 Feb 2026: Thesis is due March 14th (14 Mar 2026, in 22 days)"]
    assert render_index(notes, dates=True, zone="UTC").splitlines() == [
        "- #1 1 Feb 2026: Thesis is due March 14th",
        "- #3 [home] 3 Nov 2026: Moved to Berlin"]
    # without dates: the rows as they were before dates
    assert render_recalled(notes).splitlines()[0] == "- #3 [home] Moved to Berlin"


def test_dates_stay_inside_the_section_budgets():
    notes = [note(i, f"note number {i} about the garden shed", ms(2026, 1, 1 + i % 28))
             for i in range(1, 60)]
    for budget in (20, 60, 300):
        index = render_index(notes, dates=True, max_tokens=budget)
        recalled = render_recalled(notes, dates=True, max_tokens=budget)
        assert estimate_tokens(index) <= budget and estimate_tokens(recalled) <= budget


def test_a_fact_that_replaced_another_shows_its_earlier_value_and_since_when(stores):
    profiles, notes = stores
    profiles.set("home_city", "Lyon", pinned=True, now_ms=ms(2025, 1, 10, 12))
    profiles.set("home_city", "Berlin", pinned=True, now_ms=ms(2026, 11, 3, 12))
    profiles.set("home_city", "Berlin", pinned=True, keywords=[], now_ms=ms(2026, 11, 4, 12))
    profiles.set("pet", "Rex", pinned=True, now_ms=ms(2026, 1, 1))
    profiles.remove("pet", now_ms=ms(2026, 2, 1))
    profiles.set("pet", "Milo", pinned=True, now_ms=ms(2026, 3, 1))  # forgotten stays so
    ctx = build_context(StoreSet.of(profiles, notes), "where did I live before?",
                        RecallPlan(profile_history=True))
    body = render_context(ctx, RenderBudget(profile_dates=True))["profile"]
    # a re-write of the same value is walked past: Lyon is still the value before
    assert "- home_city: Berlin (since 3 Nov 2026; before: Lyon)" in body.splitlines()
    assert "- pet: Milo" in body.splitlines()
    assert "before" not in render_context(ctx)["profile"]  # off: no "before"


def test_session_facts_are_this_sessions_newest_facts_not_shown_in_the_profile(stores):
    profiles, notes = stores
    for i, key in enumerate(["sister_name", "dog_name", "thesis_due", "car", "gym"]):
        profiles.set(key, f"value {i}", pinned=False, keywords=[key.split("_")[0]],
                     session_id="s1", now_ms=ms(2026, 12, 1, 10, i))
    profiles.set("employer", "Acme", pinned=False, keywords=["work"], session_id="s2")
    profiles.set("name", "Dana", pinned=True, session_id="s1")  # in ### profile already
    ctx = build_context(StoreSet.of(profiles, notes), "what is my dog called?",
                        RecallPlan(session_facts_limit=4), TurnScope(session="s1"))
    assert [f.key for f in ctx.session_facts] == ["thesis_due", "car", "gym"]  # dog: gated in
    assert [f.key for f in ctx.profile] == ["dog_name", "name"]
    body = render_context(ctx)["session-facts"]
    assert body.splitlines() == ["- thesis_due: value 2", "- car: value 3", "- gym: value 4"]
    assert build_context(StoreSet.of(profiles, notes), "hi", RecallPlan(session_facts_limit=8),
                         TurnScope(session="s3")).session_facts == []
    assert render_context(ctx,
                          RenderBudget(session_facts_max_tokens=0)).get("session-facts") is None


def test_the_configuration_turns_each_part_on_and_off(stores):
    profiles, notes = stores
    notes.store("Caroline went to the support group yesterday", now_ms=ms(2023, 5, 8, 13))
    profiles.set("timezone", "Asia/Tokyo", pinned=True, session_id="s1")
    ctx = build_context(StoreSet.of(profiles, notes), "support group",
                        RecallPlan(session_facts_limit=8), TurnScope(session="s1"))
    assert ctx.zone == "Asia/Tokyo"
    on = render_context(ctx, RenderBudget.from_config(Config().memory))
    assert on["recalled"] == (
        "- #1 8 May 2023: Caroline went to the support group yesterday (7 May 2023)")
    off = msgspec.convert({"recallInjection": {"showDates": False},
                           "index": {"showDates": False}}, Config().memory.__class__)
    assert render_context(ctx,
                          RenderBudget.from_config(off))["recalled"].startswith("- #1 Caroline")


def test_a_fact_that_names_a_day_says_how_far_it_is_read_from_when_it_was_said(stores):
    """A deadline: "my thesis is due March 14th" becomes "in 102 days" -- the default
    model cannot count days itself -- and "next Friday" is read from the day it was
    said, not from today."""
    profiles, notes = stores
    profiles.set("dentist_appointment", "next_friday", pinned=True,
                 now_ms=ms(2026, 11, 26, 12))  # a Thursday
    profiles.set("passport_expires_in", "three weeks", pinned=True, now_ms=ms(2026, 11, 27, 9))
    profiles.set("thesis_due", "March 14th", pinned=True, now_ms=ms(2026, 12, 2, 9))
    profiles.set("city", "Lyon", pinned=True, now_ms=ms(2026, 12, 2, 9))
    ctx = build_context(StoreSet.of(profiles, notes), "when is the dentist?")
    assert render_context(ctx, RenderBudget(profile_dates=True),
                          now_ms=NOW)["profile"].splitlines() == [
        "- city: Lyon",
        "- dentist_appointment: next_friday (said 26 Nov 2026: 27 Nov 2026, 5 days ago)",
        "- passport_expires_in: three weeks (said 27 Nov 2026: 18 Dec 2026, in 16 days)",
        "- thesis_due: March 14th (14 Mar 2027, in 102 days)"]


def test_a_recalled_note_says_the_day_its_words_name():
    said = note(7, "Caroline: I went to a LGBTQ support group yesterday", ms(2023, 5, 8, 13))
    due = note(8, "The user's sister's wedding is on 11 January 2027", ms(2026, 11, 29, 9))
    assert render_recalled([said, due], dates=True, zone="UTC", now_ms=NOW).splitlines() == [
        "- #7 8 May 2023: Caroline: I went to a LGBTQ support group yesterday (7 May 2023)",
        "- #8 29 Nov 2026: The user's sister's wedding is on 11 January 2027 "
        "(11 Jan 2027, in 40 days)"]
    assert "(" not in render_index([said, due], dates=True, zone="UTC")  # rows stay stable


def test_a_time_zone_fact_the_machine_does_not_know_is_stored_with_a_warning(stores):
    profiles, _notes = stores
    assert profiles.set("timezone", "Europe/Paris").warning is None
    fact = profiles.set("timezone", "Paris time")
    assert fact.value == "Paris time" and "not a time zone this machine knows" in fact.warning



@pytest.mark.parametrize("text, first, last, words", [
    ("What did Audrey eat for dinner on October 24, 2023?", (2023, 10, 23), (2023, 10, 26),
     "October 24, 2023"),
    ("What did Tim read on 8th December, 2023?", (2023, 12, 7), (2023, 12, 10),
     "8th December, 2023"),
    ("what is due on 2026-12-14", (2026, 12, 13), (2026, 12, 16), "2026-12-14"),
    ("the Monday before July 24, 2023", (2023, 7, 16), (2023, 8, 2), "July 24, 2023"),
    ("What did she do in November 2023?", (2023, 10, 31), (2023, 12, 2), "November 2023"),
    ("what did I say last week?", (2026, 11, 23), (2026, 11, 30), "last week"),
    ("what did I tell you yesterday?", (2026, 12, 1), (2026, 12, 2), "yesterday"),
    ("What did I do 3 days ago?", (2026, 11, 28), (2026, 12, 1), "3 days ago"),
    ("a couple of weeks ago I said", (2026, 11, 14), (2026, 11, 23), "a couple of weeks ago"),
    ("what happened last month", (2026, 11, 1), (2026, 12, 1), "last month"),
])
def test_the_time_a_question_names_is_read_as_a_span(text, first, last, words):
    from actors.store.dates import time_window

    window = time_window(text, NOW, "UTC")
    assert window is not None and window.words == words
    assert (window.start_ms, window.end_ms) == (ms(*first), ms(*last))


@pytest.mark.parametrize("text", ["May I ask you something?", "When is my dentist?",
                                  "I like 2023 better", "march on", ""])
def test_a_question_without_a_time_names_no_span(text):
    from actors.store.dates import time_window

    assert time_window(text, NOW, "UTC") is None


def test_a_question_that_names_a_time_recalls_what_was_written_then(stores):
    from actors.store.context import build_context

    profiles, notes = stores
    notes.store("Dinner was pasta with the neighbours", now_ms=ms(2023, 10, 2, 19))
    sushi = notes.store("We had sushi for dinner tonight", now_ms=ms(2023, 10, 24, 20))
    for day in range(3, 20):  # newer dinners that match the words better
        notes.store(f"Dinner dinner dinner number {day}", now_ms=ms(2023, 11, day, 19))
    plain = build_context(StoreSet.of(profiles, notes),
                          "What did I eat for dinner on 24 October 2023?",
                          RecallPlan(k=3, index_limit=0))
    timed = build_context(StoreSet.of(profiles, notes),
                          "What did I eat for dinner on 24 October 2023?",
                          RecallPlan(k=3, index_limit=0, time_windows=True), TurnScope(now_ms=NOW))
    assert sushi.id not in [n.id for n in plain.recalled]
    assert timed.recalled[0].id == sushi.id and len(timed.recalled) == 3
    # a span with nothing written in it (a future deadline) changes nothing
    future = build_context(StoreSet.of(profiles, notes), "What is due for dinner on 14 March 2027?",
                           RecallPlan(k=3, index_limit=0, time_windows=True), TurnScope(now_ms=NOW))
    again = build_context(StoreSet.of(profiles, notes), "What is due for dinner on 14 March 2027?",
                          RecallPlan(k=3, index_limit=0))
    assert [n.id for n in future.recalled] == [n.id for n in again.recalled]


def test_what_did_i_say_last_week_recalls_last_weeks_notes_newest_first(stores):
    from actors.store.context import build_context

    profiles, notes = stores
    notes.store("The user says the week was long", now_ms=ms(2026, 10, 1, 9))  # word match
    monday = notes.store("Booked the car for its service", now_ms=ms(2026, 11, 23, 9))
    friday = notes.store("The heating in the flat is broken", now_ms=ms(2026, 11, 27, 9))
    notes.store("Bought a new kettle", now_ms=ms(2026, 12, 1, 9))  # this week
    ctx = build_context(StoreSet.of(profiles, notes), "what did I say last week?",
                        RecallPlan(k=3, index_limit=0, time_windows=True), TurnScope(now_ms=NOW))
    assert [n.id for n in ctx.recalled][:2] == [friday.id, monday.id]
