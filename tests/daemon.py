"""Test helper: run ``atomic-agent serve`` as a real subprocess.

``run_daemon`` starts ``python -m runtime.shell.cli serve`` with ``--port 0``, reads the
JSON ready line from stdout and yields it (plus the process); on exit it sends
SIGTERM, bounds the wait, and checks the exit status (0 unless told otherwise).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Daemon:
    proc: trio.Process
    ready: dict
    state_dir: Path
    stderr_path: Path
    shutdown_s: float | None = None

    @property
    def url(self) -> str:
        return self.ready["url"]

    @property
    def token(self) -> str:
        return Path(self.ready["tokenFile"]).read_text().strip()


async def _read_line(stream: trio.abc.ReceiveStream) -> bytes:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = await stream.receive_some(1)
        if not chunk:
            break
        buf += chunk
    return buf


@asynccontextmanager
async def run_daemon(state_dir: Path, *, llm_url: str | None = None, extra: list[str] | None = None,
                     ready_timeout_s: float = 60.0, expect_exit: int | None = 0,
                     env: dict | None = None) -> AsyncIterator[Daemon]:
    """Start the daemon; yield a :class:`Daemon` once ready; stop it with SIGTERM."""
    cmd = [sys.executable, "-m", "runtime.shell.cli", "serve", "--state-dir", str(state_dir),
           "--port", "0"]
    if llm_url:
        cmd += ["--llm-url", llm_url]
    cmd += extra or []
    state_dir.mkdir(parents=True, exist_ok=True)
    stderr_path = state_dir.parent / f"{state_dir.name}-serve-{time.monotonic_ns()}.err"
    with open(stderr_path, "wb") as err:
        proc = await trio.lowlevel.open_process(cmd, stdout=subprocess.PIPE, stderr=err, cwd=REPO,
                                                env=env)
    try:
        with trio.fail_after(ready_timeout_s):
            line = await _read_line(proc.stdout)
        if not line:
            await proc.wait()
            raise AssertionError(f"daemon exited {proc.returncode} before ready:\n"
                                 f"{stderr_path.read_text()[-3000:]}")
        daemon = Daemon(proc, json.loads(line), state_dir, stderr_path)
        yield daemon
        t0 = time.monotonic()
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            code = await proc.wait()
        daemon.shutdown_s = time.monotonic() - t0
        if expect_exit is not None:
            assert code == expect_exit, f"daemon exit {code}:\n{stderr_path.read_text()[-3000:]}"
    finally:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
