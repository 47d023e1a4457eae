"""The consolidator's distill call: prompt, grammar and parser
(docs/architecture.md §4, "The consolidator", step 2).

One call per claimed cluster of related notes. The answer is one ``LESSON`` line and,
when procedures are enabled, an optional ``PROCEDURE`` line::

    LESSON activation="<when it applies>"; principle="<1-3 sentences>"; tags=a,b,c
    PROCEDURE activation="<when to use it>"; steps="step one; step two@toolhint"

``qstr`` is a double-quoted run of tab or printable ASCII without ``"``; tags are 3-6
ids of a lower-case letter then up to 23 of ``a-z0-9-``. The abstain sentinel --
activation ``(no consensus)`` with principle ``(no durable advice)`` -- means the notes
hold nothing durable in common: :func:`parse_distill` returns ``None`` and the cluster
stays as it is for a later tick.

Parser rules: the first line starting with ``LESSON``;
activation and principle required, non-empty, within 240 / 800 chars, else
:class:`DistillError` (the cluster counts as failed); tags lenient (``_`` allowed, ≤ 40
chars, ≤ 12). The procedure half: steps split on ``;``, a tool hint after the last
``@``; 2-8 steps, description ≤ 240, hint ≤ 64 and well formed, leading "1." numbers
removed; an activation that only copies the format's placeholder ("when to use it") or
any procedure error drops the procedure only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from actors.memory.messages import DistilledIn
from actors.store.records import (ACTIVATION_MAX_CHARS, PRINCIPLE_MAX_CHARS, STEP_MAX_CHARS,
                                  TOOL_HINT_MAX_CHARS)
from actors.store.render import neutralise
from runtime.services.structured import with_schema

__all__ = ["ABSTAIN", "DISTILL_SYSTEM", "DistillError", "build_distill_prompt",
           "distill_grammar", "parse_distill", "N_PREDICT"]

#: The abstain sentinel's (activation, principle).
ABSTAIN = ("(no consensus)", "(no durable advice)")
#: Token cap of a distill completion (a lesson line of ≤ 1,040 chars plus a procedure).
N_PREDICT = 400

DISTILL_SYSTEM = (
    "You combine related notes from the memory of an assistant's user into one lesson. "
    "The notes are things the user said about themself. Answer in this exact format:\n"
    'LESSON activation="<a few words: the topic these notes are about>"; '
    'principle="<one or two sentences starting with The user, combining what the notes '
    'say; only facts from the notes>"; tags=<3 to 6 lower-case words, comma separated>\n'
    "If the notes describe a repeatable way the user does something, add a second line:\n"
    'PROCEDURE activation="<when to use it>"; steps="<step one>; <step two>; ..."\n'
    "If the notes have nothing in common, write exactly:\n"
    f'LESSON activation="{ABSTAIN[0]}"; principle="{ABSTAIN[1]}"'
)
"""The distill call's system part. Measured on the default 1.5B model (scratch runs on
the cold-path corpus's clusters): asking for "when this applies" and "what to know or do"
gave generic advice ("Understand how pytest works, its advantages …"); asking for the
user's facts combined, starting with "The user", kept them ("The user prefers pytest …
building a small Python project called atlas with FastAPI … deploys it to Fly.io")."""

#: Procedure activations that only copy the format's placeholder (dropped).
_PLACEHOLDERS = {"when to use it", "<when to use it>", "when to use"}

_QSTR = r'"([\t\x20-\x21\x23-\x7e]*)"'
_LESSON = re.compile(r"LESSON\s+activation=" + _QSTR + r"\s*;\s*principle=" + _QSTR
                     + r"(?:\s*;\s*tags=([A-Za-z0-9_,\- ]*))?\s*")
_PROCEDURE = re.compile(r"PROCEDURE\s+activation=" + _QSTR + r"\s*;\s*steps=" + _QSTR
                        + r"(?:\s*;\s*tags=([A-Za-z0-9_,\- ]*))?\s*")
_TAG = re.compile(r"[a-z][a-z0-9_-]{0,39}")
_HINT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-./]*")
_NUMBERING = re.compile(r"^(?:step\s*)?\d{1,2}\s*[.):-]\s*", re.IGNORECASE)


class DistillError(ValueError):
    """The completion holds no valid LESSON line (the cluster counts as failed)."""


def build_distill_prompt(previews: Sequence[str]) -> str:
    """The user part: the cluster's notes, one ``- text`` line each, neutralised
    (``render.neutralise``)."""
    rows = [neutralise(f"- {' '.join(p.split())}") for p in previews]
    return "Notes:\n" + "\n".join(rows) + "\n\nAnswer:"


def distill_grammar(procedures: bool) -> str:
    """GBNF of the answer; the ``PROCEDURE`` line only when ``procedures``. Its JSON-schema
    form (:func:`distill_schema`) is registered beside it."""
    proc = ('(procedure "\\n")?' if procedures else "")
    proc_rules = ('procedure ::= "PROCEDURE activation=\\"" act "\\"; steps=\\"" steps "\\""\n'
                  f"steps ::= ch{{3,{STEP_MAX_CHARS * 2}}}\n" if procedures else "")
    return with_schema((
        f'root ::= lesson "\\n" {proc}\n'
        'lesson ::= "LESSON activation=\\"" act "\\"; principle=\\"" prin "\\"" tags?\n'
        + proc_rules +
        'tags ::= "; tags=" tag ("," tag){2,5}\n'
        "tag ::= [a-z] [a-z0-9-]{0,23}\n"
        f"act ::= ch{{1,{ACTIVATION_MAX_CHARS}}}\n"
        f"prin ::= ch{{1,{PRINCIPLE_MAX_CHARS}}}\n"
        "ch ::= [\\t !#-~]\n"
    ), "lesson", distill_schema(procedures), to_text=_distill_text, extra_tokens=40)


