"""The backfill actor: embeds notes that lack a vector for the attached model
.

Attach. With ``memory.embeddings.enabled`` false the state is ``disabled``: it serves
(status, metrics) but never embeds, and says why in its log (``backfill.inactive``), in
:class:`~actors.backfill.messages.BackfillStatusReply` and in the metrics
(``agent.memory.backfill.inactive{reason}``). Otherwise a background task waits
``backfillStartDelayMs`` (so loading a model does not compete with boot), attaches the
configured provider with :func:`runtime.services.embeddings.providers.attach` (the local wordllama
model in a worker thread, or a ``llama-server`` / ``openai`` server after a probe embed
with the model's dimension; a failure → ``unavailable`` with the reason, recall stays
keyword-only) and then serves two kinds of work, one embed at a time:

* **New notes.** The memory actor casts ``NotesWritten(ids)`` after a note is stored
  (docs/architecture.md §4, step 15). Those ids are fetched
  (``memory.notes.recall {id}``), embedded
  with purpose ``document`` and written with one ``PutVectors``. New notes go first.
* **Backfill pass** (unless ``memory.embeddings.backfill`` is false): loop
  ``MissingVectors(model, limit=backfillBatchSize, below=cursor)`` — newest first, the
  cursor the smallest id of the previous batch — → embed the batch (purpose
  ``document``) → one ``PutVectors`` per batch (one transaction on the memory side, so an
  aborted run leaves only whole batches) → until a batch comes back empty. A note the
  server cannot embed even cut to fit (a note over the model's input limit,
  :mod:`runtime.services.embeddings.providers`) is
  stored without a vector and counted (``agent.memory.backfill.skipped``); the cursor
  moves past it, so the pass never loops and the next boot retries it. Progress is logged (``backfill.started``,
  ``backfill.progress`` at most once a second, ``backfill.done`` with count and
  notes/s), counted (``agent.memory.backfill.embedded``) and timed per batch
  (``agent.memory.backfill.batch_ms``).

Failures end quietly: a model that stops answering or a memory actor
that is unavailable ends the pass with a warning (``backfill.model_failed``,
``backfill.memory_failed``); the next boot resumes, because the vectors written
so far are committed and ``MissingVectors`` skips them.

Shutdown: ``on_shutdown`` cancels the background task before the runtime fails the
pending calls; a batch embed in progress finishes first (small batches: milliseconds),
so the actor exits well within the 3 s shutdown budget.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import msgspec
import structlog
import trio

from actors.memory.client import actor_memory
from actors.memory.messages import MissingVectors, NotesWritten, PutVectors, VectorTodo
from actors.memory.ops import NotesRecall
from actors.memory.ops import Stats as MemoryStats
from runtime.kernel.actor import ActorContext
from runtime.kernel.errors import RuntimeFailure
from runtime.services.config import ActorBoot, EmbeddingsConfig
from runtime.services.embeddings.embedder import EmbeddingUnavailable, cosine
from runtime.services.embeddings.providers import LocalProvider, ServerEmbedder, attach_until_ready
from runtime.services.metrics import Metrics, MetricsRequest

from .messages import (
    BackfillMsg,
    BackfillState,
    BackfillStatus,
    BackfillStatusReply,
    Relevance,
    RelevanceReply,
    Similarity,
    SimilarityReply,
)

T = TypeVar("T")
log = structlog.get_logger()

MEMORY = "memory"
"""Routing name of the memory actor."""
REQUEST_TIMEOUT_S = 30.0
"""Bound (s) on one request to the memory actor; a busy writer answers in ms."""
PROGRESS_EVERY_S = 1.0
"""At most one ``backfill.progress`` line per this many seconds."""
MAX_PENDING_IDS = 10_000
"""Cap on ``NotesWritten`` ids queued while the embedder is not attached yet."""

EMBEDDED = "agent.memory.backfill.embedded"
BATCH_MS = "agent.memory.backfill.batch_ms"
RUNS = "agent.memory.backfill.runs"
INACTIVE = "agent.memory.backfill.inactive"
SKIPPED = "agent.memory.backfill.skipped"
TRUNCATED = "agent.memory.backfill.truncated"


def inactive_reason(cfg: EmbeddingsConfig) -> tuple[BackfillState, str, str] | None:
    """Why this configuration gives the backfill actor nothing to do, or None.

    Returns ``(state, short code, one-line reason)``; state ``disabled`` (switched
    off). Whether an enabled provider can serve is only known once it attaches.
    """
    if not cfg.enabled:
        return "disabled", "disabled", "memory.embeddings.enabled is false"
    return None


RELEVANCE_WAIT_S = 4.0
"""Longest wait (s) of a ``Relevance`` request for the embedder's first attach (a turn
right after the daemon's start: the start delay, 2 s by default, then the load); the
agent gives the request this and 1 s more."""


class BackfillActor:
    """Handlers and the background worker; see the module docstring.

    Attributes:
        state / reason: what :class:`BackfillStatus` reports.
        embedded: vectors written by this process.
        runs: finished backfill passes.
        metrics: this actor's :class:`~runtime.services.metrics.Metrics`.
    """

    def __init__(self, ctx: ActorContext, boot: ActorBoot) -> None:
        self.ctx = ctx
        # Memory as the backfill reads it (its successful reads are not logged).
        self.memory = actor_memory(lambda dest, body, kind: self._request(body, kind),
                                   client="backfill")
        self.cfg = boot.config.memory.embeddings
        self.model = self.cfg.model
        self.batch_size = self.cfg.backfill_batch_size
        self.embedder: LocalProvider | ServerEmbedder | None = None
        self.metrics = Metrics()
        self.embedded = 0
        self.runs = 0
        self.state: BackfillState = "idle"
        self.reason = f"waiting {self.cfg.backfill_start_delay_ms} ms before attaching"
        self.active = True
        inactive = inactive_reason(self.cfg)
        if inactive is not None:
            self.state, code, self.reason = inactive
            self.active = False
            self.metrics.inc(INACTIVE, {"reason": code})
        self._pending: set[int] = set()
        self._sweep_wanted = self.cfg.backfill
        self._wake = trio.Event()
        self._decoder = msgspec.msgpack.Decoder(BackfillMsg)
        self._worker = trio.CancelScope()
        self._attach_tried = trio.Event()  # set once the first attach succeeded or failed

    # ------------------------------------------------------------------ handlers
    async def on_request(self, src: str, body: msgspec.Raw) -> Any:
        """Answer ``BackfillStatus`` (→ :class:`BackfillStatusReply`), ``Similarity``
        (→ :class:`SimilarityReply`), ``Relevance`` (→ :class:`RelevanceReply`) and
        ``MetricsRequest`` (→ snapshot dict)."""
        match self._decoder.decode(body):
            case BackfillStatus():
                return self.status()
            case MetricsRequest():
                return self.metrics.snapshot()
            case NotesWritten() as msg:
                self._note_written(msg.ids)
                return {}
            case Similarity() as msg:
                return await self._similarity(msg)
            case Relevance() as msg:
                return await self._relevance(msg)

    async def _similarity(self, msg: Similarity) -> SimilarityReply:
        """Embed both texts (purpose ``similarity``) off the event loop; a model error
        answers ``cosine=None`` (the caller then skips its check)."""
        embedder = self.embedder
        if embedder is None:
            return SimilarityReply(model=self.model)
        try:
            out = await embedder.embed([msg.a, msg.b], "similarity")
        except EmbeddingUnavailable as exc:
            log.warning("backfill.similarity_failed", error=exc.message)
            return SimilarityReply(model=embedder.model)
        if out.missing:
            return SimilarityReply(model=embedder.model)
        return SimilarityReply(cosine=cosine(out.vectors[0], out.vectors[1]),
                               min_cosine=embedder.entry.min_cosine, model=embedder.model)

    async def _relevance(self, msg: Relevance) -> RelevanceReply:
        """Embed ``msg.text`` and ``msg.others`` in one batch (purpose ``similarity``) off
        the event loop; no embedder, a model error or a missing vector answers
        ``cosines=None`` (the caller then skips its check)."""
        if self.embedder is None and self.active and msg.others:
            # a turn in the daemon's first seconds: the embedder is about to attach
            # (the start delay, then ~0.4 s for MiniLM); the agent waits for it
            with trio.move_on_after(RELEVANCE_WAIT_S):
                await self._attach_tried.wait()
        embedder = self.embedder
        if embedder is None or not msg.others:
            return RelevanceReply(model=self.model)
        try:
            out = await embedder.embed([msg.text, *msg.others], "similarity")
        except EmbeddingUnavailable as exc:
            log.warning("backfill.relevance_failed", error=exc.message)
            return RelevanceReply(model=embedder.model)
        if out.missing:
            return RelevanceReply(model=embedder.model)
        first = out.vectors[0]
        return RelevanceReply(cosines=[cosine(first, v) for v in out.vectors[1:]],
                              chance_cosine=embedder.entry.chance_cosine,
                              model=embedder.model)

    async def on_cast(self, src: str, body: msgspec.Raw) -> None:
        """Handle ``NotesWritten(ids)``: queue the ids and wake the worker."""
        match self._decoder.decode(body):
            case NotesWritten() as msg:
                self._note_written(msg.ids)
            case _:
                log.warning("backfill.unexpected_cast", src=src)

    async def on_shutdown(self) -> None:
        """Stop the background worker before the runtime fails pending calls."""
        self._worker.cancel()

    def status(self) -> BackfillStatusReply:
        """The current :class:`BackfillStatusReply`."""
        return BackfillStatusReply(
            state=self.state, reason=self.reason, model=self.model, embedded=self.embedded,
            dim=self.embedder.dim if self.embedder is not None else 0, runs=self.runs)

    def _note_written(self, ids: list[int]) -> None:
        if not self.active:
            return
        room = MAX_PENDING_IDS - len(self._pending)
        fresh = [i for i in ids if isinstance(i, int) and i > 0]
        if len(fresh) > room:
            log.warning("backfill.pending_overflow", dropped=len(fresh) - room)
            fresh = fresh[:max(room, 0)]
        self._pending.update(fresh)
        self._wake.set()

    # -------------------------------------------------------------------- worker
    async def run(self) -> None:
        """Background task: wait the start delay, attach the embedder, then serve new
        notes and backfill passes until cancelled. Never raises for expected
        failures (they are logged and end the pass)."""
        if not self.active:
            return
        with self._worker:
            await trio.sleep(self.cfg.backfill_start_delay_ms / 1000)
            self.embedder = await attach_until_ready(self.cfg, self._attach_failed)
            self._attach_tried.set()
            if self.embedder is None:
                self.active = False
                return
            self.state, self.reason = "idle", ""
            self.model = self.embedder.model
            log.info("backfill.attached", provider=self.cfg.provider, model=self.embedder.model,
                     dim=self.embedder.dim, backfill=self.cfg.backfill)
            try:
                while True:
                    if self._pending:
                        await self._embed_new()
                    elif self._sweep_wanted:
                        self._sweep_wanted = False
                        await self.sweep()
                    else:
                        await self._wake.wait()
                        self._wake = trio.Event()
            finally:
                with trio.CancelScope(shield=True):
                    await self.embedder.aclose()

    def _attach_failed(self, reason: str) -> None:
        """Record why the embedder did not attach (called once per distinct reason)."""
        self.metrics.inc(INACTIVE, {"reason": "load_failed"})
        log.warning("backfill.unavailable", model=self.model, reason=reason)
        self.state, self.reason = "unavailable", reason
        self._attach_tried.set()

    async def _request(self, body: Any, reply_type: type[T]) -> T:
        with trio.fail_after(REQUEST_TIMEOUT_S):
            return await self.ctx.request(MEMORY, body, reply_type)

    async def _write(self, todo: list[VectorTodo], link_new: bool = False) -> int:
        """Embed ``todo`` (purpose ``document``) and store it with ONE PutVectors.

        Returns the rows written. A note the server could not embed is left
        without a vector, logged ``backfill.skipped`` and counted. Raises
        EmbeddingUnavailable (model failed) or a RuntimeFailure / TooSlowError (memory
        side).
        """
        assert self.embedder is not None
        embedder = self.embedder
        t0 = time.perf_counter()
        out = await embedder.embed([t.content for t in todo], "document")
        if out.truncated:
            self.metrics.inc(TRUNCATED, by=len(out.truncated))
        if out.missing:
            skipped = [todo[i].id for i in out.missing]
            self.metrics.inc(SKIPPED, by=len(skipped))
            log.warning("backfill.skipped", ids=skipped, model=embedder.model,
                        reason="the embedding server could not embed them; stored without a "
                               "vector, retried on the next pass")
        rows = out.rows_for([t.id for t in todo])
        written = 0
        if rows:
            written = await self._request(
                PutVectors(model=embedder.model, dim=embedder.dim, ids=[i for i, _ in rows],
                           vectors=[blob for _, blob in rows], link_new=link_new), int)
        self.metrics.observe(BATCH_MS, (time.perf_counter() - t0) * 1000)
        self.metrics.inc(EMBEDDED, by=written)
        self.embedded += written
        self._pending.difference_update(t.id for t in todo)
        return written

    async def _embed_new(self) -> None:
        """Embed up to one batch of the queued ``NotesWritten`` ids, newest first."""
        ids = sorted(self._pending, reverse=True)[: self.batch_size]
        self._pending.difference_update(ids)
        try:
            todo: list[VectorTodo] = []
            for note_id in ids:
                notes = await self.memory.run(NotesRecall(id=note_id))
                todo += [VectorTodo(id=note_id, content=n.content) for n in notes if n.content]
            if todo:
                written = await self._write(todo, link_new=True)
                log.debug("backfill.new_notes", ids=[t.id for t in todo], written=written)
        except EmbeddingUnavailable as exc:
            log.warning("backfill.model_failed", error=exc.message, ids=ids)
        except (RuntimeFailure, trio.TooSlowError) as exc:
            log.warning("backfill.memory_failed", error=str(exc) or type(exc).__name__,
                        ids=ids)

    async def _remaining(self) -> int | None:
        """Notes still lacking a vector (memory ``Stats``), for progress lines; None if
        the memory actor cannot say."""
        try:
            stats = await self.memory.run(MemoryStats())
            return max(0, int(stats["notes"]) - int(stats["embeddings"]["vectors"]))
        except (RuntimeFailure, trio.TooSlowError, KeyError, TypeError, ValueError):
            return None

    async def sweep(self) -> int:
        """One backfill pass over every note lacking a vector, newest first.

        Returns the vectors written. Ends at the first empty batch, or quietly (a
        warning) when the model or the memory actor fails.
        """
        done, outcome = 0, "done"
        t0 = last = time.perf_counter()
        total = await self._remaining()
        self.state, self.reason = "running", ""
        log.info("backfill.started", model=self.model, remaining=total,
                 batch_size=self.batch_size)
        below: int | None = None
        try:
            while True:
                todo = await self._request(
                    MissingVectors(model=self.model, limit=self.batch_size, below=below),
                    list[VectorTodo])
                if not todo:
                    break
                # The cursor only goes down: a note left without a vector (or written by
                # a concurrent pass) is never asked for twice, so a pass always ends.
                below = min(t.id for t in todo)
                done += await self._write(todo)
                now = time.perf_counter()
                if now - last >= PROGRESS_EVERY_S:
                    last = now
                    log.info("backfill.progress", done=done, total=max(total or 0, done),
                             notes_per_s=round(done / (now - t0), 1))
        except EmbeddingUnavailable as exc:
            outcome = "model_failed"
            log.warning("backfill.model_failed", error=exc.message, done=done)
        except (RuntimeFailure, trio.TooSlowError) as exc:
            outcome = "memory_failed"
            log.warning("backfill.memory_failed", error=str(exc) or type(exc).__name__,
                        done=done)
        finally:
            self.state = "idle"
            self.runs += 1
        elapsed = time.perf_counter() - t0
        self.metrics.inc(RUNS, {"outcome": outcome})
        if outcome == "done":
            log.info("backfill.done", model=self.model, count=done,
                     seconds=round(elapsed, 3),
                     notes_per_s=round(done / elapsed, 1) if elapsed > 0 and done else 0.0)
        else:
            self.reason = f"last pass ended early: {outcome}"
        return done


@asynccontextmanager
async def open_actor(ctx: ActorContext, config: bytes) -> AsyncIterator[BackfillActor]:
    """Decode the :class:`~runtime.services.config.ActorBoot` and serve; the worker runs in a
    nursery owned here (``ctx.nursery`` is not set until this yields) and is
    cancelled on exit."""
    boot = msgspec.msgpack.decode(config, type=ActorBoot)
    actor = BackfillActor(ctx, boot)
    if actor.active:
        log.info("backfill.configured", model=actor.model, backfill=actor.cfg.backfill,
                 start_delay_ms=actor.cfg.backfill_start_delay_ms, batch_size=actor.batch_size)
    else:
        log.info("backfill.inactive", state=actor.state, reason=actor.reason)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        try:
            yield actor
        finally:
            actor._worker.cancel()
            nursery.cancel_scope.cancel()
