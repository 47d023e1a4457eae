"""Modal screens of the memory browser: a row's detail (with ``g`` link expansion on
notes), the forget confirmation, the profile-fact editor and the key help.

Each is a textual ``ModalScreen``; Escape closes any of them. Text from memory is
always shown without markup, so stored brackets never break the display.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from actors.agent.messages import ApprovalRequest
from actors.memory import ops
from actors.memory.client import MemoryRunner
from actors.store.records import Link, Note, ProfileFact

from ..approval_text import approval_text
from ..client import ClientError
from ..safe_text import visible
from .render import neighbourhood

KEYS_HELP = """Manage → Memory keys

  j / k        move down / up (arrows too)
  Enter        detail of the row (Esc closes)
  r            refresh now
  a            auto-refresh every 5 s (on / off)
  [ / ]        previous / next channel
  1 … 6        profile notes lessons procedures links votes
  f            notes: active / archived / all
  /            keyword search (Enter runs it, Esc clears it)
  d            forget the fact or note (asks first)
  e            edit the profile fact's value
  n            add a profile fact (1) or a note (2)
  g            in a note's detail: expand its link neighbourhood
  ?            this help
  Esc          clear the search, else back to the chat

The list also refreshes by itself when memory changes."""

_MODAL_CSS = """
{name} {{ align: center middle; }}
{name} > Vertical {{ width: 76; max-width: 100%; height: auto; max-height: 22;
    border: thick $primary; background: $surface; padding: 0 1; }}
{name} VerticalScroll {{ height: auto; max-height: 18; }}
{name} .hint {{ color: $text-muted; }}
{name} .error {{ color: $error; }}
"""


class DetailScreen(ModalScreen[None]):
    """The detail of one row: ``load`` returns its lines. On a note (``note_id``
    set), each ``g`` expands the link neighbourhood by one more hop, read from
    ``memory.links.list`` and ``memory.notes.recall`` through ``memory``."""

    DEFAULT_CSS = _MODAL_CSS.format(name="DetailScreen")
    BINDINGS = [
        Binding("escape,q", "close", "Close"),
        Binding("j", "scroll(1)", "Down", show=False),
        Binding("k", "scroll(-1)", "Up", show=False),
        Binding("g", "expand", "Expand links"),
    ]

    def __init__(self, title: str, load: Callable[[], Awaitable[list[str]]],
                 memory: MemoryRunner, note_id: int | None = None) -> None:
        super().__init__()
        self.title_text = title
        self.load = load
        self.memory = memory
        self.note_id = note_id
        self.depth = 0
        self.lines: list[str] = []
        self.extra: list[str] = []

    def compose(self) -> ComposeResult:
        """Title, scrollable body, key hint."""
        with Vertical():
            yield Static(visible(self.title_text), classes="hint", markup=False)
            with VerticalScroll():
                yield Static("loading…", id="detail-body", markup=False)
            hint = "Esc close · j/k scroll" + (" · g expand links" if self.note_id else "")
            yield Static(hint, classes="hint", markup=False)

    def on_mount(self) -> None:
        """Load the detail in a worker, so Esc closes the dialog at once even while a
        slow daemon answers (a daemon error becomes its text)."""
        self.run_worker(self._load_body(), group="detail", exit_on_error=False)

    async def _load_body(self) -> None:
        try:
            self.lines = await self.load()
        except ClientError as exc:
            self.lines = [f"error: {exc}"]
        self._show_body()

    def _show_body(self) -> None:
        self.query_one("#detail-body", Static).update(
            visible("\n".join(self.lines + self.extra)))

    def body_text(self) -> str:
        """The detail's current text (``""`` before it is composed)."""
        found = self.query("#detail-body")
        return str(found.first(Static).content) if found else ""

    def action_close(self) -> None:
        """Close the detail."""
        self.dismiss(None)

    def action_scroll(self, delta: int) -> None:
        """Scroll the body by ``delta`` lines."""
        box = self.query_one(VerticalScroll)
        box.scroll_to(y=box.scroll_y + delta, animate=False)

    def action_expand(self) -> None:
        """One more hop of the note's link neighbourhood (notes only), read in a worker
        (a newer ``g`` replaces a walk still running)."""
        if self.note_id is None:
            self.notify("g expands links of a note's detail only", severity="warning")
            return
        self.depth += 1
        self.run_worker(self._expand(self.depth), group="expand", exclusive=True,
                        exit_on_error=False)

    async def _expand(self, depth: int) -> None:
        try:
            edges, notes = await self._walk(depth)
        except ClientError as exc:
            self.extra = ["", f"error: {exc}"]
        else:
            assert self.note_id is not None
            self.extra = [""] + neighbourhood(self.note_id, edges, notes, depth)
        self._show_body()

    async def _walk(self, depth: int) -> tuple[list[Link], dict[int, Note]]:
        """Edges and notes within ``depth`` hops of the note (BFS over the daemon)."""
        edges: dict[tuple[int, int, str], Link] = {}
        notes: dict[int, Note] = {}
        assert self.note_id is not None
        frontier, seen = [self.note_id], {self.note_id}
        for _ in range(depth):
            nxt = []
            for nid in frontier:
                for e in await self.memory.run(ops.LinksList(id=nid, limit=1000)):
                    edges[(e.from_id, e.to_id, e.kind)] = e
                    for other in (e.from_id, e.to_id):
                        if other not in seen:
                            seen.add(other)
                            nxt.append(other)
            frontier = nxt
        for nid in seen:
            found = await self.memory.run(ops.NotesRecall(id=nid))
            if found:
                notes[nid] = found[0]
        return list(edges.values()), notes


