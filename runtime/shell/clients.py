"""Per-app access: named client tokens with scopes (docs/dashboard.md, "Per-app access").

The owner's token (``<state>/token``) keeps every scope. Each other app gets a token of
its own, made by ``atomic-agent clients add NAME --scopes read,write``, which prints it
once; ``<state>/clients.json`` (0600, replaced whole, never half-written) keeps only its
SHA-256, the scopes, when it was made and whether it is paused::

    {"version": 1, "clients": [{"name": "editor", "tokenSha256": "…", "scopes": ["read"],
                                "createdAt": 1796000000000, "paused": false}]}

Scopes (:data:`SCOPES`): ``read`` (recall, list, search, sessions, metrics, the activity
of its own), ``write`` (store, set, archive, link; a chat turn needs ``read`` and
``write``: reflection writes what it learns), ``forget`` (delete a note, remove or purge a
fact, delete a session), ``admin`` (export, import, backup, shutdown, the activity log,
managing clients), ``team:write`` (share a note with the team space, docs/teams.md),
``tools`` (turns may call the user's MCP tools, docs/tools.md) and ``tools:approve``
(answer a tool call's approval request).
:func:`op_scope` maps each memory operation to the one it needs.

The daemon reads the file again when it changes (:meth:`ClientRegistry.reload`): a
revoked or paused app's connections are closed and its next request refused, the others
stay. Edits from the CLI and the dashboard go through :func:`update_clients`, which
takes an exclusive lock on ``clients.json.lock`` so two writers never lose each other's
change.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import os
import re
import typing
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import msgspec
import structlog

from actors.memory.ops import OPS, Scope
from runtime.services.private_files import replacing

log = structlog.get_logger()

__all__ = ["OWNER", "OWNER_PRINCIPAL", "SCOPES", "ClientEntry", "ClientRegistry", "ClientsError",
           "Principal", "activity_label", "add_client", "bearer_token", "op_scope", "parse_scopes",
           "set_client", "update_clients"]

SCOPES: tuple[str, ...] = typing.get_args(Scope)
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}")
"""A client name: 1-40 characters of letters, digits, ``_ . -``, not starting with a
punctuation mark (it shows in the activity log and the dashboard)."""
OWNER = "owner"
"""The name of the owner's token in the activity log (a client cannot take it)."""
RESERVED = frozenset({OWNER, "agent", "reflection", "consolidator", "backfill", "dashboard",
                      "cli", "tui"})
"""Names the daemon uses for itself in the activity log."""
OWN_PROGRAMS = frozenset({"cli", "tui"})
"""Reserved names the owner's own programs declare (``atomic-agent`` commands, the TUI)."""


class ClientsError(Exception):
    """A clients.json or argument problem, one line for a person (``code``, message)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class ClientEntry(msgspec.Struct, rename="camel", kw_only=True):
    """One app's row in clients.json (the module docstring)."""

    name: str
    token_sha256: str
    scopes: list[str]
    created_at: int
    paused: bool = False


class ClientsFile(msgspec.Struct, kw_only=True):
    version: int = 1
    clients: list[ClientEntry] = msgspec.field(default_factory=list)


class Principal(msgspec.Struct, frozen=True):
    """Who a token belongs to: ``name`` (``owner`` for the daemon token), its ``scopes``
    and ``token_sha256``, the digest of the token itself: a name revoked and added again
    is another identity (another token), which a connection of the old one never
    inherits."""

    name: str
    scopes: frozenset[str]
    owner: bool = False
    token_sha256: str = ""

    @property
    def app(self) -> str | None:
        """The app its sessions belong to: the token's name; None for the owner, who
        reaches every session."""
        return None if self.owner else self.name

    @property
    def turn_scopes(self) -> list[str] | None:
        """What a turn it starts may do: its scopes; None for the owner (all)."""
        return None if self.owner else sorted(self.scopes)

    def lacks(self, *needed: str) -> str | None:
        """The first of ``needed`` this principal does not have; None when it has all."""
        return next((s for s in needed if s not in self.scopes), None)


OWNER_PRINCIPAL = Principal(OWNER, frozenset(SCOPES), owner=True)


