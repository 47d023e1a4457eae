"""The memory actor's router: what each memory operation does over the store library.

The ops themselves (request Structs, replies, descriptions, scopes, which write) are
:mod:`actors.memory.ops`; :func:`run` answers one request over the stores of one
connection (:class:`~actors.store.stores.StoreSet`) with a ``match`` on its type, and
:func:`run_op` decodes an op's name and JSON arguments first. The memory actor, the
offline CLI and the tests run ops through here alike. The ops are written against the
engine interface (:class:`actors.store.engine.MemoryEngine`), not SQL: this module
imports no module of the SQLite engine. ``memory.stats``,
``memory.activity`` and ``memory.consolidate`` are answered by the actors themselves
(they read the actor's state or run the consolidator), not here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import msgspec

from actors.store.engine import DistilledEngine, MemoryEngine
from actors.store.errors import NotFound, ValidationError
from actors.store.files import FileRoom
from actors.store.records import Lesson, MemoryContext, Note, Procedure, ProfileFact
from actors.store.tail import context_text, render_context

from . import ops
from .ops import ContextAnswer, MemoryOp, decode_op


class Change(TypedDict, total=False):
    """What an op wrote: ``keys`` (profile keys), ``ids`` (note ids), and for a recall
    with ``defer_bump`` the hits to bump later (``bump``); empty for reads."""

    keys: list[str]
    ids: list[int]
    bump: list[int]


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
        team: the team space (``memory.store.team``), where ``memory.share`` copies a
            note; without one it is refused.
    """

    source: str = "agent"
    session: str | None = None
    turn: str | None = None
    batch: str | None = None
    client: str | None = None
    default_k: int = 5
    defer_bump: bool = False
    recall: Callable[..., list[Note]] | None = None
    context: Callable[[ops.ContextPreview], ContextAnswer] | None = None
    files: FileRoom | None = None
    team: MemoryEngine | None = None


def run_op(stores: MemoryEngine, op: str, args: object, call: OpCall = OpCall()
           ) -> tuple[object, Change]:
    """Decode op ``op``'s JSON ``args`` (:func:`~actors.memory.ops.decode_op`) and
    :func:`run` it. ValidationError (code ``invalid_argument``) for an unknown op or bad
    arguments."""
    return run(stores, decode_op(op, args), call)


def run(stores: MemoryEngine, request: MemoryOp[Any], call: OpCall = OpCall()
        ) -> tuple[object, Change]:
    """Answer one request over ``stores``: (its reply, what it changed). The reply is of
    the request's type (``type(request).reply``); ``memory.links.add`` reports both note
    ids as changed.

    Errors: ValidationError (code ``invalid_argument``) for bad arguments and for an op
    the store does not answer (stats, activity, consolidate); NotFound (code
    ``not_found``) for ``memory.notes.get`` / ``memory.lessons.get`` /
    ``memory.procedures.get`` of an unknown id, an archive of a missing note and a link
    to a missing note.
    """
    s, c = stores, call
    match request:
        case ops.ProfileSet():
            return _profile_set(request, s, c)
        case ops.ProfileRemove(key=key):
            removed = s.profiles.remove(key, by=c.client or c.source, turn_id=c.turn)
            return ops.Removed(removed), {"keys": [key] if removed else []}
        case ops.ProfileList():
            return s.profiles.list(), {}
        case ops.ProfileHistory(key=key):
            return s.profiles.history(key), {}
        case ops.ProfilePurge(key=key):
            versions = s.profiles.purge(key)
            return ops.Purged(versions > 0, versions), {"keys": [key] if versions else []}
        case ops.NotesStore():
            note = s.notes.store(request.content, tags=request.tags, source=c.source,
                                 scope=request.scope, working_dir=request.working_dir,
                                 session_id=c.session, origin=_origin(c.source),
                                 turn_id=c.turn, batch_id=c.batch)
            return note, {"ids": [note.id]}
        case ops.NotesRecall():
            return _notes_recall(request, s, c)
        case ops.NotesGet(id=note_id):
            found = s.notes.get(note_id) if note_id > 0 else None
            if found is None:
                raise NotFound(f"no note #{note_id}")
            return found, {}
        case ops.NotesSearch(space="team"):
            return _as_team(_team_notes(c).notes.recall(
                request.query, k=request.k or c.default_k, scope="all", tags=request.tags,
                bump=False)), {}
        case ops.NotesSearch():
            return s.notes.recall(request.query, k=request.k or c.default_k, scope="all",
                                  tags=request.tags, bump=False), {}
        case ops.NotesForget(id=note_id):
            removed = s.notes.forget(note_id)
            return ops.Removed(removed), {"ids": [note_id] if removed else []}
        case ops.NotesArchive(id=note_id, archived=archived):
            if not s.notes.set_archived(note_id, archived):
                raise NotFound(f"no note #{note_id}")
            return s.notes.get(note_id), {"ids": [note_id]}
        case ops.NotesList(limit=limit, archived=which, space="team"):
            return _as_team(_team_notes(c).notes.list(limit, which)), {}
        case ops.NotesList(limit=limit, archived=which):
            return s.notes.list(limit, which), {}
        case ops.LessonsRecall(query=query, id=row_id, k=k):
            return _distilled_recall(s.lessons, query, row_id, k), {}
        case ops.ProceduresRecall(query=query, id=row_id, k=k):
            return _distilled_recall(s.procedures, query, row_id, k), {}
        case ops.LessonsList(limit=limit):
            return s.lessons.list_index(limit), {}
        case ops.ProceduresList(limit=limit):
            return s.procedures.list_index(limit), {}
        case ops.LessonsGet(id=row_id):
            return _distilled_get(s.lessons, "lesson", row_id), {}
        case ops.ProceduresGet(id=row_id):
            return _distilled_get(s.procedures, "procedure", row_id), {}
        case ops.LinksList(limit=limit, id=note_id):
            return s.links.list_all(limit, note_id=note_id), {}
        case ops.LinksAdd():
            link = s.links.add(request.from_id, request.to_id, request.kind, request.weight)
            return link, {"ids": [link.from_id, link.to_id]}
        case ops.VotesTail(limit=limit):
            return s.votes.tail(limit), {}
        case ops.ContextPreview():
            return _context(request, s, c), {}
        case ops.Export(path=path, overwrite=overwrite):
            return msgspec.convert(s.export(path, _needs_files(c, request),
                                            overwrite=overwrite), ops.ExportResult), {}
        case ops.Import(path=path):
            result = msgspec.convert(s.import_file(path, _needs_files(c, request)),
                                     ops.ImportResult)
            return result, import_change(result)
        case ops.Backup(path=path, overwrite=overwrite):
            return msgspec.convert(s.backup(path, _needs_files(c, request),
                                            overwrite=overwrite), ops.BackupResult), {}
        case ops.Share(id=note_id):
            return _share(note_id, s, c), {}
        case ops.Unshare(id=note_id):
            team = _team_notes(c)
            with team.transaction():
                return ops.Removed(team.notes.forget(note_id)), {}
        case _:
            raise ValidationError("op", f"{request.name} is answered by the daemon, not "
                                        "by the store")


