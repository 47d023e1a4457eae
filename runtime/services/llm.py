"""Async client for llama-server's native API (``/completion``, ``/props``, ``/health``).

The API: llama.cpp's server README
(https://github.com/ggml-org/llama.cpp/blob/master/tools/server/README.md). The slot plan
and why no call may send an ``id_slot`` ≥ ``total_slots`` (a bad slot id makes old
servers wait forever and newer ones wrap silently; every call needs a finite timeout):
docs/architecture.md §5, "Slots".

Error tree (every error is one line; third-party errors are translated here, once)::

    LLMError
     ├── LLMUnavailable   transport failure: refused, reset, DNS, broken stream
     ├── LLMBadResponse   4xx, or a body that is not the expected JSON shape
     ├── LLMServerError   5xx (after retries)
     └── LLMTimeout       no complete answer in time (the deadlines below)

Retries: only transport failures and 5xx, up to ``retries`` (default 2)
extra attempts with exponential backoff (``backoff_base_s`` × 2^attempt, ±20 % jitter);
4xx, malformed bodies and our own timeouts are never retried, and a stream is retried
only before its first byte.

Deadlines (a server that drips its answer a byte at a time keeps
every httpx per-read timeout alive, so the totals are trio cancel scopes): a unary call —
every attempt, backoff and the whole body — ends within ``timeout_s``; a stream's
response headers come within ``timeout_s``, then each SSE ``data:`` event within
``timeout_s`` of the previous one (idle budget; bytes that do not complete an event do
not count), and the whole stream, counted from the headers, within ``stream_cap_s``.
Caller deadlines are trio cancel scopes around the call; ``trio.Cancelled`` is never
caught (it is a ``BaseException``).
"""

from __future__ import annotations

import email.utils
import math
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

from runtime.kernel.lean_imports import import_hiding

import_hiding("httpx", ("httpx._main",))  # its CLI stays out (runtime.kernel.lean_imports)
import httpx  # noqa: E402
import msgspec
import trio

from runtime.kernel.unicode import repair_json_escapes

__all__ = [
    "DECODE_ERRORS", "STREAM_CAP_FACTOR", "decode_repaired", "error_detail", "health_ok",
    "sse_lines",
    "LLMError", "LLMUnavailable", "LLMBadResponse", "LLMServerError", "LLMTimeout",
    "LLMNotReady",
    "LLMContextOverflow", "LLMStreamIncomplete", "overflow_error",
    "Props", "Completion", "LlamaClient", "SlotPlan", "check_slot",
]

#: Sampling defaults sent with every completion.
TOP_P = 0.95
TOP_K = 40
REPEAT_PENALTY = 1.1
REPEAT_LAST_N = 256

STREAM_CAP_FACTOR = 4
"""A stream's default whole-stream bound is this many ``timeout_s`` (an absolute
stream cap; the idle budget between events is ``timeout_s`` itself)."""

DECODE_ERRORS = (msgspec.DecodeError, RecursionError)


def health_ok(status: int, body: bytes) -> bool:
    """Whether a ``GET /health`` answer says a llama-server has its model loaded: HTTP
    200 with the JSON ``{"status": "ok"}`` (llama.cpp's ``server.cpp``). Any other
    program answering 200 on the port — an HTML page, a proxy's placeholder — is not."""
    if status != 200:
        return False
    try:
        data = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return False
    return isinstance(data, dict) and data.get("status") == "ok"


