"""Fuzzed HTTP answers from the LLM and embedding servers, hypothesis-driven
with a fixed seed (``derandomize``, no shrinking) so CI replays the same inputs.

One scripted llama-server (``tests/fakes/llama_server.py``) runs for the module; each
example rewrites its rules file (re-read per request) with one hostile answer, built
from: the right JSON shape with fields dropped or replaced (wrong types, ``NaN`` /
``Infinity`` literals, numbers out of range, 400-digit integers, lone surrogates, 3,000
levels of nesting, strings of a megabyte), any JSON value, text or bytes that are not
JSON, truncated bodies, empty bodies, SSE streams with garbage events, ``error:`` events
or cut midway; sent with odd status codes (1xx to 599), content types and
``Content-Encoding`` headers, framed by length, by close, chunked, with a
``Content-Length`` longer than the body or no answer at all; and slow-loris answers
(the body dripped a few bytes at a time, headers then a stalled body, a late answer).

* :data:`LLM_RESPONSES` answers go to the LLM client, through each backend
  (llama-server ``/completion``, OpenAI ``/v1/chat/completions`` and
  ``/v1/completions``), streaming and not: every call returns a well-formed
  :class:`~runtime.services.llm.Completion` or raises an :class:`~runtime.services.llm.LLMError`, within
  the configured bound (``timeout_s``; ``stream_cap_s`` for a stream) plus slack.
* :data:`EMBEDDING_RESPONSES` answers go to each embedding provider (llama-server
  ``/embedding``, OpenAI ``/v1/embeddings``): every embed returns an
  :class:`~runtime.services.embeddings.providers.Embedded` whose vectors are all finite, of the
  model's dimension and unit length (rows reported missing all zero), or raises
  ``EmbeddingUnavailable``, within :data:`~runtime.services.embeddings.providers.ATTEMPTS` bounded
  requests per text.
* One daemon test plays :data:`DAEMON_SAMPLE` of these answers to chat turns: each turn
  ends ``turn.finished`` with reason ``error``, another client's ping and memory ops keep
  working meanwhile, a note written before is intact and the daemon stops cleanly.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio
from hypothesis import example, given
from hypothesis import strategies as st

from runtime.services.backends import LlamaBackend, OpenAIBackend
from runtime.services.embeddings.embedder import CatalogEntry, EmbeddingUnavailable
from runtime.services.embeddings.providers import ATTEMPTS, RETRY_DELAY_S, Embedded, ServerEmbedder
from runtime.services.llm import Completion, LlamaClient, LLMError
from runtime.shell.client import open_client
from tests.daemon import run_daemon
from tests.fakes.llama_server import _write_rules, open_fake_llama
from tests.fuzzing import fuzz_settings

pytestmark = pytest.mark.slow  # hypothesis batches against a fake server process and a daemon

LLM_GENERATED = 120
"""Generated hostile LLM answers per run (after :data:`LLM_EXPLICIT`)."""
EMBEDDING_GENERATED = 70
"""Generated hostile embedding answers per run (after :data:`EMBEDDING_EXPLICIT`)."""

TIMEOUT_S = 0.4
"""The clients' configured timeout (s): LLM ``timeout_s`` and the embedder's."""
STREAM_CAP_S = 0.8
"""The LLM client's ``stream_cap_s`` (s): the bound on a whole stream."""
SLACK_S = 1.5
"""Allowed overrun (s) of a bound on this (busy, two-core) machine."""
DIM = 8
"""The fuzzed embedding model's dimension."""
REPO = Path(__file__).resolve().parent.parent

# ============================================================== the scripted server


class _Server:
    """The module's scripted llama-server: ``url``; :meth:`answer` sets the one rule."""

    def __init__(self, tmp: Path) -> None:
        self.script = tmp / "rules.json"
        _write_rules(self.script, [])
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.llama_server", "--port", "0",
             "--script", str(self.script), "--record", str(tmp / "record.jsonl"),
             "--embedding-dim", str(DIM)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        self.url = f"http://127.0.0.1:{json.loads(line)['port']}"

    def answer(self, rule: dict[str, Any]) -> None:
        _write_rules(self.script, [rule])

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # EOF: the server exits
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = _Server(tmp_path_factory.mktemp("fake-llama"))
    yield srv
    srv.close()


