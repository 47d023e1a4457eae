"""The agent's turn loop through the websocket, against a scripted llama-server.

Rules: a real daemon subprocess, real websocket clients; the scripted server's rules
(``times`` = one-shot answers, ``delay_ms`` = slow LLM) drive each step. Session
persistence is also checked directly on ``sessions.sqlite``.
"""

from __future__ import annotations

import json
import time

import pytest
import trio

from actors.agent.prompt import REPLY_PREFILL
from actors.agent.sessions import SessionState, SessionStore, strip_ephemeral
from runtime.shell.client import open_client
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama


def agent_prompts(fake) -> list[str]:
    return [b["prompt"] for b in fake.completions() if "### output" not in b["prompt"]]


async def turn(c, text: str, timeout: float = 60) -> list[dict]:
    with trio.fail_after(timeout):
        return [f async for f in c.say(text)]


async def test_tool_calls_validation_errors_and_unknown_tools_go_back_to_the_model(tmp_path):
    rules = [
        {"grammar_contains": "reply", "times": 1,
         "response": '{"tool": "memory.notes.store", "args": {"content": ""}}'},
        {"grammar_contains": "reply", "times": 1,
         "response": '{"tool": "web.search", "args": {"q": "x"}}'},
        {"grammar_contains": "reply", "times": 1,
         "response": '{"tool": "memory.notes.store", "args": {"content": "Dana drinks green tea", "tags": ["drinks"]}}'},
        {"grammar_contains": "reply", "response": '{"reply": "Saved."}'},
    ]
    async with open_fake_llama(tmp_path, rules) as fake:
        async with run_daemon(tmp_path / "state", llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                frames = await turn(c, "Remember that I drink green tea")
                steps = [f for f in frames if f["type"] == "step"]
                results = [s["summary"] for s in steps if s["step"] == "tool.result"]
                assert results[0].startswith("error: invalid_argument")
                assert results[1].startswith("error: unknown tool 'web.search'")
                assert '"content": "Dana drinks green tea"' in results[2]
                calls = [s for s in steps if s["step"] == "tool"]
                assert calls[2]["args"] == {"content": "Dana drinks green tea", "tags": ["drinks"]}
                assert frames[-1]["reason"] == "reply"
                notes = await c.memory("memory.notes.list")
                assert [n["content"] for n in notes] == ["Dana drinks green tea"]
    prompts = agent_prompts(fake)
    assert len(prompts) == 4
    assert "TOOL memory.notes.store" in prompts[3] and "error: unknown tool" in prompts[3]
    # memory context is built once per turn: the index never shows the note stored mid-turn
    assert "Dana drinks green tea" not in prompts[3].split("### conversation")[0]


async def test_invalid_actions_end_with_max_steps(tmp_path):
    rules = [{"grammar_contains": "reply", "response": "{broken json"}]
    async with open_fake_llama(tmp_path, rules) as fake:
        async with run_daemon(tmp_path / "state", llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                frames = await turn(c, "hello")
    timings = frames[-1].pop("timings")
    assert frames[-1] == {"type": "turn.finished", "turn": frames[0]["turn"], "reason": "max_steps"}
    assert timings["steps"] == 4 and timings["totalMs"] >= timings["llmMs"] + timings["contextMs"]
    # The scripted server reports 1 ms of prompt processing per completion.
    assert timings["promptMs"] == 4.0 and timings["prefillTokens"] > 0
    prompts = agent_prompts(fake)
    assert len(prompts) == 4  # agent.maxSteps default
    assert "### notice" in prompts[1] and "not a valid action" in prompts[1]
    # "hello" with an empty memory is offered no tool, so every step must reply: the
    # reply's opening is in the prompt and the grammar is the rest of the reply action
    bodies = [b for b in fake.completions() if "### output" not in b["prompt"]]
    assert len(bodies) == 4
    assert all(b["prompt"].endswith('<|im_start|>assistant\n{"reply": "')
               and b["grammar"] == REPLY_PREFILL.grammar for b in bodies)
    assert "This is your last step: answer the user now" in prompts[3]


LOADING = '{"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}'


async def test_a_turn_waits_for_a_model_still_loading_and_says_so(tmp_path):
    """llama-server answers 503 "Loading model" until its model is in memory: the turn
    waits (one notice), then replies; past llm.startupTimeoutMs it ends with the code
    llm_loading instead of a bare server error."""
    rules = [{"grammar_contains": "reply", "status": 503, "response": LOADING, "times": 5},
             {"grammar_contains": "reply", "response": '{"reply": "ready now"}'}]
    state = tmp_path / "state"
    state.mkdir()
    (state / "config.json").write_text(json.dumps({"llm": {"startupTimeoutMs": 4000}}))
    async with open_fake_llama(tmp_path, rules) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                frames = await turn(c, "hello there")
                notices = [f for f in frames if f.get("step") == "notice"]
                assert len(notices) == 1 and "still loading" in notices[0]["message"]
                assert frames[-1]["reason"] == "reply"
                assert [f["text"] for f in frames if f["type"] == "reply"] == ["ready now"]
                fake.set_rules([{"grammar_contains": "reply", "status": 503,
                                 "response": LOADING}])
                frames = await turn(c, "and again")
    assert frames[-1]["reason"] == "error" and frames[-1]["code"] == "llm_loading"


async def test_busy_and_cancel(tmp_path):
    rules = [{"grammar_contains": "reply", "response": '{"reply": "slow"}', "delay_ms": 8000}]
    async with open_fake_llama(tmp_path, rules) as fake:
        async with run_daemon(tmp_path / "state", llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                await c.send({"type": "say", "text": "first"})
                await c.wait_for(lambda f: f["type"] == "turn.started")
                await c.send({"type": "say", "text": "second"})
                err = await c.wait_for(lambda f: f["type"] == "error")
                assert err["code"] == "busy"
                t0 = time.monotonic()
                await c.send({"type": "cancel"})
                with trio.fail_after(5):
                    fin = await c.wait_for(lambda f: f["type"] == "turn.finished")
                assert fin["reason"] == "cancelled" and time.monotonic() - t0 < 3
                # another session is never blocked by this one
                async with open_client(url=d.url, token=d.token) as other:
                    assert other.session != c.session


async def test_llm_down_gives_error_reason_and_daemon_keeps_serving(tmp_path):
    async with run_daemon(tmp_path / "state", llm_url="http://127.0.0.1:9") as d:
        async with open_client(url=d.url, token=d.token) as c:
            frames = await turn(c, "hello")
            assert frames[-1]["reason"] == "error"
            errors = [f for f in frames if f.get("step") == "error"]
            assert errors and "127.0.0.1:9" in errors[0]["message"]
            assert (await c.request({"type": "ping"}, "pong"))["type"] == "pong"
            frames = await turn(c, "again")
            assert frames[-1]["reason"] == "error"


async def test_sessions_resume_and_ephemeral_fields_are_never_persisted(tmp_path):
    state = tmp_path / "state"
    rules = [{"grammar_contains": "reply", "response": '{"reply": "hi"}'}]
    async with open_fake_llama(tmp_path, rules) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                await c.memory("memory.notes.store", {"content": "hello notes are recalled"})
                await turn(c, "hello")
                sid = c.session
            async with open_client(url=d.url, token=d.token, session=sid) as c2:
                assert c2.session == sid
                await turn(c2, "hello again")
    store = SessionStore(str(state / "sessions.sqlite"))
    saved = store.get(sid)
    store.close()
    assert saved is not None and saved.turns == 2
    assert [m.role for m in saved.messages] == ["user", "assistant", "user", "assistant"]
    assert saved.recalled_notes == [] and saved.memory_index == []
    assert "USER: hello" in agent_prompts(fake)[-1]  # the resumed session kept its history


def test_strip_ephemeral_clears_every_ephemeral_field():
    s = SessionState(id="s", created_at=1, updated_at=1, recalled_notes=[1, 2], memory_index=[3])
    clean = strip_ephemeral(s)
    assert clean.recalled_notes == [] and clean.memory_index == []
    assert s.recalled_notes == [1, 2]  # the live state is untouched


@pytest.mark.parametrize("switch, off, kept", [
    ("notes", ("memory.notes.store", "memory.notes.recall", "memory.notes.forget"),
     "memory.profile.set"),
    ("profile", ("memory.profile.set", "memory.profile.remove", "memory.profile.list"),
     "memory.notes.store"),
])
async def test_a_switched_off_memory_channel_has_no_agent_tools(tmp_path, switch, off, kept):
    """With memory.notes.enabled / memory.profile.enabled false
    the channel's tools leave the catalog and the grammar (the prefix changes with the
    configuration only), a call by name is refused with a clear error, and the operator
    ops over the websocket still work (they are not agent tools)."""
    rules = [
        {"grammar_contains": "reply", "times": 1,
         "response": json.dumps({"tool": off[0], "args": (
             {"content": "x"} if "notes" in off[0] else {"key": "k", "value": "v"})})},
        {"grammar_contains": "reply", "response": '{"reply": "ok"}'},
    ]
    async with open_fake_llama(tmp_path / "fake", rules) as fake:
        state = tmp_path / "state"
        state.mkdir()
        (state / "config.json").write_text(json.dumps({"memory": {switch: {"enabled": False}}}))
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                frames = await turn(c, "please remember this")
                assert frames[-1]["reason"] == "reply"
                (tool,) = [f for f in frames if f.get("step") == "tool.result"]
                assert tool["summary"].startswith(f"error: tool '{off[0]}' is turned off "
                                                 f"(memory.{switch}.enabled is false)")
                # The operator ops are not agent tools: they still work.
                if switch == "notes":
                    note = await c.memory("memory.notes.store", {"content": "kept by hand"})
                    assert note["content"] == "kept by hand"
                else:
                    fact = await c.memory("memory.profile.set", {"key": "k", "value": "v"})
                    assert fact["value"] == "v"
    for body in fake.completions():
        if '"reply' not in (body.get("grammar") or ""):
            continue
        for name in off:
            assert f'"\\"{name}\\""' not in body["grammar"] and f"- {name} " not in body["prompt"]
        assert f"- {kept} " in body["prompt"]


def test_the_now_line_uses_the_users_zone_else_the_machines():
    from datetime import datetime, timezone

    from actors.agent.now import now_line, user_zone

    t = datetime(2026, 3, 5, 22, 30, tzinfo=timezone.utc)
    assert now_line("Asia/Tokyo", t) == "now: Friday 6 March 2026, 07:30 (Asia/Tokyo)"
    assert now_line("Nowhere/Atlantis", t).startswith("now: ")  # falls back, never raises

    class Fact:
        def __init__(self, key, value):
            self.key, self.value = key, value

    assert user_zone([Fact("name", "Dana"), Fact("timezone", " Europe/Paris ")]) == "Europe/Paris"
    assert user_zone([Fact("name", "Dana")]) is None


async def test_the_tail_carries_the_current_date_in_the_users_time_zone(tmp_path):
    """``### world`` says what time it is for the user (the profile's
    ``timezone``), and the stable prefix stays the same."""
    async with open_fake_llama(tmp_path, []) as fake:
        async with run_daemon(tmp_path / "state", llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                await c.memory("memory.profile.set", {"key": "timezone", "value": "Asia/Tokyo"})
                with trio.fail_after(60):
                    frames = [f async for f in c.say("what day is it?", debug=True)]
                (prompt,) = [f for f in frames if f.get("step") == "prompt"]
                world = prompt["tail"].split("### world\n")[1].split("\n\n")[0]
                assert world.splitlines()[0] == "working directory: (none)"
                assert world.splitlines()[1].startswith("now: ")
                assert world.endswith("(Asia/Tokyo)")
    from actors.agent.prompt import STABLE_PREFIX

    assert all(STABLE_PREFIX in b["prompt"] for b in fake.completions()
               if '"reply' in (b.get("grammar") or ""))


async def test_session_facts_and_dated_memory_reach_the_tail_and_are_never_saved(tmp_path):
    """A fact the agent wrote in this session is in the next
    turn's ``### session-facts`` although the keyword gate keeps it out of ``### profile``;
    a recalled note carries the day it was written; neither is saved with the session."""
    from datetime import date, timedelta

    from actors.store.dates import written_date

    due = date.today() + timedelta(days=30)
    said = f"{due.day} {due.strftime('%B %Y')}"
    state = tmp_path / "state"
    rules = [
        {"grammar_contains": "reply", "times": 1, "response": json.dumps(
            {"tool": "memory.profile.set", "args": {
                "key": "thesis_due", "value": said, "pinned": False,
                "keywords": ["thesis"]}})},
        {"grammar_contains": "reply", "response": '{"reply": "Noted."}'},
    ]
    async with open_fake_llama(tmp_path, rules) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                stored = await c.memory("memory.notes.store",
                                        {"content": "The garden shed needs a new roof"})
                await turn(c, f"Remember that my thesis is due on {said}")
                with trio.fail_after(60):
                    frames = [f async for f in c.say("what about the garden shed?", debug=True)]
                sid = c.session
    (prompt,) = [f for f in frames if f.get("step") == "prompt"]
    tail = prompt["tail"]
    # the day it names is counted from today: the model cannot count days itself
    counted = f"{due.day} {due.strftime('%b %Y')}, in 30 days"
    assert f"### session-facts\n- thesis_due: {said} ({counted})\n" in tail
    assert tail.count("- thesis_due") == 1  # once: the keyword gate kept it out of ### profile
    day = written_date(stored["createdAt"])
    assert f"- #{stored['id']} {day}: The garden shed needs a new roof" in tail
    assert tail.index("### session-facts") < tail.index("### recalled") < tail.index("### world")
    store = SessionStore(str(state / "sessions.sqlite"))
    saved = store.get(sid)
    store.close()
    assert saved is not None and saved.known_facts == [] and saved.recalled_notes == []


async def test_what_did_i_say_last_week_recalls_last_weeks_notes_with_their_dates(tmp_path):
    """A question about a time recalls the notes written then (imported here
    with their dates), shown with the day they were written."""
    from datetime import datetime, timedelta

    from actors.store.dates import written_date

    now = datetime.now().astimezone()
    monday = (now - timedelta(days=now.weekday() + 7)).replace(hour=12, minute=0)
    at = int((monday + timedelta(days=2)).timestamp() * 1000)  # last week's Wednesday
    export = tmp_path / "memory.jsonl"
    export.write_text("\n".join(json.dumps(r) for r in [
        {"type": "atomic-agent.memory", "version": 1},
        {"type": "note", "id": 1, "content": "The boiler in the flat is broken", "createdAt": at},
        {"type": "note", "id": 2, "content": "Likes green tea", "createdAt": at - 90 * 86400000},
    ]) + "\n")
    rules = [{"grammar_contains": "reply", "response": '{"reply": "The boiler."}'}]
    async with open_fake_llama(tmp_path, rules) as fake:
        async with run_daemon(tmp_path / "state", llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                (tmp_path / "state" / "exports").mkdir(exist_ok=True)
                export.rename(tmp_path / "state" / "exports" / "memory.jsonl")
                await c.memory("memory.import", {"path": "memory.jsonl"})
                with trio.fail_after(60):
                    frames = [f async for f in c.say("what did I say last week?", debug=True)]
    (prompt,) = [f for f in frames if f.get("step") == "prompt"]
    recalled = prompt["tail"].split("### recalled\n")[1].split("\n\n")[0].splitlines()
    assert recalled[0].endswith(f" {written_date(at)}: The boiler in the flat is broken")
    assert not any("green tea" in line for line in recalled)


async def test_a_say_with_recalled_notes_shows_those_notes_instead_of_recalls_hits(tmp_path):
    """``recalled`` in a ``say`` frame: ``### recalled`` holds exactly those notes, in that
    order (a missing id and another project's note left out, ``[]`` = none), while the
    same message without it recalls by its words; bad ids are one typed error."""
    async with open_fake_llama(tmp_path, []) as fake:
        async with run_daemon(tmp_path / "state", llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token, working_dir="/here") as c:
                bees, sister, cello = [(await c.memory("memory.notes.store", {
                    "content": text}))["id"] for text in (
                    "The user keeps bees on the roof", "The user's sister lives in Porto",
                    "The user plays the cello on Sundays")]
                other = (await c.memory("memory.notes.store", {
                    "content": "The build needs Java 21", "scope": "project",
                    "workingDir": "/elsewhere"}))["id"]

                async def recalled_section(**kw) -> str:
                    with trio.fail_after(60):
                        frames = [f async for f in c.say("how are my bees?", debug=True, **kw)]
                    (prompt,) = [f for f in frames if f.get("step") == "prompt"]
                    tail = prompt["tail"]
                    if "### recalled\n" not in tail:
                        return ""
                    return tail.split("### recalled\n")[1].split("\n\n")[0]

                plain = await recalled_section()
                assert "You keep bees" in plain and "cello" not in plain  # notes about "you"
                given = await recalled_section(recalled=[cello, 99999, other, sister, cello])
                lines = given.splitlines()
                assert len(lines) == 2 and "cello" in lines[0] and "Porto" in lines[1]
                assert f"#{bees} " not in given and "Java" not in given
                assert await recalled_section(recalled=[]) == ""
                for bad in ([0], list(range(1, 52)), ["1"]):
                    await c.send({"type": "say", "text": "hi", "recalled": bad})
                    error = await c.wait_for(lambda f: f.get("type") == "error")
                    assert error["code"] == "bad_frame" and "recalled" in error["message"], bad