def decode_repaired(decoder: Any, data: bytes | str) -> Any:
    """``decoder.decode(data)``; a body msgspec refuses only for a lone surrogate escape
    (``"\\ud83d"`` without its pair: a model that emitted half an emoji) is decoded again
    with each such escape read as U+FFFD (:func:`runtime.kernel.unicode.repair_json_escapes`),
    so one bad character costs that character, not the whole completion. Raises what
    ``decoder.decode`` raises otherwise (:data:`DECODE_ERRORS`)."""
    try:
        return decoder.decode(data)
    except msgspec.DecodeError as exc:
        if "surrogate" not in str(exc):
            raise
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        return decoder.decode(repair_json_escapes(text))
"""What decoding a hostile JSON body can raise: ``msgspec.DecodeError`` (not JSON, or
the wrong shape: ``ValidationError`` is a subclass) and ``RecursionError`` (nesting
deeper than the interpreter's limit, e.g. 3,000 ``[``). Every decoder of a server's
answer catches exactly these and raises its module's typed error."""

_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def _one_line(text: str, limit: int = 300) -> str:
    """Collapse whitespace and clip to ``limit`` chars so messages stay one line."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "\u2026"


class LLMError(Exception):
    """Base of every llama-server client error; ``str(err)`` is one line.

    ``url``: the request URL (or None); ``status``: the HTTP status when one was
    received, else None.
    """

    def __init__(self, message: str, *, url: str | None = None, status: int | None = None):
        super().__init__(_one_line(message))
        self.url = url
        self.status = status


class LLMUnavailable(LLMError):
    """The server could not be reached or the connection broke (no HTTP status)."""


class LLMBadResponse(LLMError):
    """The server answered 4xx, or a body that is not the expected JSON shape."""


class LLMServerError(LLMError):
    """The server answered 5xx on every attempt."""


class LLMNotReady(LLMError):
    """The server was still loading its model (HTTP 503) or restarting (unreachable)
    for longer than the caller would wait."""

    code = "llm_loading"


class LLMContextOverflow(LLMBadResponse):
    """The prompt does not fit the server's context, in whichever
    shape the server said so: HTTP 400 ``exceed_context_size_error``, HTTP 500 "Context
    size has been exceeded.", or an ``error:`` event in a 200 stream. Never retried as
    transient. ``n_prompt_tokens`` / ``n_ctx``: the server's numbers when it gave them."""

    code = "context_overflow"

    def __init__(self, message: str, *, url: str | None = None, status: int | None = None,
                 n_prompt_tokens: int | None = None, n_ctx: int | None = None):
        super().__init__(message, url=url, status=status)
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx


class LLMStreamIncomplete(LLMBadResponse):
    """A stream ended (the connection closed, the server died) before its final chunk:
    what arrived is a fragment, never a reply."""

    code = "llm_stream_incomplete"


class LLMTimeout(LLMError):
    """No complete answer in time: an httpx per-phase timeout fired, or one of the
    client's deadlines (module docstring: ``timeout_s`` for a unary call, headers and
    each stream event; ``stream_cap_s`` for a whole stream)."""


# --------------------------------------------------------------------------- shapes


class Props(msgspec.Struct, frozen=True):
    """What ``GET /props`` reported. Missing keys get defaults.

    ``total_slots``: parallel slots (≥ 1; 1 when not reported). ``slots_reported``:
    whether the server actually sent ``total_slots`` (when it did not, callers
    should not pin slots). ``model_path`` / ``model_alias``: as reported, else None.
    ``n_ctx``: context size in tokens from ``default_generation_settings``, else None.
    """

    total_slots: int = 1
    slots_reported: bool = False
    model_path: str | None = None
    model_alias: str | None = None
    n_ctx: int | None = None


class Completion(msgspec.Struct, frozen=True):
    """One finished completion.

    ``text``: the generated text. ``stop_type``: ``"eos"`` | ``"word"`` | ``"limit"``
    (hit ``n_predict``) | ``"none"``/other as reported. ``truncated``: llama-server's
    flag that the *prompt* was cut to fit the context. ``tokens_predicted`` /
    ``tokens_evaluated``: token counts. ``slot_id``: the slot that served it (-1 when
    unknown). ``prompt_ms`` / ``predicted_ms``: server timings in ms, when reported.
    ``prompt_n``: prompt tokens the server processed for this request (its prompt cache
    excluded; llama-server's ``timings.prompt_n``), None when not reported.
    """

    text: str
    stop_type: str = "none"
    truncated: bool = False
    tokens_predicted: int = 0
    slot_id: int = -1
    tokens_evaluated: int = 0
    prompt_ms: float | None = None
    predicted_ms: float | None = None
    prompt_n: int | None = None


