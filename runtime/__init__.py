"""atomic-agent's actor runtime: the kernel every process shares (DESIGN §1).

Public surface, deliberately short (each name is pinned by ``tests/test_codec.py::test_runtime_exports``).

Importing this package first imports two libraries with optional extras hidden, so
that a daemon process does not pay for them at start: ``structlog.dev`` imports
``rich`` (when installed: the terminal UI's textual brings it) only to pretty-print
exceptions in a console renderer that never shows a user anything, and ``httpx``
imports its command-line tool (``httpx._main``: click, rich, pygments) whenever those
happen to be installed. Together ~200 ms of CPU in each of the daemon's five processes
at start, on 2 cores (``python -X importtime -c "import runtime._child"``;
``bench.lifecycle``). Both stay importable afterwards (the TUI imports rich itself).
"""

import importlib as _importlib
import sys as _sys


def _import_hiding(name: str, hidden: tuple[str, ...]) -> None:
    """Import ``name`` (unless already imported) while ``import`` of each module in
    ``hidden`` raises ImportError (a ``None`` entry in ``sys.modules``), then unhide."""
    if name in _sys.modules:
        return
    saved = {h: _sys.modules.get(h) for h in hidden if h in _sys.modules}
    for h in hidden:
        _sys.modules[h] = None  # type: ignore[assignment]
    try:
        _importlib.import_module(name)
    finally:
        for h in hidden:
            if h in saved:
                _sys.modules[h] = saved[h]  # type: ignore[assignment]
            else:
                del _sys.modules[h]


_import_hiding("structlog", ("rich",))
_import_hiding("httpx", ("httpx._main",))

from ._channel import Channel as Channel
from ._spawn import ActorSpec as ActorSpec
from ._spawn import spawn_actor as spawn_actor
from ._spawn import stop_process as stop_process
from ._supervise import RestartPolicy as RestartPolicy
from ._supervise import Supervisor as Supervisor
from ._supervise import open_supervisor as open_supervisor
from .actor import ActorContext as ActorContext
from .actor import Handler as Handler
from .errors import ActorCrashed as ActorCrashed
from .errors import ActorTooSlow as ActorTooSlow
from .errors import ActorUnavailable as ActorUnavailable
from .errors import FrameTooLarge as FrameTooLarge
from .errors import ProtocolViolation as ProtocolViolation
from .errors import RemoteError as RemoteError
from .errors import RestartIntensityExceeded as RestartIntensityExceeded
from .errors import RuntimeFailure as RuntimeFailure
from .errors import TransportClosed as TransportClosed
from .messages import PROTOCOL_VERSION as PROTOCOL_VERSION

__all__ = [
    "PROTOCOL_VERSION",
    "ActorContext",
    "ActorCrashed",
    "ActorSpec",
    "ActorTooSlow",
    "ActorUnavailable",
    "Channel",
    "FrameTooLarge",
    "Handler",
    "ProtocolViolation",
    "RemoteError",
    "RestartIntensityExceeded",
    "RestartPolicy",
    "RuntimeFailure",
    "Supervisor",
    "TransportClosed",
    "open_supervisor",
    "spawn_actor",
    "stop_process",
]
