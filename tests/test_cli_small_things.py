"""Every argument explains itself in ``--help``; ``metrics`` says in
words what the daemon did (reflection outcomes and skip reasons included); each actor
process shows its own name in ``ps``; README's command reference names every command."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

from runtime.shell.cli import build_parser
from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama


def _leaves(parser: argparse.ArgumentParser, path: list[str]):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _leaves(sub, path + [name])
        else:
            yield path, action


def test_every_argument_and_option_has_help_text():
    missing = [(" ".join(path), action.option_strings or action.dest)
               for path, action in _leaves(build_parser(), [])
               if not action.help and action.help != argparse.SUPPRESS]
    assert missing == []


def test_readme_command_reference_names_every_command():
    readme = (REPO / "README.md").read_text()
    parser = build_parser()
    top = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in top.choices.items():
        assert f"atomic-agent {name}" in readme or f"`{name}" in readme, name
    memory = next(a for a in top.choices["memory"]._actions
                  if isinstance(a, argparse._SubParsersAction))
    for name in memory.choices:
        assert re.search(rf"`memory {name}\b", readme), f"memory {name}"


async def test_metrics_in_words_and_actor_process_titles(tmp_path):
    rules = [{"grammar_contains": "reply", "response": '{"reply": "Sure."}'}]
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path, rules) as fake, run_daemon(state, llm_url=fake.url) as d:
        for text in ("What time is it in Tokyo?", "Tell me a joke about cats."):
            subprocess.run([sys.executable, "-m", "runtime.shell.cli", "ask", "--state-dir",
                            str(state), text], capture_output=True, cwd=REPO, timeout=60,
                           check=True)
        done = subprocess.run([sys.executable, "-m", "runtime.shell.cli", "metrics", "--state-dir",
                               str(state)], capture_output=True, text=True, cwd=REPO,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0].startswith("turns: 2 (reply 2); mean ")
        assert lines[1].startswith("reflections: 2 (none 2)")
        assert "skipped without asking the model: " in done.stdout
        assert "questions 1" in done.stdout and "requests 1" in done.stdout
        assert "actors: 4 up; restarts 0" in done.stdout
        raw = subprocess.run([sys.executable, "-m", "runtime.shell.cli", "metrics", "--json",
                              "--state-dir", str(state)], capture_output=True, text=True,
                             cwd=REPO, timeout=60)
        assert '"counters"' in raw.stdout
        shown = subprocess.run([sys.executable, "-m", "runtime.shell.cli", "memory", "notes",
                                "show", "#1", "--state-dir", str(state)], capture_output=True,
                               text=True, cwd=REPO, timeout=60)
        assert shown.returncode == 1 and "no note #1" in shown.stderr  # "#1" read as an id
        children = subprocess.run(["ps", "-o", "comm=,args=", "--ppid", str(d.proc.pid)],
                                  capture_output=True, text=True).stdout
        for actor in ("agent", "memory", "reflection", "backfill"):
            assert re.search(rf"^aa-{actor}\s+atomic-agent: {actor} actor \(forked\)$",
                             children, re.M), children
    assert os.path.exists(state)


def test_output_into_a_reader_that_stops_early_ends_quietly(tmp_path):
    """``atomic-agent config show | head -1``: the reader closes the pipe; the command
    stops with the shell's status for that (141), no traceback."""
    import fcntl
    import json

    # Output far larger than the pipe: the writer is still writing when the reader leaves.
    (tmp_path / "config.json").write_text(json.dumps({"tools": {"mcpServers": {
        f"s{i}": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"]}
        for i in range(100)}}}))
    read, write = os.pipe()
    fcntl.fcntl(read, 1031, 4096)  # F_SETPIPE_SZ: one page; the reader leaves after a byte
    proc = subprocess.Popen([sys.executable, "-m", "runtime.shell.cli", "config", "show",
                             "--state-dir", str(tmp_path)], cwd=REPO,
                            stdout=write, stderr=subprocess.PIPE)
    os.close(write)
    assert os.read(read, 1) == b"{"
    os.close(read)
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and "Traceback" not in err, err


def test_a_streamed_reply_is_never_printed_twice():
    """The final reply may be the streamed text with its trailing blank lines stripped
    (a tool's output relayed with "\n\n" at its end): nothing is left to print then;
    only a reply that differs from the stream is printed whole."""
    from runtime.shell.cli_turns import unseen

    assert unseen("Commit history:\nfirst commit\n\n", "Commit history:\nfirst commit") == ""
    assert unseen("Hello", "Hello there.") == " there."
    assert unseen("Hello there.", "Hello there.") == ""
    assert unseen("Hel", "Goodbye.") is None
    assert unseen("", "Hi") == "Hi"
    assert unseen("\n\n", "Hi") is None
