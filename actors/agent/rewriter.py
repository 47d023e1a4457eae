"""The query rewriter: a follow-up message becomes a self-contained recall query
(on by default, and asked only when the message looks like a follow-up).

"and what about the other one?" finds nothing by keywords; rewritten with the last few
exchanges ("Dana's second cat Pixel vet appointment") it does. The rewrite is used
**only for recall** (notes, lessons, procedures); the model still sees the user's own
message, and the profile's keyword gate still reads it.

:meth:`Rewriter.rewrite` returns ``(query, outcome)`` and never raises: every failure
gives the raw message back. Outcomes (``agent.memory.rewriter{outcome}``):

* ``skipped_disabled`` — ``memory.rewriter.enabled`` is false;
* ``skipped_no_history`` — the session has no earlier exchange;
* ``skipped_not_referential`` — :func:`is_referential` says the message stands alone;
* ``memo`` — the same message with the same history was rewritten before (one memo
  entry per session, 256 sessions, least recently used first out);
* ``ok`` — rewritten; ``unchanged`` — the model answered ``NONE`` or the message itself;
* ``dissimilar`` — with embeddings attached, the rewrite's cosine (purpose
  ``similarity``) to what it was made from — the history window and the message — is
  below the model's floor (``minCosine``, 0.35): it drifted, so the raw message is used.
  Not the message alone: a follow-up ("and when is it?") shares no meaning with its good
  rewrite ("Pixel vet appointment": cosine −0.03 with wordllama, 0.55 against window +
  message; an unrelated "quantum chromodynamics lecture schedule" scores 0.02);
* ``failed`` — LLM error or an answer without a valid envelope; ``timeout`` —
  ``memory.rewriter.timeoutMs`` ran out. Failures and timeouts are memoised too, so a
  slow model is not asked again for the same message.

The call runs on the ``rewriter`` role (slot 2 when the llama-server has one, else -1)
in its own pool partition ``rewriter:<session>``, so a failing rewrite never moves the
session's sticky backend. The similarity check runs only when a check is given and
answers (embeddings attached); otherwise the rewrite is used as the model gave it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable

import structlog
import trio

from actors.store.render import neutralise
from runtime.services.backends import BackendPool
from runtime.services.config import RewriterConfig
from runtime.services.llm import LLMError
from runtime.services.structured import with_schema

#: ``similarity(original, rewrite)`` → ``(cosine, floor)``, or None when no embedder is
#: attached (the agent asks the backfill actor, which holds the local embedder).
SimilarityCheck = Callable[[str, str], Awaitable[tuple[float, float] | None]]

__all__ = ["REWRITER_GRAMMAR", "REWRITER_PREFIX", "Rewriter", "build_rewriter_prompt",
           "is_referential", "parse_rewrite"]

log = structlog.get_logger()

MAX_QUERY_CHARS = 400
"""Longest rewritten query, chars (the ``body`` bound of :data:`REWRITER_GRAMMAR`)."""
HISTORY_CLIP_CHARS = 400
CURRENT_CLIP_CHARS = 500
MEMO_SESSIONS = 256

_QUESTION_WORDS = {
    "what", "when", "where", "why", "how", "who", "whom", "whose", "which",
    "что", "когда", "где", "почему", "зачем", "как", "кто", "какой", "какая", "какие",
    "qué", "que", "cuándo", "dónde", "cómo", "quién", "was", "wann", "wo", "warum", "wie",
    "wer", "quoi", "quand", "où", "pourquoi", "comment", "qui",
}
_PRONOUNS = {
    "it", "that", "they", "them", "those", "this", "these", "same", "more", "its", "there",
    "он", "она", "оно", "они", "это", "то", "такой", "такая", "такие", "ещё", "еще",
    "eso", "esto", "ese", "esa", "ello", "das", "dies", "diese", "dieser", "es", "ça",
    "cela", "ceci", "isso", "isto", "quello", "questo", "dat", "dit", "to", "tego",
    "그것", "그거", "이것",
}
_STARTERS = {"and", "but", "also", "or", "а", "и", "но", "ещё", "еще", "или", "y", "pero",
             "und", "aber", "et", "mais", "e", "ma", "en", "maar", "i", "ale", "그리고"}
_STRIP = ".,!?;:\"'()[]{}«»“”‘’…-"


def is_referential(message: str, history_turns: int) -> bool:
    """The heuristic gate: False without history or text; else True when
    the message has at most 5 words and no question word, or any word is a pronoun
    ("it", "that", "они", "eso" …), or it starts with a conjunction ("and", "but", "и" …)."""
    if history_turns <= 0 or not message.strip():
        return False
    words = [w.strip(_STRIP) for w in message.lower().split()]
    words = [w for w in words if w]
    if not words:
        return False
    if len(words) <= 5 and not any(w in _QUESTION_WORDS for w in words):
        return True
    return any(w in _PRONOUNS for w in words) or words[0] in _STARTERS


#: Byte-stable instructions of the rewriter prompt.
REWRITER_PREFIX = (
    "You rewrite the user's latest message into ONE self-contained search query for a "
    "keyword and embedding search over the user's saved notes.\n"
    "Rules:\n"
    "- Resolve words like it, that, they, the other one from the history.\n"
    "- Keep names, numbers and other entities exactly as written.\n"
    "- Under 400 characters, in the user's language, without filler words.\n"
    "- If the message is already self-contained, repeat it unchanged.\n"
    "- If there is nothing to search for, output NONE inside the envelope.\n"
    "- Output exactly one line: <rewritten_query>...</rewritten_query>\n"
)

#: GBNF of the answer: the envelope around 1–400 chars without ``<`` or a
#: newline, optionally followed by one newline.
#: On an OpenAI-compatible server it goes out as ``{"query": "..."}`` (1-400 chars),
#: put back into the envelope by the backend (:mod:`runtime.services.structured`).
REWRITER_GRAMMAR = with_schema((
    'root ::= "<rewritten_query>" body "</rewritten_query>" "\\n"?\n'
    "body ::= " + "[^<\\n]" + " [^<\\n]{0,399}\n"
), "rewritten_query", {"type": "object", "required": ["query"], "additionalProperties": False,
                       "properties": {"query": {"type": "string", "minLength": 1,
                                                "maxLength": 400}}},
    to_text=lambda value: (f"<rewritten_query>{value['query']}</rewritten_query>"
                           if isinstance(value, dict) and isinstance(value.get("query"), str)
                           else None),
    extra_tokens=8)

_WS = re.compile(r"\s+")
_ENVELOPE = re.compile(r"<rewritten_query>(.*?)</rewritten_query>", re.I | re.S)


def _clip(text: str, limit: int) -> str:
    flat = _WS.sub(" ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def build_rewriter_prompt(message: str, history: list[tuple[str, str]]) -> str:
    """The variable part (the user turn of the chat): ``### history`` with ``USER:`` /
    ``ASSISTANT:`` lines clipped to 400 chars, ``### current`` with the message clipped
    to 500, then ``### output``."""
    lines = ["### history"]
    for role, text in history:
        lines.append(neutralise(f"{'USER' if role == 'user' else 'ASSISTANT'}: "
                                f"{_clip(text, HISTORY_CLIP_CHARS)}"))
    lines += ["", "### current", neutralise(f"USER: {_clip(message, CURRENT_CLIP_CHARS)}"),
              "", "### output"]
    return "\n".join(lines) + "\n"


