"""The textual application: the chat screen first, Manage → Memory on top of it.

:class:`AtomicTUI` owns the :class:`~runtime.shell.tui.bridge.DaemonBridge`. Frames the
daemon pushes (turn frames, ``memory.changed``, ``reflection``) arrive in the bridge's
thread and are posted to the app as :class:`DaemonFrame` messages (textual's
``post_message`` is thread-safe); the app hands each to the chat screen and, for
memory events, to the memory browser, which refreshes itself (live updates, not
polling only).

:func:`run_tui` is what ``atomic-agent tui`` calls.
"""

from __future__ import annotations

from pathlib import Path
from textual.app import App
from textual.binding import Binding
from textual.message import Message
from textual.worker import Worker, WorkerState

from ..client import ClientError, daemon_endpoint
from ..outbound import MemoryChangedFrame, ReflectionFrame
from .bridge import BridgeFrame, DaemonBridge
from .browser import MemoryScreen
from .chat import ChatScreen
from ..safe_text import print_error


class DaemonFrame(Message):
    """One frame pushed by the daemon (:mod:`runtime.shell.outbound`, docs/protocol.md
    §3), or the bridge's own :class:`~runtime.shell.tui.bridge.BridgeClosed`."""

    def __init__(self, frame: BridgeFrame) -> None:
        super().__init__()
        self.frame = frame


class AtomicTUI(App[int]):
    """The terminal UI. ``url`` and ``token`` name the daemon (see :func:`run_tui`);
    ``session`` is the session to open (None: a new one).

    The app's return value is an exit code: 0, or 1 when the connection could not be
    made (the reason is then in :attr:`failure`).
    """

    TITLE = "atomic-agent"
    CSS = """
    Screen { layout: vertical; }
    """
    BINDINGS = [
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("f2", "memory", "Memory"),
    ]

    def __init__(self, *, url: str, token: str, session: str | None = None,
                 working_dir: str | None = None) -> None:
        super().__init__()
        self.bridge = DaemonBridge(None, self._deliver, url=url, token=token,
                                   working_dir=working_dir)
        self.first_session = session
        self.failure: str | None = None
        self.chat = ChatScreen()
        self.memory_screen = MemoryScreen()

    def _deliver(self, frame: BridgeFrame) -> None:
        """Bridge thread → app (thread-safe)."""
        self.post_message(DaemonFrame(frame))

    async def on_mount(self) -> None:
        """Install both screens, show the chat, connect in the background."""
        # Installed, so popping Manage → Memory keeps its state (channel, filter, timer).
        self.install_screen(self.chat, "chat")
        self.install_screen(self.memory_screen, "memory")
        await self.push_screen("chat")
        self.run_worker(self._connect(), group="connect", exit_on_error=False)

    async def _connect(self) -> None:
        """Connect in a worker, so the UI stays live while the hello is answered."""
        try:
            session = await self.bridge.connect(self.first_session)
        except ClientError as exc:
            self.failure = str(exc)
            self.exit(1, return_code=1)
            return
        if self.first_session:
            await self.chat.show_history(session)  # resuming: where the conversation stands
        self.chat.connected(session)

    def on_daemon_frame(self, message: DaemonFrame) -> None:
        """Hand a pushed frame to the chat and, for memory events, to the browser."""
        frame = message.frame
        try:
            self.chat.handle_frame(frame)
            if isinstance(frame, (MemoryChangedFrame, ReflectionFrame)):
                self.memory_screen.memory_changed(frame)
        except Exception as exc:  # noqa: BLE001 - a frame we cannot show must not end the UI
            self.chat.add_line(f"could not show a {type(frame).__name__} frame: "
                               f"{type(exc).__name__}: {exc}", "error")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A worker that failed with an unexpected error (workers run with
        ``exit_on_error=False``): one line in the transcript and a notice, never a
        traceback or the end of the UI."""
        if event.state != WorkerState.ERROR:
            return
        error = event.worker.error
        line = f"internal error in {event.worker.group or 'a task'}: {type(error).__name__}: {error}"
        self.chat.add_line(line, "error")
        self.notify(line, severity="error", markup=False)

    def action_memory(self) -> None:
        """Open Manage → Memory (or stay there)."""
        if self.memory_screen not in self.screen_stack:
            self.push_screen("memory")

    async def on_unmount(self) -> None:
        """Close the daemon connection and its thread."""
        self.bridge.close()


def run_tui(state_dir: Path, session: str | None = None) -> int:
    """Run the TUI against the daemon of ``state_dir``; returns the exit code.

    Before taking over the terminal it checks that a daemon runs (``daemon.json``
    and the token); if not, it prints one ``atomic-agent: …`` line to stderr and
    returns 3 (the CLI's "no daemon" status). A connection that then fails exits the
    UI with one line and status 1.
    """
    try:
        url, token = daemon_endpoint(state_dir)
    except ClientError as exc:
        print_error(str(exc))
        return 3 if exc.code == "not_running" else 1
    app = AtomicTUI(url=url, token=token, session=session, working_dir=str(Path.cwd()))
    code = app.run()
    if app.failure:
        print_error(f"{app.failure}")
        return 1
    return code or 0
