"""Tests for runtime.services.llm (LlamaClient, errors, SlotPlan) and the fake llama-server.

Rules:
- Tier 2 tests run the scripted server (tests/fakes/llama_server.py) as a real
  subprocess through ``open_fake_llama``, which reaps it on exit; every such test is
  bounded by a wall-clock ``fail_after`` and never uses ``autojump_clock``.
- Tier 1 tests drive the client through ``httpx.MockTransport`` (headers, shapes).
- Retry backoff is shrunk (``backoff_base_s``) so retry tests stay fast.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import httpx
import pytest
import trio

from runtime.services.llm import (
    Completion,
    LlamaClient,
    LLMBadResponse,
    LLMError,
    LLMServerError,
    LLMTimeout,
    LLMUnavailable,
    Props,
    SlotPlan,
    check_slot,
)
from tests.fakes.llama_server import open_fake_llama, start_fake_llama

LIMIT_S = 30.0
FAST = {"backoff_base_s": 0.01}
REPLY_GRAMMAR = 'root ::= "{\\"reply\\": \\"" [a-z]+ "\\"}"\n'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ===================================================================== Tier 2: fake server


async def test_non_stream_completion_and_request_body(tmp_path: Path) -> None:
    rules = [{"match": "remember", "response": "SET language=Python\n"}]
    with trio.fail_after(LIMIT_S):
        async with open_fake_llama(tmp_path, rules, slots=2) as fake, \
                LlamaClient(fake.url, **FAST) as client:
            out = await client.complete("please remember this", grammar="root ::= \"x\"",
                                        n_predict=64, id_slot=1, stop=["\n\n"])
            assert isinstance(out, Completion)
            assert out.text == "SET language=Python\n"
            assert out.slot_id == 1 and out.stop_type == "eos" and out.tokens_predicted > 0
            (body,) = fake.completions()
    assert body["prompt"] == "please remember this"
    assert body["grammar"] == 'root ::= "x"'
    assert body["n_predict"] == 64 and body["stop"] == ["\n\n"]
    assert body["id_slot"] == 1 and body["slot_id"] == 1
    assert body["cache_prompt"] is True and body["stream"] is False
    assert body["temperature"] == 0.2 and body["top_p"] == 0.95 and body["top_k"] == 40
    assert body["repeat_penalty"] == 1.1


async def test_no_slot_no_grammar_omits_keys_and_default_responses(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with open_fake_llama(tmp_path, []) as fake, LlamaClient(fake.url) as client:
            plain = await client.complete("anything", n_predict=0)
            reply = await client.complete("anything", grammar=REPLY_GRAMMAR)
            bodies = fake.completions()
    assert plain.text == "NONE"
    assert reply.text == '{"reply": "ok"}'
    assert "id_slot" not in bodies[0] and "slot_id" not in bodies[0]
    assert "grammar" not in bodies[0]
    assert bodies[0]["n_predict"] == -1


async def test_stream_completion_calls_on_token_per_piece(tmp_path: Path) -> None:
    text = "NOTE The user prefers short answers. [tags=style]\n"
    got: list[str] = []

    async def on_token(piece: str) -> None:
        got.append(piece)

    with trio.fail_after(LIMIT_S):
        async with open_fake_llama(tmp_path, [{"match": None, "response": text}]) as fake, \
                LlamaClient(fake.url) as client:
            out = await client.complete("p", id_slot=0, on_token=on_token)
            (body,) = fake.completions()
    assert body["stream"] is True
    assert len(got) > 3 and "".join(got) == text == out.text
    assert out.stop_type == "eos" and out.slot_id == 0


async def test_n_predict_limit_reports_stop_type_limit(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with open_fake_llama(tmp_path, [{"match": None, "response": "a b c d e f"}]) as fake, \
                LlamaClient(fake.url) as client:
            out = await client.complete("p", n_predict=2)
    assert out.stop_type == "limit" and out.tokens_predicted == 2 and out.text == "a b "


async def test_props_health_and_slot_guard(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with open_fake_llama(tmp_path, [], slots=3) as fake, LlamaClient(fake.url) as client:
            assert await client.health() is True
            props = await client.props()
            assert props == Props(total_slots=3, slots_reported=True, model_path="scripted",
                                  n_ctx=4096)
            assert client.total_slots == 3
            assert SlotPlan.from_props(props) == SlotPlan(main=0, reflection=1, rewriter=2,
                                                          total_slots=3)
            with pytest.raises(ValueError):
                await client.complete("p", id_slot=3)
            await client.complete("p", id_slot=-1)
            sent = [b.get("id_slot") for b in fake.completions()]
    assert sent == [-1]  # the refused call never reached the server


async def test_invalid_slot_400_maps_to_bad_response_without_retry(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with open_fake_llama(tmp_path, [], slots=1) as fake, \
                LlamaClient(fake.url, **FAST) as client:
            with pytest.raises(LLMBadResponse) as info:
                await client.complete("p", id_slot=1)
            assert len(fake.completions()) == 1
    assert info.value.status == 400
    assert "Invalid slot id" in str(info.value) and "\n" not in str(info.value)


async def test_500_is_retried_then_server_error(tmp_path: Path) -> None:
    rules = [{"match": None, "status": 500, "response": "boom"}]
    with trio.fail_after(LIMIT_S):
        async with open_fake_llama(tmp_path, rules) as fake, \
                LlamaClient(fake.url, **FAST) as client:
            with pytest.raises(LLMServerError) as info:
                await client.complete("p")
            assert len(fake.completions()) == 3  # 1 attempt + 2 retries
    assert info.value.status == 500 and "boom" in str(info.value)
    assert "3 attempt" in str(info.value)


async def test_500_once_then_success(tmp_path: Path) -> None:
    rules = [{"match": None, "status": 503, "times": 1}, {"match": None, "response": "NONE"}]
    with trio.fail_after(LIMIT_S):
        async with open_fake_llama(tmp_path, rules) as fake, \
                LlamaClient(fake.url, **FAST) as client:
            out = await client.complete("p")
            assert out.text == "NONE" and len(fake.completions()) == 2


async def test_malformed_json_and_wrong_shape_are_bad_responses(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with open_fake_llama(tmp_path, [{"match": "a", "raw_body": "{not json"},
                                              {"match": "b", "raw_body": '{"content": 5}'},
                                              {"match": "c", "raw_body": "[]"}]) as fake, \
                LlamaClient(fake.url, **FAST) as client:
            for prompt in ("a", "b", "c"):
                with pytest.raises(LLMBadResponse):
                    await client.complete(prompt)
            assert len(fake.completions()) == 3  # never retried


async def test_rules_reread_between_calls(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with open_fake_llama(tmp_path, [{"match": None, "response": "first"}]) as fake, \
                LlamaClient(fake.url) as client:
            assert (await client.complete("p")).text == "first"
            fake.set_rules([{"match": None, "response": "second", "times": 1}])
            assert (await client.complete("p")).text == "second"
            assert (await client.complete("p")).text == "NONE"  # rule used up
            assert [r["path"] for r in fake.requests()] == ["/completion"] * 3


async def test_cancel_scope_cancels_inflight_request_promptly(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with open_fake_llama(tmp_path, [{"match": None, "delay_ms": 20000,
                                               "response": "late"}]) as fake, \
                LlamaClient(fake.url) as client:
            for on_token in (None, _noop_token):
                start = time.monotonic()
                with trio.move_on_after(0.3) as scope:
                    await client.complete("p", on_token=on_token)
                assert scope.cancelled_caught
                assert time.monotonic() - start < 2.0
            # the client still works after a cancelled call
            fake.set_rules([])
            assert (await client.complete("p")).text == "NONE"


async def _noop_token(piece: str) -> None:
    pass


async def test_read_timeout_maps_to_llm_timeout_without_retry(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with open_fake_llama(tmp_path, [{"match": None, "delay_ms": 3000}]) as fake, \
                LlamaClient(fake.url, timeout_s=0.3, **FAST) as client:
            with pytest.raises(LLMTimeout):
                await client.complete("p")
            assert len(fake.completions()) == 1


async def test_connection_refused_is_unavailable() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with trio.fail_after(LIMIT_S):
        async with LlamaClient(url, **FAST) as client:
            assert await client.health() is False
            with pytest.raises(LLMUnavailable) as info:
                await client.complete("p")
            with pytest.raises(LLMUnavailable):
                await client.props()
    message = str(info.value)
    assert url in message and "3 attempt" in message and "\n" not in message
    assert isinstance(info.value, LLMError) and info.value.status is None


async def test_old_server_hang_on_bad_slot_is_bounded_by_caller(tmp_path: Path) -> None:
    """An old llama-server never answers a request for a slot it lacks; only the caller's
    scope ends it."""
    with trio.fail_after(LIMIT_S):
        async with open_fake_llama(tmp_path, [], slots=1, invalid_slot="hang") as fake, \
                LlamaClient(fake.url) as client:
            with trio.move_on_after(0.5) as scope:
                await client.complete("p", id_slot=1)
            assert scope.cancelled_caught
        async with open_fake_llama(tmp_path, [], slots=1, invalid_slot="wrap") as fake, \
                LlamaClient(fake.url) as client:
            assert (await client.complete("p", id_slot=1)).slot_id == 0


async def test_fake_server_is_reaped(tmp_path: Path) -> None:
    with trio.fail_after(LIMIT_S):
        async with open_fake_llama(tmp_path, []) as fake:
            pid = fake.pid
            os.kill(pid, 0)  # alive
        async with trio.open_nursery() as nursery:
            other = await start_fake_llama(nursery, tmp_path, [], slots=1)
            async with LlamaClient(other.url) as client:
                assert (await client.props()).total_slots == 1
            nursery.cancel_scope.cancel()
    for gone in (pid, other.pid):
        with pytest.raises(ProcessLookupError):
            os.kill(gone, 0)


# ===================================================================== Tier 1: MockTransport


def _mock_client(handler) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def test_bearer_header_and_borrowed_client_stays_open() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"content": "hi", "stop": True, "slot_id": 4})

    http = _mock_client(handler)
    async with LlamaClient("http://llm.test/", api_key="sekret", client=http) as client:
        out = await client.complete("p")
    assert out.slot_id == 4 and out.text == "hi"  # slot from legacy slot_id
    assert seen[0].headers["authorization"] == "Bearer sekret"
    assert str(seen[0].url) == "http://llm.test/completion"
    assert not http.is_closed
    await http.aclose()


async def test_props_tolerates_missing_keys_and_rejects_wrong_types() -> None:
    bodies = iter([b"{}", b'{"total_slots": "two"}', b'{"total_slots": 0}'])

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=next(bodies))

    async with LlamaClient("http://llm.test", client=_mock_client(handler)) as client:
        props = await client.props()
        assert props == Props(total_slots=1, slots_reported=False)
        assert SlotPlan.from_props(props) == SlotPlan.unknown()
        with pytest.raises(LLMBadResponse):
            await client.props()
        assert (await client.props()).slots_reported is False
        assert client.total_slots is None


async def test_stream_errors_and_truncated_stream() -> None:
    streams = iter([
        b'data: {"content": "a", "stop": false}\n\ndata: {oops\n\n',
        b'data: {"content": "a", "stop": false}\n\n',
        b'error: {"code": 500, "message": "slot crashed", "type": "server_error"}\n\n',
        b': keep-alive\n\ndata: {"content": "x", "stop": false}\n\n'
        b'data: {"content": "", "stop": true, "stop_type": "word", "id_slot": 1}\n\n',
    ])

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=next(streams),
                              headers={"content-type": "text/event-stream"})

    async with LlamaClient("http://llm.test", client=_mock_client(handler)) as client:
        with pytest.raises(LLMBadResponse):
            await client.complete("p", on_token=_noop_token)
        with pytest.raises(LLMBadResponse, match="final stop chunk"):
            await client.complete("p", on_token=_noop_token)
        with pytest.raises(LLMServerError, match="slot crashed"):
            await client.complete("p", on_token=_noop_token)
        out = await client.complete("p", on_token=_noop_token)
    assert (out.text, out.stop_type, out.slot_id) == ("x", "word", 1)


async def test_4xx_never_retried_and_surrogates_are_encodable() -> None:
    calls: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.content)
        return httpx.Response(404, text="nope")

    async with LlamaClient("http://llm.test", client=_mock_client(handler), **FAST) as client:
        with pytest.raises(LLMBadResponse, match="HTTP 404: nope"):
            await client.complete("bad \ud800 text")
    assert len(calls) == 1 and "\ufffd".encode() in calls[0]


# ===================================================================== slot plan


@pytest.mark.parametrize(
    ("n", "plan"),
    [
        (1, (0, -1, -1)),
        (2, (0, 1, -1)),
        (3, (0, 1, 2)),
        (8, (0, 1, 2)),
    ],
)
def test_slot_plan(n: int, plan: tuple[int, int, int]) -> None:
    p = SlotPlan.from_total_slots(n)
    assert (p.main, p.reflection, p.rewriter) == plan and p.total_slots == n
    for slot in (p.main, p.reflection, p.rewriter):
        check_slot(slot, n)  # never plans a slot the server lacks


def test_slot_plan_rejects_zero_and_unknown_pins_nothing() -> None:
    with pytest.raises(ValueError):
        SlotPlan.from_total_slots(0)
    u = SlotPlan.unknown()
    assert (u.main, u.reflection, u.rewriter, u.total_slots) == (-1, -1, -1, None)
    assert SlotPlan.from_props(None) == u


@pytest.mark.parametrize(("slot", "total", "ok"),
                         [(-1, 1, True), (0, 1, True), (1, 1, False), (1, 2, True),
                          (2, 2, False), (-2, 4, False)])
def test_check_slot(slot: int, total: int, ok: bool) -> None:
    if ok:
        check_slot(slot, total)
    else:
        with pytest.raises(ValueError):
            check_slot(slot, total)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_client_requires_finite_timeout(bad: float) -> None:
    with pytest.raises(ValueError):
        LlamaClient("http://llm.test", timeout_s=bad)


async def test_a_lone_surrogate_escape_costs_one_character_not_the_completion() -> None:
    """A model that emitted half an emoji: llama-server's JSON holds ``\\ud83d`` alone.
    The completion is read with U+FFFD in its place, streamed or not; the lines around
    it are kept (a reflection used to lose every line of it)."""
    body = b'{"content": "SET city=Graz \\ud83d\\nNOTE The user rows.", "stop": true}'
    stream = (b'data: {"content": "SET city=Graz \\ud83d", "stop": false}\n\n'
              b'data: {"content": "\\nNOTE ok", "stop": true}\n\n')

    def handler(request: httpx.Request) -> httpx.Response:
        if b'"stream":true' in request.content:
            return httpx.Response(200, content=stream,
                                  headers={"content-type": "text/event-stream"})
        return httpx.Response(200, content=body)

    async with LlamaClient("http://llm.test", client=_mock_client(handler), **FAST) as client:
        done = await client.complete("p")
        streamed = await client.complete("p", on_token=_noop_token)
    assert done.text == "SET city=Graz \ufffd\nNOTE The user rows."
    assert streamed.text == "SET city=Graz \ufffd\nNOTE ok"


def test_only_a_llama_server_health_answer_is_healthy() -> None:
    from runtime.services.llm import health_ok

    assert health_ok(200, b'{"status":"ok"}') and health_ok(200, b'{"status": "ok"}')
    assert not health_ok(200, b"<html><body>It works!</body></html>")
    assert not health_ok(200, b'{"status":"loading"}') and not health_ok(200, b"[]")
    assert not health_ok(503, b'{"error":{"code":503,"message":"Loading model"}}')


# -- Rate limits: HTTP 429 and Retry-After ----------------------------------------------


RATE_LIMITS = ("1", "3600")
"""The ``Retry-After`` values a scripted 429 carries: one waited out, one too long."""


def test_retry_after_reads_seconds_and_http_dates():
    from email.utils import formatdate

    from runtime.services.llm import retry_after_s

    assert retry_after_s("3") == 3.0 and retry_after_s(None) is None
    assert retry_after_s("soon") is None and retry_after_s("-1") is None
    assert 50 < retry_after_s(formatdate(time.time() + 60, usegmt=True)) <= 60
    assert retry_after_s(formatdate(time.time() - 60, usegmt=True)) == 0.0


@pytest.mark.slow
async def test_a_429_is_waited_out_when_short_and_reported_when_long(tmp_path):
    """A hosted API's 429 with ``Retry-After: 1`` is retried after that second; one that
    asks for an hour fails at once with the wait in the message (the pool then tries
    the next backend) instead of stalling the turn."""
    from runtime.services.backends import OpenAIBackend
    from runtime.services.llm import LLMServerError

    body = '{"error": {"message": "Rate limit reached", "type": "rate_limit_exceeded"}}'
    short, long = RATE_LIMITS
    rules = [{"status": 429, "raw_body": body, "headers": {"Retry-After": short}, "times": 1},
             {"response": '{"reply": "ok"}'}]
    async with open_fake_llama(tmp_path, rules) as fake:
        backend = OpenAIBackend(LlamaClient(fake.url, timeout_s=30), api="openai-chat",
                                model="m")
        t0 = time.monotonic()
        out = await backend.complete("s", "u", role="main", grammar=None, n_predict=8,
                                     temperature=0.0)
        assert out.text == '{"reply": "ok"}' and time.monotonic() - t0 >= 0.9
        fake.set_rules([{"status": 429, "raw_body": body, "headers": {"Retry-After": long}}])
        t0 = time.monotonic()
        with pytest.raises(LLMServerError) as info:
            await backend.complete("s", "u", role="main", grammar=None, n_predict=8,
                                   temperature=0.0)
        await backend.aclose()
    assert time.monotonic() - t0 < 5 and info.value.status == 429
    assert "rate limited; it asks to wait 3600 s" in str(info.value)
    assert "Rate limit reached" in str(info.value)
