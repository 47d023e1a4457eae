"""The daemon against scripted stand-ins for the OpenAI-compatible servers people already
run: each family's documented error bodies for a model it does not have, a prompt over
its context window and a rate limit, answered through a real daemon and a real
websocket client.

Bodies, as each server documents or returns them:

* OpenAI -- https://platform.openai.com/docs/guides/error-codes: ``{"error": {"message",
  "type", "param", "code"}}`` with ``code`` ``model_not_found`` (404) or
  ``context_length_exceeded`` (400); 429 with ``Retry-After``.
* vLLM's OpenAI server -- ``ErrorResponse`` (vllm/entrypoints/openai/protocol.py):
  ``{"object": "error", "message", "type", "param", "code"}``; "The model `x` does not
  exist." (404) and "This model's maximum context length is N tokens. However, you
  requested ..." (400).
* Ollama's OpenAI-compatible API -- https://github.com/ollama/ollama/blob/main/docs/openai.md:
  ``{"error": {"message": "model \\"x\\" not found, try pulling it first", "type":
  "api_error"}}`` (404). Ollama cuts an over-long prompt to its ``num_ctx`` itself, so it
  has no overflow error to script.
* llama.cpp's server -- ``exceed_context_size_error`` with ``n_prompt_tokens`` and ``n_ctx``.
"""

from __future__ import annotations

import json

import pytest
import trio

from runtime.shell.client import open_client
from runtime.shell.daemon import missing_model
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama

UNKNOWN_MODEL = {
    "openai": {"error": {"message": "The model `llama9` does not exist or you do not have "
                                    "access to it.", "type": "invalid_request_error",
                         "param": None, "code": "model_not_found"}},
    "vllm": {"object": "error", "message": "The model `llama9` does not exist.",
             "type": "NotFoundError", "param": None, "code": 404},
    "ollama": {"error": {"message": 'model "llama9" not found, try pulling it first',
                         "type": "api_error", "param": None, "code": None}},
}
MODEL_LISTS = {
    "openai": {"object": "list", "data": [{"id": "gpt-4o-mini", "object": "model",
                                           "owned_by": "system"}]},
    "vllm": {"object": "list", "data": [{"id": "Qwen/Qwen2.5-1.5B-Instruct",
                                         "object": "model", "max_model_len": 2048}]},
    "ollama": {"object": "list", "data": [{"id": "qwen2.5-coder:1.5b", "object": "model",
                                           "owned_by": "library"}]},
}
OVERFLOW = {
    "openai": {"error": {"message": "This model's maximum context length is 2048 tokens. "
                                    "However, your messages resulted in 2400 tokens. Please "
                                    "reduce the length of the messages.",
                         "type": "invalid_request_error", "param": "messages",
                         "code": "context_length_exceeded"}},
    "vllm": {"object": "error", "message": "This model's maximum context length is 2048 "
             "tokens. However, you requested 2656 tokens (2400 in the messages, 256 in the "
             "completion). Please reduce the length of the messages or completion.",
             "type": "BadRequestError", "param": None, "code": 400},
    "llama.cpp": {"error": {"code": 400, "message": "the request exceeds the available "
                            "context size, try increasing it",
                            "type": "exceed_context_size_error", "n_prompt_tokens": 2400,
                            "n_ctx": 2048}},
}


def _state(tmp_path, model: str) -> object:
    state = tmp_path / "state"
    state.mkdir()
    (state / "config.json").write_text(json.dumps({"llm": {
        "api": "openai-chat", "model": model, "ctxSize": 2048}}))
    return state


async def _turn(d, text: str) -> list[dict]:
    async with open_client(url=d.url, token=d.token) as c:
        with trio.fail_after(60):
            return [f async for f in c.say(text)]


def test_the_model_list_is_read_leniently():
    listed = json.dumps(MODEL_LISTS["ollama"]).encode()
    assert missing_model("qwen2.5-coder:1.5b", listed) is None
    assert missing_model("qwen2.5-coder:1.5b:latest", listed) is None
    assert "has no model 'llama9' (it serves qwen2.5-coder:1.5b)" in missing_model("llama9", listed)
    assert missing_model(None, listed) is None  # no model configured: nothing to check
    for body in (b"", b"<html>", b'{"data": []}', b'{"models": ["x"]}', b'{"data": [1]}'):
        assert missing_model("llama9", body) is None  # another shape says nothing
    # llama.cpp's server lists its one model by path and answers whatever a request names
    llamacpp = {"object": "list", "data": [{
        "id": "/models/qwen2.5-coder-1.5b.gguf", "object": "model", "owned_by": "llamacpp",
        "meta": {"n_ctx_train": 32768}}]}
    assert missing_model("qwen2.5-coder-1.5b", json.dumps(llamacpp).encode()) is None
    assert missing_model("gpt-9", json.dumps(llamacpp).encode()) is None
    two = {"data": [dict(llamacpp["data"][0], owned_by="someone"), {"id": "/models/b.gguf"}]}
    assert missing_model("qwen2.5-coder-1.5b.gguf", json.dumps(two).encode()) is None
    assert "has no model 'gpt-9'" in missing_model("gpt-9", json.dumps(two).encode())


