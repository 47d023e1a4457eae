"""The state directory: where everything that must survive a restart lives.

Resolution: ``--state-dir``, else ``$ATOMIC_AGENT_STATE_DIR``, else the platform's
user state dir (``~/.local/state/atomic-agent`` on Linux). Contents:
``config.json``, ``memory.sqlite``, ``sessions.sqlite``, ``token`` (0600),
``daemon.json`` (URL and pid of the running daemon), ``daemon.lock``, ``logs/``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any, TypedDict

import platformdirs

from runtime.services.private_files import replacing
from .safe_text import print_error


class DaemonInfo(TypedDict):
    """``daemon.json``: how client commands reach the running daemon (its websocket
    ``url``, ``pid``, ``tokenFile``, ``stateDir``, the LLM it uses and how, the
    OpenAI-compatible API's ``openaiUrl`` or None) and the ``config`` it runs with
    (JSON data, secrets masked) for ``config show``."""

    url: str
    pid: int
    tokenFile: str
    stateDir: str
    llm: str
    llmKind: str
    structuredOutput: str
    openaiUrl: str | None
    config: dict[str, Any]


class StateError(Exception):
    """The state directory cannot be used; ``code`` says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def resolve_state_dir(cli_value: str | None = None) -> Path:
    """Pick the state directory (see module docstring); not created here."""
    if cli_value:
        return Path(cli_value).expanduser().resolve()
    env = os.environ.get("ATOMIC_AGENT_STATE_DIR")
    if env:
        return Path(env).expanduser().resolve()
    return Path(platformdirs.user_state_dir("atomic-agent"))


PRIVATE_FILES = ("memory.sqlite", "memory.sqlite-wal", "memory.sqlite-shm",
                 "sessions.sqlite", "sessions.sqlite-wal", "sessions.sqlite-shm",
                 "daemon.json", "config.json", "token", "daemon.lock",
                 "activity.sqlite", "activity.sqlite-wal", "activity.sqlite-shm",
                 "clients.json", "clients.json.lock", "tool-policies.json", "tenant")
"""The state directory's own files: made 0600 where a looser mode is found."""
TOKEN_MIN_CHARS = 22
"""Shortest token accepted: 22 URL-safe base64 characters hold 128 bits."""


def ensure_state_dir(path: Path) -> Path:
    """Create ``path`` and ``logs/`` (0700), or tighten them to 0700 and the state files
    (:data:`PRIVATE_FILES`, ``logs/*``) to 0600: memory is private, and a directory made
    0755 by hand would otherwise let every local user read it. Raises StateError:
    ``state_dir_unwritable``; ``state_dir_unsafe`` when ``logs`` or one of those files is a
    symbolic link or not a regular file (the daemon would write through it)."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        _private(path, 0o700)
        logs = path / "logs"
        try:
            logs.mkdir(mode=0o700)
        except FileExistsError:
            pass
        _checked(logs, directory=True)
        _private(logs, 0o700)
        for name in PRIVATE_FILES:
            _checked(path / name)
        for entry in logs.iterdir():
            _checked(entry)
    except OSError as exc:
        raise StateError("state_dir_unwritable",
                         f"state directory {path} is not writable: {exc.strerror}") from None
    check_writable(path)
    return path


def tighten(path: Path) -> None:
    """Make the state files of ``path`` that exist (:data:`PRIVATE_FILES`) 0600; links
    and other entries are left alone (:func:`ensure_state_dir` refuses them)."""
    for name in PRIVATE_FILES:
        with contextlib.suppress(OSError):
            if stat.S_ISREG(os.lstat(path / name).st_mode):
                _private(path / name, 0o600)


def _private(path: Path, mode: int) -> None:
    st = os.lstat(path)
    if st.st_mode & 0o077 and st.st_uid == os.geteuid():
        os.chmod(path, mode)


def _checked(path: Path, *, directory: bool = False) -> None:
    """Refuse a link or the wrong kind of entry at ``path``; make a file there 0600."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    kind_ok = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
    if stat.S_ISLNK(st.st_mode) or not kind_ok:
        what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else (
            "not a folder" if directory else "not a regular file")
        raise StateError("state_dir_unsafe", f"{path} is {what}; the daemon will not write "
                                             "through it: remove or replace it")
    if not directory:
        _private(path, 0o600)


def check_writable(path: Path) -> None:
    """Create and remove an empty probe file in ``path`` (which must exist): a read-only
    or inaccessible directory raises StateError(code="state_dir_unwritable") naming the
    OS's reason. A full disk usually passes (an empty file needs no data block)."""
    probe = path / ".write-probe"
    try:
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise StateError("state_dir_unwritable",
                         f"state directory {path} is not writable: {exc.strerror}") from None


class DaemonLock:
    """An exclusive ``flock`` on ``<state>/daemon.lock``: one daemon per state dir.

    ``acquire`` raises StateError(code="already_running") naming the holder's pid.
    The lock dies with the process, so a crashed daemon never blocks a restart.
    """

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "daemon.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StateError("already_running",
                             f"another atomic-agent daemon (pid {holder}) is using "
                             f"{self.path.parent}; stop it first or pick another --state-dir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd

    @property
    def fd(self) -> int | None:
        """The lock file's descriptor while held (a forked actor must not keep it)."""
        return self._fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def lock_is_free(state_dir: Path) -> bool:
    """True when no process holds ``<state>/daemon.lock`` (no daemon, or the last one has
    exited: the lock dies with the process). Probes with a non-blocking ``flock`` that is
    released at once; a missing lock file counts as free."""
    try:
        fd = os.open(state_dir / "daemon.lock", os.O_RDWR)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing drops the probe's lock too
    return True


def load_or_create_token(state_dir: Path) -> str:
    """Return the client token from ``<state>/token``, creating it on first use: 32 random
    bytes, URL-safe base64 (``secrets.token_urlsafe``), written to a private temporary file
    and renamed into place (never half-written). A token file readable by others is
    tightened back to 0600; an empty one (a write cut short) is replaced, with a warning
    on stderr.

    Raises StateError ``token_invalid`` (one line): the token is a link, a folder, a FIFO
    or a device (opened without following links, without blocking), cannot be read, is
    not text, or is shorter than :data:`TOKEN_MIN_CHARS` characters (128 bits).
    """
    path = state_dir / "token"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return _write_token(path)
    except OSError as exc:
        raise StateError("token_invalid", f"cannot read the token {path}: "
                                          f"{'it is a symbolic link' if exc.errno == 40 else exc.strerror}; "
                                          "remove it and a new one is made") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StateError("token_invalid", f"the token {path} is not a regular file; "
                                              "remove it and a new one is made")
        raw = os.read(fd, 4096)
    finally:
        os.close(fd)
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise StateError("token_invalid", f"the token {path} is not text; remove it and a "
                                          "new one is made") from None
    if not token:
        print_error(f"warning: the token {path} was empty; a new one is made")
        return _write_token(path)
    if len(token) < TOKEN_MIN_CHARS:
        raise StateError("token_invalid", f"the token in {path} is too short ({len(token)} "
                                          f"characters; at least {TOKEN_MIN_CHARS}, 128 bits): "
                                          "remove it and a new one is made")
    if st.st_mode & 0o077:
        os.chmod(path, 0o600)
    return token


def _write_token(path: Path) -> str:
    token = secrets.token_urlsafe(32)
    _write_private(path, (token + "\n").encode())
    return token


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` whole to ``path``, private (0600), through a fresh temporary file
    renamed into place (:func:`runtime.services.private_files.replacing`)."""
    with replacing(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_daemon_info(state_dir: Path, info: DaemonInfo) -> None:
    """Atomically write ``daemon.json`` (url, pid, tokenFile …) for client commands,
    through a private temporary file (:func:`_write_private`)."""
    _write_private(state_dir / "daemon.json", json.dumps(info).encode())


def read_daemon_info(state_dir: Path) -> DaemonInfo | None:
    """The running daemon's ``daemon.json``, or None if absent/unreadable/stale. Stale
    means its pid is gone, or nobody holds ``daemon.lock`` (:func:`lock_is_free`): a pid
    recycled by another program after a crash must not read as a running daemon."""
    try:
        info: DaemonInfo = json.loads((state_dir / "daemon.json").read_text())
    except (OSError, ValueError):
        return None
    pid = info.get("pid")
    if not isinstance(pid, int):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    try:
        if lock_is_free(state_dir):
            return None
    except OSError:
        pass
    return info


def remove_daemon_info(state_dir: Path) -> None:
    """Delete ``daemon.json`` (at shutdown); missing is fine."""
    try:
        (state_dir / "daemon.json").unlink()
    except FileNotFoundError:
        pass
