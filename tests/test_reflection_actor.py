"""The reflection actor against a real memory actor and a scripted llama-server.

Rules: real actor processes under ``open_supervisor``; the LLM is the scripted
server (``delay_ms`` makes a reflection slow enough to abort or time out);
``ReflectionEvent`` casts to the root are the observable outcome; the database is
read through the memory actor. Wall-clock bounds only.
"""

from __future__ import annotations

import msgspec
import pytest
import trio

from actors import actor_spec
from tests.memory_ops import memory_op
from actors.reflection.messages import AbortPending, Reflect, ReflectionEvent
from runtime import ActorSpec, open_supervisor
from runtime.services.config import ActorBoot, Config
from tests.fakes.llama_server import open_fake_llama

pytestmark = pytest.mark.slow  # real actor processes; the scripted server waits on purpose


def specs(tmp_path, url: str, **reflection) -> list[ActorSpec]:
    cfg = Config()
    cfg.llm.url = url  # a configured server: no start-up warm-up request
    cfg.memory.embeddings.enabled = False
    for k, v in reflection.items():
        setattr(cfg.memory.reflection, k, v)
    boot = msgspec.msgpack.encode(ActorBoot(state_dir=str(tmp_path), config=cfg, llm_url=url))
    return [actor_spec("memory", config=boot), actor_spec("reflection", config=boot)]


class Events:
    def __init__(self) -> None:
        self.items: list[ReflectionEvent] = []
        self.dec = msgspec.msgpack.Decoder(ReflectionEvent)

    async def on_cast(self, src: str, body: msgspec.Raw) -> None:
        if src == "reflection":
            self.items.append(self.dec.decode(body))

    async def wait(self, n: int) -> list[ReflectionEvent]:
        with trio.fail_after(60):
            while len(self.items) < n:
                await trio.sleep(0.02)
        return self.items


def reflect(session: str, user: str) -> Reflect:
    return Reflect(session=session, turn="t-1", user_message=user, assistant_reply="ok")


async def profile(sup) -> dict[str, str]:
    facts = (await memory_op(sup, "memory.profile.list")).data
    return {f["key"]: f["value"] for f in facts}


async def test_ok_writes_facts_and_notes_once(tmp_path):
    rules = [{"match": "### output", "response":
              "SET name=Dana\nSET name=Dana\nNOTE The user prefers pytest. [tags=testing]\n"
              "prose the grammar would not allow\nSET Bad Key!=x\n"}]
    ev = Events()
    async with open_fake_llama(tmp_path, rules) as fake:
        async with open_supervisor(specs(tmp_path, fake.url), on_cast=ev.on_cast) as sup:
            await sup.cast("reflection", reflect("a", "My name is Dana; I prefer pytest"))
            (first,) = await ev.wait(1)
            assert first.outcome == "ok" and first.fact_keys == ["name"] and len(first.note_ids) == 1
            await sup.cast("reflection", reflect("a", "My name is Dana; I prefer pytest"))
            second = (await ev.wait(2))[1]
            # the same fact and the same note again: nothing new is written
            assert second.outcome == "none" and second.fact_keys == []
            assert await profile(sup) == {"name": "Dana"}
            notes = (await memory_op(sup, "memory.notes.list")).data
            assert [n["tags"] for n in notes] == [["reflection", "testing"]]
    body = [b for b in fake.completions()][0]
    assert body["id_slot"] == 1 and "SET" in body["grammar"] and "NOTE" in body["grammar"]


async def test_abort_writes_nothing_and_spares_other_sessions(tmp_path):
    rules = [{"match": "USER: I am a slow user", "response": "SET slow=yes\n", "delay_ms": 3000},
             {"match": "### output", "response": "SET fast=yes\n"}]
    ev = Events()
    async with open_fake_llama(tmp_path, rules) as fake:
        async with open_supervisor(specs(tmp_path, fake.url), on_cast=ev.on_cast) as sup:
            await sup.cast("reflection", reflect("a", "I am a slow user"))
            await trio.sleep(0.5)
            await sup.cast("reflection", reflect("b", "I am a fast user"))
            await sup.cast("reflection", AbortPending(session="a"))
            events = await ev.wait(2)
            by_session = {e.session: e.outcome for e in events}
            assert by_session == {"a": "aborted", "b": "ok"}
            await trio.sleep(3)  # the slow completion arrives late: still nothing written
            assert await profile(sup) == {"fast": "yes"}


async def test_a_new_reflection_aborts_the_old_one_and_carries_its_exchange(tmp_path):
    """An interrupted reflection loses nothing — its exchange is reflected on
    with the session's next one (the old run's late answer writes nothing)."""
    rules = [{"match": "USER: I came second", "response": "SET first=yes\nSET second=yes\n"},
             {"match": "USER: I came first", "response": "SET late=yes\n", "delay_ms": 3000}]
    ev = Events()
    async with open_fake_llama(tmp_path, rules) as fake:
        async with open_supervisor(specs(tmp_path, fake.url), on_cast=ev.on_cast) as sup:
            await sup.cast("reflection", reflect("a", "I came first"))
            await trio.sleep(0.5)
            await sup.cast("reflection", reflect("a", "I came second"))
            events = await ev.wait(2)
            assert sorted(e.outcome for e in events) == ["aborted", "ok"]
            await trio.sleep(3)
            assert await profile(sup) == {"first": "yes", "second": "yes"}
        prompts = [r["body"]["prompt"] for r in fake.requests() if r["path"] == "/completion"]
        assert "USER: I came first" in prompts[-1] and "USER: I came second" in prompts[-1]


