"""Sessions in ``sessions.sqlite``, owned by the agent actor.

A :class:`SessionState` holds the transcript and per-session settings. Fields that
are recomputed every turn (the recalled notes and memory-index of the current
turn) are *ephemeral*: :func:`strip_ephemeral` empties them before a snapshot is
written, so stale memory never leaks into a later turn or onto disk.

Schema v1: ``sessions(id TEXT PRIMARY KEY, created_at, updated_at, state BLOB)``
where ``state`` is the msgpack of the stripped SessionState. Migrations follow the
memory store's rule (``PRAGMA user_version`` bumped in the same transaction; a file
newer than the code is refused).
"""

from __future__ import annotations

import secrets
import time
from typing import TypedDict, cast

import apsw
import msgspec

from runtime.services.sqlite_files import connect

SCHEMA_VERSION = 1
_MIGRATIONS = (
    """
    CREATE TABLE sessions (
        id         TEXT PRIMARY KEY,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        state      BLOB NOT NULL
    );
    CREATE INDEX idx_sessions_updated ON sessions(updated_at);
    """,
)


class SessionsError(Exception):
    """Sessions database problem; ``code`` is machine-readable."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Message(msgspec.Struct, array_like=True):
    """One transcript entry: role (``user`` | ``assistant``), text, time (Unix ms)."""

    role: str
    text: str
    at: int


class SessionState(msgspec.Struct, kw_only=True):
    """A session. ``recalled_notes``, ``memory_index`` and ``known_facts`` are ephemeral
    (ids of this turn's memory context: notes recalled, index rows, the profile facts of
    ``### session-facts``), stripped before persistence."""

    id: str
    created_at: int
    updated_at: int
    working_dir: str | None = None
    messages: list[Message] = msgspec.field(default_factory=list)
    turns: int = 0
    title: str = ""  # what the user named it; "" shows the first user line (session_title)
    app: str | None = None  # the app that started it (a client token's name); None: the owner
    recalled_notes: list[int] = msgspec.field(default_factory=list)
    memory_index: list[int] = msgspec.field(default_factory=list)
    known_facts: list[int] = msgspec.field(default_factory=list)


class SessionSummary(TypedDict):
    """One session of :meth:`SessionStore.list`: ``app`` is the app that started it,
    None for the owner's."""

    id: str
    title: str
    createdAt: int
    updatedAt: int
    turns: int
    app: str | None


EPHEMERAL_FIELDS = ("recalled_notes", "memory_index", "known_facts")


def strip_ephemeral(state: SessionState) -> SessionState:
    """A copy of ``state`` with every ephemeral field emptied."""
    return msgspec.structs.replace(state, **{f: [] for f in EPHEMERAL_FIELDS})


TITLE_CHARS = 60
"""Longest session title, in characters (a longer first line is cut at a word)."""


def title_of(text: str) -> str:
    """A session's title from a user line: its first line, white space collapsed, cut
    at a word to :data:`TITLE_CHARS` with "…". ``""`` for a blank text."""
    line = " ".join(next((ln for ln in text.splitlines() if ln.strip()), "").split())
    if len(line) <= TITLE_CHARS:
        return line
    cut = line[:TITLE_CHARS - 1]
    if " " in cut[TITLE_CHARS // 2:]:
        cut = cut[:cut.rindex(" ")]
    return cut.rstrip(" ,;:.-") + "…"


def session_title(state: SessionState) -> str:
    """The title a session shows: the one it has, else its first user line's."""
    if state.title:
        return state.title
    return title_of(next((m.text for m in state.messages if m.role == "user"), ""))


def new_session_id() -> str:
    """A fresh session id: ``s-`` + 12 random hex chars."""
    return "s-" + secrets.token_hex(6)


def valid_session_id(value: str) -> bool:
    """Ids are 1–64 chars of ``[A-Za-z0-9_.-]`` (safe in logs and file names)."""
    return 0 < len(value) <= 64 and all(c.isascii() and (c.isalnum() or c in "_.-") for c in value)


class SessionStore:
    """Load/save sessions. Not thread-safe; the agent serialises calls.

    Errors: SessionsError(code="schema_too_new" | "database_corrupt").
    """

    def __init__(self, path: str) -> None:
        try:
            self.conn = connect(path)  # (also a path that is not UTF-8)
            self.conn.setbusytimeout(5000)
            self.conn.execute("PRAGMA journal_mode = WAL").fetchall()
            self.conn.execute("PRAGMA synchronous = NORMAL")
            # the log's file is cut back to 4 MiB whenever it starts over
            self.conn.execute("PRAGMA journal_size_limit = 4194304").fetchall()
            self._migrate()
        except (apsw.NotADBError, apsw.CorruptError) as exc:
            raise SessionsError("database_corrupt",
                                f"{path} is not a readable sessions database ({exc})") from None
        self._enc = msgspec.msgpack.Encoder()
        self._dec = msgspec.msgpack.Decoder(SessionState)

    def _migrate(self) -> None:
        version = cast(int, self.conn.execute("PRAGMA user_version").fetchall()[0][0])
        if version > SCHEMA_VERSION:
            raise SessionsError("schema_too_new",
                                f"sessions.sqlite has schema {version}, newer than the supported "
                                f"{SCHEMA_VERSION}; upgrade atomic-agent")
        for i in range(version, SCHEMA_VERSION):
            with self.conn:
                self.conn.execute(_MIGRATIONS[i])
                self.conn.execute(f"PRAGMA user_version = {i + 1}")

    def get(self, session_id: str) -> SessionState | None:
        """The stored session or None."""
        rows = cast(list[tuple[bytes]], self.conn.execute(
            "SELECT state FROM sessions WHERE id = ?", (session_id,)).fetchall())
        return self._dec.decode(rows[0][0]) if rows else None

    def create(self, session_id: str | None = None, working_dir: str | None = None) -> SessionState:
        """Create and persist an empty session (fresh id when none given)."""
        state = self.new(session_id, working_dir)
        self.save(state)
        return state

    @staticmethod
    def new(session_id: str | None = None, working_dir: str | None = None) -> SessionState:
        """An empty session, not persisted (fresh id when none given): the agent saves
        it with its first turn, so opening a connection leaves no empty session."""
        now = int(time.time() * 1000)
        return SessionState(id=session_id or new_session_id(), created_at=now, updated_at=now,
                            working_dir=working_dir)

    def prune_empty(self) -> int:
        """Delete every session without a turn (left by versions that saved a session when
        a client connected); returns how many. Run once at start-up."""
        # A session without a turn has no transcript: only small rows are decoded, so a
        # start never reads the stored conversations.
        empty = [sid for sid, blob in self.conn.execute(
                     "SELECT id, state FROM sessions WHERE length(state) < 1024")
                 if self._dec.decode(blob).turns == 0]
        with self.conn:
            for sid in empty:
                self.conn.execute("DELETE FROM sessions WHERE id = ?", (sid,))
        return len(empty)

    def save(self, state: SessionState) -> None:
        """Persist ``state`` with ephemeral fields stripped (one transaction)."""
        clean = strip_ephemeral(state)
        with self.conn:
            self.conn.execute(
                "INSERT INTO sessions(id, created_at, updated_at, state) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET updated_at = excluded.updated_at, state = excluded.state",
                (clean.id, clean.created_at, clean.updated_at, self._enc.encode(clean)))

    def list(self, limit: int = 50, app: str | None = None) -> list[SessionSummary]:
        """Newest first: ``{"id", "title", "createdAt", "updatedAt", "turns", "app"}``
        (``app``: the app that started it, None for the owner's); with
        ``app``, only the sessions that app started (None: every session)."""
        out: list[SessionSummary] = []
        limit = max(1, min(limit, 1000))
        for sid, created, updated, blob in self.conn.execute(
                "SELECT id, created_at, updated_at, state FROM sessions "
                "ORDER BY updated_at DESC"):
            state = self._dec.decode(blob)
            if app is not None and state.app != app:
                continue
            out.append({"id": sid, "title": session_title(state), "createdAt": created,
                        "updatedAt": updated, "turns": state.turns, "app": state.app})
            if len(out) >= limit:
                break
        return out

    def rename(self, session_id: str, title: str) -> SessionState | None:
        """Give a stored session the title ``title`` (whitespace collapsed; ``""`` goes
        back to its first line's); None when there is no such session."""
        state = self.get(session_id)
        if state is None:
            return None
        state.title = " ".join(title.split())
        self.save(state)
        return state

    def delete(self, session_id: str) -> bool:
        """Delete a session; True if it existed."""
        with self.conn:
            self.conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
            deleted = self.conn.changes() > 0
        return deleted

    def close(self) -> None:
        """Checkpoint and close."""
        try:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        finally:
            self.conn.close()
