"""The websocket protocol's client frames, validated by msgspec.

Client → daemon frames are JSON text objects tagged by ``type``; each is a Struct
below, unknown fields forbidden so a typo is answered instead of ignored. Daemon →
client frames are plain dicts built by the gateway (documented in
``docs/protocol.md``). Error codes sent in ``error`` frames:

``bad_frame`` (not JSON / not an object / unknown type / wrong field types),
``unauthorized`` (bad token, then the connection closes with 1008), ``hello_required``,
``busy`` (a turn is already running), ``not_found``, ``invalid_argument``,
``unavailable`` (an actor is restarting), ``too_slow`` (client not reading),
``shutting_down``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from runtime.kernel.unicode import repair_json_escapes

PROTOCOL_VERSION = "1"


class _F(msgspec.Struct, tag_field="type", forbid_unknown_fields=True, rename="camel", kw_only=True):
    """Base of client frames."""


class Hello(_F, tag="hello"):
    """``client``: the name the connecting program gives itself (``cli``, ``tui``,
    ``mcp:<its MCP client>``, a script's name); the activity log shows it for the owner's
    token. A client token's own name is shown instead (``runtime/shell/clients.py``)."""

    token: str
    session: str | None = None
    working_dir: str | None = None
    client: str | None = None


MAX_RECALLED = 50
"""At most this many note ids in a ``say`` frame's ``recalled``."""


class Say(_F, tag="say"):
    """``recalled``: the notes this turn's ``### recalled`` shows instead of recall's own
    hits, in that order (ids that do not exist, or belong to another project, are left
    out; ``[]`` = none); absent = recall as usual. For a client that picked the notes
    itself, and for measuring answers against a given context (``bench/locomo_qa.py``)."""

    text: str
    debug: bool = False
    recalled: Annotated[list[Annotated[int, msgspec.Meta(ge=1)]],
                        msgspec.Meta(max_length=MAX_RECALLED)] | None = None


class CancelFrame(_F, tag="cancel"):
    id: str | int | None = None


class ApprovalFrame(_F, tag="approval"):
    """Answer the turn's ``approval.request`` ``request``: ``once`` (run this call),
    ``always`` (run it and allow the tool from now on, for what it is now), ``deny``.
    Needs the ``tools:approve`` scope; answered with ``approval.result``.
    ``unanswerable``: with ``deny``, the client had no one to ask (``ask`` without a
    terminal): the reply then says the call needs an approval that cannot be asked for
    there, not that the user said no."""

    request: str
    decision: Literal["once", "always", "deny"]
    id: str | int | None = None
    unanswerable: bool = False


class MemoryFrame(_F, tag="memory"):
    op: str
    id: str | int | None = None
    args: dict[str, Any] = msgspec.field(default_factory=dict)


class Subscribe(_F, tag="subscribe"):
    channels: list[str]
    id: str | int | None = None


class MetricsFrame(_F, tag="metrics"):
    pass


class Ping(_F, tag="ping"):
    pass


class SessionsFrame(_F, tag="sessions"):
    """List sessions (newest first)."""

    limit: int = 50
    id: str | int | None = None


class SessionGetFrame(_F, tag="session.get"):
    """One session with its last ``messages`` transcript entries (0 = none)."""

    session: str
    messages: int = 50
    id: str | int | None = None


class SessionDeleteFrame(_F, tag="session.delete"):
    """Delete a session (refused with ``busy`` while it runs a turn)."""

    session: str
    id: str | int | None = None


class SessionRenameFrame(_F, tag="session.rename"):
    """Give a session a title (``""``: its first user line's again)."""

    session: str
    title: str
    id: str | int | None = None


class Shutdown(_F, tag="shutdown"):
    """Ask the daemon to shut down in order (token holders are the machine's owner)."""


ClientFrame = Hello | Say | CancelFrame | ApprovalFrame | MemoryFrame | Subscribe | MetricsFrame | \
    Ping | SessionsFrame | SessionGetFrame | SessionDeleteFrame | SessionRenameFrame | Shutdown

CHANNELS = ("memory", "reflection", "actors")

_decoder = msgspec.json.Decoder(ClientFrame)


class BadFrame(Exception):
    """A frame that is not a valid client frame; ``message`` says why, ``id`` is the
    frame's own ``id`` when it has a usable one (the error frame echoes it)."""

    code = "bad_frame"

    def __init__(self, message: str, id: str | int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.id = id


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _int_out_of_range(value: Any) -> bool:
    """True when ``value`` holds an integer outside the signed 64-bit range: JSON allows
    it, but neither the actors' messages (msgpack) nor SQLite can carry it."""
    if isinstance(value, int) and not isinstance(value, bool):
        return not _INT64_MIN <= value <= _INT64_MAX
    if isinstance(value, dict):
        return any(_int_out_of_range(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_int_out_of_range(v) for v in value)
    return False


def decode_frame(data: str | bytes) -> ClientFrame:
    """Decode one client frame; BadFrame with a one-line reason otherwise: not JSON,
    not a known frame, wrong field types, nested too deeply, or an integer anywhere in
    it outside the signed 64-bit range (then ``BadFrame.id`` is the frame's ``id``
    when that one is in range). A lone surrogate escape in a string (``"hi \ud83d"``)
    is read as U+FFFD, the rest of the frame as sent (``runtime.kernel.unicode``)."""
    try:
        try:
            frame = _decoder.decode(data)
        except msgspec.DecodeError:
            # A lone UTF-16 surrogate escape ("\ud83d" cut from an emoji): msgspec
            # calls that "truncated". Replaced by U+FFFD and decoded again.
            text = data if isinstance(data, str) else data.decode("utf-8", "replace")
            fixed = repair_json_escapes(text)
            if fixed == text:
                raise
            frame = _decoder.decode(fixed)
        fields = msgspec.structs.astuple(frame)
        if _int_out_of_range(fields):
            frame_id = getattr(frame, "id", None)
            raise BadFrame("a number is outside the signed 64-bit range",
                           None if _int_out_of_range(frame_id) else frame_id)
    except msgspec.ValidationError as exc:
        raise BadFrame(str(exc)) from None
    except msgspec.DecodeError as exc:
        raise BadFrame(f"not a JSON object: {exc}") from None
    except RecursionError:
        raise BadFrame("frame nests too deeply") from None
    return frame
