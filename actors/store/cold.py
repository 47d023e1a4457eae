"""The memory side of the cold path: what the link
generator, the vote runner and the consolidator write, each call one transaction.

The LLM calls themselves run in the reflection actor (its side-call slot, its
cancellation); this module only reads and writes ``memory.sqlite`` for them:

* :func:`apply_links` -- upsert generated links (weight 1.0; both notes must exist).
* :func:`similarity_links` -- link a newly embedded note to its nearest notes (cosine at
  or above a floor): links no model is needed for.
* :func:`apply_votes` -- move ``vote_score`` by ±1 per vote, clamped to ±``cap``; an
  audit row per applied vote (``votes``), none for a vote that hit the clamp.
* :func:`bump_outcomes` -- a turn's end: success or failure of the lessons and
  procedures it surfaced, once per id.
* :func:`claim_clusters` -- the consolidator's candidates: connected components over
  links of live, unleased notes older than the cool-down; each member leased.
* :func:`persist_distilled` -- a lesson (and procedure) from one claimed cluster, its
  parents archived into it; refused (:class:`ClusterChanged`) when any member was
  forgotten, archived or re-leased since the claim, so a forgotten note is never
  resurrected into a lesson.
* :func:`release_leases` -- give back a cluster that was not persisted.
* :func:`sweep` -- per tick: vote decay, then the deprecation sweeps of lessons
  (vote → age → overflow, each cascading to procedures) and procedures.
* :func:`drop_derived` -- the forget path: lessons and procedures distilled from a
  forgotten note are deleted and their other parents restored.

Nothing here deletes an archived note; archiving sets ``archived = 1`` and
``consolidated_into`` (never cleared except by :func:`drop_derived`), and every row
stays readable by id. Times are Unix ms.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import cast

import msgspec
import numpy as np
import structlog

from .columns import encode_json
from .lessons import LessonStore
from .links import LinkStore
from .procedures import ProcedureStep, ProcedureStore
from .records import Cluster, LinkIn, SweepResult, VoteIn, VoteResult
from .schema import write_txn
from .vectors import VectorStore
from .votes import VOTE_KINDS, VoteStore
from .sql import Connection, dialect, ids_binding, in_ids

log = structlog.get_logger()

__all__ = [
    "Cluster", "ClusterChanged", "LinkIn", "SweepResult", "VoteIn", "VoteResult",
    "apply_links", "apply_votes", "similarity_links", "bump_outcomes", "claim_clusters", "drop_derived",
    "persist_distilled", "release_leases", "sweep", "MAX_CLUSTER_NOTES",
    "DEPRECATIONS_PER_TICK",
]

#: Members of one cluster shown to the distill call at most (the most recalled first):
#: twelve notes of ≤ 4000 chars would not fit a 4k context, twelve reflection notes do.
MAX_CLUSTER_NOTES = 12
#: Notes a cluster preview carries per member (chars) in the distill prompt.
PREVIEW_CHARS = 300
#: Deprecations of one tick, all sweeps together (the sweep step of a tick).
DEPRECATIONS_PER_TICK = 100

_TABLE = {"memory": "memories", "lesson": "lessons", "profile": "profile_facts",
          "procedure": "procedures"}


class ClusterChanged(Exception):
    """A claimed cluster changed before it was persisted (a member forgotten, archived
    or leased by someone else); nothing was written."""


# -- links and votes -----------------------------------------------------------------


def apply_links(conn: Connection, links: LinkStore, items: Sequence[LinkIn]) -> int:
    """Upsert ``items`` (weight 1.0) in one transaction; a link to a note that no
    longer exists is skipped. Returns the number written."""
    written = 0
    with write_txn(conn):
        for item in items:
            try:
                links.add(item.from_id, item.to_id, item.kind, origin="model")
            except Exception as exc:  # noqa: BLE001 - skip one bad link, keep the rest
                log.debug("memory.link_skipped", error=str(exc)[:200])
                continue
            written += 1
    return written


def apply_votes(conn: Connection, votes: VoteStore, items: Sequence[VoteIn], *,
                cap: int, session: str | None = None, turn_index: int | None = None,
                now_ms: int | None = None) -> VoteResult:
    """Apply each vote: ``vote_score`` moves by ``direction`` and is clamped to
    ``[-cap, cap]`` (one unit per vote). A vote on a score already at the
    clamp in its direction changes nothing and counts as a clamp hit (no audit row);
    a vote on a missing target counts as missing. Unknown kinds raise ValueError."""
    result = VoteResult()
    with write_txn(conn):
        for vote in items:
            if vote.kind not in VOTE_KINDS or vote.direction not in (1, -1):
                raise ValueError(f"bad vote {vote!r}")
            table = _TABLE[vote.kind]
            rows = cast(list[tuple[float]], conn.execute(
                f"SELECT vote_score FROM {table} WHERE id = ?", (vote.target_id,)).fetchall())
            if not rows:
                result.missing += 1
                continue
            score = float(rows[0][0])
            new = max(-cap, min(cap, score + vote.direction))
            if new == score:
                result.clamp_hits += 1
                continue
            conn.execute(f"UPDATE {table} SET vote_score = ? WHERE id = ?",
                         (new, vote.target_id))
            votes.record(vote.kind, vote.target_id, vote.direction, session,
                         turn_index=turn_index, now_ms=now_ms)
            result.applied += 1
    return result


def bump_outcomes(conn: Connection, lessons: LessonStore, procedures: ProcedureStore,
                  lesson_ids: Iterable[int], procedure_ids: Iterable[int], *,
                  success: bool) -> int:
    """Bump success (or failure) of each surfaced lesson and procedure once;
    an id that no longer exists is skipped. Returns rows bumped."""
    bumped = 0
    with write_txn(conn):
        for store, ids in ((lessons, lesson_ids), (procedures, procedure_ids)):
            for row_id in dict.fromkeys(ids):
                bump = store.bump_success if success else store.bump_failure
                bumped += bool(bump(row_id))
    return bumped


def similarity_links(conn: Connection, links: LinkStore, vectors: VectorStore, *, model: str,
                     dim: int, new_ids: Sequence[int], floor: float, per_note: int,
                     ceiling: int) -> int:
    """Link each of ``new_ids`` to its ``per_note`` nearest other notes whose cosine is
    at least ``floor`` (``RELATES_TO``, weight = cosine), in one transaction: the links
    a model is not needed for. Scans the newest ``ceiling`` vectors of
    ``model`` (``VectorStore.load``); a note without a vector is skipped. Returns the
    links written. ``floor`` 0.45 is measured for MiniLM on related / unrelated
    personal notes (docs/architecture.md, bench/RESULTS.md "Cold path")."""
    if floor <= 0 or not new_ids:
        return 0
    loaded = vectors.load(model, dim, ceiling, also=new_ids)
    if len(loaded.ids) < 2:
        return 0
    rows = loaded.rows / np.maximum(np.linalg.norm(loaded.rows, axis=1, keepdims=True), 1e-12)
    ids = np.asarray(loaded.ids)
    written = 0
    with write_txn(conn):
        for note_id in dict.fromkeys(new_ids):
            j = loaded.index.get(note_id)
            if j is None:
                continue
            scores = rows @ rows[j]
            scores[j] = -1.0
            for k in np.argsort(-scores)[:per_note]:
                if scores[k] < floor:
                    break
                try:
                    links.add(note_id, int(ids[k]), "RELATES_TO", round(float(scores[k]), 4),
                              origin="similarity")
                except Exception as exc:  # noqa: BLE001 - a note deleted meanwhile
                    log.debug("memory.similarity_link_skipped", error=str(exc)[:200])
                    continue
                written += 1
    return written


# -- the consolidator ----------------------------------------------------------------


def _components(nodes: set[int], edges: Iterable[tuple[int, int]]) -> list[list[int]]:
    """Connected components (union-find) of ``nodes`` over undirected ``edges``."""
    parent = {n: n for n in nodes}

    def find(n: int) -> int:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for a, b in edges:
        if a in parent and b in parent:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    groups: dict[int, list[int]] = {}
    for n in sorted(nodes):
        groups.setdefault(find(n), []).append(n)
    return list(groups.values())


def claim_clusters(conn: Connection, *, now_ms: int, cooldown_ms: int, min_size: int,
                   max_clusters: int, require_shared_tag: bool, lease_ms: int) -> list[Cluster]:
    """Find and lease up to ``max_clusters`` clusters (step 1 of a consolidator tick,
    docs/architecture.md §4).

    Candidates: notes not archived, not consolidated, created at or before
    ``now_ms - cooldown_ms``, and not leased (no lease, or one older than ``lease_ms``;
    a lease from the future, written before the clock stepped back, is held: another
    tick never takes a cluster a running one holds, even after a clock step).
    Clusters: connected components over links (both directions) among candidates, of
    at least ``min_size``; with ``require_shared_tag`` trimmed to the members sharing
    the component's most common tag (dropped when that leaves fewer than
    ``min_size``). No pairwise similarity scan. Largest first; each keeps its
    :data:`MAX_CLUSTER_NOTES` most recalled members. Every member of a returned
    cluster is leased (``consolidating_at = now_ms``) in the same transaction.
    """
    with write_txn(conn):
        rows = cast(list[tuple[int, str, str | None, str | None, int]], conn.execute(
            "SELECT id, content, tags, working_dir, recall_count FROM memories"
            " WHERE archived = 0 AND consolidated_into IS NULL AND created_at <= ?"
            " AND (consolidating_at IS NULL OR consolidating_at < ?)",
            (now_ms - cooldown_ms, now_ms - lease_ms)).fetchall())
        notes = {r[0]: r for r in rows}
        if len(notes) < min_size:
            return []
        edges = cast(list[tuple[int, int]], conn.execute(
            "SELECT from_id, to_id FROM memory_links WHERE from_id <> to_id").fetchall())
        clusters: list[Cluster] = []
        comps = [c for c in _components(set(notes), edges) if len(c) >= min_size]
        comps.sort(key=lambda c: (-len(c), c[0]))
        for comp in comps:
            tag_sets = {i: set(msgspec.json.decode(notes[i][2] or "[]")) for i in comp}
            shared: list[str] = []
            if require_shared_tag:
                counts = Counter(t for tags in tag_sets.values() for t in tags)
                if not counts:
                    continue
                top = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]
                comp = [i for i in comp if top in tag_sets[i]]
                if len(comp) < min_size:
                    continue
                shared = [top]
            comp = sorted(comp, key=lambda i: (-notes[i][4], -i))[:MAX_CLUSTER_NOTES]
            comp.sort()
            if not shared:
                common = set.intersection(*(tag_sets[i] for i in comp))
                shared = sorted(common)
            dirs = {notes[i][3] for i in comp}
            conn.execute(
                f"UPDATE memories SET consolidating_at = ? WHERE {in_ids(conn, 'id')}",
                (now_ms, ids_binding(conn, comp)))
            clusters.append(Cluster(
                ids=comp, previews=[notes[i][1][:PREVIEW_CHARS] for i in comp],
                claimed_at=now_ms, tags=shared,
                working_dir=dirs.pop() if len(dirs) == 1 else None))
            if len(clusters) >= max_clusters:
                break
        return clusters


def release_leases(conn: Connection, ids: Sequence[int], claimed_at: int) -> int:
    """Clear the lease of ``ids`` where it is still ``claimed_at``; returns rows."""
    with write_txn(conn):
        conn.execute(
            "UPDATE memories SET consolidating_at = NULL WHERE consolidating_at = ?"
            f" AND {in_ids(conn, 'id')}", (claimed_at, ids_binding(conn, ids)))
        return conn.changes()


def persist_distilled(conn: Connection, lessons: LessonStore, procedures: ProcedureStore,
                      cluster: Cluster, *, activation: str, principle: str,
                      tags: Sequence[str], steps: Sequence[ProcedureStep] | None,
                      procedure_activation: str | None = None,
                      now_ms: int | None = None) -> tuple[int, int | None]:
    """Create the lesson (and procedure) of one claimed cluster and archive its
    parents into the lesson, all in ONE transaction.

    Returns ``(lesson_id, procedure_id or None)``. A procedure that fails validation
    is dropped (logged) and the lesson kept.

    Raises:
        ClusterChanged: a member no longer exists, is archived or consolidated, or
            holds another lease than ``cluster.claimed_at`` (nothing written).
        ValidationError: the lesson's fields (nothing written).
    """
    ids = list(cluster.ids)
    with write_txn(conn):
        live = cast(int, conn.execute(
            f"SELECT count(*) FROM memories WHERE {in_ids(conn, 'id')}"
            " AND archived = 0 AND consolidated_into IS NULL AND consolidating_at = ?",
            (ids_binding(conn, ids), cluster.claimed_at)).fetchall()[0][0])
        if live != len(ids):
            raise ClusterChanged(f"{len(ids) - live} of {len(ids)} notes changed since the claim")
        lesson = lessons.create(activation, principle, parent_ids=ids, tags=tags,
                                working_dir=cluster.working_dir, now_ms=now_ms)
        conn.execute(
            "UPDATE memories SET archived = 1, consolidated_into = ?, consolidating_at = NULL"
            f" WHERE {in_ids(conn, 'id')}", (lesson.id, ids_binding(conn, ids)))
        procedure_id = None
        if steps:
            try:
                with write_txn(conn):  # a savepoint: a bad procedure drops only itself
                    proc = procedures.create(
                        procedure_activation or activation, list(steps), tags=tags,
                        parent_lesson_ids=[lesson.id], parent_memory_ids=ids,
                        working_dir=cluster.working_dir, now_ms=now_ms)
                    procedure_id = proc.id
            except Exception as exc:  # noqa: BLE001 - procedure errors keep the lesson
                log.info("memory.procedure_dropped", lesson=lesson.id, error=str(exc)[:200])
        return lesson.id, procedure_id


# -- sweeps --------------------------------------------------------------------------


def sweep(conn: Connection, lessons: LessonStore, procedures: ProcedureStore, *,
          now_ms: int, decay: float | None, lesson_max: int, lesson_age_ms: int,
          procedure_max: int, procedure_age_ms: int,
          cap: int = DEPRECATIONS_PER_TICK) -> SweepResult:
    """One tick's decay and deprecation sweeps, in one transaction.

    ``decay`` (in (0, 1], None = voting off) multiplies every non-zero ``vote_score``
    (notes, lessons, procedures, profile facts), one statement per table. Lessons:
    downvoted with no success (most negative first) → older than ``lesson_age_ms``
    with no success (oldest first) → beyond ``lesson_max`` active (oldest
    ``updated_at`` first); each deprecation cascades to the procedures listing the
    lesson (``parent_deprecated``). Procedures: downvoted → aged (no success, no use) →
    overflow (lowest vote, then oldest). At most ``cap`` deprecations in all.
    """
    result = SweepResult()
    left = cap

    def count(key: str, n: int) -> None:
        if n:
            result.deprecated[key] = result.deprecated.get(key, 0) + n

    def demote(kind: str, reason: str, sql: str, args: tuple[int, ...]) -> None:
        """Deprecate the rows ``sql`` picks (at most ``left``); a lesson cascades."""
        nonlocal left
        if left <= 0:
            return
        store = lessons if kind == "lesson" else procedures
        for (row_id,) in cast(list[tuple[int]], conn.execute(sql, (*args, left)).fetchall()):
            if left > 0 and store.mark_deprecated(row_id, reason, now_ms=now_ms):
                left -= 1
                count(f"{kind}:{reason}", 1)
                if kind == "lesson":
                    count("procedure:parent_deprecated", len(
                        procedures.deprecate_by_parent_lesson(row_id, now_ms=now_ms)))

    active = "SELECT id FROM {t} WHERE status = 'active' AND success_count = 0"
    with write_txn(conn):
        if decay is not None and decay < 1.0:
            for table in _TABLE.values():
                conn.execute(f"UPDATE {table} SET vote_score = vote_score * ?"
                             " WHERE vote_score <> 0", (decay,))
            result.decayed = True
        for kind, table, max_rows, age_ms, unused, overflow_order in (
                ("lesson", "lessons", lesson_max, lesson_age_ms, "", "updated_at, id"),
                ("procedure", "procedures", procedure_max, procedure_age_ms,
                 " AND use_count = 0", "vote_score, updated_at, id")):
            pick = active.format(t=table)
            demote(kind, "downvoted", pick + " AND vote_score < 0 ORDER BY vote_score, id"
                   " LIMIT ?", ())
            demote(kind, "aged_out", pick + unused + " AND created_at <= ?"
                   " ORDER BY created_at, id LIMIT ?", (now_ms - age_ms,))
            over = (lessons if kind == "lesson" else procedures).count_active() - max_rows
            if over > 0:
                demote(kind, "overflow", f"SELECT id FROM {table} WHERE status = 'active'"
                       f" ORDER BY {overflow_order} LIMIT min(?, ?)", (over,))
    return result


# -- forgetting ----------------------------------------------------------------------


_JSON_IDS = {
    "sqlite": "json_each({}) p",
    "postgres": "LATERAL (SELECT e::bigint AS value FROM jsonb_array_elements_text({}::jsonb) e) p",
}
"""The ids of a JSON array column as rows ``p(value)``."""


def drop_derived(conn: Connection, note_ids: Sequence[int]) -> tuple[int, int, int]:
    """Forget what was distilled from forgotten notes: every lesson and procedure that
    lists one of ``note_ids`` as a parent is deleted, the procedures of such lessons
    too, and the lessons' other parents are restored (``archived = 0``,
    ``consolidated_into = NULL``) so nothing else is lost. Call inside the forgetting
    transaction. Returns ``(lessons deleted, procedures deleted, notes restored)``."""
    if not note_ids:
        return 0, 0, 0
    ids = ids_binding(conn, sorted(set(note_ids)))
    each, has = _JSON_IDS[dialect(conn)], in_ids(conn, "p.value")
    lesson_ids = [r[0] for r in conn.execute(
        f"SELECT DISTINCT l.id FROM lessons l, {each.format('l.parent_ids')}"
        f" WHERE {has}", (ids,))]
    proc_ids = {r[0] for r in conn.execute(
        f"SELECT DISTINCT t.id FROM procedures t, {each.format('t.parent_memory_ids')}"
        f" WHERE {has}", (ids,))}
    restored = 0
    with write_txn(conn):
        for lesson_id in lesson_ids:
            proc_ids.update(r[0] for r in conn.execute(
                f"SELECT DISTINCT t.id FROM procedures t, {each.format('t.parent_lesson_ids')}"
                " WHERE p.value = ?", (lesson_id,)))
            conn.execute("UPDATE memories SET archived = 0, consolidated_into = NULL"
                         " WHERE consolidated_into = ?", (lesson_id,))
            restored += conn.changes()
            conn.execute("DELETE FROM lessons WHERE id = ?", (lesson_id,))
        for proc_id in proc_ids:
            conn.execute("DELETE FROM procedures WHERE id = ?", (proc_id,))
    if lesson_ids or proc_ids:
        log.info("memory.derived_forgotten", lessons=len(lesson_ids), procedures=len(proc_ids),
                 restored=restored)
    return len(lesson_ids), len(proc_ids), restored
