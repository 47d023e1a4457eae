"""``atomic-agent doctor`` (runtime/shell/doctor.py) as a user runs it: a real CLI process
against scripted OpenAI-compatible servers -- one that follows the formats, one that
answers prose only, one that is not there -- and the embedded server started for the
check in a new state directory: one line per check and the exit code."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import trio

from tests.fakes.llama_server import open_fake_llama
from tests.test_e2e_real_llm import INSTALLED


async def _doctor(tmp_path, *args: str) -> subprocess.CompletedProcess[str]:
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    return await trio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-m", "runtime.shell.cli", "doctor", "--state-dir", str(state), *args],
        capture_output=True, text=True, timeout=300))


async def test_a_server_that_follows_the_formats_passes(tmp_path):
    rules = [{"match": "You keep a long-term memory", "response": "SET name=Dana\nSET city=Lyon\n"},
             {"grammar_contains": "agent_action", "response": '{"reply": "4"}'}]
    async with open_fake_llama(tmp_path / "fake", rules) as fake:
        out = await _doctor(tmp_path, "--llm-url", fake.url, "--api", "openai-chat",
                            "--model", "qwen2.5-coder:1.5b")
        bodies = [r["body"] for r in fake.openai_requests() if isinstance(r["body"], dict)]
    lines = out.stdout.splitlines()
    assert out.returncode == 0, out
    assert lines[0].startswith("doctor: ") and "openai-chat" in lines[0] \
        and "structured output json_schema" in lines[0]
    assert lines[1] == "server: ok"
    assert lines[2].startswith('action: ok -- a JSON reply: {"reply": "4"}')
    assert lines[3].startswith("reflection: ok -- name=Dana; city=Lyon")
    assert not out.stderr.strip()  # no log lines, no traceback
    assert any(b.get("response_format", {}).get("json_schema", {}).get("name") == "agent_action"
               for b in bodies) and all(b.get("model") == "qwen2.5-coder:1.5b" for b in bodies)


async def test_prose_and_invented_facts_are_reported_and_fail(tmp_path):
    rules = [{"match": "You keep a long-term memory", "response": "SET name=Maria\n"},
             {"response": "Sure! The answer is four."}]
    async with open_fake_llama(tmp_path / "fake", rules) as fake:
        out = await _doctor(tmp_path, "--llm-url", fake.url, "--api", "openai-chat")
    lines = out.stdout.splitlines()
    assert out.returncode == 1, out
    assert lines[2].startswith("action: works in prose only") and "never calls a tool" in lines[2]
    assert lines[3].startswith("reflection: FAIL -- the format works but no fact holds")


@pytest.mark.slow
async def test_a_refused_schema_is_said_and_a_missing_server_fails_in_one_line(tmp_path):
    refusal = {"status": 400, "raw_body": json.dumps({"error": {
        "message": "response_format is not supported", "type": "invalid_request_error"}})}
    rules = [{"grammar_contains": "json_schema", **refusal},
             {"match": "You keep a long-term memory", "response": "SET name=Dana\n"},
             {"response": '{"reply": "4"}'}]
    async with open_fake_llama(tmp_path / "fake", rules) as fake:
        out = await _doctor(tmp_path, "--llm-url", fake.url, "--api", "openai-chat")
    assert out.returncode == 0, out
    assert "note: the server refused response_format" in out.stdout
    gone = await _doctor(tmp_path, "--llm-url", "http://127.0.0.1:9", "--api", "openai-chat")
    assert gone.returncode == 1 and "server: FAIL -- " in gone.stdout
    assert "Traceback" not in gone.stdout + gone.stderr
    bad = await _doctor(tmp_path, "--structured-output", "xml")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
    no_scheme = await _doctor(tmp_path, "--llm-url", "933675")
    assert no_scheme.returncode == 2 and no_scheme.stderr.startswith(
        "atomic-agent: --llm-url must be an http:// or https:// URL")
    assert gone.stderr.strip().endswith("a check failed (the FAIL line above says which)")
    (tmp_path / "state" / "config.json").write_text(
        json.dumps({"llm": {"server": str(tmp_path / "no-such-llama-server")}}))
    broken = await _doctor(tmp_path, "--model", "smollm2-135m")
    assert broken.returncode == 1 and "server: FAIL -- llm.server: " in broken.stdout
    assert "Traceback" not in broken.stdout + broken.stderr


@pytest.mark.real_llm
async def test_the_embedded_server_is_started_for_the_check_in_a_new_state_dir(tmp_path):
    """Without ``llm.url`` doctor starts the embedded server as ``serve`` would (its log
    in ``<state>/logs``, created if missing) and stops it after the checks. The 135M model
    may fail the reflection check (it invents the city), so only the server line and the
    absence of a traceback are asserted."""
    if INSTALLED is None:
        pytest.skip("no llama.cpp server or smollm2-135m installed")
    out = await _doctor(tmp_path, "--model", "smollm2-135m")
    lines = out.stdout.splitlines()
    assert out.returncode in (0, 1), out
    assert lines[0].startswith("doctor: the embedded server with SmolLM2-135M")
    assert lines[1].startswith("server: ok -- llama.cpp server")
    assert lines[2].startswith("action: ") and lines[3].startswith("reflection: ")
    assert (tmp_path / "state" / "logs" / "llama-server.log").stat().st_size > 0
    assert "Traceback" not in out.stdout + out.stderr
