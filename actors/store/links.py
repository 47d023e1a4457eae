"""LinkStore: typed, weighted edges between notes and BFS expansion.

Edges live in ``memory_links(from_id, to_id, kind, weight, created_at, origin)`` (schema v3; ``origin`` v8),
primary key ``(from_id, to_id, kind)`` so one pair may carry several kinds; both ends
reference ``memories(id) ON DELETE CASCADE``, so forgetting or evicting a note drops its
edges. Kinds: ``RELATES_TO``, ``CAUSED_BY``, ``REFERENCES``, ``CONTRADICTS``,
``DUPLICATES``, ``SUPERSEDES``.

The per-turn context (``context.build_context``) uses :meth:`LinkStore.expand` to add
the neighbours of the recalled notes to ``### recalled`` (docs/architecture.md §4). Edges
are written by the user (``memory.links.add``) and, later, by the link generator
. Times are Unix milliseconds; writes go through ``sql.write_txn``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, cast


from .errors import NotFound, ValidationError, require_int, require_positive_id
from .errors import now_ms as _now
from .records import LINK_KINDS, Link
from .sql import Connection, ids_binding, in_ids, write_txn

__all__ = [
    "Link",
    "LinkStore",
    "LINK_KINDS",
    "LINK_ORIGINS",
    "DEFAULT_KIND",
    "EXPAND_DEPTH_MIN",
    "EXPAND_DEPTH_MAX",
    "EXPAND_MAX_DEFAULT",
    "LIST_LIMIT_DEFAULT",
    "LIST_LIMIT_MAX",
    "validate_kind",
    "validate_kinds",
    "clamp_weight",
]

DEFAULT_KIND = "RELATES_TO"
LINK_ORIGINS: tuple[str, ...] = ("manual", "similarity", "model", "correction")
"""Who wrote a link (schema v8): the ``memory.links.add`` op, links by meaning, the LLM
link generator, the store (a correction supersedes what it corrects)."""
EXPAND_DEPTH_MIN, EXPAND_DEPTH_MAX = 1, 3
EXPAND_MAX_DEFAULT = 50
EXPAND_MAX_CEILING = 1000
LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX = 500, 1000


def validate_kind(kind: object, field: str = "kind") -> str:
    """Return the canonical kind: trimmed, upper-cased, one of :data:`LINK_KINDS`.

    Raises:
        ValidationError: ``field`` (default ``kind``).
    """
    if not isinstance(kind, str):
        raise ValidationError(field, "must be a string")
    canon = kind.strip().upper()
    if canon not in LINK_KINDS:
        raise ValidationError(field, f"must be one of {', '.join(LINK_KINDS)}")
    return canon


def validate_kinds(kinds: object) -> tuple[str, ...] | None:
    """Validate an optional kind filter; ``None`` (or empty) means every kind.

    Raises:
        ValidationError: field ``kinds``.
    """
    if kinds is None:
        return None
    if not isinstance(kinds, (list, tuple, set, frozenset)):
        raise ValidationError("kinds", "must be a list of kinds")
    out = tuple(dict.fromkeys(validate_kind(k, "kinds") for k in kinds))
    return out or None


def clamp_weight(weight: object) -> float:
    """Return ``weight`` as a float clamped into [0, 1]; ``None`` or non-finite -> 1.0.

    Raises:
        ValidationError: field ``weight`` when it is not a number (bools refused).
    """
    if weight is None:
        return 1.0
    if not isinstance(weight, (int, float)) or isinstance(weight, bool):
        raise ValidationError("weight", "must be a number")
    value = float(weight)
    if not math.isfinite(value):
        return 1.0
    return min(1.0, max(0.0, value))


_COLS = "from_id, to_id, kind, weight, created_at, origin"
_SQL_UPSERT = (
    f"INSERT INTO memory_links ({_COLS}) VALUES (?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (from_id, to_id, kind) DO UPDATE SET weight = excluded.weight,"
    " created_at = excluded.created_at, origin = CASE WHEN memory_links.origin = 'manual'"
    " THEN 'manual' ELSE excluded.origin END"
)
_SQL_GET = f"SELECT {_COLS} FROM memory_links WHERE from_id = ? AND to_id = ? AND kind = ?"
_SQL_EXISTS = "SELECT id FROM memories WHERE id IN (?, ?)"
_ORDER = " ORDER BY weight DESC, created_at DESC, kind, to_id, from_id"
_SQL_OUT = f"SELECT {_COLS} FROM memory_links WHERE from_id = ?"
_SQL_IN = f"SELECT {_COLS} FROM memory_links WHERE to_id = ?"
_SQL_ALL = (
    f"SELECT {_COLS} FROM memory_links"
    " ORDER BY created_at DESC, from_id DESC, to_id DESC, kind LIMIT ?"
)
_SQL_FOR_NOTE = (
    f"SELECT {_COLS} FROM memory_links WHERE from_id = ?1 OR to_id = ?1"
    " ORDER BY created_at DESC, from_id DESC, to_id DESC, kind LIMIT ?2"
)


def _row(row: Sequence[Any]) -> Link:
    return Link(row[0], row[1], row[2], float(row[3]), row[4], row[5])


class LinkStore:
    """Add, list, remove and expand edges between notes.

    Args:
        conn: a connection from ``schema.open_database`` (migrated to >= v3).

    Methods raise :class:`ValidationError` for bad input and :class:`NotFound` when an
    edge names a note that does not exist.
    """

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def add(
        self,
        from_id: int,
        to_id: int,
        kind: str = DEFAULT_KIND,
        weight: float | None = 1.0,
        *,
        now_ms: int | None = None,
        origin: str = "manual",
    ) -> Link:
        """Upsert the edge ``from_id -kind-> to_id`` and return it.

        Ids must be positive ints and different (a self-loop is refused, field
        ``toId``); ``kind`` per :func:`validate_kind`; ``weight`` per
        :func:`clamp_weight` (default 1.0). An existing ``(from, to, kind)`` edge gets
        the new weight and ``created_at``, and ``origin`` (one of
        :data:`LINK_ORIGINS`) unless it is ``manual`` already.

        Raises:
            ValidationError: fields ``fromId``, ``toId``, ``kind``, ``weight``, ``nowMs``,
                ``origin``.
            NotFound: one of the notes does not exist.
        """
        from_id = require_positive_id(from_id, "fromId")
        to_id = require_positive_id(to_id, "toId")
        if from_id == to_id:
            raise ValidationError("toId", "a note cannot link to itself")
        kind = validate_kind(kind)
        value = clamp_weight(weight)
        now = _now(now_ms)
        if origin not in LINK_ORIGINS:
            raise ValidationError("origin", f"must be one of {', '.join(LINK_ORIGINS)}")
        with write_txn(self.conn):
            found = {r[0] for r in self.conn.execute(_SQL_EXISTS, (from_id, to_id))}
            for note_id in (from_id, to_id):
                if note_id not in found:
                    raise NotFound(f"no note #{note_id}")
            self.conn.execute(_SQL_UPSERT, (from_id, to_id, kind, value, now, origin))
            return _row(self.conn.execute(_SQL_GET, (from_id, to_id, kind)).fetchall()[0])

    def get(self, from_id: int, to_id: int, kind: str) -> Link | None:
        """Return one edge or None.

        Raises:
            ValidationError: fields ``fromId``, ``toId``, ``kind``.
        """
        args = (require_positive_id(from_id, "fromId"), require_positive_id(to_id, "toId"),
                validate_kind(kind))
        rows = self.conn.execute(_SQL_GET, args).fetchall()
        return _row(rows[0]) if rows else None

    def _edges(self, sql: str, note_id: int, kinds: tuple[str, ...] | None,
               skip_origins: tuple[str, ...] = ()) -> list[Link]:
        more, args = self._filters(kinds, skip_origins)
        return [_row(r) for r in self.conn.execute(sql + more + _ORDER, (note_id, *args))]

    def _filters(self, kinds: tuple[str, ...] | None, skip_origins: tuple[str, ...]
                 ) -> tuple[str, list[object]]:
        """The ``AND ...`` conditions (and their parameters) keeping only edges of
        ``kinds`` and leaving out those of ``skip_origins``."""
        sql, args = "", []
        if kinds:
            sql += f" AND {in_ids(self.conn, 'kind')}"
            args.append(ids_binding(self.conn, kinds))
        if skip_origins:
            sql += f" AND NOT ({in_ids(self.conn, 'origin')})"
            args.append(ids_binding(self.conn, skip_origins))
        return sql, args

    def _hop_edges(self, nodes: list[int], kinds: tuple[str, ...] | None,
                   skip_origins: tuple[str, ...]
                   ) -> tuple[dict[int, list[Link]], dict[int, list[Link]]]:
        """Every edge leaving and arriving at ``nodes``, in one statement (one round trip
        per hop on a server): ``(outgoing, incoming)`` by node, each list in
        :data:`_ORDER` (as :meth:`_edges` gives it for one node)."""
        sql = (f"SELECT {_COLS} FROM memory_links WHERE ({in_ids(self.conn, 'from_id')}"
               f" OR {in_ids(self.conn, 'to_id')})")
        ids = ids_binding(self.conn, nodes)
        more, args = self._filters(kinds, skip_origins)
        edges = sorted((_row(r) for r in self.conn.execute(sql + more, (ids, ids, *args))),
                       key=lambda e: (-e.weight, -e.created_at, e.kind, e.to_id, e.from_id))
        wanted = set(nodes)
        outgoing: dict[int, list[Link]] = {}
        incoming: dict[int, list[Link]] = {}
        for e in edges:
            if e.from_id in wanted:
                outgoing.setdefault(e.from_id, []).append(e)
            if e.to_id in wanted:
                incoming.setdefault(e.to_id, []).append(e)
        return outgoing, incoming

    def list_outgoing(self, note_id: int, kinds: Iterable[str] | None = None) -> list[Link]:
        """Edges leaving ``note_id``, ``weight DESC, created_at DESC`` (then kind).

        Raises:
            ValidationError: fields ``id``, ``kinds``.
        """
        return self._edges(_SQL_OUT, require_positive_id(note_id), validate_kinds(kinds))

    def list_incoming(self, note_id: int, kinds: Iterable[str] | None = None) -> list[Link]:
        """Edges arriving at ``note_id``, ``weight DESC, created_at DESC`` (then kind).

        Raises:
            ValidationError: fields ``id``, ``kinds``.
        """
        return self._edges(_SQL_IN, require_positive_id(note_id), validate_kinds(kinds))

    def list_all(self, limit: int = LIST_LIMIT_DEFAULT, *, note_id: int | None = None) -> list[Link]:
        """Edges newest first (``created_at DESC``); ``limit`` clamped into [1, 1000]
        (default 500). With ``note_id``: only edges touching that note, either way.

        Raises:
            ValidationError: fields ``limit``, ``id``.
        """
        limit = min(LIST_LIMIT_MAX, max(1, require_int(limit, "limit")))
        if note_id is None:
            return [_row(r) for r in self.conn.execute(_SQL_ALL, (limit,))]
        return [_row(r) for r in self.conn.execute(
            _SQL_FOR_NOTE, (require_positive_id(note_id), limit))]

    def remove(self, from_id: int, to_id: int, kind: str) -> bool:
        """Delete one edge; True if it existed.

        Raises:
            ValidationError: fields ``fromId``, ``toId``, ``kind``.
        """
        args = (require_positive_id(from_id, "fromId"), require_positive_id(to_id, "toId"),
                validate_kind(kind))
        with write_txn(self.conn):
            self.conn.execute(
                "DELETE FROM memory_links WHERE from_id = ? AND to_id = ? AND kind = ?", args)
            return self.conn.changes() > 0

    def remove_all_for(self, note_id: int) -> int:
        """Delete every edge touching ``note_id``; return how many.

        Raises:
            ValidationError: field ``id``.
        """
        note_id = require_positive_id(note_id)
        with write_txn(self.conn):
            self.conn.execute(
                "DELETE FROM memory_links WHERE from_id = ?1 OR to_id = ?1", (note_id,))
            return self.conn.changes()

    def count(self) -> int:
        """Return the number of edges."""
        return cast(int, self.conn.execute("SELECT count(*) FROM memory_links").fetchall()[0][0])

    def expand(
        self,
        seed_ids: Iterable[int],
        *,
        depth: int = 1,
        max_expanded: int = EXPAND_MAX_DEFAULT,
        kinds: Iterable[str] | None = None,
        skip_origins: Iterable[str] = (),
    ) -> list[int]:
        """Breadth-first neighbours of ``seed_ids`` over edges in both directions.

        ``depth`` clamped into [1, 3] (default 1); ``max_expanded``
        clamped into [1, 1000] (default 50; ``memory.links.maxExpanded`` is 12). Each
        node of a hop visits its outgoing edges first, then its incoming ones, each
        in :meth:`list_outgoing` / :meth:`list_incoming` order; a node is emitted the
        first time it is reached. Seeds are never returned; the walk stops as soon as
        ``max_expanded`` ids were collected (mid-hop). Empty seeds -> ``[]``. Edges of
        an origin in ``skip_origins`` are not walked (the context skips ``similarity``
        unless ``memory.links.expandByMeaning``).

        Returns note ids in discovery order (ids only; the caller hydrates them and
        skips any that vanished).

        Raises:
            ValidationError: fields ``seedIds``, ``depth``, ``maxExpanded``, ``kinds``.
        """
        seeds = list(dict.fromkeys(require_positive_id(i, "seedIds") for i in seed_ids))
        depth = min(EXPAND_DEPTH_MAX, max(EXPAND_DEPTH_MIN, require_int(depth, "depth")))
        cap = min(EXPAND_MAX_CEILING, max(1, require_int(max_expanded, "maxExpanded")))
        kind_filter = validate_kinds(kinds)
        skip = tuple(skip_origins)
        if not seeds:
            return []
        seen = set(seeds)
        out: list[int] = []
        frontier = seeds
        for _hop in range(depth):
            nxt: list[int] = []
            outgoing, incoming = self._hop_edges(frontier, kind_filter, skip)
            for node in frontier:
                neighbours = [e.to_id for e in outgoing.get(node, [])]
                neighbours += [e.from_id for e in incoming.get(node, [])]
                for nb in neighbours:
                    if nb in seen:
                        continue
                    seen.add(nb)
                    out.append(nb)
                    nxt.append(nb)
                    if len(out) >= cap:
                        return out
            if not nxt:
                break
            frontier = nxt
        return out
