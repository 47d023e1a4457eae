"""``atomic-agent memory reindex [--prune]``: the backfill in the foreground (seed 001,
DESIGN §8).

It embeds, newest first, every note with content and no vector for the attached model —
after a model switch, or when embeddings are turned on over existing notes — with the
same embedder, ``document`` purpose and writer (``VectorStore.put``, one transaction per
batch) as the backfill actor, and shows its progress on stderr. ``--prune`` then deletes
the vectors of every other model, but only once every note with content has one for the
attached model (otherwise nothing is deleted and it says how many are missing). Old
vectors are kept otherwise, so switching back needs no re-embed.

It works on the file directly, so it refuses to run while a daemon owns the state
directory (whose backfill actor does the same job in the background).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

from actors.backfill.embedder import EmbeddingUnavailable, LocalEmbedder, to_blob
from actors.memory.errors import MemoryFailure
from actors.memory.schema import open_database, write_txn
from actors.memory.vectors import VectorStore

from .client import ClientError
from .config import Config

__all__ = ["reindex"]


def reindex(state_dir: Path, cfg: Config, *, prune: bool = False, batch: int = 64,
            out: TextIO = sys.stderr) -> dict[str, int | str]:
    """Embed every note missing a vector of the local model; with ``prune``, then delete
    other models' vectors. Returns ``{"model", "embedded", "missing", "pruned"}``.

    Raises ``ClientError``: ``embeddings_off`` (``memory.embeddings.enabled`` false),
    ``unsupported_provider`` (not ``local``), ``embedder_unavailable``, ``not_found`` (no
    memory file), or a memory failure's own code (corrupt file, newer schema).
    """
    emb = cfg.memory.embeddings
    if not emb.enabled:
        raise ClientError("embeddings_off", "memory.embeddings.enabled is false: nothing to index")
    if emb.provider != "local":
        raise ClientError("unsupported_provider",
                          f"memory.embeddings.provider {emb.provider!r} is not supported yet")
    path = state_dir / "memory.sqlite"
    if not path.exists():
        raise ClientError("not_found", f"no memory file at {path}")
    try:
        embedder = LocalEmbedder.load()
    except EmbeddingUnavailable as exc:
        raise ClientError("embedder_unavailable", exc.message) from None
    try:
        conn = open_database(str(path))
    except MemoryFailure as exc:
        raise ClientError(exc.code, str(exc)) from None
    vectors = VectorStore(conn)
    try:
        todo_total = vectors.count_missing(embedder.model)
        done, t0 = 0, time.perf_counter()
        while True:
            todo = vectors.missing(embedder.model, batch)
            if not todo:
                break
            rows = embedder.embed([content for _, content in todo], "document")
            written = vectors.put(embedder.model, embedder.dim,
                                  [(i, to_blob(v)) for (i, _), v in zip(todo, rows)])
            done += len(todo)
            rate = done / max(time.perf_counter() - t0, 1e-9)
            print(f"\rreindex: {done}/{todo_total} notes ({rate:.0f} notes/s)", end="",
                  file=out, flush=True)
            if written == 0:  # every note of the batch vanished meanwhile
                break
        if todo_total:
            print(file=out)
        missing = vectors.count_missing(embedder.model)
        pruned = 0
        if prune and missing == 0:
            with write_txn(conn):
                conn.execute("DELETE FROM memory_vectors WHERE model <> ?", (embedder.model,))
                pruned = conn.changes()
        elif prune:
            print(f"reindex: not pruning: {missing} note(s) still have no {embedder.model} "
                  "vector", file=out)
        return {"model": embedder.model, "embedded": done, "missing": missing, "pruned": pruned}
    finally:
        conn.close()
