"""The agent's prompt: stable prefix pinned by hash, tail order, action parsing.

Rules: pure functions only. If the prefix hash changes on purpose, update the
constant in the same commit and say why (every deployed KV cache is invalidated).
"""

from __future__ import annotations

import hashlib

import pytest

from actors.agent.prompt import (
    ACTION_GRAMMAR,
    SECTION_ORDER,
    STABLE_PREFIX,
    Finish,
    Invalid,
    Reply,
    TailInput,
    ToolCall,
    build_tail,
    parse_action,
    partial_reply,
)
from actors.memory.ops import TOOL_NAMES

PREFIX_SHA256 = "ecd661f623653259bf5311843241bc2fc31cb63b002fa921b628a530f5e23e21"


def test_stable_prefix_is_pinned():
    assert hashlib.sha256(STABLE_PREFIX.encode()).hexdigest() == PREFIX_SHA256


def test_prefix_has_no_memory_sections_and_lists_the_eight_tools():
    assert TOOL_NAMES == ("memory.profile.set", "memory.profile.remove", "memory.profile.list",
                          "memory.notes.store", "memory.notes.recall", "memory.notes.forget",
                          "memory.lessons.recall", "memory.procedures.recall")
    for name in TOOL_NAMES:
        assert f"- {name} {{" in STABLE_PREFIX and f'"\\"{name}\\""' in ACTION_GRAMMAR
    for line in STABLE_PREFIX.splitlines():
        assert not line.startswith("### ")


def tail(**kw) -> str:
    base = dict(memory={"profile": "- name: Dana", "recalled": "- #1 note", "memory-index": "- #2 x",
                        "lessons": "*1 l", "procedures": ">1 p"},
                history=[("user", "hi")], notice="fix it", world="wd")
    base.update(kw)
    return build_tail(TailInput(**base))


def test_tail_sections_in_the_current_order_and_empty_ones_omitted():
    text = tail()
    present = [line[4:] for line in text.splitlines() if line.startswith("### ")]
    assert present == [s for s in SECTION_ORDER
                       if s not in ("session-facts", "loaded-skills", "tools")]
    text = tail(tools="- time.get_current_time {timezone: string}: Get the time")
    present = [line[4:] for line in text.splitlines() if line.startswith("### ")]
    assert present == [s for s in SECTION_ORDER if s not in ("session-facts", "loaded-skills")]
    text = tail(memory={}, notice="")
    assert [line for line in text.splitlines() if line.startswith("### ")] == [
        "### world", "### conversation", "### respond"]


def test_conversation_is_cut_oldest_first_never_the_memory_sections():
    history = [("user", f"message number {i} " + "word " * 50) for i in range(200)]
    text = tail(history=history, context_window=4096)
    conversation = text.split("### conversation\n", 1)[1].split("\n\n", 1)[0]
    assert "earlier line(s) not shown" in conversation
    assert "message number 199" in conversation and "message number 0 " not in conversation
    assert "- name: Dana" in text and "- #1 note" in text  # memory sections intact


def test_parse_action_strict_and_lenient():
    assert parse_action('{"reply": "hi"}') == Reply("hi")
    assert parse_action('{"finish": "done"}') == Finish("done")
    assert parse_action('{"tool": "memory.profile.list", "args": {}}') == ToolCall("memory.profile.list", {})
    assert parse_action('```json\n{"reply": "fenced"}\n```') == Reply("fenced")
    assert parse_action("Sure! Here you go.") == Reply("Sure! Here you go.")
    assert isinstance(parse_action('{"reply": '), Invalid)
    assert isinstance(parse_action('{"tool": "x", "args": [1]}'), Invalid)
    assert isinstance(parse_action('{"other": 1}'), Invalid)
    assert isinstance(parse_action("   "), Invalid)


def test_partial_reply_streams_decoded_text():
    assert partial_reply('{"reply": "Hel') == "Hel"
    assert partial_reply('{"reply": "a\\nb\\u00e9') == "a\nbé"
    assert partial_reply('{"reply": "half escape \\') == "half escape "
    assert partial_reply('{"tool": "x"') is None


def test_the_respond_section_quotes_the_users_last_message():
    """A newcomer's trial: a small model answered "How can I assist you today?" to
    everything until the instruction sat next to the message it answers."""
    from actors.agent.prompt import RESPOND, respond_text

    text = respond_text([("user", "old"), ("assistant", "Hi!"),
                         ("user", "I moved to\nBerlin ### respond")])
    assert text.startswith(RESPOND) and "Do not repeat an earlier reply" in text
    last = text.splitlines()[-1]
    assert last.startswith("The USER's last message: I moved to Berlin")
    assert "### respond" not in last  # neutralised, one line
    assert respond_text([]) == RESPOND
    assert len(respond_text([("user", "x" * 1000)]).splitlines()[-1]) < 340


def test_the_prefix_and_grammar_follow_the_enabled_tools_only():
    from actors.agent.prompt import (
        ACTION_GRAMMAR,
        STABLE_PREFIX,
        agent_prompt,
    )
    from actors.memory.ops import TOOL_NAMES

    full = agent_prompt()
    assert (full.prefix, full.action_grammar, full.tools) == (STABLE_PREFIX, ACTION_GRAMMAR,
                                                             TOOL_NAMES)
    no_notes = agent_prompt(tuple(t for t in TOOL_NAMES if not t.startswith("memory.notes.")))
    assert "memory.notes" not in no_notes.prefix and "memory.notes" not in no_notes.action_grammar
    assert "### recalled" in no_notes.prefix  # the sections are still explained
    assert agent_prompt(no_notes.tools) == no_notes  # configuration only, never data
    none = agent_prompt(())
    assert "toolname" not in none.action_grammar and "call" not in none.action_grammar
    assert none.tools == () and "Tools:" in none.prefix
    with pytest.raises(ValueError):
        agent_prompt(("web.search",))
