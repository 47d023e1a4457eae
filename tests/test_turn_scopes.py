"""A turn acts under the scopes of the app that started it, through a real daemon and a
scripted model: an app holding ``read,write`` but not ``forget`` asks to forget in a
chat turn (over the websocket and over the OpenAI API) and nothing is forgotten — not by
the agent, not by its tool, not by the turn's reflection — and each refusal is in the
activity log under the app; an app reaches only the sessions it started (joining,
listing, reading, renaming, cancelling another app's session is ``forbidden``), the
owner reaches all of them; a cancel is logged."""

from __future__ import annotations

import json

import httpx
import pytest
import trio

from runtime.shell.client import ClientError, open_client
from runtime.shell.clients import add_client
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama

FORGET_CITY = "Please forget my city."
LET_GO = "I no longer live in Lyon."
RULES = [
    # each turn's reflection proposes the forget as well
    {"match": f"USER: {FORGET_CITY}\nASSISTANT:", "grammar_contains": '"FORGET "',
     "response": "FORGET city\n"},
    {"match": f"USER: {LET_GO}\nASSISTANT:", "grammar_contains": '"FORGET "',
     "response": "FORGET city\n"},
    # a fact let go: the agent calls its removal tool, then replies
    {"grammar_contains": "reply", "match": "forbidden", "response":
     json.dumps({"reply": "I cannot remove that here."})},
    {"grammar_contains": "reply", "match": f"The USER's last message: {LET_GO}",
     "response": json.dumps({"tool": "memory.profile.remove", "args": {"key": "city"}})},
    {"grammar_contains": "reply", "match": "Tell me a long story", "delay_ms": 4000,
     "response": json.dumps({"reply": "Once upon a time."})},
    {"grammar_contains": "reply", "response": json.dumps({"reply": "Hello."})},
]


async def _facts(state) -> dict[str, str]:
    async with open_client(state) as owner:
        return {f["key"]: f["value"] for f in await owner.memory("memory.profile.list")}


async def _activity(state, client: str) -> set[tuple[str, str]]:
    await trio.sleep(1.0)  # (the activity log is written every 0.5 s)
    async with open_client(state) as owner:
        log = await owner.memory("memory.activity", {"limit": 200, "client": client})
    return {(e["op"], e["outcome"]) for e in log["entries"]}


@pytest.fixture
async def daemon(tmp_path):
    async with open_fake_llama(tmp_path / "fake", RULES, slots=2) as fake:
        state = tmp_path / "state"
        async with run_daemon(state, llm_url=fake.url) as d:
            d.state = state
            d.writer = add_client(state, "notes-app", ["read", "write"])
            d.reader = add_client(state, "viewer", ["read"])
            await trio.sleep(0.7)  # (the daemon reads clients.json again within 0.5 s)
            async with open_client(state) as owner:
                await owner.memory("memory.profile.set", {"key": "city", "value": "Lyon"})
            yield d


async def _turn(d, text: str) -> tuple[list[dict], dict]:
    async with open_client(url=d.url, token=d.writer, session="app-chat") as c:
        await c.request({"type": "subscribe", "channels": ["reflection"]}, "subscribed")
        frames = [f async for f in c.say(text)]
        turn = frames[-1]["turn"]
        event = await c.wait_for(lambda f: f.get("type") == "reflection"
                                 and f.get("turn") == turn)
    return frames, event


async def test_a_turn_without_the_forget_scope_forgets_nothing(daemon):
    frames, event = await _turn(daemon, FORGET_CITY)
    notices = [f["message"] for f in frames if f.get("step") == "notice"]
    assert any("may not forget memory" in n for n in notices), notices
    assert frames[-1]["reason"] == "reply", frames
    assert event["forgottenKeys"] == [], event
    frames, event = await _turn(daemon, LET_GO)
    assert any(f.get("step") == "tool.result" and f["summary"].startswith("error: forbidden")
               for f in frames), frames
    assert frames[-1]["reason"] == "reply", frames
    assert event["forgottenKeys"] == [], event
    assert await _facts(daemon.state) == {"city": "Lyon"}  # agent, tool, reflection: nothing
    assert {("turn.forget", "forbidden"), ("memory.profile.remove", "forbidden")} <= \
        await _activity(daemon.state, "agent for notes-app")
    assert ("reflection.forget", "forbidden") in \
        await _activity(daemon.state, "reflection for notes-app")
    # the owner's own turn may forget
    async with open_client(daemon.state, session="owner-chat") as owner:
        [f async for f in owner.say(FORGET_CITY)]
    assert "city" not in await _facts(daemon.state)


