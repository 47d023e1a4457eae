"""The query rewriter (``actors/agent/rewriter.py``; docs/architecture.md §4, step 4): the
gate, the prompt and parser, and a daemon whose follow-up question recalls by the rewrite."""

from __future__ import annotations

import pytest
import trio

from actors.agent.rewriter import (
    REWRITER_GRAMMAR,
    Rewriter,
    build_rewriter_prompt,
    is_referential,
    parse_rewrite,
)
from runtime.services.config import RewriterConfig
from runtime.shell.client import open_client
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama


@pytest.mark.parametrize(("message", "turns", "fires"), [
    ("and the other one?", 1, True),
    ("what about it", 1, True),  # pronoun
    ("ok do that", 1, True),  # short, no question word
    ("But why did the deploy fail after the migration yesterday?", 1, True),  # starter
    ("What is the capital of Portugal and its population?", 1, True),  # "its"
    ("What is the capital of Portugal in Europe today please?", 1, False),
    ("und das auch", 1, True), ("y eso también", 1, True), ("а это когда будет?", 1, True),
    ("and the other one?", 0, False),  # no history
    ("   ", 3, False),
])
def test_heuristic_gate(message: str, turns: int, fires: bool) -> None:
    assert is_referential(message, turns) is fires


@pytest.mark.parametrize(("text", "query"), [
    ("<rewritten_query>Pixel vet appointment</rewritten_query>", "Pixel vet appointment"),
    ("sure: <REWRITTEN_QUERY>  Pixel vet  </Rewritten_Query>\n", "Pixel vet"),
    ("<rewritten_query>NONE</rewritten_query>", None),
    ("<rewritten_query></rewritten_query>", None),
    ("Pixel vet appointment", None),  # no envelope
    ("<rewritten_query>a\nb</rewritten_query>", None),
    ("<rewritten_query>" + "x" * 500 + "</rewritten_query>", "x" * 400),
])
def test_parse_rewrite(text: str, query: str | None) -> None:
    assert parse_rewrite(text) == query


def test_prompt_clips_and_frames_history() -> None:
    out = build_rewriter_prompt("and when is it?", [("user", "My cat Pixel\nneeds a vet"),
                                                    ("assistant", "x" * 600)])
    assert out.startswith("### history\nUSER: My cat Pixel needs a vet\nASSISTANT: ")
    assert "x" * 399 + "…" in out and "x" * 400 not in out
    assert out.endswith("### current\nUSER: and when is it?\n\n### output\n")
    assert "rewritten_query" in REWRITER_GRAMMAR and "{0,399}" in REWRITER_GRAMMAR


async def test_disabled_or_without_history_never_calls_the_llm() -> None:
    off = Rewriter(None, RewriterConfig())
    assert await off.rewrite("s", "and it?", [("user", "a"), ("assistant", "b")]) == (
        "and it?", "skipped_disabled")


FOLLOW_UP = [
    {"grammar_contains": "rewritten_query", "match": "USER: and when is it?",
     "response": "<rewritten_query>Pixel vet appointment</rewritten_query>"},
    {"grammar_contains": "reply", "response": '{"reply": "noted"}'},
]


async def _two_turns(tmp_path, rules, slots=3):
    state = tmp_path / "state"
    state.mkdir()
    # embeddings off: the similarity check (unit-tested below) would depend on when the
    # backfill actor finished loading its embedder
    (state / "config.json").write_text('{"memory": {"embeddings": {"enabled": false}}}')
    async with open_fake_llama(tmp_path, rules, slots=slots) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                await c.memory("memory.notes.store",
                               {"content": "Pixel the cat has a vet appointment on Friday"})
                with trio.fail_after(60):
                    first = [f async for f in c.say("My cat needs a checkup soon")]
                    second = [f async for f in c.say("and when is it?")]
                metrics = await c.request({"type": "metrics"}, "metrics.result")
    return fake, first, second, metrics["actors"]["agent"]["counters"]


def recalled_section(prompt: str) -> str:
    """The body of the tail's ``### recalled`` section ("" when there is none)."""
    tail = prompt.split("<|im_start|>user\n", 1)[-1]
    return tail.split("### recalled\n", 1)[1].split("\n### ")[0] if "### recalled\n" in tail else ""


