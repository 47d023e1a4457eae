"""End to end through the websocket with a scripted llama-server.

Rules: the daemon is a real ``atomic-agent serve`` subprocess; the LLM is
``tests.fakes.llama_server`` (a real HTTP server with fixed completions) so the
prompts the daemon sends can be inspected; clients are real websocket clients.
"""

from __future__ import annotations

import json

import trio

from runtime.shell.client import open_client
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama

REFLECTION = ("SET name=Dana\nSET city=Lisbon\n"
              "SET test_runner=pytest [pinned=false; keywords=test,testing,pytest,runner]\n"
              "NOTE The user prefers pytest for testing. [tags=testing]\n")
RULES = [
    {"match": "### output", "response": REFLECTION},
    {"grammar_contains": "reply", "match": "My name is Dana",
     "response": '{"reply": "Nice to meet you, Dana! You like pytest."}'},
    {"grammar_contains": "reply", "response": '{"reply": "You like pytest."}'},
]


def agent_prompts(fake) -> list[str]:
    """The agent's prompts: the completions constrained by the action grammar (not the
    reflection, link-generator or vote-runner side calls)."""
    return [b["prompt"] for b in fake.completions() if '"reply' in b.get("grammar", "")]


async def test_memory_survives_a_daemon_restart(tmp_path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path, RULES, slots=2) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                await c.request({"type": "subscribe", "channels": ["reflection", "memory"]},
                                "subscribed")
                frames = []
                with trio.fail_after(60):
                    async for f in c.say("My name is Dana, I live in Lisbon and I prefer pytest "
                                         "for testing."):
                        frames.append(f)
                types = [f["type"] for f in frames]
                assert types[0] == "turn.started" and types[-1] == "turn.finished"
                assert frames[-1]["reason"] == "reply"
                assert {"type": "reply", "turn": frames[0]["turn"],
                        "text": "Nice to meet you, Dana! You like pytest."} in frames
                # the reply streamed as it was generated, then came whole
                deltas = "".join(f["text"] for f in frames if f["type"] == "reply.delta")
                assert deltas == "Nice to meet you, Dana! You like pytest."
                with trio.fail_after(60):
                    event = await c.wait_for(lambda f: f["type"] == "reflection")
                assert event["outcome"] == "ok", event
                assert set(event["factKeys"]) == {"name", "city", "test_runner"}
                assert len(event["noteIds"]) == 1
        assert d.shutdown_s is not None and d.shutdown_s < 3.0
        # reflection and the side calls ran on slot 1 (the server has 2), the agent on 0
        slots = {('"reply' in b.get("grammar", "")): b.get("id_slot") for b in fake.completions()}
        assert slots == {False: 1, True: 0}

        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                profile = await c.memory("memory.profile.list")
                assert {f["key"]: f["value"] for f in profile} == {
                    "name": "Dana", "city": "Lisbon", "test_runner": "pytest"}
                with trio.fail_after(60):
                    frames = [f async for f in c.say("Which test runner do I like?")]
                assert frames[-1]["reason"] == "reply"
        prompt = agent_prompts(fake)[-1]
        tail = prompt.split("<|im_start|>user", 1)[1]
        profile_section = tail.split("### profile\n", 1)[1].split("\n\n", 1)[0]
        assert "- city: Lisbon" in profile_section
        assert "- name:" not in profile_section  # the name only when names are asked about
        assert "- test_runner: pytest" in profile_section  # contextual: "test" was said
        recalled = tail.split("### recalled\n", 1)[1].split("\n\n", 1)[0]
        assert "You prefer pytest for testing." in recalled and "[reflection, testing]" in recalled
        # prompt order (docs/architecture.md §5): recalled before conversation before profile
        assert tail.index("### recalled") < tail.index("### conversation") < tail.index("### profile")