class _TimingsWire(msgspec.Struct):
    prompt_ms: float | None = None
    predicted_ms: float | None = None
    prompt_n: int | None = None


class _GenSettingsWire(msgspec.Struct):
    n_ctx: int | None = None


class _PropsWire(msgspec.Struct):
    total_slots: int | msgspec.UnsetType = msgspec.UNSET
    model_path: str | None = None
    model_alias: str | None = None
    default_generation_settings: _GenSettingsWire | None = None


class _CompletionWire(msgspec.Struct):
    content: str
    stop: bool = True
    tokens_predicted: int = 0
    tokens_evaluated: int = 0
    id_slot: int | None = None
    slot_id: int | None = None
    stop_type: str | None = None
    stopped_eos: bool = False
    stopped_word: bool = False
    stopped_limit: bool = False
    truncated: bool = False
    timings: _TimingsWire | None = None


class _ErrorBodyWire(msgspec.Struct):
    message: str = ""
    code: int | None = None
    type: str | None = None


class _ErrorWire(msgspec.Struct):
    error: _ErrorBodyWire | str | None = None


_completion_decoder = msgspec.json.Decoder(_CompletionWire)
_props_decoder = msgspec.json.Decoder(_PropsWire)
_error_decoder = msgspec.json.Decoder(_ErrorWire)
_encoder = msgspec.json.Encoder()


def _to_completion(wire: _CompletionWire, text: str) -> Completion:
    """Normalise a final response/chunk (the slot from ``id_slot`` or ``slot_id``, whichever
    the server sent)."""
    stop_type = wire.stop_type
    if stop_type is None:
        stop_type = (
            "limit" if wire.stopped_limit
            else "word" if wire.stopped_word
            else "eos" if wire.stopped_eos
            else "none"
        )
    slot = wire.id_slot if wire.id_slot is not None else wire.slot_id
    timings = wire.timings or _TimingsWire()
    return Completion(
        text=text, stop_type=stop_type, truncated=wire.truncated,
        tokens_predicted=wire.tokens_predicted, slot_id=-1 if slot is None else slot,
        tokens_evaluated=wire.tokens_evaluated, prompt_ms=timings.prompt_ms,
        predicted_ms=timings.predicted_ms, prompt_n=timings.prompt_n,
    )


def error_detail(body: bytes) -> str:
    """Pull llama-server's / OpenAI's ``{"error": {"message": ...}}`` (or ``{"error":
    "..."}``) out of an error body, else its text as one line of at most 200 chars."""
    try:
        err = _error_decoder.decode(body).error
    except DECODE_ERRORS:
        err = None
    if isinstance(err, _ErrorBodyWire) and err.message:
        return err.message
    if isinstance(err, str) and err:
        return err
    return _one_line(body.decode("utf-8", "replace"), 200) or "(empty body)"


_OVERFLOW_RE = re.compile(
    r"exceed_context_size_error|exceeds?\s+the\s+(?:available\s+)?context|"
    r"context\s+(?:size|length|window)\s+(?:has\s+been\s+|was\s+|is\s+)?exceeded|"
    r"maximum\s+context\s+length|prompt\s+is\s+too\s+long", re.I)
_OVERFLOW_NUMBERS_RE = re.compile(
    r"\((\d{1,9})\s+tokens\)\s+exceeds\s+the\s+available\s+context\s+size\s+"
    r"\((\d{1,9})\s+tokens\)", re.I)


class _OverflowWire(msgspec.Struct):
    n_prompt_tokens: int | None = None
    n_ctx: int | None = None