# ============================================================== hostile answers

_DROP = "@@drop@@"
#: Placeholders replaced after ``json.dumps`` by text JSON encoders cannot write.
LITERALS = {
    "@@nan@@": "NaN", "@@inf@@": "Infinity", "@@-inf@@": "-Infinity",
    "@@big@@": "1e400", "@@-big@@": "-1e400", "@@tiny@@": "1e-400",
    "@@bigint@@": "9" * 400, "@@-bigint@@": "-" + "9" * 400,
    "@@surrogate@@": '"\\ud800 lone"', "@@badescape@@": '"\\x41"',
    "@@deep@@": "[" * 3000 + "]" * 3000, "@@deepobj@@": '{"a":' * 3000 + "1" + "}" * 3000,
}
json_leaves = (st.none() | st.booleans() | st.integers() | st.floats()  # NaN / inf too
               | st.text(max_size=30))
json_values = st.recursive(
    json_leaves, lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=10)
hostile_values = st.one_of(
    json_values,
    st.sampled_from(sorted(LITERALS)),
    st.sampled_from([10_000, 1_000_000]).map(lambda n: "x" * n),   # huge strings
    st.sampled_from([[], {}, "", 0, -1, 2**63, -2**63 - 1, 1e308, -0.0]),
)


def render(obj: Any) -> str:
    """JSON text of ``obj`` (Python's encoder writes NaN / Infinity as literals), with
    the :data:`LITERALS` placeholders put in."""
    text = json.dumps(obj)
    for key, literal in LITERALS.items():
        text = text.replace(json.dumps(key), literal)
    return text


def mutate(obj: Any, keep: int = 7) -> st.SearchStrategy[Any]:
    """``obj`` with each part kept ``keep`` times in 10, else dropped (1 in 10) or
    replaced by a hostile value."""
    if isinstance(obj, dict):
        fields = {k: mutate(v, keep) for k, v in obj.items()}
        built = st.fixed_dictionaries(fields, optional={"extra": hostile_values})
        inner = built.map(lambda d: {k: v for k, v in d.items() if v != _DROP})
    elif isinstance(obj, list):
        inner = st.one_of(st.tuples(*(mutate(v, keep) for v in obj)).map(list),
                          st.lists(mutate(obj[0], keep), max_size=3) if obj else st.just([]))
    else:
        inner = st.just(obj)
    return st.integers(0, 9).flatmap(
        lambda i: inner if i < keep else st.just(_DROP) if i == keep else hostile_values)


def sse(events: list[str], sep: str) -> str:
    return "".join(e + sep for e in events)


def sse_body(chunk: Any, final: Any, done: bool) -> st.SearchStrategy[str]:
    """An SSE stream: mutated chunks, garbage events, maybe the final event and
    ``[DONE]``, maybe cut midway."""
    event = st.one_of(
        mutate(chunk, 9).map(lambda c: f"data: {render(c)}"),
        mutate(chunk, 9).map(lambda c: f"data: {render(c)}"),
        mutate(chunk, 6).map(lambda c: f"data: {render(c)}"),
        st.just("data: [DONE]"),
        json_values.map(lambda v: f"error: {render(v)}"),
        st.just('error: {"error": {"code": 500, "message": "slot crashed"}}'),
        st.sampled_from([": keep-alive", "event: ping", "id: 7", "retry: 10", "",
                         "data:", "data: {\"content\": ", "data: " + LITERALS["@@deep@@"]]),
        st.text(max_size=40).map(lambda t: t.replace("\n", " ")),
        json_values.map(lambda v: f"data: {render(v)}"),
    )
    ending = st.one_of(mutate(final, 9), mutate(final, 6)).map(lambda f: [f"data: {render(f)}"] + (["data: [DONE]"] if done
                                                                    else []))
    return st.builds(
        lambda evs, end, keep_end, sep, cut: (
            lambda text: text[:cut % (len(text) + 1)] if cut is not None else text)(
                sse(evs + (end if keep_end else []), sep)),
        st.lists(event, max_size=6), ending, st.booleans(),
        st.sampled_from(["\n\n", "\n", "\r\n\r\n", "\r"]), st.none() | st.integers(0, 10_000))


