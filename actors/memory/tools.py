"""The memory tools and read-only operations, by name.

One table, :data:`OPS`, serves both callers: the agent's tool calls (the six tools
``memory.profile.set/remove/list``, ``memory.notes.store/recall/forget``) and the
gateway's ``memory`` frames (the tools plus read-only operations and the user-only
``memory.links.add``). Lessons, procedures, links and votes are served by their stores
(anchor §2.6–§2.8, §1.9); none of them is an agent tool, so the tool catalog (and the
stable prompt prefix built from it) does not change. Each op has an
argument Struct; ``args`` from a model or a client are converted with msgspec and
unknown or mistyped fields become :class:`ValidationError` (code
``invalid_argument``) that names the field, so the model can retry.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Callable, Literal

import msgspec

from .backup import backup_database
from .files import FileRoom
from .transfer import export_memory, import_memory
from .context import MemoryContext, build_context, context_text, render_context
from .errors import NotFound, ValidationError
from .lessons import LessonStore
from .links import LinkStore
from .staleness import archive_stale
from .notes import MemoryStore, Note
from .procedures import ProcedureStore
from .profile import ProfileStore
from .votes import VoteStore


class _Args(msgspec.Struct, forbid_unknown_fields=True, rename="camel", kw_only=True):
    """Base of tool argument Structs: camelCase keys, unknown keys rejected."""


class ProfileSetArgs(_Args):
    key: str
    value: str
    pinned: bool | None = None
    keywords: list[str] | None = None


class KeyArgs(_Args):
    key: str


class NoArgs(_Args):
    pass


class NotesStoreArgs(_Args):
    content: str
    tags: list[str] | None = None
    scope: Literal["all", "project"] = "all"
    working_dir: str | None = None


class NotesRecallArgs(_Args):
    query: str | None = None
    id: int | None = None
    k: int | None = None
    scope: Literal["all", "project"] | None = None
    working_dir: str | None = None
    tags: list[str] | None = None


class NotesSearchArgs(_Args):
    """``memory.notes.search``: keyword-only (BM25) search for operators (seed 001: the
    TUI's search never uses vectors); reads only, bumps no recall counter."""

    query: str
    k: int | None = None
    tags: list[str] | None = None


class IdArgs(_Args):
    id: int


class ArchiveArgs(_Args):
    id: int
    archived: bool = True


class NotesListArgs(_Args):
    limit: int = 50
    archived: Literal["active", "archived", "all"] = "active"


class LimitArgs(_Args):
    limit: int = 100


class BackupArgs(_Args):
    """``memory.backup``: copy the database to the file ``path`` names (a file name in the
    daemon's exports folder, :mod:`.files`) with SQLite's online backup; ``overwrite``
    replaces an existing file."""

    path: str
    overwrite: bool = False


class ContextArgs(_Args):
    """``memory.context``: what a turn on ``message`` would inject (profile through the
    keyword gate, recalled notes with link expansion, the index, lessons, procedures),
    rendered with the configured budgets; reads only, bumps no recall counter. The
    query rewriter is not applied (it needs a session's history)."""

    message: str
    working_dir: str | None = None


class ExportArgs(_Args):
    """``memory.export``: write the JSON-lines export (:mod:`.transfer`) to the file
    ``path`` names (:mod:`.files`); ``overwrite`` replaces an existing file."""

    path: str
    overwrite: bool = False


class ImportArgs(_Args):
    """``memory.import``: import a JSON-lines export from the file ``path`` names
    (:mod:`.files`), idempotently (:mod:`.transfer`)."""

    path: str


class DistilledRecallArgs(_Args):
    """``memory.lessons.recall`` / ``memory.procedures.recall``: one
    by ``id`` (any status), or up to ``k`` (default 2, at most 10) active ones matching
    ``query``, with their principle or steps."""

    query: str | None = None
    id: int | None = None
    k: int | None = None


class LinksListArgs(_Args):
    """``memory.links.list``: newest edges; with ``id`` only the edges of that note."""

    limit: int = 100
    id: int | None = None


class LinksAddArgs(_Args):
    """``memory.links.add``: upsert the edge ``fromId -kind-> toId`` (weight 0..1)."""

    from_id: int
    to_id: int
    kind: str
    weight: float | None = None


@dataclass(frozen=True)
class OpSpec:
    """One operation: its args Struct, a one-line description, whether the agent may
    call it as a tool, and whether it writes."""

    args: type[_Args]
    description: str
    tool: bool
    writes: bool


OPS: dict[str, OpSpec] = {
    "memory.profile.set": OpSpec(ProfileSetArgs, "Remember a durable fact about the user as key=value. "
                                 "pinned (default true) facts are always shown; pinned=false facts only "
                                 "when one of their keywords appears in the user's message.", True, True),
    "memory.profile.remove": OpSpec(KeyArgs, "Forget the profile fact with this key.", True, True),
    "memory.profile.list": OpSpec(NoArgs, "List every stored profile fact.", True, False),
    "memory.notes.store": OpSpec(NotesStoreArgs, "Save a freeform note for later recall.", True, True),
    "memory.notes.recall": OpSpec(NotesRecallArgs, "Search notes by query, or fetch one note by id "
                                  "(use the #id shown in ### memory-index).", True, False),
    "memory.notes.search": OpSpec(NotesSearchArgs, "Keyword-only note search (no vectors, "
                                  "no recall bump), for operators.", False, False),
    "memory.notes.forget": OpSpec(IdArgs, "Delete the note with this id.", True, True),
    "memory.notes.archive": OpSpec(ArchiveArgs, "Archive (or, with archived=false, restore) a "
                                   "note: it leaves the index but stays recallable.", False, True),
    "memory.profile.history": OpSpec(KeyArgs, "Every version of a profile fact, oldest first.", False, False),
    "memory.profile.purge": OpSpec(KeyArgs, "Delete every version of a profile fact, its "
                                   "history included (for good).", False, True),
    "memory.notes.list": OpSpec(NotesListArgs, "Notes, newest first.", False, False),
    "memory.lessons.recall": OpSpec(DistilledRecallArgs, "Lessons distilled from earlier "
                                    "conversations, by query or id, with their principle.",
                                    True, False),
    "memory.procedures.recall": OpSpec(DistilledRecallArgs, "How-to procedures distilled from "
                                       "earlier conversations, by query or id, with their steps.",
                                       True, False),
    "memory.lessons.list": OpSpec(LimitArgs, "Active lessons, newest first.", False, False),
    "memory.procedures.list": OpSpec(LimitArgs, "Active procedures, newest first.", False, False),
    "memory.lessons.get": OpSpec(IdArgs, "One lesson by id, any status.", False, False),
    "memory.procedures.get": OpSpec(IdArgs, "One procedure by id, any status.", False, False),
    "memory.links.list": OpSpec(LinksListArgs, "Edges between notes, newest first.", False, False),
    "memory.links.add": OpSpec(LinksAddArgs, "Link two notes (kind RELATES_TO, CAUSED_BY, "
                               "REFERENCES, CONTRADICTS, DUPLICATES or SUPERSEDES).", False, True),
    "memory.votes.tail": OpSpec(LimitArgs, "The newest vote events (memory.voting.enabled).",
                                False, False),
    "memory.context": OpSpec(ContextArgs, "What a turn on this message would inject from "
                             "memory: profile, recalled notes, index, lessons, procedures.",
                             False, False),
    "memory.export": OpSpec(ExportArgs, "Write every fact (with history), note, link, lesson "
                            "and procedure to a JSON-lines file in the daemon's exports folder.",
                            False, False),
    "memory.import": OpSpec(ImportArgs, "Import a memory export (JSON lines) from the "
                            "daemon's exports folder; what is already there is skipped.",
                            False, True),
    "memory.backup": OpSpec(BackupArgs, "A consistent copy of the memory database (SQLite "
                            "online backup) in the daemon's exports folder.", False, False),
}

TOOL_NAMES: tuple[str, ...] = tuple(name for name, spec in OPS.items() if spec.tool)


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _check_storable(field: str, value: Any) -> None:
    """Raise ValidationError(field) for what SQLite cannot bind: an integer outside
    the signed 64-bit range, or text that is not valid UTF-8 (a lone surrogate, as
    undecodable ``argv`` bytes or a model's ``\\udNNNN`` escape produce)."""
    if isinstance(value, bool):
        return
    if isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
        raise ValidationError(field, "must be between -2**63 and 2**63-1")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValidationError(field, "must be valid UTF-8 text (it holds a lone "
                                         "surrogate)") from None
    if isinstance(value, list):
        for item in value:
            _check_storable(field, item)


def decode_args(op: str, args: Any) -> _Args:
    """Validate ``args`` (a dict) for ``op``; ValidationError names the bad field:
    unknown, missing or mistyped fields, integers beyond 64 bits and text that is not
    valid UTF-8 (both would fail only when bound to SQLite, as a crash)."""
    spec = OPS.get(op)
    if spec is None:
        raise ValidationError("op", f"unknown memory operation {op!r}")
    try:
        decoded = msgspec.convert(args if args is not None else {}, type=spec.args)
    except msgspec.ValidationError as exc:
        text = str(exc)
        named = re.search(r"(?:missing required|unknown) field `([^`]+)`", text)
        if "$." in text:
            field = text.split("$.", 1)[1].rstrip("`")
            if named:
                field = f"{field}.{named.group(1)}"
        else:
            field = named.group(1) if named else "args"
        raise ValidationError(field, text.split(" - at ")[0]) from None
    for name, encode_name in _field_names(type(decoded)):
        _check_storable(encode_name, getattr(decoded, name))
    return decoded


@functools.cache
def _field_names(cls: type) -> tuple[tuple[str, str], ...]:
    """``(attribute, wire name)`` of each field of an args Struct, computed once per type:
    ``msgspec.structs.fields`` evaluates the type annotations on every call (~0.4 ms, the
    largest cost of a memory request by id in the actor's profile; ``bench/recall.py``)."""
    return tuple((f.name, f.encode_name) for f in msgspec.structs.fields(cls))


def run_op(
    profiles: ProfileStore,
    notes: MemoryStore,
    op: str,
    args: Any,
    *,
    source: str = "agent",
    session: str | None = None,
    turn: str | None = None,
    default_k: int = 5,
    lessons: LessonStore | None = None,
    procedures: ProcedureStore | None = None,
    links: LinkStore | None = None,
    votes: VoteStore | None = None,
    defer_bump: bool = False,
    recall: Callable[..., list[Note]] | None = None,
    context: Callable[[ContextArgs], Any] | None = None,
    files: FileRoom | None = None,
) -> tuple[Any, dict[str, list]]:
    """Run one op; return (result data, change) where change lists written
    ``keys``/``ids`` (empty for reads). With ``defer_bump``, ``memory.notes.recall``
    by query writes nothing and lists the hits' ids under ``change["bump"]`` for the
    caller to bump later (``MemoryStore.bump_recall``). ``recall`` replaces
    ``notes.recall`` for ``memory.notes.recall`` by query (same keyword arguments,
    called with ``bump=False``; the memory actor passes hybrid recall). ``context``
    answers ``memory.context`` (the memory actor's, with its configured budgets);
    without it the op is answered with the default budgets. ``files``:
    where ``memory.export``, ``memory.backup`` and ``memory.import`` may read and write
    (:class:`~actors.memory.files.FileRoom`); without one those ops are refused.

    Shapes per DESIGN §9: a note / a fact / a list / ``{"removed": bool}``; lessons,
    procedures, links and votes as their Structs (camelCase keys). The lesson,
    procedure, link and vote stores default to stores on ``notes.conn`` (votes then
    disabled, so ``memory.votes.tail`` answers ``[]``). ``memory.links.add`` reports
    both note ids as changed.

    Errors: ValidationError (code invalid_argument); NotFound (code not_found) for
    ``memory.lessons.get`` / ``memory.procedures.get`` of an unknown id and for a link
    to a missing note.
    """
    a = decode_args(op, args)
    conn = notes.conn
    lessons = lessons if lessons is not None else LessonStore(conn)
    procedures = procedures if procedures is not None else ProcedureStore(conn)
    links = links if links is not None else LinkStore(conn)
    votes = votes if votes is not None else VoteStore(conn)
    match a:
        case ProfileSetArgs():
            before = profiles.get(a.key)
            fact = profiles.set(a.key, a.value, pinned=a.pinned, keywords=a.keywords,
                                source=_origin(source), session_id=session, turn_id=turn)
            stale = (archive_stale(notes, before.value, fact.value)
                     if before is not None and before.id != fact.id else [])
            return fact, {"keys": [fact.key], **({"ids": stale} if stale else {})}
        case KeyArgs() if op == "memory.profile.remove":
            removed = profiles.remove(a.key)
            return {"removed": removed}, {"keys": [a.key] if removed else []}
        case KeyArgs() if op == "memory.profile.purge":
            versions = profiles.purge(a.key)
            return ({"removed": versions > 0, "versions": versions},
                    {"keys": [a.key] if versions else []})
        case KeyArgs():
            return profiles.history(a.key), {}
        case NoArgs():
            return profiles.list(), {}
        case NotesStoreArgs():
            note = notes.store(a.content, tags=a.tags, source=source, scope=a.scope,
                               working_dir=a.working_dir, session_id=session,
                               origin=_origin(source), turn_id=turn)
            return note, {"ids": [note.id]}
        case NotesRecallArgs():
            if a.id is not None:
                note = notes.get(a.id)
                return ([note] if note is not None else []), {}
            if a.query is None:
                raise ValidationError("query", "give either query or id")
            hits = (recall or notes.recall)(a.query, k=a.k or default_k, scope=a.scope,
                                            working_dir=a.working_dir, tags=a.tags,
                                            bump=False)
            if not defer_bump and hits:
                notes.bump_recall([n.id for n in hits])
            return hits, ({"bump": [n.id for n in hits]} if defer_bump else {})
        case NotesSearchArgs():
            return notes.recall(a.query, k=a.k or default_k, scope="all", tags=a.tags,
                                bump=False), {}
        case ArchiveArgs():
            found = notes.set_archived(a.id, a.archived)
            if not found:
                raise NotFound(f"no note #{a.id}")
            return notes.get(a.id), {"ids": [a.id]}
        case IdArgs() if op == "memory.notes.forget":
            removed = notes.forget(a.id)
            return {"removed": removed}, {"ids": [a.id] if removed else []}
        case IdArgs() if op == "memory.lessons.get":
            lesson = lessons.get(a.id)
            if lesson is None:
                raise NotFound(f"no lesson #{a.id}")
            return lesson, {}
        case IdArgs() if op == "memory.procedures.get":
            procedure = procedures.get(a.id)
            if procedure is None:
                raise NotFound(f"no procedure #{a.id}")
            return procedure, {}
        case DistilledRecallArgs():
            store = lessons if op == "memory.lessons.recall" else procedures
            if store is None:
                raise ValidationError("op", "lessons and procedures are not available")
            if a.id is not None:
                row = store.get(a.id)
                return ([row] if row is not None else []), {}
            if a.query is None:
                raise ValidationError("query", "give either query or id")
            return store.recall(a.query, k=a.k or 2), {}
        case NotesListArgs():
            return notes.list(a.limit, a.archived), {}
        case LimitArgs() if op == "memory.lessons.list":
            return lessons.list_index(a.limit), {}
        case LimitArgs() if op == "memory.procedures.list":
            return procedures.list_index(a.limit), {}
        case LimitArgs() if op == "memory.votes.tail":
            return votes.tail(a.limit), {}
        case LinksListArgs():
            return links.list_all(a.limit, note_id=a.id), {}
        case LinksAddArgs():
            link = links.add(a.from_id, a.to_id, a.kind, a.weight)
            return link, {"ids": [link.from_id, link.to_id]}
        case BackupArgs() | ExportArgs() | ImportArgs() if files is None:
            raise ValidationError("op", f"{op} needs a folder for its files (the daemon's "
                                        "exports folder, or the CLI's own)")
        case BackupArgs():
            return backup_database(conn, a.path, files, overwrite=a.overwrite), {}
        case ExportArgs():
            return export_memory(conn, a.path, files, overwrite=a.overwrite), {}
        case ImportArgs():
            result = import_memory(notes, a.path, files)
            return result, {"keys": ["*"] if result["added"]["factVersions"] else [],
                            "ids": result["noteIds"]}
        case ContextArgs():
            if context is not None:
                return context(a), {}
            ctx = build_context(profiles, notes, a.message, working_dir=a.working_dir,
                                links=links, lessons=lessons, procedures=procedures,
                                bump=False)
            return context_answer(ctx, render_context(ctx)), {}
    raise ValidationError("op", f"unhandled memory operation {op!r}")


def context_answer(ctx: MemoryContext, sections: dict[str, str]) -> dict[str, Any]:
    """The ``memory.context`` result: ``text`` (the sections as the prompt tail shows
    them, "" when memory adds nothing), ``sections`` (name → body) and the items behind
    them (``profile`` facts, ``recalled`` notes, ``index`` notes, ``lessons`` and
    ``procedures`` pointers)."""
    return {"text": context_text(sections), "sections": sections, "profile": ctx.profile,
            "recalled": ctx.recalled, "index": ctx.index, "lessons": ctx.lessons,
            "procedures": ctx.procedures}


def _origin(source: str) -> str:
    """The provenance of an op's write: the agent's ``tool`` call, else the ``user``."""
    return "tool" if source == "agent" else "user"


def tool_catalog() -> list[tuple[str, str, dict[str, Any]]]:
    """(name, description, JSON schema of args) for each agent tool, in a fixed order
    (the stable prompt prefix renders it, so the order must never depend on state)."""
    out = []
    for name in TOOL_NAMES:
        spec = OPS[name]
        schema = msgspec.json.schema(spec.args)
        out.append((name, spec.description, schema))
    return out


ToolRunner = Callable[..., tuple[Any, dict[str, list]]]
