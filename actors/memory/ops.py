"""The memory operations: one request Struct per op, with its reply type, and the one table
every surface is made from.

Each op is a class below: a msgspec Struct of the op's arguments (camelCase on the wire,
unknown fields refused), tagged with the op's name (``memory.profile.set``), generic in
its reply (``MemoryOp[ProfileFact]``), and registered by :func:`op` with what the
surfaces need to know of it:

* ``summary``: the one-line description the agent's tool catalog and the MCP tool list
  show (docs/protocol.md describes each op for client authors);
* ``access``: the client scope it needs (``read`` / ``write`` / ``forget`` / ``admin``,
  docs/integrations.md "Per-app access");
* ``writes``: whether it changes memory (the memory actor runs it on its writer);
* ``tool``: whether the agent may call it as a tool (its prompt's catalog);
* ``mcp``: the MCP tool's title, None when it is no MCP tool (``atomic-agent mcp``
  names the tool after the op, ``.`` as ``_``);
* ``guard``: which write guard judges the agent's call (:mod:`actors.policy.write_guard`:
  ``fact``, ``note``, ``removal``; None for reads);
* ``family``: the memory channel it belongs to (``profile``, ``notes``, ``lessons``, …),
  whose ``memory.<family>.enabled`` switches its agent tool off;
* ``route``: the actor that answers it (``memory``; ``reflection`` for
  ``memory.consolidate``);
* ``logged``: whether the activity log records it (stats and the log itself are not).

:data:`OPS` maps each op's name to its class; :data:`MemoryRequest` is the tagged union
of them all (the ``request`` of :class:`~actors.memory.messages.ToolOp`, dispatched with
``match`` by :func:`actors.memory.router.run`). A client holding a name and a JSON object
(a ``memory`` frame, a model's tool call) makes the request with :func:`decode_op`;
unknown or mistyped fields become :class:`~actors.store.errors.ValidationError` (code
``invalid_argument``) naming the field, so a model can retry. This module reads no store:
a process that only talks to memory (the agent, the gateway, the shell's clients)
validates and describes ops without opening SQLite.
"""

from __future__ import annotations

import functools
import re
import typing
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Generic, Literal, TypeVar

import msgspec
from msgspec import Meta

from actors.store.errors import ValidationError
from actors.store.records import (Lesson, LessonPointer, Link, Note, Procedure,
                                  ProcedurePointer, ProfileFact, Vote)

Scope = Literal["read", "write", "forget", "admin", "team:write", "tools", "tools:approve"]
"""What a client token may do (docs/integrations.md, "Per-app access")."""
Guard = Literal["fact", "note", "removal"]
"""Which write guard judges an agent's call (:func:`actors.policy.write_guard.refusal`)."""

R = TypeVar("R")
OpT = TypeVar("OpT", bound="type[MemoryOp[Any]]")

JsonObject = dict[str, Any]
"""A report whose shape is documented in docs/protocol.md rather than typed here (the
``memory.stats`` counters): JSON as it goes on the wire."""


class MemoryOp(msgspec.Struct, Generic[R], forbid_unknown_fields=True, rename="camel",
               kw_only=True, tag_field="op"):
    """Base of every op's request: its fields are the op's arguments, its tag the op's
    name, ``R`` its reply. The class attributes are set by :func:`op`."""

    name: ClassVar[str]
    summary: ClassVar[str]
    access: ClassVar[Scope]
    writes: ClassVar[bool]
    tool: ClassVar[bool]
    mcp: ClassVar[str | None]
    guard: ClassVar[Guard | None]
    family: ClassVar[str]
    route: ClassVar[str]
    logged: ClassVar[bool]
    reply: ClassVar[Any]


OPS: dict[str, type[MemoryOp[Any]]] = {}
"""Each op's class by its name, in the order defined below (the agent's tool catalog and the
MCP tool list keep that order)."""


def op(summary: str, *, access: Scope = "read", writes: bool = False, tool: bool = False,
       mcp: str | None = None, guard: Guard | None = None, route: str = "memory",
       logged: bool = True) -> Callable[[OpT], OpT]:
    """Register an op class in :data:`OPS` with what the surfaces need of it (the module
    docstring). Its reply type is read from its ``MemoryOp[...]`` base. Raises
    ValueError for a class without a tag or a name registered twice."""

    def register(cls: OpT) -> OpT:
        name = cls.__struct_config__.tag
        if not isinstance(name, str) or name in OPS:
            raise ValueError(f"op class {cls.__name__} needs a new tag (got {name!r})")
        cls.name, cls.summary, cls.access, cls.writes = name, summary, access, writes
        cls.tool, cls.mcp, cls.route, cls.logged = tool, mcp, route, logged
        cls.guard, cls.family = guard, name.split(".")[1]
        cls.reply = _reply_type(cls)
        OPS[name] = cls
        return cls

    return register


