"""Per-turn memory context: the read path that feeds the prompt tail.

Built once per turn (seed 000 §4.2, §6 step 2; DESIGN §2 step 3; anchor §3.6):

* ``profile``  -- active facts through the contextual keyword gate (``render.gate_profile``);
* ``recalled`` -- top-``k`` notes by BM25 against the user message, recall counters bumped
  exactly once; any recall failure degrades to ``[]`` (seed 000 §11), logged;
* ``index``    -- the most recently updated non-archived notes minus every recalled id, so
  no note appears twice in one prompt (seed 000 §4.2).

The result is plain data (msgspec Struct) the memory actor sends to the agent actor,
which turns it into section bodies with :func:`render_context` (or the individual
``render.render_profile`` / ``render_recalled`` / ``render_index``).
"""

from __future__ import annotations

import msgspec
import structlog

from .notes import MAX_QUERY_CHARS, MemoryStore, Note
from .profile import ProfileFact, ProfileStore
from .render import gate_profile, render_index, render_profile, render_recalled

__all__ = ["MemoryContext", "build_context", "recall_query", "render_context"]

log = structlog.get_logger("actors.memory.context")


class MemoryContext(msgspec.Struct):
    """Memory slice for one turn.

    Attributes:
        profile: gated active profile facts (key order; the renderer orders pinned first).
        recalled: BM25 hits, best first, each with ``score`` in [0, 1].
        index: pointer rows, ``updated_at`` descending, disjoint from ``recalled`` by id.
    """

    profile: list[ProfileFact]
    recalled: list[Note]
    index: list[Note]


def recall_query(user_message: str | None) -> str:
    """Return the auto-recall query for a user message.

    The message trimmed; when longer than ``MAX_QUERY_CHARS`` (500) it is cut there,
    dropping a partial last word, so a long message still recalls by its opening
    words instead of failing validation.
    """
    text = (user_message or "").strip()
    if len(text) <= MAX_QUERY_CHARS:
        return text
    cut = text[:MAX_QUERY_CHARS]
    if not text[MAX_QUERY_CHARS].isspace():
        head, sep, _tail = cut.rpartition(" ")
        if sep and head.strip():
            cut = head
    return cut.strip()


def build_context(
    profiles: ProfileStore,
    notes: MemoryStore,
    user_message: str,
    *,
    working_dir: str | None,
    k: int = 3,
    index_limit: int = 20,
    gate: bool = True,
) -> MemoryContext:
    """Build the :class:`MemoryContext` for one turn.

    Args:
        profiles / notes: the stores of the actor's connection.
        user_message: the current user message (the recall query and the gate input).
        working_dir: the session's project directory; when given, recall and index
            show global notes plus that directory's notes.
        k: ``memory.recallInjection.k`` (default 3); ``k <= 0`` recalls nothing.
        index_limit: ``memory.index.limit`` (default 20); ``<= 0`` gives no index.
        gate: ``memory.profile.contextualKeywordGate`` (default on).

    Recall bumps ``recall_count`` once per surfaced note. Recall errors of any kind
    are logged (``memory.context.recall_failed``) and give ``recalled = []``; profile
    and index errors propagate.
    """
    profile = gate_profile(profiles.list(), user_message, gate=gate)

    recalled: list[Note] = []
    if k > 0:
        try:
            recalled = notes.recall(
                recall_query(user_message), k=k, working_dir=working_dir, bump=True
            )
        except Exception as exc:  # seed 000 §11: recall failure -> empty ### recalled
            log.warning(
                "memory.context.recall_failed",
                error_type=type(exc).__name__,
                error=str(exc),
            )
            recalled = []

    index: list[Note] = []
    if index_limit > 0:
        seen = {n.id for n in recalled}
        index = [
            n
            for n in notes.list_index(index_limit, exclude_ids=seen, working_dir=working_dir)
            if n.id not in seen
        ][:index_limit]

    return MemoryContext(profile=profile, recalled=recalled, index=index)


def render_context(
    ctx: MemoryContext,
    *,
    profile_max_tokens: int = 512,
    recall_preview_chars: int = 160,
    recall_max_tokens: int = 400,
    index_preview_chars: int = 60,
    index_max_tokens: int = 300,
) -> dict[str, str]:
    """Render a context into prompt-tail section bodies, keyed by section name.

    Keys are ``"profile"``, ``"recalled"`` and ``"memory-index"`` (the ``### `` heading
    names of seed 000 §7); a section whose body is empty is left out (DESIGN §6: empty
    optional sections are omitted). Defaults are the budgets of seed 000 §8
    (``memory.profile.maxTokens`` 512, ``memory.recallInjection.previewChars`` 160 /
    ``maxTokens`` 400, ``memory.index.previewChars`` 60 / ``maxTokens`` 300), in tokens
    as estimated by ``render.estimate_tokens`` and chars. Insertion order follows the
    prompt order of DESIGN §6 (memory-index, recalled, profile).
    """
    bodies = {
        "memory-index": render_index(
            ctx.index, preview_chars=index_preview_chars, max_tokens=index_max_tokens
        ),
        "recalled": render_recalled(
            ctx.recalled, preview_chars=recall_preview_chars, max_tokens=recall_max_tokens
        ),
        "profile": render_profile(ctx.profile, profile_max_tokens, empty=""),
    }
    return {name: body for name, body in bodies.items() if body}