@pytest.mark.parametrize("family", sorted(UNKNOWN_MODEL))
async def test_a_model_the_server_does_not_have_is_named_at_start_and_in_the_turn(
        tmp_path, family):
    """``llm.model`` that the server does not list: the ready line and stderr say so at
    start (with what it serves); a turn ends with reason ``error`` naming the model, the
    daemon stays up, and the user's message is kept."""
    rules = [{"get": "/v1/models", "raw_body": json.dumps(MODEL_LISTS[family])},
             {"status": 404, "raw_body": json.dumps(UNKNOWN_MODEL[family])}]
    state = _state(tmp_path, "llama9")
    async with open_fake_llama(tmp_path / "fake", rules) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            assert not d.ready["llmHealthy"]
            assert d.ready["llmStatus"].startswith("has no model 'llama9' (it serves ")
            frames = await _turn(d, "What is my name?")
            again = await _turn(d, "Still there?")
            async with open_client(url=d.url, token=d.token) as c:
                history = await c.request({"type": "sessions"}, "sessions.result")
        stderr = d.stderr_path.read_text()
    errors = [f for f in frames if f["type"] == "step" and f.get("step") == "error"]
    assert frames[-1]["reason"] == "error" and again[-1]["reason"] == "error"
    assert errors and "llama9" in errors[0]["message"] and "404" in errors[0]["message"]
    assert "warning: the LLM at" in stderr and "has no model 'llama9'" in stderr
    assert "Traceback" not in stderr
    assert sum(s["turns"] for s in history["data"]) == 2  # both messages kept


@pytest.mark.parametrize("family", sorted(OVERFLOW))
async def test_a_context_overflow_is_retried_once_in_the_window_the_server_names(
        tmp_path, family):
    """A prompt the server counts as over its window: the step is asked again once in a
    smaller window and the turn replies; when that fails too the turn ends ``error`` with
    the code ``context_overflow``."""
    overflow = {"grammar_contains": "agent_", "status": 400,
                "raw_body": json.dumps(OVERFLOW[family])}
    rules = [{**overflow, "times": 1},
             {"grammar_contains": "agent_", "response": '{"reply": "Fine."}'}]
    state = _state(tmp_path, "m")
    async with open_fake_llama(tmp_path / "fake", rules) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            frames = await _turn(d, "Hello there")
            fake.set_rules([overflow])
            failed = await _turn(d, "Hello again")
        turn_bodies = [r["body"] for r in fake.openai_requests()
                       if isinstance(r["body"], dict) and "agent_" in json.dumps(r["body"])]
    assert frames[-1]["reason"] == "reply"
    assert {"type": "reply", "turn": frames[0]["turn"], "text": "Fine."} in frames
    first, retry = turn_bodies[0], turn_bodies[1]
    assert len(json.dumps(retry["messages"])) <= len(json.dumps(first["messages"]))
    errors = [f for f in failed if f["type"] == "step" and f.get("step") == "error"]
    assert failed[-1]["reason"] == "error" and errors[0]["code"] == "context_overflow"
    assert "does not fit the context" in errors[0]["message"]


async def test_a_rate_limited_hosted_api_is_waited_out_within_the_turn(tmp_path):
    """OpenAI's 429 with ``Retry-After: 1``: the turn waits that second and replies."""
    body = {"error": {"message": "Rate limit reached for gpt-4o-mini on requests per min "
                                 "(RPM): Limit 3, Used 3, Requested 1.", "type": "requests",
                      "param": None, "code": "rate_limit_exceeded"}}
    rules = [{"grammar_contains": "agent_", "status": 429, "raw_body": json.dumps(body),
              "headers": {"Retry-After": "1"}, "times": 1},
             {"grammar_contains": "agent_", "response": '{"reply": "Here."}'}]
    state = _state(tmp_path, "gpt-4o-mini")
    async with open_fake_llama(tmp_path / "fake", rules) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            frames = await _turn(d, "Are you there?")
    assert frames[-1]["reason"] == "reply"
    assert {"type": "reply", "turn": frames[0]["turn"], "text": "Here."} in frames