def _team_notes(c: OpCall) -> MemoryEngine:
    """The team space's stores; ValidationError when the daemon has no team."""
    if c.team is None:
        raise ValidationError("space", "this needs a team: memory.store.team, on the "
                                       "PostgreSQL engine (docs/teams.md)")
    return c.team


def _as_team(notes: list[Note]) -> list[Note]:
    """``notes`` of the team space, marked so (``space="team"``)."""
    return [msgspec.structs.replace(n, space="team") for n in notes]


def _share(note_id: int, s: MemoryEngine, c: OpCall) -> Note:
    """``memory.share``: a copy of the person's note ``note_id`` in the team space, written
    by ``shared`` (the team's own dedup answers the copy already there)."""
    team = _team_notes(c)
    note = s.notes.get(note_id) if note_id > 0 else None
    if note is None:
        raise NotFound(f"no note #{note_id}")
    with team.transaction():
        copy = team.notes.store(note.content, tags=note.tags, source=note.source,
                                  origin="shared", session_id=c.session, turn_id=c.turn)
    return msgspec.structs.replace(copy, space="team")


def import_change(result: ops.ImportResult) -> Change:
    """What an import changed: every key when fact versions were added, its notes."""
    return {"keys": ["*"] if result.added.get("factVersions") else [],
            "ids": list(result.note_ids)}


def _origin(source: str) -> str:
    """The provenance of an op's write: the agent's ``tool`` call, else the ``user``."""
    return "tool" if source == "agent" else "user"


def _profile_set(a: ops.ProfileSet, s: MemoryEngine, c: OpCall) -> tuple[ProfileFact, Change]:
    before = s.profiles.get(a.key)
    fact = s.profiles.set(a.key, a.value, pinned=a.pinned, keywords=a.keywords,
                          source=_origin(c.source), session_id=c.session, turn_id=c.turn,
                          by=c.client or c.source)
    stale = (s.archive_stale(before.value, fact.value)
             if before is not None and before.id != fact.id else [])
    change: Change = {"keys": [fact.key]}
    if stale:
        change["ids"] = stale
    return fact, change


def _notes_recall(a: ops.NotesRecall, s: MemoryEngine, c: OpCall
                  ) -> tuple[list[Note], Change]:
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


def _distilled_recall(store: DistilledEngine, query: str | None, row_id: int | None,
                      k: int | None) -> Sequence[Lesson | Procedure]:
    """``memory.lessons.recall`` / ``memory.procedures.recall``: one by id (any status),
    else up to ``k`` (default 2) active ones matching ``query``."""
    if row_id is not None:
        row = store.get(row_id)
        return [row] if row is not None else []
    if query is None:
        raise ValidationError("query", "give either query or id")
    return store.recall(query, k=k or 2)


def _distilled_get(store: DistilledEngine, noun: str, row_id: int) -> Lesson | Procedure:
    row = store.get(row_id)
    if row is None:
        raise NotFound(f"no {noun} #{row_id}")
    return row


def _needs_files(c: OpCall, request: MemoryOp[Any]) -> FileRoom:
    if c.files is None:
        raise ValidationError("op", f"{request.name} needs a folder for its files (the "
                                    "daemon's exports folder, or the CLI's own)")
    return c.files


def _context(a: ops.ContextPreview, s: MemoryEngine, c: OpCall) -> ContextAnswer:
    if c.context is not None:
        return c.context(a)
    ctx = s.context(a.message, a.working_dir)
    return context_answer(ctx, render_context(ctx))


def context_answer(ctx: MemoryContext, sections: dict[str, str]) -> ContextAnswer:
    """The ``memory.context`` reply: ``text`` (the sections as the prompt tail shows
    them, "" when memory adds nothing), ``sections`` (name → body) and the items behind
    them (``profile`` facts, ``recalled`` notes, ``index`` notes, ``lessons`` and
    ``procedures`` pointers)."""
    return ContextAnswer(text=context_text(sections), sections=sections, profile=ctx.profile,
                         recalled=ctx.recalled, index=ctx.index, lessons=ctx.lessons,
                         procedures=ctx.procedures)