async def test_timeout_writes_nothing(tmp_path):
    rules = [{"match": "### output", "response": "SET late=yes\n", "delay_ms": 2500}]
    ev = Events()
    async with open_fake_llama(tmp_path, rules) as fake:
        async with open_supervisor(specs(tmp_path, fake.url, timeout_ms=500),
                                   on_cast=ev.on_cast) as sup:
            await sup.cast("reflection", reflect("a", "I stay up late"))
            (event,) = await ev.wait(1)
            assert event.outcome == "timeout" and "memory.reflection.timeoutMs" in event.reason
            await trio.sleep(2.5)
            assert await profile(sup) == {}
            metrics = await sup.request("reflection", __import__(
                "runtime.services.metrics", fromlist=["MetricsRequest"]).MetricsRequest(), dict)
            assert metrics["counters"] == {"agent.memory.reflection{outcome=timeout}": 1}
            assert metrics["histograms"]["agent.memory.reflection.latency_ms"]["count"] == 1


async def test_caps_and_notes_switch(tmp_path):
    # values without digits: a number the user did not write is an invented detail
    lines = "".join(f"SET k{i}=v{'abcde'[i]}\n" for i in range(5)) + "NOTE one\nNOTE two\nNOTE three\n"
    rules = [{"match": "### output", "response": lines}]
    ev = Events()
    async with open_fake_llama(tmp_path, rules) as fake:
        async with open_supervisor(specs(tmp_path, fake.url, max_facts_per_call=2,
                                         auto_store_notes=False), on_cast=ev.on_cast) as sup:
            await sup.cast("reflection", reflect("a", "I have some facts about me"))
            (event,) = await ev.wait(1)
            assert event.fact_keys == ["k0", "k1"] and event.note_ids == []


async def test_llm_failure_is_failed_outcome(tmp_path):
    rules = [{"match": "### output", "status": 500, "response": "boom"}]
    ev = Events()
    async with open_fake_llama(tmp_path, rules) as fake:
        async with open_supervisor(specs(tmp_path, fake.url), on_cast=ev.on_cast) as sup:
            await sup.cast("reflection", reflect("a", "I live in Lisbon"))
            (event,) = await ev.wait(1)
            assert event.outcome == "failed" and "500" in event.reason
            assert await profile(sup) == {}


async def test_a_transient_failure_is_tried_again_and_a_lasting_one_carried(tmp_path):
    """The LLM server answering 503 past the client's own retries (3 attempts), then
    recovering: the reflection is tried again after a pause and writes. A failure that
    lasts is carried into the session's next reflection, which writes both."""
    rules = [{"match": "### output", "status": 503, "response": "loading", "times": 3},
             {"match": "USER: I go rowing on Sundays", "response": "SET sport=rowing\n"},
             {"match": "USER: I live in Graz", "status": 503, "response": "down"},
             {"match": "### output", "response": "NONE\n"}]
    ev = Events()
    async with open_fake_llama(tmp_path, rules) as fake:
        async with open_supervisor(specs(tmp_path, fake.url), on_cast=ev.on_cast) as sup:
            await sup.cast("reflection", reflect("a", "I go rowing on Sundays"))
            (event,) = await ev.wait(1)
            assert event.outcome == "ok" and event.fact_keys == ["sport"]
            await sup.cast("reflection", reflect("b", "I live in Graz"))
            events = await ev.wait(2)
            assert events[1].outcome == "failed" and "503" in events[1].reason
            fake.set_rules([{"match": "USER: I live in Graz", "response": "SET city=Graz\n"}])
            await sup.cast("reflection", reflect("b", "I like tea"))
            events = await ev.wait(3)
            assert events[2].outcome == "ok" and events[2].fact_keys == ["city"]
            assert await profile(sup) == {"sport": "rowing", "city": "Graz"}
            assert (await metrics_of(sup))["counters"][
                "agent.memory.reflection.retried"] == 1 + 2


async def metrics_of(sup) -> dict:
    from runtime.services.metrics import MetricsRequest

    return await sup.request("reflection", MetricsRequest(), dict)


async def test_trivial_message_skips_the_llm_call(tmp_path):
    rules = [{"match": "### output", "response": "SET reply_style=OK only\n"}]
    ev = Events()
    async with open_fake_llama(tmp_path, rules) as fake:
        async with open_supervisor(specs(tmp_path, fake.url), on_cast=ev.on_cast) as sup:
            for text in ("Reply only OK.", "ping", "don't use tools this time, just say PONG_7"):
                await sup.cast("reflection", reflect("a", text))
            events = await ev.wait(3)
            assert [(e.outcome, e.reason) for e in events] == [("none", "trivial")] * 3
            assert await profile(sup) == {}
            counters = (await metrics_of(sup))["counters"]
            assert counters["agent.memory.reflection.skipped{reason=trivial}"] == 3
    assert fake.completions() == []


