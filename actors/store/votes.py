"""VoteStore: the vote audit log, FIFO-capped.

Votes are up/down signals the vote runner casts on the items rendered
in one turn: notes (``memory``), lessons, profile facts and procedures. This module is
only the audit table ``votes`` (schema v3) and its
tail; the ``vote_score`` columns and their effects come with the runner.

* Gated by ``memory.voting.enabled`` (default **off**): a disabled store records
  nothing (:meth:`VoteStore.record` returns None) and its tail is ``[]``.
* After every insert the oldest rows beyond ``memory.voting.eventLogMaxRows`` (default
  50 000) are deleted in the same transaction, by id (FIFO); never the row just written.
* ``target_id`` is a soft pointer: targets may be evicted, the audit row stays.

Times are Unix milliseconds; writes go through ``sql.write_txn``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from .errors import ValidationError, optional_text, require_int, require_positive_id
from .errors import now_ms as _now
from .records import Vote
from .sql import Connection, write_txn

__all__ = [
    "Vote",
    "VoteStore",
    "VOTE_KINDS",
    "DEFAULT_EVENT_LOG_MAX_ROWS",
    "TAIL_LIMIT_DEFAULT",
    "TAIL_LIMIT_MAX",
]

#: Targets a vote may name.
VOTE_KINDS: tuple[str, ...] = ("memory", "lesson", "profile", "procedure")
#: ``memory.voting.eventLogMaxRows`` default.
DEFAULT_EVENT_LOG_MAX_ROWS = 50_000
TAIL_LIMIT_DEFAULT, TAIL_LIMIT_MAX = 100, 1000


_COLS = "id, kind, target_id, direction, session_id, turn_index, created_at"
_SQL_INSERT = (
    "INSERT INTO votes (kind, target_id, direction, session_id, turn_index, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)
_SQL_TRIM = (
    "DELETE FROM votes WHERE id <> ?1 AND id <= ("
    " SELECT id FROM votes ORDER BY id DESC LIMIT 1 OFFSET ?2)"
)
_SQL_TAIL = f"SELECT {_COLS} FROM votes ORDER BY id DESC LIMIT ?"


def _row(row: Sequence[Any]) -> Vote:
    return Vote(*row)


class VoteStore:
    """Record votes and read the newest ones.

    Args:
        conn: a connection from ``schema.open_database`` (migrated to >= v3).
        enabled: ``memory.voting.enabled`` (default False: no-op store).
        max_rows: ``memory.voting.eventLogMaxRows`` (default 50 000), at least 1.

    Raises ``ValueError`` for a non-positive ``max_rows``; methods raise
    :class:`ValidationError` for bad input.
    """

    def __init__(self, conn: Connection, *, enabled: bool = False,
                 max_rows: int = DEFAULT_EVENT_LOG_MAX_ROWS) -> None:
        if not isinstance(max_rows, int) or isinstance(max_rows, bool) or max_rows < 1:
            raise ValueError("max_rows must be a positive integer")
        self.conn = conn
        self.enabled = bool(enabled)
        self.max_rows = max_rows

    def record(
        self,
        kind: str,
        target_id: int,
        direction: int,
        session: str | None = None,
        *,
        turn_index: int | None = None,
        now_ms: int | None = None,
    ) -> Vote | None:
        """Append one vote and trim the log to ``max_rows`` (oldest first).

        Input is validated even when disabled (so callers see their mistakes); a
        disabled store then returns None without writing.

        Args:
            kind: ``memory`` | ``lesson`` | ``profile`` | ``procedure``.
            target_id: positive id of the voted item.
            direction: +1 or -1 (bools refused).
            session: session id (trimmed, blank -> None).
            turn_index: non-negative turn number or None.
            now_ms: Unix ms (default now).

        Returns:
            The stored :class:`Vote`, or None when voting is disabled.

        Raises:
            ValidationError: fields ``kind``, ``targetId``, ``direction``, ``session``,
                ``turnIndex``, ``nowMs``.
        """
        if kind not in VOTE_KINDS:
            raise ValidationError("kind", f"must be one of {', '.join(VOTE_KINDS)}")
        target_id = require_positive_id(target_id, "targetId")
        if require_int(direction, "direction") not in (1, -1):
            raise ValidationError("direction", "must be 1 or -1")
        session = optional_text(session, "session")
        if turn_index is not None and require_int(turn_index, "turnIndex") < 0:
            raise ValidationError("turnIndex", "must be >= 0")
        now = _now(now_ms)
        if not self.enabled:
            return None
        with write_txn(self.conn):
            self.conn.execute(_SQL_INSERT, (kind, target_id, direction, session, turn_index, now))
            vote_id = self.conn.last_insert_rowid()
            self.conn.execute(_SQL_TRIM, (vote_id, self.max_rows))
            row = self.conn.execute(f"SELECT {_COLS} FROM votes WHERE id = ?", (vote_id,))
            return _row(row.fetchall()[0])

    def tail(self, limit: int = TAIL_LIMIT_DEFAULT) -> list[Vote]:
        """Return the newest votes first; ``limit`` clamped into [1, 1000] (default
        100). ``[]`` when voting is disabled (the audit tail
        is shown only when ``memory.voting.enabled``).

        Raises:
            ValidationError: field ``limit``.
        """
        limit = min(TAIL_LIMIT_MAX, max(1, require_int(limit, "limit")))
        if not self.enabled:
            return []
        return [_row(r) for r in self.conn.execute(_SQL_TAIL, (limit,))]

    def count(self) -> int:
        """Return the number of audit rows stored (whether or not enabled)."""
        return cast(int, self.conn.execute("SELECT count(*) FROM votes").fetchall()[0][0])
