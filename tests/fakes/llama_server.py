"""A scripted llama-server: a real HTTP server speaking the native llama.cpp API.

Run::

    python -m tests.fakes.llama_server --port 0 --script RULES.json --record LOG.jsonl \\
        [--slots N] [--latency-ms MS] [--invalid-slot error|hang|wrap] [--ignore-stdin] \\
        [--embedding-dim N] [--embedding-max-chars M]

It prints one JSON line ``{"port": P}`` on stdout once listening, and exits on SIGTERM,
SIGINT or EOF on stdin (so a parent that dies takes it along; ``--ignore-stdin`` turns
that off for manual runs).

Endpoints (shapes as llama-server answers them, its README:
https://github.com/ggml-org/llama.cpp/blob/master/tools/server/README.md):

* ``GET /health`` → ``{"status": "ok"}``; ``GET /slots`` → one idle row per slot.
* ``GET /props`` → ``{"total_slots": N, "default_generation_settings": {"n_ctx": 4096},
  "model_path": "scripted"}``.
* ``POST /v1/chat/completions`` and ``POST /v1/completions`` (OpenAI-compatible): the
  same rules, matched against the messages joined as ``role: content`` lines (or the
  prompt); OpenAI's shapes, SSE ``data: {"choices": [...]}`` then ``data: [DONE]``
  when streaming. The ``Authorization`` header is recorded (``auth``).
* ``POST /slots/N?action=save|restore`` → 200 ``{"id_slot", "filename"}`` (a restore only
  of a name saved before, kept in ``slots/`` beside the record log), else 400.
* ``POST /completion`` → non-stream JSON ``{"content", "stop": true, "tokens_predicted",
  "id_slot", "slot_id", "stop_type", "timings", ...}``, or with ``"stream": true`` SSE
  lines ``data: {"content": piece, "stop": false}`` and a final chunk with ``stop: true``.
  A request whose ``id_slot``/``slot_id`` is ≥ N (and not -1) is answered according to
  ``--invalid-slot``: ``error`` (default, current llama-server) → HTTP 400
  ``{"error": {"code": 400, "message": "Invalid slot id", "type": "invalid_request_error"}}``;
  ``hang`` (old servers) → never answered; ``wrap`` (PR 19207) → runs in ``id % N``.

Script file — re-read whenever it changes, so tests can change it between calls — is a
JSON list of rules; the first matching rule wins::

    {"match": "substring of prompt" | null, "grammar_contains": "substring" | null,
     "response": "text", "times": N | null, "status": 500, "delay_ms": 0,
     "chunk_delay_ms": 0, "raw_body": "not json"}

``"has_field": "top_k"`` matches only a request whose body has that top-level field.
``times`` counts down per rule (null = unlimited; counts reset when the file changes).
A rule with ``"get": PATH`` answers ``GET PATH`` instead (its ``raw_body`` and ``status``:
an OpenAI server's ``/v1/models`` list, say); it never matches a completion.
On the OpenAI paths a request's ``response_format`` (its JSON text) is the grammar
``grammar_contains`` looks at when it carries no ``grammar``.
``status`` ≥ 400 answers an error body with that status; ``delay_ms`` delays the answer
(ms); ``chunk_delay_ms`` spaces stream chunks. With no matching rule the answer is
``{"reply": "ok"}`` when the request's grammar mentions the ``"reply"`` key (or the prompt
ends with its opening), else ``NONE``. A response that starts with what the prompt ends
with (a client that put the reply's opening ``{"reply": "`` in the model's mouth) is
answered from there on, as a model continues its prompt.

Hostile answers (for the HTTP fuzz tests) — ``raw_body`` (text, UTF-8 with lone surrogates kept
as bytes) or ``raw_body_b64`` (bytes) is sent verbatim, for streaming and non-streaming
requests alike (script an SSE stream as text), shaped by these optional keys:

* ``status`` (default 200 here, any code, 1xx/204/304 included), ``content_type``
  (default ``application/json``; ``null`` sends none), ``headers`` (extra
  ``{name: value}``, e.g. a ``Content-Encoding`` the body does not have);
* ``framing``: ``"length"`` (default: exact ``Content-Length``), ``"close"`` (no length,
  the connection closes after the body), ``"overlong"`` (a ``Content-Length`` 100 bytes
  longer than the body, then close: a truncated body), ``"chunked"`` (``Transfer-Encoding:
  chunked``, one chunk per drip piece, as cpp-httplib streams), ``"drop"`` (close the
  connection without answering at all);
* slow-loris: ``drip_ms`` sends the body ``drip_bytes`` (default 1) bytes at a time with
  that gap (ms) between pieces; ``stall_after_bytes`` N sends the status line, headers and
  the first N body bytes, then waits ``stall_ms`` (default 60 000) before closing.

Embeddings — off unless ``--embedding-dim N`` is given (then, as a
llama-server started without ``--embeddings``, both endpoints answer HTTP 501):

* ``POST /embedding`` ``{"content": str | [str]}`` → ``[{"index": i, "embedding": [[…]]}]``
  (current llama-server's pooled shape: one row per input).
* ``POST /v1/embeddings`` ``{"model", "input": str | [str]}`` → OpenAI's
  ``{"object": "list", "data": [{"index", "embedding"}], "model", "usage"}``.

A vector is a hashed bag of the text's lowercase words (same words → same direction,
unit length; an empty text gives all zeros). ``--embedding-max-chars M`` makes every
input longer than M characters fail as llama-server does when the input's tokens do not
fit one physical batch: HTTP 500 ``{"error": {"code": 500, "message": "input (T
tokens) is too large to process. increase the physical batch size (current batch size:
512)", "type": "server_error"}}`` with ``T = ceil(len · 512 / M)``. Rules with
``"embedding": true`` apply to embedding requests only (matched against the texts joined
by newlines) and may script ``status``, ``raw_body`` or ``delay_ms``; other rules never
apply to them.

Every request is appended as one JSON line ``{"t", "method", "path", "body"}`` to the
record file (``t`` in Unix seconds, ``body`` the parsed JSON or null).

For trio tests, :func:`open_fake_llama` runs this module as a real subprocess and reaps it.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["FakeLlama", "open_fake_llama", "start_fake_llama", "main"]

_REPO_ROOT = Path(__file__).resolve().parents[2]
_PIECE_RE = re.compile(r"\s*\S+\s*|\s+")
_REPLY_KEY_RE = re.compile(r'\\*"reply\\*"')


# ============================================================== server side (stdlib)


class _State:
    """Shared server state: config, rule counters, record lock, shutdown event."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.script = Path(args.script)
        self.record = Path(args.record)
        self.slots: int = args.slots
        self.latency_s: float = args.latency_ms / 1000.0
        self.invalid_slot: str = args.invalid_slot
        self.embedding_dim: int = args.embedding_dim
        self.embedding_max_chars: int = args.embedding_max_chars
        self.lock = threading.Lock()
        self.uses: dict[tuple[str, int], int] = {}
        self.stopping = threading.Event()
        self._cache: tuple[tuple[int, int, int], str, list[dict[str, Any]]] | None = None

    def load_rules(self) -> tuple[str, list[dict[str, Any]]]:
        """The script file's rules, re-read whenever its (mtime, size, inode) changes;
        returns (version key, rules). Missing file → no rules."""
        try:
            stat = self.script.stat()
            key = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
            if self._cache is not None and self._cache[0] == key:
                return self._cache[1], self._cache[2]
            raw = self.script.read_bytes()
        except OSError:
            return "", []
        version = f"{stat.st_mtime_ns}:{hashlib.sha256(raw).hexdigest()}"
        rules = json.loads(raw or b"[]")
        rules = rules if isinstance(rules, list) else []
        self._cache = (key, version, rules)
        return version, rules

    def pick_rule(self, prompt: str, grammar: str, *, embedding: bool = False,
                  fields: Any = ()) -> dict[str, Any] | None:
        """First rule matching prompt/grammar with uses left; consumes one use. Rules
        marked ``"embedding": true`` match embedding requests only, the others only
        completions; a rule's ``"has_field"`` matches a request whose body has that
        top-level field (``fields``: the body's keys)."""
        with self.lock:
            version, rules = self.load_rules()
            for index, rule in enumerate(rules):
                if bool(rule.get("embedding")) != embedding or rule.get("get") is not None:
                    continue
                match = rule.get("match")
                if match is not None and match not in prompt:
                    continue
                gram = rule.get("grammar_contains")
                if gram is not None and gram not in grammar:
                    continue
                if rule.get("has_field") is not None and rule["has_field"] not in fields:
                    continue
                times = rule.get("times")
                if times is not None:
                    used = self.uses.get((version, index), 0)
                    if used >= times:
                        continue
                    self.uses[(version, index)] = used + 1
                return rule
        return None

    def record_request(self, method: str, path: str, body: Any, auth: str | None = None) -> None:
        """Append one JSON line for this request to the record file."""
        line = json.dumps({"t": time.time(), "method": method, "path": path, "body": body,
                           "auth": auth})
        with self.lock, self.record.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")


