"""The memory store's records: the rows its stores return and the wire carries.

Plain msgspec Structs with no store behind them (this module imports nothing but
msgspec), so the memory actor's wire contract (:mod:`actors.memory.messages`) and every
process that talks to memory use them without loading the SQLite store. Each store
module re-exports its own (``actors.store.notes.Note`` is this module's ``Note``).
"""

from __future__ import annotations

import msgspec

# -- the limits a record's text obeys (the stores validate them; reflection's planning,
# which runs in a process without the stores, writes within them)

ACTIVATION_MAX_CHARS = 240
"""A lesson's or procedure's activation line (when it applies), at most."""
PRINCIPLE_MAX_CHARS = 800
"""A lesson's principle, at most."""
STEP_MAX_CHARS = 240
"""One step of a procedure, at most."""
TOOL_HINT_MAX_CHARS = 64
"""A procedure step's tool hint, at most."""
LINK_KINDS: tuple[str, ...] = (
    "RELATES_TO", "CAUSED_BY", "REFERENCES", "CONTRADICTS", "DUPLICATES", "SUPERSEDES",
)
"""The six kinds of an edge between two notes."""


class Note(msgspec.Struct, rename="camel"):
    """One note as returned by the store (wire keys camelCase, docs/protocol.md §5).

    Attributes:
        id: positive row id.
        content: trimmed text, 1..max_content_chars chars.
        tags: tags in insertion order (case kept), at most 16 of at most 40 chars.
        source: ``"agent"`` or ``"user"``.
        scope: ``"all"`` (global) or ``"project"`` (tied to ``working_dir``).
        working_dir: the project directory, or None.
        created_at / updated_at: Unix ms.
        score: recall relevance in [0, 1], strongest hit 1.0; None outside recall.
        archived: True once the note was archived (still readable by id).
        space: ``"team"`` for a note of the team space recalled beside the person's own
            (the PostgreSQL engine, docs/teams.md); None for the person's own notes.
    """

    id: int
    content: str
    tags: list[str]
    source: str
    scope: str
    working_dir: str | None
    created_at: int
    updated_at: int
    score: float | None = None
    archived: bool = False
    origin: str | None = None
    """Who wrote it: ``reflection``, ``tool`` (the agent's call), ``user`` (CLI, TUI,
    MCP, the websocket) or ``import``; None when unknown (before schema v6)."""
    session_id: str | None = None
    turn_id: str | None = None
    recall_count: int = 0
    last_recalled_at: int | None = None
    space: str | None = None


class ProfileFact(msgspec.Struct, rename="camel"):
    """One profile row.

    Attributes:
        id: row id (every version of a key has its own id).
        key: lower-cased key, charset ``[a-z0-9][a-z0-9_.-]*``, at most 120 chars.
        value: the value exactly as written (not trimmed), 1..2000 chars.
        pinned: True -> always rendered; False -> rendered only on a keyword hit.
        keywords: lower-cased gate keywords (empty for pinned facts), at most 8.
        updated_at: last change of this row, Unix ms (for a superseded row: when it
            was superseded).
        valid_from: when this value became current, Unix ms.
        superseded_by: ``None`` while active; the id of the row that replaced it; its
            own id when the fact was removed or evicted without a successor.

    Encoded with camelCase keys (``updatedAt``, ``validFrom``, ``supersededBy``), the
    wire shape of docs/protocol.md §5.
    """

    id: int
    key: str
    value: str
    pinned: bool
    keywords: list[str]
    updated_at: int
    valid_from: int
    superseded_by: int | None = None
    source: str | None = None
    """Who wrote this version: ``reflection``, ``tool`` (the agent's call), ``user``
    (CLI, TUI, MCP, the websocket) or ``import``; None when unknown (before schema v6)."""
    session_id: str | None = None
    turn_id: str | None = None
    removed_by: str | None = None
    """Who ended this version (wire ``removedBy``): the writer that removed or replaced it,
    as the activity log names them (``agent for chat``, ``reflection for chat``,
    ``dashboard``, ``tui``, an app's name) or ``evicted`` (the unpinned cap); None while
    active, or when ended before schema v11."""
    removed_turn_id: str | None = None
    """The turn that ended this version, when a turn did (wire ``removedTurnId``)."""
    warning: str | None = None
    """Set on the fact returned by a write that could not be honoured as asked (a pin
    over ``memory.profile.pinnedBudgetChars`` was stored unpinned); never stored."""

    @property
    def active(self) -> bool:
        """True when this row is the current value of its key."""
        return self.superseded_by is None


