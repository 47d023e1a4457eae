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

Importing this package has no effect beyond importing the kernel.
"""

from .kernel import ENVELOPE_VERSION as ENVELOPE_VERSION
from .kernel import ActorContext as ActorContext
from .kernel import ActorCrashed as ActorCrashed
from .kernel import ActorSpec as ActorSpec
from .kernel import ActorTooSlow as ActorTooSlow
from .kernel import ActorUnavailable as ActorUnavailable
from .kernel import Channel as Channel
from .kernel import ForkedProcess as ForkedProcess
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
from .kernel import configure_cli_logging as configure_cli_logging
from .kernel import configure_logging as configure_logging
from .kernel import fork_actors as fork_actors
from .kernel import open_supervisor as open_supervisor
from .kernel import reap_unadopted as reap_unadopted
from .kernel import spawn_actor as spawn_actor
from .kernel import stop_process as stop_process
