"""What each dashboard page's template is given: one typed view per page.

A view holds the memory records as the typed replies of :mod:`actors.memory.ops` (a
:class:`~actors.store.records.Note`, a :class:`~actors.store.records.ProfileFact`, …,
read by their attributes in the templates) and what the page adds (who wrote what, the
search form's state). Reports whose shape docs/protocol.md gives rather than a type
(``memory.stats``, the activity log's entries, the agent's sessions) stay JSON objects.
:func:`context` turns a view into the template's names.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from actors.store.records import Lesson, Link, Note, Procedure, ProfileFact

from .charts import DayChart

__all__ = ["FactPage", "GivenNote", "LessonsPage", "NotePage", "NotesPage", "OverviewPage",
           "ProfilePage", "View", "context"]

Writers = dict[str | int, str]
"""Which app last wrote each fact key and note id (from the activity log)."""


@dataclass(frozen=True)
class ProfilePage:
    """``/ui/profile``: the active facts."""

    facts: list[ProfileFact]
    writers: Writers
    nav: str = "profile"


@dataclass(frozen=True)
class FactPage:
    """``/ui/profile/KEY``: every version of one fact, oldest first."""

    key: str
    history: list[ProfileFact]
    writers: Writers
    nav: str = "profile"


@dataclass(frozen=True)
class NotesPage:
    """``/ui/notes``: notes found (or the newest), the search form's state, and for each
    superseded note the note that supersedes it (``newer``)."""

    notes: list[Note]
    q: str
    mode: Literal["keyword", "meaning"]
    archived: Literal["active", "archived", "all"]
    writers: Writers
    newer: dict[int, int]
    team: str | None = None
    """The daemon's team (``memory.store.team`` on PostgreSQL), None without one."""
    space: Literal["own", "team"] = "own"
    """Whose notes are shown: the person's or the team space's."""
    confirm: int | None = None
    """A team note whose removal from the team space is to be confirmed."""
    nav: str = "notes"


@dataclass(frozen=True)
class NotePage:
    """``/ui/notes/ID``: one note (None: gone) with its links; ``confirm`` asks before
    forgetting it."""

    note: Note | None
    links: list[Link]
    confirm: str | None
    writers: Writers
    team: str | None = None
    """The daemon's team: the page offers to share the note with it."""
    shared: int | None = None
    """The id of the team space's copy, right after the note was shared."""
    nav: str = "notes"


@dataclass(frozen=True)
class LessonsPage:
    """``/ui/lessons``: the active lessons and procedures."""

    lessons: list[Lesson]
    procedures: list[Procedure]
    nav: str = "lessons"


@dataclass(frozen=True)
class GivenNote:
    """A note the last turn was given: its id and text (None: forgotten since); ``team``:
    a note of the team space (its id there)."""

    id: int
    content: str | None
    team: bool = False


@dataclass(frozen=True)
class OverviewPage:
    """``/ui``: counts (``memory.stats``), memory over time, what the last turn was given
    (fact ``keys``, ``notes``, ``lessons`` / ``procedures`` ids, ``at``), the last
    ``turn.context`` entry, and recall / reflection / turn figures."""

    stats: dict[str, Any]
    chart: DayChart
    given_keys: list[str] = field(default_factory=list)
    given_notes: list[GivenNote] = field(default_factory=list)
    given_lessons: list[int] = field(default_factory=list)
    given_procedures: list[int] = field(default_factory=list)
    given_at: int | None = None
    last: dict[str, Any] | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    nav: str = "overview"


View = ProfilePage | FactPage | NotesPage | NotePage | LessonsPage | OverviewPage


def context(view: View) -> dict[str, Any]:
    """The template's names: the view's fields (records stay typed)."""
    return {f.name: getattr(view, f.name) for f in dataclasses.fields(view)}