class Link(msgspec.Struct, rename="camel"):
    """One edge (wire keys ``fromId``, ``toId``, ``kind``, ``weight``, ``createdAt``,
    ``origin``).

    Attributes:
        from_id / to_id: note ids (distinct, both existing when written).
        kind: one of :data:`actors.store.links.LINK_KINDS`.
        weight: in [0, 1].
        created_at: Unix ms of the last upsert.
        origin: who wrote it, one of :data:`actors.store.links.LINK_ORIGINS`: ``manual`` (the
            ``memory.links.add`` op), ``similarity`` (links by meaning), ``model`` (the
            LLM link generator), ``correction`` (a note that negates an older one). A manual upsert makes an edge manual; another writer
            never takes that back.
    """

    from_id: int
    to_id: int
    kind: str
    weight: float
    created_at: int
    origin: str = "manual"


class LessonPointer(msgspec.Struct, rename="camel"):
    """What ``### lessons`` shows of a lesson: never the principle.

    Attributes:
        id: lesson id.
        activation: the one-sentence "when this applies" text.
        tags: lower-cased tags, at most 12.
        score: BM25 relevance in [0, 1] within the recall hit set (strongest 1.0).
    """

    id: int
    activation: str
    tags: list[str]
    score: float | None = None


class Lesson(msgspec.Struct, rename="camel"):
    """One lesson row (wire keys camelCase, e.g. ``successCount``, ``parentIds``).

    Attributes:
        id: positive row id.
        activation: trimmed, 1..240 chars.
        principle: trimmed, 1..800 chars.
        tags: lower-cased, ``[a-z0-9][a-z0-9_-]*``, at most 12 of at most 40 chars.
        status: ``"active"`` or ``"deprecated"``.
        success_count / failure_count: outcome counters of turns that surfaced it.
        parent_ids: ids of the notes it was distilled from (soft pointers).
        working_dir: project directory or None (global).
        created_at / updated_at / deprecated_at: Unix ms (``deprecated_at`` None while
            active).
        score: BM25 relevance in [0, 1] on query recall, else None.
    """

    id: int
    activation: str
    principle: str
    tags: list[str]
    status: str
    success_count: int
    failure_count: int
    parent_ids: list[int]
    working_dir: str | None
    created_at: int
    updated_at: int
    deprecated_at: int | None = None
    score: float | None = None

    def pointer(self) -> LessonPointer:
        """Project to the ``### lessons`` row (id, activation, tags, score)."""
        return LessonPointer(self.id, self.activation, list(self.tags), self.score)


class ProcedureStep(msgspec.Struct, rename="camel"):
    """One step: ``{"description": str, "toolHint": str | null}``.

    Attributes:
        description: trimmed, 1..240 chars.
        tool_hint: None or 1..64 chars matching ``[A-Za-z0-9][A-Za-z0-9_\\-./]*``.
    """

    description: str
    tool_hint: str | None = None


ProcedurePointer = LessonPointer
"""What ``### procedures`` shows of a procedure: never the steps. The same
pointer shape as a lesson's (id, activation, tags, score), so one Struct serves both."""


class Procedure(msgspec.Struct, rename="camel"):
    """One procedure row (wire keys camelCase: ``parentLessonIds``, ``useCount`` ...).

    Attributes:
        id: positive row id.
        activation: trimmed, 1..240 chars.
        steps: 2..8 :class:`ProcedureStep`.
        tags: lower-cased, ``[a-z0-9][a-z0-9_\\-./]*``, at most 12 of at most 64 chars.
        status: ``"active"`` or ``"deprecated"``.
        success_count / failure_count / use_count: counters.
        parent_lesson_ids / parent_memory_ids: soft pointers (lists of ids).
        source: ``"consolidator"`` or ``"manual"``.
        working_dir: project directory or None.
        created_at / updated_at / deprecated_at: Unix ms.
        score: BM25 relevance in [0, 1] on query recall, else None.
    """

    id: int
    activation: str
    steps: list[ProcedureStep]
    tags: list[str]
    status: str
    success_count: int
    failure_count: int
    use_count: int
    parent_lesson_ids: list[int]
    parent_memory_ids: list[int]
    source: str
    working_dir: str | None
    created_at: int
    updated_at: int
    deprecated_at: int | None = None
    score: float | None = None

    def pointer(self) -> ProcedurePointer:
        """Project to the ``### procedures`` row (id, activation, tags, score)."""
        return ProcedurePointer(self.id, self.activation, list(self.tags), self.score)