class _OverflowErrorWire(msgspec.Struct):
    error: _OverflowWire | str | None = None


def overflow_error(body: bytes, *, what: str, url: str | None,
                   status: int | None) -> LLMContextOverflow | None:
    """The :class:`LLMContextOverflow` an error body means, or None when it is another
    error: llama.cpp's ``exceed_context_size_error`` (with ``n_prompt_tokens`` and
    ``n_ctx``), "Context size has been exceeded.", OpenAI's "maximum context length",
    in the body of any status or of a stream's ``error:`` event."""
    text = body.decode("utf-8", "replace")
    if not _OVERFLOW_RE.search(text):
        return None
    n_prompt = n_ctx = None
    try:
        err = msgspec.json.decode(body, type=_OverflowErrorWire).error
        if isinstance(err, _OverflowWire):
            n_prompt, n_ctx = err.n_prompt_tokens, err.n_ctx
    except DECODE_ERRORS:
        pass
    if n_prompt is None and (m := _OVERFLOW_NUMBERS_RE.search(text)):
        n_prompt, n_ctx = int(m.group(1)), int(m.group(2))
    return LLMContextOverflow(f"{what}: the prompt does not fit the context: "
                              f"{error_detail(body)}", url=url, status=status,
                              n_prompt_tokens=n_prompt, n_ctx=n_ctx)


def sse_lines(response: httpx.Response) -> AsyncIterator[str]:
    """The lines of a server-sent-events body, decoded as UTF-8 (the SSE format's only
    encoding; bad bytes become U+FFFD) whatever charset the ``Content-Type`` names:
    httpx would decode with that charset, and ``charset=utf-16`` on a body without a
    BOM raises ``UnicodeError`` mid-stream."""
    response.encoding = "utf-8"
    return response.aiter_lines()


# --------------------------------------------------------------------------- slots


def check_slot(id_slot: int, total_slots: int) -> None:
    """Refuse a slot id the server does not have.

    ``-1`` (let the server choose) is always allowed. Raises ``ValueError`` when
    ``id_slot >= total_slots`` or ``id_slot < -1``.
    """
    if id_slot < -1 or id_slot >= total_slots:
        raise ValueError(
            f"id_slot {id_slot} is not a slot of this server (total_slots={total_slots})"
        )


class SlotPlan(msgspec.Struct, frozen=True):
    """Which llama-server slot each kind of call uses.

    ``main`` is the agent's slot (0); ``reflection`` is 1 and ``rewriter`` is 2 when the
    server has that many slots, else ``-1`` (server picks, no cache reuse, main slot
    untouched). ``total_slots`` is None when the count is unknown, and then every field
    is -1 (never pin a slot the server may lack).
    """

    main: int
    reflection: int
    rewriter: int
    total_slots: int | None = None

    @classmethod
    def from_total_slots(cls, n: int) -> SlotPlan:
        """Plan for a server with ``n`` slots; raises ``ValueError`` when ``n`` < 1."""
        if n < 1:
            raise ValueError(f"total_slots must be >= 1, got {n}")
        return cls(main=0, reflection=1 if n >= 2 else -1,
                   rewriter=2 if n >= 3 else -1, total_slots=n)

    @classmethod
    def unknown(cls) -> SlotPlan:
        """Plan when ``/props`` is unreachable or silent: never pin a slot."""
        return cls(main=-1, reflection=-1, rewriter=-1, total_slots=None)

    @classmethod
    def from_props(cls, props: Props | None) -> SlotPlan:
        """Plan from :class:`Props` (``unknown()`` when None or not reported)."""
        if props is None or not props.slots_reported:
            return cls.unknown()
        return cls.from_total_slots(props.total_slots)


# --------------------------------------------------------------------------- client


RETRY_AFTER_MAX_S = 10.0
"""A 429 whose ``Retry-After`` asks for longer than this (s) is not waited out: the turn
fails over to the next backend (or fails) instead of stalling for it."""


