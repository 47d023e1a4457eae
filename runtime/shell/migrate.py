"""``atomic-agent memory migrate --to TARGET``: move a state directory's memory to the other
store engine (docs/teams.md), with the daemon stopped.

The memory of the configured engine is written to a private temporary export file
(:func:`actors.store.transfer.export_memory`: every fact version with its provenance,
every note, link, lesson and procedure) and imported into the target
(:func:`actors.store.transfer.import_memory` keeping who wrote each item; idempotent: a
second run adds nothing).
``TARGET`` is a ``postgresql://`` URL (this state directory's tenant on that server) or
``sqlite`` (``<state>/memory.sqlite``). The source is left as it was; the config is not
changed — the command prints the two ``config set`` lines that switch the daemon over.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from actors.store.errors import MemoryFailure
from actors.store.files import FileRoom
from actors.store.notes import MemoryStore
from actors.store.schema import open_database
from actors.store.sql import Connection
from actors.store.transfer import export_memory, import_memory
from runtime.services.config import Config

from .client import ClientError

__all__ = ["migrate_memory"]


def _open(state_dir: Path, cfg: Config, engine: str, url: str | None) -> Connection:
    if engine == "sqlite":
        return open_database(str(state_dir / "memory.sqlite"))
    from actors.store.pg.engine import open_engine_connection, tenant_of, url_of

    store = cfg.memory.store
    return open_engine_connection(url or url_of(state_dir, store.url, store.url_file),
                                  tenant_of(state_dir, store.tenant), size=2)


def migrate_memory(state_dir: Path, cfg: Config, to: str) -> dict[str, Any]:
    """Copy the memory of ``cfg``'s engine into ``to`` (module docstring). Returns
    ``{"from", "to", "exported": counts, "added": counts, "skipped": counts}`` (``to``
    without its password). Raises ClientError: the same engine on both sides, a bad
    target, an unreachable server, an export or import the store refused."""
    source = cfg.memory.store.engine
    if to.startswith(("postgresql://", "postgres://")):
        target, url = "postgres", to
    elif to == "sqlite":
        target, url = "sqlite", None
    else:
        raise ClientError("invalid_argument", f"--to must be a postgresql:// URL or sqlite, not "
                                              f"{to.split('@')[-1]!r}")
    if target == source:
        raise ClientError("invalid_argument", f"this state directory's memory is already on "
                                              f"{source} (memory.store.engine)")
    shown = "sqlite" if url is None else "postgresql://…@" + url.split("@")[-1]
    try:
        src = _open(state_dir, cfg, source, None)
        try:
            with tempfile.TemporaryDirectory(prefix="atomic-agent-migrate-") as tmp:
                room = FileRoom(Path(tmp))
                exported = export_memory(src, "memory.jsonl", room)
                dst = _open(state_dir, cfg, target, url)
                try:
                    imported = import_memory(MemoryStore(dst), "memory.jsonl", room,
                                             keep_provenance=True)
                finally:
                    dst.close()
        finally:
            src.close()
    except MemoryFailure as exc:
        raise ClientError(exc.code, str(exc)) from None
    return {"from": source, "to": shown, "exported": exported["counts"],
            "added": imported["added"], "skipped": imported["skipped"]}