def _reply_type(cls: type) -> Any:
    for base in getattr(cls, "__orig_bases__", ()):
        if typing.get_origin(base) is MemoryOp:
            return typing.get_args(base)[0]
    raise ValueError(f"{cls.__name__} must derive from MemoryOp[Reply]")


# -- replies that are not store records ------------------------------------------------


class Removed(msgspec.Struct):
    """Whether a forget found something to remove."""

    removed: bool


class Purged(msgspec.Struct):
    """``memory.profile.purge``: whether the key had versions, and how many went."""

    removed: bool
    versions: int


class ContextAnswer(msgspec.Struct):
    """``memory.context``: ``text`` (the sections as the prompt's tail shows them, ""
    when memory adds nothing), ``sections`` (name → body) and the items behind them."""

    text: str
    sections: dict[str, str]
    profile: list[ProfileFact]
    recalled: list[Note]
    index: list[Note]
    lessons: list[LessonPointer]
    procedures: list[ProcedurePointer]


class BackupResult(msgspec.Struct):
    """``memory.backup``: the copy's path, size in bytes and SQLite pages."""

    path: str
    bytes: int
    pages: int


class ExportResult(msgspec.Struct):
    """``memory.export``: the file's path, size in bytes and records by kind."""

    path: str
    bytes: int
    counts: dict[str, int]


class ImportResult(msgspec.Struct, rename="camel"):
    """``memory.import``: records ``added`` and ``skipped`` (already there) by kind, and the
    ids of the notes it added."""

    path: str
    added: dict[str, int]
    skipped: dict[str, int]
    note_ids: list[int]


class ActivityPage(msgspec.Struct):
    """``memory.activity``: log ``entries`` newest first, each client's running
    ``clients`` totals, rows ``kept`` and ``dropped`` by the log's bounds, and whether the
    log is ``enabled`` (docs/protocol.md lists the entry fields)."""

    entries: list[JsonObject]
    clients: list[JsonObject]
    kept: int
    dropped: int
    enabled: bool


class TickReport(msgspec.Struct, kw_only=True, rename="camel"):
    """One consolidator tick (docs/architecture.md §4, "The consolidator"):
    ``outcome`` ``ok`` (a lesson was
    made) | ``none`` | ``failed`` (every cluster failed) | ``busy`` (a tick was already
    running) | ``off`` (consolidation, lessons or the LLM not available: ``reason``);
    ``clusters`` claimed; ``lessons`` / ``procedures`` ids created; ``abstained``,
    ``failed``, ``changed`` (refused because a note changed) cluster counts;
    ``deprecated`` by ``kind:reason``; ``duration_ms``. Camel-cased on the wire: the
    ``memory.consolidate`` reply."""

    outcome: str
    clusters: int = 0
    lessons: list[int] = msgspec.field(default_factory=list)
    procedures: list[int] = msgspec.field(default_factory=list)
    abstained: int = 0
    failed: int = 0
    changed: int = 0
    deprecated: dict[str, int] = msgspec.field(default_factory=dict)
    duration_ms: float = 0.0
    reason: str = ""


# -- the ops ---------------------------------------------------------------------------

# Field descriptions show in the JSON schemas MCP clients read; validation is unchanged.
_Id = Annotated[int, Meta(description="The id (#N in listings).")]
_Key = Annotated[str, Meta(description="The fact's key (snake_case, e.g. home_city).")]
_WorkingDir = Annotated[str | None, Meta(
    description="A project directory: its project-scoped notes are included.")]
_K = Annotated[int | None, Meta(
    description="How many (default: memory.notes.recallDefaultK for notes).")]
_Tags = Annotated[list[str] | None, Meta(description="Only notes with all of these tags.")]
_Space = Annotated[Literal["own", "team"], Meta(
    description="own: your notes; team: your team's shared space (needs a team).")]
_Limit = Annotated[int, Meta(description="At most this many, newest first.")]


@op("Remember a durable fact about the user as key=value. pinned (default true) facts are "
    "always shown; pinned=false facts only when one of their keywords appears in the "
    "user's message.", access="write", writes=True, tool=True, mcp="Set a profile fact",
    guard="fact")
