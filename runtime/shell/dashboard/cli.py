"""``atomic-agent ui``: log this browser in to the dashboard of the running daemon.

Asks the daemon (``POST /ui/api/login-code`` with the owner's token) for a one-time
login link, prints it, and opens it in a browser where one can be opened (``--no-open``
only prints). The link works once, for two minutes; the browser then holds an
HttpOnly session cookie.
"""

from __future__ import annotations

import argparse
import webbrowser
from pathlib import Path
from typing import Any

import httpx

from ..cli_output import EXIT_FAILED, EXIT_NOT_RUNNING
from ..state import read_daemon_info
from ..safe_text import print_error

__all__ = ["add_ui_parser", "ui_command"]


def add_ui_parser(sub: Any, state_arg: Any) -> None:
    """``atomic-agent ui``."""
    u = sub.add_parser(
        "ui", help="open the memory dashboard in a browser (prints a one-time login link)",
        description="Print a one-time login link to the dashboard of the running daemon "
                    "(its HTTP port, under /ui) and open it in a browser where one can be "
                    "opened. The dashboard shows what the daemon remembers, which app read "
                    "or wrote what, and lets you edit, forget and govern apps' access.")
    state_arg(u)
    u.add_argument("--no-open", action="store_true", help="only print the link")


def ui_command(args: argparse.Namespace, state_dir: Path) -> int:
    """Print (and open) the login link; 3 when no daemon runs, 1 on other failures."""
    info = read_daemon_info(state_dir)
    if info is None:
        print_error(f"no daemon is running for {state_dir}; start it with: "
                    f"atomic-agent serve")
        return EXIT_NOT_RUNNING
    base = (info.get("openaiUrl") or "").removesuffix("/v1")
    if not base:
        print_error("the daemon's HTTP port is off (server.httpEnabled false); the "
                    "dashboard is served there")
        return EXIT_FAILED
    try:
        token = Path(info["tokenFile"]).read_text().strip()
        response = httpx.post(base + "/ui/api/login-code",
                              headers={"Authorization": f"Bearer {token}"}, timeout=10)
        response.raise_for_status()
        url = base + response.json()["path"]
    except (OSError, KeyError, ValueError, httpx.HTTPError) as exc:
        print_error(f"could not get a login link from {base}: {exc}")
        return EXIT_FAILED
    print(f"Dashboard: {url}")
    print("(the link logs one browser in; it works once, for two minutes)")
    if not args.no_open:
        try:
            opened = webbrowser.open(url)
        except webbrowser.Error:
            opened = False
        if not opened:
            print("(no browser could be opened here: open the link yourself)")
    return 0
