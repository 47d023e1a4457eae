"""The memory actor's router: each memory operation's handler, by the op's name.

The ops themselves (argument Structs, descriptions, which are agent tools, which write)
are :data:`actors.memory.ops.OPS`; :data:`HANDLERS` holds one function per op over the
stores of one connection (:class:`~actors.store.stores.StoreSet`), and :func:`run_op`
decodes an op's arguments and calls its handler. The memory actor, the offline CLI and
the tests run ops through here alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from actors.store.backup import backup_database
from actors.store.context import MemoryContext, build_context, context_text, render_context
from actors.store.errors import NotFound, ValidationError
from actors.store.files import FileRoom
from actors.store.notes import Note
from actors.store.plans import RecallPlan, TurnScope
from actors.store.staleness import archive_stale
from actors.store.stores import StoreSet
from actors.store.transfer import export_memory, import_memory

from .ops import (ArchiveArgs, BackupArgs, ContextArgs, DistilledRecallArgs, ExportArgs, IdArgs,
                  ImportArgs, KeyArgs, LimitArgs, LinksAddArgs, NotesRecallArgs, NotesStoreArgs,
                  ProfileSetArgs, decode_args)

Change = dict[str, list[Any]]
"""What an op wrote: ``keys`` (profile keys), ``ids`` (note ids), and for a recall with
``defer_bump`` the hits to bump later (``bump``); empty for reads."""


@dataclass(frozen=True)
class OpCall:
    """How one op is run: who asks and what the caller lends it.

    Attributes:
        source: ``"agent"`` (a tool call; writes have provenance ``tool``) or the user's
            surface (``"user"``, ``"mcp"``, ...; provenance ``user``).
        session / turn: the session and turn the op belongs to, written beside what it
            stores.
        client: who asks, as the activity log names them (``agent for chat``,
            ``dashboard``, an app's name; None: the ``source``): kept on a fact version
            the op ends (``removed_by``).
        batch: the writer's batch (one client connection): written beside a note stored
            outside a session, and given to ``memory.import`` for the notes it adds.
        default_k: hits of ``memory.notes.recall`` without ``k`` (``memory.notes.recallDefaultK``).
        defer_bump: ``memory.notes.recall`` by query writes nothing and lists the hits'
            ids under ``change["bump"]`` for the caller to bump later
            (``MemoryStore.bump_recall``).
        recall: replaces ``notes.recall`` for ``memory.notes.recall`` by query (same
            keyword arguments, called with ``bump=False``; the memory actor passes hybrid
            recall).
        context: answers ``memory.context`` with the caller's configured budgets; without
            it the op is answered with the default budgets.
        files: where ``memory.export``, ``memory.backup`` and ``memory.import`` may read
            and write (:class:`~actors.store.files.FileRoom`); without one those ops are
            refused.
    """

    source: str = "agent"
    session: str | None = None
    turn: str | None = None
    batch: str | None = None
    client: str | None = None
    default_k: int = 5
    defer_bump: bool = False
    recall: Callable[..., list[Note]] | None = None
    context: Callable[[ContextArgs], Any] | None = None
    files: FileRoom | None = None


Handler = Callable[[Any, StoreSet, OpCall], tuple[Any, Change]]


def run_op(stores: StoreSet, op: str, args: Any, call: OpCall = OpCall()) -> tuple[Any, Change]:
    """Run one op over ``stores``; return (result data, change).

    Shapes: a note / a fact / a list / ``{"removed": bool}``; lessons, procedures, links
    and votes as their Structs (camelCase keys). ``memory.links.add`` reports both note
    ids as changed.

    Errors: ValidationError (code ``invalid_argument``) for an unknown op or bad
    arguments; NotFound (code ``not_found``) for ``memory.lessons.get`` /
    ``memory.procedures.get`` of an unknown id, an archive of a missing note and a link
    to a missing note.
    """
    a = decode_args(op, args)
    return HANDLERS[op](a, stores, call)


def _origin(source: str) -> str:
    """The provenance of an op's write: the agent's ``tool`` call, else the ``user``."""
    return "tool" if source == "agent" else "user"


def _profile_set(a: ProfileSetArgs, s: StoreSet, c: OpCall) -> tuple[Any, Change]:
    before = s.profiles.get(a.key)
    fact = s.profiles.set(a.key, a.value, pinned=a.pinned, keywords=a.keywords,
                          source=_origin(c.source), session_id=c.session, turn_id=c.turn,
                          by=c.client or c.source)
    stale = (archive_stale(s.notes, before.value, fact.value)
             if before is not None and before.id != fact.id else [])
    return fact, {"keys": [fact.key], **({"ids": stale} if stale else {})}


def _profile_remove(a: KeyArgs, s: StoreSet, c: OpCall) -> tuple[Any, Change]:
    removed = s.profiles.remove(a.key, by=c.client or c.source, turn_id=c.turn)
    return {"removed": removed}, {"keys": [a.key] if removed else []}


def _profile_purge(a: KeyArgs, s: StoreSet, c: OpCall) -> tuple[Any, Change]:
    versions = s.profiles.purge(a.key)
    return {"removed": versions > 0, "versions": versions}, {"keys": [a.key] if versions else []}


def _notes_store(a: NotesStoreArgs, s: StoreSet, c: OpCall) -> tuple[Any, Change]:
    note = s.notes.store(a.content, tags=a.tags, source=c.source, scope=a.scope,
                         working_dir=a.working_dir, session_id=c.session,
                         origin=_origin(c.source), turn_id=c.turn, batch_id=c.batch)
    return note, {"ids": [note.id]}


def _notes_recall(a: NotesRecallArgs, s: StoreSet, c: OpCall) -> tuple[Any, Change]:
    if a.id is not None:
        note = s.notes.get(a.id)
        return ([note] if note is not None else []), {}
    if a.query is None:
        raise ValidationError("query", "give either query or id")
    hits = (c.recall or s.notes.recall)(a.query, k=a.k or c.default_k, scope=a.scope,
                                        working_dir=a.working_dir, tags=a.tags, bump=False)
    if not c.defer_bump and hits:
        s.notes.bump_recall([n.id for n in hits])
    return hits, ({"bump": [n.id for n in hits]} if c.defer_bump else {})


def _notes_archive(a: ArchiveArgs, s: StoreSet, c: OpCall) -> tuple[Any, Change]:
    if not s.notes.set_archived(a.id, a.archived):
        raise NotFound(f"no note #{a.id}")
    return s.notes.get(a.id), {"ids": [a.id]}


def _notes_forget(a: IdArgs, s: StoreSet, c: OpCall) -> tuple[Any, Change]:
    removed = s.notes.forget(a.id)
    return {"removed": removed}, {"ids": [a.id] if removed else []}


def _distilled(noun: str) -> tuple[Handler, Handler, Handler]:
    """The recall, list and get handlers of the lessons or procedures store (the same
    shapes over either: :class:`~actors.store.lessons.DistilledStore`)."""

    def store(s: StoreSet) -> Any:
        return s.lessons if noun == "lesson" else s.procedures

    def recall(a: DistilledRecallArgs, s: StoreSet, c: OpCall) -> tuple[Any, Change]:
        if a.id is not None:
            row = store(s).get(a.id)
            return ([row] if row is not None else []), {}
        if a.query is None:
            raise ValidationError("query", "give either query or id")
        return store(s).recall(a.query, k=a.k or 2), {}

    def list_(a: LimitArgs, s: StoreSet, c: OpCall) -> tuple[Any, Change]:
        return store(s).list_index(a.limit), {}

    def get(a: IdArgs, s: StoreSet, c: OpCall) -> tuple[Any, Change]:
        row = store(s).get(a.id)
        if row is None:
            raise NotFound(f"no {noun} #{a.id}")
        return row, {}

    return recall, list_, get


def _links_add(a: LinksAddArgs, s: StoreSet, c: OpCall) -> tuple[Any, Change]:
    link = s.links.add(a.from_id, a.to_id, a.kind, a.weight)
    return link, {"ids": [link.from_id, link.to_id]}


def _needs_files(c: OpCall, op: str) -> FileRoom:
    if c.files is None:
        raise ValidationError("op", f"{op} needs a folder for its files (the daemon's "
                                    "exports folder, or the CLI's own)")
    return c.files


def _backup(a: BackupArgs, s: StoreSet, c: OpCall) -> tuple[Any, Change]:
    return backup_database(s.conn, a.path, _needs_files(c, "memory.backup"),
                           overwrite=a.overwrite), {}


def _export(a: ExportArgs, s: StoreSet, c: OpCall) -> tuple[Any, Change]:
    return export_memory(s.conn, a.path, _needs_files(c, "memory.export"),
                         overwrite=a.overwrite), {}


def _import(a: ImportArgs, s: StoreSet, c: OpCall) -> tuple[Any, Change]:
    result = import_memory(s.notes, a.path, _needs_files(c, "memory.import"))
    return result, {"keys": ["*"] if result["added"]["factVersions"] else [],
                    "ids": result["noteIds"]}


def _context(a: ContextArgs, s: StoreSet, c: OpCall) -> tuple[Any, Change]:
    if c.context is not None:
        return c.context(a), {}
    ctx = build_context(s, a.message, RecallPlan(), TurnScope(working_dir=a.working_dir),
                        bump=False)
    return context_answer(ctx, render_context(ctx)), {}


_lessons_recall, _lessons_list, _lessons_get = _distilled("lesson")
_procedures_recall, _procedures_list, _procedures_get = _distilled("procedure")

HANDLERS: dict[str, Handler] = {
    "memory.profile.set": _profile_set,
    "memory.profile.remove": _profile_remove,
    "memory.profile.list": lambda a, s, c: (s.profiles.list(), {}),
    "memory.profile.history": lambda a, s, c: (s.profiles.history(a.key), {}),
    "memory.profile.purge": _profile_purge,
    "memory.notes.store": _notes_store,
    "memory.notes.recall": _notes_recall,
    "memory.notes.search": lambda a, s, c: (s.notes.recall(
        a.query, k=a.k or c.default_k, scope="all", tags=a.tags, bump=False), {}),
    "memory.notes.forget": _notes_forget,
    "memory.notes.archive": _notes_archive,
    "memory.notes.list": lambda a, s, c: (s.notes.list(a.limit, a.archived), {}),
    "memory.lessons.recall": _lessons_recall,
    "memory.procedures.recall": _procedures_recall,
    "memory.lessons.list": _lessons_list,
    "memory.procedures.list": _procedures_list,
    "memory.lessons.get": _lessons_get,
    "memory.procedures.get": _procedures_get,
    "memory.links.list": lambda a, s, c: (s.links.list_all(a.limit, note_id=a.id), {}),
    "memory.links.add": _links_add,
    "memory.votes.tail": lambda a, s, c: (s.votes.tail(a.limit), {}),
    "memory.context": _context,
    "memory.export": _export,
    "memory.import": _import,
    "memory.backup": _backup,
}
"""One handler per op of :data:`~actors.memory.ops.OPS` (the same names; a test holds
the two tables equal)."""


def context_answer(ctx: MemoryContext, sections: dict[str, str]) -> dict[str, Any]:
    """The ``memory.context`` result: ``text`` (the sections as the prompt tail shows
    them, "" when memory adds nothing), ``sections`` (name → body) and the items behind
    them (``profile`` facts, ``recalled`` notes, ``index`` notes, ``lessons`` and
    ``procedures`` pointers)."""
    return {"text": context_text(sections), "sections": sections, "profile": ctx.profile,
            "recalled": ctx.recalled, "index": ctx.index, "lessons": ctx.lessons,
            "procedures": ctx.procedures}

