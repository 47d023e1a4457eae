"""``atomic-agent memory …``: one table of sub-commands, each with its parser, its request
and its printer.

Every row of :data:`COMMANDS` is a :class:`MemoryCommand`: where it sits
(``("notes", "list")``), its help, the arguments it adds, the memory op's request it
sends (:mod:`actors.memory.ops`; docs/protocol.md lists the ops), and how its result is
printed. The parser is
built from the table (:func:`add_memory_parser`); :func:`command_for` finds a parsed
command's row. ``reindex``, ``recover`` and ``consolidate`` are no single memory op: they
have their own modules and are added beside the table.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from actors.memory import ops
from actors.memory.client import MemoryRunner
from actors.memory.ops import MemoryOp, Purged, Removed
from actors.store.records import Note, ProfileFact

from .cli_output import (
    counts_text,
    pointer,
    print_fact,
    print_history,
    print_lesson,
    print_link,
    print_note,
    print_note_detail,
    print_procedure,
)

__all__ = ["COMMANDS", "GROUPS", "MemoryCommand", "add_memory_parser", "command_for",
           "row_id", "state_arg"]


def state_arg(p: argparse.ArgumentParser) -> None:
    """``--state-dir`` on a command (every command takes it after its name too)."""
    p.add_argument("--state-dir", metavar="DIR",
                   help="state directory (default: $ATOMIC_AGENT_STATE_DIR, else "
                        "~/.local/state/atomic-agent)")


def row_id(text: str) -> int:
    """argparse type: an id as typed or as listings print it (``7``, ``#7``, ``*7``,
    ``>7``)."""
    try:
        return int(text.strip().lstrip("#*>"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an id: {text!r} (a number, e.g. 7 or #7)"
                                         ) from None


R = TypeVar("R")
T = TypeVar("T")
Printer = Callable[[MemoryRunner, argparse.Namespace, R], Awaitable[None] | None]
"""Prints an op's typed reply as text (``--json`` prints the reply instead)."""


@dataclass(frozen=True)
class MemoryCommand(Generic[R]):
    """One ``memory`` sub-command.

    Attributes:
        path: its words after ``memory`` (``("stats",)``, ``("notes", "list")``).
        help: the one line ``--help`` of its parent shows.
        request: the op's request (``R`` its reply) for the parsed arguments.
        show: prints the op's reply as text (``--json`` prints the reply instead).
        arguments: adds its own arguments to its parser.
        description: its own ``--help`` text (default: ``help``).
        missing: with a reply that says nothing was there (``Removed(removed=False)``, no
            note), the exit status is 1 and this names what was missing.
    """

    path: tuple[str, ...]
    help: str
    request: Callable[[argparse.Namespace], MemoryOp[R]]
    show: Printer[R]
    arguments: Callable[[argparse.ArgumentParser], object] = lambda p: None
    description: str | None = None
    missing: Callable[[argparse.Namespace, R], str | None] = lambda args, data: None


GROUPS = {"profile": "profile facts", "notes": "freeform notes",
          "lessons": "lessons (read-only)", "procedures": "procedures (read-only)",
          "links": "edges between notes"}
"""The ``memory`` sub-commands that group others, with their help."""


def _file(args: argparse.Namespace) -> str:
    return str(Path(args.file).resolve())


def _listing(empty: str, line: Callable[[T], None]) -> Printer[list[T]]:
    def show(c: MemoryRunner, args: argparse.Namespace, data: list[T]) -> None:
        for row in data:
            line(row)
        if not data:
            print(empty)
    return show


def _say(text: Callable[[argparse.Namespace, T], str]) -> Printer[T]:
    def show(c: MemoryRunner, args: argparse.Namespace, data: T) -> None:
        print(text(args, data))
    return show


def _removed(what: Callable[[argparse.Namespace], str]
             ) -> Callable[[argparse.Namespace, Removed | Purged], str | None]:
    return lambda args, data: None if data.removed else what(args)


def _args(*adders: Callable[[argparse.ArgumentParser], object]
          ) -> Callable[[argparse.ArgumentParser], object]:
    def add(p: argparse.ArgumentParser) -> None:
        for adder in adders:
            adder(p)
    return add


def _positional(name: str, help: str, **kw: Any) -> Callable[[argparse.ArgumentParser], object]:
    return lambda p: p.add_argument(name, help=help, **kw)


