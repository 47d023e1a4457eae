"""Prompt invariants through a running daemon: the stable prefix never changes,
memory sections live only in the tail, the context is built once per turn whatever the
number of steps, and a long conversation is cut while the memory sections survive."""

from __future__ import annotations

import trio

from actors.agent.prompt import STABLE_PREFIX
from runtime.shell.client import open_client
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama

MEMORY_SECTIONS = ("### profile", "### recalled", "### memory-index", "### lessons",
                   "### procedures")


def agent_bodies(fake) -> list[dict]:
    return [b for b in fake.completions() if "reply" in b.get("grammar", "")]


def system_and_tail(prompt: str) -> tuple[str, str]:
    system = prompt.split("<|im_start|>system\n", 1)[1].split("<|im_end|>", 1)[0]
    return system, prompt.split("<|im_start|>user\n", 1)[1]


async def test_context_once_per_turn_and_prefix_byte_stable_across_writes(tmp_path):
    rules = [  # step 1 calls a tool (a memory write), step 2 replies
        {"grammar_contains": "reply", "match": "remember my editor", "times": 1,
         "response": '{"tool": "memory.profile.set", "args": {"key": "editor", "value": "helix"}}'},
        {"grammar_contains": "reply", "response": '{"reply": "done"}'},
    ]
    async with open_fake_llama(tmp_path, rules) as fake:
        async with run_daemon(tmp_path / "state", llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as a, \
                    open_client(url=d.url, token=d.token) as b:
                with trio.fail_after(60):
                    steps = [f async for f in a.say("please remember my editor is helix")]
                    [f async for f in b.say("what editor do I use?")]
                    [f async for f in a.say("thanks, and my editor again?")]
                metrics = await a.request({"type": "metrics"}, "metrics.result")
    assert [f["step"] for f in steps if f["type"] == "step"] == ["tool", "tool.result"]
    counters = metrics["actors"]["memory"]["counters"]
    assert counters["agent.memory.requests{kind=BuildContext}"] == 3  # 3 turns, 4 LLM steps
    bodies = agent_bodies(fake)
    assert len(bodies) == 4
    systems = {system_and_tail(b["prompt"])[0] for b in bodies}
    assert systems == {STABLE_PREFIX}  # before and after the write, in both sessions
    for body in bodies:
        system, tail = system_and_tail(body["prompt"])
        assert not any(f"\n{s}\n" in f"\n{system}" for s in MEMORY_SECTIONS)
    # the fact written in step 1 shows in the tail of later turns, in both sessions
    assert "helix" in system_and_tail(bodies[2]["prompt"])[1]
    assert "helix" in system_and_tail(bodies[3]["prompt"])[1]


async def test_long_conversation_is_cut_but_memory_sections_survive(tmp_path):
    rules = [{"grammar_contains": "reply", "response": '{"reply": "ok"}'}]
    async with open_fake_llama(tmp_path, rules) as fake:  # /props: n_ctx 4096
        async with run_daemon(tmp_path / "state", llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                await c.memory("memory.profile.set", {"key": "city", "value": "Porto"})
                await c.memory("memory.notes.store",
                               {"content": "Dana keeps her bonsai on the balcony"})
                with trio.fail_after(120):
                    for i in range(40):
                        [f async for f in c.say(f"turn {i}: " + "the bonsai needs water " * 25)]
    system, tail = system_and_tail(agent_bodies(fake)[-1]["prompt"])
    conversation = tail.split("### conversation\n", 1)[1].split("\n### ", 1)[0]
    assert "earlier line(s) not shown" in conversation
    assert "turn 39:" in conversation and "turn 0:" not in conversation
    assert "- city: Porto" in tail.split("### profile\n", 1)[1]
    assert "bonsai on the balcony" in tail.split("### recalled\n", 1)[1]
    # the whole prompt fits the window with room for the reply (~4 chars per token)
    assert (len(system) + len(tail)) / 4 < 4096 - 256


async def test_the_memory_corpus_is_never_dumped_into_the_prompt(tmp_path):
    rules = [{"grammar_contains": "reply", "response": '{"reply": "ok"}'}]
    async with open_fake_llama(tmp_path, rules) as fake:
        async with run_daemon(tmp_path / "state", llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                for i in range(60):
                    await c.memory("memory.notes.store",
                                   {"content": f"garden note {i}: the tomatoes need stakes {i * 7}"})
                with trio.fail_after(60):
                    [f async for f in c.say("what do the tomatoes in the garden need?")]
    _, tail = system_and_tail(agent_bodies(fake)[-1]["prompt"])
    recalled = tail.split("### recalled\n", 1)[1].split("\n### ", 1)[0]
    index = tail.split("### memory-index\n", 1)[1].split("\n### ", 1)[0]
    rows = [line for line in recalled.splitlines() if "garden note" in line]
    assert 1 <= len(rows) <= 3  # memory.recallInjection.k
    assert 1 <= len([line for line in index.splitlines() if "garden note" in line]) <= 20
    assert sum(f"garden note {i}:" in tail for i in range(60)) <= 23
