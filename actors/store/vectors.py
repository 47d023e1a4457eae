"""Note vectors keyed by (note, model) in ``memory_vectors``.

The backfill actor asks for notes without a vector of the attached model
(:meth:`VectorStore.missing`, newest first) and writes what it embedded
(:meth:`VectorStore.put`, one transaction per batch). A vector row is deleted with its
note (``ON DELETE CASCADE``). Vectors are little-endian float32 blobs of ``dim * 4``
bytes; one model's rows never mix dimensions because ``put`` checks every blob against
the ``dim`` it is given.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import cast

import msgspec
import numpy as np
import structlog

from .errors import ValidationError, require_int, require_positive_id
from .errors import now_ms as _now
from .sql import Connection, dialect, ids_binding, in_ids, write_txn

__all__ = ["VECTOR_BATCH_MAX", "LoadedVectors", "VectorCache", "VectorStore"]

log = structlog.get_logger("actors.store.vectors")

#: Upper bound of one ``missing`` batch (rows).
VECTOR_BATCH_MAX = 10_000

_SQL_MISSING_VECTORS = (
    "SELECT m.id, m.content FROM memories m WHERE m.id < ? AND m.content <> '' AND NOT EXISTS ("
    " SELECT 1 FROM memory_vectors v WHERE v.note_id = m.id AND v.model = ?)"
    " ORDER BY m.id DESC LIMIT ?"
)
_SQL_PUT_VECTOR = (
    "INSERT INTO memory_vectors (note_id, model, dim, vector, created_at)"
    " SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM memories WHERE id = ?)"
    " ON CONFLICT (note_id, model) DO UPDATE SET dim = excluded.dim,"
    " vector = excluded.vector, created_at = excluded.created_at"
)
#: On PostgreSQL the vector is also a pgvector value (``embedding``), for its index.
_SQL_PUT_PG = (
    "INSERT INTO memory_vectors (note_id, model, dim, vector, created_at, embedding)"
    " SELECT ?, ?, ?, ?, ?, ?::vector WHERE EXISTS (SELECT 1 FROM memories WHERE id = ?)"
    " ON CONFLICT (note_id, model) DO UPDATE SET dim = excluded.dim,"
    " vector = excluded.vector, created_at = excluded.created_at,"
    " embedding = excluded.embedding"
)


_INDEXED_DIMS: set[tuple[int, int]] = set()
"""(pool id, dimension) pairs whose HNSW index this process made sure of (PostgreSQL)."""


def _vector_literal(vec: np.ndarray) -> str:
    """``vec`` as pgvector's text form, ``[x,y,...]``."""
    return "[" + ",".join(repr(float(x)) for x in vec) + "]"


_SQL_NEWEST = (
    "SELECT note_id, vector FROM memory_vectors WHERE model = ? AND dim = ?"
    " ORDER BY note_id DESC LIMIT ?"
)
_SQL_BY_IDS = (
    "SELECT note_id, vector FROM memory_vectors WHERE model = ? AND dim = ? AND {ids}"
)


class LoadedVectors(msgspec.Struct, frozen=True):
    """What :meth:`VectorStore.load` scanned: ``ids`` and the matching ``rows``
    (``(len(ids), dim)`` float32), ``overflow`` = vectors of the model left out by the
    ceiling (counted, never silently dropped), ``stale`` = vectors of the model with
    another dimension, never scored."""

    ids: list[int]
    rows: np.ndarray
    overflow: int = 0
    stale: int = 0
    index: dict[int, int] = msgspec.field(default_factory=dict)
    """Row of each id in ``rows`` (``index[ids[j]] == j``)."""
    norms: np.ndarray | None = None
    """L2 norm of each row (float32; may be inf/NaN for a non-finite row, which
    ``cosine_scores`` then scores 0)."""


def _loaded(pairs: list[tuple[int, bytes]], dim: int, *, overflow: int, stale: int
            ) -> LoadedVectors:
    """``(note_id, blob)`` pairs as a :class:`LoadedVectors`, newest (highest id) first."""
    pairs = sorted(pairs, reverse=True)
    ids = [i for i, _ in pairs]
    rows = (np.frombuffer(b"".join(b for _, b in pairs), dtype="<f4").reshape(-1, dim)
            if pairs else np.zeros((0, dim), dtype=np.float32))
    with np.errstate(all="ignore"):
        norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    return LoadedVectors(ids=ids, rows=rows, overflow=overflow, stale=stale,
                         index={i: j for j, i in enumerate(ids)}, norms=norms)