def _option(*names: str, **kw: Any) -> Callable[[argparse.ArgumentParser], object]:
    return lambda p: p.add_argument(*names, **kw)


def _profile_set(args: argparse.Namespace) -> ops.ProfileSet:
    kws = [k.strip() for k in args.contextual.split(",")] if args.contextual else None
    return ops.ProfileSet(key=args.key, value=args.value, pinned=kws is None, keywords=kws)


def _notes_store(args: argparse.Namespace) -> ops.NotesStore:
    tags = [t.strip() for t in args.tags.split(",")] if args.tags else None
    return ops.NotesStore(content=args.content, tags=tags)


def _profile_history(c: MemoryRunner, args: argparse.Namespace, data: list[ProfileFact]
                     ) -> None:
    print_history(data)
    if not data:
        print(f"(no history for {args.key!r})")


def _removed_text(args: argparse.Namespace, data: Removed | Purged) -> str:
    if isinstance(data, Purged):
        return f"purged {data.versions} version(s) of {args.key!r}"
    return "removed"


def _note_shown(c: MemoryRunner, args: argparse.Namespace, data: list[Note]
                ) -> Awaitable[None]:
    return print_note_detail(c, data[0])


_NOTE_ID = _positional("id", "the note's id (N or #N, as listings show it)", type=row_id)
_KEY = _positional("key", "the fact's key")


def _distilled(what: str, noun: str, list_op: type[ops.LessonsList] | type[ops.ProceduresList],
               get_op: type[ops.LessonsGet] | type[ops.ProceduresGet]) -> list[MemoryCommand[Any]]:
    """``memory lessons|procedures list|show``."""
    mark = "*" if what == "lessons" else ">"
    return [
        MemoryCommand((what, "list"), f"active {what}, newest first",
                      lambda args: list_op(limit=args.limit),
                      _listing(f"(no {what})", lambda row: print(pointer(mark, row))),
                      _option("--limit", type=int, default=20,
                              help="at most this many (1-100)")),
        MemoryCommand((what, "show"), f"one {noun} by id, any status",
                      lambda args: get_op(id=args.id),
                      lambda c, args, data: (print_lesson if what == "lessons"
                                             else print_procedure)(data),
                      _positional("id", f"the {noun}'s id (N, or as listed)", type=row_id)),
    ]