class ProfileSet(MemoryOp[ProfileFact], tag="memory.profile.set"):
    """A new value replaces the active one, which stays in the fact's history."""

    key: _Key
    value: Annotated[str, Meta(description="The fact's value.")]
    pinned: bool | None = None
    keywords: Annotated[list[str] | None, Meta(
        description="Words that bring an unpinned fact into context.")] = None


@op("Forget the profile fact with this key.", access="forget", writes=True, tool=True,
    mcp="Remove a profile fact", guard="removal")
class ProfileRemove(MemoryOp[Removed], tag="memory.profile.remove"):
    """The active value is retired; its history is kept."""

    key: _Key


@op("List every stored profile fact.", tool=True, mcp="List profile facts")
class ProfileList(MemoryOp[list[ProfileFact]], tag="memory.profile.list"):
    """The active facts, by key."""


@op("Every version of a profile fact, oldest first.", mcp="Profile fact history")
class ProfileHistory(MemoryOp[list[ProfileFact]], tag="memory.profile.history"):
    """What the user said before, with who ended each version."""

    key: _Key


@op("Delete every version of a profile fact, its history included (for good).",
    access="forget", writes=True)
class ProfilePurge(MemoryOp[Purged], tag="memory.profile.purge"):
    key: str


@op("Save a freeform note for later recall.", access="write", writes=True, tool=True,
    mcp="Store a note", guard="note")
class NotesStore(MemoryOp[Note], tag="memory.notes.store"):
    """A near-duplicate of an existing note is merged into it (its id is returned)."""

    content: Annotated[str, Meta(description="The note's text.")]
    tags: Annotated[list[str] | None, Meta(description="Short topic tags.")] = None
    scope: Annotated[Literal["all", "project"], Meta(
        description="project: only shown for workingDir.")] = "all"
    working_dir: _WorkingDir = None


@op("Search notes by query, or fetch one note by id (use the #id shown in "
    "### memory-index).", tool=True, mcp="Recall notes")
class NotesRecall(MemoryOp[list[Note]], tag="memory.notes.recall"):
    """By meaning and keywords (hybrid recall once vectors exist), best first."""

    query: Annotated[str | None, Meta(
        description="What to look for (words or a sentence).")] = None
    id: Annotated[int | None, Meta(description="One note by id instead of a search.")] = None
    k: _K = None
    scope: Literal["all", "project"] | None = None
    working_dir: _WorkingDir = None
    tags: _Tags = None


@op("One note by id.", mcp="Get a note")
class NotesGet(MemoryOp[Note], tag="memory.notes.get"):
    """Raises not_found for an id no note has."""

    id: _Id


@op("Keyword-only note search (no vectors, no recall bump), for operators.",
    mcp="Keyword search")
class NotesSearch(MemoryOp[list[Note]], tag="memory.notes.search"):
    """BM25 over the notes' words: exact words, no embeddings (the TUI's search)."""

    query: Annotated[str, Meta(description="The words to find.")]
    k: _K = None
    tags: _Tags = None
    space: _Space = "own"


@op("Delete the note with this id.", access="forget", writes=True, tool=True,
    mcp="Forget a note", guard="removal")
class NotesForget(MemoryOp[Removed], tag="memory.notes.forget"):
    id: _Id


@op("Archive (or, with archived=false, restore) a note: it leaves the index but stays "
    "recallable.", access="write", writes=True)
class NotesArchive(MemoryOp[Note], tag="memory.notes.archive"):
    id: int
    archived: bool = True


@op("Share one of your notes with your team: a copy goes to the team space, where every "
    "member's recall finds it (PostgreSQL engine with memory.store.team).",
    access="team:write", writes=True)
class Share(MemoryOp[Note], tag="memory.share"):
    """``id``: the note to share; the team's copy answers (its ``space`` is ``team``).
    Sharing the same text again returns the copy already there."""

    id: int


@op("Remove a note from your team's shared space (PostgreSQL engine with "
    "memory.store.team); the member's own note, if any, stays.", access="team:write",
    writes=True)
class Unshare(MemoryOp[Removed], tag="memory.unshare"):
    """``id``: the team space's note (its id there, as ``memory.notes.list`` with
    ``space="team"`` shows it)."""

    id: int


@op("Notes, newest first.")
class NotesList(MemoryOp[list[Note]], tag="memory.notes.list"):
    """``space``: ``own`` (the person's notes) or ``team`` (the team's shared space)."""

    limit: int = 50
    archived: Literal["active", "archived", "all"] = "active"
    space: _Space = "own"


