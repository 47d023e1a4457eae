"""LessonStore: distilled principles with keyword-only BM25 recall.

A lesson is an *activation* (one sentence: when it applies) plus a *principle* (1–3
sentences: what to do), tagged, with the ids of the notes it was distilled from. The
consolidator (the cold path) creates them; this module is the store it writes through
and the read path the per-turn context uses.

* Table ``lessons`` and FTS5 ``lessons_fts`` (``activation``, ``principle``, ``tags``,
  ``porter unicode61`` over ``aa_index_text``) exist since schema v3; triggers keep the
  index in sync.
* Recall, listing, counters and deprecation are :class:`~.distilled.DistilledStore`'s:
  exact-token BM25, active only by default, deprecated rows readable by id.

The limits and helpers shared with ``procedures.py`` live in :mod:`.distilled` and are
re-exported here (with ``vote_rerank`` and ``RERANK_POOL``). Times are Unix
milliseconds; every write goes through ``schema.write_txn``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import structlog

from .columns import decode_json_list, encode_json
from .distilled import (
    INDEX_LIMIT_DEFAULT,
    INDEX_LIMIT_MAX,
    INT_LIST,
    MAX_QUERY_CHARS,
    MAX_TAGS,
    RECALL_K_DEFAULT,
    RECALL_K_MAX,
    STATUSES,
    STR_LIST,
    TAG_MAX_CHARS,
    DistilledStore,
    bounded_text,
    clean_tags,
    fts_recall_rows,
    validate_activation,
    validate_id_list,
    validate_query,
)
from .errors import now_ms as _now
from .errors import optional_text
from .records import ACTIVATION_MAX_CHARS, PRINCIPLE_MAX_CHARS, Lesson, LessonPointer

__all__ = [
    "Lesson",
    "LessonPointer",
    "LessonStore",
    "ACTIVATION_MAX_CHARS",
    "PRINCIPLE_MAX_CHARS",
    "MAX_TAGS",
    "TAG_MAX_CHARS",
    "MAX_QUERY_CHARS",
    "RECALL_K_DEFAULT",
    "RECALL_K_MAX",
    "INDEX_LIMIT_DEFAULT",
    "INDEX_LIMIT_MAX",
    "STATUSES",
    "validate_activation",
    "validate_principle",
    "validate_query",
    "clean_tags",
    "validate_id_list",
    "fts_recall_rows",
    "decode_json_list",
    "encode_json",
]

log = structlog.get_logger("actors.store.lessons")



def validate_principle(value: object) -> str:
    """Return the principle trimmed; 1..800 chars after trimming, never cut.

    Raises:
        ValidationError: field ``principle``.
    """
    return bounded_text(value, "principle", PRINCIPLE_MAX_CHARS)


_SQL_INSERT = (
    "INSERT INTO lessons (activation, principle, tags, parent_ids, working_dir,"
    " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
)


class LessonStore(DistilledStore[Lesson]):
    """The ``lessons`` table: create, read and deprecate here; recall (``k`` default 2,
    ``memory.lessons.recallK``), the index, counters and counts from
    :class:`DistilledStore`.

    ``LessonStore(conn)`` takes a connection from ``schema.open_database`` (migrated to
    >= v3). Every method raises :class:`ValidationError` for bad input; none raises for
    text content of a query.
    """

    TABLE = "lessons"
    COLS = (
        "t.id, t.activation, t.principle, t.tags, t.status, t.success_count,"
        " t.failure_count, t.parent_ids, t.working_dir, t.created_at, t.updated_at,"
        " t.deprecated_at"
    )
    COUNTERS = ("success", "failure")
    DEPRECATED_EVENT = "memory.lesson_deprecated"
    LOG = log

    @staticmethod
    def _row(row: Sequence[Any], score: float | None = None) -> Lesson:
        return Lesson(
            row[0], row[1], row[2], decode_json_list(row[3], STR_LIST), row[4], row[5],
            row[6], decode_json_list(row[7], INT_LIST), row[8], row[9], row[10], row[11],
            score,
        )

    def create(
        self,
        activation: str,
        principle: str,
        *,
        parent_ids: Sequence[int],
        tags: Sequence[str] | None = None,
        working_dir: str | None = None,
        now_ms: int | None = None,
    ) -> Lesson:
        """Insert an active lesson with zero counters and return it.

        Validation: activation 1..240 and principle 1..800 chars after
        trimming (too long is an error, never cut); tags per :func:`clean_tags`
        (invalid/excess dropped silently); ``parent_ids`` a non-empty list of positive
        ints (de-duplicated); ``working_dir`` trimmed, blank -> None.

        Raises:
            ValidationError: fields ``activation``, ``principle``, ``tags``,
                ``parentIds``, ``workingDir``, ``nowMs``.
        """
        activation = validate_activation(activation)
        principle = validate_principle(principle)
        tag_list = clean_tags(tags)
        parents = validate_id_list(parent_ids, "parentIds", required=True)
        working_dir = optional_text(working_dir, "workingDir")
        now = _now(now_ms)
        return self._insert(_SQL_INSERT, (activation, principle, encode_json(tag_list),
                                          encode_json(parents), working_dir, now, now))

    def get(self, lesson_id: int) -> Lesson | None:
        """Return the lesson with this id, any status, or None.

        Raises:
            ValidationError: field ``id`` (not a positive int).
        """
        return self._get(lesson_id)

    def mark_deprecated(self, lesson_id: int, reason: str = "manual", *,
                        now_ms: int | None = None) -> bool:
        """Deprecate an active lesson (``deprecated_at = updated_at = now``).

        Idempotent: returns True only when an active row was flipped; a deprecated or
        unknown id returns False and changes nothing. ``reason`` (``downvoted``,
        ``aged_out``, ``overflow``, ``manual`` ...) is logged, not stored.

        Raises:
            ValidationError: fields ``id``, ``nowMs``.
        """
        return self._deprecate(lesson_id, reason, now_ms)
