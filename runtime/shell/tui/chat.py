"""The chat screen: transcript, streamed replies, tool steps, and a side panel of what
memory did this turn (docs/architecture.md §8, docs/protocol.md §3).

Turns are sent with ``debug`` on, so the first ``prompt`` step's tail tells which
notes were recalled and which profile facts were injected
(:func:`~runtime.shell.tui.render.parse_tail`). The ``reflection`` frame of the turn then
says what reflection wrote; the panel fetches those facts' values and notes' previews.

Commands typed in the input: ``/memory`` (the browser), ``/memory dump`` (the active
profile into the transcript), ``/session`` (list), ``/session ID|N|new`` (switch),
``/cancel``, ``/help``, ``/quit``. Anything else is a message to the agent.
"""

from __future__ import annotations

import json
from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, Static

from actors.agent.messages import (ApprovalDone, ApprovalRequest, Decision, ReplyDelta, ReplyText,
                                   Step, TurnFinished, TurnStarted)
from actors.memory import ops
from actors.memory.ops import OPS

from ..client import ClientError, encode_frame
from ..outbound import ErrorFrame, ReflectionFrame
from ..protocol import Say
from ..safe_text import visible
from .bridge import BridgeClosed, BridgeFrame, BridgeHost
from .dialogs import ApprovalScreen
from .render import TurnMemory, one_line, panel_lines, parse_tail, when

HELP = """commands: /memory  open Manage → Memory (also F2)
          /memory dump  print the active profile here
          /session  list sessions; /session ID|N|new  switch
          /title TEXT  give this session a title (/title alone: its first line)
          /cancel  cancel the running turn; /quit  leave (Ctrl+Q)"""

MAX_MESSAGE_BYTES = 500_000
"""Longest message sent (UTF-8 bytes): the daemon closes a connection whose frame passes
``server.maxFrameBytes`` (1 MiB by default), so longer text is refused here."""

MAX_BLOCKS = 500
"""Transcript blocks kept; older ones are dropped so a long session stays fast."""
HISTORY_SHOWN = 20
"""Earlier transcript entries shown when a session is opened or switched to."""

MAX_TURNS = 50
"""Turns whose memory panel is kept (a late ``reflection`` finds its turn)."""

PANEL_WIDTH = 26
"""Characters of text per side-panel line at the smallest panel (30 columns with its
border, padding and scroll bar: an 80-column terminal)."""
PANEL_SHARE, PANEL_MAX = 0.33, 64
"""The panel takes a third of a wider terminal, at most 64 columns (a fixed 30
columns cut reasons and previews in a 120-column terminal)."""


def panel_columns(screen_width: int) -> int:
    """Columns of the side panel for a terminal ``screen_width`` columns wide."""
    return max(PANEL_WIDTH + 4, min(PANEL_MAX, int(screen_width * PANEL_SHARE)))

WRITE_TOOLS = frozenset(name for name, op in OPS.items() if op.tool and op.writes)
"""The agent's tools that change memory (the panel lists their calls)."""


