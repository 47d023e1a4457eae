"""Provenance, through a real daemon: every fact version and note says
who wrote it (reflection, the agent's tool call, the user, an import) and in which
session and turn; ``memory profile history`` shows dates, not epoch milliseconds, and
``memory notes show`` shows everything known about a note."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama

RULES = [
    {"match": "### output", "times": 1, "response": "SET city=Lisbon\n"},
    {"match": "moved to Faro", "grammar_contains": "SET", "response": "SET city=Faro\n"},
    {"match": "### output", "response": "NONE"},
    {"grammar_contains": "reply", "match": "Remember that I drink green tea", "times": 1,
     "response": '{"tool": "memory.notes.store", "args": {"content": "The user drinks green '
                 'tea", "tags": ["drinks"]}}'},
    {"grammar_contains": "reply", "response": '{"reply": "Noted."}'},
]


def cli(state: Path, *argv: str) -> str:
    done = subprocess.run([sys.executable, "-m", "runtime.shell.cli", "--state-dir", str(state),
                           *argv], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done.stdout


async def test_who_wrote_what_and_when(tmp_path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path, RULES) as fake, run_daemon(state, llm_url=fake.url):
        cli(state, "ask", "--session", "garden", "I live in Lisbon now.")
        cli(state, "ask", "--session", "garden", "--no-memory",
            "Remember that I drink green tea.")
        cli(state, "memory", "profile", "set", "city", "Porto")
        history = cli(state, "memory", "profile", "history", "city")
        lines = history.splitlines()
        assert re.match(r"^20\d\d-\d\d-\d\d \d\d:\d\d(?: \S+)?  replaced  Lisbon  \(reflection, session "
                        r"garden, turn t-[0-9a-f]{10}; replaced by cli\)$", lines[0]), history
        assert re.match(r"^20\d\d-\d\d-\d\d \d\d:\d\d(?: \S+)?  active    Porto   \(user\)$", lines[1])
        versions = json.loads(cli(state, "memory", "profile", "history", "city", "--json"))
        assert [v["source"] for v in versions] == ["reflection", "user"]
        notes = json.loads(cli(state, "memory", "notes", "list", "--json"))
        tea = next(n for n in notes if "green tea" in n["content"])
        assert (tea["origin"], tea["sessionId"]) == ("tool", "garden")
        assert tea["turnId"].startswith("t-")
        cli(state, "memory", "notes", "recall", "green tea")
        shown = cli(state, "memory", "notes", "show", str(tea["id"]))
        assert f"#{tea['id']} The user drinks green tea" in shown
        assert f"written by: tool, session garden, turn {tea['turnId']}" in shown
        assert "tags: drinks" in shown and "recalled: 1 time, last 20" in shown
        assert "links: -" in shown
        # who ended each version: the CLI's set, a reflection in a turn, the CLI's remove
        cli(state, "ask", "--session", "move", "Actually I moved to Faro.")
        cli(state, "memory", "profile", "remove", "city")
        versions = json.loads(cli(state, "memory", "profile", "history", "city", "--json"))
        assert [(v["value"], v["removedBy"]) for v in versions] == [
            ("Lisbon", "cli"), ("Porto", "reflection for cli"), ("Faro", "cli")]
        assert versions[1]["removedTurnId"].startswith("t-"), versions
        assert versions[0]["removedTurnId"] is None and versions[2]["removedTurnId"] is None
        lines = cli(state, "memory", "profile", "history", "city").splitlines()
        assert lines[0].endswith("; replaced by cli)"), lines
        assert f"; replaced by reflection for cli, turn {versions[1]['removedTurnId']})" \
            in lines[1], lines
        assert lines[2].endswith("; removed by cli)"), lines
        cli(state, "memory", "export", str(tmp_path / "m.jsonl"))
    other = tmp_path / "other"
    cli(other, "memory", "import", str(tmp_path / "m.jsonl"))
    imported = json.loads(cli(other, "memory", "notes", "list", "--json"))
    assert {n["origin"] for n in imported} == {"import"}
    moved = json.loads(cli(other, "memory", "profile", "history", "city", "--json"))
    assert [v["source"] for v in moved] == ["import"] * 3
    assert [v["removedBy"] for v in moved] == ["cli", "reflection for cli", "cli"]
