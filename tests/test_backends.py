"""LLM backends (``runtime/services/backends.py``): llama-server native and
OpenAI-compatible against scripted servers, the ordered pool with a sticky fallback per
session, and a whole daemon on an OpenAI-compatible server without grammar support."""

from __future__ import annotations

import json
import os
import socket

import pytest
import trio

from actors.agent.prompt import STABLE_PREFIX
from runtime.services.backends import BackendPool, Prefill, backends_from_config
from runtime.services.config import Config, parse_config
from runtime.services.llm import LLMError
from runtime.shell.client import open_client
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama


def dead_url() -> str:
    """A localhost URL nobody listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def pool(cfg: dict, primary: str) -> BackendPool:
    config = parse_config(json.dumps(cfg))
    config.llm.url = primary  # as `serve --llm-url` does (no url: the embedded server)
    config.llm.request_timeout_ms = 5000
    return BackendPool(backends_from_config(config, primary))


@pytest.mark.parametrize("api", ["openai-chat", "openai-completions"])
async def test_openai_apis_complete_and_stream_with_the_bearer_key(tmp_path, api, monkeypatch):
    monkeypatch.setenv("AA_TEST_KEY", "sekret")
    rules = [{"match": "say hi", "response": "Hello there, Dana!"}]
    async with open_fake_llama(tmp_path, rules) as fake:
        p = pool({"llm": {"api": api, "model": "m1", "apiKeyEnv": "AA_TEST_KEY"}}, fake.url)
        try:
            done = await p.complete("s", "SYSTEM TEXT", "say hi", grammar="root ::= x")
            pieces: list[str] = []

            async def on_token(piece: str) -> None:
                pieces.append(piece)

            streamed = await p.complete("s", "SYSTEM TEXT", "say hi", on_token=on_token)
        finally:
            await p.aclose()
    assert done.text == streamed.text == "Hello there, Dana!"
    assert len(pieces) > 1 and "".join(pieces) == "Hello there, Dana!"
    reqs = fake.openai_requests()
    path = "/v1/chat/completions" if api == "openai-chat" else "/v1/completions"
    assert [r["path"] for r in reqs] == [path, path]
    assert all(r["auth"] == "Bearer sekret" for r in reqs)
    body = reqs[0]["body"]
    assert body["model"] == "m1" and "grammar" not in body  # grammar off by default
    if api == "openai-chat":
        assert body["messages"] == [{"role": "system", "content": "SYSTEM TEXT"},
                                    {"role": "user", "content": "say hi"}]
    else:
        assert body["prompt"].startswith("<|im_start|>system\nSYSTEM TEXT")


async def test_a_prefill_is_put_in_the_models_mouth_on_llama_server_only(tmp_path):
    rules = [{"match": "say hi", "response": '{"reply": "Hello, Dana!"}'}]
    prefill = Prefill(text='{"reply": "', grammar='root ::= [^"]* "\\"}"\n')
    async with open_fake_llama(tmp_path / "l", rules) as llama, \
            open_fake_llama(tmp_path / "o", rules) as chat:
        for fake, cfg in ((llama, {}), (chat, {"llm": {"api": "openai-chat", "grammar": True}})):
            p = pool(cfg, fake.url)
            pieces: list[str] = []

            async def on_token(piece: str) -> None:
                pieces.append(piece)

            try:
                done = await p.complete("s", "SYSTEM", "say hi", grammar="root ::= full",
                                        prefill=prefill, on_token=on_token)
            finally:
                await p.aclose()
            # either way the caller sees the whole action, streamed and returned
            assert done.text == "".join(pieces) == '{"reply": "Hello, Dana!"}'
            # llama-server: the prefill goes out with the first piece the server sends
            assert fake is chat or pieces[0].startswith('{"reply": "Hello')
    sent = llama.completions()[0]
    assert sent["prompt"].endswith('<|im_start|>assistant\n{"reply": "')
    assert sent["grammar"] == prefill.grammar
    # an OpenAI-compatible server gets no words put in its mouth, and the whole grammar
    assert chat.openai_requests()[0]["body"]["grammar"] == "root ::= full"


@pytest.mark.slow
async def test_fallback_is_sticky_per_session_and_sub_calls_never_move_it(tmp_path):
    async with open_fake_llama(tmp_path / "a", [{"match": "hi", "response": "from A"}]) as a, \
            open_fake_llama(tmp_path / "b", [{"match": "hi", "response": "from B"}]) as b:
        p = pool({"llm": {"fallbacks": [{"url": b.url}]}}, a.url)
        try:
            assert (await p.complete("s1", "sys", "hi")).text == "from A"
            a.set_rules([{"match": "hi", "status": 503, "response": "overloaded"}])
            assert (await p.complete("s1", "sys", "hi")).text == "from B"  # fell back
            a.set_rules([{"match": "hi", "response": "from A"}])  # A is healthy again
            assert (await p.complete("s1", "sys", "hi")).text == "from B"  # s1 sticks to B
            assert (await p.complete("s2", "sys", "hi")).text == "from A"  # s2 starts at A
            # a sub-call partition that fails over leaves the session's choice alone
            a.set_rules([{"match": "hi", "status": 500, "response": "boom"}])
            assert (await p.complete("reflection:s2", "sys", "hi", role="reflection")).text == "from B"
            assert p.current("s2").label == "primary"
            b.set_rules([{"match": "hi", "status": 500, "response": "down too"}])
            with pytest.raises(LLMError) as info:
                await p.complete("s2", "sys", "hi")
        finally:
            await p.aclose()
    message = str(info.value)
    assert "every LLM backend failed" in message and "primary" in message
    assert "fallback-1" in message and "HTTP 500" in message


@pytest.mark.slow
async def test_malformed_json_and_refused_connections_fall_back(tmp_path):
    async with open_fake_llama(tmp_path / "b", [{"match": "hi", "response": "fine"}]) as b, \
            open_fake_llama(tmp_path / "c", [{"match": "hi", "raw_body": "not json {"}]) as c:
        p = pool({"llm": {"api": "openai-chat",
                          "fallbacks": [{"url": c.url, "api": "openai-chat"},
                                        {"url": b.url, "api": "openai-completions"}]}},
                 dead_url())
        try:
            with trio.fail_after(30):
                assert (await p.complete("s", "sys", "hi")).text == "fine"
        finally:
            await p.aclose()
        assert p.current("s").label == "fallback-2"


async def test_slots_follow_the_llama_backend_that_serves(tmp_path):
    async with open_fake_llama(tmp_path / "one", [], slots=1) as one, \
            open_fake_llama(tmp_path / "three", [], slots=3) as three:
        for fake, expected in ((one, {"main": 0, "reflection": -1, "rewriter": -1}),
                               (three, {"main": 0, "reflection": 1, "rewriter": 2})):
            p = pool({}, fake.url)
            try:
                for role in expected:
                    await p.complete("s", "sys", "hi", role=role)
            finally:
                await p.aclose()
            assert [b["id_slot"] for b in fake.completions()] == list(expected.values())


async def test_daemon_on_an_openai_server_without_grammars_replies_in_prose(tmp_path):
    """A server that ignores grammars answers in prose: the turn still ends with that
    reply, and reflection (prose SET lines) still writes."""
    rules = [{"match": "You keep a long-term memory", "response": "SET name=Dana\n"},
             {"match": "My name is Dana", "response": "Nice to meet you, Dana!"}]
    state = tmp_path / "state"
    state.mkdir()
    (state / "config.json").write_text(json.dumps(
        {"llm": {"api": "openai-chat", "model": "some-model", "apiKeyEnv": "AA_TEST_KEY"}}))
    env = {**os.environ, "AA_TEST_KEY": "k-123"}
    async with open_fake_llama(tmp_path, rules) as fake:
        async with run_daemon(state, llm_url=fake.url, env=env) as d:
            async with open_client(url=d.url, token=d.token) as c:
                await c.request({"type": "subscribe", "channels": ["reflection"]}, "subscribed")
                with trio.fail_after(60):
                    frames = [f async for f in c.say("My name is Dana")]
                    event = await c.wait_for(lambda f: f["type"] == "reflection")
                assert frames[-1]["reason"] == "reply"
                assert {"type": "reply", "turn": frames[0]["turn"],
                        "text": "Nice to meet you, Dana!"} in frames
                # the prose streamed as it came
                deltas = [f["text"] for f in frames if f["type"] == "reply.delta"]
                assert len(deltas) > 1 and "".join(deltas) == "Nice to meet you, Dana!"
                assert event["outcome"] == "ok" and event["factKeys"] == ["name"]
    reqs = fake.openai_requests()
    assert reqs and all(r["auth"] == "Bearer k-123" for r in reqs)
    assert reqs[0]["method"] == "GET" and reqs[0]["path"] == "/v1/models"  # the start probe
    turn_body = next(r["body"] for r in reqs
                     if r["method"] == "POST" and "### output" not in json.dumps(r["body"]))
    assert turn_body["messages"][0] == {"role": "system", "content": STABLE_PREFIX}


def test_backend_config_is_validated():
    with pytest.raises(Exception) as info:
        parse_config('{"llm": {"fallbacks": [{"api": "openai-chat"}]}}')
    assert "fallbacks" in str(info.value) and "url" in str(info.value)
    with pytest.raises(Exception) as info:
        parse_config('{"llm": {"api": "gpt"}}')
    assert "llm.api" in str(info.value)
    assert backends_from_config(Config(), None) == []


async def test_a_warmed_prefix_is_saved_once_and_restored_after_a_restart(tmp_path):
    """``warm_prefix`` evaluates the prefix and saves the slot; the next start (a new
    server process, the same slot folder) restores it instead of evaluating it again;
    another prefix is another file."""
    from runtime.services.backends import warm_file_name, warm_prefix

    cfg = Config()

    async def warm(system: str) -> list[tuple[str, str]]:
        async with open_fake_llama(tmp_path, []) as fake:
            pool = BackendPool(backends_from_config(cfg, fake.url))
            try:
                await warm_prefix(pool, system, role="reflection", partition="warm")
            finally:
                await pool.aclose()
            return [(r["path"], (r["body"] or {}).get("filename", "completion"))
                    for r in fake.requests() if r["method"] == "POST"]

    name = warm_file_name("reflection", "chatml", "You extract facts.")
    assert name.startswith("reflection-") and name.endswith(".bin")
    assert await warm("You extract facts.") == [
        ("/slots/1?action=restore", name), ("/completion", "completion"),
        ("/slots/1?action=save", name)]
    assert await warm("You extract facts.") == [("/slots/1?action=restore", name)]
    other = warm_file_name("reflection", "chatml", "You extract more facts.")
    assert other != name
    assert [p for p, _ in await warm("You extract more facts.")] == [
        "/slots/1?action=restore", "/completion", "/slots/1?action=save"]


def test_the_slot_folder_is_per_model_file_private_and_pruned(tmp_path):
    """One folder per model file (path, size, modification time); other models'
    folders and all but the newest files are deleted; the folders are 0700."""
    from runtime.services.llama import SLOT_FILES_KEPT, slot_cache_dir

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF one")
    root = tmp_path / "llm-cache"
    first = slot_cache_dir(root, str(model))
    assert first.parent == root and oct(first.stat().st_mode & 0o777) == "0o700"
    assert oct(root.stat().st_mode & 0o777) == "0o700"
    for n in range(SLOT_FILES_KEPT + 2):
        (first / f"main-{n}.bin").write_bytes(b"x")
        os.utime(first / f"main-{n}.bin", ns=(n * 10**9, n * 10**9))
    assert slot_cache_dir(root, str(model)) == first
    assert sorted(f.name for f in first.iterdir()) == [
        f"main-{n}.bin" for n in range(2, SLOT_FILES_KEPT + 2)]
    model.write_bytes(b"GGUF two, replaced")  # another model at the same path
    second = slot_cache_dir(root, str(model))
    assert second != first and not first.exists() and list(root.iterdir()) == [second]
