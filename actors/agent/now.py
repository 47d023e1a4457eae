"""The tail's sense of time (issue 24, item 3): a ``now:`` line in ``### world``.

"My thesis is due March 14th" can only become "your thesis is due in 9 days" when the
model knows today's date. :func:`now_line` renders the current date and time in the
user's time zone: the profile fact ``timezone`` (or ``time_zone``, ``tz``) when it names
an IANA zone the machine knows (``Europe/Paris``), else the machine's own zone. It sits
in the tail (``### world``), never in the stable prefix, so the prefix's KV cache is
untouched; the tail already changes from turn to turn after ``### recalled``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["TIMEZONE_KEYS", "now_line", "user_zone"]

TIMEZONE_KEYS = ("timezone", "time_zone", "tz")
"""Profile keys read as the user's time zone, first found wins."""


def user_zone(facts: Iterable[Any]) -> str | None:
    """The value of the first :data:`TIMEZONE_KEYS` fact among ``facts`` (objects with
    ``key`` and ``value``), stripped; None when there is none."""
    by_key = {f.key: f.value for f in facts}
    for key in TIMEZONE_KEYS:
        if str(by_key.get(key, "")).strip():
            return str(by_key[key]).strip()
    return None


def now_line(zone: str | None = None, now: datetime | None = None) -> str:
    """``now: Wednesday 2 December 2026, 05:36 (Europe/Paris)``: ``now`` (default: the
    current time) in ``zone`` when it is an IANA zone name this machine knows, else in
    the machine's local zone (shown as its abbreviation or UTC offset). Never raises."""
    moment = now or datetime.now(timezone.utc)
    label = None
    if zone:
        try:
            moment, label = moment.astimezone(ZoneInfo(zone)), zone
        except (ZoneInfoNotFoundError, ValueError, OSError):
            label = None
    if label is None:
        moment = moment.astimezone()
        label = moment.tzname() or moment.strftime("%z")
    return (f"now: {moment.strftime('%A')} {moment.day} {moment.strftime('%B %Y')}, "
            f"{moment.strftime('%H:%M')} ({label})")
