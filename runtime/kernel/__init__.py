"""The actor kernel: a library for running actors as separate trio processes that exchange
msgspec-encoded envelopes. The bottom floor of the house.

What it does: spawn an actor process (``spawn_actor``: a bootloader child that imports
the module named in its :class:`ActorSpec` and serves its ``open_actor``) or fork it at
start-up (``fork_actors``), frame and route envelopes over a socket pair (``Channel``,
``_codec``), request/reply and cast between actors (``ActorContext``), supervise them
with restart intensity and a cancellation ladder (``Supervisor``, ``open_supervisor``,
``stop_process``), and name its failures (``errors``: every one a ``RuntimeFailure``).
It also configures each process's structured log (``configure_logging``,
``configure_cli_logging``), since every process it starts needs one before its first line.
Its ``_``-modules are its own: nothing outside the kernel imports them (an import-linter
contract), and it names no actor (shutdown stops the first actor started last, so the
daemon's store outlives its writers).

What it may import: the standard library, trio, msgspec, structlog, setproctitle.
Nothing of ``runtime.services``, ``actors`` or ``runtime.shell``: it knows no actor by
name (an :class:`ActorSpec` says which module to import) and no configuration (an actor
receives its own as opaque bytes in ``Boot``). Checked by the import-linter contracts in
``pyproject.toml`` (``tests/test_architecture.py``).

Public surface, deliberately short (each name is pinned by
``tests/test_codec.py::test_runtime_exports``); ``runtime`` re-exports it.
"""

from .lean_imports import import_hiding as _import_hiding

_import_hiding("structlog", ("rich",))  # before any kernel module imports it (lean_imports)

from ._channel import Channel as Channel  # noqa: E402
from ._fork import ForkedProcess as ForkedProcess
from ._fork import fork_actors as fork_actors
from ._fork import reap_unadopted as reap_unadopted
from ._log import configure as configure_logging
from ._log import configure_cli as configure_cli_logging
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
from .messages import ENVELOPE_VERSION as ENVELOPE_VERSION

__all__ = [
    "ENVELOPE_VERSION",
    "ActorContext",
    "ActorCrashed",
    "ActorSpec",
    "ActorTooSlow",
    "ActorUnavailable",
    "Channel",
    "ForkedProcess",
    "FrameTooLarge",
    "Handler",
    "ProtocolViolation",
    "RemoteError",
    "RestartIntensityExceeded",
    "RestartPolicy",
    "RuntimeFailure",
    "Supervisor",
    "TransportClosed",
    "configure_cli_logging",
    "configure_logging",
    "fork_actors",
    "open_supervisor",
    "reap_unadopted",
    "spawn_actor",
    "stop_process",
]