async def test_contextual_fact_is_gated_and_prefix_is_stable(tmp_path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path, RULES, slots=2) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                await c.memory("memory.profile.set", {"key": "editor", "value": "helix",
                                                      "pinned": False, "keywords": ["editor"]})
                for text in ("hello there", "which editor do I use?"):
                    with trio.fail_after(60):
                        frames = [f async for f in c.say(text)]
                    assert frames[-1]["reason"] == "reply"
                await c.memory("memory.notes.store", {"content": "A note written between turns"})
                with trio.fail_after(60):
                    [f async for f in c.say("and now?")]
    prompts = agent_prompts(fake)
    assert "editor: helix" not in prompts[0] and "- editor: helix" in prompts[1]
    prefix = [p.split("<|im_start|>user", 1)[0] for p in prompts]
    assert len(set(prefix)) == 1, "the stable prefix changed across turns / memory writes"


BAD_FRAMES = ("not json", "[1,2]", '{"type":"nope"}', '{"type":"say","text":5}',
              '{"type":"memory","op":"memory.notes.recall","args":[]}')
"""Frames each answered with a ``bad_frame`` error (counted in docs/RELIABILITY.md)."""


async def test_bad_frames_get_errors_and_connection_stays_open(tmp_path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path, RULES, slots=1) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                for bad in BAD_FRAMES:
                    await c.ws.send_message(bad)
                    frame = await c.receive()
                    assert frame["type"] == "error" and frame["code"] == "bad_frame", frame
                err = await c.request({"type": "memory", "id": 7, "op": "memory.notes.store",
                                       "args": {"content": ""}}, "memory.result")
                assert err["ok"] is False and err["error"]["code"] == "invalid_argument"
                assert (await c.request({"type": "ping"}, "pong"))["type"] == "pong"
                # single-slot server: every request uses a slot it has
                await c.request({"type": "subscribe", "channels": ["reflection"]}, "subscribed")
                with trio.fail_after(60):
                    frames = [f async for f in c.say("hi, I live in Lisbon")]
                    assert frames[-1]["reason"] == "reply"
                    await c.wait_for(lambda f: f["type"] == "reflection")
        bodies = fake.completions()
        assert all(b.get("id_slot", -1) in (0, -1) for b in bodies)
        assert [b["id_slot"] for b in bodies if "### output" in b["prompt"]] == [-1]


async def test_wrong_token_and_browser_origin_are_refused(tmp_path):
    from trio_websocket import HandshakeError, open_websocket_url

    state = tmp_path / "state"
    async with open_fake_llama(tmp_path, RULES) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_websocket_url(d.url) as ws:
                await ws.send_message(json.dumps({"type": "hello", "token": "wrong"}))
                frame = json.loads(await ws.get_message())
                assert frame["code"] == "unauthorized"
                assert d.token not in json.dumps(frame)
            try:
                async with open_websocket_url(d.url, extra_headers=[(b"Origin", b"https://evil.example")]):
                    raise AssertionError("a browser origin was accepted")
            except HandshakeError:
                pass
    assert (state / "token").stat().st_mode & 0o777 == 0o600


async def test_client_leaving_mid_turn_does_not_cancel_the_turn(tmp_path):
    """Regression: ``ask`` disconnects right after ``turn.finished``; the turn must
    still be persisted and its reflection must still run."""
    rules = [{"match": "### output", "response": "SET pet=cat\n"},
             {"grammar_contains": "reply", "response": '{"reply": "Noted."}', "delay_ms": 1500}]
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path, rules) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as watcher:
                await watcher.request({"type": "subscribe", "channels": ["reflection"]}, "subscribed")
                async with open_client(url=d.url, token=d.token) as c:
                    await c.send({"type": "say", "text": "I have a cat"})
                    await c.wait_for(lambda f: f["type"] == "turn.started")
                # the speaker is gone; the turn goes on
                with trio.fail_after(60):
                    event = await watcher.wait_for(lambda f: f["type"] == "reflection")
                assert event["outcome"] == "ok" and event["factKeys"] == ["pet"]
                sessions = await watcher.request({"type": "sessions"}, "sessions.result")
                assert any(s["turns"] == 1 for s in sessions["data"])


