"""``atomic-agent chat``, through a real daemon and a real subprocess:
``/`` lines are commands (help, memory, sessions, switching) and never reach the model;
a daemon that stops under an open chat ends it with one line, not a traceback."""

from __future__ import annotations

import subprocess
import sys

import trio

from runtime.shell.client import open_client
from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama

RULES = [{"grammar_contains": "reply", "response": '{"reply": "Hello there."}'}]


def _chat(state, stdin: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtime.shell.cli", "chat", "--state-dir",
                           str(state)], input=stdin, capture_output=True, text=True,
                          cwd=REPO, timeout=120)


async def test_chat_commands_are_commands_and_session_switching_works(tmp_path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path, RULES) as fake, run_daemon(state, llm_url=fake.url) as d:
        async with open_client(url=d.url, token=d.token) as c:
            await c.memory("memory.profile.set", {"key": "name", "value": "Robin"})
            await c.memory("memory.notes.store", {"content": "Robin keeps four chickens"})
        script = ("/help\n/memory\n/session\n/title Too early\n/bogus thing\nhello\n"
                  "/session garden\nhi there\n/title Raised   beds\n/session\n/session 7\n"
                  "/session 1\n/quit\n")
        done = await trio.to_thread.run_sync(lambda: _chat(state, script))
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr + done.stdout
        out = done.stdout
        assert "/session N|ID   switch to session N of that list" in out  # /help
        assert "profile: name = Robin" in out and "Robin keeps four chickens" in out
        assert "(this one; saved with its first turn)" in out  # /session before a turn
        assert "unknown command /bogus; /help lists the commands" in out
        assert out.count("agent> Hello there.") == 2
        assert "(new session 'garden': no session had that id" in done.stderr
        assert "session garden — type a message" in done.stderr
        assert " 1. * garden  'Raised beds'" in out and "  1 turn, updated 20" in out
        assert "this session has no turn yet: it is saved, and titled, with its first " \
               "message" in out  # /title before the first turn
        assert "this session is now titled 'Raised beds'" in out
        assert "you>" not in out  # piped input: no prompts
        assert "no session 7 in the last list (1-2)" in out
        prompts = [r["prompt"] for r in fake.completions() if "reply" in r.get("grammar", "")]
        assert len(prompts) == 2
        assert not any(word in p for p in prompts for word in ("/help", "/memory", "/bogus"))


async def test_a_daemon_stopping_under_chat_is_one_line_not_a_traceback(tmp_path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path, RULES) as fake:
        async with run_daemon(state, llm_url=fake.url):
            proc = await trio.lowlevel.open_process(
                [sys.executable, "-m", "runtime.shell.cli", "chat", "--state-dir", str(state)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
            await proc.stdin.send_all(b"hello\n")
            out = b""
            with trio.fail_after(30):
                while b"agent> Hello there." not in out:
                    out += await proc.stdout.receive_some(4096)
        # the daemon is gone while the chat waits for input: it ends at once, one line
        with trio.fail_after(30):
            code = await proc.wait()
        err = (await proc.stderr.receive_some(65536)).decode()
        assert code == 1, err
        assert "Traceback" not in err
        assert err.strip().splitlines()[-1] == (
            "atomic-agent: the daemon closed the connection: it stopped or is restarting "
            "(start it with: atomic-agent serve)")
