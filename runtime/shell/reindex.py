"""``atomic-agent memory reindex [--prune]``: the backfill in the foreground
(docs/architecture.md §4, step 15).

It embeds, newest first, every note with content and no vector for the attached model —
after a model switch, or when embeddings are turned on over existing notes — with the
same embedder, ``document`` purpose and writer (``VectorStore.put``, one transaction per
batch) as the backfill actor — the configured provider (``local``, ``llama-server``,
``openai``), attached after the same probe — and shows its progress on stderr: a bar,
done / total, notes per second and the time left. A note the embedding server cannot
embed even cut to fit is left without a vector and reported (``skipped``). ``--prune`` then deletes
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

from actors.store.errors import MemoryFailure
from actors.store.schema import open_database, write_txn
from actors.store.vectors import VectorStore
from runtime.services.config import Config
from runtime.services.embeddings.embedder import EmbeddingUnavailable
from runtime.services.embeddings.providers import attach

from .client import ClientError

__all__ = ["progress_line", "reindex"]

BAR_WIDTH = 24
"""Characters of the progress bar."""


def progress_line(done: int, total: int, elapsed_s: float) -> str:
    """``reindex: [#####-----] 150/300 notes  3,027 notes/s  ETA 0:05`` (no newline)."""
    total = max(total, done)
    filled = BAR_WIDTH * done // total if total else BAR_WIDTH
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    left = int((total - done) / rate) if rate > 0 else 0
    return (f"reindex: [{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {done}/{total} notes  "
            f"{rate:,.0f} notes/s  ETA {left // 60}:{left % 60:02d}")


async def reindex(state_dir: Path, cfg: Config, *, prune: bool = False, batch: int = 64,
                  out: TextIO = sys.stderr) -> dict[str, int | str]:
    """Embed every note missing a vector of the configured model; with ``prune``, then
    delete other models' vectors. Returns ``{"model", "embedded", "skipped", "missing",
    "pruned"}``.

    Raises ``ClientError``: ``embeddings_off`` (``memory.embeddings.enabled`` false),
    ``embedder_unavailable`` (the provider did not attach, or stopped answering: the
    vectors written so far are kept), ``not_found`` (no memory file), or a memory
    failure's own code (corrupt file, newer schema).
    """
    emb = cfg.memory.embeddings
    if not emb.enabled:
        raise ClientError("embeddings_off", "memory.embeddings.enabled is false: nothing to index")
    path = state_dir / "memory.sqlite"
    if not path.exists():
        raise ClientError("not_found", f"no memory file at {path}")
    try:
        embedder = await attach(emb)
    except EmbeddingUnavailable as exc:
        raise ClientError("embedder_unavailable", exc.message) from None
    try:
        conn = open_database(str(path))
    except MemoryFailure as exc:
        await embedder.aclose()
        raise ClientError(exc.code, str(exc)) from None
    vectors = VectorStore(conn)
    try:
        todo_total = vectors.count_missing(embedder.model)
        done = skipped = 0
        t0, below = time.perf_counter(), None
        while True:
            todo = vectors.missing(embedder.model, batch, below)
            if not todo:
                break
            below = min(i for i, _ in todo)
            try:
                got = await embedder.embed([content for _, content in todo], "document")
            except EmbeddingUnavailable as exc:
                print(file=out)
                raise ClientError("embedder_unavailable",
                                  f"{exc.message} ({done} notes embedded before it stopped; "
                                  "run reindex again to resume)") from None
            # One transaction per batch; notes the server could not embed are left out.
            vectors.put(embedder.model, embedder.dim, got.rows_for([i for i, _ in todo]))
            done += len(todo)
            skipped += len(got.missing)
            print("\r" + progress_line(done, todo_total, time.perf_counter() - t0), end="",
                  file=out, flush=True)
        if todo_total:
            print(file=out)
        if skipped:
            print(f"reindex: {skipped} note(s) could not be embedded (too long for the "
                  "embedding server; see the warning above) and keep no vector", file=out)
        missing = vectors.count_missing(embedder.model)
        pruned = 0
        if prune and missing == 0:
            with write_txn(conn):
                conn.execute("DELETE FROM memory_vectors WHERE model <> ?", (embedder.model,))
                pruned = conn.changes()
        elif prune:
            print(f"reindex: not pruning: {missing} note(s) still have no {embedder.model} "
                  "vector", file=out)
        return {"model": embedder.model, "embedded": done - skipped, "skipped": skipped,
                "missing": missing, "pruned": pruned}
    finally:
        conn.close()
        await embedder.aclose()
