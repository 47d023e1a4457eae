"""Messages the memory actor understands, and the ones it sends.

Bodies are msgspec Structs tagged by ``kind``; other actors and the gateway import
these to talk to the memory actor. New fields always get defaults (msgspec schema
evolution), so an older peer keeps decoding newer messages.
"""

from __future__ import annotations

from typing import Any

import msgspec

from actors.memory.ops import MemoryRequest
from actors.store.records import (Cluster, Lesson, LessonPointer, Link, LinkIn, MemoryContext, Note,
                                  Procedure, ProcedurePointer, ProcedureStep, ProfileFact,
                                  SweepResult, Vote, VoteIn, VoteResult)


class _M(msgspec.Struct, tag_field="kind", tag=str.lower, kw_only=True):
    """Base of memory-actor messages."""


class BuildContext(_M):
    """Once per turn (docs/architecture.md §4, step 4) → :class:`MemoryContext`.
    ``recall_query``: the
    query rewriter's self-contained rewrite of ``user_message``, used for
    recall only; the profile gate reads ``user_message``."""

    session: str
    user_message: str
    working_dir: str | None = None
    recall_query: str | None = None
    recalled: list[int] | None = None  # these notes instead of recall's hits (None = recall)
    client: str | None = None  # the app the turn is for (the activity log)


class ToolOp(_M):
    """One memory op (:mod:`.ops`: a ``memory`` frame of docs/protocol.md, an agent's tool
    call, the dashboard's and the shell's requests) and who asks → the op's reply
    (``type(request).reply``). The actor named by the op's ``route`` answers it."""

    request: MemoryRequest
    session: str | None = None
    source: str = "agent"
    turn: str | None = None  # the agent's turn that made this tool call (provenance)
    batch: str | None = None  # the writer's batch: one client connection (recall's context)
    client: str | None = None  # who asked, for the activity log (None: the ``source``)


class FactIn(msgspec.Struct):
    """One reflection SET line, already parsed."""

    key: str
    value: str
    pinned: bool = True
    keywords: list[str] = msgspec.field(default_factory=list)


class NoteIn(msgspec.Struct):
    """One reflection NOTE line, already parsed."""

    body: str
    tags: list[str] = msgspec.field(default_factory=list)


class ForgetIn(msgspec.Struct):
    """What one reflection forgets (:mod:`actors.store.forgetting`):
    ``retire_keys`` (active fact retired, history kept), ``purge_keys`` (every version
    deleted) and ``targets`` (word lists: every fact and note holding all of a list's
    words is deleted)."""

    retire_keys: list[str] = msgspec.field(default_factory=list)
    purge_keys: list[str] = msgspec.field(default_factory=list)
    targets: list[list[str]] = msgspec.field(default_factory=list)


class ApplyReflection(_M):
    """The whole result of one reflection, written in ONE transaction
    (docs/architecture.md §4, step 12):
    the forgetting first, then the facts and notes."""

    session: str
    turn: str
    facts: list[FactIn] = msgspec.field(default_factory=list)
    notes: list[NoteIn] = msgspec.field(default_factory=list)
    forget: ForgetIn = msgspec.field(default_factory=ForgetIn)
    agent: bool = False
    """Sent by the agent, which carries out the user's forget request before its reply:
    what it forgets is reported again in the result of the same turn's reflection (the
    one a client's ``memory:`` line reads), and is never stored again by it."""
    client: str | None = None
    """The app whose turn caused it: the activity log records it as ``reflection for
    <app>`` (or ``agent for <app>``)."""


class ApplyResult(msgspec.Struct):
    """What ApplyReflection wrote: fact keys, note ids (merged ones included), skips;
    ``updated_keys``: the keys among ``fact_keys`` that replaced an active value;
    ``retired_keys`` / ``purged_keys`` / ``forgotten_note_ids``: what was forgotten;
    ``replaced_pinned``: the keys among ``updated_keys`` whose replaced value was pinned
    (the user should see that, and can undo it from the history);
    ``archived_note_ids``: notes archived because they stated a replaced value
    (:mod:`actors.store.staleness`); ``rewritten_note_ids``: notes that held what was
    forgotten beside other facts, rewritten without it (:mod:`actors.store.forgetting`)."""

    fact_keys: list[str]
    note_ids: list[int]
    skipped: int = 0
    updated_keys: list[str] = msgspec.field(default_factory=list)
    retired_keys: list[str] = msgspec.field(default_factory=list)
    purged_keys: list[str] = msgspec.field(default_factory=list)
    forgotten_note_ids: list[int] = msgspec.field(default_factory=list)
    replaced_pinned: list[str] = msgspec.field(default_factory=list)
    archived_note_ids: list[int] = msgspec.field(default_factory=list)
    rewritten_note_ids: list[int] = msgspec.field(default_factory=list)


class MissingVectors(_M):
    """Backfill: up to ``limit`` (id, content) of notes lacking a vector for ``model``,
    newest first; ``below``: only ids smaller than this (the pass's cursor)."""

    model: str
    limit: int = 32
    below: int | None = None


class VectorTodo(msgspec.Struct, array_like=True):
    """A note to embed: id and content."""

    id: int
    content: str


