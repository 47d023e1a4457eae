"""ProfileStore: short key/value facts with bi-temporal history.

Every successful :meth:`ProfileStore.set` adds a row and supersedes the previous active
row of that key, so ``history(key)`` shows every value the key ever had; at most one
row per key is active (``superseded_by IS NULL``, a partial unique index). Removing a
fact retires its active row (``superseded_by`` = its own id) instead of deleting it, so
history is kept (a value never disappears without a trace).

Pinned facts are rendered into every prompt; unpinned (contextual) facts only when one
of their keywords hits the user message (``render.gate_profile``). Active unpinned facts
are capped (``max_unpinned``, default 500); the oldest are retired first,
never the row just written; pinned facts are never counted or evicted.

All writes go through ``sql.write_txn``: ``BEGIN IMMEDIATE`` on their own, a
savepoint when the caller already holds a transaction (one reflection result, one
transaction). Times are Unix milliseconds.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Iterable
from typing import Any, cast

import msgspec

from .columns import decode_json_list
from .dates import TIMEZONE_KEYS, resolve_zone
from .errors import ValidationError, blank, require_positive_id, string_list
from .errors import now_ms as _now
from .records import ProfileFact
from .sql import Connection, bytewise, ids_binding, in_ids, write_txn

__all__ = [
    "ProfileFact",
    "ProfileStore",
    "PROFILE_KEY_MAX_LENGTH",
    "PROFILE_VALUE_MAX_LENGTH",
    "PROFILE_MAX_KEYWORDS",
    "PROFILE_KEYWORD_MAX_LENGTH",
    "DEFAULT_MAX_UNPINNED",
    "validate_key",
    "validate_value",
    "validate_keywords",
]

#: Limits of a profile fact: key and value chars.
PROFILE_KEY_MAX_LENGTH = 120
PROFILE_VALUE_MAX_LENGTH = 2000
PROFILE_MAX_KEYWORDS = 8
PROFILE_KEYWORD_MAX_LENGTH = 40
#: ``memory.profile.maxEntries`` default: cap on active unpinned facts.
DEFAULT_MAX_UNPINNED = 500
DEFAULT_PINNED_BUDGET_CHARS = 1500
"""Default ceiling (chars) on the rendered lines ``- key: value`` of all active pinned
facts together: pinned facts reach every prompt, so one guard on the single write
path every route shares (tool, websocket, reflection, offline CLI) keeps that block
small. 1500 chars ≈ 420 tokens, inside ``memory.profile.maxTokens``
512 (``render.estimate_tokens``)."""

_KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_KEYWORDS_DECODER = msgspec.json.Decoder(list[str])


def validate_key(key: object) -> str:
    """Validate a profile key and return its canonical (trimmed, lower-cased) form.

    Rules (keys are case-folded, so ``City`` and ``city`` are one fact): a string, trimmed,
    non-empty, at most :data:`PROFILE_KEY_MAX_LENGTH` (120) chars, first char
    ``[A-Za-z0-9]``, the rest ``[A-Za-z0-9_.-]``.

    Raises:
        ValidationError: field ``key``.
    """
    if not isinstance(key, str):
        raise ValidationError("key", "must be a string")
    key = key.strip()
    if not key:
        raise ValidationError("key", "must not be empty")
    if len(key) > PROFILE_KEY_MAX_LENGTH:
        raise ValidationError(
            "key", f"must be at most {PROFILE_KEY_MAX_LENGTH} chars (got {len(key)})"
        )
    if _KEY_RE.fullmatch(key) is None:
        raise ValidationError(
            "key", "must start with alphanumeric and contain only [a-zA-Z0-9_.-]"
        )
    return key.lower()


def validate_value(value: object) -> str:
    """Validate a profile value; it is returned unchanged (never trimmed, never cut).

    Rules: a string with at least one non-whitespace char, at most
    :data:`PROFILE_VALUE_MAX_LENGTH` (2000) chars.

    Raises:
        ValidationError: field ``value``.
    """
    if not isinstance(value, str):
        raise ValidationError("value", "must be a string")
    if blank(value):
        raise ValidationError("value", "must not be empty (nothing visible)")
    if len(value) > PROFILE_VALUE_MAX_LENGTH:
        raise ValidationError(
            "value", f"must be at most {PROFILE_VALUE_MAX_LENGTH} chars (got {len(value)})"
        )
    return value


def validate_keywords(keywords: object) -> list[str]:
    """Validate gate keywords; return them trimmed, lower-cased and de-duplicated.

    Rules: ``None`` -> ``[]``; otherwise a list/tuple of at most
    :data:`PROFILE_MAX_KEYWORDS` (8) strings, each non-empty after trimming and at most
    :data:`PROFILE_KEYWORD_MAX_LENGTH` (40) chars.

    Raises:
        ValidationError: field ``keywords``.
    """
    return string_list(
        keywords,
        "keywords",
        max_items=PROFILE_MAX_KEYWORDS,
        max_chars=PROFILE_KEYWORD_MAX_LENGTH,
        lower=True,
    )


def _decode_keywords(raw: str | None) -> list[str]:
    return decode_json_list(raw, _KEYWORDS_DECODER)


_COLS = ("id, key, value, pinned, keywords, updated_at, valid_from, superseded_by, source,"
         " session_id, turn_id, removed_by, removed_turn_id")
_O_COLS = ", ".join(f"o.{c.strip()}" for c in _COLS.split(","))
_SQL_ACTIVE = f"SELECT {_COLS} FROM profile_facts WHERE key = ? AND superseded_by IS NULL"
_SQL_BY_ID = f"SELECT {_COLS} FROM profile_facts WHERE id = ?"
_SQL_LIST = f"SELECT {_COLS} FROM profile_facts WHERE superseded_by IS NULL ORDER BY {{key}}"
# Write order (ids only grow), not timestamps: a clock that stepped back must not put
# the active value before the one it replaced.
_SQL_HISTORY = f"SELECT {_COLS} FROM profile_facts WHERE key = ? ORDER BY id"
_SQL_INSERT = (
    "INSERT INTO profile_facts (key, value, pinned, keywords, valid_from, superseded_by,"
    " supersedes, created_at, updated_at, source, session_id, turn_id)"
    " VALUES (?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?)"
)
_SQL_RETIRE = (
    "UPDATE profile_facts SET superseded_by = id, updated_at = ?, removed_by = ?,"
    " removed_turn_id = ? WHERE key = ? AND superseded_by IS NULL"
)
_SQL_EVICT = (
    "UPDATE profile_facts SET superseded_by = id, updated_at = ?, removed_by = 'evicted',"
    " removed_turn_id = NULL WHERE id IN ("
    " SELECT id FROM profile_facts WHERE superseded_by IS NULL AND pinned = 0 AND id <> ?"
    " ORDER BY updated_at, id LIMIT ?)"
)


def _row(row: tuple[Any, ...]) -> ProfileFact:
    return ProfileFact(
        id=row[0],
        key=row[1],
        value=row[2],
        pinned=bool(row[3]),
        keywords=_decode_keywords(row[4]),
        updated_at=row[5],
        valid_from=row[6],
        superseded_by=row[7],
        source=row[8],
        session_id=row[9],
        turn_id=row[10],
        removed_by=row[11],
        removed_turn_id=row[12],
    )


def _keywords_from_key(key: str) -> list[str]:
    """Gate keywords for a fact demoted from pinned: the key's words (2+ chars)."""
    words = [w for w in re.split(r"[_.\-]+", key) if len(w) >= 2]
    return (words or [key[:40]])[:8]