async def test_oversized_frame_closes_only_that_client(tmp_path):
    from trio_websocket import ConnectionClosed

    state = tmp_path / "state"
    async with open_fake_llama(tmp_path, RULES) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as bystander:
                async with open_client(url=d.url, token=d.token) as c:
                    await c.ws.send_message("x" * (1024 * 1024 + 10))
                    with trio.fail_after(10):
                        try:
                            while True:
                                await c.ws.get_message()
                        except ConnectionClosed as exc:
                            assert exc.reason.code == 1009
                # a client whose TCP connection just goes away (no close frame)
                stream = await trio.open_tcp_stream("127.0.0.1", int(d.url.rsplit(":", 1)[1]))
                await stream.send_all(
                    b"GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
                    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                    b"Sec-WebSocket-Version: 13\r\n\r\n")
                with trio.fail_after(10):
                    assert b" 101 " in await stream.receive_some(4096)
                await stream.aclose()
                assert (await bystander.request({"type": "ping"}, "pong"))["type"] == "pong"
                await trio.sleep(0.5)
                metrics = await bystander.request({"type": "metrics"}, "metrics.result")
    # both are logged and counted, by reason
    assert metrics["counters"]["gateway.closed{reason=frame_too_large}"] == 1
    assert metrics["counters"]["gateway.closed{reason=abrupt}"] == 1


