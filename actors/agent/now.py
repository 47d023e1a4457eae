"""The tail's sense of time: a ``now:`` line in ``### world``.

"My thesis is due March 14th" can only become "your thesis is due in 9 days" when the
model knows today's date. :func:`now_line` renders the current date and time in the
user's time zone: the profile fact ``timezone`` (or ``time_zone``, ``tz``) when it names
an IANA zone the machine knows (``Europe/Paris``), else the machine's own zone. It sits
in the tail (``### world``), never in the stable prefix, so the prefix's KV cache is
untouched; the tail already changes from turn to turn after ``### recalled``.
"""

from __future__ import annotations

from datetime import datetime, timezone

from actors.store.dates import TIMEZONE_KEYS, resolve_zone, user_zone

__all__ = ["TIMEZONE_KEYS", "now_line", "user_zone"]


def now_line(zone: str | None = None, now: datetime | None = None) -> str:
    """``now: Wednesday 2 December 2026, 05:36 (Europe/Paris)``: ``now`` (default: the
    current time) in ``zone`` when it is an IANA zone name this machine knows, else in
    the machine's local zone (shown as its abbreviation or UTC offset). Never raises."""
    moment = now or datetime.now(timezone.utc)
    tz, label = resolve_zone(zone)
    if tz is not None:
        moment = moment.astimezone(tz)
    else:
        moment = moment.astimezone()
        label = moment.tzname() or moment.strftime("%z")
    return (f"now: {moment.strftime('%A')} {moment.day} {moment.strftime('%B %Y')}, "
            f"{moment.strftime('%H:%M')} ({label})")
