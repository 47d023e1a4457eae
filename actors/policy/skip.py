"""Whether a user's message can hold anything to remember, before any model call.

:func:`skip_reason` spares the reflection's model call for small talk, questions,
requests and messages about nobody; a forget request or a standing preference is never
skipped.
"""

from __future__ import annotations

from .forget import forget_intent
from .grounding import is_trivial_window
from .stance import about_user, clauses, is_question_only, is_request_only
from .standing import standing_preferences


def skip_reason(user_message: str, tool_request: bool = False) -> str | None:
    """Why no model call is needed for this message, or None: ``trivial`` (greetings,
    pings, one-off echo commands), ``question`` (it only asks), ``request`` (it only asks
    the assistant to do something: "tell me a story about a fox"), ``tool_request``
    (``tool_request``: one of the user's tools was called for it, and it is one sentence —
    "commit my staged changes with the message 'fix typo'" is the tool's work, not
    something to remember about the user; the reflection model stored its argument as a
    fact), ``impersonal`` (nothing in it speaks of the user). A forget request is never
    skipped."""
    if forget_intent(user_message) or standing_preferences(user_message):
        return None
    if tool_request and len(clauses(user_message)) <= 1:
        return "tool_request"
    if is_trivial_window(user_message):
        return "trivial"
    if is_question_only(user_message):
        return "question"
    if is_request_only(user_message):
        return "request"
    if not about_user(user_message):
        return "impersonal"
    return None
