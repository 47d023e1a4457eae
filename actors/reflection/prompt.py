"""The reflection micro-prompt: a byte-stable prefix plus a small variable tail.

Sources: seed 000 §5.3 (what reflection produces), §9 point 5 ("skip trivia", output
``NONE`` when nothing is worth remembering) and ``reference/anchor-behaviour.md`` §4.3
(the default prefix's rules and the tail layout).

Layout of the text sent to a raw ``POST /completion`` endpoint (plain text, no chat
template; the model continues after ``### output``)::

    <REFLECTION_PREFIX>                 byte-stable, ends with "\\n\\n"
    ### known profile                   optional: at most 40 facts
    - key=value                         value whitespace-collapsed, clipped to 80 chars
    <blank line>
    USER: <message>                     whitespace-collapsed, clipped to 1000 chars
    ASSISTANT: <reply>                  whitespace-collapsed, clipped to 1000 chars
    <blank line>
    ### output
                                        (the completion starts here)

The prefix never changes with the data, so llama-server's prompt cache on the reflection
slot (DESIGN §7) reuses it across turns; only the tail is evaluated per call.

Everything in the tail is *data*: whitespace collapsing turns every newline into a space,
so user or assistant text can never start a line of its own (it cannot open a ``### ``
section or forge a ``SET`` line). Lone UTF-16 surrogates are removed because they cannot
be encoded as UTF-8 in the JSON request body.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from actors.memory.render import neutralise

__all__ = [
    "REFLECTION_PREFIX",
    "KNOWN_PROFILE_MAX_FACTS",
    "KNOWN_PROFILE_VALUE_CHARS",
    "EXCHANGE_CLIP_CHARS",
    "ELLIPSIS",
    "build_reflection_prompt",
    "clip_text",
]

#: Most facts listed under ``### known profile`` (anchor §4.3, ``listForPrompt``).
KNOWN_PROFILE_MAX_FACTS = 40
#: Clip for each known-profile value, in chars including the ellipsis (anchor §4.3).
KNOWN_PROFILE_VALUE_CHARS = 80
#: Clip for the USER and the ASSISTANT text, in chars including the ellipsis (anchor §4.3).
EXCHANGE_CLIP_CHARS = 1000
#: Marker that ends a clipped text (one char, U+2026).
ELLIPSIS = "\u2026"

#: Byte-stable stable prefix of the reflection prompt (anchor §4.3 default prefix,
#: paraphrased; seed 000 §5.3 line syntax). Example values are obvious placeholders in
#: angle brackets so that a weak model copying them produces nothing plausible.
REFLECTION_PREFIX: str = (
    "You are a memory extractor. Read the last exchange between a USER and an "
    "ASSISTANT and write down only what is worth remembering about the user in "
    "later conversations.\n"
    "\n"
    "Output format, one item per line:\n"
    "SET key=value\n"
    "  A durable fact about the user. It is shown in every future prompt.\n"
    "SET key=value [pinned=false; keywords=a,b]\n"
    "  A contextual fact, shown only when the user's message mentions one of the "
    "keywords (1 to 8 short lower-case keywords).\n"
    "NOTE body\n"
    "NOTE body [tag1, tag2]\n"
    "  An observation worth storing but not shown every time, with optional "
    "lower-case tags.\n"
    "NONE\n"
    "  Nothing worth remembering.\n"
    "\n"
    "Rules:\n"
    "- Keep only durable facts the user stated about themselves, or things the user "
    "explicitly asked you to remember.\n"
    "- Skip trivia, moods, small talk, and anything about the assistant or the AI.\n"
    "- Never invent identity details. Record a name only if the USER wrote it.\n"
    "- A one-off instruction for this reply (\"reply only OK\", \"don't use tools "
    "this time\"), a test or a ping is not a preference. Output NONE for it.\n"
    "- Never copy example values from these instructions.\n"
    "- Keys are short snake_case words. If a key under ### known profile already "
    "means the same thing, reuse that exact key to change it; never invent a synonym "
    "and never repeat a known fact.\n"
    "- A SET value is shorter than 200 characters. A NOTE body is shorter than 500 "
    "characters.\n"
    "- Write NOTE bodies in the third person (\"The user prefers ...\").\n"
    "- Do not repeat a SET as a NOTE.\n"
    "- Write at most six lines.\n"
    "- When unsure, output NONE.\n"
    "\n"
    "Examples (placeholder values, never copy them):\n"
    "USER: Please call me <name>. For coding I always use <editor>.\n"
    "ASSISTANT: Sure, <name>.\n"
    "### output\n"
    "SET name=<name>\n"
    "SET code_editor=<editor> [pinned=false; keywords=editor,code]\n"
    "\n"
    "USER: Remember that my deploys must wait for the <team> review.\n"
    "ASSISTANT: Noted.\n"
    "### output\n"
    "NOTE The user wants every deploy to wait for the <team> review. [deploy, review]\n"
    "\n"
    "USER: Reply only OK.\n"
    "ASSISTANT: OK\n"
    "### output\n"
    "NONE\n"
    "\n"
)

_WS_RE = re.compile(r"\s+")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def clip_text(text: str, max_chars: int) -> str:
    """Whitespace-collapse ``text`` and clip it to at most ``max_chars`` chars.

    Runs of whitespace (including newlines and CR) become one space, the ends are
    trimmed, and lone surrogates are removed. A text longer than ``max_chars`` keeps its
    first ``max_chars - 1`` chars followed by :data:`ELLIPSIS`, so the result is never
    longer than ``max_chars`` (anchor §4.3 "clipped to N chars with …").

    Raises ``ValueError`` when ``max_chars`` < 1.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    collapsed = _WS_RE.sub(" ", _SURROGATE_RE.sub("", text)).strip()
    if len(collapsed) <= max_chars:
        return collapsed
    return collapsed[: max_chars - 1] + ELLIPSIS