class VectorCache:
    """The last newest-``ceiling`` scan of one (model, dim), reused while
    :attr:`generation` is unchanged. New vectors are folded in (:meth:`add`); the memory
    actor bumps ``generation`` when they cannot be (``PutVectors`` of a re-embed, of older
    notes, or with ids of notes deleted meanwhile) and after a write that deleted notes
    (evicted or forgotten: their vectors would otherwise still be scanned). A note write
    that deletes nothing keeps the cache: invalidating on every write made each recall
    after a turn re-read every vector (``bench/load.py``'s profile: ``VectorStore.load``
    at 14 % of the memory actor under load)."""

    def __init__(self) -> None:
        self.generation = 0
        self._key: tuple[int, str, int, int] | None = None  # (generation, model, dim, ceiling)
        self._value: LoadedVectors | None = None

    def get(self, key: tuple[str, int, int]) -> LoadedVectors | None:
        """The scan stored under ``key`` at the current generation, or None."""
        return self._value if self._key == (self.generation, *key) else None

    def put(self, key: tuple[str, int, int], value: LoadedVectors) -> None:
        """Keep ``value`` (the newest-``ceiling`` scan) for ``key`` (model, dim, ceiling)
        at this generation."""
        self._key, self._value = (self.generation, *key), value

    def add(self, model: str, dim: int, pairs: Sequence[tuple[int, bytes]]) -> bool:
        """Fold vectors just written (``(note_id, float32 bytes)``) into the cached scan,
        without re-reading the table: True when done; False when the cache cannot be
        kept (nothing cached at this generation, another model or dimension, or an id
        not newer than every cached one — a re-embed or an older note), in which case
        the caller bumps :attr:`generation`. The backfill embeds newest first, so under
        a write load new vectors are the common case (``bench/load.py``)."""
        value, key = self._value, self._key
        if value is None or key is None or key[0] != self.generation or key[1:3] != (model, dim):
            return False
        if not pairs:
            return True
        ids = sorted({i for i, _ in pairs}, reverse=True)
        if len(ids) != len(pairs) or (value.ids and ids[-1] <= value.ids[0]):
            return False
        ceiling = key[3]
        fresh = _loaded(list(pairs), dim, overflow=0, stale=value.stale)
        keep = max(0, ceiling - len(fresh.ids))
        old_ids = value.ids[:keep]
        merged_ids = (fresh.ids + old_ids)[:ceiling]
        rows = np.concatenate([fresh.rows, value.rows[:len(old_ids)]])[:ceiling]
        assert value.norms is not None  # (every scan this module builds carries its norms)
        norms = np.concatenate([fresh.norms, value.norms[:len(old_ids)]])[:ceiling]
        dropped = len(fresh.ids) + len(value.ids) - len(merged_ids)
        self._value = LoadedVectors(
            ids=merged_ids, rows=rows, overflow=value.overflow + dropped, stale=value.stale,
            index={i: j for j, i in enumerate(merged_ids)}, norms=norms)
        return True