def _text(schema_max: int) -> dict[str, object]:
    return {"type": "string", "minLength": 1, "maxLength": schema_max}


def distill_schema(procedures: bool) -> dict[str, object]:
    """The answer as JSON: ``{"lesson": {"activation", "principle", "tags": [3..6]},
    "procedure": {"activation", "steps": [2..8]}}`` (``procedure`` optional, only when
    ``procedures``), turned back into the lines above by the backend."""
    lesson = {"type": "object", "required": ["activation", "principle", "tags"],
              "additionalProperties": False,
              "properties": {"activation": _text(ACTIVATION_MAX_CHARS),
                             "principle": _text(PRINCIPLE_MAX_CHARS),
                             "tags": {"type": "array", "minItems": 3, "maxItems": 6,
                                      "items": {"type": "string",
                                                "pattern": "^[a-z][a-z0-9-]{0,23}$"}}}}
    props: dict[str, object] = {"lesson": lesson}
    if procedures:
        props["procedure"] = {
            "type": "object", "required": ["activation", "steps"], "additionalProperties": False,
            "properties": {"activation": _text(ACTIVATION_MAX_CHARS),
                           "steps": {"type": "array", "minItems": 2, "maxItems": 8,
                                     "items": _text(STEP_MAX_CHARS)}}}
    return {"type": "object", "required": ["lesson"], "additionalProperties": False,
            "properties": props}


def _quoted(value: object) -> str:
    """A JSON string value as the line format's ``qstr`` (no ``"``, one line)."""
    return " ".join(str(value).replace('"', "'").split())


def _distill_text(value: object) -> str | None:
    """:func:`distill_schema`'s JSON -> the ``LESSON``/``PROCEDURE`` lines; None when
    there is no lesson object."""
    lesson = value.get("lesson") if isinstance(value, dict) else None
    if not isinstance(lesson, dict):
        return None
    tags = [t for t in lesson.get("tags") or [] if isinstance(t, str)]
    lines = [f'LESSON activation="{_quoted(lesson.get("activation", ""))}"; '
             f'principle="{_quoted(lesson.get("principle", ""))}"'
             + (f"; tags={','.join(_quoted(t) for t in tags)}" if tags else "")]
    procedure = value.get("procedure") if isinstance(value, dict) else None
    if isinstance(procedure, dict) and isinstance(procedure.get("steps"), list):
        steps = "; ".join(_quoted(x).replace(";", ",") for x in procedure["steps"])
        lines.append(f'PROCEDURE activation="{_quoted(procedure.get("activation", ""))}"; '
                     f'steps="{steps}"')
    return "\n".join(lines) + "\n"


def _tags(raw: str | None) -> list[str]:
    out: list[str] = []
    for t in (raw or "").split(","):
        t = t.strip().lower()
        if _TAG.fullmatch(t) and t not in out:
            out.append(t)
    return out[:12]


def _steps(raw: str) -> list[tuple[str, str]] | None:
    steps: list[tuple[str, str]] = []
    for part in raw.split(";"):
        part = _NUMBERING.sub("", part.strip())  # "1. Rest" → "Rest": the renderer numbers
        if not part:
            continue
        desc, hint = part, ""
        if "@" in part:
            desc, hint = (s.strip() for s in part.rsplit("@", 1))
            if not (hint and len(hint) <= TOOL_HINT_MAX_CHARS and _HINT.fullmatch(hint)):
                return None
        if not desc or len(desc) > STEP_MAX_CHARS:
            return None
        steps.append((desc, hint))
    return steps if 2 <= len(steps) <= 8 else None


def parse_distill(text: str) -> DistilledIn | None:
    """Parse a distill completion (module docstring); None for the abstain sentinel.

    Raises:
        DistillError: no ``LESSON`` line, or its activation / principle missing, empty
            or too long.
    """
    lines = [ln.strip() for ln in (text or "").splitlines()]
    lesson_line = next((ln for ln in lines if ln.startswith("LESSON")), None)
    if lesson_line is None:
        raise DistillError("no LESSON line")
    m = _LESSON.fullmatch(lesson_line)
    if m is None:
        raise DistillError("the LESSON line does not match the format")
    activation, principle = m[1].strip(), m[2].strip()
    if (activation, principle) == ABSTAIN:
        return None
    if not activation or not principle:
        raise DistillError("empty activation or principle")
    if len(activation) > ACTIVATION_MAX_CHARS or len(principle) > PRINCIPLE_MAX_CHARS:
        raise DistillError("activation or principle too long")
    out = DistilledIn(activation=activation, principle=principle, tags=_tags(m[3]))
    proc_line = next((ln for ln in lines if ln.startswith("PROCEDURE")), None)
    p = _PROCEDURE.fullmatch(proc_line) if proc_line else None
    if p is not None:
        steps = _steps(p[2])
        p_act = p[1].strip()
        if (steps and p_act and len(p_act) <= ACTIVATION_MAX_CHARS
                and p_act.lower().strip(".") not in _PLACEHOLDERS and "<" not in p_act):
            out.procedure_activation = p_act
            out.steps = steps
    return out
