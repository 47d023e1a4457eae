"""The memory actor's query embedder: hybrid recall embeds each query
(purpose ``query``) itself, so recall never waits for another actor.

:class:`QueryEmbedder` attaches in the background after the actor starts, after
``memory.embeddings.backfillStartDelayMs`` (start-up stays light and short-lived runs
never load a model), through :func:`runtime.services.embeddings.providers.attach`: the local
wordllama model loads in ~0.7 s in a worker thread; a server model (``llama-server`` /
``openai``) is attached only when its probe embed has the model's dimension. Until then,
and whenever it cannot attach, recall stays keyword-only and :meth:`QueryEmbedder.status`
says why (``memory stats``).

Recall itself is synchronous (it runs on the actor's read connection), so:

* the local model embeds the query on the spot (``embed_now``, ~0.2 ms);
* a server model is asked before the recall: :meth:`QueryEmbedder.prepare` awaits the
  HTTP embed (at most :data:`QUERY_TIMEOUT_S`, or ``timeoutMs`` when shorter) and keeps
  the vector for :meth:`QueryEmbedder.embed`; a failure or timeout leaves no vector, so
  that recall falls back to keyword recall instead of waiting, and for the
  next ``COOLDOWN_S`` (30 s) recall does not ask the server at all (one warning).

A server that cannot be attached at start (down, still loading) is probed again every
``ATTACH_RETRY_S`` (30 s), so the embedding server may start after the daemon.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Literal, TypedDict

import numpy as np
import structlog
import trio

from runtime.services.config import EmbeddingsConfig
from runtime.services.embeddings.embedder import EmbeddingUnavailable
from runtime.services.embeddings.providers import (
    COOLDOWN_S,
    LocalProvider,
    ServerEmbedder,
    attach_until_ready,
)

__all__ = ["QUERY_TIMEOUT_S", "EmbedderStatus", "QueryEmbedder"]

log = structlog.get_logger()

QUERY_TIMEOUT_S = 2.0
"""Longest wait (s) for a server to embed a query before recall goes keyword-only: a
turn's context must not wait the full ``timeoutMs`` for a slow embedding server."""
MEMO_SIZE = 64
"""Query vectors kept (from :meth:`QueryEmbedder.prepare`, or the local model's), the
least recently used dropped first."""


class EmbedderStatus(TypedDict):
    """:meth:`QueryEmbedder.status`: the recall it gives, its state and why."""

    recall: Literal["hybrid", "keyword"]
    state: str
    reason: str


