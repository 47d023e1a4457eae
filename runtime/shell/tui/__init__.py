"""``atomic-agent tui``: a textual terminal UI, a client of the running daemon.

Modules, one job each: :mod:`.bridge` (the trio websocket client in a thread, used
from textual's asyncio loop), :mod:`.app` (the application and :func:`run_tui`),
:mod:`.chat` (the chat screen and its memory panel), :mod:`.browser` (Manage →
Memory), :mod:`.dialogs` (detail, confirm, edit, help) and :mod:`.render` (pure text
helpers). Needs the ``tui`` extra (textual).
"""

from __future__ import annotations

from .app import AtomicTUI as AtomicTUI
from .app import run_tui as run_tui

__all__ = ["AtomicTUI", "run_tui"]
