"""``atomic-agent tools``: the MCP servers whose tools the agent may use, and each
tool's standing policy (docs/tools.md).

``add`` / ``remove`` edit ``tools.mcpServers`` in ``config.json`` (validated as ``serve``
validates it); ``add`` then starts the server once and lists its tools, so a command
that does not start is said at once. ``list`` reads the config only. ``show`` starts the
server and prints every tool — its full description (a description is text the model
reads: it is shown whole, so hidden instructions are in view), its argument schema,
whether the server calls it read-only, its pin and the policy in force. ``allow`` /
``ask`` / ``deny`` record a policy for one tool at its current pin
(``<state>/tool-policies.json``); if the tool changes later, it asks again.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import trio

from runtime.services.config import TOOL_SERVER_PATTERN, ConfigError, McpServerConfig, load_config
from runtime.services.config_edit import remove_entry, set_entry
from runtime.services.mcp_tools import ToolServerError, ToolSpec, open_server
from runtime.services.tool_policy import (Policy, PolicyBook, PolicyError, standing,
                                         what_changed)

from .cli_output import EXIT_FAILED, EXIT_USAGE
from .safe_text import one_line, print_error
from .state import StateError, ensure_state_dir, read_daemon_info

__all__ = ["add_tools_parser", "split_program", "tools_command"]

_BLOCK = "tools.mcpServers"


def add_tools_parser(sub: Any, state_arg: Any) -> None:
    """``atomic-agent tools add|list|show|remove|allow|ask|deny``."""
    t = sub.add_parser(
        "tools", help="the MCP servers whose tools the agent may use (add, list, show, ...)",
        description="Give the agent tools from MCP servers: a local program spoken to over "
                    "stdio (tools add NAME -- COMMAND ARGS...) or a streamable HTTP server "
                    "(tools add NAME --url URL). Each tool is named SERVER.TOOL. A tool "
                    "its server calls read-only is allowed; any other asks you before it "
                    "runs, until you allow or deny it (tools allow|deny SERVER.TOOL); a "
                    "tool whose description or arguments change asks again. See "
                    "docs/tools.md.")
    tsub = t.add_subparsers(dest="tools_command", required=True, metavar="ACTION")
    a = tsub.add_parser(
        "add", help="add an MCP server: NAME -- COMMAND ARGS... or NAME --url URL",
        description="Add an MCP server to config.json and start it once to list its tools. "
                    "Examples: atomic-agent tools add time -- mcp-server-time; "
                    "atomic-agent tools add git -- mcp-server-git --repository ~/src/app; "
                    "atomic-agent tools add docs --url https://example.com/mcp "
                    "--token-file docs-token.")
    state_arg(a)
    a.add_argument("name", help="the server's name: lower case letters, digits, - and _, "
                                "starting with a letter (it prefixes its tools: NAME.TOOL)")
    a.add_argument("program", nargs="*", metavar="COMMAND",
                   help="after --: the program and its arguments (stdio servers)")
    a.add_argument("--url", help="a streamable HTTP MCP server's URL instead of a program")
    a.add_argument("--header", action="append", default=[], metavar="NAME=VALUE",
                   help="an HTTP header for --url (repeatable)")
    a.add_argument("--token-file", metavar="FILE",
                   help="a file holding a bearer token for --url (relative to the state dir)")
    a.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="an environment variable for the program (repeatable)")
    a.add_argument("--cwd", metavar="DIR", help="the program's working directory")
    a.add_argument("--replace", action="store_true", help="replace a server of that name")
    ls = tsub.add_parser("list", help="the configured servers (no server is started)")
    state_arg(ls)
    ls.add_argument("--json", action="store_true", help="print JSON")
    sh = tsub.add_parser("show", help="start NAME and print its tools, in full, with policies")
    state_arg(sh)
    sh.add_argument("name", help="the server's name (tools list)")
    sh.add_argument("--json", action="store_true", help="print JSON")
    rm = tsub.add_parser("remove", help="remove NAME and what was decided about its tools")
    state_arg(rm)
    rm.add_argument("name", help="the server's name (tools list)")
    for action, text in (("allow", "let SERVER.TOOL run without asking"),
                         ("ask", "ask before each run of SERVER.TOOL (the default)"),
                         ("deny", "never run SERVER.TOOL")):
        x = tsub.add_parser(action, help=text)
        state_arg(x)
        x.add_argument("tool", help="SERVER.TOOL (tools show SERVER lists them)")


def split_program(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``tools add NAME [options] -- COMMAND ARGS...``: the arguments before ``--`` (for
    the parser) and the program's command line after it (None without one). argparse
    cannot take options of ours after a positional list and before ``--``, and the
    program's own options must never be read as ours."""
    if "--" not in argv:
        return argv, None
    cut = argv.index("--")
    if "tools" not in argv[:cut]:
        return argv, None
    return argv[:cut], argv[cut + 1:]