class ProfileStore:
    """CRUD over ``profile_facts`` (validated keys and values, a capped count of
    unpinned facts).

    Args:
        conn: a connection from ``schema.open_database`` (migrated).
        max_unpinned: cap on *active unpinned* facts (``memory.profile.maxEntries``,
            default 500); must be a positive int, else ``ValueError``.

    Every method validates its input (``ValidationError``); every write is atomic and
    usable inside a caller's transaction.
    """

    def __init__(self, conn: Connection, *, max_unpinned: int = DEFAULT_MAX_UNPINNED,
                 pinned_budget_chars: int = DEFAULT_PINNED_BUDGET_CHARS):
        if not isinstance(max_unpinned, int) or isinstance(max_unpinned, bool) or max_unpinned < 1:
            raise ValueError("max_unpinned must be a positive integer")
        if not isinstance(pinned_budget_chars, int) or pinned_budget_chars < 1:
            raise ValueError("pinned_budget_chars must be a positive integer")
        self.conn = conn
        self.max_unpinned = max_unpinned
        self.pinned_budget_chars = pinned_budget_chars

    def _fetch_one(self, sql: str, args: tuple[str | int, ...]) -> ProfileFact | None:
        rows = self.conn.execute(sql, args).fetchall()
        return _row(rows[0]) if rows else None

    def set(
        self,
        key: str,
        value: str,
        *,
        pinned: bool | None = None,
        keywords: list[str] | None = None,
        now_ms: int | None = None,
        source: str | None = None,
        session_id: str | None = None,
        turn_id: str | None = None,
        by: str | None = None,
    ) -> ProfileFact:
        """Write ``key = value`` as the key's new active version; return the active fact.

        Args:
            key: see :func:`validate_key` (stored lower-cased).
            value: see :func:`validate_value` (stored verbatim).
            pinned: ``True``/``False`` sets it; ``None`` keeps the current fact's
                setting, or pins a new key (default: pinned).
            keywords: gate keywords, kept only when the fact ends up unpinned
                (validated then, see :func:`validate_keywords`); ``None`` keeps the
                current unpinned fact's keywords (omitted options are kept).
            now_ms: write time, Unix ms (default: now).
            source / session_id / turn_id: provenance of the new version
                (:class:`ProfileFact`).
            by: who writes, as the activity log names them (``agent for chat``,
                ``dashboard``): recorded as the replaced version's ``removed_by``, with
                ``turn_id`` as its ``removed_turn_id``.

        Writing exactly the active value with the same options is a no-op that returns
        the active fact (no second row). Otherwise, in one transaction: the
        previous active row is superseded by the new one (``supersedes`` /
        ``superseded_by`` link both ways), then the unpinned cap is enforced.

        Raises:
            ValidationError: fields ``key``, ``value``, ``keywords``, ``pinned``,
                ``nowMs``.
        """
        key = validate_key(key)
        value = validate_value(value)
        if pinned is not None and not isinstance(pinned, bool):
            raise ValidationError("pinned", "must be a boolean")
        now = _now(now_ms)
        conn = self.conn
        with write_txn(conn):
            prev = self._fetch_one(_SQL_ACTIVE, (key,))
            eff_pinned = pinned if pinned is not None else (prev.pinned if prev else True)
            warning = None
            if eff_pinned and self._over_pin_budget(key, value):
                eff_pinned = False
                keywords = keywords or _keywords_from_key(key)
                warning = (f"pinned facts would exceed memory.profile.pinnedBudgetChars="
                           f"{self.pinned_budget_chars}; {key!r} was stored unpinned with "
                           f"keywords {keywords}")
            if eff_pinned:
                eff_keywords: list[str] = []
            elif keywords is not None:
                eff_keywords = validate_keywords(keywords)
            else:
                eff_keywords = list(prev.keywords) if prev and not prev.pinned else []
            if (
                prev is not None
                and prev.value == value
                and prev.pinned == eff_pinned
                and prev.keywords == eff_keywords
            ):
                return prev
            if prev is not None:
                # Leave the active set first: the partial unique index is immediate.
                conn.execute(
                    "UPDATE profile_facts SET superseded_by = id WHERE id = ?", (prev.id,)
                )
            conn.execute(
                _SQL_INSERT,
                (
                    key,
                    value,
                    int(eff_pinned),
                    msgspec.json.encode(eff_keywords).decode(),
                    now,
                    prev.id if prev else None,
                    now,
                    now,
                    source,
                    session_id,
                    turn_id,
                ),
            )
            new_id = conn.last_insert_rowid()
            if prev is not None:
                conn.execute(
                    "UPDATE profile_facts SET superseded_by = ?, updated_at = ?, removed_by = ?,"
                    " removed_turn_id = ? WHERE id = ?",
                    (new_id, now, by or source, turn_id, prev.id),
                )
            self._evict(new_id, now)
            fact = self._fetch_one(_SQL_BY_ID, (new_id,))
        assert fact is not None
        if warning is None and key in TIMEZONE_KEYS and resolve_zone(value.strip())[0] is None:
            warning = (f"{value.strip()!r} is not a time zone this machine knows (an IANA name "
                       "such as Europe/Paris): dates are shown in the machine's zone")
        if warning is not None:
            fact.warning = warning
        return fact

    def _over_pin_budget(self, key: str, value: str) -> bool:
        """Would pinning ``key = value`` push the pinned lines over the budget?"""
        others = cast(int, self.conn.execute(
            "SELECT coalesce(sum(length(key) + length(value) + 4), 0) FROM profile_facts "
            "WHERE superseded_by IS NULL AND pinned = 1 AND key <> ?", (key,)).fetchall()[0][0])
        return others + len(key) + len(value) + 4 > self.pinned_budget_chars

    def _evict(self, keep_id: int, now: int) -> int:
        """Retire the oldest active unpinned facts above the cap, never ``keep_id``."""
        count = cast(int, self.conn.execute(
            "SELECT count(*) FROM profile_facts WHERE superseded_by IS NULL AND pinned = 0"
        ).fetchall()[0][0])
        excess = count - self.max_unpinned
        if excess <= 0:
            return 0
        self.conn.execute(_SQL_EVICT, (now, keep_id, excess))
        return self.conn.changes()

    def remove(self, key: str, *, now_ms: int | None = None, by: str | None = None,
               turn_id: str | None = None) -> bool:
        """Retire the active fact of ``key``; history stays readable.

        ``by`` / ``turn_id``: who removes it and in which turn (the activity log's name
        for the writer: ``agent for chat``, ``dashboard``, ``tui``), kept on the retired
        version as ``removed_by`` / ``removed_turn_id``.

        Returns True when an active fact existed, False otherwise.

        Raises:
            ValidationError: field ``key``.
        """
        key = validate_key(key)
        now = _now(now_ms)
        with write_txn(self.conn):
            self.conn.execute(_SQL_RETIRE, (now, by, turn_id, key))
            return self.conn.changes() > 0

    def purge(self, key: str) -> int:
        """Delete every version of ``key``, the history included (a person's "forget it
        for good"); returns how many rows went.

        Raises:
            ValidationError: field ``key``.
        """
        key = validate_key(key)
        with write_txn(self.conn):
            self.conn.execute("DELETE FROM profile_facts WHERE key = ?", (key,))
            return self.conn.changes()

    def get(self, key: str) -> ProfileFact | None:
        """Return the active fact of ``key`` or None.

        Raises:
            ValidationError: field ``key``.
        """
        return self._fetch_one(_SQL_ACTIVE, (validate_key(key),))

    def get_by_id(self, fact_id: int) -> ProfileFact | None:
        """Return any row (active or historical) by id, or None."""
        return self._fetch_one(_SQL_BY_ID, (require_positive_id(fact_id),))

    def list(self) -> list[ProfileFact]:
        """Return every active fact, ``key`` ascending."""
        sql = _SQL_LIST.format(key=bytewise(self.conn, "key"))
        return [_row(r) for r in self.conn.execute(sql)]

    def history(self, key: str) -> builtins.list[ProfileFact]:
        """Return every version of ``key``, oldest first (``valid_from, id``).

        The active version, if any, is last. Empty list for an unknown key.

        Raises:
            ValidationError: field ``key``.
        """
        return [_row(r) for r in self.conn.execute(_SQL_HISTORY, (validate_key(key),))]

    def predecessors(self, facts: Iterable[ProfileFact], *,
                     max_hops: int = 8) -> dict[int, ProfileFact]:
        """``{fact id: the version it replaced}`` for the given active ``facts`` that
        replaced an earlier value of their key (``supersedes``, with the old row
        superseded by the new one: a removed fact written again has no predecessor,
        forgetting stays forgetting). Versions that only re-wrote the same value (a pin
        or keyword change) are walked past, at most ``max_hops`` steps; facts without a
        different earlier value are left out. Used by ``### profile`` to answer "before"
        questions."""
        out: dict[int, ProfileFact] = {}
        # Every fact's walk goes one step per statement, all walks at once: one round
        # trip on the usual profile (no fact re-wrote its own value), whatever its size.
        frontier = {fact.id: fact for fact in facts}  # the node reached: by its id
        walker = {fact.id: fact for fact in facts}  # whose walk reached that node
        sql = (f"SELECT n.id, {_O_COLS} FROM profile_facts n JOIN profile_facts o"
               f" ON o.id = n.supersedes AND o.superseded_by = n.id"
               f" WHERE {in_ids(self.conn, 'n.id')}")
        for _ in range(max_hops):
            if not frontier:
                break
            rows = self.conn.execute(sql, (ids_binding(self.conn, frontier),)).fetchall()
            step: dict[int, ProfileFact] = {}
            for row in rows:
                fact, node = walker.pop(int(row[0])), _row(row[1:])
                if node.value != fact.value:
                    out[fact.id] = node
                else:
                    step[node.id], walker[node.id] = node, fact
            frontier = step
            walker = {i: walker[i] for i in step}
        return out

    def session_facts(self, session: str, limit: int = 8) -> builtins.list[ProfileFact]:
        """The active facts last written in ``session`` (provenance ``session_id``), the
        ``limit`` most recent, oldest first: the session's known facts
        (the last 8). Empty for an empty ``session`` or ``limit <= 0``."""
        if not session or limit <= 0:
            return []
        rows = self.conn.execute(
            f"SELECT {_COLS} FROM profile_facts WHERE superseded_by IS NULL AND session_id = ?"
            " ORDER BY id DESC LIMIT ?", (session, limit)).fetchall()
        return [_row(r) for r in reversed(rows)]

    def count_unpinned(self) -> int:
        """Return the number of active unpinned facts (the quantity the cap bounds)."""
        return cast(int, self.conn.execute(
            "SELECT count(*) FROM profile_facts WHERE superseded_by IS NULL AND pinned = 0"
        ).fetchall()[0][0])