def json_body(template: Any) -> st.SearchStrategy[str]:
    """The right shape, mutated; maybe truncated or trailed by garbage."""
    return st.builds(
        lambda obj, how, n: {"keep": lambda t: t, "cut": lambda t: t[:n % (len(t) + 1)],
                             "trail": lambda t: t + "}]garbage"}[how](render(obj)),
        st.one_of(mutate(template, 9), mutate(template, 6)),
        st.sampled_from(["keep", "keep", "cut", "trail"]),
        st.integers(0, 10_000))


other_bodies = st.one_of(
    json_values.map(render),
    st.text(max_size=200),
    st.just(""),
    st.just("<html><body><h1>502 Bad Gateway</h1></body></html>"),
    st.sampled_from(sorted(LITERALS.values())),
)


def envelope(bodies: st.SearchStrategy[str], stream: bool) -> st.SearchStrategy[dict]:
    """A fake-server rule: a body (or random bytes), sent either plainly (status 200, the
    right content type, a sound framing) or with an odd status, content type, headers,
    framing, or slow-loris timing (drip, stall, late answer)."""
    body = st.one_of(bodies, bodies, bodies, bodies.map(lambda b: b.encode()),
                     st.binary(max_size=300))
    right_type = "text/event-stream" if stream else "application/json"
    plain = st.fixed_dictionaries({
        "status": st.just(200), "content_type": st.just(right_type),
        "framing": st.sampled_from(["length", "close", "chunked"])})
    odd = st.fixed_dictionaries({
        "status": st.one_of(st.just(200), st.sampled_from(
            [100, 101, 199, 201, 204, 206, 301, 304, 400, 401, 403, 404, 408, 413, 429,
             500, 501, 502, 503, 504, 599, 999])),
        "content_type": st.sampled_from([right_type, "text/html", None,
                                         "application/octet-stream",
                                         "text/plain; charset=utf-16",
                                         "application/json; charset=no-such-charset"]),
        "headers": st.one_of(st.just({}), st.sampled_from(
            ["gzip", "deflate", "br", "zstd", "identity", "bogus", "gzip, deflate"]).map(
                lambda enc: {"Content-Encoding": enc}),
            st.just({"Transfer-Encoding": "bogus"}), st.just({"Content-Length": "-1"})),
        "framing": st.sampled_from(["length", "close", "chunked", "overlong", "drop"]),
    })
    slow = st.fixed_dictionaries({
        "status": st.sampled_from([200, 200, 500]),
        "content_type": st.just(right_type),
        "framing": st.sampled_from(["length", "close", "chunked"])}, optional={
        "timing": st.one_of(
            st.builds(lambda ms, n: {"drip_ms": ms, "drip_bytes": n},
                      st.integers(20, 150), st.integers(1, 8)),
            st.builds(lambda n: {"stall_after_bytes": n, "stall_ms": 3000},
                      st.integers(0, 60)),
            st.just({"delay_ms": int(TIMEOUT_S * 1000) + 300}))})
    shape = st.one_of(plain, plain, plain, odd, odd, slow)

    def rule(body, shape, pad):
        out = dict(shape)
        out.update(out.pop("timing", {}))
        if out.get("drip_ms"):  # long enough to outlast every bound and its slack
            seconds = TIMEOUT_S + STREAM_CAP_S + SLACK_S + 1.0
            pad_to = int(seconds * 1000 / out["drip_ms"] * out["drip_bytes"])
            body = body + (b" " if isinstance(body, bytes) else pad) * max(0, pad_to - len(body))
        if isinstance(body, bytes):
            out["raw_body_b64"] = base64.b64encode(body).decode()
        else:
            out["raw_body"] = body
        return out

    return st.builds(rule, body, shape,
                     st.sampled_from([" ", "\n", ": keep-alive\n\n", "data: {}\n\n"]))


# -- LLM answers per API ---------------------------------------------------------------

NATIVE_FINAL = {"content": "{\"reply\": \"hi\"}", "stop": True, "id_slot": 0, "slot_id": 0,
                "tokens_predicted": 3, "tokens_evaluated": 9, "stop_type": "eos",
                "stopped_eos": True, "truncated": False,
                "timings": {"prompt_ms": 1.5, "predicted_ms": 2.5}}
