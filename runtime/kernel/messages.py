"""The envelope: the only message type the runtime itself understands.

Every frame on a root↔child channel carries exactly one :data:`Envelope`, a
strict tagged union (``tag_field="t"``, unknown fields forbidden). The payload of
``Boot``, ``Request``, ``Reply`` and ``Cast`` is ``msgspec.Raw``: msgpack bytes
that the runtime never looks inside; the receiving actor decodes them against its
own tagged union of Structs (two-stage decoding, as tractor does).

Routing (star topology): children only talk to the root. ``src`` and ``dest`` name
actors (``"root"`` for the supervisor/gateway). A ``Request`` gets exactly one
``Reply`` or ``Error`` with the same ``(src, id)``; ``id`` is unique per caller.
"""

from __future__ import annotations

import msgspec

ENVELOPE_VERSION = 1
"""The version of the kernel's envelopes (root ↔ actor processes); a child speaking
another is refused at its handshake. The websocket protocol's version is another thing:
``runtime.shell.protocol.PROTOCOL_VERSION``."""
"""Bumped on any incompatible envelope change; checked in the hello handshake."""


class _Env(msgspec.Struct, tag_field="t", forbid_unknown_fields=True, array_like=True):
    """Base of all envelopes: array-like encoding keeps frames small."""


class ChildHello(_Env, tag="hello"):
    """child → root, first frame: who I am. ``version`` must equal ENVELOPE_VERSION."""

    name: str
    pid: int
    version: int


class Boot(_Env, tag="boot"):
    """root → child, after hello: the actor's configuration (msgpack, actor-defined)."""

    config: msgspec.Raw


class Ready(_Env, tag="ready"):
    """child → root: booted, serving requests."""


class Request(_Env, tag="request"):
    """A call expecting one Reply/Error. ``id`` is unique per ``src``."""

    src: str
    dest: str
    id: int
    body: msgspec.Raw


class Reply(_Env, tag="reply"):
    """The successful answer to Request ``(dest, id)``; ``dest`` is the original caller."""

    src: str
    dest: str
    id: int
    body: msgspec.Raw


class Cast(_Env, tag="cast"):
    """A one-way message (no reply), e.g. Reflect or a streamed turn event."""

    src: str
    dest: str
    body: msgspec.Raw


class Error(_Env, tag="error"):
    """A failed answer to Request ``(dest, id)``, or (``id`` = 0, ``dest`` = "root")
    a fatal error a child reports just before it exits.

    ``kind`` selects the exception the caller raises: ``remote`` → RemoteError,
    ``unavailable`` → ActorUnavailable, ``crash`` → the child's dying words.
    """

    src: str
    dest: str
    id: int
    kind: str
    code: str
    message: str
    remote_type: str = ""
    traceback: str = ""


class Cancel(_Env, tag="cancel"):
    """Caller gave up on Request ``(src, id)``; the callee cancels that handler.
    With ``id`` = 0 from the root: shut the whole actor down (cancellation ladder)."""

    src: str
    dest: str
    id: int


class Bye(_Env, tag="bye"):
    """child → root: I have finished shutting down and will exit now."""


Envelope = ChildHello | Boot | Ready | Request | Reply | Cast | Error | Cancel | Bye