async def test_follow_up_recalls_by_the_rewrite_on_its_own_slot(tmp_path):
    fake, first, second, counters = await _two_turns(tmp_path, FOLLOW_UP)
    assert first[-1]["reason"] == second[-1]["reason"] == "reply"
    steps = [f for f in second if f.get("step") == "rewrite"]
    assert steps and steps[0]["query"] == "Pixel vet appointment"
    bodies = fake.completions()
    rewrites = [b for b in bodies if "rewritten_query" in b.get("grammar", "")]
    assert [b["id_slot"] for b in rewrites] == [2]  # the rewriter slot of a 3-slot server
    last_turn = [b for b in bodies if "reply" in b.get("grammar", "")][-1]
    assert "Pixel the cat has a vet appointment" in recalled_section(last_turn["prompt"])
    # the model still sees the user's own words
    assert "and when is it?" in last_turn["prompt"]
    assert counters["agent.memory.rewriter{outcome=ok}"] == 1
    assert counters["agent.memory.rewriter{outcome=skipped_no_history}"] == 1


async def test_a_failing_rewrite_falls_back_to_the_raw_message(tmp_path):
    rules = [{"grammar_contains": "rewritten_query", "status": 500, "response": "boom"},
             {"grammar_contains": "reply", "response": '{"reply": "noted"}'}]
    fake, _, second, counters = await _two_turns(tmp_path, rules, slots=1)
    assert second[-1]["reason"] == "reply"
    assert not [f for f in second if f.get("step") == "rewrite"]
    assert counters["agent.memory.rewriter{outcome=failed}"] == 1
    rewrites = [b for b in fake.completions() if "rewritten_query" in b.get("grammar", "")]
    assert rewrites and all(b["id_slot"] == -1 for b in rewrites)  # single slot: -1
    last_turn = [b for b in fake.completions() if "reply" in b.get("grammar", "")][-1]
    assert "Pixel" not in recalled_section(last_turn["prompt"])  # raw words find nothing


class _ScriptedPool:
    """A stand-in for BackendPool in unit tests: answers every completion with ``text``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.calls = 0

    async def complete(self, partition, system, user, **kw):
        from runtime.services.llm import Completion

        self.calls += 1
        assert partition.startswith("rewriter:") and kw["role"] == "rewriter"
        return Completion(text=self.text)


@pytest.mark.parametrize(("checked", "outcome"), [
    ((0.55, 0.35), "ok"), ((0.02, 0.35), "dissimilar"), (None, "ok")])
async def test_similarity_check_rejects_a_rewrite_that_drifted(checked, outcome) -> None:
    seen = []

    async def similarity(a: str, b: str):
        seen.append((a, b))
        return checked

    pool = _ScriptedPool("<rewritten_query>Pixel vet appointment</rewritten_query>")
    rw = Rewriter(pool, RewriterConfig(), similarity=similarity)
    history = [("user", "My cat Pixel needs a checkup"), ("assistant", "noted")]
    query, got = await rw.rewrite("s", "and when is it?", history)
    assert got == outcome
    assert query == ("Pixel vet appointment" if outcome == "ok" else "and when is it?")
    # compared with what it was made from: the history window and the message
    assert seen == [("My cat Pixel needs a checkup noted and when is it?", "Pixel vet appointment")]
    # memoised: the same message and history do not call the LLM again
    assert await rw.rewrite("s", "and when is it?", history) == (query, "memo")
    assert pool.calls == 1


async def test_real_embedder_keeps_a_faithful_rewrite_and_drops_a_drifted_one() -> None:
    from runtime.services.embeddings.embedder import LocalEmbedder

    embedder = await trio.to_thread.run_sync(LocalEmbedder.load)

    async def similarity(a: str, b: str):
        return embedder.similarity(a, b), embedder.entry.min_cosine

    history = [("user", "My cat Pixel needs a checkup soon"), ("assistant", "noted")]
    for text, outcome in (("Pixel vet checkup appointment", "ok"),
                          ("quantum chromodynamics lecture schedule", "dissimilar")):
        rw = Rewriter(_ScriptedPool(f"<rewritten_query>{text}</rewritten_query>"),
                      RewriterConfig(), similarity=similarity)
        assert (await rw.rewrite("s", "and when is it?", history))[1] == outcome