async def test_the_openai_api_turn_acts_under_the_apps_scopes(daemon):
    body = {"model": "atomic-agent", "messages": [{"role": "user", "content": FORGET_CITY}]}
    async with httpx.AsyncClient(base_url=daemon.ready["openaiUrl"], timeout=60) as http:
        done = await http.post("/chat/completions", json=body,
                               headers={"Authorization": f"Bearer {daemon.writer}"})
        assert done.status_code == 200, done.text
        await trio.sleep(1.5)  # the turn's reflection
        assert await _facts(daemon.state) == {"city": "Lyon"}
        assert ("turn.forget", "forbidden") in await _activity(daemon.state,
                                                               "agent for notes-app")
        # its default session is its own; the owner's session is not
        async with open_client(daemon.state, session="owner-chat") as owner:
            [f async for f in owner.say("hello")]
        taken = await http.post("/chat/completions", json=body, headers={
            "Authorization": f"Bearer {daemon.writer}", "X-Atomic-Session": "owner-chat"})
    assert taken.status_code == 403 and taken.json()["error"]["code"] == "forbidden"
    async with open_client(daemon.state) as owner:
        listed = await owner.request({"type": "sessions"}, "sessions.result")
    assert {(s["id"], s["app"]) for s in listed["data"]} == {
        ("openai-notes-app", "notes-app"), ("owner-chat", None)}


async def test_an_app_reaches_only_the_sessions_it_started(daemon):
    async with open_client(daemon.state, session="owner-chat") as owner:
        [f async for f in owner.say("hello")]
    async with open_client(url=daemon.url, token=daemon.writer, session="app-chat") as app:
        [f async for f in app.say("hello")]
        listed = await app.request({"type": "sessions"}, "sessions.result")
        assert [s["id"] for s in listed["data"]] == ["app-chat"]
        for frame in ({"type": "session.get", "session": "owner-chat"},
                      {"type": "session.rename", "session": "owner-chat", "title": "mine"}):
            with pytest.raises(ClientError) as info:
                await app.request(frame, "never")
            assert info.value.code == "forbidden", frame
            assert "belongs to another app" in str(info.value)
    # joining another app's session is refused at the hello
    with pytest.raises(ClientError) as info:
        async with open_client(url=daemon.url, token=daemon.reader, session="app-chat"):
            pass
    assert info.value.code == "forbidden"
    # every refusal is in the activity log under the app
    assert {("session.get", "forbidden"), ("session.rename", "forbidden")} <= \
        await _activity(daemon.state, "notes-app")
    assert ("hello", "forbidden") in await _activity(daemon.state, "viewer")
    # the owner reaches every session, and sees whose each is
    async with open_client(daemon.state) as owner:
        listed = await owner.request({"type": "sessions"}, "sessions.result")
        assert {(s["id"], s["app"]) for s in listed["data"]} == {
            ("owner-chat", None), ("app-chat", "notes-app")}
        got = await owner.request({"type": "session.get", "session": "app-chat"},
                                  "session.result")
        assert got["data"]["turns"] == 1


async def test_a_cancel_reaches_only_the_apps_own_turn_and_is_logged(daemon):
    async with open_client(url=daemon.url, token=daemon.writer, session="app-story") as app:
        await app.send({"type": "say", "text": "Tell me a long story"})
        await app.wait_for(lambda f: f.get("type") == "turn.started")
        done = await app.request({"type": "cancel"}, "cancel.result")
        assert done["data"]["cancelled"] is True
        await app.wait_for(lambda f: f.get("type") == "turn.finished")
    assert ("turn.cancel", "ok") in await _activity(daemon.state, "notes-app")