def retry_after_s(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (RFC 9110 §10.2.3: delay-seconds or
    an HTTP date); None when absent or unreadable, 0 for a date already past."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())


class LlamaClient:
    """Async llama-server client for one base URL; use as ``async with``.

    ``base_url``: e.g. ``http://127.0.0.1:8080`` (no trailing path). ``api_key``: sent
    as ``Authorization: Bearer`` when given. ``timeout_s`` (seconds): the httpx
    per-phase timeout (connect, read, write, pool) and the bound on a whole unary call,
    on a stream's response headers and on the gap between its events; ``stream_cap_s``
    (seconds, default :data:`STREAM_CAP_FACTOR` × ``timeout_s``): the bound on a whole
    stream after its headers (module docstring, "Deadlines"). ``client``: an existing
    ``httpx.AsyncClient`` to use (not closed by :meth:`aclose`); else one is owned.
    ``retries``: extra attempts for transport failures and 5xx; ``backoff_base_s``:
    first backoff in seconds, doubled per attempt (±20 % jitter). ``label`` names the
    server in error messages (``runtime.services.backends`` also uses this transport for
    OpenAI-compatible servers).

    Raises ``ValueError`` when ``timeout_s`` or ``stream_cap_s`` is not finite and
    positive (every call to llama-server must be bounded).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        client: httpx.AsyncClient | None = None,
        retries: int = 2,
        backoff_base_s: float = 0.25,
        label: str = "llama-server",
        stream_cap_s: float | None = None,
    ) -> None:
        if not 0 < timeout_s < math.inf:
            raise ValueError(f"timeout_s must be finite and > 0, got {timeout_s}")
        if stream_cap_s is None:
            stream_cap_s = STREAM_CAP_FACTOR * timeout_s
        if not 0 < stream_cap_s < math.inf:
            raise ValueError(f"stream_cap_s must be finite and > 0, got {stream_cap_s}")
        self.base_url = base_url.rstrip("/")
        self.label = label
        self.timeout_s = timeout_s
        self.stream_cap_s = stream_cap_s
        self._timeout = httpx.Timeout(timeout_s)
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._owns_client = client is None
        self._client = client if client is not None else httpx.AsyncClient()
        self._retries = max(0, retries)
        self._backoff_base_s = max(0.0, backoff_base_s)
        self._rng = random.Random()
        #: ``total_slots`` from the last successful :meth:`props` that reported it.
        self.total_slots: int | None = None

    async def aclose(self) -> None:
        """Close the owned httpx client (a client passed in is left open)."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> LlamaClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    # ----------------------------------------------------------------- transport

    async def _backoff(self, attempt: int) -> None:
        delay = self._backoff_base_s * (2**attempt) * self._rng.uniform(0.8, 1.2)
        await trio.sleep(delay)

    async def _request(
        self, method: str, path: str, body: bytes | None = None, *, stream: bool = False
    ) -> httpx.Response:
        """Send with retries; return a 2xx response (open when ``stream``, its body read
        otherwise) or raise an :class:`LLMError`. Everything — attempts, backoff, error
        bodies, a unary body — ends within ``timeout_s`` (:class:`LLMTimeout`)."""
        url = self.base_url + path
        with trio.move_on_after(self.timeout_s) as deadline:
            return await self._attempts(method, url, body, stream)
        assert deadline.cancelled_caught
        raise LLMTimeout(f"{self.label} {method} {url} gave no complete answer within "
                         f"{self.timeout_s:g} s", url=url)

    async def _attempts(self, method: str, url: str, body: bytes | None,
                        stream: bool) -> httpx.Response:
        what = f"{self.label} {method} {url}"
        attempt = 0
        while True:
            request = self._client.build_request(
                method, url, content=body, headers=self._headers, timeout=self._timeout
            )
            try:
                response = await self._client.send(request, stream=stream)
            except httpx.TimeoutException as exc:
                raise LLMTimeout(f"{what} timed out: {type(exc).__name__}", url=url) from exc
            except httpx.TransportError as exc:
                if attempt < self._retries:
                    await self._backoff(attempt)
                    attempt += 1
                    continue
                raise LLMUnavailable(
                    f"{what} unreachable after {attempt + 1} attempt(s): "
                    f"{type(exc).__name__}: {exc}",
                    url=url,
                ) from exc
            except httpx.HTTPError as exc:
                raise LLMBadResponse(f"{what} failed: {type(exc).__name__}: {exc}", url=url) from exc
            status = response.status_code
            if status < 400:
                return response
            try:
                raw = await response.aread()
                detail = error_detail(raw)
            except httpx.HTTPError:
                raw, detail = b"", "(body unreadable)"
            finally:
                with trio.move_on_after(1.0, shield=True):
                    await response.aclose()
            overflow = overflow_error(raw, what=f"{what} answered HTTP {status}", url=url,
                                      status=status)
            if overflow is not None:
                raise overflow  # (a 500 of this kind is not transient: never retried)
            if status == 429:  # rate limited (hosted APIs, vLLM's --max-num-seqs queue)
                wait = retry_after_s(response.headers.get("retry-after"))
                if attempt < self._retries and (wait is None or wait <= RETRY_AFTER_MAX_S):
                    if wait is None:
                        await self._backoff(attempt)
                    else:
                        await trio.sleep(wait)
                    attempt += 1
                    continue
                asks = f"; it asks to wait {wait:g} s" if wait is not None else ""
                raise LLMServerError(
                    f"{what} answered HTTP 429 (rate limited{asks}) after {attempt + 1} "
                    f"attempt(s): {detail}", url=url, status=status)
            if status >= 500:
                if attempt < self._retries:
                    await self._backoff(attempt)
                    attempt += 1
                    continue
                raise LLMServerError(
                    f"{what} answered HTTP {status} after {attempt + 1} attempt(s): {detail}",
                    url=url,
                    status=status,
                )
            raise LLMBadResponse(f"{what} answered HTTP {status}: {detail}", url=url, status=status)

    # ----------------------------------------------------------------- endpoints

    async def health(self) -> bool:
        """``GET /health``: True when the server answers 200 ``{"status": "ok"}`` (model
        loaded, :func:`health_ok`), else False.

        Never raises an :class:`LLMError` (one attempt, no retries, at most
        ``timeout_s``: False after that); cancellation still propagates.
        """
        url = self.base_url + "/health"
        with trio.move_on_after(self.timeout_s):
            try:
                response = await self._client.get(url, headers=self._headers,
                                                  timeout=self._timeout)
            except httpx.HTTPError:
                return False
            return health_ok(response.status_code, response.content)
        return False

    async def slot_file(self, slot: int, action: str, filename: str) -> bool:
        """``POST /slots/{slot}?action=save|restore`` with ``{"filename": filename}``:
        write the slot's prompt cache to, or read it from, a file in the server's
        ``--slot-save-path`` directory (llama.cpp's slot persistence; a 700-token prefix
        of the 1.5B model is ~20 MB, saved in ~50 ms and restored in ~5 ms).

        True on 200. False when the server refuses (started without
        ``--slot-save-path``, a missing file or one from another model or build, a slot
        it lacks), is unreachable, or does not answer within ``timeout_s``; never
        raises an :class:`LLMError`. ``action`` is ``save`` or ``restore``
        (ValueError otherwise); cancellation propagates."""
        if action not in ("save", "restore"):
            raise ValueError(f"slot action must be save or restore, got {action!r}")
        url = f"{self.base_url}/slots/{slot}?action={action}"
        with trio.move_on_after(self.timeout_s):
            try:
                response = await self._client.post(
                    url, content=msgspec.json.encode({"filename": filename}),
                    headers={**self._headers, "Content-Type": "application/json"},
                    timeout=self._timeout)
            except httpx.HTTPError:
                return False
            return response.status_code == 200
        return False

    async def props(self) -> Props:
        """``GET /props`` → :class:`Props`; remembers ``total_slots`` for slot checks.

        Raises :class:`LLMUnavailable`, :class:`LLMServerError`, :class:`LLMTimeout`, or
        :class:`LLMBadResponse` (4xx, not JSON, or a field of the wrong type).
        """
        response = await self._request("GET", "/props")
        try:
            wire = _props_decoder.decode(response.content)
        except DECODE_ERRORS as exc:
            raise LLMBadResponse(f"llama-server /props body is malformed: {exc}",
                                 url=str(response.url)) from None
        reported = isinstance(wire.total_slots, int) and wire.total_slots >= 1
        props = Props(
            # ``reported`` is the isinstance check above, which mypy does not carry over
            total_slots=wire.total_slots if reported else 1,  # type: ignore[arg-type]
            slots_reported=reported,
            model_path=wire.model_path,
            model_alias=wire.model_alias,
            n_ctx=(wire.default_generation_settings.n_ctx
                   if wire.default_generation_settings else None),
        )
        if reported:
            self.total_slots = props.total_slots
        return props

    async def complete(
        self,
        prompt: str,
        *,
        grammar: str | None = None,
        n_predict: int = 256,
        id_slot: int | None = None,
        temperature: float = 0.2,
        stop: list[str] | None = None,
        on_token: Callable[[str], Awaitable[None]] | None = None,
    ) -> Completion:
        """``POST /completion`` and return the finished :class:`Completion`.

        ``prompt``: raw prompt text (lone surrogates are replaced by U+FFFD).
        ``grammar``: GBNF text, sent only when non-empty. ``n_predict``: max tokens to
        generate (≤ 0 is sent as -1, unlimited). ``id_slot``: slot to pin (sent as both
        ``id_slot`` and ``slot_id``; -1 lets the server choose; None omits both).
        ``temperature`` plus the fixed ``top_p`` 0.95, ``top_k`` 40, ``repeat_penalty``
        1.1, ``repeat_last_n`` 256 and ``cache_prompt`` true. ``stop``:
        stop strings. ``on_token``: when given, the request streams (SSE) and each
        non-empty content piece is awaited through it in order.

        Raises ``ValueError`` when ``id_slot`` is not a slot of the server (only checked
        once :meth:`props` has reported ``total_slots``), and the :class:`LLMError`
        subclasses of the module docstring.
        """
        if id_slot is not None and self.total_slots is not None:
            check_slot(id_slot, self.total_slots)
        body: dict[str, Any] = {
            "prompt": _SURROGATE_RE.sub("\ufffd", prompt),
            "n_predict": n_predict if n_predict > 0 else -1,
            "cache_prompt": True,
            "stream": on_token is not None,
            "temperature": temperature,
            "top_p": TOP_P,
            "top_k": TOP_K,
            "repeat_penalty": REPEAT_PENALTY,
            "repeat_last_n": REPEAT_LAST_N,
            "stop": [_SURROGATE_RE.sub("\ufffd", s) for s in (stop or [])],
        }
        if grammar:
            body["grammar"] = grammar
        if id_slot is not None:
            body["id_slot"] = id_slot
            body["slot_id"] = id_slot
        payload = _encoder.encode(body)
        if on_token is None:
            response = await self._request("POST", "/completion", payload)
            try:
                wire = decode_repaired(_completion_decoder, response.content)
            except DECODE_ERRORS as exc:
                raise LLMBadResponse(f"llama-server /completion body is malformed: {exc}",
                                     url=str(response.url)) from None
            return _to_completion(wire, wire.content)
        response = await self._request("POST", "/completion", payload, stream=True)
        try:
            return await self._read_stream(response, on_token)
        finally:
            with trio.move_on_after(1.0, shield=True):
                await response.aclose()

    @contextmanager
    def stream_deadline(self, what: str, url: str) -> Iterator[Callable[[], None]]:
        """Bound reading one stream's body (module docstring, "Deadlines").

        Yields ``progress()``: call it after each complete SSE ``data:`` event, to give
        the next one ``timeout_s`` again (never past ``stream_cap_s`` from entry).
        Raises :class:`LLMTimeout` when a budget runs out or httpx times out,
        :class:`LLMUnavailable` when the connection breaks, :class:`LLMBadResponse` for
        any other httpx error (a ``Content-Encoding`` the body does not have). ``what``
        names the stream in messages (e.g. ``"llama-server stream"``).
        """
        start = trio.current_time()
        cap = start + self.stream_cap_s
        with trio.CancelScope(deadline=min(start + self.timeout_s, cap)) as scope:

            def progress() -> None:
                scope.deadline = min(trio.current_time() + self.timeout_s, cap)

            try:
                yield progress
            except httpx.TimeoutException as exc:
                raise LLMTimeout(f"{what} {url} stalled: {type(exc).__name__}",
                                 url=url) from exc
            except httpx.TransportError as exc:
                raise LLMUnavailable(f"{what} {url} broke: {type(exc).__name__}: {exc}",
                                     url=url) from exc
            except httpx.HTTPError as exc:
                raise LLMBadResponse(f"{what} {url} is unreadable: {type(exc).__name__}: "
                                     f"{exc}", url=url) from exc
        if scope.cancelled_caught:
            capped = trio.current_time() >= cap
            raise LLMTimeout(
                f"{what} {url} " + (f"did not finish within {self.stream_cap_s:g} s" if capped
                                    else f"sent no event for {self.timeout_s:g} s"), url=url)

    async def _read_stream(
        self, response: httpx.Response, on_token: Callable[[str], Awaitable[None]]
    ) -> Completion:
        """Consume ``data: {...}`` SSE lines until the chunk with ``stop: true``."""
        url = str(response.url)
        pieces: list[str] = []
        with self.stream_deadline(f"{self.label} stream", url) as progress:
            async for raw in sse_lines(response):
                line = raw.strip()
                if line.startswith("error:"):
                    body = line[6:].strip().encode()
                    overflow = overflow_error(body, what=f"{self.label} stream error", url=url,
                                              status=response.status_code)
                    if overflow is not None:
                        raise overflow
                    raise LLMServerError(f"{self.label} stream error: {error_detail(body)}",
                                         url=url)
                if not line.startswith("data:"):
                    continue  # blank keep-alives, comments, event:/id: fields
                progress()
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    chunk = decode_repaired(_completion_decoder, data)
                except DECODE_ERRORS as exc:
                    raise LLMBadResponse(f"{self.label} stream chunk is malformed: {exc}",
                                         url=url) from None
                if chunk.content:
                    pieces.append(chunk.content)
                    await on_token(chunk.content)
                if chunk.stop:
                    return _to_completion(chunk, "".join(pieces))
        raise LLMStreamIncomplete(f"{self.label} stream ended without a final stop chunk",
                                  url=url)


def chat_prompt(system: str, user: str, template: str = "chatml") -> str:
    """Frame a (system, user) pair as one raw ``/completion`` prompt.

    ``chatml`` (SmolLM2, Qwen and most small instruct models)::

        <|im_start|>system\\n{system}<|im_end|>\\n<|im_start|>user\\n{user}<|im_end|>\\n<|im_start|>assistant\\n

    ``plain``: ``system``, a blank line, ``user``, a blank line. The system part comes
    first and unchanged, so a byte-stable system text keeps the KV-cache prefix stable.
    """
    if template == "plain":
        return f"{system}\n\n{user}\n\n"
    return (f"<|im_start|>system\n{system}<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
