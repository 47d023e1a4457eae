"""The state directory: where everything that must survive a restart lives (DESIGN §3).

Resolution: ``--state-dir``, else ``$ATOMIC_AGENT_STATE_DIR``, else the platform's
user state dir (``~/.local/state/atomic-agent`` on Linux). Contents:
``config.json``, ``memory.sqlite``, ``sessions.sqlite``, ``token`` (0600),
``daemon.json`` (URL and pid of the running daemon), ``daemon.lock``, ``logs/``.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
from pathlib import Path

import platformdirs


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


def ensure_state_dir(path: Path) -> Path:
    """Create ``path`` (0700) and ``logs/``; StateError(code="state_dir_unwritable")."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        (path / "logs").mkdir(exist_ok=True)
    except OSError as exc:
        raise StateError("state_dir_unwritable",
                         f"state directory {path} is not writable: {exc.strerror}") from None
    check_writable(path)
    return path


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
    """Return the client token from ``<state>/token``, creating it (0600) on first use.

    The token is 32 random bytes, URL-safe base64 (``secrets.token_urlsafe``). A token
    file readable by others is tightened back to 0600.
    """
    path = state_dir / "token"
    try:
        token = path.read_text().strip()
        if token:
            if path.stat().st_mode & 0o077:
                path.chmod(0o600)
            return token
    except FileNotFoundError:
        pass
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    path.chmod(0o600)
    return token


def write_daemon_info(state_dir: Path, info: dict) -> None:
    """Atomically write ``daemon.json`` (url, pid, tokenFile …) for client commands."""
    tmp = state_dir / "daemon.json.tmp"
    tmp.write_text(json.dumps(info))
    os.replace(tmp, state_dir / "daemon.json")


def read_daemon_info(state_dir: Path) -> dict | None:
    """The running daemon's ``daemon.json``, or None if absent/unreadable/stale."""
    try:
        info = json.loads((state_dir / "daemon.json").read_text())
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
    return info


def remove_daemon_info(state_dir: Path) -> None:
    """Delete ``daemon.json`` (at shutdown); missing is fine."""
    try:
        (state_dir / "daemon.json").unlink()
    except FileNotFoundError:
        pass
