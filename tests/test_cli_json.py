"""``--json`` on every ``memory`` command: the op's result in the shapes of
docs/protocol.md on stdout, the same exit status as the text form."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from runtime.shell.cli import build_parser
from tests.daemon import REPO


@pytest.mark.slow
def test_every_memory_op_command_takes_json(tmp_path):
    state = tmp_path / "state"
    state.mkdir()

    def run(*a: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "runtime.shell.cli", "--state-dir", str(state),
                               "memory", *a, "--json"], cwd=REPO, capture_output=True,
                              text=True, timeout=60)

    note = json.loads(run("notes", "store", "I keep bees", "--tags", "hobby").stdout)
    assert note["content"] == "I keep bees" and note["tags"] == ["hobby"]
    fact = json.loads(run("profile", "set", "hobby", "beekeeping").stdout)
    assert (fact["key"], fact["value"], fact["pinned"]) == ("hobby", "beekeeping", True)
    assert [f["key"] for f in json.loads(run("profile", "list").stdout)] == ["hobby"]
    assert len(json.loads(run("profile", "history", "hobby").stdout)) == 1
    assert [n["id"] for n in json.loads(run("notes", "list").stdout)] == [note["id"]]
    assert json.loads(run("notes", "show", str(note["id"])).stdout)[0]["id"] == note["id"]
    assert json.loads(run("notes", "recall", "bees").stdout)[0]["id"] == note["id"]
    assert json.loads(run("stats").stdout)["notes"] == 1
    assert json.loads(run("links", "list").stdout) == []
    assert json.loads(run("lessons", "list").stdout) == []
    gone = run("profile", "remove", "nothing-here")
    assert gone.returncode == 1 and json.loads(gone.stdout) == {"removed": False}
    assert gone.stderr.strip() == "atomic-agent: no active fact 'nothing-here'"
    assert json.loads(run("notes", "forget", str(note["id"])).stdout) == {"removed": True}


def test_json_is_offered_on_each_op_command_and_not_on_the_utilities():
    parser = build_parser()
    assert parser.parse_args(["memory", "stats", "--json"]).json is True
    assert parser.parse_args(["memory", "notes", "list", "--json"]).json is True
    assert parser.parse_args(["memory", "backup", "f.db", "--json"]).json is True
    assert not hasattr(parser.parse_args(["memory", "reindex"]), "json")
