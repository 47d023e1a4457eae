"""When a memory was written, in the user's time zone (the tail's time awareness).

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
from datetime import date, datetime, timedelta, timezone, tzinfo
from typing import NamedTuple, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["TIMEZONE_KEYS", "TimeWindow", "user_zone", "resolve_zone", "written_date",
           "relative_to_now", "time_window", "named_day", "from_today", "day_note"]

TIMEZONE_KEYS = ("timezone", "time_zone", "tz")
"""Profile keys read as the user's time zone, first found wins."""


class _KeyValue(Protocol):
    """A profile fact as :func:`user_zone` reads it (``ProfileFact`` is one)."""

    @property
    def key(self) -> str: ...

    @property
    def value(self) -> str: ...


def user_zone(facts: Iterable[_KeyValue]) -> str | None:
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
    week later."""
    return bool(_RELATIVE.search(re.sub(r"_+", " ", text)))


# -- the time a question names -----------------------------------------------------------

class TimeWindow(NamedTuple):
    """A span of time a question names: ``[start_ms, end_ms)`` in Unix ms, and the words
    that named it."""

    start_ms: int
    end_ms: int
    words: str


_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")
_MON = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?" \
       r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_ORD = r"(\d{1,2})(?:st|nd|rd|th)?"
_NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
                 "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "few": 3,
                 "couple of": 2}
_N = r"(\d{1,3}|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a few|a couple of)"
_DAY_MONTH_YEAR = re.compile(rf"\b{_ORD}\s+(?:of\s+)?{_MON}\.?,?\s*(\d{{4}})?\b", re.I)
_MONTH_DAY_YEAR = re.compile(rf"\b{_MON}\.?\s+{_ORD}\b(?:,?\s*(\d{{4}}))?", re.I)
_ISO_DAY = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MONTH_YEAR = re.compile(rf"\b{_MON}\.?,?\s+(\d{{4}})\b", re.I)
_IN_MONTH = re.compile(rf"\b(?:in|during|of)\s+{_MON}\b(?!\s*\d)", re.I)
_AGO = re.compile(rf"\b{_N}\s+(day|week|month)s?\s+ago\b", re.I)
_WIDEN = re.compile(r"\b(before|after|week|weekend|around|since)\b[^.?!]{0,24}$", re.I)


def _month_number(word: str) -> int:
    return next(i for i, m in enumerate(_MONTHS, 1) if m.startswith(word.lower()[:3]))


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def time_window(text: str, now_ms: int, zone: str | None = None) -> TimeWindow | None:
    """The span of time ``text`` names, in the user's ``zone`` (see
    :func:`resolve_zone`), relative to ``now_ms``; None when it names none. Never raises.

    Read, first match wins: a day ("8 May 2023", "May 8th, 2023", "2023-05-08", "on 8th
    December"; without a year, the nearest such day to now) gives that day and one day
    either side (a note says "yesterday" the day after), widened to eight days either
    side after "before", "after", "week", "weekend", "around" or "since"; a month with a
    year ("May 2023") or after "in"/"during"/"of" ("in May": the latest May up to now) gives
    the month and a day either side; "yesterday", "today", "N days/weeks/months ago",
    "last/this week", "last weekend", "last/this month" and "last year" give the day,
    week, weekend, month or year they mean (weeks start on Monday). English only.
    """
    tz, _ = resolve_zone(zone)
    try:
        now = datetime.fromtimestamp(now_ms / 1000, timezone.utc)
        now = now.astimezone(tz) if tz is not None else now.astimezone()
        return _window(text or "", now)
    except (OverflowError, OSError, ValueError):
        return None


def _find_day(text: str, around: datetime) -> tuple[datetime, re.Match[str]] | None:
    """The first day ``text`` names absolutely ("2023-05-08", "8 May 2023", "May 8th"; a
    day without a year is the one nearest to ``around``), as midnight in ``around``'s
    zone, with the words that named it; None when it names none."""
    midnight = around.replace(hour=0, minute=0, second=0, microsecond=0)

    def on_day(year: int | None, month: int, day: int) -> datetime | None:
        options = []
        for y in (year,) if year is not None else (around.year - 1, around.year, around.year + 1):
            try:
                options.append(midnight.replace(year=y, month=month, day=day))
            except ValueError:
                pass
        return min(options, key=lambda d: abs(d - midnight)) if options else None

    for m in _ISO_DAY.finditer(text):
        if (day := on_day(int(m.group(1)), int(m.group(2)), int(m.group(3)))) is not None:
            return day, m
    for rx, order in ((_DAY_MONTH_YEAR, "dmy"), (_MONTH_DAY_YEAR, "mdy")):
        for m in rx.finditer(text):
            d, mon = (m.group(1), m.group(2)) if order == "dmy" else (m.group(2), m.group(1))
            if mon.lower() == "may" and not mon[0].isupper():
                continue  # "may" the verb
            day = on_day(int(m.group(3)) if m.group(3) else None, _month_number(mon), int(d))
            if day is not None:
                return day, m
    return None


def _window(text: str, now: datetime) -> TimeWindow | None:
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if found := _find_day(text, now):
        day, m = found
        slack = timedelta(days=8 if _WIDEN.search(text[:m.start()]) else 1)
        return TimeWindow(_ms(day - slack), _ms(day + timedelta(days=1) + slack),
                          m.group(0).strip())
    for m in _MONTH_YEAR.finditer(text):
        if m.group(1).lower() == "may" and not m.group(1)[0].isupper():
            continue
        first = midnight.replace(year=int(m.group(2)), month=_month_number(m.group(1)), day=1)
        return _month_span(first, m.group(0))
    for m in _IN_MONTH.finditer(text):
        if m.group(1).lower() == "may" and not m.group(1)[0].isupper():
            continue
        month = _month_number(m.group(1))
        year = now.year if month <= now.month else now.year - 1
        return _month_span(midnight.replace(year=year, month=month, day=1), m.group(0))
    return _relative(text, now, midnight)


def _month_span(first: datetime, words: str) -> TimeWindow:
    nxt = first.replace(year=first.year + (first.month == 12), month=first.month % 12 + 1)
    return TimeWindow(_ms(first - timedelta(days=1)), _ms(nxt + timedelta(days=1)), words)


def _relative(text: str, now: datetime, midnight: datetime) -> TimeWindow | None:
    low = text.lower()
    day = timedelta(days=1)
    monday = midnight - timedelta(days=midnight.weekday())
    month_start = midnight.replace(day=1)
    if m := _AGO.search(low):
        word = m.group(1)
        n = int(word) if word.isdigit() else _NUMBER_WORDS.get(word.removeprefix("a "), 1)
        unit, half = {"day": (1, 1), "week": (7, 4), "month": (30, 15)}[m.group(2)]
        centre = midnight - timedelta(days=n * unit)
        return TimeWindow(_ms(centre - timedelta(days=half)),
                          _ms(centre + timedelta(days=1 + half)), m.group(0))
    spans = (
        ("yesterday", midnight - day, midnight),
        ("today", midnight, midnight + day),
        ("tonight", midnight, midnight + day),
        ("this morning", midnight, midnight + day),
        ("last weekend", monday - 2 * day, monday),
        ("this weekend", monday + 5 * day, monday + 7 * day),
        ("last week", monday - 7 * day, monday),
        ("past week", midnight - 7 * day, midnight + day),
        ("this week", monday, monday + 7 * day),
        ("last month", (month_start - day).replace(day=1), month_start),
        ("past month", midnight - 30 * day, midnight + day),
        ("this month", month_start, (month_start + 32 * day).replace(day=1)),
        ("last year", month_start.replace(year=now.year - 1, month=1),
         month_start.replace(month=1)),
    )
    for words, start, end in spans:
        if re.search(rf"\b{words}\b", low):
            return TimeWindow(_ms(start), _ms(end), words)
    return None


# -- the day a text names, and how far it is from today ----------------------------------

_WEEKDAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_SHIFT = re.compile(rf"\bin\s+{_N}\s+(day|week|month)s?\b|\b{_N}\s+(day|week|month)s?\s+ago\b",
                    re.I)
_WEEKDAY_REF = re.compile(rf"\b(next|this|coming|last)\s+({'|'.join(_WEEKDAY_NAMES)})\b", re.I)
_DAY_WORD = re.compile(r"\b(today|tonight|tomorrow|yesterday)\b", re.I)


def named_day(text: str, said_ms: int | None, zone: str | None = None) -> date | None:
    """The day ``text`` names, or None. Read, first found wins: an absolute day ("25
    December 2026", "Dec 25th", "2026-12-25"; without a year, the one nearest to the day
    it was said) and, when ``said_ms`` (Unix ms) says when the text was written, a day
    relative to that ("tomorrow", "yesterday", "next Friday" -- the first Friday after --
    "last Monday", "in three weeks", "two weeks ago"). Underscores and hyphens read as
    spaces (reflection writes ``next_friday``). In ``zone``; never raises."""
    tz, _ = resolve_zone(zone)
    clean = re.sub(r"[_]+", " ", text or "")
    try:
        said = (datetime.fromtimestamp(said_ms / 1000, timezone.utc) if said_ms is not None
                else datetime.now(timezone.utc))
        said = said.astimezone(tz) if tz is not None else said.astimezone()
        if found := _find_day(clean, said):
            return found[0].date()
        if said_ms is None:
            return None
        return _relative_day(clean, said.date())
    except (OverflowError, OSError, ValueError):
        return None


def _relative_day(text: str, said: date) -> date | None:
    if m := _DAY_WORD.search(text):
        return said + timedelta(days={"today": 0, "tonight": 0, "tomorrow": 1,
                                      "yesterday": -1}[m.group(1).lower()])
    if m := _WEEKDAY_REF.search(text):
        target = _WEEKDAY_NAMES.index(m.group(2).lower())
        if m.group(1).lower() == "last":
            return said - timedelta(days=(said.weekday() - target - 1) % 7 + 1)
        return said + timedelta(days=(target - said.weekday() - 1) % 7 + 1)
    if m := _SHIFT.search(text):
        word, unit, sign = ((m.group(1), m.group(2), 1) if m.group(1)
                            else (m.group(3), m.group(4), -1))
        n = int(word) if word.isdigit() else _NUMBER_WORDS.get(word.lower().removeprefix("a "), 1)
        days = n * {"day": 1, "week": 7, "month": 30}[unit.lower()]
        return said + timedelta(days=sign * days)
    return None


NEAR_PAST_DAYS = 90
NEAR_FUTURE_DAYS = 366
"""How far from today a named day still gets "N days ago" / "in N days": a deadline up
to a year ahead is counted, a past day only within three months (a count of hundreds of
days ago helps nobody)."""


def from_today(day: date, today: date) -> str:
    """``"today"``, ``"tomorrow"``, ``"yesterday"``, ``"in 23 days"``, ``"9 days ago"``;
    ``""`` beyond :data:`NEAR_PAST_DAYS` / :data:`NEAR_FUTURE_DAYS`."""
    n = (day - today).days
    if n < -NEAR_PAST_DAYS or n > NEAR_FUTURE_DAYS:
        return ""
    return {0: "today", 1: "tomorrow", -1: "yesterday"}.get(
        n, f"in {n} days" if n > 0 else f"{-n} days ago")


def day_note(text: str, said_ms: int | None, now_ms: int, zone: str | None = None) -> str:
    """``"18 Dec 2026, in 16 days"``: the day ``text`` names (:func:`named_day`) and how
    far it is from the day of ``now_ms``, both in ``zone``; ``""`` when it names none. The
    default model cannot count days ("3 days left" for 23 in ``bench.deadlines``), so the
    prompt says it ("your thesis is due in 9 days"). A yearly day (a birthday, an
    anniversary, "turns 9 on …") named without a year that has passed this year is
    counted to its next occurrence. Never raises."""
    day = named_day(text, said_ms, zone)
    if day is None:
        return ""
    tz, _ = resolve_zone(zone)
    try:
        now = datetime.fromtimestamp(now_ms / 1000, timezone.utc)
        today = (now.astimezone(tz) if tz is not None else now.astimezone()).date()
    except (OverflowError, OSError, ValueError):
        return ""
    if day < today and _YEARLY.search(text or "") and not _YEAR.search(text or ""):
        day = _next_occurrence(day, today)  # "birthday on 9 November": the coming one
    near = from_today(day, today)
    return f"{day.day} {day.strftime('%b %Y')}" + (f", {near}" if near else "")


_YEARLY = re.compile(
    r"birthday|b-?day|anniversary|\bturns?\s+\w+\s+(?:on|in)\b|name\s*day|geburtstag|"
    r"jahrestag|anniversaire|cumpleaños|aniversario|compleanno|anniversario|aniversário|"
    r"день\s+рождения|годовщин", re.I)
"""Words of a day that comes back every year: its next occurrence is what a question
about it wants ("When is my wife's birthday?" on 6 December, of "9 November": 9 Nov of
next year, not "27 days ago")."""
_YEAR = re.compile(r"\b(?:1[89]|2[0-9])\d\d\b")


def _next_occurrence(day: date, today: date) -> date:
    """The first day on or after ``today`` with ``day``'s month and day (29 February:
    1 March in a year without one)."""
    for year in range(today.year, today.year + 2):
        try:
            candidate = day.replace(year=year)
        except ValueError:
            candidate = date(year, 3, 1)
        if candidate >= today:
            return candidate
    return day
