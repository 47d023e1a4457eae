"""Whether a user's message can hold anything to remember, before any model call.

:func:`skip_reason` spares the reflection's model call for small talk, questions,
requests and messages about nobody; a forget request or a standing preference is never
skipped.
"""

from __future__ import annotations

from .forget import forget_intent
from .grounding import is_trivial_window
from .stance import about_user, is_question_only, is_request_only
from .standing import standing_preferences


def skip_reason(user_message: str) -> str | None:
    """Why no model call is needed for this message, or None: ``trivial`` (greetings,
    pings, one-off echo commands), ``question`` (it only asks), ``request`` (it only asks
    the assistant to do something: "tell me a story about a fox"), ``impersonal``
    (nothing in it speaks of the user). A forget request is never skipped."""
    if forget_intent(user_message) or standing_preferences(user_message):
        return None
    if is_trivial_window(user_message):
        return "trivial"
    if is_question_only(user_message):
        return "question"
    if is_request_only(user_message):
        return "request"
    if not about_user(user_message):
        return "impersonal"
    return None
