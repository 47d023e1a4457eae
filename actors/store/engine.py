"""The memory engine interface: what the memory ops need of a store, as Protocols.

The op semantics (:func:`actors.memory.router.run`: who may change what, what a forget
reports, which notes a new value makes stale) are written against :class:`MemoryEngine`,
never against SQL; the SQLite engine (:class:`actors.store.stores.StoreSet` and the stores
it holds) is its one implementation today, checked by mypy (``run`` takes a
``MemoryEngine`` and the actor passes a ``StoreSet``). A second engine implements these
Protocols beside it without touching the ops.

Shapes are the records of :mod:`.records`; ids are positive 64-bit integers; times are
Unix milliseconds; every method raises the store's :mod:`.errors` (``ValidationError``
naming a field, ``NotFound``, ``StorageFailure`` …), never a driver's own exception.
This module is pure (Protocols and records only).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from .files import FileRoom
from .records import Lesson, Link, MemoryContext, Note, Procedure, ProfileFact, Vote

__all__ = ["DistilledEngine", "LinkEngine", "MemoryEngine", "NoteEngine", "ProfileEngine",
           "VectorEngine", "VoteEngine"]


class ProfileEngine(Protocol):
    """Profile facts with their bi-temporal history (docs/architecture.md, "Profile")."""

    def get(self, key: str) -> ProfileFact | None:
        """The key's active fact, None when it has none."""

    def list(self) -> builtins.list[ProfileFact]:
        """Every active fact, by key."""

    def history(self, key: str) -> builtins.list[ProfileFact]:
        """Every version of the key, oldest first, the active one last."""

    def set(self, key: str, value: str, *, pinned: bool | None = None,
            keywords: builtins.list[str] | None = None, now_ms: int | None = None,
            source: str | None = None, session_id: str | None = None,
            turn_id: str | None = None, by: str | None = None) -> ProfileFact:
        """Write the key's new active version (the old one kept in its history)."""

    def remove(self, key: str, *, now_ms: int | None = None, by: str | None = None,
               turn_id: str | None = None) -> bool:
        """Retire the active version (history kept); whether there was one."""

    def purge(self, key: str) -> int:
        """Delete every version of the key; how many went."""


class NoteEngine(Protocol):
    """Freeform notes, their keyword recall and their recall counters."""

    def get(self, note_id: int) -> Note | None:
        """One note by id (archived included)."""

    def list(self, limit: int = 50, archived: str = "active") -> builtins.list[Note]:
        """Newest first; ``archived``: ``active`` | ``archived`` | ``all``."""

    def store(self, content: str, *, tags: builtins.list[str] | None = None, source: str = "agent",
              scope: str = "all", working_dir: str | None = None,
              session_id: str | None = None, now_ms: int | None = None,
              origin: str | None = None, turn_id: str | None = None,
              batch_id: str | None = None) -> Note:
        """Store a note, or merge it into a near-identical one; the note stored."""

    def recall(self, query: str, *, k: int = 5, scope: str | None = None,
               working_dir: str | None = None, tags: builtins.list[str] | None = None,
               bump: bool = True, now_ms: int | None = None) -> builtins.list[Note]:
        """Up to ``k`` notes matching ``query`` by keywords, best first."""

    def bump_recall(self, ids: Iterable[int], now_ms: int | None = None) -> int:
        """Count one recall of each note; the rows updated."""

    def forget(self, note_id: int) -> bool:
        """Delete a note (and what was derived from it alone); whether it existed."""

    def set_archived(self, note_id: int, archived: bool = True, *,
                     now_ms: int | None = None) -> bool:
        """Archive or restore a note; whether it exists."""


class DistilledEngine(Protocol):
    """Lessons or procedures: rows distilled from clusters of notes."""

    def get(self, row_id: int, /) -> Lesson | Procedure | None:
        """One row by id, any status."""

    def recall(self, query: str, *, k: int = 2, include_deprecated: bool = False,
               working_dir: str | None = None,
               score_blend: float | None = None) -> list[Lesson] | list[Procedure]:
        """Up to ``k`` active rows matching ``query``, best first."""

    def list_index(self, limit: int = 20) -> list[Lesson] | list[Procedure]:
        """Active rows, newest first."""


class LinkEngine(Protocol):
    """Typed, weighted edges between notes."""

    def add(self, from_id: int, to_id: int, kind: str = "RELATES_TO",
            weight: float | None = 1.0, *, now_ms: int | None = None,
            origin: str = "manual") -> Link:
        """Upsert the edge ``from_id -kind-> to_id``."""

    def list_all(self, limit: int = 500, *, note_id: int | None = None) -> list[Link]:
        """Edges newest first; with ``note_id`` only that note's."""


class VoteEngine(Protocol):
    """The vote events' audit log."""

    def tail(self, limit: int = 100) -> list[Vote]:
        """The newest vote events first."""


class VectorEngine(Protocol):
    """The notes' embedding vectors (float32, ``dim`` each), by embedding model."""

    def missing(self, model: str, limit: int, below: int | None = None
                ) -> list[tuple[int, str]]:
        """Up to ``limit`` (id, content) of notes without a vector for ``model``, newest
        first; ``below``: only ids smaller than this."""

    def put(self, model: str, dim: int, rows: Sequence[tuple[int, bytes]]) -> int:
        """Store the vectors (notes deleted meanwhile are skipped); the rows written."""

    def count(self, model: str) -> int:
        """The vectors stored for ``model``."""

    def others(self, model: str, dim: int) -> list[tuple[str, int, int]]:
        """``(model, dim, vectors)`` of each stored group other than ``model`` at ``dim``."""


class MemoryEngine(Protocol):
    """One memory store: its parts, and the operations on the whole of it.

    ``transaction`` groups writes (one reflection's result is one); ``export`` /
    ``backup`` / ``import_file`` read and write only where ``files``
    allows (:class:`~actors.store.files.FileRoom`) and answer JSON-shaped reports
    (``actors.memory.ops.ExportResult`` … convert them); ``archive_stale`` archives the
    active notes that still state a fact's old value (:mod:`.staleness`), returning their
    ids."""

    @property
    def profiles(self) -> ProfileEngine: ...

    @property
    def notes(self) -> NoteEngine: ...

    @property
    def lessons(self) -> DistilledEngine: ...

    @property
    def procedures(self) -> DistilledEngine: ...

    @property
    def links(self) -> LinkEngine: ...

    @property
    def votes(self) -> VoteEngine: ...

    @property
    def vectors(self) -> VectorEngine: ...

    def transaction(self) -> AbstractContextManager[object]:
        """A block of writes applied atomically (nested: a savepoint of the outer one)."""

    def schema_version(self) -> int:
        """The version of the store's schema (migrations are applied when it opens)."""

    def export(self, path: str, files: FileRoom, *, overwrite: bool = False) -> object:
        """Every record, with its history, as a JSON-lines file."""

    def backup(self, path: str, files: FileRoom, *, overwrite: bool = False) -> object:
        """A consistent copy of the whole store."""

    def import_file(self, path: str, files: FileRoom) -> object:
        """Add what an export file holds that the store lacks."""

    def archive_stale(self, old_value: str, new_value: str) -> list[int]:
        """Archive the notes stating ``old_value`` of the user and not ``new_value``."""

    def context(self, message: str, working_dir: str | None = None) -> MemoryContext:
        """What a turn on ``message`` would be given, with the default plan, no recall
        counter bumped (``memory.context`` where no configured plan is at hand)."""
