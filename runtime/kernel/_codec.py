"""Framing: u32 big-endian length prefix + msgpack body.

A frame is ``len(body).to_bytes(4, "big") + body``. Big-endian, as in msgspec's
asyncio-kv example (tractor uses little-endian; either works, this one is pinned by
``tests/test_codec.py``). The reader checks the length against the channel's cap
*before* reading the body, so a hostile or corrupted length never allocates.
"""

from __future__ import annotations

import socket

import msgspec
import trio

from .errors import FrameTooLarge, ProtocolViolation, TransportClosed
from .messages import Envelope
from .unicode import encode_repaired

HEADER_BYTES = 4
DEFAULT_MAX_FRAME = 16 * 1024 * 1024
"""16 MiB: far above any envelope the actors send (a recall result is KiBs)."""
FAIRNESS_EVERY = 16
"""Frames read (or written, see :mod:`runtime.kernel._channel`) back to back without blocking
before one forced trio checkpoint, so a peer that floods a channel cannot starve the
other tasks of the process."""


class FrameReader:
    """Reads whole frames from a trio stream, one caller at a time.

    Args:
        stream: any ``trio.abc.ReceiveStream``.
        max_frame: largest accepted body in bytes.
        sock: the stream's own non-blocking stdlib socket, when it has one: frames are
            then read with direct ``recv`` calls, parking in
            ``trio.lowlevel.wait_readable`` only when nothing is there. This skips the
            two scheduler passes trio's ``receive_some`` adds to every read (it checks
            for cancellation and yields even when data is waiting) — the largest part
            of a small round trip on a slow core (``bench/ipc.py``). Every
            :data:`FAIRNESS_EVERY` frames read without blocking, one checkpoint is taken
            anyway (fairness); cancellation is honoured at every frame.

    ``receive_frame`` raises TransportClosed on EOF/reset (a clean EOF between
    frames included: the peer is gone), FrameTooLarge on an oversized prefix.
    """

    def __init__(self, stream: trio.abc.ReceiveStream, max_frame: int = DEFAULT_MAX_FRAME,
                 sock: socket.socket | None = None) -> None:
        self._stream = stream
        self._max = max_frame
        self._buf = bytearray()
        self._sock = sock
        self._streak = 0

    async def _fill(self, n: int) -> None:
        while len(self._buf) < n:
            want = max(65536, n - len(self._buf))
            if self._sock is None:
                try:
                    chunk = await self._stream.receive_some(want)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    raise TransportClosed(f"stream broken: {exc}") from None
            else:
                try:
                    chunk = self._sock.recv(want)
                except BlockingIOError:
                    self._streak = 0
                    try:
                        await trio.lowlevel.wait_readable(self._sock)
                    except (trio.ClosedResourceError, OSError) as exc:
                        raise TransportClosed(f"stream broken: {exc}") from None
                    continue
                except OSError as exc:
                    raise TransportClosed(f"stream broken: {exc}") from None
            if not chunk:
                raise TransportClosed("peer closed the stream")
            self._buf += chunk

    async def receive_frame(self) -> bytes:
        """Return the next frame's body (bytes). See the class docstring for errors."""
        if self._sock is not None:
            await trio.lowlevel.checkpoint_if_cancelled()
            self._streak += 1
            if self._streak >= FAIRNESS_EVERY:
                self._streak = 0
                await trio.lowlevel.cancel_shielded_checkpoint()
        await self._fill(HEADER_BYTES)
        size = int.from_bytes(self._buf[:HEADER_BYTES], "big")
        if size > self._max:
            raise FrameTooLarge(size, self._max)
        await self._fill(HEADER_BYTES + size)
        body = bytes(self._buf[HEADER_BYTES : HEADER_BYTES + size])
        del self._buf[: HEADER_BYTES + size]
        return body


def frame(body: bytes, max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    """Prefix ``body`` with its u32 big-endian length; FrameTooLarge above ``max_frame``."""
    if len(body) > max_frame:
        raise FrameTooLarge(len(body), max_frame)
    return len(body).to_bytes(HEADER_BYTES, "big") + body


class EnvelopeCodec:
    """One msgspec encoder and one typed decoder, owned by one channel (msgspec perf tips)."""

    def __init__(self) -> None:
        self._enc = msgspec.msgpack.Encoder()
        self._dec = msgspec.msgpack.Decoder(Envelope)

    def encode(self, env: Envelope) -> bytes:
        """Envelope → msgpack bytes (a lone surrogate becomes U+FFFD, :mod:`.unicode`)."""
        return encode_repaired(self._enc.encode, env)

    def encode_framed(self, env: Envelope, max_frame: int = DEFAULT_MAX_FRAME) -> bytearray:
        """Envelope → ``u32 length + msgpack`` in one buffer (no concatenation copy);
        FrameTooLarge above ``max_frame``."""
        buf = bytearray(HEADER_BYTES)
        try:
            self._enc.encode_into(env, buf, HEADER_BYTES)
        except UnicodeEncodeError:  # a lone surrogate in, say, an error message
            buf = bytearray(HEADER_BYTES) + encode_repaired(self._enc.encode, env)
        size = len(buf) - HEADER_BYTES
        if size > max_frame:
            raise FrameTooLarge(size, max_frame)
        buf[:HEADER_BYTES] = size.to_bytes(HEADER_BYTES, "big")
        return buf

    def decode(self, data: bytes | bytearray) -> Envelope:
        """msgpack bytes → Envelope; ProtocolViolation on anything that is not one."""
        try:
            return self._dec.decode(data)
        except msgspec.DecodeError as exc:
            raise ProtocolViolation(f"undecodable envelope: {exc}") from None
