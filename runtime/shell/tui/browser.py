"""Manage → Memory: the operator's browser over the daemon's memory.

Six channels — profile, notes, lessons, procedures, links, votes — each a table read
with one ``memory`` op, with these keys (``j``/``k``, Enter, ``r``, ``a``,
``[``/``]``, ``1``–``6``, ``f``, and ``g`` in a note's detail) and ``/`` keyword
search (Esc clears it), ``d`` forget (asks first), ``e`` edit a fact, ``n`` add a fact or
a note, ``?`` help; an empty channel says what fills it. Notes are searched
by the daemon's keyword-only ``memory.notes.search`` (the TUI search never uses
vectors); the other channels are filtered here, word by word.

The browser refreshes itself on ``memory.changed`` and ``reflection`` frames (at most
once per 0.3 s), and every 5 s with ``a``. Errors from the daemon go to the status
line; nothing typed can crash it.
"""

from __future__ import annotations

from typing import Any, Literal

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, Footer, Header, Input, Static

from actors.memory import ops
from actors.memory.ops import MemoryOp
from actors.store.records import Lesson, Link, Note, Procedure, ProfileFact, Vote

from ..client import ClientError
from .bridge import BridgeHost
from .dialogs import ConfirmScreen, DetailScreen, EditFactScreen, HelpScreen, NewEntryScreen
from .render import (
    ARCHIVE_FILTERS,
    CHANNELS,
    COLUMNS,
    channel_status,
    fact_history,
    lesson_detail,
    link_detail,
    matches,
    note_detail,
    one_line,
    Row,
    procedure_detail,
    row_cells,
    row_key,
    vote_detail,
)

AUTO_REFRESH_S = 5.0
"""Seconds between refreshes while auto-refresh (``a``) is on."""

LIST_OPS: dict[str, MemoryOp[list[Any]]] = {
    "profile": ops.ProfileList(), "lessons": ops.LessonsList(limit=100),
    "procedures": ops.ProceduresList(limit=100), "links": ops.LinksList(limit=1000),
    "votes": ops.VotesTail(limit=1000)}
"""The request that lists each channel's rows (the notes' depends on the search)."""


class MemoryTable(DataTable[str | Text]):
    """The rows table; Enter on an empty table still answers (with a status line)."""

    def action_select_cursor(self) -> None:
        """Enter: the row's detail (RowSelected), or "nothing to show" when empty."""
        if self.row_count == 0 and isinstance(self.screen, MemoryScreen):
            self.screen.open_detail()
            return
        super().action_select_cursor()