def _known_profile_block(known_profile: Iterable[tuple[str, str]]) -> str:
    """Render ``### known profile`` (at most 40 ``- key=value`` lines) or ``""``."""
    lines: list[str] = []
    for key, value in known_profile:
        if len(lines) >= KNOWN_PROFILE_MAX_FACTS:
            break
        k = clip_text(key, KNOWN_PROFILE_VALUE_CHARS)
        if not k:
            continue
        lines.append(f"- {k}={clip_text(value, KNOWN_PROFILE_VALUE_CHARS)}")
    if not lines:
        return ""
    return "### known profile\n" + "\n".join(lines) + "\n\n"


def build_reflection_prompt(
    known_profile: list[tuple[str, str]],
    user_message: str,
    assistant_reply: str,
) -> str:
    """Return the full reflection prompt: :data:`REFLECTION_PREFIX` + variable tail.

    ``known_profile`` is a list of ``(key, value)`` pairs already chosen by the memory
    actor (active facts, most relevant first); only the first 40 non-empty keys are
    listed, each value whitespace-collapsed and clipped to 80 chars (anchor §4.3). An
    empty list omits the ``### known profile`` section.

    ``user_message`` and ``assistant_reply`` are whitespace-collapsed and clipped to
    1000 chars each. The prompt ends with ``"\\n\\n### output\\n"`` so a completion
    constrained by :data:`actors.reflection.grammar.REFLECTION_GRAMMAR` starts on a
    fresh line.

    Pure and deterministic; never raises for any ``str`` input.
    """
    # The exchange is text, never template syntax (``### output``, ``<|im_start|>``…).
    user = neutralise(clip_text(user_message, EXCHANGE_CLIP_CHARS))
    assistant = neutralise(clip_text(assistant_reply, EXCHANGE_CLIP_CHARS))
    return (
        REFLECTION_PREFIX
        + _known_profile_block(known_profile)
        + f"USER: {user}\n"
        + f"ASSISTANT: {assistant}\n"
        + "\n### output\n"
    )
