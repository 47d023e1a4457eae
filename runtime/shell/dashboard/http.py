"""The ASGI pieces the dashboard needs and nothing more: a request with its form, and the
responses it sends (HTML with the security headers, redirects, static files, an event
stream). Bodies are bounded (:data:`MAX_FORM_BYTES`) and read within the handshake
timeout, as on the OpenAI API.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import trio

from .security import SECURITY_HEADERS

__all__ = ["MAX_FORM_BYTES", "Request", "read_form", "send_bytes", "send_redirect"]

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]
MAX_FORM_BYTES = 64 * 1024
"""Largest form body accepted (a note is at most a few KB)."""


class FormError(Exception):
    """A body too large, too slow or cut off (``status``, one line)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Request:
    """``method``, ``path`` (without a trailing ``/``), ``query`` (first value of each
    name), ``headers`` (lower-case names) and, for a POST, ``form``."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[bytes, bytes]
    form: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_scope(cls, scope: dict[str, Any]) -> Request:
        raw = scope.get("query_string", b"").decode("latin-1")
        query = {k: v[0] for k, v in parse_qs(raw, keep_blank_values=True).items()}
        return cls(scope["method"], scope["path"].rstrip("/") or "/", query,
                   {k.lower(): v for k, v in scope.get("headers") or []})


async def read_form(receive: Receive, timeout_s: float) -> dict[str, str]:
    """A urlencoded body as ``{name: first value}``; raises FormError (413, 408, 400)."""
    chunks: list[bytes] = []
    size = 0
    more = True
    deadline = trio.current_time() + timeout_s
    while more:
        with trio.move_on_at(deadline) as waited:
            message = await receive()
        if waited.cancelled_caught:
            raise FormError(408, "the form did not arrive in time")
        if message["type"] == "http.disconnect":
            raise FormError(400, "the browser went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            raise FormError(413, f"the form is over {MAX_FORM_BYTES} bytes")
        chunks.append(chunk)
        more = message.get("more_body", False)
    text = b"".join(chunks).decode("utf-8", "replace")
    return {k: v[0] for k, v in parse_qs(text, keep_blank_values=True).items()}


async def send_bytes(send: Send, status: int, body: bytes, ctype: bytes,
                     extra: list[tuple[bytes, bytes]] | None = None) -> None:
    """One whole response with the security headers."""
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", ctype), (b"content-length", str(len(body)).encode()),
        *SECURITY_HEADERS, *(extra or [])]})
    await send({"type": "http.response.body", "body": body})


async def send_redirect(send: Send, location: str,
                        extra: list[tuple[bytes, bytes]] | None = None) -> None:
    """303 See Other to ``location`` (a path on this server)."""
    await send_bytes(send, 303, b"", b"text/plain", [(b"location", location.encode()),
                                                     *(extra or [])])