class MemoryScreen(Screen[None]):
    """The browser. State: the channel, the notes archive filter, the search query,
    the rows shown (dicts as the daemon sent them) and the auto-refresh timer."""

    DEFAULT_CSS = """
    MemoryScreen #channels { height: 1; background: $boost; }
    MemoryScreen DataTable { height: 1fr; }
    MemoryScreen #search { dock: bottom; display: none; }
    MemoryScreen #search.shown { display: block; }
    MemoryScreen #status { height: 1; color: $text-muted; }
    """
    BINDINGS = [
        Binding("escape", "back", "Chat"),
        Binding("j", "move(1)", "Down", show=False),
        Binding("k", "move(-1)", "Up", show=False),
        Binding("r", "reload", "Refresh"),
        Binding("a", "auto", "Auto"),
        Binding("left_square_bracket", "cycle(-1)", "[ Prev", show=False),
        Binding("right_square_bracket", "cycle(1)", "] Next", show=False),
        *(Binding(str(i), f"jump({i - 1})", CHANNELS[i - 1], show=False) for i in range(1, 7)),
        Binding("f", "filter", "Filter"),
        Binding("slash", "search", "Search"),
        Binding("d", "forget", "Forget"),
        Binding("e", "edit", "Edit"),
        Binding("n", "new", "New"),
        Binding("question_mark", "help", "Help"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.channel = "profile"
        self.archive: Literal["active", "archived", "all"] = "active"
        self.query_text = ""
        self.rows: list[Row] = []
        self.loaded: str | None = None  # the channel whose rows are shown, once read
        self.notice = ""
        self.voting_enabled: bool | None = None
        self.auto_timer: Timer | None = None
        self._stale = False
        self.loads = 0  # completed loads (a test sees that r really read again)
        self._live_timer: Timer | None = None

    @property
    def tui(self) -> BridgeHost:
        """The application, as far as this screen uses it."""
        return self.app  # type: ignore[return-value]  # textual types it App[object]

    def compose(self) -> ComposeResult:
        """Channel bar, table, search line, status line."""
        yield Header()
        yield Static(id="channels", markup=False)
        yield MemoryTable(id="rows", cursor_type="row", zebra_stripes=True)
        yield Input(placeholder="keywords (Enter search, Esc clear)", id="search")
        yield Static("", id="status", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        """Read the first channel."""
        self.sub_title = "Manage → Memory"
        self.reload()

    def on_screen_resume(self) -> None:
        """Back on screen: catch up on changes missed meanwhile; focus the table."""
        if self._stale:
            self.reload()
        self.query_one(DataTable).focus()

    # ------------------------------------------------------------------ state

    def status(self, text: str) -> None:
        """Say what a key did (or an error) in the status bar, before the row count;
        it stays until the next notice or channel switch."""
        self.notice = text
        self._draw_status()

    def _draw_status(self) -> None:
        parts = [self.notice] if self.notice else []
        if self.loaded == self.channel:
            parts.append(self._summary())
        self.query_one("#status", Static).update(" · ".join(parts + ["? help"]))

    def status_text(self) -> str:
        """The status bar's text."""
        return str(self.query_one("#status", Static).content)

    def _draw_bar(self) -> None:
        parts = [(f"[{i}:{name}]" if name == self.channel else f" {i}:{name} ")
                 for i, name in enumerate(CHANNELS, 1)]
        extra = []
        if self.channel == "notes":
            extra.append(f"f:{self.archive}")
        if self.query_text:
            extra.append(f"/{one_line(self.query_text, 12)}")
        if self.auto_timer is not None:
            extra.append("auto")
        self.query_one("#channels", Static).update("".join(parts) + " " + " ".join(extra))

    def memory_changed(self, frame: object) -> None:
        """A ``memory.changed`` or ``reflection`` frame arrived: refresh soon (now if
        shown, else when the screen comes back)."""
        if not self.is_mounted or not self.is_current:
            self._stale = True
            return
        if self._live_timer is None:
            self._live_timer = self.set_timer(0.3, self._live_refresh)

    def _tick(self) -> None:
        """The auto-refresh timer: reload when shown, else on return."""
        if self.is_current:
            self.reload()
        else:
            self._stale = True

    def _live_refresh(self) -> None:
        self._live_timer = None
        self.reload()

    # ---------------------------------------------------------------- loading

    def reload(self) -> None:
        """Read the current channel again (keeps the cursor on the same row)."""
        self._stale = False
        self._draw_bar()
        self.run_worker(self._load(), group="load", exclusive=True, exit_on_error=False)

    async def _fetch(self) -> list[Row]:
        """The channel's rows: the store's records (what the table and the renderers
        read)."""
        run = self.tui.bridge.run
        if self.channel == "notes":
            notes = await (run(ops.NotesSearch(query=self.query_text, k=50)) if self.query_text
                           else run(ops.NotesList(limit=200, archived=self.archive)))
            return list(notes)
        rows: list[Row] = await run(LIST_OPS[self.channel])
        if self.channel == "votes":
            votes = (await run(ops.Stats())).get("votes")
            self.voting_enabled = bool(votes.get("enabled")) if isinstance(votes, dict) else None
        if self.query_text:
            rows = [r for r in rows if matches(r, self.query_text)]
        return rows

    async def _load(self) -> None:
        channel = self.channel
        try:
            rows = await self._fetch()
        except ClientError as exc:
            self.status(f"error: {exc}")
            return
        if channel != self.channel:
            return
        self.rows, self.loaded = rows, channel
        self.loads += 1
        table = self.query_one(DataTable)
        keep = None
        if table.row_count and 0 <= table.cursor_row < table.row_count:
            keep = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
        table.clear(columns=True)
        table.add_columns(*COLUMNS[channel])
        width = max(self.size.width, 40)
        index = 0
        for i, row in enumerate(rows):
            key = row_key(row)
            table.add_row(*(Text(c) for c in row_cells(row, width)), key=key)
            if key == keep:
                index = i
        if rows:
            table.move_cursor(row=index)
        self._draw_status()

    def _summary(self) -> str:
        return channel_status(self.channel, len(self.rows), archive=self.archive,
                              query=self.query_text, voting_enabled=self.voting_enabled)

    def current(self) -> Row | None:
        """The row under the cursor, or None when the table is empty."""
        table = self.query_one(DataTable)
        if not self.rows or not 0 <= table.cursor_row < len(self.rows):
            return None
        return self.rows[table.cursor_row]

    # ---------------------------------------------------------------- actions

    def action_back(self) -> None:
        """Esc: closes an open search line, else clears a search in force (the full
        channel again), else back to the chat."""
        search = self.query_one("#search", Input)
        if search.has_class("shown") or self.query_text:
            self._close_search(clear=True)
            return
        self.app.pop_screen()

    def action_move(self, delta: int) -> None:
        """``j`` / ``k``: move the cursor."""
        table = self.query_one(DataTable)
        if table.row_count:
            table.move_cursor(row=max(0, min(table.row_count - 1, table.cursor_row + delta)))

    def action_reload(self) -> None:
        """``r``: refresh now."""
        self.reload()

    def action_auto(self) -> None:
        """``a``: toggle refreshing every :data:`AUTO_REFRESH_S` seconds."""
        if self.auto_timer is None:
            self.auto_timer = self.set_interval(AUTO_REFRESH_S, self._tick)
            self.status(f"auto-refresh on (every {AUTO_REFRESH_S:g} s)")
        else:
            self.auto_timer.stop()
            self.auto_timer = None
            self.status("auto-refresh off")
        self._draw_bar()

    def action_cycle(self, step: int) -> None:
        """``[`` / ``]``: previous / next channel."""
        self.action_jump((CHANNELS.index(self.channel) + step) % len(CHANNELS))

    def action_jump(self, index: int) -> None:
        """``1``–``6``: show channel ``CHANNELS[index]`` (search cleared)."""
        self.channel = CHANNELS[index]
        self.query_text, self.notice = "", ""
        self.rows, self.loaded = [], None
        self.query_one(DataTable).clear(columns=True)
        self.reload()

    def action_filter(self) -> None:
        """``f``: cycle the notes archive filter active → archived → all."""
        if self.channel != "notes":
            self.status("f filters notes only (press 2 for notes)")
            return
        self.archive = ARCHIVE_FILTERS[(ARCHIVE_FILTERS.index(self.archive) + 1) % 3]
        self.query_text = ""
        self.reload()

    def action_search(self) -> None:
        """``/``: open the keyword search line."""
        search = self.query_one("#search", Input)
        search.add_class("shown")
        search.value = self.query_text
        search.focus()

    def _close_search(self, clear: bool) -> None:
        search = self.query_one("#search", Input)
        search.remove_class("shown")
        self.query_one(DataTable).focus()
        if clear and self.query_text:
            self.query_text = ""
            self.reload()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Run the typed search (at most 500 characters, as the daemon takes)."""
        if event.input.id != "search":
            return
        event.stop()
        text = " ".join(event.value.split())
        if len(text) > 500:
            self.status("the search is too long: at most 500 characters")
            return
        self._close_search(clear=False)
        self.query_text = text
        self.reload()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a row: its detail."""
        self.open_detail()

    def open_detail(self) -> None:
        """Enter: the detail of the row under the cursor."""
        row = self.current()
        if row is None:
            self.status("nothing to show here")
            return
        run = self.tui.bridge.run

        async def load() -> list[str]:
            match row:
                case ProfileFact():
                    return fact_history(row.key, await run(ops.ProfileHistory(key=row.key)))
                case Note():
                    found = await run(ops.NotesRecall(id=row.id))
                    if not found:
                        return [f"note #{row.id} is gone"]
                    edges = await run(ops.LinksList(id=row.id, limit=1000))
                    return note_detail(found[0], edges, await self._notes(
                        {e.from_id for e in edges} | {e.to_id for e in edges}))
                case Lesson():
                    lesson = await run(ops.LessonsGet(id=row.id))
                    return lesson_detail(lesson, await self._notes(set(lesson.parent_ids)))
                case Procedure():
                    return procedure_detail(await run(ops.ProceduresGet(id=row.id)))
                case Link():
                    return link_detail(row, await self._notes({row.from_id, row.to_id}))
                case Vote():
                    return vote_detail(row)

        title = f"{self.channel} · {' '.join(row_cells(row, 60)[:2])}"
        note_id = row.id if isinstance(row, Note) else None
        self.app.push_screen(DetailScreen(title, load, self.tui.bridge, note_id=note_id))

    async def _notes(self, ids: set[int]) -> dict[int, Note]:
        out = {}
        for nid in sorted(ids):
            found = await self.tui.bridge.run(ops.NotesRecall(id=nid))
            if found:
                out[nid] = found[0]
        return out

    def action_forget(self) -> None:
        """``d``: forget the fact (``memory.profile.remove``, history kept) or the note
        (``memory.notes.forget``) under the cursor, after a y/n confirmation."""
        row = self.current()
        if self.channel not in ("profile", "notes"):
            self.status(f"{self.channel} are read-only here: d forgets facts and notes")
            return
        if row is None:
            self.status("nothing to forget")
            return
        request: ops.ProfileRemove | ops.NotesForget
        if isinstance(row, ProfileFact):
            question = f"Forget the profile fact {row.key} = {one_line(row.value, 40)}?"
            request, label = ops.ProfileRemove(key=row.key), row.key
        elif isinstance(row, Note):
            question = f"Forget note #{row.id}: {one_line(row.content, 50)}?"
            request, label = ops.NotesForget(id=row.id), f"note #{row.id}"
        else:
            return

        async def answered(yes: bool | None) -> None:
            if not yes:
                self.status("kept")
                return
            try:
                removed = (await self.tui.bridge.run(request)).removed
            except ClientError as exc:
                self.status(f"error: {exc}")
                return
            self.status(f"forgot {label}" if removed else f"{label} was already gone")
            self.reload()

        self.app.push_screen(ConfirmScreen(question), answered)

    def action_edit(self) -> None:
        """``e``: edit the value of the profile fact under the cursor."""
        row = self.current()
        if not isinstance(row, ProfileFact):
            self.status("e edits a profile fact (press 1 for the profile)")
            return

        warnings: list[str] = []

        async def save(value: str) -> Any:
            fact = await self.tui.bridge.run(ops.ProfileSet(
                key=row.key, value=value, pinned=row.pinned, keywords=row.keywords or None))
            if fact.warning:
                warnings.append(fact.warning)
            return fact

        def done(saved: bool | None) -> None:
            if saved:
                self.status(f"saved {row.key}" + (f" (warning: {warnings[0]})"
                                                     if warnings else ""))
                self.reload()
            else:
                self.status("not changed")

        self.app.push_screen(EditFactScreen(row, save), done)

    def action_new(self) -> None:
        """``n``: add a profile fact (key, value) or a note, in those channels."""
        run = self.tui.bridge.run
        if self.channel == "profile":
            async def save(key: str, value: str) -> Any:
                return await run(ops.ProfileSet(key=key.strip(), value=value))
            screen = NewEntryScreen("new profile fact (pinned: always shown)",
                                    ["key", "value"], save)
        elif self.channel == "notes":
            async def save_note(content: str) -> Any:
                return await run(ops.NotesStore(content=content))
            screen = NewEntryScreen("new note", ["content"], save_note)
        else:
            self.status(f"n adds a fact (1 profile) or a note (2 notes); {self.channel} "
                        "are read-only here")
            return

        def done(saved: bool | None) -> None:
            self.status("saved" if saved else "nothing added")
            if saved:
                self.reload()

        self.app.push_screen(screen, done)

    def action_help(self) -> None:
        """``?``: the key help."""
        self.app.push_screen(HelpScreen())
