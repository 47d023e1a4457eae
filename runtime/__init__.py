"""atomic-agent's actor runtime: the kernel every process shares (DESIGN §1).

Public surface, deliberately short (each name is pinned by ``tests/test_codec.py::test_runtime_exports``).
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
