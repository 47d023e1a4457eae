"""Who may use the dashboard, and the headers every page carries (docs/dashboard.md,
"Security").

* **Login**: ``atomic-agent ui`` asks the daemon, with the owner's token, for a one-time
  code (:meth:`Logins.issue`: 32 random bytes, valid :data:`CODE_TTL_S`, used once) and
  prints ``http://127.0.0.1:PORT/ui/login?code=…``. Opening it sets a session cookie
  (``HttpOnly; SameSite=Strict; Path=/ui``) and redirects to ``/ui`` without the code in
  the address bar. Sessions end after :data:`SESSION_TTL_S` of no use.
* **CSRF**: every state-changing request (POST) carries the session's CSRF token as the
  form field ``csrf`` (compared in constant time), and its ``Origin`` (or, without one,
  its ``Referer``) must be the dashboard's own origin. ``SameSite=Strict`` already keeps
  the cookie off cross-site requests; the token and the origin check hold without it.
* **DNS rebinding**: the ``Host`` header must name the loopback address or
  ``server.host`` (:func:`runtime.shell.listen_guard.host_allowed`), else 421.
* **Headers** (:data:`SECURITY_HEADERS`): a Content-Security-Policy that allows scripts,
  styles and images from the dashboard itself only (no inline script, no remote origin,
  no frames, forms to itself only), ``nosniff``, ``DENY`` framing, and
  ``no-store`` caching. The referrer policy is ``same-origin``: with ``no-referrer`` a
  browser sends ``Origin: null`` on form posts, which the origin check must refuse.
"""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass, field
from typing import TypedDict

__all__ = ["CODE_TTL_S", "COOKIE", "SECURITY_HEADERS", "SESSION_TTL_S", "Logins", "UiSession",
           "UndoAction", "same_origin"]

CODE_TTL_S = 120.0
"""Seconds a login code printed by ``atomic-agent ui`` stays valid."""
SESSION_TTL_S = 12 * 3600.0
"""Seconds a dashboard session lives without a request."""
MAX_SESSIONS = 64
"""Sessions kept; the least recently used one is ended beyond this."""
COOKIE = "aa_ui"

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),  # (no-referrer makes a form's Origin "null")
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


class UndoAction(TypedDict):
    """What an undo does: the memory ``op`` to run, with its ``args`` (the op's
    camelCase argument names)."""

    op: str
    args: dict[str, object]


@dataclass
class UiSession:
    """One logged-in browser: its cookie value ``sid``, CSRF token, last use (monotonic
    seconds), the undo actions it may still take (id → (label, action)) and the one the
    next page offers."""

    sid: str
    csrf: str
    last: float
    undo: dict[str, tuple[str, UndoAction]] = field(default_factory=dict)
    offer: str | None = None  # the undo id the next page shows (once)
    new_token: tuple[str, str] | None = None  # (app, token) the apps page shows once


class Logins:
    """One-time login codes and the sessions they open (module docstring)."""

    def __init__(self) -> None:
        self.codes: dict[str, float] = {}
        self.sessions: dict[str, UiSession] = {}

    def issue(self) -> str:
        """A new one-time code, valid :data:`CODE_TTL_S`."""
        now = time.monotonic()
        self.codes = {c: t for c, t in self.codes.items() if t > now}
        code = secrets.token_urlsafe(32)
        self.codes[code] = now + CODE_TTL_S
        return code

    def redeem(self, code: str) -> UiSession | None:
        """A new session for a valid, unused code (the code is spent); None otherwise."""
        now = time.monotonic()
        match = next((c for c in self.codes if hmac.compare_digest(c, code)), None)
        if match is None or self.codes.pop(match) < now:
            return None
        session = UiSession(secrets.token_urlsafe(32), secrets.token_urlsafe(32), now)
        self.sessions[session.sid] = session
        while len(self.sessions) > MAX_SESSIONS:
            oldest = min(self.sessions.values(), key=lambda s: s.last)
            del self.sessions[oldest.sid]
        return session

    def session(self, cookie_header: bytes | None) -> UiSession | None:
        """The live session named by a ``Cookie`` header; None without one (or expired)."""
        sid = _cookie(cookie_header, COOKIE)
        if not sid:
            return None
        now = time.monotonic()
        match = next((s for k, s in self.sessions.items() if hmac.compare_digest(k, sid)), None)
        if match is None or now - match.last > SESSION_TTL_S:
            if match is not None:
                del self.sessions[match.sid]
            return None
        match.last = now
        return match

    def end(self, session: UiSession) -> None:
        self.sessions.pop(session.sid, None)


def _cookie(header: bytes | None, name: str) -> str | None:
    if not header:
        return None
    for part in header.decode("latin-1").split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key == name:
            return value
    return None


def cookie_header(session: UiSession, *, clear: bool = False) -> bytes:
    """The ``Set-Cookie`` value for ``session`` (or one that clears it)."""
    value = "" if clear else session.sid
    age = "; Max-Age=0" if clear else ""
    return f"{COOKIE}={value}; Path=/ui; HttpOnly; SameSite=Strict{age}".encode()


def same_origin(headers: dict[bytes, bytes]) -> bool:
    """Whether a state-changing request comes from the dashboard's own pages: its
    ``Origin`` (else its ``Referer``) names the same scheme-less host and port as its
    ``Host`` header. A request with neither is refused."""
    host = headers.get(b"host", b"").decode("latin-1").strip().lower()
    source = headers.get(b"origin") or headers.get(b"referer")
    if not host or not source:
        return False
    text = source.decode("latin-1").strip().lower()
    for scheme in ("http://", "https://"):
        if text.startswith(scheme):
            return text[len(scheme):].split("/", 1)[0] == host
    return False


def csrf_ok(session: UiSession, sent: str | None) -> bool:
    """Whether a form's ``csrf`` field is the session's token (constant time)."""
    return bool(sent) and hmac.compare_digest(session.csrf, sent or "")
