"""Memory commands on a stopped daemon: the same ops, run directly on the file.

``atomic-agent memory …`` talks to the running daemon when there is one. When there
is none, :class:`OfflineMemory` opens ``<state>/memory.sqlite`` itself and runs the
very same operations (``actors.memory.router.run``) with the configured caps,
so results have the same shapes. It is safe next to a daemon that starts meanwhile:
WAL, a 5 s busy timeout and ``BEGIN IMMEDIATE`` writes (a busy database is waited for,
and no read transaction ever has to become a write one, which SQLite may refuse as
busy: https://www.sqlite.org/lang_transaction.html).
A file that is corrupt or from a newer schema is reported, never modified.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar, cast

import apsw
import msgspec

from actors.store.stores import file_stats, open_stores
from actors.store.errors import MemoryFailure, StorageFailure
from actors.store.files import FileRoom
from actors.store.schema import open_database
from actors.store.sql import Connection, dialect
from actors.memory import ops
from actors.memory.ops import MemoryOp, decode_op, reply_of
from actors.memory.router import OpCall, run
from runtime.services.config import Config

from .client import ClientError
from .state import StateError, check_writable, ensure_state_dir, tighten

R = TypeVar("R")


def _storage_error(exc: apsw.Error, path: Path) -> ClientError:
    """A ClientError for an SQLite failure outside the stores' own typed errors: the
    disk refused (``storage_*``, :class:`StorageFailure`) or anything else SQLite said
    (``database_error``), naming the file; never an apsw traceback."""
    failure = StorageFailure.from_apsw(exc)
    if failure is not None:
        return ClientError(failure.code, str(failure))
    return ClientError("database_error", f"{path}: {exc}")


class OfflineMemory:
    """:meth:`runtime.shell.client.DaemonClient.run` (and ``memory``) for a stopped
    daemon.

    Errors: ClientError with the store's code (``invalid_argument``, ``schema_too_new``,
    ``database_corrupt``) and a one-line message.
    """

    session = None

    def __init__(self, state_dir: Path, cfg: Config) -> None:
        self.path = state_dir / "memory.sqlite"
        self.cfg = cfg
        self._conn: Connection | None = None

    def _open(self) -> Connection:
        store = self.cfg.memory.store
        if self._conn is None and store.engine == "postgres":
            from actors.store.pg.engine import open_engine_connection, tenant_of, url_of

            state = self.path.parent
            try:  # (the same server, tenant and schema the daemon uses)
                self._conn = open_engine_connection(
                    url_of(state, store.url, store.url_file), tenant_of(state, store.tenant),
                    size=2)
            except MemoryFailure as exc:
                raise ClientError(exc.code, str(exc)) from None
        if self._conn is None:
            if not self.path.parent.exists():
                raise ClientError("not_found", f"no state directory at {self.path.parent}")
            try:
                # Opening writes (WAL, -shm, migrations): say so up front on a
                # read-only state dir instead of failing inside SQLite.
                check_writable(self.path.parent)
                self._conn = open_database(str(self.path))
                tighten(self.path.parent)  # a file SQLite just made follows the umask
            except StateError as exc:
                raise ClientError(exc.code, exc.message) from None
            except MemoryFailure as exc:
                raise ClientError(exc.code, str(exc)) from None
            except apsw.Error as exc:
                raise _storage_error(exc, self.path) from None
        return self._conn

    async def memory(self, op: str, args: dict[str, Any] | None = None) -> Any:
        """:meth:`run` of op ``op`` with JSON ``args``; its reply as JSON, like the
        daemon's ``memory.result``."""
        try:
            request = decode_op(op, args or {})
        except MemoryFailure as exc:
            raise ClientError(exc.code, str(exc)) from None
        return msgspec.to_builtins(await self.run(request))

    async def run(self, request: MemoryOp[R]) -> R:
        """Run ``request`` on the file; its reply, of the same type the daemon answers.

        A state directory that does not exist yet (a new install, before the daemon's
        first start) is created by the first write — a store, a fact, an import (moving
        memory to a machine that never ran the daemon) — with the daemon's permissions; a
        read there answers ``not_found`` saying that nothing was stored yet and what
        creates it, so a mistyped ``--state-dir`` never leaves a directory behind. An
        import of a file that does not exist creates nothing."""
        try:
            ops.check(request)  # text from argv: what SQLite could not bind, named
        except MemoryFailure as exc:
            raise ClientError(exc.code, str(exc)) from None
        if not self.path.parent.exists():
            if not request.writes:
                raise ClientError("not_found", (
                    f"no memory at {self.path.parent} yet: nothing was stored there. A "
                    "write creates it (atomic-agent memory notes store \"…\", memory "
                    "profile set KEY VALUE, memory import FILE), and so does atomic-agent "
                    "serve"))
            if isinstance(request, ops.Import) and not Path(request.path).is_file():
                raise ClientError("invalid_argument", f"path: no such file: {request.path}")
            try:
                ensure_state_dir(self.path.parent)
            except StateError as exc:
                raise ClientError(exc.code, exc.message) from None
        conn = self._open()
        m = self.cfg.memory
        stores = open_stores(conn, m)
        try:
            if isinstance(request, ops.Stats):  # (the attach state of embeddings needs a daemon)
                return cast(R, {"offline": True, **file_stats(stores, m)})
            # The user's own process: files go where the user says, never onto the
            # state directory's own (the live database, its WAL, the token).
            data, _change = run(stores, request, OpCall(
                source="user", default_k=m.notes.recall_default_k,
                files=FileRoom(None, private=self.path.parent)))
        except MemoryFailure as exc:
            raise ClientError(exc.code, str(exc)) from None
        except apsw.Error as exc:
            raise _storage_error(exc, self.path) from None
        return reply_of(request, data)

    def close(self) -> None:
        """Close the connection (checkpointing the WAL; a disk that refuses the
        checkpoint leaves it in the WAL, where SQLite finds it next time)."""
        if self._conn is not None and dialect(self._conn) == "postgres":
            self._conn.close()
        elif self._conn is not None:
            try:
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            except apsw.Error:
                pass
            finally:
                self._conn.close()
                self._conn = None