class PutVectors(_M):
    """Backfill/writer: store float32 vectors (``dim`` each) for ``model`` in one txn.
    ``link_new``: these are newly written notes: link each to its nearest neighbours
    (``memory.links.similarityFloor``, :func:`cold.similarity_links`)."""

    model: str
    dim: int
    ids: list[int]
    vectors: list[bytes]
    link_new: bool = False


class Refused(_M):
    """Cast to the memory actor when a listener refused a request before it reached
    memory (a client token lacking a scope, a paused client): recorded in the activity
    log under ``client`` with ``outcome`` (``forbidden``, ``paused``)."""

    client: str
    op: str
    outcome: str


class Audited(_M):
    """Cast to the memory actor for an action outside memory that the activity log must
    show as a change (a turn cancelled, a session deleted): recorded under ``client`` as
    ``op`` with ``ids`` and ``outcome``, shown by default like a write."""

    client: str
    op: str
    ids: list[str] = msgspec.field(default_factory=list)
    outcome: str = "ok"


class ApplyLinks(_M):
    """Link generator → memory: upsert these links (weight 1.0) in one
    transaction → the number written (int)."""

    session: str
    links: list[LinkIn]


class ApplyVotes(_M):
    """Vote runner → memory: apply these votes, clamped to ±``cap``, with
    an audit row each → :class:`cold.VoteResult`."""

    session: str
    votes: list[VoteIn]
    cap: int = 50
    turn_index: int | None = None


class BumpOutcomes(_M):
    """Agent → memory at a turn's end: success (reply/finish) or failure
    (error) of the lessons and procedures the turn surfaced → rows bumped (int)."""

    lesson_ids: list[int] = msgspec.field(default_factory=list)
    procedure_ids: list[int] = msgspec.field(default_factory=list)
    success: bool = True


class ClaimClusters(_M):
    """Consolidator → memory: find and lease clusters (:func:`cold.claim_clusters`)
    → ``list[Cluster]``."""

    now_ms: int
    cooldown_ms: int
    min_size: int
    max_clusters: int
    require_shared_tag: bool
    lease_ms: int


class DistilledIn(msgspec.Struct):
    """One parsed distill answer: the lesson, and optionally a procedure's steps
    (``[description, tool hint or ""]`` pairs)."""

    activation: str
    principle: str
    tags: list[str] = msgspec.field(default_factory=list)
    procedure_activation: str | None = None
    steps: list[tuple[str, str]] = msgspec.field(default_factory=list)


class PersistDistilled(_M):
    """Consolidator → memory: write a cluster's lesson (and procedure) and archive its
    parents, one transaction → :class:`Persisted`."""

    cluster: Cluster
    distilled: DistilledIn


class Persisted(msgspec.Struct):
    """Result of PersistDistilled: the new ids, or ``changed`` (the cluster changed
    since the claim: nothing written) / ``error`` (validation: nothing written)."""

    lesson_id: int | None = None
    procedure_id: int | None = None
    changed: str = ""
    error: str = ""


class ReleaseCluster(_M):
    """Consolidator → memory: give a cluster's leases back → rows released (int)."""

    ids: list[int]
    claimed_at: int


class SweepCold(_M):
    """Consolidator → memory, once per tick: vote decay and deprecation sweeps
    (:func:`cold.sweep`) → :class:`cold.SweepResult`."""

    now_ms: int
    decay: float | None = None


MemoryMsg = (BuildContext | ToolOp | ApplyReflection | MissingVectors | PutVectors
             | Refused | Audited | ApplyLinks | ApplyVotes | BumpOutcomes | ClaimClusters | PersistDistilled
             | ReleaseCluster | SweepCold)


class MemoryChanged(msgspec.Struct, tag="memory.changed", tag_field="kind"):
    """Cast to the root after every committed write; the gateway forwards it to
    clients subscribed to ``memory`` (keys and ids only, never values). ``replaced``:
    the keys among ``keys`` whose active value was replaced (the old one is in the
    key's history); ``replaced_pinned``: those whose replaced value was pinned."""

    op: str
    keys: list[str] = msgspec.field(default_factory=list)
    ids: list[int] = msgspec.field(default_factory=list)
    session: str | None = None
    replaced: list[str] = msgspec.field(default_factory=list)
    replaced_pinned: list[str] = msgspec.field(default_factory=list)


class NotesWritten(msgspec.Struct, tag="notes.written", tag_field="kind"):
    """Cast to the backfill actor: embed these notes (purpose ``document``,
    docs/architecture.md §4, step 15) off the request path."""

    ids: list[int]


__all__ = [
    "ApplyLinks", "ApplyVotes", "BumpOutcomes", "ClaimClusters", "Cluster", "DistilledIn",
    "LinkIn", "PersistDistilled", "Persisted", "ReleaseCluster", "SweepCold", "SweepResult",
    "VoteIn", "VoteResult",
    "ApplyReflection", "ApplyResult", "BuildContext", "FactIn", "Lesson", "LessonPointer",
    "Link", "MemoryChanged", "Refused", "Audited", "MemoryContext", "MemoryMsg", "MissingVectors", "Note", "NoteIn",
    "NotesWritten", "Procedure", "ProcedurePointer", "ProcedureStep",
    "ProfileFact", "PutVectors", "ToolOp", "VectorTodo", "Vote",
]