def op_scope(op: str) -> str:
    """The scope a memory operation needs, as the op table says (``access`` in
    :mod:`actors.memory.ops`: ``forget`` for deletions, ``admin`` for file access, the
    activity log and consolidation, ``write`` for other writes, ``read`` otherwise,
    ``memory.stats`` included); ``read`` for an unknown op, which its validation then
    refuses."""
    cls = OPS.get(op)
    return cls.access if cls is not None else "read"


_LABEL_RE = re.compile(r"[^\x20-\x7e]+")


def activity_label(declared: str | None) -> str | None:
    """The name a program declared for itself (``hello``'s ``client``, an MCP client's
    ``clientInfo.name``), as the activity log shows it: printable ASCII, trimmed, at most
    60 characters; None when nothing is left."""
    if not declared:
        return None
    text = " ".join(_LABEL_RE.sub(" ", declared).split())[:60]
    return text or None


def bearer_token(header: bytes | str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header value ("" without one;
    the scheme's case is ignored, RFC 7235)."""
    text = header.decode("latin-1") if isinstance(header, bytes) else header or ""
    return text[7:] if text[:7].lower() == "bearer " else ""


def parse_scopes(text: str) -> list[str]:
    """``"read,write"`` → ``["read", "write"]`` in :data:`SCOPES` order; raises
    ClientsError naming an unknown scope or an empty list."""
    asked = {s.strip().lower() for s in text.split(",") if s.strip()}
    unknown = sorted(asked - set(SCOPES))
    if unknown:
        raise ClientsError("invalid_argument", f"unknown scope(s) {', '.join(unknown)}; "
                                               f"known: {', '.join(SCOPES)}")
    if not asked:
        raise ClientsError("invalid_argument", "give at least one scope: "
                                               + ", ".join(SCOPES))
    return [s for s in SCOPES if s in asked]


def token_digest(token: str) -> str:
    """SHA-256 of a token, hex (only the digest is stored)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _path(state_dir: Path) -> Path:
    return state_dir / "clients.json"


def read_clients(state_dir: Path) -> ClientsFile:
    """clients.json, or an empty one when there is none; raises ClientsError for a file
    that is not one (it is never overwritten then: a person fixes or removes it)."""
    path = _path(state_dir)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return ClientsFile()
    except OSError as exc:
        raise ClientsError("clients_invalid", f"cannot read {path}: {exc.strerror}") from None
    try:
        return msgspec.json.decode(raw, type=ClientsFile)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ClientsError("clients_invalid", f"{path} is not a clients file ({exc}); fix "
                                              "or remove it") from None


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    fd = os.open(state_dir / "clients.json.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def update_clients(state_dir: Path, change: Callable[[ClientsFile], None]) -> ClientsFile:
    """Read clients.json under the lock, apply ``change`` (which may raise
    ClientsError: nothing is written then) and write it back whole (0600)."""
    with _locked(state_dir):
        current = read_clients(state_dir)
        change(current)
        with replacing(_path(state_dir)) as tmp:
            tmp.write_bytes(msgspec.json.format(msgspec.json.encode(current), indent=2) + b"\n")
        return current


def add_client(state_dir: Path, name: str, scopes: list[str]) -> str:
    """Register ``name`` with ``scopes`` and return its new token (shown once). Raises
    ClientsError: a bad or reserved name, a name already taken, a bad scope."""
    if not NAME_RE.fullmatch(name):
        raise ClientsError("invalid_argument", f"a client name is 1-40 letters, digits, _ . -, "
                                               f"starting with a letter or digit (not {name!r})")
    if name.lower() in RESERVED:
        raise ClientsError("invalid_argument", f"{name!r} is a name the daemon uses itself; "
                                               "pick another")
    scopes = parse_scopes(",".join(scopes))
    token = "aa-" + secrets.token_urlsafe(32)

    def change(f: ClientsFile) -> None:
        if any(c.name == name for c in f.clients):
            raise ClientsError("exists", f"a client named {name!r} exists; revoke it first "
                                         "or pick another name")
        f.clients.append(ClientEntry(name=name, token_sha256=token_digest(token),
                                     scopes=scopes, created_at=int(time.time() * 1000)))

    update_clients(state_dir, change)
    return token


def set_client(state_dir: Path, name: str, *, paused: bool | None = None,
               revoke: bool = False) -> ClientEntry:
    """Pause, resume or revoke (remove) the client ``name``; returns its row as it was
    before a revoke, as it is after otherwise. Raises ClientsError ``not_found``."""
    found: list[ClientEntry] = []

    def change(f: ClientsFile) -> None:
        for entry in f.clients:
            if entry.name == name:
                found.append(entry)
                if paused is not None:
                    entry.paused = paused
        if not found:
            raise ClientsError("not_found", f"no client named {name!r} "
                                            "(atomic-agent clients list)")
        if revoke:
            f.clients = [c for c in f.clients if c.name != name]

    update_clients(state_dir, change)
    return found[0]


class ClientRegistry:
    """The daemon's view of who may connect: the owner token and clients.json, read again
    when the file changes (:meth:`reload`, polled by the root)."""

    def __init__(self, state_dir: Path | None, owner_token: str) -> None:
        self.state_dir = state_dir
        self._owner = owner_token.encode()
        self._stamp: tuple[int, int, int] | None = None
        self.entries: list[ClientEntry] = []
        self.error: str | None = None
        self.generation = 0
        """Counts the reloads that found the file changed (a watcher compares it)."""
        self.reload()

    def reload(self) -> bool:
        """Read clients.json again when it changed; True when it did. A file that cannot
        be read or is not a clients file fails closed: no app token is accepted until it
        is fixed, :attr:`error` says why (logged once per change, shown by ``/health``,
        and apps are told ``clients_unreadable``). Without a state directory only the
        owner's token is known."""
        if self.state_dir is None:
            return False
        try:
            st = _path(self.state_dir).stat()
            stamp: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            stamp = None
        except OSError:
            return False
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        self.generation += 1
        try:
            self.entries = read_clients(self.state_dir).clients
            if self.error is not None:
                log.warning("clients.readable_again", file=str(_path(self.state_dir)))
            self.error = None
        except ClientsError as exc:
            self.entries = []
            self.error = (f"{exc}: no app token is accepted until it is fixed (the owner's "
                          "token still works; `atomic-agent clients list` says what it "
                          "holds)")
            log.error("clients.unreadable", error=self.error)
        return True

    def resolve(self, token: str) -> Principal | None:
        """The principal a presented token belongs to; None for an unknown, revoked or
        paused one. Compared in constant time (the owner token as bytes, client tokens by
        digest)."""
        if hmac.compare_digest(token.encode("utf-8", "surrogatepass"), self._owner):
            return OWNER_PRINCIPAL
        self.reload()  # a revoke or pause is seen by the very next request
        digest = token_digest(token)
        for entry in self.entries:
            if hmac.compare_digest(digest, entry.token_sha256):
                if entry.paused:
                    return None
                return Principal(entry.name, frozenset(entry.scopes),
                                 token_sha256=entry.token_sha256)
        return None

    def owner_label(self, declared: str | None) -> str:
        """The activity log's name for a program holding the owner's token that declared
        ``declared`` (``hello``'s ``client``): its label (:func:`activity_label`) unless
        that is a name the daemon uses for itself (:data:`RESERVED` but ``cli`` and
        ``tui``, the owner's own programs; ``agent for …``, ``reflection for …``) or an
        app's name in clients.json; then ``owner``."""
        label = activity_label(declared)
        if label is None:
            return OWNER
        low = label.lower()
        if (low in RESERVED - OWN_PROGRAMS or low.startswith(("agent for", "reflection for"))
                or any(e.name.lower() == low for e in self.entries)):
            return OWNER
        return label

    def paused(self, token: str) -> str | None:
        """The name of the paused client ``token`` belongs to, for a refusal that says
        so; None otherwise."""
        digest = token_digest(token)
        return next((e.name for e in self.entries
                     if e.paused and hmac.compare_digest(digest, e.token_sha256)), None)

    def still_allowed(self, principal: Principal) -> bool:
        """Whether a connected principal may go on: the file read again if it changed
        (a ``stat``), and its own token still there — not revoked, not paused, the same
        scopes. A name revoked and added again has a new token: the old connection is not
        it."""
        if principal.owner:
            return True
        self.reload()
        return any(e.name == principal.name and not e.paused
                   and e.token_sha256 == principal.token_sha256
                   and frozenset(e.scopes) == principal.scopes for e in self.entries)
