"""msgspec Struct layouts of the envelope compared, for ``bench/ipc.py``.

The runtime's envelope (``runtime/kernel/messages.py``) is a tagged ``msgspec.Struct`` with
``array_like=True`` whose payload is ``msgspec.Raw`` — two-stage decoding: the root
decodes only the envelope to route it, the receiving actor decodes the body against its
own types. This module times the alternatives on one ``Request`` carrying a payload of
each size, in process (no transport), so the choice is backed by numbers:

* **array + Raw** (the runtime's): fields as a msgpack array, body opaque.
* **map + Raw**: the same Struct encoded as a map (field names in every frame).
* **array + Raw, gc=False**: as the runtime's, with the Struct untracked by the cycle GC.
* **array, typed body** (one stage): the body is the actor's Struct itself, decoded in the
  same pass — what the root would have to do if it could not forward opaque bytes.
* **JSON map + Raw**: msgspec's JSON codec on the map layout (what a text protocol costs).

Each figure is the mean cost (µs) of one hop end to end — encode the actor's message and
the envelope, then decode both — and the frame's size on the wire (bytes); the ratio is
against the runtime's layout at the same payload size.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence

import msgspec


class Payload(msgspec.Struct, tag="echo", array_like=True):
    """The actor-level message inside the envelope (like ``bench.ipc.Echo``)."""

    payload: bytes


class ArrayRaw(msgspec.Struct, tag="request", array_like=True, forbid_unknown_fields=True):
    """The runtime's layout (``runtime.kernel.messages.Request``)."""

    src: str
    dest: str
    id: int
    body: msgspec.Raw


class MapRaw(msgspec.Struct, tag="request", forbid_unknown_fields=True):
    """Same fields, encoded as a map."""

    src: str
    dest: str
    id: int
    body: msgspec.Raw


class ArrayRawNoGC(msgspec.Struct, tag="request", array_like=True, gc=False,
                   forbid_unknown_fields=True):
    """The runtime's layout, not tracked by the cycle collector."""

    src: str
    dest: str
    id: int
    body: msgspec.Raw


class ArrayTyped(msgspec.Struct, tag="request", array_like=True, forbid_unknown_fields=True):
    """One-stage: the body is the typed actor message."""

    src: str
    dest: str
    id: int
    body: Payload


LAYOUTS: dict[str, type] = {
    "array + Raw (runtime)": ArrayRaw,
    "map + Raw": MapRaw,
    "array + Raw, gc=False": ArrayRawNoGC,
    "array, typed body (one stage)": ArrayTyped,
    "JSON map + Raw": MapRaw,
}
"""Layout name → envelope Struct; the JSON row reuses the map Struct with msgspec.json."""


def _codec(name: str, cls: type, size: int) -> tuple[Callable[[], bytes], Callable[[bytes], object]]:
    """(send, receive) for one layout and payload size: ``send`` encodes the actor's
    message and the envelope around it, ``receive`` decodes both (one hop, end to end)."""
    data = os.urandom(size)
    mod = msgspec.json if name.startswith("JSON") else msgspec.msgpack
    enc, dec, body_dec = mod.Encoder(), mod.Decoder(cls), mod.Decoder(Payload)
    if cls is ArrayTyped:
        def send() -> bytes:
            return enc.encode(cls(src="agent", dest="memory", id=12345, body=Payload(payload=data)))

        def receive(wire: bytes) -> object:
            return dec.decode(wire).body
    else:
        def send() -> bytes:
            body = msgspec.Raw(enc.encode(Payload(payload=data)))
            return enc.encode(cls(src="agent", dest="memory", id=12345, body=body))

        def receive(wire: bytes) -> object:
            return body_dec.decode(dec.decode(wire).body)
    return send, receive


def measure_layouts(sizes: Sequence[int], budget_s: float = 0.2,
                    rounds: int = 5) -> dict[str, dict[int, tuple[float, int]]]:
    """``{layout: {size: (send + receive µs, frame bytes)}}`` (see :func:`_codec`).

    Every (layout, size) is timed in ``rounds`` blocks of about ``budget_s / rounds``
    seconds, the layouts interleaved block by block so machine noise hits them alike;
    the figure is the median block mean. The root itself only decodes the envelope of a
    frame it forwards (the Raw body stays opaque bytes, forwarded as received)."""
    codecs = {(name, size): _codec(name, cls, size) for name, cls in LAYOUTS.items()
              for size in sizes}
    blocks: dict[tuple[str, int], list[float]] = {key: [] for key in codecs}
    for _ in range(rounds):
        for key, (send, receive) in codecs.items():
            receive(send())  # warm
            n, t0 = 0, time.perf_counter()
            while True:
                for _ in range(10):
                    receive(send())
                n += 10
                elapsed = time.perf_counter() - t0
                if elapsed >= budget_s / rounds:
                    break
            blocks[key].append(elapsed / n * 1e6)
    out: dict[str, dict[int, tuple[float, int]]] = {name: {} for name in LAYOUTS}
    for (name, size), means in blocks.items():
        send, _ = codecs[(name, size)]
        out[name][size] = (statistics.median(means), len(send()))
    return out


def layouts_table(got: dict[str, dict[int, tuple[float, int]]], sizes: Sequence[int],
                  human: Callable[[int], str]) -> str:
    """Markdown: one row per layout, per size ``µs (bytes)``, ratio vs the runtime's."""
    base = got["array + Raw (runtime)"]
    head = "| layout | " + " | ".join(f"{human(s)}: µs (bytes)" for s in sizes) + \
        " | ratio vs runtime's (smallest / largest) |"
    lines = [head, "|---|" + "---:|" * len(sizes) + "---:|"]
    for name, row in got.items():
        cells = " | ".join(f"{row[s][0]:.2f} ({row[s][1]:,})" for s in sizes)
        lo, hi = sizes[0], sizes[-1]
        lines.append(f"| {name} | {cells} | {row[lo][0] / base[lo][0]:.2f}× / "
                     f"{row[hi][0] / base[hi][0]:.2f}× |")
    return "\n".join(lines)