class ChatScreen(Screen[None]):
    """Transcript on the left, memory panel on the right, input below."""

    DEFAULT_CSS = """
    ChatScreen #body { height: 1fr; }
    ChatScreen #transcript { width: 1fr; padding: 0 1; }
    ChatScreen #panel { width: 30; border-left: solid $primary; padding: 0 1;
                        scrollbar-size-vertical: 1; }
    ChatScreen .user { color: $accent; margin-top: 1; }
    ChatScreen .agent { color: $text; }
    ChatScreen .tool { color: $text-muted; }
    ChatScreen .info { color: $text-muted; text-style: italic; }
    ChatScreen .error { color: $error; }
    ChatScreen Input { dock: bottom; }
    """
    BINDINGS = [("escape", "cancel_turn", "Cancel turn")]

    def __init__(self) -> None:
        super().__init__()
        self.turns: dict[str, TurnMemory] = {}
        self.shown_turn: str | None = None
        self.waiting = False  # a say was sent, its turn.started has not come yet
        self.turn: str | None = None  # the running turn of this session
        self._reply: Static | None = None
        self._reply_text = ""
        self._last_sessions: list[dict[str, Any]] = []
        self._approvals: dict[str, ApprovalScreen] = {}  # open dialogs, by request id

    @property
    def busy(self) -> bool:
        """True while a turn of this session runs (or ours is about to start)."""
        return self.waiting or self.turn is not None

    @property
    def tui(self) -> BridgeHost:
        """The application, as far as this screen uses it."""
        return self.app  # type: ignore[return-value]  # textual types it App[object]

    def compose(self) -> ComposeResult:
        """Header, transcript beside the memory panel, input, footer."""
        yield Header()
        with Horizontal(id="body"):
            yield VerticalScroll(id="transcript")
            with VerticalScroll(id="panel"):
                yield Static("MEMORY THIS TURN\n\n(no turn yet)", id="panel-body", markup=False)
        yield Input(placeholder="message, or /memory /session /help", id="say")
        yield Footer()

    def connected(self, session: str) -> None:
        """Called once connected (and after each switch): title and a first line."""
        self.sub_title = f"chat · session {session}"
        self.add_line(f"session {session} — type a message, /help for commands", "info")
        self.query_one("#say", Input).focus()

    def on_screen_resume(self) -> None:
        """Back from Manage → Memory: the input has the focus again."""
        self.query_one("#say", Input).focus()

    # ------------------------------------------------------------- transcript

    def add_line(self, text: str, kind: str = "info") -> Static:
        """Append one block to the transcript (``kind``: user, agent, tool, info,
        error) and scroll to it. Text is shown verbatim (no markup), control characters
        as escapes (:func:`~runtime.shell.safe_text.visible`)."""
        widget = Static(visible(text), classes=kind, markup=False)
        box = self.query_one("#transcript", VerticalScroll)
        extra = len(box.children) + 1 - MAX_BLOCKS
        if extra > 0:
            box.remove_children(list(box.children)[:extra])
        box.mount(widget)
        box.scroll_end(animate=False)
        return widget

    def transcript_text(self) -> str:
        """Everything in the transcript, one block a line (for tests and copying)."""
        return "\n".join(str(w.content) for w in self.query_one("#transcript").query(Static))

    def _show_panel(self, turn: str | None) -> None:
        mem = self.turns.get(turn) if turn else None
        body = self.query_one("#panel-body", Static)
        if mem is None:
            body.update("MEMORY THIS TURN\n\n(no turn yet)")
            return
        self.shown_turn = turn
        width = panel_columns(self.size.width) - 4
        body.update("\n".join(["MEMORY THIS TURN", ""] + panel_lines(mem, width)))

    def on_resize(self, event: Any) -> None:
        """Size the side panel to the terminal and redraw it at that width."""
        self.query_one("#panel").styles.width = panel_columns(event.size.width)
        if self.shown_turn is not None:
            self._show_panel(self.shown_turn)

    def panel_text(self) -> str:
        """The side panel's current text."""
        return str(self.query_one("#panel-body", Static).content)

    # ------------------------------------------------------------------ frames

    def handle_frame(self, frame: BridgeFrame) -> None:
        """Show one daemon frame (docs/protocol.md §3). Frames of other sessions
        (``reflection``, ``memory.changed`` come from every session) stay out of the
        panel."""
        match frame:
            case TurnStarted(turn=turn):
                self.waiting, self.turn = False, turn
                self.turns[turn] = TurnMemory()
                for old in list(self.turns)[:-MAX_TURNS]:
                    del self.turns[old]
                self._reply, self._reply_text = None, ""
                self._show_panel(turn)
            case Step():
                self._step(frame.turn, frame)
            case ReplyDelta(text=text):
                self._reply_text += text
                self._reply_widget().update(f"agent> {self._reply_text}")
            case ReplyText(text=text):
                self._reply_text = text
                self._reply_widget().update(f"agent> {self._reply_text}")
            case TurnFinished(reason=reason):
                self.waiting, self.turn = False, None
                ms = frame.timings.total_ms if frame.timings is not None else None
                if reason not in ("reply", "finish"):
                    why = frame.message or ""
                    self.add_line(f"(turn ended: {reason}{': ' + why if why else ''})",
                                  "error")
                elif ms is not None:
                    self.add_line(f"({reason} in {ms:.0f} ms)", "info")
            case ReflectionFrame(turn=turn) if frame.session == self.tui.bridge.session:
                mem = self.turns.get(turn)
                if mem is not None and mem.reflection is None:
                    mem.reflection = frame
                    self._show_panel(turn)
                    if frame.fact_keys or frame.note_ids:
                        self.run_worker(self._reflection_wrote(turn, frame), group="panel",
                                        exit_on_error=False)
            case ApprovalRequest():
                self.add_line(f"  [tool] {frame.server}.{frame.tool} asks for your approval",
                              "tool")
                dialog = ApprovalScreen(frame)
                self._approvals[frame.request] = dialog
                request = frame.request

                def answered(decision: str | None) -> None:
                    if self._approvals.pop(request, None) is not None:  # (not closed by us)
                        self.run_worker(self._approve(request, decision or "deny"),
                                        group="approval", exit_on_error=False)

                self.app.push_screen(dialog, answered)
            case ApprovalDone(request=request, decision=decision):
                open_dialog = self._approvals.pop(request, None)
                if open_dialog is not None and open_dialog.is_attached:
                    open_dialog.dismiss(decision)  # answered elsewhere, timed out, cancelled
                if decision == "timeout":
                    self.add_line("  [tool] no answer in time: denied", "tool")
            case ErrorFrame():
                self.waiting = False  # our say was refused (busy, …); a running turn goes on
                self.add_line(f"error: {frame.code}: {frame.message}", "error")
            case BridgeClosed(message=message):
                self.waiting, self.turn = False, None
                session = self.tui.bridge.session or "new"
                self.add_line(f"the connection to the daemon was lost: {message}. "
                              f"Is it still running? /session {session} reconnects.", "error")

    async def _approve(self, request: str, decision: str) -> None:
        """Send the dialog's answer (a deny unless it says otherwise)."""
        answer: Decision = "once" if decision == "once" else \
            "always" if decision == "always" else "deny"
        try:
            resolved = await self.tui.bridge.approve(request, answer)
        except ClientError as exc:
            self.add_line(f"error: the answer was not sent: {exc}", "error")
            return
        if resolved:
            said = {"once": "allowed once", "always": "always allowed", "deny": "denied"}
            self.add_line(f"  [tool] {said[answer]}", "tool")

    def _reply_widget(self) -> Static:
        if self._reply is None:
            self._reply = self.add_line("agent> ", "agent")
        else:
            self.query_one("#transcript", VerticalScroll).scroll_end(animate=False)
        return self._reply

    def _step(self, turn: str, frame: Step) -> None:
        mem = self.turns.get(turn)
        match frame.step:
            case "prompt":
                if mem is not None and frame.n == 1:
                    parsed = parse_tail(frame.tail or "")
                    parsed.reflection, parsed.wrote = mem.reflection, mem.wrote
                    self.turns[turn] = parsed
                    self._show_panel(turn)
            case "tool":
                args = json.dumps(frame.args, ensure_ascii=False)
                self.add_line(f"  [tool] {frame.tool} {one_line(args, 160)}", "tool")
                if mem is not None and frame.tool in WRITE_TOOLS:
                    mem.wrote.append(f"tool {(frame.tool or '').removeprefix('memory.')}")
                    self._show_panel(turn)
            case "tool.result":
                outcome = "" if frame.outcome in (None, "ok") else f"{frame.outcome}: "
                self.add_line(f"    → {outcome}{one_line(frame.summary or '', 120)}", "tool")
            case "rewrite":
                self.add_line(f"  (recall query: {frame.query})", "info")
            case "invalid":
                self.add_line(f"  (invalid action: {frame.reason})", "info")
            case "finish":
                self.add_line(f"  (finished: {frame.text or ''})", "info")
            case "error":
                self.add_line(f"  error: {frame.message or ''}", "error")

    async def _reflection_wrote(self, turn: str, frame: ReflectionFrame) -> None:
        """Fetch the values reflection wrote (the frame carries keys and ids only)."""
        mem = self.turns.get(turn)
        if mem is None:
            return
        lines = []
        try:
            facts = {f.key: f for f in await self.tui.bridge.run(ops.ProfileList())}
            for key in frame.fact_keys:
                value = facts[key].value if key in facts else "(gone)"
                lines.append(f"fact {key} = {value}")
            for nid in frame.note_ids:
                found = await self.tui.bridge.run(ops.NotesRecall(id=nid))
                lines.append(f"note #{nid} {found[0].content if found else '(gone)'}")
        except ClientError as exc:
            lines.append(f"(could not read: {exc})")
        mem.wrote.extend(lines)
        if self.shown_turn == turn:
            self._show_panel(turn)

    # ------------------------------------------------------------------- input

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        """A line typed: a command (``/…``) or a message for a turn."""
        if event.input.id != "say":
            return
        text = event.value.strip()
        event.input.value = ""
        if not text:
            return
        if text.startswith("/"):
            await self._command(text)
            return
        if self.busy:
            self.add_line("a turn is still running: wait for it, or /cancel (Esc)", "error")
            return
        # The frame as the client will encode it (JSON escapes can double the text).
        try:
            size = len(encode_frame(Say(text=text, debug=True)).encode("utf-8"))
        except ClientError as exc:
            self.add_line(f"error: {exc}", "error")
            return
        if size > MAX_MESSAGE_BYTES:
            self.add_line(f"that message is too long ({size} bytes; at most "
                          f"{MAX_MESSAGE_BYTES}): not sent", "error")
            return
        self.add_line(f"you> {text}", "user")
        self.waiting = True
        self.run_worker(self._say(text), group="say", exit_on_error=False)

    async def _say(self, text: str) -> None:
        try:
            await self.tui.bridge.say(text)
        except ClientError as exc:
            self.waiting = False
            self.add_line(f"error: {exc}", "error")

    async def _command(self, text: str) -> None:
        words = text.split()
        cmd, rest = words[0], words[1:]
        if cmd in ("/quit", "/exit"):
            self.app.exit(0)
        elif cmd == "/help":
            self.add_line(HELP, "info")
        elif cmd == "/memory" and not rest:
            self.tui.action_memory()
        elif cmd == "/memory" and rest == ["dump"]:
            self.run_worker(self._dump_profile(), group="cmd", exit_on_error=False)
        elif cmd == "/session" and len(rest) <= 1:
            self.run_worker(self._session(rest[0] if rest else None), group="session",
                            exit_on_error=False)
        elif cmd == "/title":
            self.run_worker(self._title(" ".join(rest)), group="cmd", exit_on_error=False)
        elif cmd == "/cancel" and not rest:
            self.action_cancel_turn()
        else:
            self.add_line(f"unknown command {text!r}; /help lists the commands", "error")

    def action_cancel_turn(self) -> None:
        """Cancel the running turn (Esc or /cancel)."""
        if not self.busy:
            self.add_line("no turn is running", "info")
            return
        self.run_worker(self._cancel(), group="cmd", exit_on_error=False)

    async def _cancel(self) -> None:
        try:
            await self.tui.bridge.cancel()
        except ClientError as exc:
            self.add_line(f"error: {exc}", "error")

    async def _dump_profile(self) -> None:
        try:
            facts = await self.tui.bridge.run(ops.ProfileList())
        except ClientError as exc:
            self.add_line(f"error: {exc}", "error")
            return
        lines = [f"{'*' if f.pinned else '~'} {f.key}: {f.value}"
                 + (f" [keywords: {', '.join(f.keywords)}]" if f.keywords else "")
                 for f in facts]
        self.add_line("active profile:\n" + ("\n".join(lines) or "(no profile facts)"), "info")

    async def _title(self, title: str) -> None:
        bridge = self.tui.bridge
        if bridge.session is None:
            self.add_line("not connected to a session", "error")
            return
        try:
            shown = await bridge.rename(bridge.session, title)
        except ClientError as exc:
            self.add_line("this session has no turn yet: it is saved, and titled, with its "
                          "first message" if exc.code == "not_found" else f"error: {exc}",
                          "error")
            return
        self.add_line(f"this session is now titled {shown!r}", "info")

    async def _session(self, target: str | None) -> None:
        bridge = self.tui.bridge
        try:
            if target is None:
                self._last_sessions = await bridge.sessions(20)
                rows = [f"{i:>2}. {'*' if s['id'] == bridge.session else ' '} {s['id']}  "
                        f"{(s.get('title') or '')!r}  "
                        f"{s['turns']} turn(s), last {when(s['updatedAt'])}"
                        for i, s in enumerate(self._last_sessions, 1)]
                if bridge.session not in {s["id"] for s in self._last_sessions}:
                    rows.insert(0, f"    * {bridge.session}  new: saved with its first turn")
                self.add_line("sessions (newest first; * = this one; /session N or ID "
                              "switches, /session new starts one):\n" + "\n".join(rows), "info")
                return
            if target.isdigit() and self._last_sessions:
                if not 1 <= int(target) <= len(self._last_sessions):
                    self.add_line(f"no session {target} in the last list (1-"
                                  f"{len(self._last_sessions)}); /session lists them", "error")
                    return
                target = self._last_sessions[int(target) - 1]["id"]
            session = await bridge.switch(None if target == "new" else target)
        except ClientError as exc:
            self.add_line(f"error: {exc}", "error")
            return
        self.waiting, self.turn = False, None
        await self.query_one("#transcript", VerticalScroll).remove_children()
        self.turns.clear()
        self._show_panel(None)
        await self.show_history(session)
        self.connected(session)

    async def show_history(self, session: str) -> None:
        """The session's earlier exchanges (last HISTORY_SHOWN entries), so a switch or a
        resumed session shows where the conversation stands."""
        try:
            earlier = await self.tui.bridge.history(session, HISTORY_SHOWN)
        except ClientError as exc:
            self.add_line(f"(could not load the earlier turns: {exc})", "error")
            return
        if earlier:
            self.add_line(f"— earlier in this session (last {len(earlier)} messages) —", "info")
        for m in earlier:
            who = "you> " if m["role"] == "user" else "agent> "
            self.add_line(who + m["text"], "user" if m["role"] == "user" else "agent")
