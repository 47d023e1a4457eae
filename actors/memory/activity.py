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
``Refused`` and recorded with that outcome. The dashboard's and the backfill's successful
reads are not recorded (:data:`UNRECORDED_READERS`).

Entries are buffered and appended every :data:`FLUSH_S` in one transaction, on a worker
thread of their own, so a recall pays a list append, not a disk write. A failure to
write is logged and the batch dropped (counted in ``agent.memory.activity.dropped``): the
log is never a reason to fail a memory request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import structlog
import trio

from actors.store.activity import MAX_IDS, ActivityEntry, ActivityLog, now_ms
from runtime.services.metrics import Metrics

__all__ = ["FLUSH_S", "UNRECORDED_READERS", "ActivityRecorder", "ids_of"]

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
    key), at most MAX_IDS."""
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
            if isinstance(value, (int, str)) and not isinstance(value, bool):
                out.append(value)
    return out[:MAX_IDS]


class ActivityRecorder:
    """Buffers :class:`ActivityEntry` rows and writes them in batches (module docstring).
    ``path``: ``<state>/activity.sqlite``; a file that cannot be opened leaves the
    recorder off (logged), never the actor."""

    def __init__(self, path: Path, metrics: Metrics) -> None:
        self.path = path
        self.metrics = metrics
        self.log: ActivityLog | None = None
        self.pending: list[ActivityEntry] = []
        self.limiter = trio.CapacityLimiter(1)
        self._flushing = False

    async def open(self) -> None:
        try:
            self.log = await trio.to_thread.run_sync(ActivityLog, self.path,
                                                     limiter=self.limiter)
        except (apsw.Error, OSError, ValueError) as exc:  # never a reason to stop memory
            log.warning("memory.activity_unavailable", path=repr(str(self.path)),
                        error=str(exc)[:300])

    def record(self, nursery: trio.Nursery, client: str, op: str, ids: list[int | str],
               outcome: str = "ok") -> None:
        """Queue one entry; the first one after a flush starts the next flush."""
        if self.log is None:
            return
        self.pending.append(ActivityEntry(now_ms(), client, op, ids[:MAX_IDS], outcome))
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
        except apsw.Error as exc:
            self.metrics.inc("agent.memory.activity.dropped", by=len(batch))
            log.warning("memory.activity_write_failed", entries=len(batch), error=str(exc))

    async def query(self, limit: int, client: str | None, before: int | None) -> dict[str, Any]:
        """The log's page (newest first), its clients and its counts, pending entries
        written first; an empty answer when the log is off."""
        if self.log is None:
            return {"entries": [], "clients": [], "kept": 0, "dropped": 0, "enabled": False}
        await self.flush()
        activity = self.log

        def read() -> dict[str, Any]:
            return {"entries": activity.entries(limit=limit, client=client, before=before),
                    "clients": activity.clients(), "kept": activity.count(),
                    "dropped": activity.dropped(), "enabled": True}

        return await trio.to_thread.run_sync(read, limiter=self.limiter)

    def close(self) -> None:
        """Write what is left and close (the actor's shutdown, on its thread)."""
        if self.log is None:
            return
        try:
            self.log.append(self.pending)
        except apsw.Error as exc:
            log.warning("memory.activity_write_failed", entries=len(self.pending),
                        error=str(exc))
        self.pending = []
        self.log.close()