@op("Lessons distilled from earlier conversations, by query or id, with their principle.",
    tool=True)
class LessonsRecall(MemoryOp[list[Lesson]], tag="memory.lessons.recall"):
    """One by ``id`` (any status), or up to ``k`` (default 2, at most 10) active ones
    matching ``query``."""

    query: str | None = None
    id: int | None = None
    k: int | None = None


@op("How-to procedures distilled from earlier conversations, by query or id, with their "
    "steps.", tool=True)
class ProceduresRecall(MemoryOp[list[Procedure]], tag="memory.procedures.recall"):
    """As :class:`LessonsRecall`, over procedures."""

    query: str | None = None
    id: int | None = None
    k: int | None = None


@op("Active lessons, newest first.", mcp="List lessons")
class LessonsList(MemoryOp[list[Lesson]], tag="memory.lessons.list"):
    limit: _Limit = 100


@op("Active procedures, newest first.", mcp="List procedures")
class ProceduresList(MemoryOp[list[Procedure]], tag="memory.procedures.list"):
    limit: _Limit = 100


@op("One lesson by id, any status.", mcp="Get a lesson")
class LessonsGet(MemoryOp[Lesson], tag="memory.lessons.get"):
    id: _Id


@op("One procedure by id with its steps, any status.", mcp="Get a procedure")
class ProceduresGet(MemoryOp[Procedure], tag="memory.procedures.get"):
    id: _Id


@op("Edges between notes, newest first.")
class LinksList(MemoryOp[list[Link]], tag="memory.links.list"):
    """With ``id``, only the edges of that note."""

    limit: int = 100
    id: int | None = None


@op("Link two notes (kind RELATES_TO, CAUSED_BY, REFERENCES, CONTRADICTS, DUPLICATES or "
    "SUPERSEDES).", access="write", writes=True)
class LinksAdd(MemoryOp[Link], tag="memory.links.add"):
    """Upsert the edge ``fromId -kind-> toId`` (weight 0..1)."""

    from_id: int
    to_id: int
    kind: str
    weight: float | None = None


@op("The newest vote events (memory.voting.enabled).")
class VotesTail(MemoryOp[list[Vote]], tag="memory.votes.tail"):
    limit: int = 100


@op("What a turn on this message would inject from memory: profile, recalled notes, "
    "index, lessons, procedures.", mcp="Memory context for a message")
class ContextPreview(MemoryOp[ContextAnswer], tag="memory.context"):
    """With the configured budgets; reads only, bumps no recall counter. The query
    rewriter is not applied (it needs a session's history)."""

    message: Annotated[str, Meta(description="The user's message.")]
    working_dir: _WorkingDir = None


@op("Write every fact (with history), note, link, lesson and procedure to a JSON-lines "
    "file in the daemon's exports folder.", access="admin")
class Export(MemoryOp[ExportResult], tag="memory.export"):
    """``path``: a file name in the daemon's exports folder (:mod:`actors.store.files`);
    ``overwrite`` replaces an existing file."""

    path: str
    overwrite: bool = False


@op("Import a memory export (JSON lines) from the daemon's exports folder; what is "
    "already there is skipped.", access="admin", writes=True)
class Import(MemoryOp[ImportResult], tag="memory.import"):
    """Idempotent (:mod:`actors.store.transfer`)."""

    path: str


@op("A consistent copy of the memory database (SQLite online backup) in the daemon's "
    "exports folder.", access="admin")
class Backup(MemoryOp[BackupResult], tag="memory.backup"):
    path: str
    overwrite: bool = False


@op("Counts, schema version, embedding and WAL status of the memory store.",
    logged=False)
class Stats(MemoryOp[JsonObject], tag="memory.stats"):
    """The report's fields are listed in docs/protocol.md ("memory.stats")."""


@op("The activity log: who read and changed memory, newest first.", access="admin",
    logged=False)
class Activity(MemoryOp[ActivityPage], tag="memory.activity"):
    """``limit`` 1..1000; only ``client``'s entries when given; ids below ``before``
    (paging); ``reads`` false: only writes and refusals."""

    limit: int = 100
    client: str | None = None
    before: int | None = None
    reads: bool = True


@op("Run one consolidator tick now: distil lessons and procedures from clusters of "
    "linked notes.", access="admin", writes=True, route="reflection")
class Consolidate(MemoryOp[TickReport], tag="memory.consolidate"):
    """``ignoreCooldown``: also notes younger than ``memory.consolidation.cooldownMs``."""

    ignore_cooldown: bool = False