def _make_handler(state: _State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as llama-server (cpp-httplib) does
        disable_nagle_algorithm = True  # TCP_NODELAY, as cpp-httplib: no 40 ms delayed-ACK stalls
        server_version = "fake-llama-server/1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # keep test output clean

        def _send_json(self, status: int, obj: Any) -> None:
            self._send_bytes(status, json.dumps(obj).encode(), "application/json")

        def _send_bytes(self, status: int, data: bytes, ctype: str) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass  # the client went away (cancelled); nothing to do

        def _sleep(self, seconds: float) -> None:
            if seconds > 0:
                state.stopping.wait(seconds)

        def do_GET(self) -> None:  # noqa: N802
            state.record_request("GET", self.path, None, auth=self.headers.get("Authorization"))
            self._sleep(state.latency_s)
            _version, rules = state.load_rules()
            scripted = next((r for r in rules if r.get("get") == self.path), None)
            if scripted is not None:  # e.g. {"get": "/v1/models", "raw_body": "..."}
                self._send_raw(scripted)
            elif self.path == "/health":
                self._send_json(200, {"status": "ok"})
            elif self.path == "/props":
                self._send_json(200, {
                    "total_slots": state.slots,
                    "default_generation_settings": {"n_ctx": 4096},
                    "model_path": "scripted",
                })
            elif self.path == "/slots":
                self._send_json(200, [{"id": i, "is_processing": False}
                                      for i in range(state.slots)])
            else:
                self._send_json(404, {"error": {"code": 404, "message": "File Not Found",
                                                "type": "not_found_error"}})

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            state.record_request("POST", self.path, body if body is not None
                                 else raw.decode("utf-8", "replace"),
                                 auth=self.headers.get("Authorization"))
            if self.path in ("/v1/chat/completions", "/v1/completions") and isinstance(body, dict):
                self._openai(body)
                return
            if self.path in ("/embedding", "/embeddings", "/v1/embeddings"):
                self._embedding(body)
                return
            if self.path.startswith("/slots/"):
                self._slot_file(body)
                return
            if self.path not in ("/completion", "/completions"):
                self._send_json(404, {"error": {"code": 404, "message": "File Not Found",
                                                "type": "not_found_error"}})
                return
            if not isinstance(body, dict):
                self._send_json(400, {"error": {"code": 400, "message": "invalid JSON body",
                                                "type": "invalid_request_error"}})
                return
            self._complete(body)

        def _slot_file(self, body: Any) -> None:
            """``POST /slots/N?action=save|restore {"filename"}`` as llama-server with
            ``--slot-save-path``: a save writes a marker file in ``slots/`` beside the
            record log (so it outlives a restart of this server), a restore answers 200
            only for a file saved before, 400 otherwise."""
            slot, _, query = self.path[len("/slots/"):].partition("?action=")
            name = body.get("filename") if isinstance(body, dict) else None
            folder = state.record.parent / "slots"
            if (not slot.isdigit() or int(slot) >= state.slots or query not in ("save", "restore")
                    or not isinstance(name, str) or not name or "/" in name):
                self._send_json(400, {"error": {"code": 400, "message": "Invalid request",
                                                "type": "invalid_request_error"}})
                return
            if query == "save":
                folder.mkdir(exist_ok=True)
                (folder / name).write_text(slot)
            elif not (folder / name).exists():
                self._send_json(400, {"error": {"code": 400, "message": "Unable to restore slot",
                                                "type": "invalid_request_error"}})
                return
            self._send_json(200, {"id_slot": int(slot), "filename": name})

        def _complete(self, body: dict[str, Any]) -> None:
            slot = body.get("id_slot", body.get("slot_id", -1))
            slot = slot if isinstance(slot, int) else -1
            if slot != -1 and not 0 <= slot < state.slots:
                if state.invalid_slot == "hang":
                    state.stopping.wait()
                    return
                if state.invalid_slot == "error" or slot < 0:
                    self._send_json(400, {"error": {"code": 400, "message": "Invalid slot id",
                                                    "type": "invalid_request_error"}})
                    return
                slot %= state.slots
            served_slot = max(slot, 0)
            prompt = body.get("prompt")
            prompt = prompt if isinstance(prompt, str) else json.dumps(prompt)
            grammar = body.get("grammar") or ""
            grammar = grammar if isinstance(grammar, str) else ""
            rule = state.pick_rule(prompt, grammar)
            self._sleep(state.latency_s + (rule or {}).get("delay_ms", 0) / 1000.0)
            if self._scripted_failure(rule):
                return
            if rule is not None:
                text = str(rule.get("response", ""))
            else:
                text = ('{"reply": "ok"}' if _REPLY_KEY_RE.search(grammar)
                        or prompt.endswith('{"reply": "') else "NONE")
            text = text[_prefilled(prompt, text):]
            pieces = _PIECE_RE.findall(text)
            n_predict = body.get("n_predict", -1)
            stop_type = "eos"
            if isinstance(n_predict, int) and 0 < n_predict < len(pieces):
                pieces, stop_type = pieces[:n_predict], "limit"
            final = {
                "content": "".join(pieces), "stop": True, "id_slot": served_slot,
                "slot_id": served_slot, "tokens_predicted": len(pieces),
                "tokens_evaluated": max(1, len(prompt) // 4), "stop_type": stop_type,
                "stopped_eos": stop_type == "eos", "stopped_limit": stop_type == "limit",
                "stopped_word": False, "truncated": False, "model": "scripted",
                "timings": {"prompt_ms": 1.0, "predicted_ms": float(len(pieces)),
                            "prompt_n": max(1, len(prompt) // 4)},
            }
            if body.get("stream"):
                self._stream(pieces, final, (rule or {}).get("chunk_delay_ms", 0) / 1000.0)
            else:
                self._send_json(200, final)

        def _scripted_failure(self, rule: dict[str, Any] | None) -> bool:
            """Answer a rule's ``raw_body``/``raw_body_b64`` (:meth:`_send_raw`, with its
            ``status``) or its ``status`` ≥ 400 (an error body in the shape both APIs
            share); True when it did."""
            if rule is not None and (rule.get("raw_body") is not None
                                     or rule.get("raw_body_b64") is not None):
                self._send_raw(rule)
                return True
            if rule is not None and int(rule.get("status") or 200) >= 400:
                status = int(rule["status"])
                self._send_json(status, {"error": {
                    "code": status, "message": rule.get("response") or "scripted error",
                    "type": "server_error" if status >= 500 else "invalid_request_error"}})
                return True
            return False

        def _send_raw(self, rule: dict[str, Any]) -> None:
            """A hostile answer: ``raw_body``/``raw_body_b64`` with the rule's status,
            headers, framing and drip/stall (module docstring)."""
            if rule.get("raw_body_b64") is not None:
                data = base64.b64decode(rule["raw_body_b64"])
            else:
                data = str(rule["raw_body"]).encode("utf-8", "surrogatepass")
            framing = rule.get("framing") or "length"
            self.close_connection = True  # a hostile answer never shares a connection
            if framing == "drop":
                return
            status = int(rule.get("status") or 200)
            ctype = rule.get("content_type", "application/json")
            drip_s = float(rule.get("drip_ms") or 0) / 1000.0
            step = max(1, int(rule.get("drip_bytes") or 1)) if drip_s > 0 else max(1, len(data))
            stall_at = rule.get("stall_after_bytes")
            try:
                # send_response_only: no Server/Date headers, status codes of any value.
                self.send_response_only(status)
                if ctype is not None:
                    self.send_header("Content-Type", str(ctype))
                for name, value in (rule.get("headers") or {}).items():
                    self.send_header(str(name), str(value))
                if framing == "length":
                    self.send_header("Content-Length", str(len(data)))
                elif framing == "overlong":
                    self.send_header("Content-Length", str(len(data) + 100))
                elif framing == "chunked":
                    self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.flush()
                limit = len(data) if stall_at is None else min(len(data), int(stall_at))
                sent = 0
                while sent < limit:
                    piece = data[sent:min(sent + step, limit)]
                    sent += len(piece)
                    if framing == "chunked":
                        piece = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
                    self.wfile.write(piece)
                    self.wfile.flush()
                    if drip_s > 0 and sent < limit:
                        self._sleep(drip_s)
                if stall_at is not None:
                    self._sleep(float(rule.get("stall_ms") or 60_000) / 1000.0)
                    return
                if framing == "chunked":
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
            except OSError:
                pass  # the client went away (timed out or cancelled)

        def _embedding(self, body: Any) -> None:
            """``/embedding`` (native) and ``/v1/embeddings`` (OpenAI); see the module
            docstring for shapes, the batch limit on long inputs and scripted failures."""
            openai = self.path == "/v1/embeddings"
            if state.embedding_dim <= 0:
                self._send_json(501, {"error": {
                    "code": 501, "type": "not_supported_error",
                    "message": "This server does not support embeddings. Start it with "
                               "`--embeddings`"}})
                return
            texts = body.get("input" if openai else "content") if isinstance(body, dict) else None
            texts = [texts] if isinstance(texts, str) else texts
            if not isinstance(texts, list) or not texts or not all(
                    isinstance(t, str) for t in texts):
                self._send_json(400, {"error": {
                    "code": 400, "type": "invalid_request_error",
                    "message": f"\"{'input' if openai else 'content'}\" must be a string "
                               "or a non-empty list of strings"}})
                return
            rule = state.pick_rule("\n".join(texts), "", embedding=True)
            self._sleep(state.latency_s + (rule or {}).get("delay_ms", 0) / 1000.0)
            if self._scripted_failure(rule):
                return
            limit = state.embedding_max_chars
            for text in texts:
                if limit > 0 and len(text) > limit:
                    tokens = -(-len(text) * 512 // limit)
                    self._send_json(500, {"error": {
                        "code": 500, "type": "server_error",
                        "message": f"input ({tokens} tokens) is too large to process. increase "
                                   "the physical batch size (current batch size: 512)"}})
                    return
            vectors = [_bag_of_words(t, state.embedding_dim) for t in texts]
            if openai:
                self._send_json(200, {
                    "object": "list", "model": body.get("model") or "scripted",
                    "data": [{"object": "embedding", "index": i, "embedding": v}
                             for i, v in enumerate(vectors)],
                    "usage": {"prompt_tokens": sum(len(t) // 4 for t in texts),
                              "total_tokens": sum(len(t) // 4 for t in texts)}})
            else:
                self._send_json(200, [{"index": i, "embedding": [v]}
                                      for i, v in enumerate(vectors)])

        def _openai(self, body: dict[str, Any]) -> None:
            """``/v1/chat/completions`` and ``/v1/completions`` in OpenAI's shapes, driven
            by the same rules (matched against the messages joined, or the prompt)."""
            chat = self.path == "/v1/chat/completions"
            if chat:
                messages = body.get("messages") if isinstance(body.get("messages"), list) else []
                prompt = "\n".join(f"{m.get('role')}: {m.get('content')}" for m in messages
                                   if isinstance(m, dict))
            else:
                prompt = str(body.get("prompt", ""))
            grammar = body.get("grammar") if isinstance(body.get("grammar"), str) else ""
            if not grammar and isinstance(body.get("response_format"), dict):
                grammar = json.dumps(body["response_format"])  # a JSON schema stands in
            rule = state.pick_rule(prompt, grammar, fields=set(body))
            self._sleep(state.latency_s + (rule or {}).get("delay_ms", 0) / 1000.0)
            if self._scripted_failure(rule):
                return
            text = str(rule.get("response", "")) if rule is not None else (
                '{"reply": "ok"}' if _REPLY_KEY_RE.search(grammar) else "NONE")
            if not body.get("stream"):
                choice = ({"index": 0, "message": {"role": "assistant", "content": text},
                           "finish_reason": "stop"} if chat
                          else {"index": 0, "text": text, "finish_reason": "stop"})
                self._send_json(200, {"id": "scripted", "object": "chat.completion",
                                      "model": body.get("model") or "scripted",
                                      "choices": [choice],
                                      "usage": {"prompt_tokens": max(1, len(prompt) // 4),
                                                "completion_tokens": len(text.split())}})
                return
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.close_connection = True
                self.end_headers()
                for piece in _PIECE_RE.findall(text):
                    part = {"delta": {"content": piece}} if chat else {"text": piece}
                    self.wfile.write(f"data: {json.dumps({'choices': [part]})}\n\n".encode())
                    self.wfile.flush()
                    self._sleep((rule or {}).get("chunk_delay_ms", 0) / 1000.0)
                end = {"choices": [{"delta": {}, "finish_reason": "stop"} if chat
                                   else {"text": "", "finish_reason": "stop"}]}
                self.wfile.write(f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n".encode())
                self.wfile.flush()
            except OSError:
                pass

        def _stream(self, pieces: list[str], final: dict[str, Any], gap_s: float) -> None:
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")  # no length: the close ends it
                self.close_connection = True
                self.end_headers()
                for piece in pieces:
                    chunk = {"content": piece, "stop": False, "id_slot": final["id_slot"]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                    self._sleep(gap_s)
                self.wfile.write(f"data: {json.dumps({**final, 'content': ''})}\n\n".encode())
                self.wfile.flush()
            except OSError:
                pass

    return Handler


def _prefilled(prompt: str, text: str) -> int:
    """How much of the scripted ``text`` the prompt already ends with (a client that puts
    the reply's opening in the model's mouth): a model continues after it, so that much
    is not sent again. Overlaps under 3 characters do not count."""
    for k in range(min(len(text), len(prompt)), 2, -1):
        if prompt.endswith(text[:k]):
            return k
    # An opening longer than the scripted reply's own ('{"reply": "Nice to meet you, Ana!
    # '): the model goes on after it, so only the scripted text's opening is left out.
    opening = '{"reply": "'
    started = prompt.rsplit("<|im_start|>assistant\n", 1)[-1]
    if text.startswith(opening) and started.startswith(opening) and '"' not in started[len(opening):]:
        return len(opening)
    return 0


def _bag_of_words(text: str, dim: int) -> list[float]:
    """A unit vector of ``dim`` floats: each lowercase word adds ±1 to a hashed bucket
    (all zeros for a text without words)."""
    vec = [0.0] * dim
    for word in re.findall(r"\w+", text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        bucket = int.from_bytes(digest[:4], "little") % dim
        vec[bucket] += 1.0 if digest[4] & 1 else -1.0
    norm = sum(x * x for x in vec) ** 0.5
    return [x / norm for x in vec] if norm else vec


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up (a cancelled request, a closed keep-alive connection) is
    normal here: no traceback on stderr for it."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``python -m tests.fakes.llama_server``; returns the exit code."""
    parser = argparse.ArgumentParser(description="scripted llama-server for tests")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--script", required=True, help="JSON rules file (re-read per request)")
    parser.add_argument("--record", required=True, help="JSON-lines request log (appended)")
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--invalid-slot", choices=("error", "hang", "wrap"), default="error")
    parser.add_argument("--embedding-dim", type=int, default=0,
                        help="serve /embedding and /v1/embeddings with vectors of this size "
                             "(0: answer 501 like a server without --embeddings)")
    parser.add_argument("--embedding-max-chars", type=int, default=0,
                        help="inputs longer than this fail with llama-server's HTTP 500 "
                             "'increase the physical batch size'; 0: no limit")
    parser.add_argument("--ignore-stdin", action="store_true")
    args = parser.parse_args(argv)

    state = _State(args)
    server = _QuietServer((args.host, args.port), _make_handler(state))
    server.daemon_threads = True
    server.block_on_close = False

    def _stop(*_: Any) -> None:
        state.stopping.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if not args.ignore_stdin:
        def _watch_stdin() -> None:
            try:
                while sys.stdin.buffer.read(4096):
                    pass
            except (OSError, ValueError):
                pass
            state.stopping.set()

        threading.Thread(target=_watch_stdin, daemon=True).start()

    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                               daemon=True)
    serving.start()
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    while not state.stopping.wait(0.2):
        pass
    server.shutdown()
    server.server_close()
    return 0


# ============================================================== trio test helpers


class FakeLlama:
    """Handle on a running fake server (see :func:`open_fake_llama`).

    ``url``: ``http://127.0.0.1:<port>``; ``port``; ``pid``; ``script_path`` /
    ``record_path``: the rule and record files.
    """

    def __init__(self, url: str, port: int, pid: int, script_path: Path, record_path: Path):
        self.url = url
        self.port = port
        self.pid = pid
        self.script_path = script_path
        self.record_path = record_path

    def set_rules(self, rules: list[dict[str, Any]]) -> None:
        """Atomically replace the script (takes effect on the next request)."""
        _write_rules(self.script_path, rules)

    def requests(self) -> list[dict[str, Any]]:
        """Every recorded request so far: dicts with ``t``, ``method``, ``path``, ``body``."""
        if not self.record_path.exists():
            return []
        lines = self.record_path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def embedding_requests(self) -> list[dict[str, Any]]:
        """Recorded requests to ``/embedding`` and ``/v1/embeddings`` (with ``auth``)."""
        return [r for r in self.requests() if "embedding" in r["path"]]

    def openai_requests(self) -> list[dict[str, Any]]:
        """Recorded requests to the OpenAI-compatible endpoints (with ``auth``)."""
        return [r for r in self.requests()
                if r["path"].startswith("/v1/") and "embedding" not in r["path"]]

    def completions(self) -> list[dict[str, Any]]:
        """Bodies of the recorded ``POST /completion`` requests, in order. A request whose
        body is not a JSON object (a client that went away mid-send, which the server
        answers 400) is left out; :meth:`requests` has every request."""
        return [r["body"] for r in self.requests()
                if r["method"] == "POST" and r["path"] == "/completion"
                and isinstance(r["body"], dict)]


def _write_rules(path: Path, rules: list[dict[str, Any]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(rules), encoding="utf-8")
    os.replace(tmp, path)


@asynccontextmanager
async def open_fake_llama(
    tmp_path: Path,
    rules: list[dict[str, Any]] | None = None,
    slots: int = 2,
    *,
    latency_ms: float = 0.0,
    invalid_slot: str = "error",
    embedding_dim: int = 0,
    embedding_max_chars: int = 0,
    port: int = 0,
    start_timeout_s: float = 15.0,
) -> AsyncIterator[FakeLlama]:
    """Run the fake server as a real subprocess for the duration of the block.

    Needs no nursery from the caller and starts no background task (the child prints
    nothing after its port line; ``port`` 0 picks a free one). On exit, however the block
    ends, the child is stopped
    and reaped: stdin closed (EOF) → wait 2 s → SIGTERM →
    wait 1 s → SIGKILL → wait, all shielded. Raises ``RuntimeError`` when the child does
    not print its port line within ``start_timeout_s`` seconds.
    """
    import trio

    tmp_path.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    script, record = tmp_path / f"llama-rules-{tag}.json", tmp_path / f"llama-record-{tag}.jsonl"
    _write_rules(script, rules or [])
    record.touch()
    cmd = [sys.executable, "-m", "tests.fakes.llama_server", "--port", str(port),
           "--script", str(script), "--record", str(record), "--slots", str(slots),
           "--latency-ms", str(latency_ms), "--invalid-slot", invalid_slot,
           "--embedding-dim", str(embedding_dim),
           "--embedding-max-chars", str(embedding_max_chars)]
    proc = await trio.lowlevel.open_process(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=str(_REPO_ROOT))
    try:
        assert proc.stdout is not None
        buf = b""
        with trio.move_on_after(start_timeout_s):
            while b"\n" not in buf:
                chunk = await proc.stdout.receive_some(4096)
                if not chunk:
                    break
                buf += chunk
        if b"\n" not in buf:
            raise RuntimeError(f"fake llama-server did not start (output {buf!r})")
        port = int(json.loads(buf.split(b"\n", 1)[0])["port"])
        # The child prints nothing after its port line, so stdout needs no drain task.
        await proc.stdout.aclose()
        yield FakeLlama(f"http://127.0.0.1:{port}", port, proc.pid, script, record)
    finally:
        await _reap(proc)


async def _reap(proc: Any) -> None:
    """Cancellation ladder for the child: EOF → SIGTERM → SIGKILL → always wait."""
    import trio

    with trio.CancelScope(shield=True):
        if proc.stdin is not None:
            try:
                await proc.stdin.aclose()
            except trio.BrokenResourceError:
                pass
        with trio.move_on_after(2.0):
            await proc.wait()
        if proc.returncode is None:
            proc.terminate()
            with trio.move_on_after(1.0):
                await proc.wait()
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        if proc.stdout is not None:
            await proc.stdout.aclose()


async def start_fake_llama(
    nursery: Any,
    tmp_path: Path,
    rules: list[dict[str, Any]] | None = None,
    slots: int = 2,
    **kwargs: Any,
) -> FakeLlama:
    """Start the fake server in the caller's ``nursery`` (it escapes this call).

    Prefer :func:`open_fake_llama`. The server lives until ``nursery`` is cancelled or
    closes, and is reaped then. Same keyword options as :func:`open_fake_llama`.
    """
    import trio

    async def _serve(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with open_fake_llama(tmp_path, rules, slots, **kwargs) as fake:
            task_status.started(fake)
            await trio.sleep_forever()

    return await nursery.start(_serve)


if __name__ == "__main__":
    sys.exit(main())
