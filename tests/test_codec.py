"""Framing and envelopes, in-process over trio memory streams.

Rules: no processes; ``trio.testing.memory_stream_pair`` stands in for the socketpair.
"""

from __future__ import annotations

import msgspec
import pytest
import trio
import trio.testing

import runtime
from runtime.kernel._channel import Channel
from runtime.kernel._codec import HEADER_BYTES, EnvelopeCodec, frame
from runtime.kernel.errors import FrameTooLarge, ProtocolViolation, TransportClosed
from runtime.kernel.messages import ENVELOPE_VERSION, Cancel, ChildHello, Error, Reply, Request


def pair(max_frame: int = 1 << 20) -> tuple[Channel, Channel]:
    a, b = trio.testing.memory_stream_pair()
    return Channel(a, max_frame), Channel(b, max_frame)


def test_frame_is_u32_big_endian_length_prefix():
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert HEADER_BYTES == 4


@pytest.mark.parametrize("size", [0, 1, 100, 65535, 65536, 1 << 20])
async def test_envelopes_round_trip(size):
    left, right = pair(max_frame=(1 << 20) + 1024)
    body = msgspec.Raw(msgspec.msgpack.encode(b"x" * size))
    sent = [ChildHello(name="memory", pid=1, version=ENVELOPE_VERSION),
            Request(src="agent", dest="memory", id=7, body=body),
            Reply(src="memory", dest="agent", id=7, body=body),
            Error(src="memory", dest="agent", id=7, kind="remote", code="bad", message="m"),
            Cancel(src="agent", dest="memory", id=7)]
    async with trio.open_nursery() as n:
        async def send_all():
            for env in sent:
                await left.send(env)
        n.start_soon(send_all)
        got = [await right.receive() for _ in sent]
    assert [type(e) for e in got] == [type(e) for e in sent]
    assert bytes(got[1].body) == bytes(body) and got[1].id == 7
    assert got[3].message == "m"


async def test_oversized_frame_is_refused_before_reading_the_body():
    left, right = pair(max_frame=1000)
    with pytest.raises(FrameTooLarge):
        await left.send(Request(src="a", dest="b", id=1, body=msgspec.Raw(b"\xc4" + b"\x00" * 2000)))
    a, b = trio.testing.memory_stream_pair()
    reader = Channel(b, 1000)
    await a.send_all((10**9).to_bytes(4, "big"))  # a hostile length, no body follows
    with pytest.raises(FrameTooLarge) as info:
        await reader.receive()
    assert info.value.size == 10**9 and info.value.limit == 1000


async def test_garbage_and_unknown_envelopes_are_protocol_violations():
    a, b = trio.testing.memory_stream_pair()
    reader = Channel(b)
    await a.send_all(frame(b"\xff\xfe garbage"))
    with pytest.raises(ProtocolViolation):
        await reader.receive()
    await a.send_all(frame(msgspec.msgpack.encode(["nope", 1, 2])))
    with pytest.raises(ProtocolViolation):
        await reader.receive()


async def test_eof_is_transport_closed():
    left, right = pair()
    await left.aclose()
    with pytest.raises(TransportClosed):
        await right.receive()
    with pytest.raises(TransportClosed):
        await left.send(Cancel(src="a", dest="b", id=1))


def test_envelope_is_strict():
    codec = EnvelopeCodec()
    data = msgspec.msgpack.encode(["hello", "x", 1, 1, "extra"])
    with pytest.raises(ProtocolViolation):
        codec.decode(data)


KERNEL_SURFACE = [
    "ENVELOPE_VERSION", "ActorContext", "ActorCrashed", "ActorSpec", "ActorTooSlow",
    "ActorUnavailable", "Channel", "ForkedProcess", "FrameTooLarge", "Handler",
    "ProtocolViolation", "RemoteError", "RestartIntensityExceeded", "RestartPolicy",
    "RuntimeFailure", "Supervisor", "TransportClosed", "configure_cli_logging",
    "configure_logging", "fork_actors", "open_supervisor", "reap_unadopted", "spawn_actor",
    "stop_process"]