COMMANDS: list[MemoryCommand[Any]] = [
    MemoryCommand(("profile", "list"), "list active facts",
                  lambda args: ops.ProfileList(),
                  _listing("(no profile facts)", print_fact)),
    MemoryCommand(("profile", "set"), "set a fact", _profile_set,
                  lambda c, args, data: print_fact(data),
                  _args(_positional("key", "snake_case name, e.g. home_city"),
                        _positional("value", "the fact's value (quote it)"),
                        _option("--contextual", metavar="KEYWORDS",
                                help="comma-separated keywords: show the fact only when one "
                                     "is mentioned"))),
    MemoryCommand(("profile", "remove"), "remove a fact (history kept; --purge deletes it too)",
                  lambda args: (ops.ProfilePurge(key=args.key) if args.purge
                                else ops.ProfileRemove(key=args.key)),
                  _say(_removed_text),
                  _args(_positional("key", "the fact's key (memory profile list shows them)"),
                        _option("--purge", action="store_true",
                                help="also delete every earlier version (the history), "
                                     "for good")),
                  missing=_removed(lambda args: f"fact {args.key!r} (nothing to purge)"
                                   if args.purge else f"active fact {args.key!r}")),
    MemoryCommand(("profile", "history"), "every version of a fact",
                  lambda args: ops.ProfileHistory(key=args.key),
                  _profile_history, _KEY),
    MemoryCommand(("notes", "list"), "newest notes",
                  lambda args: ops.NotesList(limit=args.limit, archived=args.archived,
                                             space="team" if args.team else "own"),
                  _listing("(no notes)", print_note),
                  _args(_option("--limit", type=int, default=50, help="how many (default 50)"),
                        _option("--archived", choices=["active", "archived", "all"],
                                default="active",
                                help="which notes: active (default), archived or all"),
                        _option("--team", action="store_true",
                                help="your team's shared notes instead of yours "
                                     "(memory.store.team)"))),
    MemoryCommand(("notes", "show"), "one note by id",
                  lambda args: ops.NotesRecall(id=args.id),
                  _note_shown, _NOTE_ID,
                  missing=lambda args, data: None if data else f"note #{args.id}"),
    MemoryCommand(("notes", "store"), "store a note", _notes_store,
                  lambda c, args, data: print_note(data),
                  _args(_positional("content", "the note's text (quote it)"),
                        _option("--tags", help="comma-separated tags"))),
    MemoryCommand(("notes", "recall"), "search notes",
                  lambda args: ops.NotesRecall(query=args.query, k=args.k),
                  _listing("(no matching notes)", print_note),
                  _args(_positional("query", "what to look for (words or a sentence)"),
                        _option("-k", type=int, default=5, help="how many notes (default 5)"))),
    MemoryCommand(("notes", "forget"), "delete a note",
                  lambda args: ops.NotesForget(id=args.id),
                  _say(lambda args, data: "forgotten"), _NOTE_ID,
                  missing=_removed(lambda args: f"note #{args.id}")),
    MemoryCommand(("notes", "archive"), "archive a note: it leaves the memory index but "
                  "stays recallable (--restore undoes it)",
                  lambda args: ops.NotesArchive(id=args.id, archived=not args.restore),
                  _say(lambda args, data: f"#{data.id} " + (
                      "archived (out of the index, still recallable)" if data.archived
                      else "restored")),
                  _args(_NOTE_ID, _option("--restore", action="store_true",
                                          help="bring an archived note back"))),
    MemoryCommand(("share",), "share a note with your team (PostgreSQL engine, "
                  "memory.store.team)",
                  lambda args: ops.Share(id=args.id),
                  _say(lambda args, data: f"shared #{args.id} with your team as #{data.id}"),
                  _NOTE_ID,
                  description="Copy one of your notes into your team's shared space, where "
                              "every member's recall finds it beside their own notes, marked "
                              "as shared. Needs the PostgreSQL engine with memory.store.team "
                              "set, and a client with the team:write scope "
                              "(docs/teams.md)."),
    MemoryCommand(("unshare",), "remove a note from your team's shared space",
                  lambda args: ops.Unshare(id=args.id),
                  _say(lambda args, data: f"removed team note #{args.id}"),
                  _NOTE_ID, missing=_removed(lambda args: f"team note #{args.id}"),
                  description="Remove a note from your team's shared space by its id there "
                              "(`memory notes list --team` shows them); every member's recall "
                              "stops finding it. A member's own note of the same text stays. "
                              "Needs the team:write scope (docs/teams.md)."),
    MemoryCommand(("stats",), "counts, schema, embedding status",
                  lambda args: ops.Stats(),
                  lambda c, args, data: print(json.dumps(data, indent=2))),
    MemoryCommand(
        ("backup",), "a consistent copy of memory.sqlite, also while the daemon runs",
        lambda args: ops.Backup(path=_file(args), overwrite=args.overwrite),
        _say(lambda args, data: f"backed up memory to {data.path} ({data.bytes:,} bytes)"),
        _args(_positional("file", "where to write the copy"),
              _option("--overwrite", action="store_true", help="replace FILE if it exists")),
        description="Copy the memory database to FILE with SQLite's online backup: one "
                    "consistent snapshot, taken by the running daemon (or directly when none "
                    "runs). The copy is a plain SQLite file; put it back as memory.sqlite "
                    "with the daemon stopped to restore it."),
    MemoryCommand(
        ("export",), "write all memory to a JSON-lines file (or stdout)",
        lambda args: ops.Export(path=_file(args), overwrite=args.overwrite),
        _say(lambda args, data: f"exported {counts_text(data.counts)} to {data.path} "
                                f"({data.bytes:,} bytes)"),
        _args(_positional("file", "where to write it (default, or -: stdout)", nargs="?"),
              _option("--overwrite", action="store_true", help="replace FILE if it exists")),
        description="Write every profile fact with its history, every note (tags, scope, "
                    "links), lesson and procedure as versioned JSON lines (docs/protocol.md, "
                    "'Memory export format'); no vectors. Without FILE the export goes to "
                    "stdout. Read by `memory import` here or on another machine."),
    MemoryCommand(
        ("import",), "add the memory of an export file (idempotent)",
        lambda args: ops.Import(path=_file(args)),
        _say(lambda args, data: f"imported from {data.path}: added "
                                f"{counts_text(data.added)}; already there: "
                                f"{counts_text(data.skipped)}"),
        _positional("file", "the export file"),
        description="Import a `memory export` file: notes already stored (the same or a "
                    "near-identical text), fact versions already in a fact's history, and "
                    "lessons, procedures and links already present are skipped, so "
                    "importing the same file twice adds nothing. The whole file is checked "
                    "first; a bad line is one error and nothing is written."),
    MemoryCommand(
        ("context",), "what a turn on MESSAGE would get from memory",
        lambda args: ops.ContextPreview(message=args.message),
        _say(lambda args, data: data.text or "(memory has nothing for this message)"),
        _positional("message", "a user message (quote it)"),
        description="Print the memory sections a turn on MESSAGE would put in the prompt "
                    "(profile, recalled notes, memory index, lessons, procedures), with the "
                    "configured budgets. Nothing is written (no recall counters)."),
    *_distilled("lessons", "lesson", ops.LessonsList, ops.LessonsGet),
    *_distilled("procedures", "procedure", ops.ProceduresList, ops.ProceduresGet),
    MemoryCommand(("links", "list"), "edges, newest first",
                  lambda args: ops.LinksList(limit=args.limit, id=args.note),
                  _listing("(no links)", print_link),
                  _args(_option("--limit", type=int, default=100,
                                help="at most this many (1-1000)"),
                        _option("--note", type=int, metavar="ID",
                                help="only edges of this note"))),
    MemoryCommand(("links", "add"), "link two notes (the consolidator distils linked notes)",
                  lambda args: ops.LinksAdd(from_id=args.from_id, to_id=args.to_id,
                                            kind=args.kind),
                  _say(lambda args, data: f"linked #{data.from_id} -{data.kind}-> "
                                          f"#{data.to_id}"),
                  _args(_positional("from_id", "the first note's id", type=row_id),
                        _positional("to_id", "the second note's id", type=row_id),
                        _option("--kind", default="RELATES_TO",
                                choices=["RELATES_TO", "CAUSED_BY", "REFERENCES",
                                         "CONTRADICTS", "DUPLICATES", "SUPERSEDES"],
                                help="the edge's kind (default RELATES_TO)"))),
]
"""Every ``memory`` sub-command that is one memory op, in ``--help`` order."""

