"""atomic-agent's runtime: three of the four floors of the code (``docs/architecture.md``, "Floors").

Each floor is one package and imports only the floors below it (checked by the
import-linter contracts in ``pyproject.toml``, run by ``tests/test_architecture.py``):

* ``runtime.shell``    -- the daemon's composition root and everything a user touches:
  ``serve`` (daemon, gateway, websocket protocol, OpenAI-compatible API), the CLI, the
  client library, the MCP server, the terminal UI, the offline tools (recover, reindex,
  memory ops without a daemon). May import every floor below.
* ``actors``           -- (a top-level package of its own) the four actors: agent,
  memory, reflection, backfill. May import services and the kernel.
* ``runtime.services`` -- what actors and shell share: configuration, the LLM clients
  and backends, the llama-server supervisor and model files, metrics. May import the
  kernel.
* ``runtime.kernel``   -- the actor kernel, a library that knows nothing of the floors
  above. Its public surface is re-exported here (``from runtime import Supervisor``) and
  pinned by ``tests/test_codec.py::test_runtime_exports``.

Importing this package first imports two libraries with optional extras hidden, so
that a daemon process does not pay for them at start: ``structlog.dev`` imports
``rich`` (when installed: the terminal UI's textual brings it) only to pretty-print
exceptions in a console renderer that never shows a user anything, and ``httpx``
imports its command-line tool (``httpx._main``: click, rich, pygments) whenever those
happen to be installed. Together ~200 ms of CPU in each of the daemon's five processes
at start, on 2 cores (``python -X importtime -c "import runtime.kernel._child"``;
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

from .kernel import PROTOCOL_VERSION as PROTOCOL_VERSION
from .kernel import ActorContext as ActorContext
from .kernel import ActorCrashed as ActorCrashed
from .kernel import ActorSpec as ActorSpec
from .kernel import ActorTooSlow as ActorTooSlow
from .kernel import ActorUnavailable as ActorUnavailable
from .kernel import Channel as Channel
from .kernel import FrameTooLarge as FrameTooLarge
from .kernel import Handler as Handler
from .kernel import ProtocolViolation as ProtocolViolation
from .kernel import RemoteError as RemoteError
from .kernel import RestartIntensityExceeded as RestartIntensityExceeded
from .kernel import RestartPolicy as RestartPolicy
from .kernel import RuntimeFailure as RuntimeFailure
from .kernel import Supervisor as Supervisor
from .kernel import TransportClosed as TransportClosed
from .kernel import __all__ as __all__
from .kernel import open_supervisor as open_supervisor
from .kernel import spawn_actor as spawn_actor
from .kernel import stop_process as stop_process
