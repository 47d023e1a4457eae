"""The memory actor's query embedder: hybrid recall embeds each query (purpose
``query``) in-process, in ~0.2 ms with the local wordllama model, so recall never waits
for another actor (DESIGN §8; the backfill actor embeds documents with the same model).

:class:`QueryEmbedder` attaches in the background after the actor starts (after the
backfill start delay, the model loads in ~0.7 s in a worker thread); until then, and whenever it cannot attach, recall
stays keyword-only and :meth:`QueryEmbedder.status` says why (``memory stats``).
Attaching needs ``memory.embeddings.enabled`` and ``provider: "local"`` with the
catalog's local model; the ``llama-server`` and ``openai`` providers are not built yet
and are reported as such.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import structlog
import trio

from actors.backfill.embedder import EmbeddingUnavailable, LocalEmbedder
from runtime.config import EmbeddingsConfig

__all__ = ["QueryEmbedder"]

log = structlog.get_logger()


class QueryEmbedder:
    """Attach state and the query embedding (see the module docstring).

    Attributes:
        state: ``"off"`` (disabled), ``"attaching"``, ``"attached"`` or
            ``"unavailable"``; ``reason``: one line on why, when not attached.
    """

    def __init__(self, cfg: EmbeddingsConfig) -> None:
        self.cfg = cfg
        self.embedder: LocalEmbedder | None = None
        if not cfg.enabled:
            self.state, self.reason = "off", "memory.embeddings.enabled is false"
        elif cfg.provider != "local":
            self.state = "unavailable"
            self.reason = (f"memory.embeddings.provider {cfg.provider!r} is not supported yet; "
                           "recall is keyword-only")
        else:
            self.state, self.reason = "attaching", "loading the local embedder"

    @property
    def attached(self) -> bool:
        """True once the model answers queries."""
        return self.embedder is not None

    @property
    def model(self) -> str:
        """The attached (else configured) model id."""
        return self.embedder.model if self.embedder is not None else self.cfg.model

    @property
    def min_cosine(self) -> float:
        """The attached model's catalog floor for meaning-only hits."""
        assert self.embedder is not None
        return self.embedder.entry.min_cosine

    async def attach(self) -> None:
        """After ``memory.embeddings.backfillStartDelayMs`` (the backfill actor's delay
        too: start-up stays light and short-lived runs never load the model), load the
        local model off the event loop; never raises for a model that cannot load
        (state ``unavailable``, logged ``memory.embedder_unavailable``)."""
        if self.state != "attaching":
            return
        await trio.sleep(self.cfg.backfill_start_delay_ms / 1000)
        try:
            embedder = await trio.to_thread.run_sync(LocalEmbedder.load, abandon_on_cancel=True)
        except EmbeddingUnavailable as exc:
            self.state, self.reason = "unavailable", exc.message
            log.warning("memory.embedder_unavailable", reason=exc.message)
            return
        if embedder.model != self.cfg.model:
            self.state = "unavailable"
            self.reason = (f"memory.embeddings.model {self.cfg.model!r} is not the local model "
                           f"{embedder.model!r}")
            log.warning("memory.embedder_unavailable", reason=self.reason)
            return
        self.embedder, self.state, self.reason = embedder, "attached", ""
        log.info("memory.embedder_attached", model=embedder.model, dim=embedder.dim)

    def embed(self, text: str) -> np.ndarray:
        """The query's vector (purpose ``query``), shape ``(dim,)``; raises
        ``EmbeddingUnavailable`` when not attached or the model fails."""
        if self.embedder is None:
            raise EmbeddingUnavailable(self.reason or "no embedder attached")
        return self.embedder.embed([text], "query")[0]

    def status(self) -> dict[str, Any]:
        """``{"recall": "hybrid" | "keyword", "state", "reason"}`` for ``memory stats``."""
        return {"recall": "hybrid" if self.attached and self.cfg.vector_weight > 0
                else "keyword", "state": self.state, "reason": self.reason}
