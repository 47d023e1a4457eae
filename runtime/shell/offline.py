"""Memory commands on a stopped daemon: the same ops, run directly on the file.

``atomic-agent memory …`` talks to the running daemon when there is one. When there
is none, :class:`OfflineMemory` opens ``<state>/memory.sqlite`` itself and runs the
very same operation table (``actors.memory.router.run_op``) with the configured caps,
so results have the same shapes. It is safe next to a daemon that starts meanwhile:
WAL, a 5 s busy timeout and ``BEGIN IMMEDIATE`` writes (a busy database is waited for,
and no read transaction ever has to become a write one, which SQLite may refuse as
busy: https://www.sqlite.org/lang_transaction.html).
A file that is corrupt or from a newer schema is reported, never modified.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import msgspec

from actors.store.stores import file_stats, open_stores
from actors.store.errors import MemoryFailure, StorageFailure
from actors.store.files import FileRoom
from actors.store.schema import open_database
from actors.memory.ops import OPS
from actors.memory.router import OpCall, run_op
from runtime.services.config import Config

from .client import ClientError
from .state import StateError, check_writable, ensure_state_dir, tighten


def _storage_error(exc: apsw.Error, path: Path) -> ClientError:
    """A ClientError for an SQLite failure outside the stores' own typed errors: the
    disk refused (``storage_*``, :class:`StorageFailure`) or anything else SQLite said
    (``database_error``), naming the file; never an apsw traceback."""
    failure = StorageFailure.from_apsw(exc)
    if failure is not None:
        return ClientError(failure.code, str(failure))
    return ClientError("database_error", f"{path}: {exc}")


class OfflineMemory:
    """Duck-types :meth:`runtime.shell.client.DaemonClient.memory` for a stopped daemon.

    Errors: ClientError with the store's code (``invalid_argument``, ``schema_too_new``,
    ``database_corrupt``) and a one-line message.
    """

    session = None

    def __init__(self, state_dir: Path, cfg: Config) -> None:
        self.path = state_dir / "memory.sqlite"
        self.cfg = cfg
        self._conn: apsw.Connection | None = None

    def _open(self) -> apsw.Connection:
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
        """Run ``op`` on the file; returns JSON-shaped data like the daemon would.

        A state directory that does not exist yet (a new install, before the daemon's
        first start) is created by the first write — a store, a fact, an import (moving
        memory to a machine that never ran the daemon) — with the daemon's permissions; a
        read there answers ``not_found`` saying that nothing was stored yet and what
        creates it, so a mistyped ``--state-dir`` never leaves a directory behind. An
        import of a file that does not exist creates nothing."""
        if not self.path.parent.exists():
            spec = OPS.get(op)
            if spec is None or not spec.writes:
                raise ClientError("not_found", (
                    f"no memory at {self.path.parent} yet: nothing was stored there. A "
                    "write creates it (atomic-agent memory notes store \"…\", memory "
                    "profile set KEY VALUE, memory import FILE), and so does atomic-agent "
                    "serve"))
            wanted = (args or {}).get("path")
            if op == "memory.import" and isinstance(wanted, str) and not Path(wanted).is_file():
                raise ClientError("invalid_argument", f"path: no such file: {wanted}")
            try:
                ensure_state_dir(self.path.parent)
            except StateError as exc:
                raise ClientError(exc.code, exc.message) from None
        conn = self._open()
        m = self.cfg.memory
        stores = open_stores(conn, m)
        try:
            if op == "memory.stats":  # (the attach state of embeddings needs a daemon)
                return {"offline": True, **file_stats(stores, m)}
            # The user's own process: files go where the user says, never onto the
            # state directory's own (the live database, its WAL, the token).
            data, _change = run_op(stores, op, args or {}, OpCall(
                source="user", default_k=m.notes.recall_default_k,
                files=FileRoom(None, private=self.path.parent)))
        except MemoryFailure as exc:
            raise ClientError(exc.code, str(exc)) from None
        except apsw.Error as exc:
            raise _storage_error(exc, self.path) from None
        return msgspec.to_builtins(data)

    def close(self) -> None:
        """Close the connection (checkpointing the WAL; a disk that refuses the
        checkpoint leaves it in the WAL, where SQLite finds it next time)."""
        if self._conn is not None:
            try:
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            except apsw.Error:
                pass
            finally:
                self._conn.close()
                self._conn = None
