"""Per-process structlog set-up.

Every process (root and each actor) calls :func:`configure` once, before anything
else: JSON lines tagged with ``actor`` and ``pid`` go to stderr (stdout of
``serve`` is reserved for the one ready line) and, when a log directory is given,
are appended to ``<logs>/<actor>.log``.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TextIO, cast

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


class _Tee:
    """A file-like that writes each log line to several streams."""

    def __init__(self, *streams: TextIO) -> None:
        self._streams = streams

    def write(self, data: str) -> int:
        for s in self._streams:
            try:
                s.write(data)
            except (OSError, ValueError):
                pass
        return len(data)

    def flush(self) -> None:
        for s in self._streams:
            try:
                s.flush()
            except (OSError, ValueError):
                pass


def configure(actor: str, *, log_dir: str | Path | None = None, level: str = "info") -> None:
    """Configure structlog for this process.

    Args:
        actor: name bound on every line (``root``, ``memory`` …).
        log_dir: directory for ``<actor>.log`` (created if missing), or None.
        level: ``debug`` | ``info`` | ``warning`` | ``error``.
    """
    streams: list[TextIO] = [sys.stderr]
    if log_dir is not None:
        try:
            Path(log_dir).mkdir(parents=True, exist_ok=True)
            streams.append(open(Path(log_dir) / f"{actor}.log", "a", buffering=1, encoding="utf-8"))
        except OSError as exc:  # an unwritable log dir must not stop the daemon
            print(f"atomic-agent: cannot write logs to {log_dir} ({exc.strerror}); "
                  "logging to stderr only", file=sys.stderr)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        # One write per record (line and newline together): print() writes them apart, and
        # with unbuffered stderr (PYTHONUNBUFFERED) two actors' lines got joined.
        logger_factory=structlog.WriteLoggerFactory(cast(TextIO, _Tee(*streams))),
        cache_logger_on_first_use=False,
    )
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(actor=actor, pid=os.getpid())


def configure_cli(level: str = "warning") -> None:
    """Configure structlog for a one-shot CLI command: human-readable lines on stderr
    (stdout carries only the command's result, e.g. ``memory reindex``'s JSON), at
    ``level`` and above."""
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.WARNING)),
        logger_factory=structlog.WriteLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
