"""``atomic-agent clients`` (per-app tokens, :mod:`.clients`) and ``atomic-agent
activity`` (the activity log, :mod:`actors.store.activity`).

``clients`` edits ``<state>/clients.json`` itself, so it works with the daemon running
or not; a running daemon notices within half a second (a revoked or paused app is
disconnected). ``activity`` asks the running daemon (``memory.activity``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .cli_output import EXIT_FAILED, EXIT_USAGE, when
from .clients import SCOPES, ClientsError, add_client, read_clients, set_client
from .safe_text import print_error

__all__ = ["activity_text", "add_activity_parser", "add_clients_parser", "clients_command"]


def add_clients_parser(sub: Any, state_arg: Any) -> None:
    """``atomic-agent clients add|list|revoke|pause|resume``."""
    c = sub.add_parser(
        "clients", help="per-app tokens with scopes (add, list, revoke, pause, resume)",
        description="Give each app (an MCP client, a script, a program on the OpenAI API) "
                    "a token of its own with only the scopes it needs: read, write, "
                    "forget, admin. The daemon's own token (<state>/token) keeps every "
                    "scope. An app without a scope gets a 'forbidden' refusal naming it "
                    "and nothing changes; revoking or pausing an app disconnects it and "
                    "leaves the others.")
    csub = c.add_subparsers(dest="clients_command", required=True, metavar="ACTION")
    a = csub.add_parser("add", help="register NAME and print its token (shown once)")
    state_arg(a)
    a.add_argument("name", help="the app's name: 1-40 letters, digits, _ . -, starting with "
                                "a letter or digit")
    a.add_argument("--scopes", required=True,
                   help=f"comma-separated, from: {', '.join(SCOPES)} (e.g. read,write)")
    a.add_argument("--json", action="store_true", help="print {name, token, scopes} as JSON")
    ls = csub.add_parser("list", help="the registered apps, their scopes and state")
    state_arg(ls)
    ls.add_argument("--json", action="store_true", help="print JSON")
    for action, text in (("revoke", "remove NAME's token for good (it is disconnected)"),
                         ("pause", "refuse NAME until it is resumed (it is disconnected)"),
                         ("resume", "let a paused NAME connect again")):
        x = csub.add_parser(action, help=text)
        state_arg(x)
        x.add_argument("name", help="the app's name (atomic-agent clients list)")


def add_activity_parser(sub: Any, state_arg: Any) -> None:
    """``atomic-agent activity``."""
    a = sub.add_parser(
        "activity", help="which app read and wrote which memory (newest first)",
        description="The activity log: every memory read and write with the app that made "
                    "it (a client token's name, the CLI, the TUI, an MCP client, the "
                    "agent or reflection for the app whose turn it was), the ids it touched "
                    "and the outcome. Shows writes and refusals; --all adds the reads. "
                    "Bounded (the oldest entries are dropped and counted); never part of an "
                    "export.")
    state_arg(a)
    a.add_argument("--client", help="only this app's entries")
    a.add_argument("--all", action="store_true",
                   help="reads too (by default: what changed memory, and what was refused)")
    a.add_argument("--limit", type=int, default=50, help="entries to show (1-1000, default 50)")
    a.add_argument("--json", action="store_true", help="print the daemon's answer as JSON")


def _applied(state_dir: Path) -> None:
    """Make a running daemon apply clients.json now: a frame from the owner has it read
    the file again and close the connections of apps revoked or paused before it answers,
    so when ``clients revoke`` returns, the app's connections are closed. Nothing when no
    daemon runs (it reads the file when it starts)."""
    import trio

    from .client import ClientError, open_daemon
    from .outbound import Pong
    from .protocol import Ping

    async def ping() -> None:
        with trio.move_on_after(10):
            async with open_daemon(state_dir, client="cli") as c:
                await c.request(Ping(), Pong)

    try:
        trio.run(ping)
    except (ClientError, OSError):
        pass


def clients_command(args: argparse.Namespace, state_dir: Path) -> int:
    """Run ``clients ACTION``; errors are one line on stderr (exit 1, or 2 for a bad
    argument)."""
    try:
        if args.clients_command == "add":
            scopes = args.scopes.split(",")
            token = add_client(state_dir, args.name, scopes)
            entry = next(c for c in read_clients(state_dir).clients if c.name == args.name)
            if args.json:
                print(json.dumps({"name": entry.name, "token": token, "scopes": entry.scopes}))
            else:
                print(f"client {entry.name!r} added with scopes {', '.join(entry.scopes)}")
                print(f"token (shown once; give it to the app as its API key or "
                      f"ATOMIC_AGENT_TOKEN):\n{token}")
            return 0
        if args.clients_command == "list":
            entries = read_clients(state_dir).clients
            if args.json:
                print(json.dumps([{"name": e.name, "scopes": e.scopes, "createdAt": e.created_at,
                                   "paused": e.paused} for e in entries]))
                return 0
            if not entries:
                print("no clients yet (atomic-agent clients add NAME --scopes read,write)")
            width = max((len(e.name) for e in entries), default=0)
            for e in entries:
                state = "paused" if e.paused else "active"
                print(f"{e.name:<{width}}  {','.join(e.scopes):<23}  {state:<6}  added "
                      f"{when(e.created_at)}")
            return 0
        action = args.clients_command
        set_client(state_dir, args.name, revoke=action == "revoke",
                   paused={"pause": True, "resume": False}.get(action))
        if action != "resume":
            _applied(state_dir)
        print({"revoke": f"client {args.name!r} revoked",
               "pause": f"client {args.name!r} paused",
               "resume": f"client {args.name!r} resumed"}[action])
        return 0
    except ClientsError as exc:
        print_error(str(exc))
        return EXIT_USAGE if exc.code == "invalid_argument" else EXIT_FAILED
    except OSError as exc:
        print_error(f"cannot write {state_dir / 'clients.json'}: "
                    f"{exc.strerror or exc}")
        return EXIT_FAILED


def activity_text(data: dict[str, Any], client: str | None = None) -> str:
    """The activity log as lines: ``time  client  op  ids  outcome``, then the counts;
    ``client``: the app asked for (an unknown one is said so, with the apps seen)."""
    lines = []
    width = max((len(e["client"]) for e in data.get("entries", [])), default=0)
    for e in data.get("entries", []):
        ids = ", ".join(f"#{i}" if isinstance(i, int) else str(i) for i in e["ids"][:8])
        more = f" (+{len(e['ids']) - 8})" if len(e["ids"]) > 8 else ""
        outcome = "" if e["outcome"] == "ok" else f"  [{e['outcome']}]"
        lines.append(f"{when(e['at'])}  {e['client']:<{width}}  {e['op']}  {ids}{more}{outcome}")
    if not lines and not data.get("enabled", True):
        lines.append("the activity log is off (it could not be opened: the daemon's log "
                     "says why)")
    elif not lines and client:
        seen = ", ".join(c["client"] for c in data.get("clients", [])) or "none yet"
        lines.append(f"no activity by {client!r} (apps seen: {seen})")
    elif not lines:
        lines.append("no activity yet")
    kept = data.get("kept", 0)
    lines.append(f"({kept} {'entry' if kept == 1 else 'entries'} kept, "
                 f"{data.get('dropped', 0)} older ones dropped)")
    return "\n".join(lines)
