"""Embedding providers behind one async interface.

``memory.embeddings.provider`` picks one:

* ``local`` — :class:`LocalProvider` over :class:`~runtime.services.embeddings.embedder.LocalEmbedder`
  (wordllama, in-process; ``embed`` runs in a worker thread, ``embed_now`` on the caller's
  thread in ~0.2 ms per query).
* ``llama-server`` — :class:`ServerEmbedder` posting ``{"content": text}`` to
  ``<url>/embedding``, one text per request (llama-server started with ``--embeddings``
  and a pooling other than ``none``).
* ``openai`` — :class:`ServerEmbedder` posting ``{"model", "input": [texts],
  "encoding_format": "float"}`` to ``<url>/v1/embeddings`` (OpenAI and every compatible
  server, llama-server's included).

:func:`attach` builds the configured one and **attaches it only after a probe**: a
server model must answer one embed whose length is the model's dimension (the catalog
entry's, or ``memory.embeddings.dim`` for a model the catalog does not know). Anything
else raises :class:`~runtime.services.embeddings.embedder.EmbeddingUnavailable` with the reason in
one line (the caller keeps recall keyword-only and shows the reason in ``memory stats``).

Every embed names its purpose and gets the catalog prefix (:func:`apply_prefix`).
Returned rows are L2-normalised float32. A server row that is zero or not finite (a
``null`` component counts as NaN: llama-server's JSON writer turns NaN into ``null``;
a number beyond float32 as infinite) is reported missing, never stored.

**Hostile answers.** Each HTTP request ends within ``timeout_s`` in all — a
body dripped a byte at a time included — and counts as one failed try when it does not.
A body that is not JSON, nested too deep, of the wrong shape, with a number no float
holds, or with vectors of the wrong length raises ``EmbeddingUnavailable``; so does a
probe whose vector is zero or not finite.

**Inputs too large for the server.** llama-server embeds a text only
when all its tokens fit one physical batch (``-ub``, 512 by default) and otherwise answers
HTTP 500 "input (812 tokens) is too large to process. increase the physical batch size";
OpenAI answers 400 "maximum context length is N tokens, however you requested M". Such a
text is cut to ``len · limit / tokens · 0.9`` characters (half when the message gives no
numbers) and sent again, at most :data:`FIT_ATTEMPTS` requests per text, so a long note
gets the vector of its head; one that still does not fit is reported in
:attr:`Embedded.missing` (stored without a vector; the next backfill pass retries it).
The first time, one warning ``embedding.input_too_large`` names the limit and the server
flags (``-b``/``-ub``) to raise. Other failures (a 4xx, a body of the wrong shape or
dimension; connection errors, timeouts and 5xx after :data:`ATTEMPTS` tries) raise
``EmbeddingUnavailable``: the backfill pass ends quietly, recall falls back to keyword.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from runtime.kernel.lean_imports import import_hiding

import_hiding("httpx", ("httpx._main",))  # its CLI stays out (runtime.kernel.lean_imports)
import httpx  # noqa: E402
import msgspec
import numpy as np
import structlog
import trio

from ..backends import api_key_for
from ..config import EmbeddingsConfig
from ..llm import DECODE_ERRORS, error_detail
from .embedder import (
    LOCAL_MODELS,
    CatalogEntry,
    EmbeddingUnavailable,
    LocalEmbedder,
    apply_prefix,
    catalog_entry,
    normalise_rows,
    to_blob,
)
from .minilm import MiniLMEmbedder

__all__ = ["ATTACH_RETRY_S", "ATTEMPTS", "Embedded", "FIT_ATTEMPTS", "LocalProvider",
           "ServerEmbedder", "attach", "attach_until_ready", "configured_entry", "load_local",
           "parse_vectors",
           "too_large"]

log = structlog.get_logger()

ATTEMPTS = 2
"""Tries per request on a transport error or a 5xx that is not "too large" (bounded
retries; a dead server costs at most this many requests per embed)."""
RETRY_DELAY_S = 0.2
"""Pause (s) before the retry."""
FIT_ATTEMPTS = 3
"""Requests per text at most when the server says it is too large."""
FIT_MARGIN = 0.9
"""Cut to this share of the length the server's numbers say would fit (tokenizers differ
from one text to another, so the cut leaves room)."""
OPENAI_DEFAULT_URL = "https://api.openai.com"
ATTACH_RETRY_S = 30.0
"""A server that could not be attached (down, still loading, wrong model) is probed
again after this many seconds, so starting the embedding server after the daemon works."""
COOLDOWN_S = 30.0
"""After a failed query embedding, recall stays keyword-only this long before asking the
server again (a dead server must not cost every turn a timeout)."""

# At most 18 digits: int() refuses strings of over 4,300 digits (ValueError), and no
# real token count needs more; a longer number reads as "no number" (0).
_TOKENS_RE = re.compile(r"input \((\d{1,18}) tokens\)")
_BATCH_RE = re.compile(r"batch size: (\d{1,18})\b")
_OPENAI_LIMIT_RE = re.compile(
    r"maximum context length is (\d{1,18}) tokens.*?requested (\d{1,18}) tokens", re.S)
_TOO_LARGE_RE = re.compile(r"too large|physical batch|maximum context length|exceeds the "
                           r"available context|input is larger than", re.I)


def load_local(model: str) -> Any:
    """Load the in-process embedder of ``model`` (one of :data:`LOCAL_MODELS`): a
    :class:`LocalEmbedder` or a :class:`~.minilm.MiniLMEmbedder`, both
    with ``model``, ``dim``, ``entry``, ``embed(texts, purpose)`` and ``similarity``.
    Blocking (call it from a worker thread).

    Raises:
        EmbeddingUnavailable (permanent): an unknown local model, or the model's own
            load failure.
    """
    if model == LocalEmbedder.MODEL_ID:
        return LocalEmbedder.load()
    if model == "all-minilm-l6-v2-int8":
        return MiniLMEmbedder.load()
    raise EmbeddingUnavailable(f"the local provider runs {' or '.join(LOCAL_MODELS)}, not "
                               f"{model!r}", permanent=True)



@dataclass
class Embedded:
    """What one embed call produced.

    Attributes:
        vectors: float32 ``(n, dim)``, rows L2-normalised; rows listed in ``missing`` are
            all zero and must not be stored.
        missing: indexes of texts the server could not embed (too large after
            :data:`FIT_ATTEMPTS` requests, or a zero / non-finite row).
        truncated: indexes of texts embedded from a shortened head.
    """

    vectors: np.ndarray
    missing: list[int] = field(default_factory=list)
    truncated: list[int] = field(default_factory=list)

    def rows_for(self, ids: list[int]) -> list[tuple[int, bytes]]:
        """``(id, float32 blob)`` for each embedded text (``ids`` in input order), the
        missing ones left out — what ``VectorStore.put`` / ``PutVectors`` store."""
        lost = set(self.missing)
        return [(note_id, to_blob(self.vectors[k])) for k, note_id in enumerate(ids)
                if k not in lost]


def configured_entry(cfg: EmbeddingsConfig) -> CatalogEntry:
    """The catalog entry of ``memory.embeddings.model``, or one built from
    ``memory.embeddings.dim`` for a model the catalog does not know.

    Raises:
        EmbeddingUnavailable: an unknown model without ``dim``, or a ``dim`` that
            contradicts the catalog.
    """
    entry = catalog_entry(cfg.model)
    if entry is None:
        if cfg.dim is None:
            raise EmbeddingUnavailable(
                f"memory.embeddings.model {cfg.model!r} is not in the catalog; set "
                "memory.embeddings.dim to its vector size to use it", permanent=True)
        return CatalogEntry(cfg.model, cfg.dim)
    if cfg.dim is not None and cfg.dim != entry.dim:
        raise EmbeddingUnavailable(
            f"memory.embeddings.dim {cfg.dim} contradicts the catalog: {entry.id} is "
            f"{entry.dim}-d", permanent=True)
    return entry


def too_large(status: int, message: str) -> tuple[int, int] | None:
    """Whether an error answer says the input does not fit.

    Returns ``(tokens, limit)`` parsed from the message (0 where it gives none), or None
    when the error is of another kind. Source: llama.cpp ``server.cpp`` ("input (N
    tokens) is too large to process. increase the physical batch size (current batch
    size: B)") and OpenAI's "maximum context length is L tokens, however you requested N".
    """
    if status < 400 or not _TOO_LARGE_RE.search(message):
        return None
    if m := _OPENAI_LIMIT_RE.search(message):
        return int(m.group(2)), int(m.group(1))
    tokens = _TOKENS_RE.search(message)
    batch = _BATCH_RE.search(message)
    return (int(tokens.group(1)) if tokens else 0, int(batch.group(1)) if batch else 0)


def _row(value: Any, what: str) -> list[float]:
    """One vector from ``value``: a flat list of numbers, or a list holding exactly one
    such list (llama-server's pooled shape), as floats; a ``null`` component becomes
    NaN (llama-server writes NaN as ``null``), so the row is later reported missing.
    Raises ``ValueError`` for anything else, or an integer too large for a float."""
    if isinstance(value, list) and value and isinstance(value[0], list):
        if len(value) != 1:
            raise ValueError(f"{what} holds {len(value)} rows (per-token vectors: start the "
                             "server with --pooling mean, cls or last, not none)")
        value = value[0]
    if isinstance(value, list) and value:
        # The common case, in C (~6 µs for 768-d instead of ~250 µs): JSON numbers only, no
        # bool, null or string. Otherwise the check below: nulls become NaN, the rest a message.
        with contextlib.suppress(msgspec.ValidationError):
            return msgspec.convert(value, list[float])
    if not isinstance(value, list) or not value or not all(
            x is None or isinstance(x, (int, float)) and not isinstance(x, bool)
            for x in value):
        raise ValueError(f"{what} is not a list of numbers")
    try:
        return [math.nan if x is None else float(x) for x in value]
    except OverflowError:
        raise ValueError(f"{what} holds an integer too large for a float") from None


def parse_vectors(payload: Any, n: int) -> list[list[float]]:
    """The ``n`` vectors of an embedding response, in input order, as floats (``null``
    components as NaN).

    Shapes accepted: ``{"embedding": [..]}`` or ``{"embedding": [[..]]}``
    (one input); OpenAI ``{"data": [{"index", "embedding"}, ...]}``; a top-level list of
    ``{"index"?, "embedding"}`` (current llama-server). Raises ``ValueError`` naming what
    was wrong.
    """
    items: list[Any]
    if isinstance(payload, dict) and "data" in payload:
        items = payload["data"] if isinstance(payload["data"], list) else []
    elif isinstance(payload, dict) and "embedding" in payload:
        items = [payload]
    elif isinstance(payload, list):
        items = payload
    else:
        raise ValueError("response has neither 'embedding' nor 'data'")
    if len(items) != n or not all(isinstance(i, dict) and "embedding" in i for i in items):
        raise ValueError(f"response holds {len(items)} embeddings for {n} input(s)")
    if all(isinstance(i.get("index"), int) for i in items):
        items = sorted(items, key=lambda i: i["index"])
        if [i["index"] for i in items] != list(range(n)):
            raise ValueError("response indexes do not match the inputs")
    return [_row(item["embedding"], f"embedding {k}") for k, item in enumerate(items)]


class LocalProvider:
    """An in-process embedder (wordllama, or MiniLM int8: :func:`load_local`)
    behind the async interface (the default provider).

    Attributes: ``model``, ``dim``, ``entry`` as the embedder's; ``local`` True.
    """

    local: Literal[True] = True

    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder
        self.entry = embedder.entry
        self.model = embedder.model
        self.dim = embedder.dim

    async def embed(self, texts: list[str], purpose: str) -> Embedded:
        """Embed in a worker thread (the model holds the GIL for ~0.1 ms per text)."""
        return Embedded(await trio.to_thread.run_sync(self.embedder.embed, texts, purpose))

    def embed_now(self, text: str, purpose: str) -> np.ndarray:
        """One vector on the caller's thread (recall's ~0.2 ms path), shape ``(dim,)``."""
        vector: np.ndarray = self.embedder.embed([text], purpose)[0]
        return vector

    async def aclose(self) -> None:
        """Nothing to release."""


class ServerEmbedder:
    """An HTTP embedding server (llama-server ``/embedding`` or OpenAI ``/v1/embeddings``).

    Args:
        api: ``"llama-server"`` or ``"openai"``.
        url: base URL (no trailing path).
        entry: the model's catalog entry (dimension, prefixes).
        api_key: bearer token or None.
        timeout_s: bound on one HTTP request (s), its whole body included (a server
            that drips its answer is cut off); a request that runs out is a failed try.
        transport: an ``httpx`` transport (tests).

    Attributes: ``model``, ``dim``, ``entry``; ``local`` False; ``truncated`` and
    ``skipped`` count texts cut to fit and texts left without a vector.
    """

    local: Literal[False] = False

    def __init__(self, api: str, url: str, entry: CatalogEntry, *, api_key: str | None = None,
                 timeout_s: float = 10.0, transport: httpx.AsyncBaseTransport | None = None
                 ) -> None:
        self.api = api
        self.url = url.rstrip("/")
        self.entry, self.model, self.dim = entry, entry.id, entry.dim
        self.endpoint = "/v1/embeddings" if api == "openai" else "/embedding"
        self.timeout_s = timeout_s
        # Requests go straight to the transport (httpx's public transport API), not
        # through an AsyncClient: the client's per-request work (URL merging, cookies,
        # auth and redirect handling) cost ~0.4 ms of CPU of a query embedding's ~1.7 ms
        # on the 2-core bench machine (hybrid recall embeds every query this way).
        try:
            self._target = httpx.URL(self.url + self.endpoint)
        except (httpx.InvalidURL, ValueError) as exc:
            raise EmbeddingUnavailable(f"memory.embeddings.url {url!r} is not a valid URL: "
                                       f"{exc}", permanent=True) from None
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeouts = httpx.Timeout(timeout_s).as_dict()
        self._http = transport if transport is not None else httpx.AsyncHTTPTransport()
        self.truncated = 0
        self.skipped = 0
        self._warned_too_large = False

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._http.aclose()

    async def probe(self) -> None:
        """One embed of a short text; attaches only when it comes back with ``dim``
        finite components, not all zero (docs/architecture.md §4, "Embeddings"; ``_post``
        checks the length).
        Raises ``EmbeddingUnavailable`` naming the URL and why."""
        rows = await self._post(["probe"])
        with np.errstate(over="ignore"):
            vec = normalise_rows(np.asarray(rows, dtype=np.float32))
        if not vec.any():
            raise EmbeddingUnavailable(f"{self.url}{self.endpoint} returns a zero or "
                                       "non-finite vector for the probe text")

    async def embed(self, texts: list[str], purpose: str) -> Embedded:
        """Embed ``texts`` for ``purpose`` (module docstring: retries, cutting a
        note too long for the server's batch to fit).

        Returns :class:`Embedded`. Raises ``EmbeddingUnavailable`` when the server fails
        in any other way, ``ValueError`` for an unknown purpose.
        """
        prefixed = apply_prefix(self.entry, texts, purpose)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        result = Embedded(out)
        if not texts:
            return result
        if self.api == "openai":
            try:
                rows = await self._post(prefixed)
            except _TooLarge:
                rows = None  # some input is too long: fit them one by one
            if rows is not None:
                self._store(result, range(len(texts)), rows)
                self.skipped += len(result.missing)
                return result
        for i, text in enumerate(prefixed):
            row, cut = await self._fit(text)
            if row is None:
                result.missing.append(i)
                continue
            if cut:
                result.truncated.append(i)
            self._store(result, [i], [row])
        self.truncated += len(result.truncated)
        self.skipped += len(result.missing)
        return result

    def _store(self, result: Embedded, indexes: Any, rows: list[list[float]]) -> None:
        for i, row in zip(indexes, rows):
            with np.errstate(over="ignore"):  # beyond float32: inf, then reported missing
                vec = normalise_rows(np.asarray([row], dtype=np.float32))[0]
            if not vec.any():
                log.warning("embedding.bad_vector", model=self.model, url=self.url,
                            reason="zero or non-finite vector")
                result.missing.append(i)
            else:
                result.vectors[i] = vec

    async def _fit(self, text: str) -> tuple[list[float] | None, bool]:
        """One text, cut to fit when the server says it is too large."""
        current = text
        for _ in range(FIT_ATTEMPTS):
            try:
                return (await self._post([current]))[0], current is not text
            except _TooLarge as exc:
                tokens, limit = exc.tokens, exc.limit
                self._warn_too_large(tokens, limit, len(current))
                if tokens > limit > 0:
                    keep = int(len(current) * limit / tokens * FIT_MARGIN)
                else:
                    keep = len(current) // 2
                if keep >= len(current):
                    keep = len(current) // 2
                if keep < 1:
                    break
                current = current[:keep]
        log.warning("embedding.skipped", model=self.model, chars=len(text),
                    reason=f"still too large after {FIT_ATTEMPTS} requests")
        return None, False

    def _warn_too_large(self, tokens: int, limit: int, chars: int) -> None:
        if self._warned_too_large:
            log.debug("embedding.input_too_large", tokens=tokens, limit=limit, chars=chars)
            return
        self._warned_too_large = True
        log.warning(
            "embedding.input_too_large", model=self.model, url=self.url, tokens=tokens,
            limit=limit, chars=chars,
            hint=(f"the embedding server fits {limit or 'too few'} tokens per input; long "
                  "notes are embedded from their head. Raise the physical batch size on "
                  "llama-server (-b and -ub, e.g. -b 2048 -ub 2048) to embed them whole"))

    async def _post(self, texts: list[str]) -> list[list[float]]:
        """POST ``texts``; the vectors, each checked against ``dim``. Each try ends
        within ``timeout_s`` (a slow or dripping answer is a failed try). Raises
        ``_TooLarge`` or ``EmbeddingUnavailable``."""
        body: dict[str, Any]
        if self.api == "openai":
            body = {"model": self.model, "input": texts, "encoding_format": "float"}
        else:
            body = {"content": texts[0]}  # llama-server: one text per request
        where = f"{self.url}{self.endpoint}"
        for attempt in range(ATTEMPTS):
            last = attempt == ATTEMPTS - 1
            failure = ""
            with trio.move_on_after(self.timeout_s) as deadline:
                try:
                    resp = await self._send(body)
                except httpx.HTTPError as exc:
                    failure = f"{type(exc).__name__}: {exc or 'no answer'}"
            if deadline.cancelled_caught:
                failure = f"no complete answer within {self.timeout_s:g} s"
            if failure:
                if last:
                    raise EmbeddingUnavailable(f"{where}: {failure}")
                await trio.sleep(RETRY_DELAY_S)
                continue
            if resp.status_code >= 400:
                message = error_detail(resp.content)
                fit = too_large(resp.status_code, message)
                if fit is not None:
                    raise _TooLarge(*fit)
                if resp.status_code >= 500 and not last:
                    await trio.sleep(RETRY_DELAY_S)
                    continue
                raise EmbeddingUnavailable(f"{where}: HTTP {resp.status_code}: {message}")
            try:
                rows = parse_vectors(msgspec.json.decode(resp.content), len(texts))
            except (*DECODE_ERRORS, ValueError) as exc:
                raise EmbeddingUnavailable(f"{where}: unexpected response: {exc}") from None
            for row in rows:
                if len(row) != self.dim:
                    raise EmbeddingUnavailable(
                        f"{where} returns {len(row)}-d vectors but {self.model} is "
                        f"{self.dim}-d (catalog / memory.embeddings.dim)")
            return rows
        raise AssertionError("unreachable")  # pragma: no cover


    async def _send(self, body: dict[str, Any]) -> httpx.Response:
        """One POST of ``body`` (JSON) through the transport; the whole answer read.
        Raises ``httpx.HTTPError`` (connect, protocol, decoding …)."""
        request = httpx.Request("POST", self._target, headers=self._headers,
                                content=msgspec.json.encode(body),
                                extensions={"timeout": self._timeouts})
        resp = await self._http.handle_async_request(request)
        try:
            await resp.aread()
        finally:
            await resp.aclose()
        return resp


class _TooLarge(EmbeddingUnavailable):
    """The server refused an input as too large; an ``EmbeddingUnavailable``, so
    where it is not fitted (the attach probe) it is one more reason not to attach."""

    def __init__(self, tokens: int, limit: int) -> None:
        super().__init__(f"the server refused an input of {tokens} tokens as too large "
                         f"(limit {limit})")
        self.tokens, self.limit = tokens, limit


async def attach(cfg: EmbeddingsConfig, *, transport: httpx.AsyncBaseTransport | None = None,
                 ) -> LocalProvider | ServerEmbedder:
    """Build and probe the configured embedder (module docstring).

    Returns a :class:`LocalProvider` or an attached :class:`ServerEmbedder` (the caller
    closes it with ``aclose``). Raises ``EmbeddingUnavailable`` with the reason:
    embeddings disabled, the local model mismatch, an unknown model without ``dim``, no
    ``url`` for ``llama-server``, or a probe that failed or had the wrong dimension.
    """
    if not cfg.enabled:
        raise EmbeddingUnavailable("memory.embeddings.enabled is false", permanent=True)
    if cfg.provider == "local":  # the config admits only LOCAL_MODELS; load_local checks too
        embedder = await trio.to_thread.run_sync(load_local, cfg.model, abandon_on_cancel=True)
        return LocalProvider(embedder)
    entry = configured_entry(cfg)
    url = cfg.url or (OPENAI_DEFAULT_URL if cfg.provider == "openai" else None)
    if not url:
        raise EmbeddingUnavailable(
            "memory.embeddings.url is not set (the llama-server embedding server's base URL, "
            "e.g. http://127.0.0.1:19092)", permanent=True)
    server = ServerEmbedder(cfg.provider, url, entry,
                            api_key=api_key_for(cfg.api_key, cfg.api_key_env,
                                                cfg.provider == "openai"),
                            timeout_s=cfg.timeout_ms / 1000, transport=transport)
    try:
        await server.probe()
    except BaseException:
        with trio.CancelScope(shield=True):
            await server.aclose()
        raise
    return server



async def attach_until_ready(cfg: EmbeddingsConfig, on_failure: Callable[[str], None],
                             ) -> LocalProvider | ServerEmbedder | None:
    """:func:`attach`, and again every :data:`ATTACH_RETRY_S` seconds until it attaches
    unless the failure is permanent (no URL, unknown model, the local model missing).

    ``on_failure(reason)`` is called once per distinct reason (the caller logs and shows
    it); a retried reason ends with "(probing again every 30 s)". Returns the embedder,
    or None after a permanent failure.
    """
    last = ""
    while True:
        try:
            return await attach(cfg)
        except EmbeddingUnavailable as exc:
            reason = exc.message if exc.permanent else (
                f"{exc.message} (probing again every {ATTACH_RETRY_S:g} s)")
            if reason != last:
                on_failure(reason)
                last = reason
            if exc.permanent:
                return None
        await trio.sleep(ATTACH_RETRY_S)