class VectorStore:
    """Read and write note vectors on ``conn`` (a connection from
    ``schema.open_database``)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def missing(self, model: str, limit: int, below: int | None = None
                ) -> list[tuple[int, str]]:
        """Return ``(id, content)`` of notes without a vector for ``model``, newest
        (highest id) first; ``limit`` clamped into [1, 10000]. ``below``: only ids
        smaller than this — a pass's cursor, so a note the embedder had to skip is not
        asked for again in the same pass.

        Raises:
            ValidationError: fields ``model``, ``limit``, ``below``.
        """
        model = self._model(model)
        limit = min(VECTOR_BATCH_MAX, max(1, require_int(limit, "limit")))
        top = 2**63 - 1 if below is None else min(require_int(below, "below"), 2**63 - 1)
        return [(r[0], r[1])
                for r in self.conn.execute(_SQL_MISSING_VECTORS, (top, model, limit))]

    def put(self, model: str, dim: int, rows: Sequence[tuple[int, bytes]]) -> int:
        """Upsert ``(note_id, float32 bytes)`` vectors of ``model`` in one transaction.

        Each vector must be exactly ``dim * 4`` bytes (little-endian float32). Ids of
        notes that no longer exist are skipped (logged at debug level:
        ``memory.vector_for_missing_note``). Returns the rows written.

        Raises:
            ValidationError: fields ``model``, ``dim``, ``vector``, ``id``.
        """
        model = self._model(model)
        dim = require_positive_id(dim, "dim")
        prepared: list[tuple[int, bytes]] = []
        for note_id, blob in rows:
            data = bytes(blob)
            if len(data) != dim * 4:
                raise ValidationError(
                    "vector", f"must be {dim * 4} bytes ({dim} float32), got {len(data)}"
                )
            prepared.append((require_positive_id(note_id), data))
        now = _now(None)
        written = 0
        postgres = dialect(self.conn) == "postgres"
        with write_txn(self.conn):
            if postgres and prepared:
                self._ensure_index(dim)
            for note_id, data in prepared:
                if postgres:
                    literal = _vector_literal(np.frombuffer(data, dtype="<f4"))
                    self.conn.execute(_SQL_PUT_PG, (note_id, model, dim, data, now, literal,
                                                    note_id))
                else:
                    self.conn.execute(_SQL_PUT_VECTOR, (note_id, model, dim, data, now,
                                                        note_id))
                if self.conn.changes():
                    written += 1
                else:  # forgotten while it was being embedded: nothing written
                    log.debug("memory.vector_for_missing_note", note=note_id)
        return written

    def _ensure_index(self, dim: int) -> None:
        """Make sure the server has the HNSW index of ``dim`` (once per process and
        database; :data:`actors.store.pg.schema.VECTOR_INDEX_FUNCTION`)."""
        key = (id(getattr(self.conn, "pool", self.conn)), dim)
        if key in _INDEXED_DIMS:
            return
        from .pg.schema import VECTOR_INDEX_FUNCTION

        self.conn.execute(f"SELECT {VECTOR_INDEX_FUNCTION}(?)", (dim,)).fetchall()
        _INDEXED_DIMS.add(key)

    def nearest(self, model: str, query: np.ndarray, limit: int) -> dict[int, float]:
        """The ``limit`` notes whose ``model`` vectors are nearest ``query`` by cosine,
        over every vector of the tenant: ``{note id: cosine}``, found by the server's
        HNSW index (approximate, as HNSW is) on PostgreSQL; ``{}`` on SQLite, which has
        no such index (its scan stops at the brute-force ceiling). A vector whose cosine
        is not a number (all zeros) is left out."""
        if dialect(self.conn) != "postgres" or not query.size:
            return {}
        from .pg.schema import HNSW_MAX_DIM

        dim = int(query.shape[0])
        if dim > HNSW_MAX_DIM:
            return {}
        literal = _vector_literal(query)
        typed = f"embedding::vector({dim})"
        rows = self.conn.execute(
            f"SELECT note_id, 1 - ({typed} <=> ?::vector({dim})) FROM memory_vectors"
            f" WHERE model = ? AND dim = {dim}"
            f" ORDER BY {typed} <=> ?::vector({dim}) LIMIT ?",
            (literal, self._model(model), literal, max(1, min(limit, 1000)))).fetchall()
        return {int(i): float(c) for i, c in rows if c is not None and math.isfinite(c)}

    def count(self, model: str) -> int:
        """Return how many vectors of ``model`` are stored."""
        sql = "SELECT count(*) FROM memory_vectors WHERE model = ?"
        return cast(int, self.conn.execute(sql, (self._model(model),)).fetchall()[0][0])

    @staticmethod
    def _model(model: object) -> str:
        if not isinstance(model, str) or not model.strip():
            raise ValidationError("model", "must be a non-empty string")
        return model

    def load(self, model: str, dim: int, ceiling: int, also: Iterable[int] = (),
             cache: VectorCache | None = None) -> LoadedVectors:
        """The vectors hybrid recall scans: every vector of ``model`` with
        dimension ``dim`` up to ``ceiling`` (``memory.embeddings.bruteForceCeiling``);
        above it the newest ``ceiling`` plus those of ``also`` (the keyword hits). With
        ``cache``, the newest-``ceiling`` scan is reused until its generation changes.

        Raises:
            ValidationError: fields ``model``, ``dim``, ``ceiling``.
        """
        model = self._model(model)
        dim = require_positive_id(dim, "dim")
        ceiling = require_positive_id(ceiling, "ceiling")
        newest = cache.get((model, dim, ceiling)) if cache is not None else None
        if newest is None:
            total = cast(int, self.conn.execute(
                "SELECT count(*) FROM memory_vectors WHERE model = ? AND dim = ?",
                (model, dim)).fetchall()[0][0])
            stale = cast(int, self.conn.execute(
                "SELECT count(*) FROM memory_vectors WHERE model = ? AND dim <> ?",
                (model, dim)).fetchall()[0][0])
            newest = _loaded(cast(list[tuple[int, bytes]], self.conn.execute(
                _SQL_NEWEST, (model, dim, ceiling)).fetchall()),
                             dim, overflow=max(0, total - ceiling), stale=stale)
            if cache is not None:
                cache.put((model, dim, ceiling), newest)
        wanted = [i for i in also if i not in newest.index]
        if not newest.overflow or not wanted:
            return newest  # the common case: the cached scan as it is, no copy
        extra = cast(list[tuple[int, bytes]], self.conn.execute(
            _SQL_BY_IDS.format(ids=in_ids(self.conn, "note_id")),
            (model, dim, ids_binding(self.conn, wanted))).fetchall())
        both = _loaded(extra, dim, overflow=newest.overflow, stale=newest.stale)
        if not both.ids:
            return newest
        if not newest.ids or both.ids[0] < newest.ids[-1]:
            # The usual case: the keyword hits outside the newest-``ceiling`` scan are all
            # older than it, so appending them keeps the newest-first order (one copy,
            # no re-sort; bench/load.py's profile).
            n = len(newest.ids)
            ids = [*newest.ids, *both.ids]
            return LoadedVectors(
                ids=ids, rows=np.concatenate([newest.rows, both.rows]),
                overflow=newest.overflow, stale=newest.stale,
                index={**newest.index, **{i: n + j for j, i in enumerate(both.ids)}},
                norms=np.concatenate([newest.norms, both.norms]))
        ids = sorted([*newest.ids, *both.ids], reverse=True)
        rows = np.concatenate([newest.rows, both.rows])
        where = {i: j for j, i in enumerate([*newest.ids, *both.ids])}
        order = [where[i] for i in ids]
        norms = np.concatenate([newest.norms, both.norms])[order]
        return LoadedVectors(ids=ids, rows=rows[order], overflow=newest.overflow,
                             stale=newest.stale, index={i: j for j, i in enumerate(ids)},
                             norms=norms)

    def count_missing(self, model: str) -> int:
        """How many notes with content have no vector for ``model`` (what
        :meth:`missing` would still hand out)."""
        sql = ("SELECT count(*) FROM memories m WHERE m.content <> '' AND NOT EXISTS ("
               " SELECT 1 FROM memory_vectors v WHERE v.note_id = m.id AND v.model = ?)")
        return cast(int, self.conn.execute(sql, (self._model(model),)).fetchall()[0][0])

    def count_other_models(self, model: str) -> int:
        """How many stored vectors belong to models other than ``model``."""
        sql = "SELECT count(*) FROM memory_vectors WHERE model <> ?"
        return cast(int, self.conn.execute(sql, (self._model(model),)).fetchall()[0][0])

    def others(self, model: str, dim: int) -> list[tuple[str, int, int]]:
        """``(model, dim, vectors)`` of every stored vector group other than ``model`` at
        ``dim``: what a model switch left behind, kept until
        ``memory reindex --prune``."""
        return [(m, d, n) for m, d, n in self.conn.execute(
            "SELECT model, dim, count(*) FROM memory_vectors WHERE NOT (model = ? AND dim = ?)"
            " GROUP BY model, dim ORDER BY model, dim", (self._model(model), dim))]