async def test_a_client_that_never_reads_is_dropped_and_others_are_unaffected(tmp_path):
    """Slow consumer: its bounded queue fills (memory.changed events it never reads),
    the daemon closes it with 1008, and a second client keeps working throughout."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "config.json").write_text('{"server": {"clientQueue": 8}}')
    async with open_fake_llama(tmp_path, RULES) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as writer:
                for i in range(40):
                    await writer.memory("memory.notes.store",
                                        {"content": f"big note {i} " + "lorem ipsum " * 300})
                async with open_client(url=d.url, token=d.token) as sleeper:
                    # the sleeper asks for ~150 KB answers again and again but reads nothing
                    # until the daemon has dropped it: socket buffers fill, then its 8-frame
                    # queue, then it is dropped. It keeps asking until then (kernel socket
                    # buffers differ between machines), and the writer watches the client
                    # count meanwhile - it is served all along.
                    with trio.fail_after(60):
                        sent = 0
                        while True:
                            metrics = await writer.request({"type": "metrics"}, "metrics.result")
                            if metrics["clients"] == 1:
                                break
                            if sent < 2000:
                                try:
                                    for _ in range(20):
                                        await sleeper.send({"type": "memory", "id": 1,
                                                            "op": "memory.notes.list",
                                                            "args": {"limit": 200}})
                                        sent += 1
                                except Exception:  # noqa: BLE001 - closed under us: dropped
                                    pass
                            await trio.sleep(0.2)
                    assert sent >= 20
                    with trio.fail_after(20):
                        closed = None
                        while closed is None:
                            try:
                                await sleeper.ws.get_message()
                            except Exception as exc:  # ConnectionClosed
                                closed = exc
                    # 1008 when the close frame gets through; a dropped client whose socket is
                    # full can also see its last frame cut off (1006/1007): it is gone either way
                    assert closed.reason.code in (1006, 1007, 1008), closed
                assert (await writer.request({"type": "ping"}, "pong"))["type"] == "pong"
                assert len(await writer.memory("memory.notes.list", {"limit": 200})) == 40


async def test_a_new_turn_aborts_only_its_own_sessions_reflection(tmp_path):
    """Reflection scheduling through the agent: session A's second turn aborts A's slow
    reflection (outcome ``aborted``, nothing written by it); session B's reflection is
    untouched. The aborted exchange is carried into A's next reflection, so
    what it said still lands."""
    rules = [{"match": "USER: slow", "grammar_contains": "NOTE", "delay_ms": 4000,
              "response": "SET city=Lisbon\n"},
             {"match": "USER: I grew up in Porto", "grammar_contains": "NOTE", "delay_ms": 1500,
              "response": "SET hometown=Porto\n"},
             {"grammar_contains": "reply", "response": '{"reply": "ok"}'}]
    async with open_fake_llama(tmp_path, rules, slots=2) as fake:
        async with run_daemon(tmp_path / "state", llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as a, \
                    open_client(url=d.url, token=d.token) as b:
                # a `reflection` subscriber sees every session's reflections (operator view)
                await a.request({"type": "subscribe", "channels": ["reflection"]}, "subscribed")
                turns, events = {}, []
                with trio.fail_after(60):
                    for client, text in ((a, "slow: I live in Lisbon"), (b, "I grew up in Porto"),
                                         (a, "and what is the weather like?")):
                        async for f in client.say(text):
                            if f["type"] == "turn.started":
                                turns[f["turn"]] = (client.session, text)
                            elif f["type"] == "reflection":
                                events.append(f)
                    while len(events) < 3:
                        events.append(await a.wait_for(lambda f: f["type"] == "reflection"))
                outcome = {turns[e["turn"]][1]: (e["session"], e["outcome"]) for e in events}
                assert outcome == {
                    "slow: I live in Lisbon": (a.session, "aborted"),  # by A's next turn
                    "I grew up in Porto": (b.session, "ok"),  # B untouched
                    "and what is the weather like?": (a.session, "ok"),  # carried Lisbon
                }
                facts = {f["key"] for f in await a.memory("memory.profile.list")}
                assert facts == {"hometown", "city"}


async def test_a_turn_in_another_session_goes_first_and_the_reflection_lands_after(tmp_path):
    """Turns first: session A's reflection is in flight when B's turn starts; it is
    cancelled (the request closed), B's turn is served, then A's reflection is sent
    again and lands once (docs/architecture.md §10, "Turns first")."""
    rules = [{"match": "USER: I live in Lisbon", "grammar_contains": "NOTE", "delay_ms": 2500,
              "response": "SET city=Lisbon\n"},
             {"grammar_contains": "reply", "response": '{"reply": "ok"}'}]
    async with open_fake_llama(tmp_path, rules, slots=2) as fake:
        async with run_daemon(tmp_path / "state", llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as a, \
                    open_client(url=d.url, token=d.token) as b:
                await a.request({"type": "subscribe", "channels": ["reflection"]}, "subscribed")

                def reflections() -> list[dict]:
                    return [c for c in fake.completions() if "NOTE" in c.get("grammar", "")]

                with trio.fail_after(60):
                    async for _ in a.say("I live in Lisbon"):
                        pass
                    while not reflections():  # A's reflection has reached the server
                        await trio.sleep(0.02)
                    async for _ in b.say("What is two plus two?"):
                        pass
                    event = await a.wait_for(lambda f: f["type"] == "reflection"
                                             and f["session"] == a.session)
                assert event["outcome"] == "ok"
                assert {f["key"]: f["value"] for f in await a.memory("memory.profile.list")} \
                    == {"city": "Lisbon"}
                # the interrupted request and the one sent again after B's turn
                assert len(reflections()) == 2


async def test_an_actor_restart_is_announced_to_actors_subscribers(tmp_path):
    """A crashed actor is restarted, and clients subscribed to ``actors`` get
    ``actor.restarting`` (its name, exit code) while the daemon keeps serving."""
    import os
    import signal

    from tests.conftest import actor_name, descendants

    async with open_fake_llama(tmp_path, []) as fake:
        async with run_daemon(tmp_path / "state", llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                await c.request({"type": "subscribe", "channels": ["actors"]}, "subscribed")
                victim = next(pid for pid in descendants(d.proc.pid)
                              if actor_name(pid) == "reflection")
                os.kill(victim, signal.SIGKILL)
                with trio.fail_after(30):
                    frame = await c.wait_for(lambda f: f.get("type") == "actor.restarting")
                assert frame["actor"] == "reflection" and frame["exitCode"] == -9
                assert frame["restarts"] >= 1
                with trio.fail_after(30):  # the daemon serves on, the actor is back
                    while True:
                        metrics = await c.request({"type": "metrics"}, "metrics.result")
                        if "error" not in metrics["actors"]["reflection"]:
                            break
                        await trio.sleep(0.2)
