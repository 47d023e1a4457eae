"""The memory operations by name: each op's argument Struct, what it does, whether the
agent may call it as a tool, and whether it writes.

One table, :data:`OPS`, serves every caller: the agent's tool calls (the tools
``memory.profile.set/remove/list``, ``memory.notes.store/recall/forget``,
``memory.lessons.recall``, ``memory.procedures.recall``), the websocket gateway's
``memory`` frames, the MCP server, the OpenAI-compatible API and the offline CLI. The
memory actor answers each op with the handler of the same name
(:data:`actors.memory.router.HANDLERS`). ``args`` from a model or a client are converted
with msgspec (:func:`decode_args`); unknown or mistyped fields become
:class:`~actors.store.errors.ValidationError` (code ``invalid_argument``) naming the
field, so a model can retry. This module reads no store: a process that only talks to
memory (the agent, the gateway) validates and describes ops without opening SQLite.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from actors.store.errors import ValidationError


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
    """``memory.notes.search``: keyword-only (BM25) search for operators (the
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


def tool_catalog() -> list[tuple[str, str, dict[str, Any]]]:
    """(name, description, JSON schema of args) for each agent tool, in a fixed order
    (the stable prompt prefix renders it, so the order must never depend on state)."""
    out = []
    for name in TOOL_NAMES:
        spec = OPS[name]
        schema = msgspec.json.schema(spec.args)
        out.append((name, spec.description, schema))
    return out
