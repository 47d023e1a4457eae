"""Who may talk to the daemon's listeners: one check of ``Host`` and ``Origin`` for the
websocket gateway, the OpenAI-compatible API and the MCP server, and one throttle for
wrong tokens.

* **Host** (DNS rebinding: a web page whose name resolves to 127.0.0.1 reaches a loopback
  server with ``Host: evil.example``): on a loopback bind only ``localhost``,
  ``127.x.x.x``, ``[::1]`` and the configured host are accepted, compared
  case-insensitively, any port. A remote bind (``server.allowRemote``) accepts any host.
* **Origin** (a browser page calling the daemon): absent (not a browser) is fine; else it
  must be in ``server.allowedOrigins``, compared case-insensitively (scheme and host are),
  without a trailing ``/``.
* **Wrong tokens** are answered after :data:`AUTH_FAILURE_DELAY_S` and counted
  (:class:`AuthThrottle`), so a script trying tokens is slowed and visible. The wait holds
  nothing a right token needs: no lock shared with other connections and no place among
  the connections waiting for ``hello`` (those went one at a time through one lock, and a
  flood of wrong tokens from any local program kept every client out). Tokens are 256-bit
  random strings: the delay is not what keeps them from being guessed.

See https://developer.mozilla.org/docs/Web/HTTP/Headers/Origin and the MCP transport's
security warning (https://modelcontextprotocol.io/specification/2025-06-18/basic/transports).
"""

from __future__ import annotations

import ipaddress

import trio

from runtime.services.metrics import count_process_wide

__all__ = ["AUTH_FAILURE_DELAY_S", "THROTTLE", "AuthThrottle", "host_allowed", "is_loopback",
           "origin_allowed", "remote_bind_problem"]

AUTH_FAILURE_DELAY_S = 0.5
"""Seconds before a wrong token is answered."""
MAX_DELAYED = 64
"""Wrong tokens waiting out their delay at once; past this they are answered at once
(a flood must not pile up waiting tasks)."""


def is_loopback(host: str) -> bool:
    """Whether the bind address ``host`` reaches this machine only (``127.0.0.1``,
    ``::1``, ``localhost``)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def remote_bind_problem(host: str, allow_remote: bool) -> str | None:
    """Why binding ``host`` is refused (a one-line reason), or None. A non-loopback host
    exposes the websocket and the OpenAI API — token in clear, over plain HTTP — to every
    machine that can reach it, so it needs ``server.allowRemote``."""
    if is_loopback(host) or allow_remote:
        return None
    return (f"server.host {host!r} is not a loopback address: the websocket and the OpenAI "
            "API would be reachable from other machines, the token sent in clear over "
            "plain HTTP; keep 127.0.0.1 (use an SSH tunnel or a TLS proxy), or set "
            "server.allowRemote to true to accept that risk")


def _host_name(value: str) -> str:
    value = value.strip().lower()
    if value.startswith("["):  # [::1]:8765
        return value[1:].split("]", 1)[0]
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    return value


def host_allowed(value: str | bytes | None, bound_host: str, allow_remote: bool = False) -> bool:
    """Whether a request's ``Host`` header may reach a listener bound to ``bound_host``
    (module docstring). A missing header is refused on a loopback bind."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if allow_remote and not is_loopback(bound_host):
        return True
    if not value:
        return False
    name = _host_name(value)
    return is_loopback(name) or name == _host_name(bound_host)


def _origin_key(origin: str) -> str:
    return origin.strip().lower().rstrip("/")


def origin_allowed(value: str | bytes | None, allowed: list[str]) -> bool:
    """Whether a request's ``Origin`` header is acceptable (module docstring)."""
    if value is None:
        return True
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return _origin_key(value) in {_origin_key(a) for a in allowed}


class AuthThrottle:
    """Slows and counts wrong tokens (module docstring); one per process.

    ``failures``: wrong tokens by listener (``websocket``, ``openai_api``, ``mcp``),
    reported by every metrics snapshot of the process as ``auth.failed{listener}``."""

    def __init__(self, delay_s: float = AUTH_FAILURE_DELAY_S) -> None:
        self.delay_s = delay_s
        self.failures: dict[str, int] = {}
        self.delayed = 0

    async def failed(self, listener: str) -> None:
        """Count one wrong token on ``listener`` and wait :attr:`delay_s` before it is
        answered (at once when :data:`MAX_DELAYED` already wait)."""
        self.failures[listener] = self.failures.get(listener, 0) + 1
        if self.delayed >= MAX_DELAYED:
            return
        self.delayed += 1
        try:
            await trio.sleep(self.delay_s)
        finally:
            self.delayed -= 1


THROTTLE = AuthThrottle()
"""The process's throttle, shared by its listeners."""
count_process_wide(lambda: {f"auth.failed{{listener={k}}}": n
                            for k, n in THROTTLE.failures.items()})