def test_runtime_exports():
    """The kernel's public surface is exactly these names, in ``runtime.kernel`` and
    re-exported unchanged by ``runtime``; no submodule import adds a public name."""
    import importlib
    import pkgutil

    import runtime.kernel as kernel

    for package in (runtime, kernel):  # every submodule, whatever ran before: no order
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not module.name.startswith("runtime.shell.tui"):  # needs the tui extra
                importlib.import_module(module.name)
    kernel_modules = {m.name for m in pkgutil.iter_modules(kernel.__path__)}
    assert sorted(kernel.__all__) == sorted(KERNEL_SURFACE) == sorted(
        n for n in dir(kernel) if not n.startswith("_") and n not in kernel_modules)
    assert sorted(runtime.__all__) == sorted(KERNEL_SURFACE) == sorted(
        n for n in dir(runtime) if not n.startswith("_")
        and n not in {"kernel", "services", "shell"})
    for name in KERNEL_SURFACE:
        assert getattr(runtime, name) is getattr(kernel, name)
    for name in ("ActorCrashed", "ActorUnavailable", "ActorTooSlow", "ProtocolViolation",
                 "TransportClosed", "FrameTooLarge", "RemoteError", "RestartIntensityExceeded"):
        assert issubclass(getattr(runtime, name), runtime.RuntimeFailure)


def test_daemon_processes_do_not_import_optional_extras_at_start():
    """Each floor imports structlog without rich and httpx without its CLI
    (``runtime.kernel.lean_imports``; ~100+ ms of CPU per process when rich / click /
    pygments are installed); an actor process and the root import none of them, and rich
    stays importable afterwards."""
    import subprocess
    import sys

    code = ("import sys, runtime.kernel._child, runtime.shell.daemon, actors.memory.actor, actors.agent.actor,"
            " actors.backfill.actor, actors.reflection.actor; "
            "print(sorted(m for m in ('rich', 'pygments', 'click', 'httpx._main')"
            " if sys.modules.get(m) is not None)); "
            "import importlib.util as u; print(u.find_spec('rich') is not None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=runtime.__path__[0] + "/..").stdout.split("\n")
    assert out[0] == "[]"
    if out[1] == "True":  # rich installed (textual brings it): still importable
        subprocess.run([sys.executable, "-c", "import runtime, rich.console, httpx._main"],
                       check=True, cwd=runtime.__path__[0] + "/..")


# ------------------------------------------------- the socket fast paths (bench/ipc.py)
def socket_pair(max_frame: int = 4 << 20) -> tuple[Channel, Channel]:
    """Two channels over a real socketpair, as the runtime builds them (fast paths on)."""
    import socket

    a, b = socket.socketpair()
    return Channel.from_socket(a, max_frame), Channel.from_socket(b, max_frame)


async def test_socket_channels_carry_big_frames_from_concurrent_senders_whole_and_in_order():
    """A 1 MiB frame does not fit the kernel buffer (part sent directly, the rest the trio
    way); small frames sent meanwhile by other tasks queue behind it, never inside it."""
    left, right = socket_pair()
    big = msgspec.Raw(msgspec.msgpack.encode(b"B" * (1 << 20)))
    small = [Request(src="a", dest="b", id=i, body=msgspec.Raw(msgspec.msgpack.encode(i)))
             for i in range(1, 41)]
    got = []

    async def send_small():
        for env in small:
            await left.send(env)

    async with trio.open_nursery() as n:
        n.start_soon(left.send, Reply(src="b", dest="a", id=99, body=big))
        await trio.sleep(0.05)  # the big frame is part-written: the socket is full
        n.start_soon(send_small)
        await trio.sleep(0.05)  # the small ones wait behind it
        for _ in range(len(small) + 1):
            got.append(await right.receive())
    assert [e.id for e in got] == [99] + list(range(1, 41))
    assert bytes(got[0].body) == bytes(big)
    await left.aclose()
    with pytest.raises(TransportClosed):
        await right.receive()


async def test_a_flooding_peer_does_not_starve_the_readers_process():
    """Many frames already waiting in the socket: the reader never blocks, yet
    other tasks keep running (one forced checkpoint every FAIRNESS_EVERY frames)."""

    left, right = socket_pair()
    n_frames = 150
    for i in range(1, n_frames + 1):  # small frames: all fit in the socket buffer
        await left.send(Cancel(src="a", dest="b", id=i))
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await trio.sleep(0)

    async with trio.open_nursery() as n:
        n.start_soon(ticker)
        await trio.sleep(0)
        start = ticks
        for i in range(1, n_frames + 1):
            assert (await right.receive()).id == i
        n.cancel_scope.cancel()
    assert ticks - start >= n_frames // 32


async def test_socket_channel_receive_honours_cancellation_with_data_waiting():
    left, right = socket_pair()
    await left.send(Cancel(src="a", dest="b", id=1))
    await trio.sleep(0.05)  # the frame is in the reader's socket buffer
    with trio.CancelScope() as cs:
        cs.cancel()
        await right.receive()
    assert cs.cancelled_caught
    assert (await right.receive()).id == 1  # nothing was consumed by the cancelled call
