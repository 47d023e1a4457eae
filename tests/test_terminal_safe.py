"""Terminal-safe output (runtime/shell/safe_text.py): text any app stored is printed by
the CLI with its control characters as visible escapes — a clipboard write (OSC 52), a
window title, a screen clear, a bidi override, a forged line — while ``--json`` gives the
exact text back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.shell.safe_text import one_line, visible
from tests.daemon import REPO

CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4=\x07"  # OSC 52: write the clipboard
TITLE = "\x1b]0;pwned\x07"  # retitle the window
CLEAR = "\x1b[2J\x1b[H"  # clear the screen
CSI_C1 = "\x9b31m"  # a one-byte CSI
BIDI = "\u202etxt.exe"  # right-to-left override
FORGED = "\r* name: Mallory\nname: Mallory"  # overwrite the line, add one
HOSTILE = f"tea {CLIPBOARD}{TITLE}{CLEAR}{CSI_C1}{BIDI}{FORGED} end"
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\r")


def cli(state: Path, *argv: str) -> str:
    done = subprocess.run([sys.executable, "-m", "runtime.shell.cli", "--state-dir", str(state),
                           *argv], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    for ch in RAW:
        assert ch not in done.stdout and ch not in done.stderr, (argv, ch, done.stdout)
    return done.stdout


@pytest.mark.slow
def test_stored_text_is_printed_with_visible_escapes(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    cli(state, "memory", "notes", "store", HOSTILE)
    cli(state, "memory", "profile", "set", "city", HOSTILE)
    cli(state, "memory", "profile", "set", "city", "Lyon")
    shown = cli(state, "memory", "notes", "list")
    assert "\\u001b]52;c;" in shown and "\\u202etxt.exe" in shown
    assert "\\u001b]52;c;" in cli(state, "memory", "notes", "show", "1")
    assert "\\u001b]52;c;" in cli(state, "memory", "notes", "recall", "tea")
    facts = cli(state, "memory", "profile", "list")
    assert facts.splitlines() == ["* city: Lyon"]
    history = cli(state, "memory", "profile", "history", "city")
    assert len(history.splitlines()) == 2  # the stored line breaks forge no line
    assert "\\u000d* name: Mallory\\nname: Mallory" in history
    # --json is exact: the same characters, escaped the JSON way
    notes = json.loads(cli(state, "memory", "notes", "list", "--json"))
    assert notes[0]["content"] == HOSTILE
    versions = json.loads(cli(state, "memory", "profile", "history", "city", "--json"))
    assert versions[0]["value"] == HOSTILE


@pytest.mark.parametrize(("text", "shown"), [
    ("plain text, accents é and emoji 🙂", "plain text, accents é and emoji 🙂"),
    ("a\x1b[31mred", "a\\u001b[31mred"),
    ("line one\nline two\ttab", "line one\nline two\ttab"),
    ("\u200bhidden\u2066isolate\u2069", "\\u200bhidden\\u2066isolate\\u2069"),
])
def test_visible_escapes_only_what_a_terminal_would_obey(text, shown):
    assert visible(text) == shown
    assert "\n" not in one_line(text)


def test_the_tui_shows_stored_text_with_visible_escapes():
    from actors.store.records import Note, ProfileFact
    from runtime.shell.tui.render import fact_history, row_cells

    cells = row_cells(Note(id=1, content=HOSTILE, tags=[CLEAR], source="user", scope="all",
                           working_dir=None, created_at=0, updated_at=0), 400)
    lines = fact_history("city", [ProfileFact(id=1, key="city", value=HOSTILE, pinned=True,
                                              keywords=[], updated_at=0, valid_from=0)])
    for text in [*cells, *lines]:
        assert not any(ch in text for ch in RAW), text
    assert "name: Mallory" not in "\n".join(lines).splitlines()