def tools_command(args: argparse.Namespace, state_dir: Path) -> int:
    """Run one ``tools`` action; its exit status (0 ok, 1 failed, 2 bad usage)."""
    try:
        match args.tools_command:
            case "add":
                return _add(args, state_dir)
            case "list":
                return _list(args, state_dir)
            case "show":
                return trio.run(_show, args, state_dir)
            case "remove":
                return _remove(args, state_dir)
            case _:
                return trio.run(_decide, args, state_dir, args.tools_command)
    except (ConfigError, PolicyError) as exc:
        print_error(str(exc))
        return EXIT_USAGE
    except ToolServerError as exc:
        print_error(str(exc))
        return EXIT_FAILED


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ConfigError(f"{what} {item!r}: expected NAME=VALUE")
        out[key] = value
    return out


def _add(args: argparse.Namespace, state_dir: Path) -> int:
    import re

    if not re.fullmatch(TOOL_SERVER_PATTERN, args.name):
        raise ConfigError(f"{args.name!r} is not a server name: lower case letters, digits, "
                          "- and _, starting with a letter, at most 32")
    command = list(args.program)
    if bool(command) == bool(args.url):
        raise ConfigError("give the server's program after -- (tools add NAME -- COMMAND "
                          "ARGS...) or its --url, one of them")
    try:
        ensure_state_dir(state_dir)
    except StateError as exc:
        raise ConfigError(str(exc)) from None
    servers = load_config(state_dir).tools.mcp_servers
    if args.name in servers and not args.replace:
        raise ConfigError(f"a server named {args.name!r} is configured already (--replace "
                          "to replace it, tools remove to remove it)")
    entry: dict[str, Any] = {}
    if command:
        program = command[0]
        if "/" in program and not Path(program).is_absolute():  # the daemon runs elsewhere
            program = str(Path(program).resolve())
        entry.update(command=program, args=command[1:])
        if args.env:
            entry["env"] = _pairs(args.env, "--env")
        if args.cwd:
            entry["cwd"] = args.cwd
    else:
        entry["url"] = args.url
        if args.header:
            entry["headers"] = _pairs(args.header, "--header")
        if args.token_file:
            entry["tokenFile"] = args.token_file
    cfg = set_entry(state_dir, _BLOCK, args.name, entry)
    print(f"{'replaced' if args.replace else 'added'} MCP server {args.name!r} in "
          f"{state_dir / 'config.json'}")
    try:
        tools = trio.run(_tools_of, args.name, cfg.tools.mcp_servers[args.name], state_dir)
    except ToolServerError as exc:
        print_error(f"{exc} (it stays configured: fix it with 'tools add {args.name} "
                    f"--replace ...' or remove it with 'tools remove {args.name}')")
        return EXIT_FAILED
    book = PolicyBook(state_dir)
    print(f"{len(tools)} tool{'s' if len(tools) != 1 else ''}:")
    for spec in tools:
        print(f"  {spec.qualified}  [{standing(spec, book.entry(spec.qualified)).policy}]")
    print(f"('tools show {args.name}' prints their descriptions; a running daemon starts "
          "the server at its next start (atomic-agent stop, then serve); a tool marked "
          "[ask] asks you before each run: docs/tools.md)")
    return 0


