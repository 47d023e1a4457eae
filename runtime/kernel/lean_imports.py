"""Importing a library without the optional parts it would drag in at start.

``structlog.dev`` imports ``rich`` (when installed: the terminal UI's textual brings it)
only to pretty-print exceptions in a console renderer that never shows a user anything,
and ``httpx`` imports its command-line tool (``httpx._main``: click, rich, pygments)
whenever those happen to be installed. Together ~200 ms of CPU in each of the daemon's
five processes at start on 2 cores (``python -X importtime -c "import runtime.kernel._child"``;
``bench.lifecycle``). Each floor that uses such a library imports it through
:func:`import_hiding` before it (the kernel, in its package ``__init__``: structlog; the
shell, in its ``__init__``: httpx; the services, in each module that imports httpx, so that
a process that only talks to an actor loads no HTTP client at all). Both stay importable afterwards
(the terminal UI imports rich itself).
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["import_hiding"]


def import_hiding(name: str, hidden: tuple[str, ...]) -> None:
    """Import ``name`` (unless already imported) while ``import`` of each module in
    ``hidden`` raises ImportError (a ``None`` entry in ``sys.modules``), then unhide.
    Raises what importing ``name`` raises."""
    if name in sys.modules:
        return
    saved = {h: sys.modules.get(h) for h in hidden if h in sys.modules}
    for h in hidden:
        sys.modules[h] = None  # type: ignore[assignment]  # None blocks the import (documented)
    try:
        importlib.import_module(name)
    finally:
        for h in hidden:
            if h in saved:
                sys.modules[h] = saved[h]  # type: ignore[assignment]
            else:
                del sys.modules[h]
