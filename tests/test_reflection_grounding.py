"""Grounding: the trivial-window skip and the filter of what reflection may write
(``actors/policy/grounding.py``; docs/architecture.md §4, step 11)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.reflection.prompt import EXAMPLE_VALUES
from actors.policy.grounding import filter_ungrounded, is_trivial_window, name_matches
from actors.policy.candidates import ParsedFact, ParsedNote


@pytest.mark.parametrize("text", [
    "", "   ", "hi", "Hello!", "ping", "test", "thanks", "Thank you!", "привет", "спасибо",
    "Reply only OK.", "Please reply exactly PONG", "say 'ready' and nothing else",
    "Respond with exactly: PONG_42", "don't use tools this time", "Do not use tools. Reply only OK.",
    "no explanation", "ok, reply exactly PONG", "just say hi",
])
def test_trivial_windows(text: str) -> None:
    assert is_trivial_window(text)


@pytest.mark.parametrize("text", [
    "ok thanks", "ok, thanks", "yes", "ok", "да",  # a confirmation may answer "remember X?"
    "Reply only in YAML", "Answer only briefly", "Reply only YAML", "Отвечай только по-русски",
    "My name is Dana", "remember to reply OK", "Always reply OK", "What is 2+2?",
    "I prefer pytest", "hi, I'm Dana", "Never use tools for math",
])
def test_non_trivial_windows(text: str) -> None:
    assert not is_trivial_window(text)


@pytest.mark.parametrize(("name", "word", "same"), [
    ("Dana", "Dana", True), ("Alexander", "Aleksandr", True), ("Nadya", "Надя", True),
    ("Nadya", "Надей", True), ("Nadia", "Nadya", True), ("Philipp", "Filip", True),
    ("Sam", "Pam", False), ("Max", "Maxine", False), ("Jo", "Joe", False), ("Ann", "Anna", True),
])
def test_name_matches(name: str, word: str, same: bool) -> None:
    assert name_matches(name, word) is same


def F(key: str, value: str) -> ParsedFact:
    return ParsedFact(key=key, value=value)


def N(body: str) -> ParsedNote:
    return ParsedNote(body=body)


def reason_for(user: str, item: ParsedFact | ParsedNote) -> str | None:
    """The reason ``item`` is dropped for ``user``'s message (None: it is kept)."""
    is_fact = isinstance(item, ParsedFact)
    out = filter_ungrounded([item] if is_fact else [], [] if is_fact else [item], user,
                            examples=EXAMPLE_VALUES)
    kept = out.facts if is_fact else out.notes
    assert len(kept) + len(out.dropped) == 1
    return out.dropped[0].reason if out.dropped else None


@pytest.mark.parametrize(("user", "item", "reason"), [
    # names: only what the user wrote, fuzzily
    ("I'm Dana and I live in Lisbon", F("name", "Dana"), None),
    ("my name is alex", F("name", "Alex"), None),
    ("Зови меня Надей", F("name", "Nadya"), None),
    ("Please call me Aleksandr", F("preferred_name", "Alexander"), None),
    ("I'm Dana", F("name", "Dana Smith"), "ungrounded_identity"),
    ("Will you help me plan a trip?", F("name", "Will"), "ungrounded_identity"),
    ("Max speed please", F("name", "Max"), "ungrounded_identity"),
    ("I live in Lisbon", N("The user's name is Sam"), "ungrounded_identity"),
    ("I live in Lisbon", F("user_name", "Sam"), "ungrounded_identity"),
    ("I live in Lisbon", N("The user is Brazilian"), "ungrounded_content"),
    ("I'm from Brazil", N("The user is Brazilian"), None),
    # the assistant's self-description is never a user fact
    ("hi there, I love chess", F("assistant_name", "SmolLM"), "assistant_persona"),
    ("I love chess", N("I am an AI assistant."), "assistant_persona"),
    ("I love chess", N("The assistant enjoys chess"), "assistant_persona"),
    ("I love chess", N("As an AI I cannot play chess"), "assistant_persona"),
    ("You are my coding assistant, remember that I love chess",
     N("You are my coding assistant and the user loves chess"), None),
    ("I am an assistant professor at MIT", F("occupation", "assistant professor at MIT"), None),
    # copied examples of the prompt
    ("I use vim for coding", F("code_editor", "<editor>"), "example_copy"),
    ("I use vim", F("key", "value"), "example_copy"),
    # one-off instructions are not preferences
    ("I like chess. Reply exactly PONG_42", F("reply_word", "PONG_42"), "one_off_payload"),
    ("I like chess. Respond with exactly: READY", N("The user wants replies to be READY"),
     "one_off_payload"),
    ("Don't use tools, what is my name? I like chess",
     N("The user does not want tools used"), "one_off_tool_restriction"),
    ("Never use tools from now on", N("The user does not want tools used"), None),
    # content the user never wrote
    ("I don't eat meat", F("favourite_colour", "blue"), "ungrounded_content"),
    ("I prefer pytest for unit work", F("test_runner", "pytest"), None),
    ("Remember that my deploys must wait for the security review",
     N("The user wants every deploy to wait for the security review"), None),
    ("我喜欢喝咖啡", N("用户喜欢喝咖啡"), None),  # unsplittable script: fails open
])
def test_grounding(user: str, item, reason: str | None) -> None:
    assert reason_for(user, item) == reason


def test_the_assistant_reply_never_grounds_a_user_fact() -> None:
    # filter_ungrounded only sees the user's words: a name the assistant used is not one.
    out = filter_ungrounded([F("name", "Sam")], [], "hello, plan my trip to Rome")
    assert out.facts == [] and out.dropped[0].reason == "ungrounded_identity"


def test_order_is_kept_and_reasons_carry_keys_not_values() -> None:
    out = filter_ungrounded([F("city", "Lisbon"), F("name", "Sam"), F("hometown", "Porto")],
                            [N("The user lives in Lisbon")], "I grew up in Porto, now Lisbon")
    assert [f.key for f in out.facts] == ["city", "hometown"]
    assert [n.body for n in out.notes] == ["The user lives in Lisbon"]
    assert [(d.item, d.reason, d.key) for d in out.dropped] == [
        ("fact", "ungrounded_identity", "name")]
    assert "Sam" not in repr(out.dropped)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(max_size=300), st.text(max_size=120), st.text(max_size=120))
def test_never_raises(user: str, value: str, body: str) -> None:
    is_trivial_window(user)
    out = filter_ungrounded([F("name", value or "x"), F("city", value or "x")],
                            [N(body or "x")], user)
    assert len(out.facts) + len(out.notes) + len(out.dropped) == 3


@pytest.mark.parametrize(("user", "item", "reason"), [
    # a weak model's copies of the prompt's example values
    ("My name is Dana and I live in Lisbon", F("city", "Nairobi"), "example_copy"),
    ("My name is Dana and I teach maths", F("job", "maths teacher"), "example_copy"),
    ("I moved to Nairobi last year", F("city", "Nairobi"), None),
    ("For coding I use Helix as my editor", F("code_editor", "Helix"), None),
    # the value must come from the user; the key alone does not ground it
    ("I like my diet simple", F("diet", "vegetarian"), "ungrounded_content"),
    ("I am fully vegetarian", F("diet", "vegetarian"), None),
    ("I like dogs", F("likes_dogs", "yes"), None),  # no content word in the value: the key
])
def test_fact_values_must_be_grounded(user: str, item, reason: str | None) -> None:
    assert reason_for(user, item) == reason