MemoryRequest = (ProfileSet | ProfileRemove | ProfileList | ProfileHistory | ProfilePurge
                 | NotesStore | NotesRecall | NotesGet | NotesSearch | NotesForget
                 | NotesArchive | Share | Unshare | NotesList | LessonsRecall | ProceduresRecall
                 | LessonsList | ProceduresList | LessonsGet | ProceduresGet | LinksList | LinksAdd
                 | VotesTail | ContextPreview | Export | Import | Backup | Stats | Activity
                 | Consolidate)
"""Every op's request, tagged by ``op`` (a test holds it equal to :data:`OPS`)."""

TOOL_NAMES: tuple[str, ...] = tuple(name for name, cls in OPS.items() if cls.tool)
"""The agent's memory tools, in catalog order."""

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _check_storable(field: str, value: object) -> None:
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


def op_class(name: str) -> type[MemoryOp[Any]]:
    """The class of the op called ``name``; ValidationError (field ``op``) for none."""
    cls = OPS.get(name)
    if cls is None:
        raise ValidationError("op", f"unknown memory operation {name!r}")
    return cls


def decode_op(name: str, args: object) -> MemoryOp[Any]:
    """The request of op ``name`` with ``args`` (a JSON object: a frame's, a model's; None
    is ``{}``). ValidationError names the bad field: an unknown op, unknown, missing or
    mistyped fields, integers beyond 64 bits and text that is not valid UTF-8 (both would
    fail only when bound to SQLite, as a crash)."""
    cls = op_class(name)
    if isinstance(args, dict) and "op" in args:
        raise ValidationError("op", "unknown field `op` (the op is named outside its args)")
    try:
        decoded = msgspec.convert(args if args is not None else {}, type=cls)
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
    check(decoded)
    return typing.cast(MemoryOp[Any], decoded)


def check(request: MemoryOp[Any]) -> None:
    """Raise ValidationError for a field SQLite could not bind (:func:`decode_op` does
    this; call it on a request built in code from outside input)."""
    for name, encode_name in _field_names(type(request)):
        _check_storable(encode_name, getattr(request, name))


@functools.cache
def _field_names(cls: type) -> tuple[tuple[str, str], ...]:
    """``(attribute, wire name)`` of each field of a request Struct, computed once per
    type: ``msgspec.structs.fields`` evaluates the type annotations on every call
    (~0.4 ms, the largest cost of a memory request by id in the actor's profile;
    ``bench/recall.py``)."""
    return tuple((f.name, f.encode_name) for f in msgspec.structs.fields(cls))


def args_of(request: MemoryOp[Any]) -> JsonObject:
    """The request's arguments as a ``memory`` frame carries them (camelCase, its ``op``
    left out, fields at their default omitted)."""
    out = msgspec.to_builtins(request)
    out.pop("op", None)
    defaults = _defaults(type(request))
    return {k: v for k, v in out.items() if k not in defaults or defaults[k] != v}


@functools.cache
def _defaults(cls: type) -> dict[str, Any]:
    return {f.encode_name: f.default for f in msgspec.structs.fields(cls)
            if f.default is not msgspec.NODEFAULT}


@functools.cache
def args_schema(cls: type[MemoryOp[Any]]) -> JsonObject:
    """The JSON schema of an op's arguments: an object of its fields (``op`` left out),
    unknown fields refused. Nested definitions stay under ``$defs``."""
    schema = msgspec.json.schema(cls)
    defs = dict(schema.get("$defs", {}))
    body = dict(defs.pop(cls.__name__))
    props = {k: v for k, v in body.get("properties", {}).items() if k != "op"}
    out: JsonObject = {"type": "object", "properties": props,
                       "required": [r for r in body.get("required", []) if r != "op"],
                       "additionalProperties": False}
    if defs:
        out["$defs"] = defs
    return out


def tool_catalog() -> list[tuple[str, str, JsonObject]]:
    """(name, summary, JSON schema of args) for each agent tool, in a fixed order
    (the stable prompt prefix renders it, so the order must never depend on state)."""
    return [(name, OPS[name].summary, args_schema(OPS[name])) for name in TOOL_NAMES]


def reply_of(request: MemoryOp[R], data: object) -> R:
    """``data`` (a decoded JSON or msgpack value, or the reply itself) as ``request``'s
    reply type; msgspec.ValidationError when it does not fit."""
    return typing.cast(R, msgspec.convert(data, type=type(request).reply))
