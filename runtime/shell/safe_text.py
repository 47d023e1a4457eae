"""Terminal-safe text: what the CLI, the TUI and log lines print of stored, imported or
remote text shows control characters as visible escapes instead of obeying them.

Memory holds text any write-scoped app or imported file put there. Printed raw, a note
could write the clipboard (OSC 52, ``ESC ] 52 ; c ; … BEL``), retitle the window, clear
the screen, hide text behind a bidi override (U+202E) or forge a line of output
(``CR`` then ``name: Mallory``). :func:`visible` writes each such character as a JSON-style
``\\u`` escape with four hex digits (``\\u001b``): readable, and inside JSON output the same character, so ``--json``
stays exact.

What is escaped (:data:`_UNSAFE`): C0 controls but line feed and tab, DEL, C1 controls
(U+0080-U+009F: U+009B is a one-byte CSI), and the invisible format characters that
reorder or hide text — bidi embeddings, overrides and isolates (U+202A-U+202E,
U+2066-U+2069), marks (U+200E, U+200F, U+061C), zero-width characters (U+200B-U+200D,
U+2060-U+2064, U+FEFF). Unicode Technical Report #36 (security considerations) and
CVE-2021-42574 ("Trojan Source") describe the bidi attack.

:class:`SafeStream` applies it to everything written to ``sys.stdout`` / ``sys.stderr``
by the CLI (:func:`install`); the status line's own ``CR ESC [ K`` goes through
:meth:`SafeStream.write_control`.
"""

from __future__ import annotations

import io
import re
import sys
from typing import BinaryIO, TextIO

__all__ = ["SafeStream", "install", "one_line", "print_error", "visible",
           "write_control"]

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e"
                     "\u2060-\u2064\u2066-\u2069\ufeff]")


def _escape(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group(0)):04x}"


def visible(text: str) -> str:
    """``text`` with every control and invisible format character (module docstring)
    written as a ``\\u`` escape with four hex digits; line feeds and tabs kept.

    >>> visible("hi\\x1b]52;c;ZXZpbA==\\x07 there")
    'hi\\\\u001b]52;c;ZXZpbA==\\\\u0007 there'
    >>> visible("abc\\u202edcba")
    'abc\\\\u202edcba'
    """
    return _UNSAFE.sub(_escape, text)


def one_line(text: str) -> str:
    """``text`` for a one-line print: :func:`visible`, with line feeds as ``\\n`` and
    tabs as a space (a stored ``\\nname: Mallory`` cannot forge a line of its own)."""
    return visible(text).replace("\n", "\\n").replace("\t", " ")


class SafeStream(io.TextIOBase):
    """A text stream that writes :func:`visible` text to ``raw`` (module docstring).
    ``buffer``, ``isatty``, ``fileno`` and ``encoding`` are ``raw``'s."""

    def __init__(self, raw: TextIO) -> None:
        self.raw = raw

    def write(self, s: str) -> int:
        self.raw.write(visible(s))
        return len(s)

    def write_control(self, s: str) -> None:
        """Write ``s`` as it is: the program's own terminal control (the status line)."""
        self.raw.write(s)

    def flush(self) -> None:
        self.raw.flush()

    def isatty(self) -> bool:
        return self.raw.isatty()

    def fileno(self) -> int:
        return self.raw.fileno()

    def writable(self) -> bool:
        return True

    @property
    def buffer(self) -> BinaryIO:
        """The raw stream's binary buffer (bytes written there are the caller's)."""
        return self.raw.buffer

    # TextIOBase declares ``encoding`` a plain attribute; here it is raw's, read-only
    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.raw.encoding


def install() -> None:
    """Put :class:`SafeStream` in front of ``sys.stdout`` and ``sys.stderr`` (once)."""
    if not isinstance(sys.stdout, SafeStream):
        sys.stdout = SafeStream(sys.stdout)
    if not isinstance(sys.stderr, SafeStream):
        sys.stderr = SafeStream(sys.stderr)


def write_control(stream: TextIO, sequence: str) -> None:
    """Write the program's own terminal control ``sequence`` (``\r``, ``ESC [ K``) to
    ``stream``: past a :class:`SafeStream` (which would print it escaped), as it is to
    any other stream."""
    getattr(stream, "write_control", stream.write)(sequence)


def print_error(message: str) -> None:
    """Print ``atomic-agent: <message>`` to ``sys.stderr`` as one line (:func:`one_line`),
    flushed: a path, name or server error that carries a line feed or a control character
    cannot split the error across lines or forge a line of its own."""
    print(f"atomic-agent: {one_line(message)}", file=sys.stderr, flush=True)
