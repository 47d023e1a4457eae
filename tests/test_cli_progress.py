"""Waiting is not silent: ``ask`` prints the reply as it is generated,
and on a terminal (a real pty) a status line says the model is working, then that memory
is reflecting, until the ``memory: …`` line; piped output stays exactly the reply."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import trio

from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama

SLOW = [{"grammar_contains": "reply", "delay_ms": 1500, "chunk_delay_ms": 250,
         "response": '{"reply": "Bees are busy little insects indeed."}'}]


def _ask_argv(state, *extra: str) -> list[str]:
    return [sys.executable, "-m", "runtime.shell.cli", "ask", "--state-dir", str(state), *extra,
            "I keep bees on the roof."]


def _run_in_pty(argv: list[str], timeout_s: float = 60) -> str:
    """Run ``argv`` with stdin, stdout and stderr on a new pseudo-terminal; return what
    the terminal showed (bytes decoded)."""
    master, slave = os.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=REPO,
                            close_fds=True)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=10)
    os.close(master)
    return out.decode(errors="replace")


async def test_piped_ask_streams_the_reply_and_draws_no_status(tmp_path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path, SLOW) as fake, run_daemon(state, llm_url=fake.url):
        proc = await trio.lowlevel.open_process(_ask_argv(state), stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE, cwd=REPO)
        pieces: list[tuple[float, bytes]] = []
        with trio.fail_after(60):
            while chunk := await proc.stdout.receive_some(4096):
                pieces.append((time.monotonic(), chunk))
            await proc.wait()
        err = (await proc.stderr.receive_some(65536)).decode()
        out = b"".join(p for _, p in pieces).decode()
        assert out == "Bees are busy little insects indeed.\n"
        # printed as generated: the first words came well before the last
        assert len(pieces) > 1 and pieces[-1][0] - pieces[0][0] > 0.5
        assert "\r" not in err and "…" not in err  # no status line off a terminal
        json_out = subprocess.run(_ask_argv(state, "--json"), capture_output=True, text=True,
                                  cwd=REPO, timeout=60).stdout
        assert json_out.endswith("}\n") and "\r" not in json_out


async def test_on_a_terminal_the_status_says_what_it_waits_for(tmp_path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path, SLOW) as fake, run_daemon(state, llm_url=fake.url):
        shown = await trio.to_thread.run_sync(lambda: _run_in_pty(_ask_argv(state)))
    assert "… the model is working (" in shown
    assert "Bees are busy little insects indeed." in shown
    assert "… memory: reflecting on this turn (" in shown
    assert "memory: " in shown.split("reflecting on this turn", 1)[1]
    assert "Traceback" not in shown
