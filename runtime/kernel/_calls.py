"""Caller-side request/reply correlation, shared by the root and every child.

``Calls`` hands out correlation ids, parks the caller on a one-shot slot, and
resolves it when the matching Reply/Error envelope arrives. The caller waits under
its own cancel scope (``fail_after`` at the call site); if it is cancelled, a
``Cancel`` envelope for that id is sent (shielded, bounded) so the callee cancels
the handler (caller-side cancellation: docs/architecture.md §2).
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
import trio

from .errors import ActorUnavailable, RemoteError, TransportClosed
from .messages import Cancel, Envelope, Error, Reply, Request
from .unicode import encode_repaired

T = TypeVar("T")

_encoder = msgspec.msgpack.Encoder()


def encode_body(body: Any) -> msgspec.Raw:
    """Encode an actor message Struct as the opaque envelope body; a lone surrogate in
    any of its strings becomes U+FFFD (:mod:`.unicode`) instead of failing."""
    return msgspec.Raw(encode_repaired(_encoder.encode, body))


def error_to_exception(err: Error) -> Exception:
    """Map an ``Error`` envelope to the exception the caller should see."""
    if err.kind == "unavailable":
        return ActorUnavailable(err.src, err.message)
    return RemoteError(err.code, err.message, err.remote_type)


class _Slot:
    __slots__ = ("event", "result")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.result: Reply | Error | None = None


class Calls:
    """Pending outgoing requests of one endpoint named ``me``.

    Args:
        me: this endpoint's actor name (``"root"`` for the supervisor).
        send: coroutine that delivers an envelope toward the root/router.
    """

    def __init__(self, me: str, send: Callable[[Envelope], Awaitable[None]]) -> None:
        self.me = me
        self._send = send
        self._ids = itertools.count(1)
        self._pending: dict[int, _Slot] = {}

    async def request(self, dest: str, body: Any, reply_type: type[T]) -> T:
        """Send ``body`` to ``dest`` and wait for its reply, decoded as ``reply_type``.

        Errors: RemoteError (handler answered with a typed error), ActorUnavailable
        (dest not running or died meanwhile), TransportClosed (our own link is gone).
        Cancellation: the caller's scope; a Cancel for this id is sent on the way out.
        """
        rid = next(self._ids)
        slot = _Slot()
        self._pending[rid] = slot
        try:
            await self._send(Request(src=self.me, dest=dest, id=rid, body=encode_body(body)))
            await slot.event.wait()
        except trio.Cancelled:
            if slot.result is None:
                with trio.CancelScope(shield=True) as cs:
                    cs.deadline = trio.current_time() + 0.5
                    try:
                        await self._send(Cancel(src=self.me, dest=dest, id=rid))
                    except TransportClosed:
                        pass
            raise
        finally:
            self._pending.pop(rid, None)
        result = slot.result
        if isinstance(result, Error):
            raise error_to_exception(result)
        assert result is not None
        return msgspec.msgpack.decode(result.body, type=reply_type)

    def resolve(self, env: Reply | Error) -> bool:
        """Deliver a Reply/Error to its waiting caller; False if nobody waits any more."""
        slot = self._pending.get(env.id)
        if slot is None or slot.result is not None:
            return False
        slot.result = env
        slot.event.set()
        return True

    def fail_all(self, reason: str) -> None:
        """Fail every pending request with ActorUnavailable (our link to the root died)."""
        for rid, slot in list(self._pending.items()):
            if slot.result is None:
                slot.result = Error(
                    src="root", dest=self.me, id=rid, kind="unavailable", code="unavailable",
                    message=reason,
                )
                slot.event.set()

    def fail_dest(self, dest: str, pending_ids: list[int], reason: str) -> None:
        """Fail the given pending ids (all addressed to ``dest``) with ActorUnavailable."""
        for rid in pending_ids:
            slot = self._pending.get(rid)
            if slot is not None and slot.result is None:
                slot.result = Error(
                    src=dest, dest=self.me, id=rid, kind="unavailable", code="unavailable",
                    message=reason,
                )
                slot.event.set()
