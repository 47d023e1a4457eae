"""LLM backends: llama-server native and OpenAI-compatible, in an ordered pool with a
sticky fallback per session (docs/architecture.md §5).

A :class:`Backend` completes one (system, user) pair for a *role* — ``main`` (the
agent's turn), ``reflection`` or ``rewriter`` — and picks the slot for it itself:

* :class:`LlamaBackend` — ``POST /completion`` on llama-server (``runtime.services.llm``), the
  pair framed by ``llm.chat_prompt``; the slot comes from its own ``/props``
  (``SlotPlan``: main 0, reflection 1, rewriter 2 when the server has them, else -1).
* :class:`OpenAIBackend` — ``POST /v1/chat/completions`` (``api="openai-chat"``: a
  system and a user message) or ``POST /v1/completions`` (``api="openai-completions"``:
  the framed prompt), streamed as server-sent events when tokens are wanted, with a
  bearer key from config or the environment. No slots; the caller's grammar goes out as
  the JSON schema registered for it (``response_format``, which llama.cpp, Ollama, vLLM
  and LM Studio accept), as llama.cpp's ``grammar`` extension, or not at all
  (``structuredOutput``, :mod:`runtime.services.structured`); a refused field is dropped
  for good, and the lenient parsers read prose too, so a server without any of them
  still works.

:class:`BackendPool` tries the backends in order, starting with the one that last
served the caller's *partition* (a session id for turns): a session sticks to the
backend that last served it. A backend that is unreachable, answers 5xx or 4xx, times
out or sends malformed JSON is skipped to the next; when every backend failed the
caller gets one :class:`~runtime.services.llm.LLMError` naming each failure. A stream that
already produced tokens is never retried elsewhere (the tokens are out). Sub-calls
(reflection, rewriter) use their own partitions, so their failures never move a
session's sticky backend.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from runtime.kernel.lean_imports import import_hiding

import_hiding("httpx", ("httpx._main",))  # its CLI stays out (runtime.kernel.lean_imports)
import httpx  # noqa: E402
import msgspec
import structlog
import trio

from .config import Api, BackendConfig, Config
from .llm import (
    DECODE_ERRORS,
    Completion,
    LlamaClient,
    LLMBadResponse,
    LLMError,
    LLMStreamIncomplete,
    REPEAT_LAST_N,
    REPEAT_PENALTY,
    TOP_K,
    TOP_P,
    Props,
    SlotPlan,
    chat_prompt,
    decode_repaired,
    overflow_error,
    sse_lines,
)
from .metrics import count_process_wide
from .structured import resolve_mode, response_format, schema_form, text_of

__all__ = ["Backend", "BackendPool", "LlamaBackend", "OpenAIBackend", "Prefill", "api_key_for",
           "backends_from_config", "primary_structured_mode"]

log = structlog.get_logger()
REFUSED_FIELDS: dict[str, int] = {}
"""Request fields OpenAI-compatible servers refused in this process, by field;
every Metrics snapshot reports them as ``llm.field_refused{field}``."""
count_process_wide(lambda: {f"llm.field_refused{{field={f}}}": n
                            for f, n in REFUSED_FIELDS.items()})

OnToken = Callable[[str], Awaitable[None]]
SAMPLING_EXTENSIONS: dict[str, float | int] = {
    "top_k": TOP_K, "repeat_penalty": REPEAT_PENALTY, "repeat_last_n": REPEAT_LAST_N,
    "repetition_penalty": REPEAT_PENALTY}
"""The native API's sampling settings (:mod:`runtime.services.llm`) that the OpenAI API
does not define, in the names the servers that read them use: llama.cpp and LM Studio
``top_k``, ``repeat_penalty``, ``repeat_last_n``; vLLM ``top_k``, ``repetition_penalty``
(https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html, "Extra
Parameters"). Sent with a request that carries a constraint (a JSON schema or a
grammar), as the native API always has one; Ollama and most servers ignore fields they
do not know, and one that refuses them (the OpenAI API: "Unrecognized request argument
supplied: top_k") is asked again without them, once. They matter even at temperature 0:
a repeat penalty changes the greedy choice, and without it the default model copied the
reflection prompt's worked examples instead of the user's new value. Without a
constraint they are not sent: the penalty then discounts the user's own words, which a
memory line must copy, and the default model ended its answer before the first line
(bench/RESULTS.md, "Structured output per backend")."""
PROPS_TIMEOUT_S = 5.0
"""Bound (s) on the one ``/props`` read that resolves a llama-server's slot plan."""


class Prefill(msgspec.Struct, frozen=True):
    """Words put in the model's mouth: ``text`` the completion must start with (``{"reply":
    "``) and ``grammar``, GBNF for the rest of it. A backend that frames the prompt itself
    (:class:`LlamaBackend`) appends ``text`` to the prompt, so the server neither evaluates
    nor samples those tokens (~80 ms each on 2 cores); the others let the model write it
    under the full grammar. Either way the returned text, and the streamed pieces, start
    with ``text``."""

    text: str
    grammar: str


class Backend(Protocol):
    """One place completions come from; see the module docstring. ``prefills``: it puts
    a :class:`Prefill`'s text in the model's mouth (it frames the prompt itself)."""

    label: str
    prefills: bool

    async def complete(self, system: str, user: str, *, role: str, grammar: str | None,
                       n_predict: int, temperature: float,
                       on_token: OnToken | None = None,
                       prefill: Prefill | None = None) -> Completion:
        """Complete the pair; raises :class:`~runtime.services.llm.LLMError` subclasses.
        ``prefill``: see :class:`Prefill` (a backend may ignore it)."""

    async def context_window(self) -> int | None:
        """The server's context window in tokens, when it reports one."""

    async def aclose(self) -> None:
        """Release the HTTP client."""


class LlamaBackend:
    """llama-server's native API (see the module docstring)."""

    prefills = True

    def __init__(self, client: LlamaClient, *, template: str = "chatml",
                 label: str = "llama-server", structured: str = "auto") -> None:
        self.client = client
        self.template = template
        self.label = label
        self.structured = resolve_mode(structured, native=True)  # "gbnf" or "none"
        self._plan: SlotPlan | None = None
        self._props: Props | None = None

    async def _resolve(self) -> None:
        if self._plan is not None:
            return
        try:
            with trio.fail_after(PROPS_TIMEOUT_S):
                self._props = await self.client.props()
            self._plan = SlotPlan.from_props(self._props)
        except (LLMError, trio.TooSlowError) as exc:
            log.warning("llm.props_failed", backend=self.label, error=str(exc))

    async def slot(self, role: str) -> int:
        """The slot for ``role`` (``main`` / ``reflection`` / ``rewriter``); -1 while
        the server's slots are unknown (never a slot it lacks)."""
        await self._resolve()
        return getattr(self._plan, role, -1) if self._plan is not None else -1

    async def context_window(self) -> int | None:
        await self._resolve()
        return self._props.n_ctx if self._props is not None else None

    async def slot_cache(self, role: str, action: str, filename: str) -> bool:
        """Save (``action="save"``) ``role``'s slot prompt cache to ``filename`` in the
        server's slot directory, or restore it from there; False when the slot is
        unknown or the server refuses (:meth:`LlamaClient.slot_file
        <runtime.services.llm.LlamaClient.slot_file>`)."""
        slot = await self.slot(role)
        return slot >= 0 and await self.client.slot_file(slot, action, filename)

    async def complete(self, system: str, user: str, *, role: str, grammar: str | None,
                       n_predict: int, temperature: float,
                       on_token: OnToken | None = None,
                       prefill: Prefill | None = None) -> Completion:
        prompt = chat_prompt(system, user, self.template)
        if self.structured == "none":
            grammar = None
            if prefill is not None:
                prefill = msgspec.structs.replace(prefill, grammar=None)
        if prefill is None or not prefill.text:
            return await self.client.complete(
                prompt, grammar=grammar, n_predict=n_predict, id_slot=await self.slot(role),
                temperature=temperature, on_token=on_token)
        first = True

        async def relay(piece: str) -> None:  # the prefill goes out with the first piece
            nonlocal first
            await on_token(prefill.text + piece if first else piece)  # type: ignore[misc]  # checked: not None
            first = False

        completion = await self.client.complete(
            prompt + prefill.text, grammar=prefill.grammar, n_predict=n_predict,
            id_slot=await self.slot(role), temperature=temperature,
            on_token=relay if on_token is not None else None)
        return msgspec.structs.replace(completion, text=prefill.text + completion.text)

    async def aclose(self) -> None:
        await self.client.aclose()


class _Delta(msgspec.Struct):
    content: str | None = None


class _Choice(msgspec.Struct):
    text: str | None = None
    message: _Delta | None = None
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _OpenAIWire(msgspec.Struct):
    choices: list[_Choice] = []
    usage: _Usage | None = None


_openai_decoder = msgspec.json.Decoder(_OpenAIWire)
_encoder = msgspec.json.Encoder()


def _choice_text(choice: _Choice) -> str:
    part = choice.delta or choice.message
    if part is not None and part.content is not None:
        return part.content
    return choice.text or ""


def _refuses_field(exc: LLMBadResponse, field: str) -> bool:
    """Whether a 400/422 answer refuses the request field ``field`` by name."""
    text = str(exc)
    return exc.status in (400, 422) and field in text and bool(re.search(
        r"unrecognized|unknown|extra|not permitted|not allowed|unsupported|unexpected|"
        r"invalid", text, re.I))


def _refuses_schema(exc: LLMBadResponse) -> bool:
    """Whether a 400/422 answer refuses ``response_format`` or its JSON schema: the
    field refused by name, or a schema the server cannot compile ("JSON schema
    conversion failed", "Invalid schema for response_format")."""
    return _refuses_field(exc, "response_format") or exc.status in (400, 422) and bool(
        re.search(r"json[ _-]?schema|response_format|\bschema\b", str(exc), re.I)) and bool(
        re.search(r"unsupported|not supported|invalid|failed|cannot|could not|unknown",
                  str(exc), re.I))


class OpenAIBackend:
    """An OpenAI-compatible server (see the module docstring)."""

    prefills = False

    def __init__(self, client: LlamaClient, *, api: str, model: str | None,
                 grammar: bool = False, template: str = "chatml",
                 label: str = "openai", structured: str = "auto") -> None:
        if api not in ("openai-chat", "openai-completions"):
            raise ValueError(f"unknown OpenAI API {api!r}")
        self.client = client
        self.api = api
        self.model = model
        self.structured = resolve_mode(structured, native=False, grammar_switch=grammar)
        """``gbnf``, ``json_schema`` or ``none`` (:mod:`runtime.services.structured`); a
        refused field turns it to ``none`` for the rest of the process."""
        self.template = template
        self.label = label
        self.refused_fields: list[str] = []  # fields the server refused (not sent again)
        self.sampling: dict[str, float | int] = dict(SAMPLING_EXTENSIONS)
        """Sent with every constrained request beside ``temperature`` and ``top_p``;
        emptied for good when the server refuses one of them."""

    async def context_window(self) -> int | None:
        return None

    def _body(self, system: str, user: str, grammar: str | None, n_predict: int,
              temperature: float, stream: bool) -> tuple[str, bytes]:
        body: dict[str, Any] = {"max_tokens": n_predict, "temperature": temperature,
                                "top_p": TOP_P, "stream": stream}
        if self.model:
            body["model"] = self.model
        if grammar and self.structured == "gbnf":
            body["grammar"] = grammar
        elif grammar and self.structured == "json_schema":
            form, shape = schema_form(grammar), response_format(grammar)
            if form is not None and shape is not None:
                body["response_format"] = shape
                body["max_tokens"] = n_predict + form.extra_tokens  # the JSON's own tokens
                if self.api == "openai-completions":
                    # llama.cpp's /v1/completions ignores response_format and reads the
                    # schema from its own field (vLLM reads response_format there)
                    body["json_schema"] = shape["json_schema"]["schema"]
        if "grammar" in body or "response_format" in body:
            body.update(self.sampling)  # with a constraint only: SAMPLING_EXTENSIONS
        if self.api == "openai-chat":
            body["messages"] = [{"role": "system", "content": system},
                                {"role": "user", "content": user}]
            return "/v1/chat/completions", _encoder.encode(body)
        body["prompt"] = chat_prompt(system, user, self.template)
        return "/v1/completions", _encoder.encode(body)

    async def complete(self, system: str, user: str, *, role: str, grammar: str | None,
                       n_predict: int, temperature: float,
                       on_token: OnToken | None = None,
                       prefill: Prefill | None = None) -> Completion:
        """One completion (``prefill`` is left to the model: see :class:`Prefill`).

        ``grammar`` goes out as :attr:`structured` says: llama.cpp's ``grammar`` field,
        or the JSON schema registered for it as ``response_format``
        (:mod:`runtime.services.structured`), or not at all. A server that refuses
        that field (HTTP 400 or 422 naming it: "Unrecognized request argument
        supplied: grammar", pydantic's ``extra_forbidden``, "response_format ... not
        supported", a schema it cannot compile) is asked again once without it, and
        never sent it again by this backend (logged ``llm.field_refused``, counted in
        :attr:`refused_fields`); the caller validates what comes back either way. The
        native API's sampling settings go out with every constrained request
        (:data:`SAMPLING_EXTENSIONS`; the API's own ``top_p`` with every request); a
        server that refuses one of them is asked again without them, likewise once. A
        grammar whose language is not JSON (reflection lines, votes, links, the
        rewriter's envelope, a lesson) gets the grammar's own text back whatever the
        server wrote (:func:`~runtime.services.structured.text_of`); streamed pieces are
        what the server sent."""
        for attempt in range(3):  # at most one refusal of each: sampling, structure
            try:
                completion = await self._complete(system, user, grammar, n_predict,
                                                  temperature, on_token)
                break
            except LLMBadResponse as exc:
                if attempt == 2 or not self._drop_refused(exc, grammar):
                    raise
        text = text_of(grammar, completion.text)  # a schema's JSON back into the grammar's text
        return completion if text is completion.text else msgspec.structs.replace(
            completion, text=text)

    def _drop_refused(self, exc: LLMBadResponse, grammar: str | None) -> bool:
        """Stop sending what ``exc`` refuses, for good: the sampling extensions when it
        names one of them, else the structured-output field when it refuses that
        (logged ``llm.field_refused``, counted in :data:`REFUSED_FIELDS`). False when it
        refuses neither (the caller raises)."""
        named = next((f for f in self.sampling if _refuses_field(exc, f)), None)
        if named is not None:
            self.sampling = {}
        else:
            field = {"gbnf": "grammar", "json_schema": "response_format"}.get(
                self.structured)
            refused = (_refuses_schema(exc) if field == "response_format"
                       else field is not None and _refuses_field(exc, field))
            if not (grammar and field and refused):
                return False
            named, self.structured = field, "none"
        self.refused_fields.append(named)
        REFUSED_FIELDS[named] = REFUSED_FIELDS.get(named, 0) + 1
        log.warning("llm.field_refused", backend=self.label, field=named,
                    error=str(exc)[:300])
        return True

    async def _complete(self, system: str, user: str, grammar: str | None, n_predict: int,
                        temperature: float, on_token: OnToken | None) -> Completion:
        path, payload = self._body(system, user, grammar, n_predict, temperature,
                                   on_token is not None)
        url = self.client.base_url + path
        if on_token is None:
            response = await self.client._request("POST", path, payload)
            wire = self._decode(response.content, url)
            text = _choice_text(wire.choices[0]) if wire.choices else ""
            if not wire.choices:
                raise LLMBadResponse(f"{self.label} {url} answered without choices", url=url)
            usage = wire.usage or _Usage()
            return Completion(text=text, tokens_predicted=usage.completion_tokens,
                              tokens_evaluated=usage.prompt_tokens,
                              stop_type=wire.choices[0].finish_reason or "")
        response = await self.client._request("POST", path, payload, stream=True)
        try:
            return await self._read_stream(response, url, on_token)
        finally:
            with trio.move_on_after(1.0, shield=True):
                await response.aclose()

    def _decode(self, data: bytes | str, url: str) -> _OpenAIWire:
        try:
            wire: _OpenAIWire = decode_repaired(_openai_decoder, data)
            return wire
        except DECODE_ERRORS as exc:
            raise LLMBadResponse(f"{self.label} {url} body is malformed: {exc}", url=url) from None

    async def _read_stream(self, response: httpx.Response, url: str,
                           on_token: OnToken) -> Completion:
        """Consume ``data: {"choices": ...}`` SSE events until ``data: [DONE]``, under the
        client's stream deadlines (``LlamaClient.stream_deadline``); raises
        :class:`~runtime.services.llm.LLMError` subclasses."""
        pieces: list[str] = []
        finish = ""
        with self.client.stream_deadline(f"{self.label} stream", url) as progress:
            async for raw in sse_lines(response):
                line = raw.strip()
                if line.startswith(("error:", "data:")) and '"error"' in line:
                    overflow = overflow_error(line.partition(":")[2].strip().encode(),
                                              what=f"{self.label} stream error", url=url,
                                              status=response.status_code)
                    if overflow is not None:  # (a prompt too long: the 200-with-an-error shape)
                        raise overflow
                if not line.startswith("data:"):
                    continue
                progress()
                data = line[5:].strip()
                if data == "[DONE]":
                    return Completion(text="".join(pieces), tokens_predicted=len(pieces),
                                      stop_type=finish)
                wire = self._decode(data, url)
                for choice in wire.choices[:1]:
                    piece = _choice_text(choice)
                    if piece:
                        pieces.append(piece)
                        await on_token(piece)
                    finish = choice.finish_reason or finish
        raise LLMStreamIncomplete(f"{self.label} stream {url} ended without [DONE]", url=url)

    async def aclose(self) -> None:
        await self.client.aclose()


class BackendPool:
    """Ordered backends with a sticky choice per partition (module docstring)."""

    def __init__(self, backends: list[Backend]) -> None:
        if not backends:
            raise ValueError("a BackendPool needs at least one backend")
        self.backends = backends
        self.sticky: dict[str, int] = {}

    @property
    def prefills(self) -> bool:
        """Whether the first backend puts a prefill in the model's mouth (a fallback
        taking over may not: its steps then decide alone)."""
        return self.backends[0].prefills

    def current(self, partition: str) -> Backend:
        """The backend ``partition`` sticks to (the first one until one served it)."""
        return self.backends[self.sticky.get(partition, 0)]

    async def complete(self, partition: str, system: str, user: str, *, role: str = "main",
                       grammar: str | None = None, n_predict: int = 256,
                       temperature: float = 0.2, on_token: OnToken | None = None,
                       prefill: Prefill | None = None) -> Completion:
        """Complete on the partition's sticky backend, falling back in order; the backend
        that answers becomes the partition's sticky one. ``prefill``: see
        :class:`Prefill`.

        Raises :class:`~runtime.services.llm.LLMError` (the last failure's class) when every
        backend failed, or the failure of a stream that had already sent tokens.
        """
        start = self.sticky.get(partition, 0)
        order = [(start + i) % len(self.backends) for i in range(len(self.backends))]
        failures: list[str] = []
        last: LLMError | None = None
        for index in order:
            backend = self.backends[index]
            sent = False

            async def relay(piece: str) -> None:
                nonlocal sent
                sent = True
                await on_token(piece)  # type: ignore[misc]  # checked: not None

            try:
                completion = await backend.complete(
                    system, user, role=role, grammar=grammar, n_predict=n_predict,
                    temperature=temperature, on_token=relay if on_token else None,
                    prefill=prefill)
            except LLMError as exc:
                if sent:
                    raise
                failures.append(str(exc))  # LLM errors name their backend first
                last = exc
                log.warning("llm.backend_failed", backend=backend.label, partition=partition,
                            role=role, error=str(exc)[:300])
                continue
            if self.sticky.get(partition, 0) != index:
                log.info("llm.backend_switched", partition=partition, backend=backend.label)
            self.sticky[partition] = index
            return completion
        assert last is not None
        if len(self.backends) == 1:
            raise last
        raise type(last)("every LLM backend failed: " + " | ".join(failures),
                         url=last.url, status=last.status)

    async def context_window(self) -> int | None:
        """The first backend's reported context window (None: not reported)."""
        return await self.backends[0].context_window()

    async def aclose(self) -> None:
        """Close every backend's HTTP client."""
        for backend in self.backends:
            await backend.aclose()


def api_key_for(api_key: str | None, api_key_env: str | None, openai: bool) -> str | None:
    """The bearer token of a backend or embedding block: ``apiKey``, else the environment
    variable named by ``apiKeyEnv`` (default ``OPENAI_API_KEY`` for OpenAI APIs)."""
    if api_key:
        return api_key
    env = api_key_env or ("OPENAI_API_KEY" if openai else None)
    return os.environ.get(env) if env else None


def _api_key(spec: BackendConfig) -> str | None:
    return api_key_for(spec.api_key, spec.api_key_env, spec.api != "llama-server")


def backend_from_spec(spec: BackendConfig, cfg: Config, label: str) -> Backend:
    """One backend from its config block (``llm`` itself or an ``llm.fallbacks`` entry)."""
    client = LlamaClient(spec.url, api_key=_api_key(spec),
                         timeout_s=cfg.llm.request_timeout_ms / 1000, label=label)
    if spec.api == "llama-server":
        return LlamaBackend(client, template=cfg.llm.prompt_template, label=label,
                            structured=spec.structured_output)
    return OpenAIBackend(client, api=spec.api, model=spec.model, grammar=bool(spec.grammar),
                         template=cfg.llm.prompt_template, label=label,
                         structured=spec.structured_output)


def _primary_api(cfg: Config) -> Api:
    """``llm.api`` with a configured ``llm.url``; the embedded server speaks llama.cpp's
    native API."""
    return cfg.llm.api if cfg.llm.url else "llama-server"


def primary_structured_mode(cfg: Config) -> str:
    """The mode the primary backend starts in (``gbnf``, ``json_schema`` or ``none``;
    :func:`runtime.services.structured.resolve_mode`), for the ready line and doctor."""
    return resolve_mode(cfg.llm.structured_output, native=_primary_api(cfg) == "llama-server",
                        grammar_switch=cfg.llm.grammar)


def backends_from_config(cfg: Config, primary_url: str | None) -> list[Backend]:
    """The ordered backends: ``primary_url`` (the configured ``llm.url`` or the embedded
    llama-server the daemon started) with ``llm.api``, then each ``llm.fallbacks``
    entry. Empty when there is no primary URL."""
    if not primary_url:
        return []
    primary = BackendConfig(url=primary_url, api=_primary_api(cfg), api_key=cfg.llm.api_key,
                            api_key_env=cfg.llm.api_key_env, model=cfg.llm.model,
                            grammar=cfg.llm.grammar,
                            structured_output=cfg.llm.structured_output)
    out = [backend_from_spec(primary, cfg, "primary")]
    for n, spec in enumerate(cfg.llm.fallbacks, 1):
        out.append(backend_from_spec(spec, cfg, f"fallback-{n}"))
    return out


WARM_TIMEOUT_S = 300.0
"""Longest a start-up warm-up may take before it is given up (a cold 1.5B prefix on a
loaded 2-core machine takes ~25 s)."""


def warm_file_name(role: str, template: str, system: str) -> str:
    """The slot file of a warmed prefix: ``<role>-<16 hex>.bin``, the hex the start of
    the SHA-256 of the chat template and ``system``, so a changed persona, tool catalog
    or template never restores a stale cache (the model's own identity is the
    directory's, see ``runtime.shell.daemon``)."""
    digest = hashlib.sha256(f"{template}\0{system}".encode()).hexdigest()[:16]
    return f"{role}-{digest}.bin"


async def warm_prefix(pool: BackendPool | None, system: str, *, role: str,
                      partition: str) -> None:
    """Make the server's prompt cache for ``role``'s slot hold ``system`` before the
    first real request: restore it from the slot file an earlier start saved
    (:func:`warm_file_name`, milliseconds), else evaluate it once (one generated token,
    no grammar; seconds on a small CPU) and save it for the next start. Saving and
    restoring need a llama-server started with ``--slot-save-path`` (the embedded one
    is); elsewhere only the evaluation happens. Never raises: an error or
    :data:`WARM_TIMEOUT_S` is logged at debug level; cancellation propagates."""
    if pool is None:
        return
    t0 = trio.current_time()
    backend = pool.current(partition)
    llama = backend if isinstance(backend, LlamaBackend) else None
    name = warm_file_name(role, llama.template, system) if llama is not None else ""
    with trio.move_on_after(WARM_TIMEOUT_S):
        try:
            if llama is not None and await llama.slot_cache(role, "restore", name):
                log.info("llm.warmed", role=role, restored=True,
                         seconds=round(trio.current_time() - t0, 2))
                return
            await pool.complete(partition, system, "Ready?", role=role, grammar=None,
                                n_predict=1, temperature=0.0)
            saved = llama is not None and await llama.slot_cache(role, "save", name)
        except Exception as exc:  # noqa: BLE001 - best effort; the real call reports
            log.debug("llm.warmup_failed", role=role, error=str(exc)[:200])
            return
        log.info("llm.warmed", role=role, restored=False, saved=saved,
                 seconds=round(trio.current_time() - t0, 2))