class Vote(msgspec.Struct, rename="camel"):
    """One audit row (wire keys ``targetId``, ``sessionId``, ``turnIndex``, ``createdAt``).

    Attributes:
        id: row id (increasing; FIFO order).
        kind: one of :data:`actors.store.votes.VOTE_KINDS`.
        target_id: id of the voted item (soft pointer).
        direction: +1 (up) or -1 (down).
        session_id: the session the vote came from, or None.
        turn_index: the turn number in that session, or None.
        created_at: Unix ms.
    """

    id: int
    kind: str
    target_id: int
    direction: int
    session_id: str | None
    turn_index: int | None
    created_at: int


class Cluster(msgspec.Struct):
    """A claimed cluster: member ``ids`` (≤ :data:`actors.store.cold.MAX_CLUSTER_NOTES`), their
    ``previews`` (same order), the shared ``tags`` of the members, the lease stamp
    ``claimed_at`` (Unix ms) that :func:`actors.store.cold.persist_distilled` / :func:`~actors.store.cold.release_leases`
    check, and the members' common ``working_dir`` (None when they differ)."""

    ids: list[int]
    previews: list[str]
    claimed_at: int
    tags: list[str] = msgspec.field(default_factory=list)
    working_dir: str | None = None


class LinkIn(msgspec.Struct, array_like=True):
    """One generated link: ``from_id`` → ``to_id`` of ``kind``."""

    from_id: int
    to_id: int
    kind: str = "RELATES_TO"


class SweepResult(msgspec.Struct):
    """One tick's sweeps: deprecations by ``"<lesson|procedure>:<reason>"``."""

    deprecated: dict[str, int] = msgspec.field(default_factory=dict)
    decayed: bool = False


class VoteIn(msgspec.Struct, array_like=True):
    """One vote: ``kind`` in :data:`actors.store.votes.VOTE_KINDS`, target id, direction ±1."""

    kind: str
    target_id: int
    direction: int


class VoteResult(msgspec.Struct):
    """What :func:`apply_votes` did: votes applied, votes that hit the clamp, votes on
    targets that no longer exist."""

    applied: int = 0
    clamp_hits: int = 0
    missing: int = 0


class MemoryContext(msgspec.Struct):
    """Memory slice for one turn.

    Attributes:
        profile: gated active profile facts (key order; the renderer orders pinned first).
        recalled: BM25 hits, best first, each with ``score`` in [0, 1]; then the
            link-expanded neighbours in BFS order (``score`` None). Ids are unique.
        index: pointer rows, ``updated_at`` descending, disjoint from the hits by id
            (a neighbour may be an index row too: :func:`actors.store.context.render_context` shows it once).
        lessons: up to ``memory.lessons.recallK`` lesson pointers, best first.
        procedures: up to ``memory.procedures.recallK`` procedure pointers, best first.
        expanded: how many of ``recalled``'s last entries are link-expanded neighbours
            (:func:`actors.store.context.render_context` takes their tokens from the index budget).
        superseded: ``{note id: newer note id}`` for the recalled and index notes a
            later note corrects (``corrections.superseded_by``); rendered as
            ``(superseded by #N)``.
        session_facts: active facts written in this session, oldest first, at most
            ``memory.sessionFacts.limit``, none of them in ``profile``.
        before: ``{profile fact id: the version it replaced}`` for the facts of
            ``profile`` that have one (``ProfileStore.predecessors``).
        zone: the user's time zone name from the profile (``timezone``/``time_zone``/
            ``tz``, any fact, gated or not), None when the profile names none.

    Fields added after the first release have defaults (msgspec schema evolution), so
    an older peer decodes a newer context and vice versa.
    """

    profile: list[ProfileFact]
    recalled: list[Note]
    index: list[Note]
    lessons: list[LessonPointer] = msgspec.field(default_factory=list)
    procedures: list[ProcedurePointer] = msgspec.field(default_factory=list)
    expanded: int = 0
    superseded: dict[int, int] = msgspec.field(default_factory=dict)
    session_facts: list[ProfileFact] = msgspec.field(default_factory=list)
    before: dict[int, ProfileFact] = msgspec.field(default_factory=dict)
    zone: str | None = None
