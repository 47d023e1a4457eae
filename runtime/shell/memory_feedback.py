"""What memory did after a turn, in one line for a person.

``ask`` and ``chat`` subscribe to ``reflection`` frames; when the frame of their turn
arrives, :func:`describe` turns it into one line — what was remembered (with the values,
read back through ``memory.profile.list`` and ``memory.notes.recall``: the frame itself
carries keys and ids only), updated or forgotten, or that nothing was and why — and a
timeout or failure into a warning that names the setting to change.

Line shapes::

    memory: remembered city = Berlin (updated), name = Dana; noted #7 "The user's…"
    memory: forgot phone_number and 1 note
    memory: nothing to remember (a question)
    memory: nothing to remember (small talk or a one-off instruction); the reply said it
            would remember, but nothing from this message was kept
    memory: remembered name = Tomas; not kept: editor (not in your words: say it as a
            fact about you to keep it)
    memory: warning: reflection timed out after 60 s, nothing stored from this turn;
            raise memory.reflection.timeoutMs in config.json

Never raises on a frame it does not expect: unknown outcomes print as they are.
"""

from __future__ import annotations

from actors.memory import ops

from .client import ClientError, DaemonClient
from .outbound import ReflectionFrame

__all__ = ["describe", "NONE_REASONS"]

NONE_REASONS = {
    "trivial": "small talk or a one-off instruction",
    "question": "a question",
    "request": "a request, nothing about you",
    "impersonal": "nothing about you",
    "everything was already known or invalid": "already known",
}
"""Reasons of a ``none`` outcome, in a person's words."""

DROPPED_REASONS = {
    "ungrounded_content": "what the model wrote down was not in your own words",
    "ungrounded_identity": "no name you gave as your own",
    "assistant_only": "only the assistant said it",
    "third_person": "it was about someone else",
}
"""Why reflection's proposals were all dropped (``ungrounded: a,b``), in a person's words;
a reason not listed here reads "nothing you stated about yourself"."""

NOT_KEPT_REASONS = {
    "ungrounded_content": "not in your words: say it as a fact about you to keep it",
    "ungrounded_identity": "no name you gave as your own",
    "invented_detail": "a detail you did not say",
    "assistant_only": "only the assistant said it",
    "third_person": "it was about someone else",
    "negated": "you said it is not so",
    "hypothetical": "a wish or an 'if', not a fact",
    "question": "you asked it",
    "no_value": "it states nothing",
    "negated_key": "you said it is not so",
    "key_holds_value": "not in your words: say it as a fact about you to keep it",
    "comparison": "it compares you with something else",
    "injection": "it reads as an instruction to the assistant",
    "coming_age": "an age still to come; your sentence is kept instead",
    "not_a_place": "a time, not a place",
}
"""Why a proposal was not kept (a frame's ``notKept``), in a person's words."""
NOT_KEPT_OTHER = "the memory guards dropped it"

PREVIEW_CHARS = 60


def _none_reason(reason: str) -> str:
    if reason in NONE_REASONS:
        return NONE_REASONS[reason]
    if reason.startswith("ungrounded"):
        causes = [c.strip() for c in reason.partition(":")[2].split(",") if c.strip()]
        said = [DROPPED_REASONS[c] for c in causes if c in DROPPED_REASONS]
        if said and len(said) == len(causes):
            return "; ".join(dict.fromkeys(said))
        return "nothing you stated about yourself"
    return reason or "nothing worth keeping"


async def _values(c: DaemonClient, keys: list[str]) -> dict[str, str]:
    if not keys:
        return {}
    try:
        facts = await c.run(ops.ProfileList())
    except ClientError:
        return {}
    return {f.key: f.value for f in facts if f.key in keys}


async def _preview(c: DaemonClient, note_id: int) -> str:
    try:
        notes = await c.run(ops.NotesRecall(id=note_id))
    except ClientError:
        return ""
    if not notes:
        return ""
    text = " ".join(notes[0].content.split())
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS - 1] + "…"


UNMET_CLAIMS = {
    "kept": "the reply said it would remember, but nothing from this message was kept",
    "forgot": "the reply said it forgot, but nothing was removed from memory",
}
"""A reply's claim the turn did not bear out (a frame's ``unmetClaims``), plainly."""


def _unmet(frame: ReflectionFrame) -> str:
    claims = [UNMET_CLAIMS[c] for c in frame.unmet_claims if c in UNMET_CLAIMS]
    return "; ".join(claims)


async def describe(c: DaemonClient, frame: ReflectionFrame) -> str:
    """The one line for a ``reflection`` frame (see the module doc)."""
    outcome = frame.outcome or "?"
    reason = frame.reason or ""
    if outcome == "timeout":
        secs = (frame.timeout_ms or 0) / 1000
        return (f"memory: warning: reflection timed out after {secs:g} s, nothing stored "
                f"from this turn; raise memory.reflection.timeoutMs in config.json "
                f"(atomic-agent config show prints it)")
    if outcome == "failed":
        return (f"memory: warning: reflection failed ({reason or 'no reason given'}), "
                f"nothing stored from this turn; see logs/reflection.log")
    if outcome == "aborted":
        return "memory: this turn's reflection was interrupted; it is retried with the next one"
    unmet = _unmet(frame)
    if outcome == "none":
        return (f"memory: nothing to remember ({_none_reason(reason)})"
                + (f"; {unmet}" if unmet else ""))
    parts: list[str] = []
    keys = list(frame.fact_keys)
    updated = set(frame.updated_keys)
    values = await _values(c, keys)
    if keys:
        facts = ", ".join(f"{k} = {values.get(k, '?')}" + (" (updated)" if k in updated else "")
                          for k in keys)
        parts.append(f"remembered {facts}")
    for note_id in frame.note_ids:
        preview = await _preview(c, note_id)
        parts.append(f'noted #{note_id}' + (f' "{preview}"' if preview else ""))
    forgot_keys = list(frame.forgotten_keys)
    forgot_notes = len(frame.forgotten_note_ids)
    rewritten = len(frame.rewritten_note_ids)
    if forgot_keys or forgot_notes:
        what = [", ".join(forgot_keys)] if forgot_keys else []
        if forgot_notes:
            what.append(f"{forgot_notes} note{'s' if forgot_notes != 1 else ''}")
        parts.append("forgot " + " and ".join(what))
    if rewritten:
        parts.append(f"took it out of {rewritten} note{'s' if rewritten != 1 else ''} "
                     "(their other facts kept)")
    not_kept = [f"{k.key} ({NOT_KEPT_REASONS.get(k.reason, NOT_KEPT_OTHER)})"
                for k in frame.not_kept]
    if not_kept:
        parts.append("not kept: " + ", ".join(not_kept))
    if unmet:
        parts.append(unmet)
    return "memory: " + ("; ".join(parts) if parts else f"{outcome} ({reason})")