class QueryEmbedder:
    """Attach state and the query embedding (see the module docstring).

    Attributes:
        state: ``"off"`` (disabled), ``"attaching"``, ``"attached"`` or
            ``"unavailable"``; ``reason``: one line on why, when not attached.
        embedder: the attached provider, or None.
    """

    def __init__(self, cfg: EmbeddingsConfig) -> None:
        self.cfg = cfg
        self.embedder: LocalProvider | ServerEmbedder | None = None
        self._memo: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cooldown_until = float("-inf")
        if not cfg.enabled:
            self.state, self.reason = "off", "memory.embeddings.enabled is false"
        else:
            self.state = "attaching"
            self.reason = (f"the {cfg.provider} embedder {cfg.model!r} loads "
                           f"{cfg.backfill_start_delay_ms} ms after the start "
                           "(memory.embeddings.backfillStartDelayMs); until then recall "
                           "is keyword-only")

    @property
    def attached(self) -> bool:
        """True once the model answers queries."""
        return self.embedder is not None

    @property
    def model(self) -> str:
        """The attached (else configured) model id."""
        return self.embedder.model if self.embedder is not None else self.cfg.model

    @property
    def dim(self) -> int:
        """The attached model's dimension (0 when none is attached)."""
        return self.embedder.dim if self.embedder is not None else 0

    @property
    def min_cosine(self) -> float:
        """The attached model's catalog floor for meaning-only hits."""
        assert self.embedder is not None
        return self.embedder.entry.min_cosine

    async def attach(self) -> None:
        """Wait the start delay, then attach the configured provider; never raises for
        one that cannot attach (state ``unavailable``, logged
        ``memory.embedder_unavailable``)."""
        if self.state != "attaching":
            return
        await trio.sleep(self.cfg.backfill_start_delay_ms / 1000)
        embedder = await attach_until_ready(self.cfg, self._attach_failed)
        if embedder is None:
            return
        self._memo.clear()  # vectors of another model, if any
        self.embedder, self.state, self.reason = embedder, "attached", ""
        log.info("memory.embedder_attached", provider=self.cfg.provider, model=embedder.model,
                 dim=embedder.dim)

    def _attach_failed(self, reason: str) -> None:
        log.warning("memory.embedder_unavailable", provider=self.cfg.provider, reason=reason)
        self.state, self.reason = "unavailable", reason

    async def prepare(self, text: str) -> None:
        """Embed ``text.strip()`` ahead of a recall when the model is a server (the
        local model needs nothing). Never raises: a failure is logged
        (``memory.query_embed_failed``) and leaves no vector, so the recall falls back."""
        emb, key = self.embedder, text.strip()
        if emb is None or emb.local or not key or key in self._memo:
            return
        if self.cooling_down:
            return  # the server failed recently: keyword recall, no wait
        wait_s = min(QUERY_TIMEOUT_S, self.cfg.timeout_ms / 1000)
        try:
            with trio.fail_after(wait_s):
                out = await emb.embed([key], "query")
        except (EmbeddingUnavailable, trio.TooSlowError) as exc:
            error = getattr(exc, "message", None) or f"no answer within {wait_s:g} s"
            self._cooldown_until = time.monotonic() + COOLDOWN_S
            self.reason = (f"query embedding failed: {error}; keyword recall for "
                           f"{COOLDOWN_S:g} s")
            log.warning("memory.query_embed_failed", model=emb.model, error=error,
                        keyword_only_s=COOLDOWN_S)
            return
        self.reason = ""
        if out.missing:
            return
        self._memo[key] = out.vectors[0]
        while len(self._memo) > MEMO_SIZE:
            self._memo.popitem(last=False)

    @property
    def cooling_down(self) -> bool:
        """True for ``COOLDOWN_S`` after a failed server query embedding."""
        return time.monotonic() < self._cooldown_until

    def can_embed(self, text: str) -> bool:
        """Whether :meth:`embed` has a vector for ``text`` without waiting: the local
        model always; a server only for a query :meth:`prepare` fetched."""
        emb = self.embedder
        return emb is not None and (emb.local or text.strip() in self._memo)

    def embed(self, text: str) -> np.ndarray:
        """The query's vector (purpose ``query``), shape ``(dim,)``.

        Raises:
            EmbeddingUnavailable: not attached, the model failed, or (server) the query
                was not embedded by :meth:`prepare`.
        """
        emb = self.embedder
        if emb is None:
            raise EmbeddingUnavailable(self.reason or "no embedder attached")
        key = text.strip()
        vec = self._memo.get(key)
        if vec is not None:
            self._memo.move_to_end(key)
            return vec
        if not emb.local:
            raise EmbeddingUnavailable("the query was not embedded by the server in time")
        # One embedding per query text: a turn's recalls (notes, the rewritten query's,
        # the tool calls repeating it) share it.
        vec = emb.embed_now(key, "query")
        vec.flags.writeable = False  # shared by every recall of this query
        self._memo[key] = vec
        while len(self._memo) > MEMO_SIZE:
            self._memo.popitem(last=False)
        return vec

    async def aclose(self) -> None:
        """Close a server embedder's HTTP client."""
        if self.embedder is not None:
            await self.embedder.aclose()

    def status(self) -> EmbedderStatus:
        """``{"recall": "hybrid" | "keyword", "state", "reason"}`` for ``memory stats``."""
        hybrid = self.attached and self.cfg.vector_weight > 0 and not self.cooling_down
        return {"recall": "hybrid" if hybrid else "keyword", "state": self.state,
                "reason": self.reason}
