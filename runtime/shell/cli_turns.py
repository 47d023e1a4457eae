"""``atomic-agent ask`` and ``atomic-agent chat``: turns from the command line.

``ask`` runs one turn and prints the reply as it is generated (stdout), its steps and
errors (stderr), then what memory did (``memory: …``). ``chat`` reads lines and runs a
turn for each; ``/`` lines are its commands (:data:`CHAT_HELP`). On a terminal both show
a status line while they wait (:mod:`runtime.shell.status_line`).

When the turn wants to run one of the user's tools that asks first (docs/tools.md), both
ask on the terminal — ``[y]es once, [a]lways, [N]o`` — and deny where no one can answer
(stdin is not a terminal) unless ``--approve`` allows every call for a script
(:func:`answer_approval`).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from dataclasses import dataclass
from typing import Any
from pathlib import Path

import trio

from actors.agent.messages import (ApprovalDone, ApprovalRequest, Decision, ReplyDelta,
                                   ReplyText, Step, TurnFinished)
from actors.memory import ops

from .approval_text import approval_text
from .cli_output import EXIT_FAILED, json_line, turns_text, when
from .client import ClientError, DaemonClient, open_daemon
from .memory_feedback import describe as describe_memory
from .outbound import ErrorFrame, ReflectionFrame, SessionRenamed, SessionsResult, Subscribed
from .protocol import ApprovalFrame, SessionRenameFrame, SessionsFrame, Subscribe
from .status_line import StatusLine
from .safe_text import print_error, write_control


def new_session_notice(c: DaemonClient, requested: str | None) -> None:
    """One stderr line when ``--session ID`` named no existing session (a typo starts a
    new conversation otherwise unnoticed)."""
    if requested and c.created:
        print(f"(new session {requested!r}: no session had that id; `atomic-agent sessions` "
              f"lists the existing ones)", file=sys.stderr)


async def ask(c: DaemonClient, args: argparse.Namespace) -> int:
    """One turn: the reply is printed as it is generated (stdout), steps and errors on
    stderr; on a terminal a status line says the model is working, then that memory is
    reflecting on the turn, until its ``memory: …`` line lands."""
    new_session_notice(c, args.session)
    status = StatusLine() if not args.json else StatusLine(io.StringIO())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(status.run)
        try:
            return await _ask_turn(c, args, status)
        finally:
            status.clear()
            nursery.cancel_scope.cancel()


async def _ask_turn(c: DaemonClient, args: argparse.Namespace, status: StatusLine) -> int:
    code = 0
    why = ""  # the message of an ``error`` step, shown when the turn fails
    turn, reason = None, None
    shown = ""  # reply text printed so far (deltas)
    watch_memory = not args.no_memory
    if watch_memory:
        await c.request(Subscribe(channels=["reflection"]), Subscribed)
    with trio.fail_after(args.timeout):
        status.show("the model is working")
        async for frame in c.say(args.text, debug=args.show_prompt):
            match frame:
                case TurnFinished():
                    turn, reason = frame.turn, frame.reason
                    if frame.reason not in ("reply", "finish"):
                        code = EXIT_FAILED
                case Step(step="error"):
                    why = frame.message or ""
                case ErrorFrame():
                    code = EXIT_FAILED
            if args.json:
                print(json_line(frame), flush=True)
                if isinstance(frame, ApprovalRequest):
                    await answer_approval(c, frame, approve=args.approve, out=sys.stderr)
                continue
            if isinstance(frame, (ReplyDelta, ReplyText, Step, TurnFinished, ErrorFrame,
                                  ApprovalRequest, ApprovalDone)):
                status.clear()  # (an approval question must stay on screen while asked)
            match frame:
                case Step(step="prompt"):
                    print(f"--- prompt tail (step {frame.n}) ---\n{frame.tail}--- end ---",
                          file=sys.stderr)
                case Step(step="tool"):
                    print(f"[tool] {frame.tool} {json.dumps(frame.args)}", file=sys.stderr)
                    status.show(f"running {frame.tool}")
                case Step(step="tool.result") if frame.outcome not in (None, "ok") or (
                        frame.summary or "").startswith("error:"):
                    print(f"[tool] {frame.tool} → {frame.summary}", file=sys.stderr)
                    status.show("the model is working")
                case Step(step="tool.result"):
                    status.show("the model is working")
                case ApprovalRequest():
                    await answer_approval(c, frame, approve=args.approve, out=sys.stderr)
                    status.show("the model is working")
                case ApprovalDone(decision="timeout"):
                    print("[tool] no answer in time: denied", file=sys.stderr)
                case Step(step="notice"):
                    print_error(f"note: {frame.message or ''}")
                case ReplyDelta():
                    shown += frame.text
                    print(frame.text, end="", flush=True)
                case ReplyText(text=text):
                    _finish_reply(shown, text)
                    shown = text
                case TurnFinished() if frame.reason not in ("reply", "finish"):
                    if shown:
                        print(flush=True)  # end a streamed line that never got its reply
                    detail = frame.message or why
                    print_error(f"turn ended: {frame.reason}"
                                + (f": {detail}" if detail else ""))
                case ErrorFrame():
                    print_error(f"{frame.code}: {frame.message}")
        if watch_memory and turn and reason in ("reply", "finish", "max_steps"):
            # The turn's reflection lands a few seconds later: say what memory did.
            if not args.json:
                status.show("memory: reflecting on this turn")
            with trio.move_on_after(args.timeout) as waiting:
                event = await c.wait_for(
                    lambda f: isinstance(f, ReflectionFrame) and f.turn == turn)
                assert isinstance(event, ReflectionFrame)
                status.clear()
                if args.json:
                    print(json_line(event), flush=True)
                else:
                    print(await describe_memory(c, event), file=sys.stderr, flush=True)
            if waiting.cancelled_caught:
                status.clear()
                print("memory: no reflection result within --timeout", file=sys.stderr)
    print(f"(session {c.session})", file=sys.stderr)
    return code


def unseen(shown: str, text: str) -> str | None:
    """What of the final reply ``text`` was not printed yet, after the streamed
    ``shown``; "" when all of it was (the final text may be the streamed one with its
    trailing blank lines stripped); None when it differs from what was streamed (the
    caller prints it whole)."""
    if text.startswith(shown):
        return text[len(shown):]
    core = shown.rstrip()
    if core and text.startswith(core) and not text[len(core):].strip():
        return ""
    return None


def _finish_reply(shown: str, text: str) -> None:
    """End a streamed reply with the final ``text`` (:func:`unseen`): the rest of it, or
    the whole text on a line of its own when it differs from what was streamed."""
    rest = unseen(shown, text)
    out = "\n" + text if rest is None else rest
    print(out, end="" if not out and shown.endswith("\n") else "\n", flush=True)


_ANSWERS: dict[str, Decision] = {"y": "once", "yes": "once", "a": "always", "always": "always"}


async def answer_approval(c: DaemonClient, frame: ApprovalRequest, *, approve: bool,
                          out: Any) -> Decision:
    """Answer ``frame`` and send the answer (``approval``): ``once`` with ``approve``
    (``--approve``); ``deny`` when stdin is no terminal (no one can answer); else ask on
    the terminal — ``y`` once, ``a`` always, anything else (or no answer within the
    request's timeout) deny. Returns the decision; what was decided is printed to
    ``out``."""
    global stdin_abandoned
    decision: Decision = "deny"
    no_one = False
    if approve:
        decision = "once"
        print(f"[tool] {frame.server}.{frame.tool}: allowed by --approve", file=out)
    elif not sys.stdin.isatty():
        no_one = True
        print(f"[tool] {frame.server}.{frame.tool} asks for your approval; denied: no one "
              "can answer here (stdin is not a terminal; --approve allows every call)",
              file=out)
    else:
        print(approval_text(frame), file=out, flush=True)
        with trio.move_on_after(max(1.0, frame.timeout_ms / 1000 - 1)):
            stdin_abandoned = True
            try:
                line = await trio.to_thread.run_sync(
                    input, "Allow it? [y]es once, [a]lways, [N]o: ", abandon_on_cancel=True)
                decision = _ANSWERS.get(line.strip().lower(), "deny")
            except EOFError:
                pass
            stdin_abandoned = False
        print(f"[tool] {frame.server}.{frame.tool}: "
              + {"once": "allowed once", "always": "allowed from now on",
                 "deny": "denied"}[decision], file=out)
    try:
        await c.send(ApprovalFrame(request=frame.request, decision=decision,
                                   id=f"approval-{frame.request}", unanswerable=no_one))
    except ClientError as exc:
        print(f"atomic-agent: the answer was not sent: {exc}", file=out)
    return decision


CHAT_QUIT_WAIT_S = 120.0
"""On /quit or end of input, how long chat waits for the last turns' memory lines."""


async def _input_while_watching(c: DaemonClient, awaiting: set[str]) -> str | None:
    """``input("you> ")`` in a thread while this session's reflection results are
    printed as they land (one ``memory: …`` line each; their turns leave ``awaiting``).
    None at end of input."""

    async def watch() -> None:
        while True:
            event = await c.wait_for(
                lambda f: isinstance(f, ReflectionFrame) and f.session == c.session)
            assert isinstance(event, ReflectionFrame)
            awaiting.discard(event.turn)
            line = await describe_memory(c, event)
            if sys.stdin.isatty():
                # back to the start of the "you> " line (the program's own control: a
                # terminal-safe stdout would print a text "\r" escaped), then prompt again
                write_control(sys.stdout, "\r")
            print(f"  {line}\n{'you> ' if sys.stdin.isatty() else ''}", end="", flush=True)

    global stdin_abandoned
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        stdin_abandoned = True  # until input() returns: a failing watcher abandons it
        try:
            prompt = "you> " if sys.stdin.isatty() else ""  # piped input: no prompts
            line: str | None = await trio.to_thread.run_sync(input, prompt,
                                                             abandon_on_cancel=True)
        except EOFError:
            line = None
        stdin_abandoned = False
        nursery.cancel_scope.cancel()
    return line


stdin_abandoned = False
"""True while chat's ``input()`` thread may still be blocked on stdin: the process then
ends with ``os._exit`` (after flushing), since interpreter shutdown aborts on a thread
that holds stdin's lock."""


async def _drain_memory_lines(c: DaemonClient, awaiting: set[str]) -> None:
    """Before leaving chat, print the memory lines still to come (bounded wait)."""
    if not awaiting:
        return
    print("  (waiting for memory to take in the last turn; Ctrl-C to skip)", file=sys.stderr)
    with trio.move_on_after(CHAT_QUIT_WAIT_S):
        while awaiting:
            event = await c.wait_for(
                lambda f: isinstance(f, ReflectionFrame) and f.turn in awaiting)
            assert isinstance(event, ReflectionFrame)
            awaiting.discard(event.turn)
            print(f"  {await describe_memory(c, event)}", flush=True)


CHAT_HELP = """commands:
  /help           this list
  /memory         what memory holds about you: profile facts and the newest notes
  /session        this session and the others, numbered (newest first)
  /session N|ID   switch to session N of that list, or to session ID; /session new
                  starts a new one
  /title TEXT     give this session a title (/title alone: its first line again)
  /quit           leave (Ctrl-D too); memory of the last turn is waited for"""


@dataclass
class SwitchSession:
    """``/session ID|new`` in chat: reconnect on ``target`` (None = a new session)."""

    target: str | None


async def _chat_memory(c: DaemonClient) -> None:
    facts = await c.run(ops.ProfileList())
    notes = await c.run(ops.NotesList(limit=5))
    print("  profile: " + ("; ".join(f"{f.key} = {f.value}" for f in facts)
                           or "(nothing yet)"))
    for n in notes:
        print(f"  note #{n.id}: {n.content[:100]}")
    if not notes:
        print("  notes: (none yet)")
    print("  (`atomic-agent memory …` or `atomic-agent tui` show and edit all of it)")


async def _chat_sessions(c: DaemonClient, listed: list[str]) -> None:
    """Print the sessions, numbered; ``listed`` gets their ids (``/session N``)."""
    reply = await c.request(SessionsFrame(limit=20), SessionsResult)
    rows = [s for s in reply.data if s.get("turns", 0) > 0]
    listed[:] = [s["id"] for s in rows]
    if c.session not in listed:
        print(f"      * {c.session}  (this one; saved with its first turn)")
    for i, s in enumerate(rows, 1):
        mark = "*" if s["id"] == c.session else " "
        print(f"  {i:>2}. {mark} {s['id']}  {(s.get('title') or '')!r}  "
              f"{turns_text(s['turns'])}, updated {when(s['updatedAt'])}")
    print("  /session N or ID switches, /session new starts one")


def _title_error(exc: ClientError) -> str:
    """A refused ``/title`` in words: a session without a turn has nothing to name yet."""
    if exc.code == "not_found":
        return "this session has no turn yet: it is saved, and titled, with its first message"
    return f"error: {exc}"


async def _chat_command(c: DaemonClient, line: str, awaiting: set[str],
                        listed: list[str]) -> int | SwitchSession | None:
    """Run one ``/command`` line; an int or SwitchSession ends this connection's chat.
    ``listed``: the ids the last ``/session`` printed, for ``/session N``."""
    command, _, rest = line.strip().partition(" ")
    rest = rest.strip()
    if command in ("/quit", "/exit"):
        await _drain_memory_lines(c, awaiting)
        return 0
    if command in ("/help", "/?"):
        print(CHAT_HELP)
    elif command == "/memory":
        await _chat_memory(c)
    elif command == "/session" and not rest:
        await _chat_sessions(c, listed)
    elif command == "/session" and rest.isdigit() and not listed:
        print("  /session first lists the sessions; then /session N picks one")
    elif command == "/session" and rest.isdigit() and not 1 <= int(rest) <= len(listed):
        print(f"  no session {rest} in the last list (1-{len(listed)})")
    elif command == "/title":
        try:
            renamed = await c.request(SessionRenameFrame(session=c.session,
                                                         title=" ".join(rest.split())),
                                      SessionRenamed)
        except ClientError as exc:
            print(f"  {_title_error(exc)}")
        else:
            print(f"  this session is now titled {renamed.data['title']!r}")
    elif command == "/session":
        await _drain_memory_lines(c, awaiting)
        target = listed[int(rest) - 1] if rest.isdigit() else rest
        return SwitchSession(None if rest == "new" else target)
    else:
        print(f"  unknown command {command}; /help lists the commands (messages to the "
              f"model do not start with /)")
    return None


async def _chat(c: DaemonClient, approve: bool = False) -> int | SwitchSession:
    """Read lines from stdin and run a turn for each; ``/`` lines are chat commands
    (:data:`CHAT_HELP`), never sent to the model. A line that is not valid UTF-8 is
    refused with one ``error:`` line (stdin is read with ``surrogateescape`` so such
    bytes never end the chat with a UnicodeDecodeError)."""
    print(f"session {c.session} — type a message; /help for commands, /quit or Ctrl-D to "
          f"leave", file=sys.stderr)
    await c.request(Subscribe(channels=["reflection"]), Subscribed)
    awaiting: set[str] = set()  # turns whose memory line has not been printed yet
    listed: list[str] = []  # the ids the last /session printed
    while True:
        line = await _input_while_watching(c, awaiting)
        if line is None:
            await _drain_memory_lines(c, awaiting)
            return 0
        if line.strip().startswith("/"):
            outcome = await _chat_command(c, line, awaiting, listed)
            if outcome is not None:
                return outcome
            continue
        if not line.strip():
            continue
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:
            print("  error: invalid_argument: that line is not valid UTF-8 text; not sent")
            continue
        await _chat_turn(c, line, awaiting, approve)


async def _chat_turn(c: DaemonClient, line: str, awaiting: set[str],
                     approve: bool = False) -> None:
    """One chat turn: the reply streams after ``agent> `` as it is generated; on a
    terminal a status line says the model is working until the first text."""
    status = StatusLine()
    shown: str | None = None  # None until the reply starts
    async with trio.open_nursery() as nursery:
        nursery.start_soon(status.run)
        status.show("the model is working")
        async for frame in c.say(line):
            if not isinstance(frame, ReplyDelta) or shown is None:
                status.clear()
            match frame:
                case TurnFinished() if frame.reason in ("reply", "finish", "max_steps"):
                    awaiting.add(frame.turn)
                case ReflectionFrame() if frame.session == c.session:
                    # an earlier turn's memory landed while this one ran (piped input)
                    awaiting.discard(frame.turn)
                    print(f"  {await describe_memory(c, frame)}")
            match frame:
                case ReplyDelta():
                    if shown is None:
                        shown = ""
                        print("agent> ", end="")
                    shown += frame.text
                    print(frame.text, end="", flush=True)
                case ReplyText(text=text):
                    if shown is None:
                        print(f"agent> {text}", flush=True)
                    else:
                        _finish_reply(shown, text)
                    shown = text
                case Step(step="tool"):
                    print(f"  [tool] {frame.tool} {json.dumps(frame.args)}")
                case Step(step="tool.result") if frame.outcome not in (None, "ok") or (
                        frame.summary or "").startswith("error:"):
                    print(f"  [tool] {frame.tool} → {frame.summary}")
                case ApprovalRequest():
                    await answer_approval(c, frame, approve=approve, out=sys.stdout)
                case ApprovalDone(decision="timeout"):
                    print("  [tool] no answer in time: denied")
                case Step(step="error"):
                    print(f"  error: {frame.message or ''}")
                case Step(step="notice"):
                    print(f"  note: {frame.message or ''}")
                case TurnFinished() if frame.reason not in ("reply", "finish"):
                    if shown is not None and not shown.endswith("\n"):
                        print()
                    print(f"  (turn ended: {frame.reason})")
                case ErrorFrame():
                    print(f"  error: {frame.code}: {frame.message}")
        status.clear()
        nursery.cancel_scope.cancel()


async def chat_loop(state_dir: Path, session: str | None, approve: bool = False) -> int:
    """``chat``: one connection per session; ``/session ID|new`` reconnects. stdin is
    set to ``surrogateescape`` once, before anything is read (reconfiguring it later
    would decode its buffer again and replay a line)."""
    reconfigure = getattr(sys.stdin, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(errors="surrogateescape")
    target, notice = session, session
    while True:
        async with open_daemon(state_dir, session=target, client="cli",
                               working_dir=str(Path.cwd())) as c:
            new_session_notice(c, notice)
            outcome = await _chat(c, approve)
        if isinstance(outcome, int):
            return outcome
        target = notice = outcome.target