def parse_rewrite(text: str) -> str | None:
    """The query inside the first envelope (case-insensitive), trimmed; None when the
    envelope is missing or empty, holds ``NONE`` or a newline. Clipped to 400 chars."""
    m = _ENVELOPE.search(text)
    if m is None:
        return None
    inner = m.group(1).strip()
    if not inner or inner.upper() == "NONE" or "\n" in inner:
        return None
    return inner[:MAX_QUERY_CHARS]


class Rewriter:
    """Per-actor rewriter state: the memo and the config (see the module docstring)."""

    def __init__(self, pool: BackendPool | None, cfg: RewriterConfig,
                 similarity: SimilarityCheck | None = None) -> None:
        self.pool = pool
        self.cfg = cfg
        self.similarity = similarity
        self._memo: OrderedDict[str, tuple[str, str]] = OrderedDict()

    def _window(self, history: list[tuple[str, str]]) -> list[tuple[str, str]]:
        keep = 2 * self.cfg.history_turns
        return history[-keep:] if keep else []

    async def rewrite(self, session: str, message: str,
                      history: list[tuple[str, str]]) -> tuple[str, str]:
        """``(recall query, outcome)``; the query is ``message`` itself on every path
        but ``ok``. Never raises (cancellation of the caller still propagates)."""
        if not self.cfg.enabled or self.pool is None:
            return message, "skipped_disabled"
        window = self._window(history)
        if not window:
            return message, "skipped_no_history"
        if not is_referential(message, len(window) // 2 or 1):
            return message, "skipped_not_referential"
        key = hashlib.sha256(json.dumps([message, window], ensure_ascii=False)
                             .encode("utf-8")).hexdigest()
        memo = self._memo.get(session)
        if memo is not None and memo[0] == key:
            self._memo.move_to_end(session)
            return memo[1], "memo"
        query, outcome = await self._call(session, message, window)
        self._memo[session] = (key, query)
        self._memo.move_to_end(session)
        while len(self._memo) > MEMO_SESSIONS:
            self._memo.popitem(last=False)
        return query, outcome

    async def _call(self, session: str, message: str,
                    window: list[tuple[str, str]]) -> tuple[str, str]:
        assert self.pool is not None
        with trio.move_on_after(self.cfg.timeout_ms / 1000) as timer:
            try:
                completion = await self.pool.complete(
                    f"rewriter:{session}", REWRITER_PREFIX, build_rewriter_prompt(message, window),
                    role="rewriter", grammar=REWRITER_GRAMMAR, n_predict=160, temperature=0.0)
            except LLMError as exc:
                log.warning("agent.rewriter_failed", session=session, error=str(exc)[:200])
                return message, "failed"
        if timer.cancelled_caught:
            return message, "timeout"
        query = parse_rewrite(completion.text)
        if query is None:
            if "<rewritten_query>" in completion.text.lower():
                return message, "unchanged"  # NONE or empty: nothing to disambiguate
            return message, "failed"
        if query.strip().casefold() == message.strip().casefold():
            return message, "unchanged"
        if self.similarity is not None:
            source = " ".join([text for _, text in window] + [message])
            checked = await self.similarity(source, query)
            if checked is not None and checked[0] < checked[1]:
                log.info("agent.rewrite_dissimilar", session=session,
                         cosine=round(checked[0], 3), floor=checked[1])
                return message, "dissimilar"
        return query, "ok"
