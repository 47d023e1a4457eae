"""When a memory was written, in the user's time zone (issue 24, item 3).

"Where did I live before?", "what did I say last week?" and "when did Caroline go to the
support group?" need the date each memory was written next to it. This module renders
that date compactly -- ``8 May 2023``, day month year, the same words as the tail's
``now:`` line -- and resolves the user's time zone from the profile.

The date is absolute, never relative ("3 days ago"): a relative age would change every
hour and rewrite ``### memory-index``, the tail's first section, so the LLM server's
prompt cache would stop covering it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["TIMEZONE_KEYS", "user_zone", "resolve_zone", "written_date", "relative_to_now"]

TIMEZONE_KEYS = ("timezone", "time_zone", "tz")
"""Profile keys read as the user's time zone, first found wins."""


def user_zone(facts: Iterable[Any]) -> str | None:
    """The value of the first :data:`TIMEZONE_KEYS` fact among ``facts`` (objects with
    ``key`` and ``value``), stripped; None when there is none. The name is not checked
    here: :func:`resolve_zone` falls back to the machine's zone for an unknown one."""
    by_key = {f.key: f.value for f in facts}
    for key in TIMEZONE_KEYS:
        if str(by_key.get(key, "")).strip():
            return str(by_key[key]).strip()
    return None


def resolve_zone(zone: str | None) -> tuple[tzinfo | None, str | None]:
    """``(tzinfo, label)`` for an IANA zone name this machine knows (``Europe/Paris``);
    ``(None, None)`` -- meaning the machine's local zone -- for None, an empty or an
    unknown name. Never raises."""
    if zone:
        try:
            return ZoneInfo(zone), zone
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
    return None, None


def written_date(ms: int, zone: str | None = None) -> str:
    """``8 May 2023``: the Unix-ms instant ``ms`` as a date in ``zone`` (see
    :func:`resolve_zone`; the machine's zone when None or unknown). An instant outside
    the years datetime can hold gives ``""``. Never raises."""
    tz, _ = resolve_zone(zone)
    try:
        moment = datetime.fromtimestamp(ms / 1000, timezone.utc)
        moment = moment.astimezone(tz) if tz is not None else moment.astimezone()
    except (OverflowError, OSError, ValueError):
        return ""
    return f"{moment.day} {moment.strftime('%b %Y')}"


_WEEKDAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_UNITS = "days?|weeks?|weekends?|months?|years?|hours?"
_RELATIVE = re.compile(
    r"\b(?:today|tonight|tomorrow|yesterday|this (?:morning|afternoon|evening)"
    rf"|(?:next|last|this|coming|past) (?:{_WEEKDAYS}|{_UNITS}|spring|summer|autumn|fall|winter)"
    rf"|in (?:a|an|one|two|three|four|five|six|\d+) (?:{_UNITS})|(?:{_UNITS}) ago|{_WEEKDAYS}"
    # German, French, Spanish: the commonest words that only mean something from a date
    r"|heute|morgen|gestern|n[äa]chste[nrs]? woche|letzte[nrs]? woche"
    r"|aujourd'hui|demain|hier|la semaine (?:prochaine|derni[èe]re)"
    r"|hoy|mañana|ayer|la (?:pr[óo]xima|pasada) semana|la semana (?:que viene|pasada))\b",
    re.IGNORECASE)


def relative_to_now(text: str) -> bool:
    """Whether ``text`` holds a time word whose meaning depends on when it was said
    ("next Friday", "tomorrow", "in two weeks", "3 days ago", a bare weekday; and the
    commonest German, French and Spanish ones). ``### profile`` then shows the day the
    fact was written, so "my dentist appointment is next Friday" can still be placed a
    week later (issue 24)."""
    return bool(_RELATIVE.search(text))
