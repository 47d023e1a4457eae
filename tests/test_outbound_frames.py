"""Every frame the daemon sends is one of the typed outbound frames, key for key.

A real daemon (scripted llama-server) is driven through each kind of exchange a client
has: hello, subscribe, a turn with a tool call and a reply, a memory write and read,
a failed memory op, sessions, metrics, ping, a bad frame. Each frame received is decoded
with :func:`runtime.shell.outbound.decode_outbound` and encoded back: the result must be
the very frame the daemon sent, so the Structs describe the wire exactly (no key added,
none lost, none renamed).
"""

from __future__ import annotations

import json

import msgspec
import trio

from runtime.shell.client import open_client
from runtime.shell.outbound import decode_outbound
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama

RULES = [
    {"match": "### output", "response": "SET city=Lisbon\n"},
    {"grammar_contains": "reply", "match": "TOOL memory.profile.list",
     "response": '{"reply": "You live in Lisbon."}'},
    {"grammar_contains": "reply", "match": "Where do I live",
     "response": '{"tool": "memory.profile.list", "args": {}}'},
    {"grammar_contains": "reply", "response": '{"reply": "Noted."}'},
]


async def test_every_frame_the_daemon_sends_round_trips_through_its_struct(tmp_path):
    seen: list[dict] = []
    async with open_fake_llama(tmp_path, RULES, slots=2) as fake:
        async with run_daemon(tmp_path / "state", llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                receive = c.receive

                async def recording() -> dict:
                    frame = await receive()
                    seen.append(frame)
                    return frame

                c.receive = recording  # type: ignore[method-assign]
                await c.request({"type": "subscribe", "channels": ["memory", "reflection",
                                                                   "actors"]}, "subscribed")
                with trio.fail_after(60):
                    [f async for f in c.say("I live in Lisbon.")]
                    await c.wait_for(lambda f: f["type"] == "reflection")
                    [f async for f in c.say("Where do I live?", debug=True)]
                await c.memory("memory.notes.store", {"content": "The user likes tea."})
                await c.memory("memory.notes.recall", {"query": "tea"})
                try:
                    await c.memory("memory.notes.forget", {"id": "not a number"})
                except Exception:  # noqa: BLE001 - the error frame is what is checked
                    pass
                await c.request({"type": "sessions", "id": "s1"}, "sessions.result")
                await c.request({"type": "session.get", "id": "s2", "session": c.session},
                                "session.result")
                await c.request({"type": "metrics"}, "metrics.result")
                await c.request({"type": "ping"}, "pong")
                await c.send({"type": "no-such-frame"})
                await c.wait_for(lambda f: f["type"] == "error")
    types = {f["type"] for f in seen}
    assert {"subscribed", "turn.started", "step", "reply.delta", "reply", "turn.finished",
            "memory.changed", "reflection", "memory.result", "sessions.result",
            "session.result", "metrics.result", "pong", "error"} <= types, types
    for frame in seen:
        typed = decode_outbound(json.dumps(frame))
        assert msgspec.to_builtins(typed) == frame, frame


def test_a_reflection_event_is_its_frame_field_for_field() -> None:
    """The gateway sends a reflection event as its frame by field name: the two keep the
    same fields."""
    from actors.reflection.messages import ReflectionEvent
    from runtime.shell.outbound import ReflectionFrame

    assert ReflectionEvent.__struct_fields__ == ReflectionFrame.__struct_fields__
