"""Every store over one SQLite file, opened the one way the actor, the offline CLI, the
recovery tool and the benchmarks share.

:func:`open_or_quarantine` opens (or quarantines a corrupt file and starts afresh),
:func:`open_stores` builds each store with the caps and policies of ``memory.*`` config,
:func:`open_reader` gives the second, read-only connection, and :func:`file_stats` is
what ``memory stats`` reports of the file itself.
"""

from __future__ import annotations

import os
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import apsw
import structlog

from runtime.services.config import MemoryConfig

from .engine import MemoryEngine
from .errors import DatabaseCorrupt, ValidationError
from .files import FileRoom
from .lessons import LessonStore
from .links import LinkStore
from .notes import MemoryStore
from .plans import RecallPlan, TurnScope
from .procedures import ProcedureStore
from .profile import ProfileStore
from .records import MemoryContext
from .schema import SCHEMA_VERSION, open_database, user_version
from .sql import Connection, dialect, write_txn
from .staleness import archive_stale
from .vectors import VectorStore
from .votes import VoteStore

log = structlog.get_logger()


READ_BUSY_TIMEOUT_MS = 100
"""Busy timeout (ms) of the read connection: past it a read is retried on the
writer path (whose timeout is ``schema.BUSY_TIMEOUT_MS``) instead of blocking the
actor's event loop."""


def open_or_quarantine(path: Path) -> tuple[apsw.Connection, str | None]:
    """Open the database; a corrupt file is moved aside first.

    Besides what :func:`open_database` always detects (not a database, unreadable
    schema), ``check=True`` runs ``PRAGMA quick_check`` before any migration (≈10 ms per
    MB; the default cap of 1,000 notes keeps the file at a few MB), so a file with a bad
    page is quarantined — and can be salvaged with ``memory recover`` — instead of
    failing request by request.

    Returns (connection, quarantined path or None). SchemaTooNew propagates.
    """
    try:
        return open_database(str(path), check=True), None
    except DatabaseCorrupt as exc:
        moved = path.with_name(f"{path.name}.corrupt-{int(time.time() * 1000)}")
        os.replace(path, moved)
        for suffix in ("-wal", "-shm"):
            side = path.with_name(path.name + suffix)
            if side.exists():
                os.replace(side, moved.with_name(moved.name + suffix))
        log.error("memory.quarantined", path=str(path), moved_to=str(moved), error=str(exc))
        return open_database(str(path)), str(moved)


@dataclass(frozen=True)
class StoreSet:
    """Every store over one connection, built with the ``memory.*`` config: the SQLite
    engine of :class:`actors.store.engine.MemoryEngine`."""

    conn: Connection
    profiles: ProfileStore
    notes: MemoryStore
    votes: VoteStore
    lessons: LessonStore
    procedures: ProcedureStore
    links: LinkStore
    vectors: VectorStore

    @classmethod
    def of(cls, profiles: ProfileStore, notes: MemoryStore, *, links: LinkStore | None = None,
           lessons: LessonStore | None = None, procedures: ProcedureStore | None = None,
           votes: VoteStore | None = None) -> StoreSet:
        """The given profile and note stores (and any other given store) with the rest on
        ``notes.conn`` at their defaults (votes disabled: ``memory.votes.tail`` answers
        ``[]``), for a caller that built some stores with its own caps."""
        conn = notes.conn
        return cls(conn=conn, profiles=profiles, notes=notes,
                   votes=votes if votes is not None else VoteStore(conn),
                   lessons=lessons if lessons is not None else LessonStore(conn),
                   procedures=procedures if procedures is not None else ProcedureStore(conn),
                   links=links if links is not None else LinkStore(conn),
                   vectors=VectorStore(conn))


    def transaction(self) -> AbstractContextManager[object]:
        """``BEGIN IMMEDIATE`` … ``COMMIT`` (a savepoint inside an open transaction):
        :func:`actors.store.schema.write_txn`."""
        return write_txn(self.conn)

    def schema_version(self) -> int:
        """``PRAGMA user_version`` (:data:`actors.store.schema.SCHEMA_VERSION` once
        migrated); on PostgreSQL the version in ``atomic_agent_schema``."""
        return store_version(self.conn)

    def export(self, path: str, files: FileRoom, *, overwrite: bool = False) -> object:
        """The JSON-lines export (:func:`actors.store.transfer.export_memory`)."""
        from .transfer import export_memory

        return export_memory(self.conn, path, files, overwrite=overwrite)

    def backup(self, path: str, files: FileRoom, *, overwrite: bool = False) -> object:
        """SQLite's online backup (:func:`actors.store.backup.backup_database`)."""
        from .backup import backup_database

        if dialect(self.conn) == "postgres":
            raise ValidationError("path", "a PostgreSQL memory is backed up by the server "
                                          "(pg_dump, or its replicas); `memory export` writes "
                                          "every item to a file")
        return backup_database(cast(apsw.Connection, self.conn), path, files,
                               overwrite=overwrite)

    def import_file(self, path: str, files: FileRoom) -> object:
        """An export file, imported idempotently (:func:`actors.store.transfer.import_memory`)."""
        from .transfer import import_memory

        return import_memory(self.notes, path, files)

    def archive_stale(self, old_value: str, new_value: str) -> list[int]:
        """:func:`actors.store.staleness.archive_stale` over the notes."""
        return archive_stale(self.notes, old_value, new_value)

    def context(self, message: str, working_dir: str | None = None) -> MemoryContext:
        """:func:`actors.store.context.build_context` with the default plan, unbumped."""
        from .context import build_context

        return build_context(self, message, RecallPlan(), TurnScope(working_dir=working_dir),
                             bump=False)


