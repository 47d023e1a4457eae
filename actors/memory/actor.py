"""The memory actor: sole owner of ``memory.sqlite``.

Holds two apsw connections to the file. Writes run in a worker thread behind a
``CapacityLimiter(1)`` (one writer, in a thread) on the writer connection, so the trio loop
keeps routing while a write waits for the lock and writes are serialised; one request
message = one write transaction. Reads (``BuildContext`` and every op whose
``writes`` is false, :mod:`.ops`) run on the trio thread against a second, read connection:
WAL readers never wait for the writer, and skipping the thread hop takes ~0.4 ms off
each turn's context (``bench.recall``). A read that still meets ``SQLITE_BUSY`` (WAL
recovery by another process) is retried on the writer path. The recall counters of
what a read surfaced are bumped after the reply, in the background, in one write
transaction per batch (FIFO behind the limiter, so before any later write). After a
committed write it casts ``MemoryChanged`` to the root (clients subscribed to
``memory``) and, for new notes, ``NotesWritten`` to the backfill actor, which embeds
them off the request path (docs/architecture.md §4, step 15).

A corrupt or unreadable file is never silently replaced: it is moved aside to
``memory.sqlite.corrupt-<unix ms>`` and a fresh file is started; the event is logged
(``memory.quarantined``) and reported by ``memory.stats``. A file from a newer schema
stops the actor with ``SchemaTooNew`` (the daemon refuses to start, data untouched).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

import apsw
import msgspec
import structlog
import trio

from actors.store import cold
from actors.store.activity import ActivityLog
from actors.store.clock import CLOCK
from actors.store.context import MemoryContext, build_context, recall_query
from actors.store.tail import render_context
from actors.store.plans import RecallPlan, RenderBudget, TurnScope
from actors.store.corrections import newest_first
from actors.store.errors import (DatabaseBusy, DatabaseUnavailable, MemoryFailure, OpFailed,
                                 StorageFailure,
                                 ValidationError, now_ms)
from actors.store.errors import ValidationError as _Invalid
from actors.store.files import EXPORTS_DIR, FileRoom
from actors.store.forgetting import apply_forget, restates
from actors.store.fts import content_key
from actors.store.hybrid import VectorSide, hybrid_recall
from actors.store.procedures import ProcedureStep
from actors.store.profile import ProfileFact
from actors.store.query_embedder import QueryEmbedder
from actors.store.recall import LIMITED
from actors.store.schema import BUSY_TIMEOUT_MS
from actors.store.sql import Connection, dialect
from actors.store.transfer import import_steps
from actors.store.staleness import archive_stale
from actors.store.stores import (StoreSet, file_stats, open_or_quarantine, open_reader,
                                 open_stores, store_version)
from actors.store.vectors import VectorCache
from actors.store.wal import IDLE_CHECKPOINT_S, idle_checkpoint, wal_state
from runtime.kernel.actor import ActorContext
from runtime.services.config import ActorBoot
from runtime.services.metrics import Metrics, MetricsRequest, count_process_wide

from .activity import ActivityRecorder, entry_for, writer_of
from .messages import (
    ApplyLinks,
    ApplyReflection,
    ApplyResult,
    ApplyVotes,
    Audited,
    BuildContext,
    BumpOutcomes,
    ClaimClusters,
    FactIn,
    MemoryChanged,
    MemoryMsg,
    MissingVectors,
    NotesWritten,
    PersistDistilled,
    Persisted,
    PutVectors,
    Refused,
    ReleaseCluster,
    SweepCold,
    ToolOp,
    VectorTodo,
)
from . import ops
from .ops import ActivityPage, ContextAnswer
from .router import Change, OpCall, context_answer, import_change, run

T = TypeVar("T")
log = structlog.get_logger()

# The store's process-wide counts, in every metrics snapshot of this process: steps back
# of the wall clock, recalls capped or cut short.
count_process_wide(lambda: {"memory.clock_skew": CLOCK.skews,
                            **{f"memory.recall.limited{{reason={why}}}": n
                               for why, n in LIMITED.items()}})
_ADDS_NOTES = frozenset({ops.NotesStore.name, ops.Import.name, "reflection"})
"""Writes whose new notes the backfill embeds."""
DATABASE_PROBE_S = 2.0
"""Seconds between two probes of the PostgreSQL server (:meth:`MemoryActor.watch_database`)."""
FORGOTTEN_TURNS = 64
"""Turns whose forgotten texts are kept (in memory) for their reflection to check."""


def _same_fact(active: ProfileFact, incoming: FactIn) -> bool:
    """Whether a reflected fact only restates the active one: the same value up to case,
    whitespace and trailing punctuation (``fts.content_key``), the same pinning, and no
    new keywords (an identical or near-identical fact is not written twice)."""
    return (content_key(active.value) == content_key(incoming.value)
            and active.pinned == incoming.pinned
            and (incoming.pinned or not incoming.keywords
                 or sorted(active.keywords) == sorted(incoming.keywords)))


class MemoryActor:
    """Request handlers of the memory actor; see the module docstring."""

    def __init__(self, ctx: ActorContext, boot: ActorBoot, conn: Connection,
                 reader: Connection, quarantined: str | None,
                 team: tuple[Connection, Connection] | None = None) -> None:
        self.ctx = ctx
        self.cfg = boot.config.memory
        self.recall_plan = RecallPlan.from_config(self.cfg)
        self.render_budget = RenderBudget.from_config(self.cfg)
        self.conn = conn
        # PostgreSQL (memory.store.engine): reads are round trips, run on a thread too
        self.remote = dialect(conn) == "postgres"
        self._read_limiter = trio.CapacityLimiter(1)
        # The server's state as the last probe found it (PostgreSQL): /health and metrics.
        self.database: dict[str, Any] = {"engine": "postgres", "up": True, "problem": None,
                                         "since": now_ms(), "outages": 0}
        self.quarantined = quarantined
        self.w = open_stores(conn, self.cfg)
        self.r = open_stores(reader, self.cfg)
        # The team space (PostgreSQL, memory.store.team): its own tenant on the server,
        # written on the writer's thread (team) and read on the reader's (team_r).
        self.team = open_stores(team[0], self.cfg) if team is not None else None
        self.team_r = open_stores(team[1], self.cfg) if team is not None else None
        self.query_embedder = QueryEmbedder(self.cfg.embeddings)
        # Hybrid recall's newest-vectors scan: new vectors are folded in (VectorCache.add).
        self.vector_cache = VectorCache()
        # What the agent's tool calls forgot, per (session, turn): that turn's reflection
        # must not store it again. Oldest turn first; FORGOTTEN_TURNS at most.
        self.forgotten_in_turn: dict[tuple[str, str], list[str]] = {}
        # What the agent forgot at the user's request, per (session, turn), until that
        # turn's reflection reports it with its own (FORGOTTEN_TURNS at most).
        self.agent_forgot: dict[tuple[str, str], ApplyResult] = {}
        # The last write the disk refused, for memory.stats; None until one is.
        self.last_storage_error: dict[str, Any] | None = None
        self._bumps: list[list[int]] = []
        self._flushing = False
        self._limiter = trio.CapacityLimiter(1)
        self._decoder = msgspec.msgpack.Decoder(MemoryMsg | MetricsRequest)
        self.metrics = Metrics()
        self.embed_backend = "backfill" if self.cfg.embeddings.enabled else ""
        # Export, backup and import touch files in <state>/exports/ only (.files).
        self.files = FileRoom(boot.path / EXPORTS_DIR)
        if stale := self.files.remove_stale():  # left by an export killed mid-write
            log.info("memory.stale_temp_files_removed", count=stale)
        self.db_path = boot.path / "memory.sqlite"
        self.activity = self._activity_recorder(boot.path / "activity.sqlite")
        self.last_write = time.monotonic()  # the idle checkpoint waits for a quiet spell
        self.last_checkpoint: dict[str, int] | None = None

    def _activity_recorder(self, path: Path) -> ActivityRecorder:
        """The activity log's recorder: ``path`` on SQLite; on PostgreSQL the server's
        tables, through a connection of its own on the store's pool (its transactions
        are its own)."""
        if self.remote:
            from actors.store.pg.connection import PgConnection

            pool = cast(PgConnection, self.conn).pool
            return ActivityRecorder(lambda: ActivityLog(PgConnection(pool)), self.metrics,
                                    "the PostgreSQL server")
        return ActivityRecorder(lambda: ActivityLog.open_file(path), self.metrics,
                                repr(str(path)))

    async def _db(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` on the worker thread; a lock held past the busy timeout becomes
        DatabaseBusy (code ``database_busy``): a visible, retryable failure for this
        request only, never a crash and never a silent drop."""
        self.last_write = time.monotonic()
        try:
            return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)
        except apsw.BusyError as exc:
            log.error("memory.busy", error=str(exc))
            raise DatabaseBusy(str(exc)) from None
        except apsw.Error as exc:
            failure = StorageFailure.from_apsw(exc)
            if failure is None:
                raise
            log.error("memory.storage_failed", code=failure.code, error=str(exc))
            self.last_storage_error = {"code": failure.code, "message": str(failure),
                                       "at": now_ms()}
            raise failure from None

    async def _read(self, fn: Callable[[StoreSet], T]) -> T:
        """Run the read ``fn`` on the trio thread against the read connection; on
        ``SQLITE_BUSY`` run it again on the writer path (:meth:`_db`). On PostgreSQL
        the read runs on a worker thread of its own (it waits on the network)."""
        if self.remote:
            return await trio.to_thread.run_sync(fn, self.r, limiter=self._read_limiter)
        try:
            return fn(self.r)
        except apsw.BusyError:
            log.info("memory.read_busy")
            return await self._db(fn, self.w)
        except apsw.Error as exc:
            failure = StorageFailure.from_apsw(exc, reading=True)
            if failure is None:
                raise
            raise failure from None

    def _queue_bump(self, ids: list[int]) -> None:
        """Bump the recall counters of ``ids`` after the reply (module docstring)."""
        if not ids:
            return
        self._bumps.append(ids)
        if not self._flushing:
            self._flushing = True
            self.ctx.nursery.start_soon(self._flush_bumps)

    def _drop_cache_if_deleted(self, before: int) -> None:
        """Drop the vector cache when the write just done deleted notes (evicted at the
        cap, forgotten): their cached vectors would still be scanned — setting the
        query's best cosine, taking candidate places and ceiling room — although
        every candidate is read back through the notes table."""
        if self.w.notes.deletions != before:
            self.vector_cache.generation += 1

    async def _flush_bumps(self) -> None:
        try:
            while self._bumps:
                batch, self._bumps = self._bumps, []
                try:
                    await self._db(self._apply_bumps, batch)
                except (DatabaseBusy, StorageFailure, DatabaseUnavailable):
                    log.warning("memory.bumps_dropped", notes=sum(map(len, batch)))
                except trio.Cancelled:
                    # Shutdown while waiting for the worker thread (a write ahead of it):
                    # the batch was not applied; close() applies what is left.
                    self._bumps[:0] = batch
                    raise
        finally:
            self._flushing = False

    def _apply_bumps(self, batch: list[list[int]]) -> None:
        """One transaction; each surfaced list counts once (``bump_recall``)."""
        with self.w.transaction():
            for ids in batch:
                self.w.notes.bump_recall(ids)

    def _run_op(self, s: StoreSet, msg: ToolOp, defer_bump: bool = False
                ) -> tuple[object, Change]:
        return run(s, msg.request, OpCall(
            source=msg.source, session=msg.session, turn=msg.turn, batch=msg.batch,
            client=msg.client, default_k=self.cfg.notes.recall_default_k, defer_bump=defer_bump,
            recall=self._recall_for(s), context=lambda a: self._context_answer(s, msg.session, a),
            files=self.files, team=self._team_of(s)))

    def _team_of(self, s: StoreSet) -> StoreSet | None:
        """The team space's stores for work on ``s``'s thread (writer or reader)."""
        return self.team if s is self.w else self.team_r

    def _run_write_op(self, s: StoreSet, msg: ToolOp) -> tuple[object, Change, list[str]]:
        """:meth:`_run_op` for a write, plus the text it forgot when it deleted a note or
        removed a fact (the note's content, the fact's value), ``[]`` otherwise."""
        text = None
        match msg.request:
            case ops.NotesForget(id=note_id):
                note = s.notes.get(note_id) if note_id > 0 else None
                text = note.content if note is not None else None
            case ops.ProfileRemove(key=key) | ops.ProfilePurge(key=key):
                try:
                    fact = s.profiles.get(key)
                except ValidationError:
                    fact = None
                text = fact.value if fact is not None else None
        data, change = self._run_op(s, msg)
        removed = isinstance(data, (ops.Removed, ops.Purged)) and data.removed
        return data, change, [text] if text and removed else []

    def _context_answer(self, s: StoreSet, session: str | None,
                        a: ops.ContextPreview) -> ContextAnswer:
        """``memory.context``: the turn's context for ``a.message`` with every switch and
        budget of ``memory.*`` applied, no recall counter bumped."""
        ctx = self._build_context(s, BuildContext(session=session or "", user_message=a.message,
                                                  working_dir=a.working_dir))
        return context_answer(ctx, render_context(ctx, self.render_budget, message=a.message))

    def _recall_for(self, s: StoreSet) -> Callable[..., list[Any]]:
        """Notes recall for auto-recall and ``memory.notes.recall``: hybrid once the query
        embedder is attached and ``vectorWeight`` > 0, keyword otherwise; any error from
        the vector side falls back to keyword recall, counted in
        ``agent.memory.recall{mode}``."""
        emb, cfg = self.query_embedder, self.cfg.embeddings

        def recall(query: str, **kw: Any) -> list[Any]:
            kw.pop("bump", None)
            if not emb.attached or cfg.vector_weight <= 0:
                self.metrics.inc("agent.memory.recall", {"mode": "keyword"})
                return s.notes.recall(query, bump=False, **kw)
            if not emb.can_embed(query):  # a server query not fetched (failed, cooling down)
                self.metrics.inc("agent.memory.recall", {"mode": "fallback"})
                return s.notes.recall(query, bump=False, **kw)
            try:
                side = VectorSide(s.vectors, emb.embed, emb.model, cfg.vector_weight,
                                  cfg.brute_force_ceiling, emb.min_cosine, self.vector_cache)
                result = hybrid_recall(
                    s.notes, side, query, k=kw.get("k", self.cfg.notes.recall_default_k),
                    scope=kw.get("scope"), working_dir=kw.get("working_dir"),
                    tags=kw.get("tags"))
            except ValidationError:
                raise  # the caller's arguments, not the vector side
            except Exception as exc:  # noqa: BLE001 - keyword recall on any vector error
                self.metrics.inc("agent.memory.recall", {"mode": "fallback"})
                log.warning("memory.hybrid_failed", error_type=type(exc).__name__,
                            error=str(exc)[:200])
                return s.notes.recall(query, bump=False, **kw)
            if result.overflow:
                self.metrics.inc("agent.memory.recall.vector_overflow", by=result.overflow)
            self.metrics.inc("agent.memory.recall", {"mode": "hybrid"})
            return newest_first(s.notes.conn, result.notes)

        return recall

    async def _changed(self, op: str, change: Change, session: str | None,
                       replaced: list[str] | None = None,
                       replaced_pinned: list[str] | None = None) -> None:
        """Announce a committed write (``op``: the op's name, or ``reflection``) to the
        root, and new notes to the backfill."""
        keys, ids = change.get("keys", []), change.get("ids", [])
        if not keys and not ids:
            return
        await self.ctx.cast("root", MemoryChanged(
            op=op, keys=keys, ids=ids, session=session, replaced=replaced or [],
            replaced_pinned=replaced_pinned or []))
        if ids and op in _ADDS_NOTES and self.embed_backend:
            await self.ctx.cast("backfill", NotesWritten(ids=ids))

    async def on_request(self, src: str, body: msgspec.Raw) -> object:
        """Dispatch one request; counts ``agent.memory.requests{kind}`` and times
        ``agent.memory.request_ms`` (metrics requests themselves excluded)."""
        msg = self._decoder.decode(body)
        if isinstance(msg, MetricsRequest):
            snap = self.metrics.snapshot()
            if self.remote:
                snap["database"] = dict(self.database)
            return snap
        kind = msg.request.name if isinstance(msg, ToolOp) else type(msg).__name__
        t0 = time.monotonic()
        result: object = None
        outcome = "ok"
        try:
            result = await self._dispatch(msg)
            return result
        except (MemoryFailure, apsw.CorruptError, apsw.NotADBError) as exc:
            outcome = getattr(exc, "code", type(exc).__name__)
            raise  # an answer with its code; a damaged file crashes, to be quarantined
        except Exception as exc:
            outcome = getattr(exc, "code", type(exc).__name__)
            if not isinstance(msg, ToolOp):
                raise
            # No client op may crash the actor (errors.OpFailed).
            log.exception("memory.op_failed", op=msg.request.name)
            self.metrics.inc("agent.memory.op_failed", {"op": msg.request.name})
            raise OpFailed(msg.request.name, exc) from None
        finally:
            self.activity.record(self.ctx.nursery, entry_for(msg, result, outcome))
            self.metrics.inc("agent.memory.requests", {"kind": kind})
            self.metrics.observe("agent.memory.request_ms", (time.monotonic() - t0) * 1000)

    async def _dispatch(self, msg: MemoryMsg) -> object:
        match msg:
            case BuildContext():
                if self.cfg.recall_injection.enabled:
                    await self._prepare_query(recall_query(msg.recall_query or msg.user_message))
                context = await self._read(lambda s: self._build_context(s, msg))
                self._queue_bump([n.id for n in context.recalled if n.space is None])
                return context
            case ToolOp(request=ops.Stats()):
                return await self._db(self._stats)
            case ToolOp(request=ops.Activity() as asked):
                return await self._activity(asked)
            case ToolOp(request=ops.Import()):
                return await self._import(msg)
            case ToolOp(request=request) if not request.writes:
                match request:
                    case ops.NotesRecall(query=str(text)):
                        await self._prepare_query(text)
                    case ops.ContextPreview(message=message):
                        await self._prepare_query(recall_query(message))
                data, change = await self._read(lambda s: self._run_op(s, msg, True))
                self._queue_bump(change.get("bump", []))
                return data
            case ToolOp():
                before = self.w.notes.deletions
                try:
                    data, change, gone = await self._db(self._run_write_op, self.w, msg)
                finally:  # a note write adds no vector; only a deletion stales the cache
                    self._drop_cache_if_deleted(before)
                if gone and msg.session and msg.turn:  # (not stored again by reflection)
                    self.forgotten_in_turn[(msg.session, msg.turn)] = (
                        self.forgotten_in_turn.get((msg.session, msg.turn), []) + gone)
                    while len(self.forgotten_in_turn) > FORGOTTEN_TURNS:
                        self.forgotten_in_turn.pop(next(iter(self.forgotten_in_turn)))
                await self._changed(msg.request.name, change, msg.session)
                return data
            case ApplyReflection():
                before = self.w.notes.deletions
                try:
                    result = await self._db(self._apply_reflection, msg)
                finally:
                    self._drop_cache_if_deleted(before)
                turn_key = (msg.session, msg.turn)
                if msg.agent:  # reported again with the turn's reflection
                    self.agent_forgot[turn_key] = result
                    while len(self.agent_forgot) > FORGOTTEN_TURNS:
                        self.agent_forgot.pop(next(iter(self.agent_forgot)))
                elif (earlier := self.agent_forgot.pop(turn_key, None)) is not None:
                    result = _with_earlier_forgets(result, earlier)
                await self._changed("reflection", {
                    "keys": result.fact_keys + result.retired_keys + result.purged_keys,
                    "ids": result.note_ids + result.forgotten_note_ids
                    + result.archived_note_ids + result.rewritten_note_ids},
                    msg.session, result.updated_keys, result.replaced_pinned)
                return result
            case MissingVectors():
                rows = await self._db(self.w.vectors.missing, msg.model, msg.limit,
                                      msg.below)
                return [VectorTodo(id=i, content=c) for i, c in rows]
            case PutVectors():
                pairs = list(zip(msg.ids, msg.vectors))
                written: int | None = None
                try:
                    written = await self._db(self.w.vectors.put, msg.model, msg.dim, pairs)
                    return written
                finally:  # new vectors join the cached scan, or the cache is dropped
                    if (written != len(pairs)  # failed, or skipped ids of deleted notes
                            or not self.vector_cache.add(msg.model, msg.dim, pairs)):
                        self.vector_cache.generation += 1
                    if written and msg.link_new:
                        await self._link_similar(msg)
            case _:
                return await self._cold(msg)

    async def _activity(self, query: ops.Activity) -> ActivityPage:
        """``memory.activity``: the log's page (``limit`` 1..1000, else ValidationError)."""
        if not 1 <= query.limit <= 1000:
            raise ValidationError("limit", "must be 1..1000")
        page = await self.activity.query(query.limit, query.client, query.before, query.reads)
        return msgspec.convert(page, ActivityPage)

    async def _import(self, msg: ToolOp) -> ops.ImportResult:
        """``memory.import`` in steps (:func:`actors.store.transfer.import_steps`): the
        file checked, then written a chunk per transaction, the store's lock let go
        between two, so turns and other writes go on while a large file imports."""
        request = cast(ops.Import, msg.request)
        steps = import_steps(self.w.notes, request.path, self.files)
        try:
            done = None
            while done is None:
                done = await self._db(next, steps)
        finally:
            steps.close()
        result = msgspec.convert(done, ops.ImportResult)
        await self._changed(request.name, import_change(result), msg.session)
        return result

    async def _link_similar(self, msg: PutVectors) -> None:
        """Link newly embedded notes to their nearest notes (``memory.links``
        ``similarityFloor`` / ``similarityLinks``); a failure is logged, never raised
        (the vectors are stored either way)."""
        links = self.cfg.links
        if not links.enabled or links.similarity_floor <= 0:
            return
        try:
            n = await self._db(lambda: cold.similarity_links(
                self.conn, self.w.links, self.w.vectors, model=msg.model, dim=msg.dim,
                new_ids=msg.ids, floor=links.similarity_floor,
                per_note=links.similarity_links,
                ceiling=self.cfg.embeddings.brute_force_ceiling))
        except Exception as exc:  # noqa: BLE001 - links are a bonus, never a failure
            log.warning("memory.similarity_links_failed", error=str(exc)[:200])
            return
        if n:
            self.metrics.inc("agent.memory.links_written", {"source": "similarity"}, by=n)
            await self.ctx.cast("root", MemoryChanged(op="memory.links.generated",
                                                      ids=list(msg.ids)))

    async def _cold(self, msg: Any) -> Any:
        """The cold path's writes (:mod:`cold`): links, votes, outcomes, the
        consolidator's claim / persist / release and the tick's sweeps."""
        w, now = self.w, now_ms()
        match msg:
            case ApplyLinks():
                n = await self._db(cold.apply_links, self.conn, w.links, msg.links)
                if n:
                    await self.ctx.cast("root", MemoryChanged(op="memory.links.generated",
                                                              session=msg.session))
                return n
            case ApplyVotes():
                return await self._db(lambda: cold.apply_votes(
                    self.conn, w.votes, msg.votes, cap=msg.cap, session=msg.session,
                    turn_index=msg.turn_index))
            case BumpOutcomes():
                return await self._db(lambda: cold.bump_outcomes(
                    self.conn, w.lessons, w.procedures, msg.lesson_ids, msg.procedure_ids,
                    success=msg.success))
            case ClaimClusters():
                return await self._db(lambda: cold.claim_clusters(
                    self.conn, now_ms=msg.now_ms, cooldown_ms=msg.cooldown_ms,
                    min_size=msg.min_size, max_clusters=msg.max_clusters,
                    require_shared_tag=msg.require_shared_tag, lease_ms=msg.lease_ms))
            case PersistDistilled():
                d = msg.distilled
                steps = [ProcedureStep(desc, hint or None) for desc, hint in d.steps] or None

                def persist() -> Persisted:
                    try:
                        lesson, proc = cold.persist_distilled(
                            self.conn, w.lessons, w.procedures, msg.cluster,
                            activation=d.activation, principle=d.principle, tags=d.tags,
                            steps=steps, procedure_activation=d.procedure_activation,
                            now_ms=now)
                    except cold.ClusterChanged as exc:
                        return Persisted(changed=str(exc))
                    except _Invalid as exc:
                        return Persisted(error=str(exc))
                    return Persisted(lesson_id=lesson, procedure_id=proc)

                result = await self._db(persist)
                if result.lesson_id is not None:
                    await self.ctx.cast("root", MemoryChanged(op="memory.consolidated",
                                                              ids=list(msg.cluster.ids)))
                return result
            case ReleaseCluster():
                return await self._db(cold.release_leases, self.conn, msg.ids, msg.claimed_at)
            case SweepCold():
                c = self.cfg
                return await self._db(lambda: cold.sweep(
                    self.conn, w.lessons, w.procedures, now_ms=msg.now_ms, decay=msg.decay,
                    lesson_max=c.lessons.max_entries,
                    lesson_age_ms=c.lessons.deprecation_age_ms,
                    procedure_max=c.procedures.max_entries,
                    procedure_age_ms=c.procedures.deprecation_age_ms))

    async def _prepare_query(self, text: str) -> None:
        """Let a server embedder embed the recall query before the (synchronous) read,
        timed in ``agent.memory.query_embed_ms``; nothing to do for the local model or
        when hybrid recall is off."""
        emb = self.query_embedder
        if (emb.embedder is not None and self.cfg.embeddings.vector_weight > 0
                and not emb.embedder.local):
            t0 = time.monotonic()
            await emb.prepare(text)
            self.metrics.observe("agent.memory.query_embed_ms", (time.monotonic() - t0) * 1000)

    async def on_cast(self, src: str, body: msgspec.Raw) -> None:
        """Only :class:`Refused` and :class:`Audited` are cast here (entries for the
        activity log)."""
        try:
            msg = self._decoder.decode(body)
        except msgspec.DecodeError:
            msg = None
        if isinstance(msg, (Refused, Audited)):
            self.activity.record(self.ctx.nursery, entry_for(msg, None, msg.outcome))
        else:
            log.warning("memory.unexpected_cast", src=src)

    def _build_context(self, s: StoreSet, msg: BuildContext) -> MemoryContext:
        """The per-turn context with the plan of ``memory.*`` (:attr:`recall_plan`), and
        with a team (``memory.store.team``) the team space's best notes for the message
        beside the person's own, marked (``space="team"``). Recall counters are left to
        :meth:`_queue_bump`."""
        ctx = build_context(s, msg.user_message, self.recall_plan,
                            TurnScope(session=msg.session, working_dir=msg.working_dir,
                                      recall_text=msg.recall_query,
                                      pinned=None if msg.recalled is None
                                      else tuple(msg.recalled)),
                            recall=self._recall_for(s), bump=False)
        k = self.cfg.store.team_recall_k
        team = self._team_of(s)
        if team is None or not k:
            return ctx
        query = recall_query(msg.recall_query or msg.user_message)
        own = {content_key(n.content) for n in ctx.recalled}
        shared = [msgspec.structs.replace(n, space="team")
                  for n in team.notes.recall(query, k=k, bump=False,
                                                  working_dir=msg.working_dir)
                  if content_key(n.content) not in own]
        if not shared:
            return ctx
        hits = len(ctx.recalled) - ctx.expanded
        return msgspec.structs.replace(
            ctx, recalled=ctx.recalled[:hits] + shared + ctx.recalled[hits:])

    def _apply_reflection(self, msg: ApplyReflection) -> ApplyResult:  # noqa: C901
        """Write every fact and note of one reflection in ONE transaction; invalid items
        are skipped (and counted), never the whole result."""
        keys: list[str] = []
        ids: list[int] = []
        updated: list[str] = []
        replaced_pinned: list[str] = []
        skipped = 0
        stale: list[int] = []
        by = writer_of(msg)
        forgotten = self.forgotten_in_turn.pop((msg.session, msg.turn), [])
        if msg.agent:  # the turn's reflection comes next and reads this list
            forgotten = self.forgotten_in_turn.setdefault((msg.session, msg.turn), forgotten)
        with self.w.transaction():
            retiring = {k: f.value for k in msg.forget.retire_keys
                        if (f := self.w.profiles.get(k)) is not None}
            active = {f.key: f.value for f in self.w.profiles.list()} if msg.agent else {}
            forgot = apply_forget(self.conn, retire_keys=msg.forget.retire_keys,
                                  purge_keys=msg.forget.purge_keys,
                                  targets=msg.forget.targets, now_ms=now_ms(), by=by,
                                  turn_id=msg.turn)
            if msg.agent:  # what the turn's reflection must not store again
                forgotten += [f"{k.replace('_', ' ')} {active[k]}" for k in forgot.purged_keys
                              if k in active] + [" ".join(t) for t in msg.forget.targets]
            self.w.notes.deletions += len(forgot.note_ids)
            for key in forgot.retired_keys:  # "I sold the Civic": its notes are stale too
                stale += archive_stale(self.w.notes, retiring.get(key, ""), "")
            # AUTOINCREMENT ids only grow: a returned id at or below this one is an
            # existing note that the store merged the incoming one into (dedup).
            newest = cast(int, self.conn.execute(
                "SELECT COALESCE(max(id), 0) FROM memories").fetchall()[0][0])
            for fact in msg.facts:
                if forgotten and restates(f"{fact.key.replace('_', ' ')} {fact.value}",
                                          forgotten):
                    skipped += 1
                    self.metrics.inc("memory.reflection.refused", {"reason": "forgotten"})
                    continue
                try:
                    before = self.w.profiles.get(fact.key)
                    if before is not None and _same_fact(before, fact):
                        skipped += 1  # near-identical fact already active
                        continue
                    after = self.w.profiles.set(fact.key, fact.value, pinned=fact.pinned,
                                              keywords=fact.keywords if not fact.pinned else None,
                                              source="reflection", session_id=msg.session,
                                              turn_id=msg.turn, by=by)
                except Exception as exc:  # noqa: BLE001 - validation: skip the line
                    if getattr(exc, "code", None) != "invalid_argument":
                        raise
                    skipped += 1
                    continue
                if after.warning:
                    log.warning("memory.profile.pin_refused", key=after.key, source="reflection")
                if before is not None and before.id == after.id:
                    skipped += 1  # identical fact already active: not written twice
                else:
                    keys.append(after.key)
                    if before is not None:
                        updated.append(after.key)
                        if before.pinned:
                            replaced_pinned.append(after.key)
                        stale += archive_stale(self.w.notes, before.value, after.value,
                                               max_id=newest)
            for note in msg.notes:
                if forgotten and restates(note.body, forgotten):
                    skipped += 1
                    self.metrics.inc("memory.reflection.refused", {"reason": "forgotten"})
                    continue
                tags = ["reflection"] + [t for t in note.tags if t != "reflection"]
                try:
                    stored = self.w.notes.store(note.body, tags=tags, source="agent",
                                              session_id=msg.session, origin="reflection",
                                              turn_id=msg.turn)
                except Exception as exc:  # noqa: BLE001
                    if getattr(exc, "code", None) != "invalid_argument":
                        raise
                    skipped += 1
                    continue
                if stored.id > newest:
                    ids.append(stored.id)
                else:
                    skipped += 1  # near-identical note already stored: merged, not rewritten
        return ApplyResult(fact_keys=keys, note_ids=ids, skipped=skipped, updated_keys=updated,
                           retired_keys=forgot.retired_keys, purged_keys=forgot.purged_keys,
                           forgotten_note_ids=forgot.note_ids, replaced_pinned=replaced_pinned,
                           archived_note_ids=stale,
                           rewritten_note_ids=forgot.rewritten_note_ids)

    def _stats(self) -> dict[str, Any]:
        out = file_stats(self.w, self.cfg)
        out["embeddings"] = {**self.query_embedder.status(), **out["embeddings"]}
        out["quarantinedFile"] = self.quarantined
        out["lastStorageError"] = self.last_storage_error
        if self.remote:
            out["team"] = None if self.team is None else {
                "name": self.cfg.store.team, "notes": self.team.notes.count()}
        else:
            out["wal"] = wal_state(self.db_path, self.last_checkpoint)
        return out

    async def keep_wal_small(self) -> None:
        """Every :data:`.wal.IDLE_CHECKPOINT_S` without a write, checkpoint the WAL and
        truncate it when nothing holds it back (:func:`.wal.idle_checkpoint`); what a
        reader held back is logged once per episode and shown by ``memory stats``."""
        if self.remote:
            return  # the server keeps its own log
        while True:
            await trio.sleep(IDLE_CHECKPOINT_S)
            if time.monotonic() - self.last_write < IDLE_CHECKPOINT_S:
                continue
            try:
                result = await self._db(idle_checkpoint, self.conn, BUSY_TIMEOUT_MS)
            except (MemoryFailure, apsw.Error) as exc:
                log.warning("memory.checkpoint_failed", error=str(exc))
                continue
            held = result["frames"] - result["copied"]
            was_held = bool(self.last_checkpoint and (
                self.last_checkpoint["frames"] > self.last_checkpoint["copied"]))
            if held > 0 and not was_held:
                log.warning("memory.wal_held_back", frames=held,
                            holders=wal_state(self.db_path, result)["heldBackBy"])
            self.last_checkpoint = result  # (_db restarted the idle clock: once a spell)

    async def watch_database(self) -> None:
        """PostgreSQL: probe the server every :data:`DATABASE_PROBE_S` seconds; when it
        stops answering, say so once (log ``memory.database_unavailable``, ``database`` in
        metrics and ``/health``), and once more when it is back (``memory.database_back``;
        the pool has replaced the broken sessions by then). Nothing to do on SQLite."""
        if not self.remote:
            return
        while True:
            await trio.sleep(DATABASE_PROBE_S)
            try:
                with trio.fail_after(DATABASE_PROBE_S * 4):
                    await trio.to_thread.run_sync(
                        lambda: self.r.conn.execute("SELECT 1").fetchall(),
                        limiter=self._read_limiter, abandon_on_cancel=True)
                problem = None
            except trio.TooSlowError:
                problem = "the server does not answer"
            except MemoryFailure as exc:
                problem = str(exc).removeprefix("the memory database is unavailable: ")
            if problem is None and not self.database["up"]:
                log.info("memory.database_back", down_ms=now_ms() - self.database["since"])
                self.metrics.inc("memory.database.reconnects")
                self.database.update(up=True, problem=None, since=now_ms())
            elif problem is not None and self.database["up"]:
                log.error("memory.database_unavailable", error=problem)
                self.database.update(up=False, problem=problem, since=now_ms(),
                                     outages=self.database["outages"] + 1)

    async def attach_embedder(self) -> None:
        """Attach the query embedder (background); once attached, warn once about the
        vectors another model or dimension left behind: they are not scored, the
        backfill re-embeds the notes, ``memory reindex --prune`` deletes them."""
        await self.query_embedder.attach()
        emb = self.query_embedder
        if not emb.attached:
            return
        dim = emb.dim
        try:
            others = await self._db(self.w.vectors.others, emb.model, dim)
        except MemoryFailure as exc:  # (a server away: a warning to give another time)
            log.warning("memory.vectors_check_skipped", error=str(exc))
            return
        if others:
            log.warning("memory.vectors_stale", attached_model=emb.model, attached_dim=dim,
                        stale=[{"model": m, "dim": d, "vectors": n} for m, d, n in others],
                        hint="not scored; the backfill re-embeds the notes for the attached "
                             "model; `atomic-agent memory reindex --prune` deletes the old ones")

    def close(self) -> None:
        """Apply pending recall bumps, close the read connection, checkpoint the WAL
        into the main file and close (shutdown, docs/architecture.md §3)."""
        if self._bumps:
            try:
                self._apply_bumps(self._bumps)
                self._bumps = []
            except (apsw.Error, MemoryFailure) as exc:
                log.warning("memory.bumps_dropped", error=str(exc))
        if self.remote:  # (the writer owns the sessions' pool and closes it)
            self.r.conn.close()
            self.conn.close()
            if self.team is not None and self.team_r is not None:
                self.team_r.conn.close()
                self.team.conn.close()
            return
        self.r.conn.close()
        try:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except apsw.Error as exc:
            log.warning("memory.checkpoint_failed", error=str(exc))
        self.conn.close()