class ConfirmScreen(ModalScreen[bool]):
    """Ask a yes/no question; dismisses with True on ``y``, False on ``n`` or Esc."""

    DEFAULT_CSS = _MODAL_CSS.format(name="ConfirmScreen")
    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        """The question and the keys."""
        with Vertical():
            yield Static(visible(self.question), id="question", markup=False)
            yield Static("y = yes · n / Esc = no", classes="hint", markup=False)

    def action_answer(self, yes: bool) -> None:
        """Close with the answer."""
        self.dismiss(yes)


class ApprovalScreen(ModalScreen[str]):
    """A tool call waiting for the person's answer (docs/tools.md): the call, its
    arguments, the tool's description; dismisses with ``once`` (``y``), ``always``
    (``a``) or ``deny`` (``n`` or Esc)."""

    DEFAULT_CSS = _MODAL_CSS.format(name="ApprovalScreen")
    BINDINGS = [Binding("y", "answer('once')", "Allow once"),
                Binding("a", "answer('always')", "Always"),
                Binding("n,escape", "answer('deny')", "Deny")]

    def __init__(self, frame: ApprovalRequest) -> None:
        super().__init__()
        self.frame = frame

    def compose(self) -> ComposeResult:
        """The request and the keys."""
        with Vertical():
            yield Static(visible(approval_text(self.frame)), id="question", markup=False)
            yield Static(f"y = allow once · a = always allow {self.frame.server}."
                         f"{self.frame.tool} · n / Esc = deny (no answer in "
                         f"{self.frame.timeout_ms // 1000} s is a deny)", classes="hint",
                         markup=False)

    def action_answer(self, decision: str) -> None:
        """Close with the decision."""
        self.dismiss(decision)


class _SaveDialog(ModalScreen[bool]):
    """A dialog that saves through ``self.save``: a refusal shows the daemon's message on
    its error line and the dialog stays open; True when saved, False on Esc."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    save: Callable[..., Awaitable[Any]]

    async def _try_save(self, error: Static, *values: str) -> None:
        try:
            await self.save(*values)
        except ClientError as exc:
            error.update(f"not saved: {exc}")
            return
        self.dismiss(True)

    def action_cancel(self) -> None:
        """Close without saving."""
        self.dismiss(False)


class EditFactScreen(_SaveDialog):
    """Edit a profile fact's value. Enter saves through ``save(value)``; a refused
    value (empty, too long, not UTF-8 …) shows the daemon's message and the editor
    stays open. Dismisses with True when saved, False on Esc."""

    DEFAULT_CSS = _MODAL_CSS.format(name="EditFactScreen")

    def __init__(self, fact: ProfileFact, save: Callable[[str], Awaitable[Any]]) -> None:
        super().__init__()
        self.fact = fact
        self.save = save

    def compose(self) -> ComposeResult:
        """What is edited, the value, the error line, the keys."""
        kind = ("pinned" if self.fact.pinned
                else f"contextual [{', '.join(self.fact.keywords)}]")
        with Vertical():
            yield Static(visible(f"edit {self.fact.key} ({kind})"), markup=False)
            yield Input(self.fact.value, id="value")
            yield Static("", id="edit-error", classes="error", markup=False)
            yield Static("Enter save · Esc cancel", classes="hint", markup=False)

    def on_mount(self) -> None:
        """Focus the value."""
        self.query_one("#value", Input).focus()

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter: validate, save, close; or show why not."""
        event.stop()
        value = event.value
        error = self.query_one("#edit-error", Static)
        if not value.strip():
            error.update("the value cannot be empty (to remove the fact, use d)")
            return
        await self._try_save(error, value)


class NewEntryScreen(_SaveDialog):
    """Add a profile fact (``fields`` = key, value) or a note (``fields`` = content).
    Enter in the last field saves through ``save(*values)``; a refusal shows the
    daemon's message and the dialog stays open. Dismisses True when saved, False on Esc."""

    DEFAULT_CSS = _MODAL_CSS.format(name="NewEntryScreen")

    def __init__(self, title: str, fields: list[str],
                 save: Callable[..., Awaitable[Any]]) -> None:
        super().__init__()
        self.title_text = title
        self.fields = fields
        self.save = save

    def compose(self) -> ComposeResult:
        """Title, one input per field, the error line, the keys."""
        with Vertical():
            yield Static(self.title_text, markup=False)
            for name in self.fields:
                yield Input(placeholder=name, id=f"new-{name}")
            yield Static("", id="new-error", classes="error", markup=False)
            yield Static("Enter next / save · Esc cancel", classes="hint", markup=False)

    def on_mount(self) -> None:
        """Focus the first field."""
        self.query_one(f"#new-{self.fields[0]}", Input).focus()

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter: the next field, or (in the last) save and close."""
        event.stop()
        names = [f"new-{name}" for name in self.fields]
        index = names.index(event.input.id or names[-1])
        if index < len(names) - 1:
            self.query_one(f"#{names[index + 1]}", Input).focus()
            return
        values = [self.query_one(f"#{n}", Input).value for n in names]
        error = self.query_one("#new-error", Static)
        empty = [name for name, value in zip(self.fields, values) if not value.strip()]
        if empty:
            error.update(f"{empty[0]} cannot be empty")
            return
        await self._try_save(error, *values)


class HelpScreen(ModalScreen[None]):
    """The browser's keys (``?``)."""

    DEFAULT_CSS = _MODAL_CSS.format(name="HelpScreen")
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close")]

    def compose(self) -> ComposeResult:
        """The key list."""
        with Vertical():
            yield Static(KEYS_HELP, id="help-body", markup=False)

    def action_close(self) -> None:
        """Close the help."""
        self.dismiss(None)