def store_version(conn: Connection) -> int:
    """The schema version of the store behind ``conn``, on either engine."""
    if dialect(conn) == "postgres":
        rows = conn.execute("SELECT value FROM atomic_agent_schema WHERE name = 'version'"
                            ).fetchall()
        return int(rows[0][0]) if rows else 0
    return user_version(cast(apsw.Connection, conn))


def _is_an_engine(stores: StoreSet) -> MemoryEngine:
    """(For mypy: a StoreSet is a :class:`~actors.store.engine.MemoryEngine`; this
    fails the type check the day it is not.)"""
    return stores


def open_stores(conn: Connection, m: MemoryConfig) -> StoreSet:
    """The stores of ``conn`` with every cap and policy from ``memory.*`` config: the
    one place the actor (writer and read connection) and the offline CLI build them."""
    return StoreSet(
        conn=conn,
        profiles=ProfileStore(conn, max_unpinned=m.profile.max_entries,
                              pinned_budget_chars=m.profile.pinned_budget_chars),
        notes=MemoryStore(conn, max_entries=m.notes.max_entries,
                          max_content_chars=m.notes.max_content_chars,
                          near_threshold=(m.notes.dedup_threshold
                                          if m.notes.dedup_threshold < 1 else None),
                          eviction=m.notes.eviction),
        votes=VoteStore(conn, enabled=m.voting.enabled, max_rows=m.voting.event_log_max_rows),
        lessons=LessonStore(conn),
        procedures=ProcedureStore(conn),
        links=LinkStore(conn),
        vectors=VectorStore(conn),
    )


def file_stats(s: StoreSet, m: MemoryConfig) -> dict[str, Any]:
    """What ``memory.stats`` reports of the file itself (counts, schema, the embedding
    model's vectors), the same with or without a daemon: the memory actor adds the
    query embedder's state, the quarantine and the last storage error; the offline CLI
    adds ``offline: true``."""
    def one(sql: str) -> int:
        return cast(int, s.conn.execute(sql).fetchall()[0][0])

    model = m.embeddings.model
    engine = dialect(s.conn)
    supported = SCHEMA_VERSION
    where: dict[str, Any] = {"engine": engine}
    if engine == "postgres":  # the server's schema, and whose memory this is on it
        from .pg.schema import SCHEMA_VERSION as supported

        where["tenant"] = s.conn.execute(
            "SELECT current_setting('app.tenant')").fetchall()[0][0]
    return {
        **where,
        "schemaVersion": store_version(s.conn),
        "supportedSchemaVersion": supported,
        "profileFacts": one("SELECT count(*) FROM profile_facts WHERE superseded_by IS NULL"),
        "profileHistoryRows": one("SELECT count(*) FROM profile_facts"),
        "notes": s.notes.count(),
        "notesCap": m.notes.max_entries,
        "embeddings": {
            "enabled": m.embeddings.enabled,
            "provider": m.embeddings.provider,
            "model": model,
            "vectors": s.vectors.count(model),
            "otherModelVectors": s.vectors.count_other_models(model),
        },
        "lessons": {"active": s.lessons.count_active(), "total": s.lessons.count_all()},
        "procedures": {"active": s.procedures.count_active(),
                       "total": s.procedures.count_all()},
        "links": s.links.count(),
        "votes": {"enabled": s.votes.enabled, "events": s.votes.count()},
    }


def open_reader(path: Path) -> apsw.Connection:
    """A second connection to the (already migrated) file for reads on the trio
    thread; busy timeout :data:`READ_BUSY_TIMEOUT_MS`."""
    conn = open_database(str(path), apply_migrations=False)
    conn.setbusytimeout(READ_BUSY_TIMEOUT_MS)
    return conn
