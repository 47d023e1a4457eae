"""A one-line "still working" status for the CLI while it waits.

On a terminal, ``ask`` and ``chat`` show ``… the model is working (12 s)`` on stderr
while a turn has produced no text yet, and ``… memory: reflecting on this turn (3 s)``
while the turn's reflection runs, redrawn every half second and erased before anything
else is printed. When stderr is not a terminal (a pipe, a file, a test) nothing is
drawn, so scripted output stays exactly what it was.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

import trio

from .safe_text import write_control

REDRAW_S = 0.5


class StatusLine:
    """The status line on ``stream`` (default stderr); a no-op unless it is a TTY.

    ``show(label)`` starts (or replaces) the status, ``clear()`` erases it; :meth:`run`
    redraws the elapsed seconds until cancelled (start it in a nursery).
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        try:
            self.enabled = self.stream.isatty()
        except (AttributeError, ValueError):
            self.enabled = False
        self.label: str | None = None
        self.since = 0.0

    def show(self, label: str) -> None:
        """Show ``… label (N s)``, N counted from now."""
        self.label, self.since = label, time.monotonic()
        self._draw()

    def clear(self) -> None:
        """Erase the status (before other output); idempotent."""
        if self.label is not None and self.enabled:
            self._control("\r\033[K")
            self.stream.flush()
        self.label = None

    def _draw(self) -> None:
        if self.enabled and self.label is not None:
            elapsed = time.monotonic() - self.since
            self._control("\r\033[K")
            self.stream.write(f"… {self.label} ({elapsed:.0f} s)")
            self.stream.flush()

    def _control(self, sequence: str) -> None:
        """Write the status line's own terminal control past a terminal-safe stream
        (:class:`~runtime.shell.safe_text.SafeStream`, which would show it escaped)."""
        write_control(self.stream, sequence)

    async def run(self) -> None:
        """Redraw every :data:`REDRAW_S` seconds until cancelled."""
        while True:
            await trio.sleep(REDRAW_S)
            self._draw()
