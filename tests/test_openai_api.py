"""The OpenAI-compatible HTTP API, driven by the official ``openai`` client
against a real daemon: a chat completion is a normal turn with memory (the profile is
in the prompt, the exchange lands in the chosen session, reflection runs after it),
streamed and not; a wrong key, a browser origin and malformed requests are refused
with OpenAI-shaped errors; a failed turn is an error, never an empty success."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
import trio

from runtime.shell.client import open_client
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama

REPLY = [{"match": None, "grammar_contains": "reply",
          "response": '{"reply": "Nice to hear from you, Ada."}'}]


def _client(d, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=d.ready["openaiUrl"], api_key=key or d.token, max_retries=0,
                         timeout=60)


async def test_chat_completions_run_a_turn_with_memory_streamed_and_not(tmp_path):
    async with open_fake_llama(tmp_path, REPLY) as fake, \
            run_daemon(tmp_path / "state", llm_url=fake.url) as d:
        assert d.ready["openaiUrl"].startswith("http://127.0.0.1:")
        async with open_client(url=d.url, token=d.token) as ws:
            await ws.memory("memory.profile.set", {"key": "name", "value": "Ada"})
            await ws.request({"type": "subscribe", "channels": ["reflection"]}, "subscribed")

            def calls() -> tuple:
                c = _client(d)
                models = [m.id for m in c.models.list()]
                plain = c.chat.completions.create(
                    model="atomic-agent", user="garden",
                    messages=[{"role": "system", "content": "ignored: the daemon's persona"},
                              {"role": "user", "content": "I planted tomatoes today"}])
                raw = c.chat.completions.with_raw_response.create(
                    model="anything", messages=[{"role": "user", "content": [
                        {"type": "text", "text": "and basil"}]}],
                    extra_headers={"X-Atomic-Session": "garden"})
                chunks = list(c.chat.completions.create(
                    model="atomic-agent", stream=True, user="garden",
                    messages=[{"role": "user", "content": "what did I plant?"}]))
                counted = list(c.chat.completions.create(
                    model="atomic-agent", stream=True, user="counted",
                    stream_options={"include_usage": True},
                    messages=[{"role": "user", "content": "hello"}]))
                return models, plain, raw, chunks, counted

            models, plain, raw, chunks, counted = await trio.to_thread.run_sync(calls)
            # usage: the backend's own counts (the scripted server counts a token per 4
            # prompt characters and one per generated piece), OpenAI's shape
            assert plain.usage.prompt_tokens > 100 and plain.usage.completion_tokens >= 1
            assert plain.usage.total_tokens == (plain.usage.prompt_tokens
                                                + plain.usage.completion_tokens)
            assert all(ch.usage is None for ch in chunks)  # not asked for: not sent
            assert counted[-1].choices == [] and counted[-1].usage.prompt_tokens > 100
            assert counted[-2].choices[0].finish_reason == "stop"
            assert models == ["atomic-agent"]
            assert plain.object == "chat.completion"
            assert plain.choices[0].message.content == "Nice to hear from you, Ada."
            assert plain.choices[0].finish_reason == "stop"
            assert raw.headers["x-atomic-session"] == "garden"
            assert raw.headers["x-atomic-turn"].startswith("t-")
            assert raw.parse().choices[0].message.role == "assistant"
            text = "".join(ch.choices[0].delta.content or "" for ch in chunks)
            assert text == "Nice to hear from you, Ada."
            assert len(chunks) > 3 and chunks[-1].choices[0].finish_reason == "stop"
            assert {ch.id for ch in chunks} == {chunks[0].id}

            # a normal turn: memory in its prompt, the exchange in the named session …
            prompts = [r["prompt"] for r in fake.completions() if "reply" in r.get("grammar", "")]
            assert any("tomatoes" in p for p in prompts)
            # the user's name only when names are asked about (memory about "you")
            assert not any("name: Ada" in p for p in prompts)
            assert not any("ignored: the daemon's persona" in p for p in prompts)
            sessions = await ws.request({"type": "sessions"}, "sessions.result")
            garden = [s for s in sessions["data"] if s["id"] == "garden"]
            assert garden and garden[0]["turns"] == 3
            # … and reflection ran after each, as for any turn (the "counted" session's
            # reflection may come in between: reflections of two sessions are not ordered)
            seen: set[str] = set()
            with trio.fail_after(30):
                while len(seen) < 3:
                    frame = await ws.wait_for(lambda f: f.get("type") == "reflection"
                                              and f.get("session") == "garden")
                    seen.add(frame["turn"])
            assert raw.headers["x-atomic-turn"] in seen


async def test_wrong_keys_origins_and_bad_requests_are_refused_openai_style(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "config.json").write_text(json.dumps(
        {"server": {"allowedOrigins": ["http://localhost:3000"]}}))
    async with open_fake_llama(tmp_path, REPLY) as fake, \
            run_daemon(state, llm_url=fake.url) as d:
        base = d.ready["openaiUrl"]

        def calls() -> None:
            with pytest.raises(openai.AuthenticationError) as bad_key:
                _client(d, key="not-the-token").models.list()
            assert bad_key.value.status_code == 401
            assert "daemon token" in bad_key.value.message
            c = _client(d)
            for messages, expected in (
                    ([], "last message must be the user's"),
                    ([{"role": "assistant", "content": "hi"}], "last message must be the user's"),
                    ([{"role": "user", "content": "   "}], "empty"),
                    ([{"role": "user", "content": [{"type": "image_url", "image_url": {
                        "url": "data:,"}}]}], "only text")):
                with pytest.raises(openai.BadRequestError) as bad:
                    c.chat.completions.create(model="m", messages=messages)
                assert expected in bad.value.message
            with pytest.raises(openai.BadRequestError) as bad:
                c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                          user="no spaces allowed")
            assert "session" in bad.value.message
            with pytest.raises(openai.BadRequestError) as bad:
                c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                          tools=[{"type": "function", "function": {
                                              "name": "f", "parameters": {}}}])
            assert "tools are not supported" in bad.value.message
            auth = {"Authorization": f"Bearer {d.token}"}
            with httpx.Client(timeout=30) as h:
                r = h.get(base + "/models", headers=auth | {"Origin": "https://evil.example"})
                assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
                r = h.get(base + "/models", headers={"Origin": "https://evil.example"})
                assert r.status_code == 403  # refused before the key is even looked at
                r = h.get(base + "/models", headers=auth | {"Origin": "http://localhost:3000"})
                assert r.status_code == 200  # an allowlisted origin, with the key
                r = h.get(base + "/models", headers={"Origin": "http://localhost:3000"})
                assert r.status_code == 401  # … still needs the key
                r = h.post(base + "/chat/completions", content=b"{not json", headers=auth)
                assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_argument"
                r = h.post(base + "/chat/completions", headers=auth,
                           content=b'{"messages": [{"role": "user", "content": "' +
                           b"x" * (2 * 1024 * 1024) + b'"}]}')
                assert r.status_code == 413
                r = h.get(base + "/embeddings", headers=auth)
                assert r.status_code == 404 and "/v1/chat/completions" in r.json()["error"]["message"]
                r = h.get(base + "/chat/completions", headers=auth)
                assert r.status_code == 405

        await trio.to_thread.run_sync(calls)


async def test_a_failed_or_busy_turn_is_an_error_not_an_empty_answer(tmp_path):
    rules = [{"match": "slow please", "grammar_contains": "reply", "delay_ms": 3000,
              "response": '{"reply": "done"}'},
             {"match": "break please", "status": 500, "times": None}]
    async with open_fake_llama(tmp_path, rules) as fake, \
            run_daemon(tmp_path / "state", llm_url=fake.url) as d:
        c = _client(d)
        say = {"model": "m", "user": "s2"}

        def failing() -> None:
            with pytest.raises(openai.APIStatusError) as failed:
                c.chat.completions.create(messages=[{"role": "user", "content": "break please"}],
                                          **say)
            assert failed.value.status_code == 502
            with pytest.raises(openai.APIError):
                list(c.chat.completions.create(
                    messages=[{"role": "user", "content": "break please"}], stream=True, **say))

        await trio.to_thread.run_sync(failing)
        results: list = []

        def slow() -> None:
            results.append(c.chat.completions.create(
                messages=[{"role": "user", "content": "slow please"}], **say))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, slow)
            await trio.sleep(1.0)

            def second() -> None:
                with pytest.raises(openai.ConflictError) as busy:
                    c.chat.completions.create(
                        messages=[{"role": "user", "content": "me too"}], **say)
                assert "already running in session 's2'" in busy.value.message
                assert "another session" in busy.value.message

            await trio.to_thread.run_sync(second)
        assert results[0].choices[0].message.content == "done"