def _list(args: argparse.Namespace, state_dir: Path) -> int:
    servers = load_config(state_dir).tools.mcp_servers
    book = PolicyBook(state_dir)
    if args.json:
        print(json.dumps({name: {"kind": "stdio" if s.command else "http",
                                 "target": _target(s), "enabled": s.enabled,
                                 "decided": sorted(q for q in book.entries()
                                                   if q.startswith(name + "."))}
                          for name, s in servers.items()}, indent=2))
        return 0
    if not servers:
        print("(no MCP servers: atomic-agent tools add NAME -- COMMAND ARGS...)")
        return 0
    width = max(len(n) for n in servers)
    for name, s in sorted(servers.items()):
        state = "" if s.enabled else "  (disabled)"
        print(f"{name:<{width}}  {'stdio' if s.command else 'http '}  "
              f"{one_line(_target(s))}{state}")
    return 0


def _target(s: McpServerConfig) -> str:
    return " ".join([s.command or "", *s.args]) if s.command else (s.url or "")


async def _tools_of(name: str, cfg: McpServerConfig, state_dir: Path) -> list[ToolSpec]:
    async with open_server(name, cfg, state_dir) as link:
        return await link.list_tools()


def _server(state_dir: Path, name: str) -> McpServerConfig:
    servers = load_config(state_dir).tools.mcp_servers
    if name not in servers:
        known = ", ".join(sorted(servers)) or "none"
        raise ConfigError(f"no MCP server named {name!r} (configured: {known})")
    return servers[name]


async def _show(args: argparse.Namespace, state_dir: Path) -> int:
    cfg = _server(state_dir, args.name)
    tools = await _tools_of(args.name, cfg, state_dir)
    book = PolicyBook(state_dir)
    if args.json:
        print(json.dumps([{**_spec_json(spec), "standing": standing(
            spec, book.entry(spec.qualified)).policy} for spec in tools], indent=2))
        return 0
    print(f"{args.name}: {one_line(_target(cfg))}")
    for spec in tools:
        entry = book.entry(spec.qualified)
        now = standing(spec, entry)
        why = {"default-read-only": "read-only by the server's word",
               "default": "not read-only: asks before it runs",
               "decided": "decided",
               "changed": f"its {what_changed(spec, entry) if entry else 'description'} "
                          "CHANGED since it was decided: asks again"}[now.reason]
        print(f"\n{spec.qualified}  [{now.policy}: {why}]")
        print(f"  pin {spec.pin[:16]}")
        for line in (spec.description or "(no description)").splitlines() or [""]:
            print(f"  | {one_line(line)}")
        print(f"  arguments: {one_line(json.dumps(spec.input_schema, ensure_ascii=False))}")
    return 0


def _spec_json(spec: ToolSpec) -> dict[str, Any]:
    import msgspec

    data: dict[str, Any] = msgspec.to_builtins(spec)
    data["qualified"] = spec.qualified
    return data


async def _decide(args: argparse.Namespace, state_dir: Path, policy: Policy) -> int:
    server, dot, tool = args.tool.partition(".")
    if not dot or not tool:
        raise ConfigError(f"{args.tool!r}: name the tool as SERVER.TOOL (tools show SERVER)")
    tools = await _tools_of(server, _server(state_dir, server), state_dir)
    found = next((t for t in tools if t.name == tool), None)
    if found is None:
        names = ", ".join(t.name for t in tools) or "none"
        raise ConfigError(f"server {server!r} has no tool {tool!r} (its tools: {names})")
    PolicyBook(state_dir).decide(found, policy, by="cli")
    print(f"{found.qualified}: {policy}" + (
        " (it stays denied, even if the server changes it)" if policy == "deny" else
        " (for this description and arguments; if the server changes them, it asks again)"))
    return 0


def _remove(args: argparse.Namespace, state_dir: Path) -> int:
    if not remove_entry(state_dir, _BLOCK, args.name):
        _server(state_dir, args.name)  # names the configured ones
    dropped = PolicyBook(state_dir).forget_server(args.name)
    print(f"removed MCP server {args.name!r}" + (f" and {dropped} tool decision"
                                                 f"{'s' if dropped != 1 else ''}"
                                                 if dropped else ""))
    if read_daemon_info(state_dir) is not None:
        print("(the running daemon keeps the server until it restarts: atomic-agent stop, "
              "then atomic-agent serve)")
    return 0
