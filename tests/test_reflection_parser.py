"""Tests for actors.reflection.parser.parse_reflection.

Rules: pure in-process tests; no I/O, no clock, no processes. Cases: the
SET / NOTE / FORGET lines of the reflection grammar, plus the robustness cases a
server that ignores the grammar produces (prose, fences, bullets, CRLF, surrogates).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.reflection.parser import (
    ParsedFact,
    ParsedNote,
    ParsedReflection,
    normalize_key,
    parse_reflection,
)


def facts(text: str, **kw) -> list[tuple[str, str]]:
    return [(f.key, f.value) for f in parse_reflection(text, **kw).facts]


# ------------------------------------------------------------------- none forms


@pytest.mark.parametrize("text", ["", "NONE", "NONE\n", "  NONE  \n", "\n\n  \n", "```\n```"])
def test_none_forms(text: str) -> None:
    r = parse_reflection(text)
    assert r.kind == "none"
    assert r.facts == [] and r.notes == []
    assert (r.invalid_facts, r.invalid_notes, r.dropped_over_cap) == (0, 0, 0)


def test_prose_only_is_none_and_counted_as_ignored() -> None:
    r = parse_reflection("I think nothing here is worth remembering.\nThanks!")
    assert r.kind == "none"
    assert r.ignored_lines == 2


# ------------------------------------------------------------------- valid lines


def test_valid_set_and_note() -> None:
    r = parse_reflection("SET language=Python\nNOTE The user prefers short answers.\n")
    assert r.kind == "entries"
    assert r.facts == [ParsedFact(key="language", value="Python", pinned=True, keywords=[])]
    assert r.notes == [ParsedNote(body="The user prefers short answers.", tags=[])]
    assert isinstance(r, ParsedReflection)


def test_value_keeps_later_equals_signs() -> None:
    assert facts("SET equation=a=b+c") == [("equation", "a=b+c")]


def test_invalid_set_lines_are_counted() -> None:
    r = parse_reflection("SET =empty\nSET novalue=\nSET noequals\nSET ok=yes\njunk line")
    assert [(f.key, f.value) for f in r.facts] == [("ok", "yes")]
    assert r.invalid_facts == 3
    assert r.ignored_lines == 1


def test_duplicate_keys_last_wins_first_position_kept() -> None:
    r = parse_reflection("SET name=Alex\nSET city=<city>\nSET name=Alexandra")
    assert [(f.key, f.value) for f in r.facts] == [("name", "Alexandra"), ("city", "<city>")]


def test_crlf_fences_bullets_and_prose_survive() -> None:
    text = (
        "Here is what I extracted:\r\n"
        "```\r\n"
        "- SET timezone=Europe/Example\r\n"
        "* NOTE The user works nights. [tags=schedule]\r\n"
        "`SET editor=vim`\r\n"
        "```\r\n"
        "Hope that helps!\r\n"
    )
    r = parse_reflection(text)
    assert [(f.key, f.value) for f in r.facts] == [("timezone", "Europe/Example"),
                                                    ("editor", "vim")]
    assert r.notes == [ParsedNote(body="The user works nights.", tags=["schedule"])]
    assert r.ignored_lines == 2
    assert "\r" not in r.facts[0].value


# ------------------------------------------------------------------- keys


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ("language", "language"),
        ("Preferred Editor", "preferred_editor"),
        ("test-runner", "test_runner"),
        ("  k2  ", "k2"),
        ("a" * 32, "a" * 32),
        ("a" * 33, None),
        ("2fa", None),
        ("_x", None),
        ("name!", None),
        ("ключ", None),
        ("", None),
    ],
)
def test_normalize_key(raw: str, key: str | None) -> None:
    assert normalize_key(raw) == key


def test_invalid_keys_dropped_and_counted() -> None:
    r = parse_reflection("SET 9lives=cat\nSET Favourite Colour=<colour>\nSET bad$key=x")
    assert [(f.key, f.value) for f in r.facts] == [("favourite_colour", "<colour>")]
    assert r.invalid_facts == 2


# ------------------------------------------------------------------- lengths


def test_over_long_value_dropped_never_truncated() -> None:
    r = parse_reflection(f"SET bio={'x' * 201}\nSET ok={'y' * 200}")
    assert [(f.key, len(f.value)) for f in r.facts] == [("ok", 200)]
    assert r.invalid_facts == 1


def test_long_note_body_cut_to_500() -> None:
    r = parse_reflection("NOTE " + "z" * 800)
    assert len(r.notes) == 1 and len(r.notes[0].body) == 500
    assert r.invalid_notes == 0


def test_empty_note_body_is_invalid() -> None:
    r = parse_reflection("NOTE  [tags=a]")
    assert r.kind == "none" and r.invalid_notes == 1


# ------------------------------------------------------------------- markers


def test_contextual_marker_semicolon_form() -> None:
    r = parse_reflection("SET python_test_runner=pytest [pinned=false; keywords=python,test]")
    assert r.facts == [ParsedFact(key="python_test_runner", value="pytest", pinned=False,
                                  keywords=["python", "test"])]


def test_contextual_marker_comma_form() -> None:
    r = parse_reflection("SET deploy_cmd=pnpm run deploy [pinned=false, keywords=deploy]")
    assert r.facts == [ParsedFact(key="deploy_cmd", value="pnpm run deploy", pinned=False,
                                  keywords=["deploy"])]


def test_marker_three_keywords_and_pinned_true_clears_keywords() -> None:
    r = parse_reflection(
        "SET deploy_cmd=pnpm run deploy [pinned=false; keywords=deploy,release,ship]\n"
        "SET lang=en [pinned=true; keywords=lang]"
    )
    assert r.facts[0].keywords == ["deploy", "release", "ship"]
    assert r.facts[0].pinned is False
    assert r.facts[1] == ParsedFact(key="lang", value="en", pinned=True, keywords=[])


def test_keywords_cleaned_deduplicated_capped() -> None:
    kws = ",".join(["Python", "python", " PyTest ", "-bad", "x" * 41] + [f"k{i}" for i in range(10)])
    r = parse_reflection(f"SET runner=pytest [pinned=false; keywords=[{kws}]]")
    assert r.facts[0].keywords == ["python", "pytest", "k0", "k1", "k2", "k3", "k4", "k5"]


def test_tags_marker_in_set_stays_in_value() -> None:
    assert facts("SET note=today [tags=foo]") == [("note", "today [tags=foo]")]


def test_supersedes_and_valid_from() -> None:
    r = parse_reflection(
        "SET spoken=French [valid_from=now; supersedes=language]\n"
        "SET other=x [supersedes=not a valid key]\n"
        "SET third=y [valid_from=1970-01-01; supersedes=language]"
    )
    a, b, c = r.facts
    assert (a.valid_from, a.supersedes) == ("now", "language")
    assert (b.valid_from, b.supersedes) == (None, None)
    assert (c.valid_from, c.supersedes) == (None, "language")


def test_note_tags_lowercased_invalid_dropped() -> None:
    r = parse_reflection("NOTE The user ships on Fridays [tags=a,B,has space]")
    assert r.notes == [ParsedNote(body="The user ships on Fridays", tags=["a", "b"])]


def test_note_tags_capped_at_eight() -> None:
    tags = ",".join(f"t{i}" for i in range(12))
    r = parse_reflection(f"NOTE body text [tags={tags}]")
    assert r.notes[0].tags == [f"t{i}" for i in range(8)]


def test_notes_not_deduplicated() -> None:
    r = parse_reflection("NOTE same\nNOTE same", max_notes=5)
    assert len(r.notes) == 2


# ------------------------------------------------------------------- caps


def test_over_cap_dropped_and_counted() -> None:
    text = "\n".join([f"SET k{i}=v{i}" for i in range(5)] + [f"NOTE n{i}" for i in range(4)])
    r = parse_reflection(text)
    assert [f.key for f in r.facts] == ["k0", "k1", "k2"]
    assert [n.body for n in r.notes] == ["n0", "n1"]
    assert r.dropped_over_cap == 2 + 2


def test_max_notes_zero_disables_notes() -> None:
    r = parse_reflection("NOTE a\nNOTE b", max_notes=0)
    assert r.kind == "none" and r.notes == [] and r.dropped_over_cap == 2


def test_caps_apply_after_dedup() -> None:
    r = parse_reflection("SET a=1\nSET a=2\nSET b=1\nSET c=1", max_facts=3)
    assert [(f.key, f.value) for f in r.facts] == [("a", "2"), ("b", "1"), ("c", "1")]
    assert r.dropped_over_cap == 0


# ------------------------------------------------------------------- surrogates


def test_lone_surrogates_stripped() -> None:
    r = parse_reflection("SET city=Par\ud800is\nNOTE The user \udfffsays hi")
    assert facts("SET city=Par\ud800is") == [("city", "Paris")]
    assert r.notes[0].body == "The user says hi"
    for item in [*(f.value for f in r.facts), *(n.body for n in r.notes)]:
        item.encode("utf-8")  # must not raise


def test_valid_astral_characters_kept() -> None:
    assert facts("SET emoji=\U0001F600") == [("emoji", "\U0001F600")]


# ------------------------------------------------------------------- property

_FRAGMENTS = [
    "SET ", "NOTE ", "NONE", "\n", "\r\n", "=", "[", "]", ";", ",", "pinned=false",
    "keywords=", "tags=", "supersedes=", "valid_from=now", "- ", "```", " ", "key", "Value",
    "\ud800", "\U0001F600", "x" * 250,
]
_TEXT = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=())),
    st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=8)), max_size=40).map("".join),
)
_KEY_RE = re.compile(r"[a-z][a-z0-9_]{0,31}")


@settings(derandomize=True, max_examples=300)
@given(text=_TEXT, max_facts=st.integers(-1, 6), max_notes=st.integers(-1, 6))
def test_never_raises_and_respects_bounds(text: str, max_facts: int, max_notes: int) -> None:
    r = parse_reflection(text, max_facts=max_facts, max_notes=max_notes)
    assert r.kind in ("none", "entries")
    assert (r.kind == "none") == (not r.facts and not r.notes)
    assert len(r.facts) <= max(0, max_facts) and len(r.notes) <= max(0, max_notes)
    assert len({f.key for f in r.facts}) == len(r.facts)
    for f in r.facts:
        assert _KEY_RE.fullmatch(f.key)
        assert 1 <= len(f.value) <= 200 and "\n" not in f.value
        assert len(f.keywords) <= 8 and (not f.pinned or f.keywords == [])
        f.value.encode("utf-8")
    for n in r.notes:
        assert 1 <= len(n.body) <= 500 and "\n" not in n.body
        assert len(n.tags) <= 8
        n.body.encode("utf-8")
    assert min(r.invalid_facts, r.invalid_notes, r.dropped_over_cap, r.ignored_lines) >= 0


@pytest.mark.parametrize(
    ("line", "body", "tags"),
    [
        ("NOTE Waters the ferns every Sunday [home]", "Waters the ferns every Sunday", ["home"]),
        ("NOTE waters the ferns every Sunday.  [home, plants]", "waters the ferns every Sunday.",
         ["home", "plants"]),
        ("NOTE Uses Vim [Editor, daily-use,]", "Uses Vim", ["editor", "daily-use"]),
        # not a tag list: spaces inside an item, digits-only prose, or an inner bracket
        ("NOTE Read [the design doc]", "Read [the design doc]", []),
        ("NOTE see [1] then [2]", "see [1] then [2]", []),
    ],
)
def test_note_tag_list_form(line: str, body: str, tags: list[str]) -> None:
    """A note's tag list: ``NOTE this is a freeform observation [tag1, tag2]``."""
    (note,) = parse_reflection(line).notes
    assert (note.body, note.tags) == (body, tags)
