"""A message channel over one trio stream: framed envelopes, one send lock (DESIGN §1).

``Channel`` is deliberately small: ``send`` serialises writers with a
``StrictFIFOLock`` so frames never interleave; ``receive`` is called by exactly one
reader task per channel (the actor's or the supervisor's dispatch loop). Correlation
of requests and replies lives one level up (:mod:`runtime.actor`,
:mod:`runtime._supervise`), because the root routes envelopes it does not own.
"""

from __future__ import annotations

import socket

import trio

from ._codec import DEFAULT_MAX_FRAME, EnvelopeCodec, FrameReader, frame
from .errors import TransportClosed
from .messages import Envelope


class Channel:
    """Framed envelope transport over ``stream``.

    Args:
        stream: a connected ``trio.abc.HalfCloseableStream`` (usually a SocketStream
            over one end of a ``socketpair``).
        max_frame: per-frame body cap in bytes, checked on both send and receive.

    Errors: ``send``/``receive`` raise TransportClosed when the peer is gone,
    ProtocolViolation/FrameTooLarge on a bad frame.
    """

    def __init__(self, stream: trio.abc.Stream, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self._stream = stream
        self._reader = FrameReader(stream, max_frame)
        self._codec = EnvelopeCodec()
        self._max = max_frame
        self._send_lock = trio.StrictFIFOLock()
        self.closed = False

    @classmethod
    def from_socket(cls, sock: socket.socket, max_frame: int = DEFAULT_MAX_FRAME) -> "Channel":
        """Wrap a connected stdlib socket (one end of ``socket.socketpair()``)."""
        return cls(trio.SocketStream(trio.socket.from_stdlib_socket(sock)), max_frame)

    async def send(self, env: Envelope) -> None:
        """Encode and write one envelope atomically with respect to other senders."""
        await self.send_raw(self._codec.encode(env))

    async def receive(self) -> Envelope:
        """Read and decode the next envelope (single reader only)."""
        return self._codec.decode(await self._reader.receive_frame())

    async def receive_raw(self) -> tuple[Envelope, bytes]:
        """Like :meth:`receive`, also returning the frame body as received, so a
        router can forward it without re-encoding (see :meth:`send_raw`)."""
        body = await self._reader.receive_frame()
        return self._codec.decode(body), body

    async def send_raw(self, body: bytes) -> None:
        """Write an already-encoded envelope body (from :meth:`receive_raw`)."""
        data = frame(body, self._max)
        async with self._send_lock:
            if self.closed:
                raise TransportClosed("channel closed")
            try:
                await self._stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise TransportClosed(f"send failed: {exc}") from None

    async def aclose(self) -> None:
        """Close the underlying stream; idempotent, never raises."""
        self.closed = True
        try:
            await self._stream.aclose()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