_ORDER = ("profile", "notes", "share", "unshare", "stats", "backup", "export", "import",
          "context", "reindex", "recover", "migrate", "lessons", "procedures", "consolidate",
          "links")
"""The order ``memory --help`` lists its sub-commands in."""


def add_memory_parser(sub: Any, extra: dict[str, Callable[[Any], None]]) -> None:
    """Add ``memory`` and every sub-command of :data:`COMMANDS` to the top-level
    subparsers ``sub``; ``extra`` adds the sub-commands that are no single memory op
    (name → adder called with the ``memory`` subparsers). Every table command takes
    ``--json``."""
    m = sub.add_parser(
        "memory", help="inspect and edit memory",
        description="Read and change what the daemon remembers: profile facts (with their "
                    "history), notes, lessons, procedures and links; stats, backup, export "
                    "and import; reindex and recover (daemon stopped). Through the running "
                    "daemon, or straight on the state directory's files when none runs. "
                    "Every command that runs one memory op takes --json.")
    msub = m.add_subparsers(dest="memory_command", required=True, metavar="WHAT")
    groups: dict[str, Any] = {}
    for name in _ORDER:
        if name in extra:
            extra[name](msub)
            continue
        if name in GROUPS:
            grp = msub.add_parser(name, help=GROUPS[name])
            groups[name] = grp.add_subparsers(dest="action", required=True, metavar="ACTION")
        for command in (c for c in COMMANDS if c.path[0] == name):
            where = groups[name] if len(command.path) == 2 else msub
            p = where.add_parser(command.path[-1], help=command.help,
                                 **({"description": command.description}
                                    if command.description else {}))
            state_arg(p)
            command.arguments(p)
            p.add_argument("--json", action="store_true",
                           help="print the op's result as JSON (docs/protocol.md shapes)")


def command_for(args: argparse.Namespace) -> MemoryCommand[Any]:
    """The row of :data:`COMMANDS` of a parsed ``memory`` command. Raises KeyError for one
    that is no single memory op (``reindex``, ``recover``, ``consolidate``)."""
    what, action = args.memory_command, getattr(args, "action", None)
    path = (what, action) if what in GROUPS else (what,)
    for command in COMMANDS:
        if command.path == path:
            return command
    raise KeyError(" ".join(p for p in path if p))
