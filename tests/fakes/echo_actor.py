"""A scriptable actor for kernel tests (runs as a real child process).

Boot config (msgpack map): ``stubborn`` (ignore the shutdown cancel; with
``ignore_term`` also SIGTERM), ``marker_dir`` (files written to prove what ran),
``boot_delay_s`` (a slow start: seconds before ready), ``ask_at_ready`` (right after
ready, ask that actor to echo "hi"; the answer or error goes to ``marker_dir/asked``),
``cast_at_ready`` (right after ready, cast ``Echo("hi")`` to that actor; an actor with a
``marker_dir`` writes a cast ``Echo`` it receives to ``marker_dir/cast``).
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import msgspec
import trio

from runtime.kernel.actor import ActorContext


class _M(msgspec.Struct, tag_field="kind", tag=str.lower):
    pass


class Echo(_M):
    text: str


class Raise(_M):
    message: str


class Fail(_M):
    """Answer with a typed (expected) error."""

    code: str
    message: str


class Sleep(_M):
    seconds: float
    marker: str = ""


class Relay(_M):
    """Ask another actor to echo ``text`` (routing through the root)."""

    dest: str
    text: str


class Pid(_M):
    pass


class Emit(_M):
    """Cast ``text`` to the root."""

    text: str


class Spoof(_M):
    """Send a request to ``dest`` that claims to come from ``pretend`` (the root must drop it)."""

    dest: str
    pretend: str


Msg = Echo | Raise | Fail | Sleep | Relay | Pid | Emit | Spoof


class Config(msgspec.Struct):
    stubborn: bool = False
    ignore_term: bool = False
    marker_dir: str = ""
    boot_delay_s: float = 0.0
    ask_at_ready: str = ""
    cast_at_ready: str = ""


class ExpectedError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Handler:
    def __init__(self, ctx: ActorContext, cfg: Config) -> None:
        self.ctx = ctx
        self.cfg = cfg
        self.decoder = msgspec.msgpack.Decoder(Msg)

    def _mark(self, name: str) -> None:
        if self.cfg.marker_dir:
            Path(self.cfg.marker_dir, name).write_text(str(os.getpid()))

    def _mark_text(self, name: str, text: str) -> None:
        Path(self.cfg.marker_dir, name).write_text(text)

    async def on_request(self, src: str, body: msgspec.Raw):
        match self.decoder.decode(body):
            case Echo(text=text):
                return {"text": text, "by": self.ctx.name}
            case Raise(message=message):
                raise ValueError(message)
            case Fail(code=code, message=message):
                raise ExpectedError(code, message)
            case Sleep(seconds=seconds, marker=marker):
                try:
                    await trio.sleep(seconds)
                except trio.Cancelled:
                    if marker:
                        self._mark(marker + ".cancelled")
                    raise
                return {"slept": seconds}
            case Relay(dest=dest, text=text):
                return await self.ctx.request(dest, Echo(text=text), dict)
            case Pid():
                return {"pid": os.getpid()}
            case Emit(text=text):
                await self.ctx.cast("root", {"text": text})
                return {}
            case Spoof(dest=dest, pretend=pretend):
                from runtime.kernel._calls import encode_body
                from runtime.kernel.messages import Request

                await self.ctx._channel.send(Request(src=pretend, dest=dest, id=99,
                                                     body=encode_body(Raise(message="spoofed"))))
                return {}

    async def on_cast(self, src: str, body: msgspec.Raw) -> None:
        match self.decoder.decode(body):
            case Raise(message=message):
                raise ValueError(message)
            case Echo(text=text) if self.cfg.marker_dir:
                self._mark_text("cast", f"{text} from {src}")
            case _:
                pass


@asynccontextmanager
async def open_actor(ctx: ActorContext, config: bytes) -> AsyncIterator[_Handler]:
    cfg = msgspec.msgpack.decode(config, type=Config)
    if cfg.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    await trio.sleep(cfg.boot_delay_s)
    handler = _Handler(ctx, cfg)

    async def ask() -> None:
        await trio.sleep(0.2)  # after ready: the root is serving us by then
        try:
            got = await ctx.request(cfg.ask_at_ready, Echo(text="hi"), dict)
            handler._mark_text("asked", f"ok: {got['text']} by {got['by']}")
        except Exception as exc:  # noqa: BLE001 - recorded for the test
            handler._mark_text("asked", f"error: {type(exc).__name__}: {exc}")

    async def cast() -> None:
        await trio.sleep(0.2)
        await ctx.cast(cfg.cast_at_ready, Echo(text="hi"))

    try:
        async with trio.open_nursery() as nursery:
            if cfg.ask_at_ready:
                nursery.start_soon(ask)
            if cfg.cast_at_ready:
                nursery.start_soon(cast)
            yield handler
            nursery.cancel_scope.cancel()
    finally:
        if cfg.stubborn:
            with trio.CancelScope(shield=True):
                await trio.sleep(3600)
