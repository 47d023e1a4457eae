"""The reflection micro-prompt: a byte-stable prefix plus a small variable tail.

Reflection produces ``SET`` / ``NOTE`` / ``FORGET`` lines, skips trivia and outputs
``NONE`` when nothing is worth remembering.

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
slot reuses it across turns; only the tail is evaluated per call.

Everything in the tail is *data*: whitespace collapsing turns every newline into a space,
so user or assistant text can never start a line of its own (it cannot open a ``### ``
section or forge a ``SET`` line). Lone UTF-16 surrogates are removed because they cannot
be encoded as UTF-8 in the JSON request body.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from actors.policy.instructions import INERT, reads_as_instruction
from actors.store.render import neutralise

__all__ = [
    "REFLECTION_PREFIX",
    "KNOWN_PROFILE_MAX_FACTS",
    "KNOWN_PROFILE_VALUE_CHARS",
    "EXCHANGE_CLIP_CHARS",
    "ELLIPSIS",
    "build_reflection_prompt",
    "clip_text",
]

#: Most facts listed under ``### known profile`` (the rest are left out).
KNOWN_PROFILE_MAX_FACTS = 40
#: Clip for each known-profile value, in chars including the ellipsis.
KNOWN_PROFILE_VALUE_CHARS = 80
#: Clip for the USER and the ASSISTANT text, in chars including the ellipsis.
EXCHANGE_CLIP_CHARS = 1000
#: Marker that ends a clipped text (one char, U+2026).
ELLIPSIS = "\u2026"

#: Byte-stable prefix of the reflection prompt. It states the line syntax and the
#: rules, and answers what a small model gets wrong in the field: other people's
#: facts stored as the user's, negations and
#: daydreams stored as facts, questions stored as notes, updates and "forget that"
#: ignored. The examples use concrete values because small models follow a worked
#: example far better than a rule; a copied example value is not in the user's words,
#: so the grounding filter (:mod:`actors.policy.grounding`) drops it.
REFLECTION_PREFIX: str = (
    "You keep a long-term memory about the USER. Read the exchange and write down only "
    "what is worth remembering about the user in later conversations.\n"
    "\n"
    "Write one item per line:\n"
    "SET <key>=<value>\n"
    "  A durable fact about the user: <key> is a short snake_case word, <value> a few words "
    "copied from the user's own wording (do not translate, convert or guess).\n"
    "NOTE <text>\n"
    "  Anything else worth keeping, one sentence in the third person (\"The user ...\").\n"
    "FORGET <words>\n"
    "  The user asked to forget or delete something, or a fact under ### known profile is "
    "no longer true: name its key or the words to forget.\n"
    "NONE\n"
    "  Nothing worth remembering.\n"
    "\n"
    "Rules:\n"
    "- Only what the USER said about themselves or asked you to remember; never what the "
    "ASSISTANT said.\n"
    "- Other people, pets and things are never the user: their names, cities and jobs go "
    "in a NOTE, never in SET name, city or job.\n"
    "- What the user does not do, does not have or does not like is never stored as if it "
    "were true.\n"
    "- Wishes, plans, daydreams and \"if\" sentences are not facts.\n"
    "- Questions, greetings, small talk, jokes and one-off instructions for this reply: "
    "NONE.\n"
    "- When a fact under ### known profile changes, SET the same key again with the new "
    "value.\n"
    "- Write each fact once, at most ten lines.\n"
    "\n"
    "Examples:\n"
    "USER: I'm Priya, I teach maths in Nairobi.\n"
    "### output\n"
    "SET name=Priya\n"
    "SET job=maths teacher\n"
    "SET city=Nairobi\n"
    "\n"
    "USER: My sister Zoe is a pilot in Oslo. I don't eat fish.\n"
    "### output\n"
    "NOTE The user's sister Zoe is a pilot in Oslo.\n"
    "NOTE The user does not eat fish.\n"
    "\n"
    "### known profile\n"
    "- city=Nairobi\n"
    "- pet=a parrot\n"
    "USER: I moved to Accra last month. Forget the parrot, please.\n"
    "### output\n"
    "SET city=Accra\n"
    "FORGET pet\n"
    "\n"
    "USER: What time is it in Tokyo?\n"
    "### output\n"
    "NONE\n"
    "\n"
    "Now the real exchange.\n"
    "\n"
)

EXAMPLE_VALUES: frozenset[str] = frozenset(
    v.lower() for v in re.findall(r"^SET [a-z_]+=(.+)$", REFLECTION_PREFIX, re.M))
"""Lower-cased values of :data:`REFLECTION_PREFIX`'s own ``SET`` examples: a small model
copies them ("city=Nairobi"); the grounding guard believes one only when the user wrote
it (:func:`actors.policy.grounding.filter_ungrounded`'s ``examples``)."""

_WS_RE = re.compile(r"\s+")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def clip_text(text: str, max_chars: int) -> str:
    """Whitespace-collapse ``text`` and clip it to at most ``max_chars`` chars.

    Runs of whitespace (including newlines and CR) become one space, the ends are
    trimmed, and lone surrogates are removed. A text longer than ``max_chars`` keeps its
    first ``max_chars - 1`` chars followed by :data:`ELLIPSIS`, so the result is never
    longer than ``max_chars``.

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
        shown = INERT if reads_as_instruction(f"{key} {value}") else value
        lines.append(f"- {k}={clip_text(shown, KNOWN_PROFILE_VALUE_CHARS)}")
    if not lines:
        return ""
    return "### known profile\n" + "\n".join(lines) + "\n\n"


def build_reflection_prompt(
    known_profile: list[tuple[str, str]],
    user_message: str,
    assistant_reply: str,
    *,
    earlier: list[str] | None = None,
    carried: list[tuple[str, str]] | None = None,
) -> str:
    """Return the full reflection prompt: :data:`REFLECTION_PREFIX` + variable tail.

    ``known_profile`` is a list of ``(key, value)`` pairs already chosen by the memory
    actor (active facts, most relevant first); only the first 40 non-empty keys are
    listed, each value whitespace-collapsed and clipped to 80 chars. An
    empty list omits the ``### known profile`` section.

    ``earlier`` (user messages already reflected on, context only) is listed under
    ``### earlier in this conversation``; ``carried`` exchanges (``(user, assistant)``
    whose own reflection was interrupted) come before the current one, each as a
    ``USER:``/``ASSISTANT:`` pair. Every text is whitespace-collapsed and clipped to
    1000 chars. The prompt ends with ``"\n\n### output\n"`` so a completion
    constrained by :data:`actors.reflection.grammar.REFLECTION_GRAMMAR` starts on a
    fresh line.

    Pure and deterministic; never raises for any ``str`` input.
    """
    def clean(text: str) -> str:
        # The exchange is text, never template syntax (``### output``, ``<|im_start|>``…).
        return neutralise(clip_text(text, EXCHANGE_CLIP_CHARS))

    context = ""
    if earlier:
        context = ("### earlier in this conversation (already remembered; context only)\n"
                   + "".join(f"USER: {clean(u)}\n" for u in earlier) + "\n")
    exchanges = "".join(f"USER: {clean(u)}\nASSISTANT: {clean(a)}\n"
                        for u, a in [*(carried or []), (user_message, assistant_reply)])
    return (
        REFLECTION_PREFIX
        + _known_profile_block(known_profile)
        + context
        + exchanges
        + "\n### output\n"
    )
