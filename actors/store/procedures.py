"""ProcedureStore: advisory how-to templates with keyword recall.

A procedure is an *activation* (when it applies) plus 2–8 *steps*, each a description
with an optional tool hint. Procedures are advice for the model only: the runtime never
executes them. The consolidator creates them (in the same call as a lesson);
``source='manual'`` marks operator-made ones.

* Table ``procedures`` and FTS5 ``procedures_fts`` (``activation``, ``steps``, ``tags``)
  exist since schema v3; triggers index ``aa_index_text`` of each column.
* ``steps`` is stored as a JSON array of arrays, ``[["description"], ["description",
  "toolHint"]]``: the FTS trigger indexes the column text verbatim, so object keys
  (``"description"``, ``"toolHint"``) or ``null`` would become searchable words that
  match every row. The wire / Struct shape is ``{description, toolHint}``; a stored
  array of such objects is read as well.
* Recall, deprecation, listing and counters are :class:`~.distilled.DistilledStore`'s
  (exact-token BM25, active only by default, deprecated rows readable by id). Index
  order is ``updated_at DESC, id DESC``.

Times are Unix milliseconds; every write goes through ``schema.write_txn``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, cast

import msgspec
import structlog

from .columns import decode_json_list, encode_json
from .distilled import (
    INT_LIST,
    MAX_TAGS,
    STR_LIST,
    DistilledStore,
    clean_tags,
    validate_activation,
    validate_id_list,
)
from .errors import ValidationError, optional_text, require_positive_id
from .errors import now_ms as _now
from .records import STEP_MAX_CHARS, TOOL_HINT_MAX_CHARS, Procedure, ProcedurePointer, ProcedureStep
from .schema import write_txn

__all__ = [
    "Procedure",
    "ProcedurePointer",
    "ProcedureStep",
    "ProcedureStore",
    "STEP_MAX_CHARS",
    "TOOL_HINT_MAX_CHARS",
    "MIN_STEPS",
    "MAX_STEPS",
    "PROCEDURE_TAG_MAX_CHARS",
    "SOURCES",
    "validate_steps",
    "format_steps",
]

log = structlog.get_logger("actors.store.procedures")

MIN_STEPS, MAX_STEPS = 2, 8
PROCEDURE_TAG_MAX_CHARS = 64
SOURCES = ("consolidator", "manual")

_TOOL_HINT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-./]*")
_TAG_RE = re.compile(r"[a-z0-9][a-z0-9_\-./]*")
_ANY_LIST = msgspec.json.Decoder(list[Any])


def _step(item: object, n: int) -> ProcedureStep:
    field = f"steps[{n}]"
    desc: object
    if isinstance(item, ProcedureStep):
        desc, hint = item.description, item.tool_hint
    elif isinstance(item, str):
        desc, hint = item, None
    elif isinstance(item, dict):
        unknown = set(item) - {"description", "toolHint", "tool_hint"}
        if unknown:
            raise ValidationError(field, f"unknown key {sorted(unknown)[0]!r}")
        desc = item.get("description")
        hint = item.get("toolHint", item.get("tool_hint"))
    else:
        raise ValidationError(field, "must be a string or {description, toolHint?}")
    if not isinstance(desc, str):
        raise ValidationError(f"{field}.description", "must be a string")
    desc = desc.strip()
    if not desc:
        raise ValidationError(f"{field}.description", "must not be empty")
    if len(desc) > STEP_MAX_CHARS:
        raise ValidationError(f"{field}.description",
                              f"must be at most {STEP_MAX_CHARS} chars (got {len(desc)})")
    if hint is not None:
        if not isinstance(hint, str):
            raise ValidationError(f"{field}.toolHint", "must be a string or null")
        hint = hint.strip() or None
    if hint is not None:
        if len(hint) > TOOL_HINT_MAX_CHARS:
            raise ValidationError(f"{field}.toolHint",
                                  f"must be at most {TOOL_HINT_MAX_CHARS} chars")
        if _TOOL_HINT_RE.fullmatch(hint) is None:
            raise ValidationError(f"{field}.toolHint",
                                  "must start alphanumeric and contain only [A-Za-z0-9_-./]")
    return ProcedureStep(desc, hint)


def validate_steps(steps: object) -> list[ProcedureStep]:
    """Validate 2..8 steps and return them as :class:`ProcedureStep`.

    Each entry is a ProcedureStep, a ``{"description", "toolHint"?}`` dict or a plain
    description string; descriptions are trimmed, 1..240 chars; a blank tool hint
    becomes None, otherwise it must be at most 64 chars matching
    ``[A-Za-z0-9][A-Za-z0-9_\\-./]*``.

    Raises:
        ValidationError: field ``steps`` (count, type) or ``steps[i].description`` /
            ``steps[i].toolHint``.
    """
    if not isinstance(steps, (list, tuple)):
        raise ValidationError("steps", "must be a list of steps")
    if not MIN_STEPS <= len(steps) <= MAX_STEPS:
        raise ValidationError("steps", f"must have {MIN_STEPS}..{MAX_STEPS} steps "
                                       f"(got {len(steps)})")
    return [_step(item, i) for i, item in enumerate(steps)]


def format_steps(steps: Sequence[ProcedureStep]) -> str:
    """Render steps as text, one per line: ``1. <description> [@toolhint]``."""
    return "\n".join(
        f"{i}. {s.description}" + (f" [@{s.tool_hint}]" if s.tool_hint else "")
        for i, s in enumerate(steps, 1)
    )


def _encode_steps(steps: Sequence[ProcedureStep]) -> str:
    return encode_json([[s.description] if s.tool_hint is None else [s.description, s.tool_hint]
                        for s in steps])


def _decode_steps(raw: str | None) -> list[ProcedureStep]:
    out: list[ProcedureStep] = []
    for item in decode_json_list(raw, _ANY_LIST):
        if isinstance(item, list) and item and isinstance(item[0], str):
            hint = item[1] if len(item) > 1 and isinstance(item[1], str) else None
            out.append(ProcedureStep(item[0], hint))
        elif isinstance(item, dict) and isinstance(item.get("description"), str):
            hint = item.get("toolHint")
            out.append(ProcedureStep(item["description"], hint if isinstance(hint, str) else None))
    return out


_SQL_INSERT = (
    "INSERT INTO procedures (activation, steps, tags, parent_lesson_ids, parent_memory_ids,"
    " source, working_dir, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SQL_BY_PARENT = (
    "SELECT id, parent_lesson_ids FROM procedures WHERE status = 'active'"
    " AND parent_lesson_ids LIKE ? ORDER BY id"
)


class ProcedureStore(DistilledStore[Procedure]):
    """The ``procedures`` table: create, read, deprecate (also by parent lesson) and
    :meth:`bump_use` here; recall (``k`` default 2, ``memory.procedures.recallK``), the
    index, the other counters and counts from :class:`DistilledStore`.

    ``ProcedureStore(conn)`` takes a connection from ``schema.open_database`` (migrated
    to >= v3). Methods raise :class:`ValidationError` for bad input; query text never
    raises.
    """

    TABLE = "procedures"
    COLS = (
        "t.id, t.activation, t.steps, t.tags, t.status, t.success_count, t.failure_count,"
        " t.use_count, t.parent_lesson_ids, t.parent_memory_ids, t.source, t.working_dir,"
        " t.created_at, t.updated_at, t.deprecated_at"
    )
    COUNTERS = ("success", "failure", "use")
    DEPRECATED_EVENT = "memory.procedure_deprecated"
    LOG = log

    @staticmethod
    def _row(row: Sequence[Any], score: float | None = None) -> Procedure:
        return Procedure(
            row[0], row[1], _decode_steps(row[2]), decode_json_list(row[3], STR_LIST),
            row[4], row[5], row[6], row[7], decode_json_list(row[8], INT_LIST),
            decode_json_list(row[9], INT_LIST), row[10], row[11], row[12], row[13], row[14],
            score,
        )

    def create(
        self,
        activation: str,
        steps: Sequence[ProcedureStep | dict[str, object] | str],
        *,
        tags: Sequence[str] | None = None,
        parent_lesson_ids: Sequence[int] | None = None,
        parent_memory_ids: Sequence[int] | None = None,
        source: str = "consolidator",
        working_dir: str | None = None,
        now_ms: int | None = None,
    ) -> Procedure:
        """Insert an active procedure with zero counters and return it.

        Validation: activation 1..240 chars after trimming; steps per
        :func:`validate_steps`; tags lower-cased, ``[a-z0-9][a-z0-9_\\-./]*``, at most
        64 chars, invalid or beyond 12 dropped silently; parent id lists of positive
        ints (may be empty, de-duplicated); source ``consolidator|manual``.

        Raises:
            ValidationError: fields ``activation``, ``steps...``, ``tags``,
                ``parentLessonIds``, ``parentMemoryIds``, ``source``, ``workingDir``,
                ``nowMs``.
        """
        activation = validate_activation(activation)
        step_list = validate_steps(steps)
        tag_list = clean_tags(tags, pattern=_TAG_RE, max_chars=PROCEDURE_TAG_MAX_CHARS,
                              max_items=MAX_TAGS)
        lessons = validate_id_list(parent_lesson_ids, "parentLessonIds", required=False)
        memories = validate_id_list(parent_memory_ids, "parentMemoryIds", required=False)
        if source not in SOURCES:
            raise ValidationError("source", "must be 'consolidator' or 'manual'")
        working_dir = optional_text(working_dir, "workingDir")
        now = _now(now_ms)
        return self._insert(_SQL_INSERT, (
            activation, _encode_steps(step_list), encode_json(tag_list),
            encode_json(lessons), encode_json(memories), source, working_dir, now, now))

    def get(self, procedure_id: int) -> Procedure | None:
        """Return the procedure with this id, any status, or None.

        Raises:
            ValidationError: field ``id``.
        """
        return self._get(procedure_id)

    def mark_deprecated(self, procedure_id: int, reason: str = "manual", *,
                        now_ms: int | None = None) -> bool:
        """Deprecate an active procedure; True only when an active row was flipped
        (idempotent). ``reason`` is logged, not stored.

        Raises:
            ValidationError: fields ``id``, ``nowMs``.
        """
        return self._deprecate(procedure_id, reason, now_ms)

    def deprecate_by_parent_lesson(self, lesson_id: int, reason: str = "parent_deprecated",
                                   *, now_ms: int | None = None) -> list[int]:
        """Deprecate every active procedure that lists ``lesson_id`` as a parent.

        SQL ``LIKE`` pre-filter on the JSON text, then an exact membership check, in one
        transaction; ``reason`` is logged, not stored. Returns the ids flipped,
        ascending.

        Raises:
            ValidationError: fields ``id``, ``nowMs``.
        """
        lesson_id = require_positive_id(lesson_id)
        now = _now(now_ms)
        flipped: list[int] = []
        with write_txn(self.conn):
            rows = cast(list[tuple[int, str | None]],
                        self.conn.execute(_SQL_BY_PARENT, (f"%{lesson_id}%",)).fetchall())
            for proc_id, raw in rows:
                if lesson_id in decode_json_list(raw, INT_LIST):
                    self.conn.execute(self._sql_deprecate, (now, now, proc_id))
                    if self.conn.changes() > 0:
                        flipped.append(proc_id)
        for proc_id in flipped:
            log.info(self.DEPRECATED_EVENT, id=proc_id, reason=str(reason))
        return flipped

    def bump_use(self, procedure_id: int, *, now_ms: int | None = None) -> bool:
        """Add 1 to ``use_count`` (and refresh ``updated_at``); True if the procedure
        exists.

        Raises:
            ValidationError: fields ``id``, ``nowMs``.
        """
        return self._bump("use", procedure_id, now_ms)
