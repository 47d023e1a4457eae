"""The memory actor's side of the activity log (:mod:`actors.store.activity`): what each
request is recorded as, and the buffer that writes entries in batches off the request
path.

Every :class:`~actors.memory.messages.ToolOp` is recorded under its ``client`` (the
gateway's label for the connection, a client token's name) or, without one, its
``source`` (``agent`` for the agent's tool calls); a turn's context read as
``turn.context`` under the app the turn is for, with what it was given (note ids, fact
keys, ``lesson:<id>``, ``procedure:<id>``); a reflection's writes as
``reflection``. Ids are what the op touched or returned: note ids, fact keys, lesson
and procedure ids (at most :data:`~actors.store.activity.MAX_IDS`). A request a listener
refused before it reached memory (a missing scope, a paused app) is cast here as
``Refused`` and recorded with that outcome; an action outside memory the log must show (a
turn cancelled) is cast as ``Audited``. The dashboard's and the backfill's successful
reads are not recorded (:data:`UNRECORDED_READERS`).

Entries are buffered and appended every :data:`FLUSH_S` in one transaction, on a worker
thread of their own, so a recall pays a list append, not a disk write. A failure to
write is logged and the batch dropped (counted in ``agent.memory.activity.dropped``): the
log is never a reason to fail a memory request. On the PostgreSQL engine a batch the
server could not take (it is away) waits in the buffer for the next flush instead, up to
:data:`BUFFER_MAX` entries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apsw
import structlog
import trio

from actors.store.activity import MAX_IDS, ActivityEntry, ActivityLog, now_ms
from actors.store.errors import DatabaseUnavailable
from actors.store.records import MemoryContext
from runtime.services.metrics import Metrics

from .messages import ApplyReflection, ApplyResult, Audited, BuildContext, Refused, ToolOp
from .ops import Unshare

__all__ = ["FLUSH_S", "UNRECORDED_READERS", "ActivityRecorder", "entry_for", "ids_of",
           "writer_of"]

log = structlog.get_logger()

UNRECORDED_READERS = frozenset({"dashboard", "backfill"})
"""Readers whose successful reads are not recorded: the dashboard's page views (they
would bury what the apps did) and the embedding backfill reading a note to embed it.
Their writes, and any failure, are."""
FLUSH_S = 0.5
"""Seconds entries wait in the buffer before one batch writes them."""
BUFFER_MAX = 5_000
"""Entries held while a write is slow; beyond this the oldest are dropped (counted)."""


def ids_of(data: Any, change: dict[str, Any] | None = None) -> list[int | str]:
    """The ids an op touched: a write's ``change`` (``ids`` then ``keys``), else what it
    returned (a note or fact, as a record or a dict, or a list of them; a fact by its
    key; a team space's note as ``team:<id>``), at most MAX_IDS."""
    out: list[int | str] = []
    if change:
        out += [i for i in change.get("ids", []) if isinstance(i, int)]
        out += [k for k in change.get("keys", []) if isinstance(k, str)]
    if not out:
        items = data if isinstance(data, list) else [data]
        for item in items[:MAX_IDS]:
            if isinstance(item, dict):
                value = item.get("id", item.get("key"))
            else:  # a store record (Note, ProfileFact, ...): its key, else its id
                value = getattr(item, "key", None) or getattr(item, "id", None)
                if getattr(item, "space", None) == "team":  # not one of the person's ids
                    value = f"team:{value}"
            if isinstance(value, (int, str)) and not isinstance(value, bool):
                out.append(value)
    return out[:MAX_IDS]


def writer_of(msg: ApplyReflection) -> str:
    """Who writes an :class:`ApplyReflection`, as the activity log and a fact's
    ``removed_by`` name them: ``agent for <app>`` (the agent's forget in that app's turn)
    or ``reflection for <app>``; without an app, ``agent`` / ``reflection``."""
    who = "agent" if msg.agent else "reflection"
    return f"{who} for {msg.client}" if msg.client else who


def entry_for(msg: Any, result: Any, outcome: str) -> ActivityEntry | None:
    """The activity log's entry for one memory request and what it answered (the module
    docstring says what each kind is recorded as); None for requests that read or write no
    memory (stats, vectors, the cold path's bookkeeping) and for the successful reads of
    :data:`UNRECORDED_READERS`."""
    match msg:
        case ToolOp(request=request):
            writes = request.writes
            if not request.logged or (msg.client in UNRECORDED_READERS and not writes
                                      and outcome == "ok"):
                return None
            ids = ids_of(result) or [
                v for v in (getattr(request, "id", None), getattr(request, "key", None))
                if isinstance(v, (int, str)) and not isinstance(v, bool)]
            if isinstance(request, Unshare) or getattr(request, "space", None) == "team":
                # ids of the team space's own numbering, never one of the person's notes
                ids = [f"team:{i}" if isinstance(i, int) else i for i in ids]
            return ActivityEntry(now_ms(), msg.client or msg.source, request.name,
                                 ids[:MAX_IDS], outcome, writes)
        case BuildContext() if isinstance(result, MemoryContext):
            given: list[int | str] = [f"team:{n.id}" if n.space == "team" else n.id
                                      for n in result.recalled]
            given += [f.key for f in result.profile]
            given += [f"lesson:{x.id}" for x in result.lessons]
            given += [f"procedure:{x.id}" for x in result.procedures]
            return ActivityEntry(now_ms(), msg.client or "agent", "turn.context",
                                 given[:MAX_IDS], outcome)
        case ApplyReflection():
            done: list[int | str] = []
            if isinstance(result, ApplyResult):
                done = list(dict.fromkeys([
                    *result.fact_keys, *result.note_ids, *result.retired_keys,
                    *result.purged_keys, *result.forgotten_note_ids,
                    *result.rewritten_note_ids]))
            if done or outcome != "ok":  # under the app whose turn caused it
                op = "turn.forget" if msg.agent else "reflection"
                return ActivityEntry(now_ms(), writer_of(msg), op, done[:MAX_IDS], outcome,
                                     True)
        case Refused():
            return ActivityEntry(now_ms(), msg.client, msg.op, [], msg.outcome)
        case Audited():
            return ActivityEntry(now_ms(), msg.client, msg.op, list(msg.ids[:MAX_IDS]),
                                 msg.outcome, True)
    return None


class ActivityRecorder:
    """Buffers :class:`ActivityEntry` rows and writes them in batches (module docstring).

    Args:
        opener: makes the :class:`ActivityLog` (on a worker thread, at :meth:`open`):
            ``<state>/activity.sqlite`` on the SQLite engine, the server's tables on
            PostgreSQL. One that fails leaves the recorder off (logged), never the actor.
        metrics: where dropped entries are counted.
        where: what the log is, for the warning when it cannot be opened.
    """

    def __init__(self, opener: Callable[[], ActivityLog], metrics: Metrics, where: str
                 ) -> None:
        self.opener = opener
        self.where = where
        self.metrics = metrics
        self.log: ActivityLog | None = None
        self.pending: list[ActivityEntry] = []
        self.limiter = trio.CapacityLimiter(1)
        self._flushing = False

    async def open(self) -> None:
        try:
            self.log = await trio.to_thread.run_sync(self.opener, limiter=self.limiter)
        except (apsw.Error, OSError, ValueError, DatabaseUnavailable) as exc:
            # never a reason to stop memory
            log.warning("memory.activity_unavailable", path=self.where, error=str(exc)[:300])

    def record(self, nursery: trio.Nursery, entry: ActivityEntry | None) -> None:
        """Queue one entry (None: nothing); the first one after a flush starts the next."""
        if self.log is None or entry is None:
            return
        self.pending.append(entry)
        if len(self.pending) > BUFFER_MAX:
            drop = len(self.pending) - BUFFER_MAX
            del self.pending[:drop]
            self.metrics.inc("agent.memory.activity.dropped", by=drop)
        if not self._flushing:
            self._flushing = True
            nursery.start_soon(self._flush_later)

    async def _flush_later(self) -> None:
        try:
            await trio.sleep(FLUSH_S)
            await self.flush()
        finally:
            self._flushing = False

    async def flush(self) -> None:
        """Write what is pending now (one transaction)."""
        batch, self.pending = self.pending, []
        if not batch or self.log is None:
            return
        try:
            await trio.to_thread.run_sync(self.log.append, batch, limiter=self.limiter)
        except DatabaseUnavailable as exc:  # the server is away: kept for the next flush
            self.pending[:0] = batch
            if len(self.pending) > BUFFER_MAX:
                drop = len(self.pending) - BUFFER_MAX
                del self.pending[:drop]
                self.metrics.inc("agent.memory.activity.dropped", by=drop)
            log.info("memory.activity_write_deferred", entries=len(batch), error=str(exc))
        except apsw.Error as exc:
            self.metrics.inc("agent.memory.activity.dropped", by=len(batch))
            log.warning("memory.activity_write_failed", entries=len(batch), error=str(exc))

    async def query(self, limit: int, client: str | None, before: int | None,
                    reads: bool = True) -> dict[str, Any]:
        """The log's page (newest first; without ``reads`` only writes and refusals), its
        clients and its counts, pending entries written first; an empty answer when the
        log is off."""
        if self.log is None:
            return {"entries": [], "clients": [], "kept": 0, "dropped": 0, "enabled": False}
        await self.flush()
        activity = self.log

        def read() -> dict[str, Any]:
            return {"entries": activity.entries(limit=limit, client=client, before=before,
                                                reads=reads),
                    "clients": activity.clients(), "kept": activity.count(),
                    "dropped": activity.dropped(), "enabled": True}

        return await trio.to_thread.run_sync(read, limiter=self.limiter)

    def close(self) -> None:
        """Write what is left and close (the actor's shutdown, on its thread)."""
        if self.log is None:
            return
        try:
            self.log.append(self.pending)
        except (apsw.Error, DatabaseUnavailable) as exc:
            log.warning("memory.activity_write_failed", entries=len(self.pending),
                        error=str(exc))
        self.pending = []
        self.log.close()