NATIVE_CHUNK = {"content": "hi", "stop": False, "id_slot": 0}
CHAT_FINAL = {"id": "x", "object": "chat.completion", "model": "m",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                           "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 9, "completion_tokens": 1}}
CHAT_CHUNK = {"choices": [{"delta": {"content": "hi"}, "finish_reason": None}]}
TEXT_FINAL = {"choices": [{"index": 0, "text": "hi", "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 9, "completion_tokens": 1}}
TEXT_CHUNK = {"choices": [{"text": "hi"}]}
SHAPES = {
    "llama-server": (NATIVE_FINAL, NATIVE_CHUNK, dict(NATIVE_FINAL, content=""), False),
    "openai-chat": (CHAT_FINAL, CHAT_CHUNK, {"choices": [{"delta": {}, "finish_reason":
                                                          "stop"}]}, True),
    "openai-completions": (TEXT_FINAL, TEXT_CHUNK, {"choices": [{"text": "",
                                                                 "finish_reason": "stop"}]},
                           True),
}



def _llm_rules(api: str, stream: bool) -> st.SearchStrategy[dict]:
    final, chunk, last, done = SHAPES[api]
    bodies = (st.one_of(sse_body(chunk, last, done), sse_body(chunk, last, done), other_bodies)
              if stream else st.one_of(json_body(final), json_body(final), other_bodies))
    return envelope(bodies, stream)


_LLM_RULES = {(api, stream): _llm_rules(api, stream) for api in SHAPES
              for stream in (False, True)}
llm_cases = st.sampled_from(sorted(_LLM_RULES)).flatmap(
    lambda key: st.tuples(st.just(key[0]), st.just(key[1]), _LLM_RULES[key]))
"""(api, stream, fake-server rule)."""


# -- embedding answers per API ---------------------------------------------------------

VECTOR = [0.5, -0.5, 0.25, 0.0, 0.1, 0.2, 0.3, 0.4]
vectors = st.one_of(
    st.just(VECTOR), st.just(VECTOR),
    st.lists(st.floats(), min_size=DIM, max_size=DIM),                  # NaN, inf, huge
    st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=0, max_size=2 * DIM),
    st.just([0.0] * DIM), st.just([None] * DIM), st.just(VECTOR[:-1] + [None]),
    st.just(VECTOR[:-1] + ["@@nan@@"]), st.just(VECTOR[:-1] + ["@@bigint@@"]),
    st.just(VECTOR[:-1] + ["@@big@@"]), st.just(VECTOR[:-1] + ["@@tiny@@"]),
    st.just([VECTOR, VECTOR]), st.just([VECTOR]), st.just([[]]), st.just([True] * DIM),
    st.lists(st.integers(-(2**70), 2**70), min_size=DIM, max_size=DIM),
)


def _embedding_rules(api: str, n: int) -> st.SearchStrategy[dict]:
    per_request = n if api == "openai" else 1  # llama-server: one text per request
    rows = st.lists(st.builds(lambda i, v: {"index": i, "embedding": v},
                              st.integers(0, 2), vectors), min_size=0, max_size=3)
    right = ({"data": [{"index": i, "embedding": VECTOR} for i in range(per_request)]}
             if api == "openai" else [{"index": 0, "embedding": [VECTOR]}])
    shaped = st.one_of(
        st.just(right), st.just(right),
        st.just({"embedding": VECTOR}), st.just({"embedding": [VECTOR]}),
        rows, rows.map(lambda r: {"data": r}), rows.map(lambda r: {"object": "list", "data": r}),
        vectors.map(lambda v: {"embedding": v}),
        vectors.map(lambda v: [{"index": i, "embedding": [v]} for i in range(per_request)]),
        vectors.map(lambda v: {"data": [{"index": i, "embedding": v}
                                        for i in range(per_request)]}),
    )
    too_large = st.builds(
        lambda t, b: json.dumps({"error": {"code": 500, "message":
                                           f"input ({t} tokens) is too large to process. "
                                           f"increase the physical batch size (current "
                                           f"batch size: {b})"}}),
        st.sampled_from(["812", "0", "9" * 5000, "-3"]),
        st.sampled_from(["512", "0", "9" * 5000]))
    bodies = st.one_of(shaped.map(render), shaped.map(render), shaped.map(render),
                       st.one_of(mutate(right, 9), mutate(right, 6)).map(render),
                       too_large, other_bodies)
    return envelope(bodies, stream=False).map(lambda rule: {**rule, "embedding": True})


_EMBEDDING_RULES = {(api, n): _embedding_rules(api, n) for api in ("llama-server", "openai")
                    for n in (1, 2)}
embedding_cases = st.sampled_from(sorted(_EMBEDDING_RULES)).flatmap(
    lambda key: st.tuples(st.just(key[0]), st.just(key[1]), _EMBEDDING_RULES[key]))
"""(api, number of texts, fake-server rule)."""


# -- explicit cases: the faults the fuzzing found -----------------------------

_SSE = "text/event-stream"
_DRIP = {"drip_ms": 100, "drip_bytes": 1, "framing": "close"}
LLM_EXPLICIT = [
    # An unknown field nested 3,000 deep: msgspec raised RecursionError.
    ("llama-server", False, {"raw_body": '{"content": "x", "extra": '
                             + LITERALS["@@deepobj@@"] + "}"}),
    ("openai-chat", True, {"raw_body": 'data: {"choices": [], "x": ' + LITERALS["@@deep@@"]
                           + "}\n\n", "content_type": _SSE, "framing": "close"}),
    # A Content-Encoding the stream does not have: httpx.DecodingError escaped.
    ("openai-chat", True, {"raw_body": "data: [DONE]\n\n", "content_type": _SSE,
                           "headers": {"Content-Encoding": "gzip"}, "framing": "close"}),
    ("llama-server", True, {"raw_body": 'data: {"content": "", "stop": true}\n\n',
                            "content_type": _SSE, "headers": {"Content-Encoding": "deflate"},
                            "framing": "chunked"}),
    # charset=utf-16 on an SSE body without a BOM: UnicodeError escaped.
    ("llama-server", True, {"raw_body": 'data: {"content": "", "stop": true}\n\n',
                            "content_type": "text/event-stream; charset=utf-16"}),
    # Slow-loris bodies: every byte restarted httpx's read timeout, nothing ended them.
    ("openai-chat", False, {"raw_body": render(CHAT_FINAL) + " " * 40, **_DRIP}),
    ("llama-server", False, {"raw_body": "<html>" + "x" * 60, "status": 500, **_DRIP}),
    ("llama-server", True, {"raw_body": ": keep-alive\n" * 20, "content_type": _SSE,
                            **_DRIP}),
    ("openai-completions", True, {"raw_body": "data: {}\n" * 40, "content_type": _SSE,
                                  "drip_ms": 30, "drip_bytes": 1, "framing": "chunked"}),
    # Headers, then nothing.
    ("llama-server", True, {"raw_body": "data: {}", "content_type": _SSE,
                            "stall_after_bytes": 0, "stall_ms": 3000}),
]
"""Hostile LLM answers always played first: all but the last (headers, then a stall) broke
the client before the fixes in docs/RELIABILITY.md ("HTTP answers of the LLM and
embedding servers")."""
_EMBEDDING_EXPLICIT = [
    # Nested 3,000 deep: RecursionError escaped.
    ("openai", 1, {"raw_body": '{"data": ' + LITERALS["@@deep@@"] + "}"}),
    # A 400-digit integer component: OverflowError escaped.
    ("llama-server", 1, {"raw_body": render([{"index": 0, "embedding":
                                              [VECTOR[:-1] + ["@@bigint@@"]]}])}),
    # null components (llama-server writes NaN as null): reported missing, not a failure.
    ("llama-server", 2, {"raw_body": render([{"index": 0, "embedding": [[None] * DIM]}])}),
    ("openai", 2, {"raw_body": render({"data": [{"index": 0, "embedding": VECTOR},
                                                {"index": 1, "embedding":
                                                 VECTOR[:-1] + [None]}]})}),
    # Beyond float32: reported missing.
    ("openai", 1, {"raw_body": render({"data": [{"index": 0, "embedding": [1e300] * DIM}]})}),
    # "too large" with a 5,000-digit token count: int() raised ValueError.
    ("llama-server", 1, {"status": 500, "raw_body": json.dumps({"error": {
        "code": 500, "message": f"input ({'9' * 5000} tokens) is too large to process. "
                                "increase the physical batch size (current batch size: "
                                f"{'9' * 5000})"}})}),
    # Slow-loris: the body dripped a byte every 100 ms, never cut off.
    ("openai", 2, {"raw_body": render({"data": [{"index": i, "embedding": VECTOR}
                                                for i in range(2)]}), **_DRIP}),
]
EMBEDDING_EXPLICIT = [(api, n, {**rule, "embedding": True})
                      for api, n, rule in _EMBEDDING_EXPLICIT]
"""Hostile embedding answers always played first: all but the float32 overflow one broke
an embedder before the fixes in docs/RELIABILITY.md."""

LLM_RESPONSES = len(LLM_EXPLICIT) + LLM_GENERATED
"""Hostile LLM server answers per CI run (docs/RELIABILITY.md)."""
EMBEDDING_RESPONSES = len(EMBEDDING_EXPLICIT) + EMBEDDING_GENERATED
"""Hostile embedding server answers per CI run (docs/RELIABILITY.md)."""
FUZZ_COUNTS = {"LLM answers": LLM_GENERATED, "embedding answers": EMBEDDING_GENERATED}
"""Generated inputs per CI run, scaled by ``bench.fuzz`` (the explicit ones run once)."""


def _explicit(cases: list[tuple]) -> Any:
    def add(test: Any) -> Any:
        for case in reversed(cases):
            test = example(case=case)(test)
        return test
    return add


# ============================================================== the client-level checks


async def _complete_once(url: str, api: str, stream: bool) -> tuple[Any, float, list[str]]:
    client = LlamaClient(url, timeout_s=TIMEOUT_S, stream_cap_s=STREAM_CAP_S, retries=1,
                         backoff_base_s=0.01)
    backend = (LlamaBackend(client) if api == "llama-server"
               else OpenAIBackend(client, api=api, model="m", grammar=True))
    pieces: list[str] = []

    async def on_token(piece: str) -> None:
        assert isinstance(piece, str) and piece
        pieces.append(piece)

    if isinstance(backend, LlamaBackend):
        await backend.slot("main")  # resolve /props (not scripted) before timing the call
    t0 = time.monotonic()
    try:
        with trio.fail_after(STREAM_CAP_S + 3 * TIMEOUT_S + 10):  # a hang fails, not hangs
            out: Any = await backend.complete(
                "system", "user", role="main", grammar='root ::= "x"', n_predict=16,
                temperature=0.2, on_token=on_token if stream else None)
    except LLMError as exc:
        out = exc
    finally:
        await backend.aclose()
    return out, time.monotonic() - t0, pieces


@fuzz_settings(LLM_GENERATED)
@_explicit(LLM_EXPLICIT)
@given(case=llm_cases)
def test_every_hostile_llm_answer_gets_a_completion_or_a_typed_error_in_time(server, case):
    api, stream, rule = case
    server.answer(rule)
    out, elapsed, pieces = trio.run(_complete_once, server.url, api, stream)
    if isinstance(out, LLMError):
        assert str(out) and "\n" not in str(out)
    else:
        assert isinstance(out, Completion) and isinstance(out.text, str)
        assert isinstance(out.stop_type, str)
        if stream:
            assert "".join(pieces) == out.text
    # Retries (1 here) come inside the bound: a whole unary call, or a stream's headers
    # then its events, never outlast timeout_s / stream_cap_s.
    bound = (TIMEOUT_S + STREAM_CAP_S) if stream else TIMEOUT_S
    assert elapsed < bound + SLACK_S, (elapsed, rule.get("drip_ms"), rule.get("framing"))


async def _embed_once(url: str, api: str, n: int) -> tuple[Any, float]:
    emb = ServerEmbedder(api, url, CatalogEntry("fuzz-embed", DIM), timeout_s=TIMEOUT_S)
    t0 = time.monotonic()
    try:
        with trio.fail_after(30):
            out: Any = await emb.embed(["alpha beta", "gamma delta"][:n], "document")
    except EmbeddingUnavailable as exc:
        out = exc
    finally:
        await emb.aclose()
    return out, time.monotonic() - t0


@fuzz_settings(EMBEDDING_GENERATED)
@_explicit(EMBEDDING_EXPLICIT)
@given(case=embedding_cases)
def test_every_hostile_embedding_answer_gets_finite_vectors_or_a_typed_error(server, case):
    api, n, rule = case
    server.answer(rule)
    out, elapsed = trio.run(_embed_once, server.url, api, n)
    if isinstance(out, EmbeddingUnavailable):
        assert out.message and "\n" not in out.message
    else:
        assert isinstance(out, Embedded)
        vecs = out.vectors
        assert vecs.shape == (n, DIM) and vecs.dtype == np.float32
        assert np.isfinite(vecs).all()
        assert set(out.missing) <= set(range(n)) and set(out.truncated) <= set(range(n))
        for i in range(n):
            if i in out.missing:
                assert not vecs[i].any()
            else:
                assert abs(float(np.linalg.norm(vecs[i])) - 1.0) < 1e-3
    # Each request is bounded (timeout_s, ATTEMPTS tries); llama-server: one per text.
    requests = n if api == "llama-server" else 1
    assert elapsed < requests * ATTEMPTS * (TIMEOUT_S + RETRY_DELAY_S) + SLACK_S, elapsed


# ============================================================== the daemon


DAEMON_SAMPLE = [
    # a data event nested 3,000 levels deep
    {"raw_body": "data: " + LITERALS["@@deepobj@@"] + "\n\n",
     "content_type": "text/event-stream", "framing": "close"},
    # slow-loris: one byte every 100 ms of a stream that never completes an event
    {"raw_body": 'data: {"content": "' + "a" * 200, "content_type": "text/event-stream",
     "framing": "chunked", "drip_ms": 100},
    # headers, then a stalled body
    {"raw_body": "data: {}", "content_type": "text/event-stream", "framing": "close",
     "stall_after_bytes": 0, "stall_ms": 5000},
    # a Content-Encoding the body does not have
    {"raw_body": 'data: {"content": "hi", "stop": true}\n\n',
     "content_type": "text/event-stream", "headers": {"Content-Encoding": "gzip"},
     "framing": "close"},
    # NaN where a string goes, then the stream is cut
    {"raw_body": 'data: {"content": NaN, "stop": true}\n\ndata: {"con',
     "content_type": "text/event-stream", "framing": "close"},
    # a stream that ends without its final chunk
    {"raw_body": 'data: {"content": "{\\"reply\\": \\"half', "content_type":
     "text/event-stream", "framing": "chunked"},
    # 5xx with an HTML page, and a 200 with an empty body
    {"raw_body": "<html>502 Bad Gateway</html>", "status": 502, "content_type": "text/html"},
    {"raw_body": "", "framing": "length"},
]
"""Hostile answers played to daemon turns (one turn each)."""


async def test_the_daemon_ends_hostile_turns_with_an_error_and_keeps_serving(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "config.json").write_text(json.dumps({"llm": {"requestTimeoutMs": 1000}}))
    async with open_fake_llama(tmp_path) as fake, run_daemon(state, llm_url=fake.url) as d:
        async with open_client(url=d.url, token=d.token) as c, \
                open_client(url=d.url, token=d.token) as other:
            canary = await c.memory("memory.notes.store", {"content": "canary note kept"})
            for n, rule in enumerate(DAEMON_SAMPLE):
                fake.set_rules([rule])
                frames: list[dict] = []

                async def turn() -> None:
                    async for frame in c.say(f"hello number {n}"):
                        frames.append(frame)

                t0 = time.monotonic()
                with trio.fail_after(30):
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(turn)
                        # Meanwhile another client is served.
                        await other.request({"type": "ping"}, "pong")
                        got = await other.memory("memory.notes.recall", {"id": canary["id"]})
                        assert got[0]["content"] == "canary note kept"
                finished = [f["reason"] for f in frames if f["type"] == "turn.finished"]
                errors = [f["message"] for f in frames if f.get("step") == "error"]
                assert finished == ["error"], (n, frames)
                # The LLM client's typed error (it names its backend), not a crashed actor.
                assert len(errors) == 1 and errors[0].startswith("primary "), (n, errors)
                assert time.monotonic() - t0 < 15, n
            with trio.fail_after(30):
                got = await other.memory("memory.notes.recall", {"id": canary["id"]})
                stats = await other.memory("memory.stats")
                await other.request({"type": "ping"}, "pong")
    assert got[0]["content"] == "canary note kept" and stats["notes"] == 1
    assert d.shutdown_s is not None and d.shutdown_s < 3.0
    assert "Traceback" not in d.stderr_path.read_text()
    assert "actor.crashed" not in (state / "logs" / "root.log").read_text()
