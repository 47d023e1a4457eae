"""Typed failures of the actor runtime.

The hierarchy (every class is exported from :mod:`runtime`)::

    RuntimeFailure
     ├── TransportClosed        the peer's end of a channel is gone (EOF, reset)
     ├── ProtocolViolation      a frame or envelope broke the wire contract
     │    └── FrameTooLarge     a length prefix above the channel's cap
     ├── ActorCrashed           an actor process died; carries the remote cause
     ├── ActorUnavailable       a request could not be (or stop being) served
     ├── ActorTooSlow           a handshake or reply missed its deadline
     ├── RemoteError            a handler raised a domain error; typed code + message
     └── RestartIntensityExceeded  too many restarts in the window: shut down

Causes stay distinct on purpose (trio's closed-versus-broken split): a caller that
sees ``ActorUnavailable`` may retry later; a caller that sees ``RemoteError`` got
a definite answer that will not change on retry.
"""

from __future__ import annotations


class RuntimeFailure(Exception):
    """Base class of every failure raised by the runtime kernel."""


class TransportClosed(RuntimeFailure):
    """The other end of a channel closed (EOF or connection reset)."""


class ProtocolViolation(RuntimeFailure):
    """A frame could not be decoded or an envelope arrived out of order."""


class FrameTooLarge(ProtocolViolation):
    """A frame's length prefix exceeds the channel's maximum frame size (bytes)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the {limit}-byte cap")
        self.size = size
        self.limit = limit


class ActorCrashed(RuntimeFailure):
    """An actor process exited unexpectedly.

    Attributes:
        name: the actor's name (``memory``, ``agent`` …).
        exitcode: the process exit status (negative = killed by that signal), or None.
        remote_type: the exception type name the child reported before dying, or "".
        remote_traceback: the child's formatted traceback text, or "".
    """

    def __init__(
        self,
        name: str,
        exitcode: int | None,
        remote_type: str = "",
        remote_traceback: str = "",
    ) -> None:
        detail = f" ({remote_type})" if remote_type else ""
        super().__init__(f"actor {name!r} crashed with exit code {exitcode}{detail}")
        self.name = name
        self.exitcode = exitcode
        self.remote_type = remote_type
        self.remote_traceback = remote_traceback


class ActorUnavailable(RuntimeFailure):
    """The destination actor is not running, or died while the request was in flight.

    Raised at once (never after a hang) so callers can answer their own caller.
    """

    def __init__(self, name: str, reason: str = "not running") -> None:
        super().__init__(f"actor {name!r} unavailable: {reason}")
        self.name = name
        self.reason = reason


class ActorTooSlow(RuntimeFailure):
    """An actor missed a deadline (handshake, reply or shutdown)."""


class RemoteError(RuntimeFailure):
    """A request handler answered with a typed error instead of a result.

    Attributes:
        code: a stable machine-readable code (``invalid_argument``, ``not_found`` …).
        message: one human-readable line, safe to show to a client.
        remote_type: the exception type name raised in the handler.
    """

    def __init__(self, code: str, message: str, remote_type: str = "") -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.remote_type = remote_type


class RestartIntensityExceeded(RuntimeFailure):
    """More restarts than the intensity limit allows inside its window."""
