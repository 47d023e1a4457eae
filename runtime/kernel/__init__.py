"""The actor kernel: a library for running actors as separate trio processes that exchange
msgspec-encoded envelopes (DESIGN §1). The bottom floor of the house.

What it does: spawn an actor process (``spawn_actor``: a bootloader child that imports
the module named in its :class:`ActorSpec` and serves its ``open_actor``) or fork it at
start-up (``_fork``), frame and route envelopes over a socket pair (``Channel``,
``_codec``), request/reply and cast between actors (``ActorContext``), supervise them
with restart intensity and a cancellation ladder (``Supervisor``, ``open_supervisor``,
``stop_process``), and name its failures (``errors``: every one a ``RuntimeFailure``).
It also configures each process's structured log (``_log``), since every process it
starts needs one before its first line.

What it may import: the standard library, trio, msgspec, structlog, setproctitle.
Nothing of ``runtime.services``, ``actors`` or ``runtime.shell``: it knows no actor by
name (an :class:`ActorSpec` says which module to import) and no configuration (an actor
receives its own as opaque bytes in ``Boot``). Checked by the import-linter contracts in
``pyproject.toml`` (``tests/test_architecture.py``).

Public surface, deliberately short (each name is pinned by
``tests/test_codec.py::test_runtime_exports``); ``runtime`` re-exports it.
"""

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