@asynccontextmanager
async def open_actor(ctx: ActorContext, config: bytes) -> AsyncIterator[MemoryActor]:
    """Open ``<state>/memory.sqlite`` (migrating it), or the PostgreSQL server of
    ``memory.store`` (docs/teams.md), and serve; close it on exit."""
    boot = msgspec.msgpack.decode(config, type=ActorBoot)
    path = boot.path / "memory.sqlite"
    conn: Connection
    reader: Connection
    quarantined: str | None = None
    team: tuple[Connection, Connection] | None = None
    if boot.config.memory.store.engine == "postgres":
        from actors.store.pg.engine import open_postgres, open_team

        conn, reader = await trio.to_thread.run_sync(open_postgres, boot.path,
                                                     boot.config.memory.store)
        team = await trio.to_thread.run_sync(open_team, boot.path, boot.config.memory.store)
        where = "postgresql"
    else:
        conn, quarantined = await trio.to_thread.run_sync(open_or_quarantine, path)
        try:
            reader = await trio.to_thread.run_sync(open_reader, path)
        except BaseException:
            conn.close()
            raise
        where = str(path)
    actor = MemoryActor(ctx, boot, conn, reader, quarantined, team)
    await actor.activity.open()
    log.info("memory.opened", path=where, schema=store_version(conn),
             notes=await actor._read(lambda s: s.notes.count()), quarantined=quarantined)
    try:
        # ``ctx.nursery`` is not set until this yields: the embedder attaches in our own.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(actor.attach_embedder)
            nursery.start_soon(actor.keep_wal_small)
            nursery.start_soon(actor.watch_database)
            try:
                yield actor
            finally:
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await actor.query_embedder.aclose()
            # (the log first: on PostgreSQL it writes through the store's pool)
            await trio.to_thread.run_sync(actor.activity.close, limiter=actor.activity.limiter)
            await trio.to_thread.run_sync(actor.close, limiter=actor._limiter)
        log.info("memory.closed")


def _with_earlier_forgets(result: ApplyResult, earlier: ApplyResult) -> ApplyResult:
    """``result`` with what ``earlier`` (the agent's forget in the same turn) retired,
    purged and deleted added, each once."""
    def both(a: list[T], b: list[T]) -> list[T]:
        return list(dict.fromkeys(b + a))

    return msgspec.structs.replace(
        result, retired_keys=both(result.retired_keys, earlier.retired_keys),
        purged_keys=both(result.purged_keys, earlier.purged_keys),
        forgotten_note_ids=both(result.forgotten_note_ids, earlier.forgotten_note_ids),
        rewritten_note_ids=both(result.rewritten_note_ids, earlier.rewritten_note_ids))