async def test_grounding_keeps_what_the_user_wrote_and_drops_the_rest(tmp_path):
    rules = [{"match": "### output", "response":
              "SET name=Sam\nSET assistant_name=SmolLM\nNOTE I am an AI assistant.\n"
              "SET city=Lisbon\nSET code_editor=<editor>\nSET favourite_colour=blue\n"}]
    ev = Events()
    async with open_fake_llama(tmp_path, rules) as fake:
        async with open_supervisor(specs(tmp_path, fake.url), on_cast=ev.on_cast) as sup:
            await sup.cast("reflection", Reflect(
                session="a", turn="t-1", user_message="I moved to Lisbon last year.",
                assistant_reply="I am SmolLM, an AI assistant. Nice to meet you, Sam!"))
            (event,) = await ev.wait(1)
            assert event.outcome == "ok" and event.fact_keys == ["city"]
            assert await profile(sup) == {"city": "Lisbon"}
            counters = (await metrics_of(sup))["counters"]
    assert {k: v for k, v in counters.items() if ".dropped" in k} == {
        "agent.memory.reflection.dropped{reason=ungrounded_identity}": 1,
        "agent.memory.reflection.dropped{reason=assistant_persona}": 2,
        "agent.memory.reflection.dropped{reason=example_copy}": 1,
        "agent.memory.reflection.dropped{reason=ungrounded_content}": 1,
    }


async def test_all_dropped_is_none_with_the_reasons(tmp_path):
    rules = [{"match": "### output", "response": "SET name=Sam\n"}]
    ev = Events()
    async with open_fake_llama(tmp_path, rules) as fake:
        async with open_supervisor(specs(tmp_path, fake.url), on_cast=ev.on_cast) as sup:
            await sup.cast("reflection", reflect("a", "Help me plan a trip, I love travelling"))
            (event,) = await ev.wait(1)
            assert (event.outcome, event.reason) == ("none", "ungrounded: ungrounded_identity")
            assert await profile(sup) == {}


async def test_two_sessions_reflect_in_parallel(tmp_path):
    rules = [{"match": "USER: I live in Lisbon", "response": "SET city=Lisbon\n", "delay_ms": 1500},
             {"match": "### output", "response": "SET hometown=Porto\n", "delay_ms": 1500}]
    ev = Events()
    async with open_fake_llama(tmp_path, rules) as fake:
        async with open_supervisor(specs(tmp_path, fake.url), on_cast=ev.on_cast) as sup:
            t0 = trio.current_time()
            await sup.cast("reflection", reflect("a", "I live in Lisbon"))
            await sup.cast("reflection", reflect("b", "I grew up in Porto"))
            events = await ev.wait(2)
            assert sorted((e.session, e.outcome) for e in events) == [("a", "ok"), ("b", "ok")]
            assert trio.current_time() - t0 < 2.9  # not one after the other


async def test_shutdown_aborts_in_flight_reflections_and_writes_nothing(tmp_path):
    rules = [{"match": "### output", "response": "SET city=Lisbon\n", "delay_ms": 4000}]
    ev = Events()
    async with open_fake_llama(tmp_path, rules) as fake:
        async with open_supervisor(specs(tmp_path, fake.url), on_cast=ev.on_cast) as sup:
            await sup.cast("reflection", reflect("a", "I live in Lisbon"))
            await sup.cast("reflection", reflect("b", "I live in Lisbon too"))
            with trio.fail_after(10):
                while len(fake.completions()) < 2:
                    await trio.sleep(0.05)
            t0 = trio.current_time()
        assert trio.current_time() - t0 < 3.0  # shutdown ≤ 3 s (docs/architecture.md §10)
        await trio.sleep(4.5)  # the completions would have arrived by now
    conn = __import__("actors.store.schema", fromlist=["open_database"]).open_database(
        str(tmp_path / "memory.sqlite"))
    assert conn.execute("SELECT count(*) FROM profile_facts").fetchall() == [(0,)]


async def test_three_failures_in_a_row_warn_once_naming_the_config_key(tmp_path, capfd):
    rules = [{"match": "### output", "status": 500, "response": "boom"}]
    ev = Events()
    async with open_fake_llama(tmp_path, rules) as fake:
        async with open_supervisor(specs(tmp_path, fake.url), on_cast=ev.on_cast) as sup:
            for i in range(5):
                await sup.cast("reflection", reflect("a", f"I live in Lisbon {i}"))
                await ev.wait(i + 1)
            assert [e.outcome for e in ev.items] == ["failed"] * 5
            counters = (await metrics_of(sup))["counters"]
            assert counters["agent.memory.reflection.unhealthy"] == 1
    warnings = [line for line in capfd.readouterr().err.splitlines() if "reflection.unhealthy" in line]
    assert len(warnings) == 1 and "memory.reflection.timeoutMs" in warnings[0]
