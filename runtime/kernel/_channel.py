"""A message channel over one trio stream: framed envelopes, one send lock.

``Channel`` is deliberately small: ``send`` serialises writers with a
``StrictFIFOLock`` so frames never interleave; ``receive`` is called by exactly one
reader task per channel (the actor's or the supervisor's dispatch loop). Correlation
of requests and replies lives one level up (:mod:`runtime.kernel.actor`,
:mod:`runtime.kernel._supervise`), because the root routes envelopes it does not own.
"""

from __future__ import annotations

import socket

import trio

from ._codec import DEFAULT_MAX_FRAME, FAIRNESS_EVERY, HEADER_BYTES, EnvelopeCodec, FrameReader
from .errors import FrameTooLarge, TransportClosed
from .messages import Envelope


class Channel:
    """Framed envelope transport over ``stream``.

    Args:
        stream: a connected ``trio.abc.HalfCloseableStream`` (usually a SocketStream
            over one end of a ``socketpair``).
        max_frame: per-frame body cap in bytes, checked on both send and receive.
        sock: the stream's own stdlib socket (set by :meth:`from_socket`): enables the
            direct-syscall fast paths — a frame the kernel takes whole in one ``send``
            (the usual case: socketpair buffers are hundreds of KiB) is written with no
            scheduler pass, reads as in :class:`runtime.kernel._codec.FrameReader`. Senders
            still queue in FIFO order behind a frame in progress; every
            :data:`runtime.kernel._codec.FAIRNESS_EVERY` fast sends one checkpoint is taken.

    Errors: ``send``/``receive`` raise TransportClosed when the peer is gone,
    ProtocolViolation/FrameTooLarge on a bad frame.
    """

    def __init__(self, stream: trio.abc.Stream, max_frame: int = DEFAULT_MAX_FRAME,
                 sock: socket.socket | None = None) -> None:
        self._stream = stream
        self._sock = sock
        self._fast_sends = 0
        self._reader = FrameReader(stream, max_frame, sock)
        self._codec = EnvelopeCodec()
        self._max = max_frame
        self._send_lock = trio.StrictFIFOLock()
        self.closed = False

    @classmethod
    def from_socket(cls, sock: socket.socket, max_frame: int = DEFAULT_MAX_FRAME) -> "Channel":
        """Wrap a connected stdlib socket (one end of ``socket.socketpair()``)."""
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))  # sets O_NONBLOCK
        return cls(stream, max_frame, sock)

    async def send(self, env: Envelope) -> None:
        """Encode and write one envelope atomically with respect to other senders."""
        await self._write((self._codec.encode_framed(env, self._max),))

    async def receive(self) -> Envelope:
        """Read and decode the next envelope (single reader only)."""
        return self._codec.decode(await self._reader.receive_frame())

    async def receive_raw(self) -> tuple[Envelope, bytes]:
        """Like :meth:`receive`, also returning the frame body as received, so a
        router can forward it without re-encoding (see :meth:`send_raw`)."""
        body = await self._reader.receive_frame()
        return self._codec.decode(body), body

    async def send_raw(self, body: bytes | bytearray) -> None:
        """Write an already-encoded envelope body (from :meth:`receive_raw`)."""
        if len(body) > self._max:
            raise FrameTooLarge(len(body), self._max)
        await self._write((len(body).to_bytes(HEADER_BYTES, "big"), body))

    async def _write(self, parts: tuple[bytes | bytearray, ...]) -> None:
        """Write one frame given as consecutive byte strings (FIFO among senders)."""
        if self._sock is not None and not self.closed:
            await trio.lowlevel.checkpoint_if_cancelled()
            try:
                self._send_lock.acquire_nowait()  # free and nobody queued: FIFO kept
            except trio.WouldBlock:
                pass
            else:
                try:
                    await self._send_fast(parts)
                finally:
                    self._send_lock.release()
                return
        async with self._send_lock:
            await self._send_all(b"".join(parts))

    async def _send_fast(self, parts: tuple[bytes | bytearray, ...]) -> None:
        """One direct ``sendmsg`` (gathering the parts, no copy); the rest (if the kernel
        took only part) the trio way."""
        try:
            # (only called when the socket is a real one: _send checks sendmsg first)
            sent = self._sock.sendmsg(parts)  # type: ignore[union-attr]
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            raise TransportClosed(f"send failed: {exc}") from None
        total = sum(len(p) for p in parts)
        if sent < total:
            self._fast_sends = 0
            await self._send_all(memoryview(b"".join(parts))[sent:])
            return
        self._fast_sends += 1
        if self._fast_sends >= FAIRNESS_EVERY:
            self._fast_sends = 0
            await trio.lowlevel.cancel_shielded_checkpoint()

    async def _send_all(self, data: bytes | memoryview) -> None:
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
