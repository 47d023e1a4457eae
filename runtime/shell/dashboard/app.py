"""The dashboard: server-rendered pages under ``/ui`` on the daemon's HTTP port
(docs/dashboard.md). Every page is plain HTML from a Jinja2 template with autoescaping
(stored text is always text), forms post back to the same server, and one small script
(``static/ui.js``) refreshes the page's main part when memory changes (an event
stream, ``/ui/events``); everything works without it.

Pages: ``/ui`` (overview: counts, memory over time, what the last reply was given,
recall and reflection figures), ``/ui/profile`` (facts, history, edit, forget with
undo), ``/ui/notes`` (keyword or meaning search, tags, provenance, links, add, archive
and forget with undo; with a team, share a note and the team space's notes), ``/ui/lessons``, ``/ui/sessions`` (and one session's turns),
``/ui/activity`` (the activity log by app), ``/ui/clients`` (per-app tokens: add, pause,
resume, revoke), ``/ui/tools`` (the tool calls waiting for an answer; each MCP tool's
policy, editable). ``POST /ui/api/login-code`` with the owner's bearer token gives the
one-time login link ``atomic-agent ui`` prints.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from pathlib import Path
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import structlog
import trio
from jinja2 import Environment, FileSystemLoader, select_autoescape

from actors.agent.messages import Decision
from actors.memory import ops
from actors.memory.ops import MemoryOp
from actors.store.records import Note
from runtime.services.tool_policy import Policy, PolicyBook, PolicyError, standing

from ..clients import (SCOPES, ClientRegistry, ClientsError, add_client, bearer_token,
                       op_scope, read_clients, set_client)
from ..listen_guard import THROTTLE, host_allowed
from ..cli_output import when
from ..metrics_summary import by_label
from .backend import Backend, BackendError
from .charts import count_bars, days_chart
from .http import FormError, Receive, Request, Send, read_form, send_bytes, send_redirect
from .security import Logins, UiSession, cookie_header, csrf_ok, same_origin
from .views import (FactPage, GivenNote, LessonsPage, NotePage, NotesPage, OverviewPage,
                    ProfilePage, View, context)

__all__ = ["DashboardApp"]

log = structlog.get_logger()
HERE = Path(__file__).parent
STATIC = {"app.css": b"text/css; charset=utf-8", "ui.js": b"text/javascript; charset=utf-8",
          "favicon.svg": b"image/svg+xml"}
KEY_RE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,119}")
EVENT_KEEPALIVE_S = 15.0


_WRITERS = frozenset({ops.ProfileSet.name, ops.NotesStore.name, ops.Import.name, "reflection"})
"""Activity-log ops that write a fact or a note (the ``written by`` column)."""

class DashboardApp:
    """The ASGI app for ``/ui`` (module docstring).

    Args:
        backend: what the pages read and change (:class:`.backend.Backend`).
        registry: who may log in (the owner's token) and the per-app tokens.
        cfg: ``server.*`` (host, allowRemote, handshakeTimeoutMs).
        team: the daemon's team (``memory.store.team`` on the PostgreSQL engine; None
            without one): the notes pages share notes with it and show its space.
    """

    def __init__(self, backend: Backend, registry: ClientRegistry, cfg: Any,
                 team: str | None = None) -> None:
        self.backend = backend
        self.registry = registry
        self.cfg = cfg
        self.team = team
        self.logins = Logins()
        # set by the daemon: apply clients.json now (close revoked apps' connections)
        self.clients_changed: Callable[[], Awaitable[None]] | None = None
        self.env = Environment(loader=FileSystemLoader(HERE / "templates"),
                               autoescape=select_autoescape(default=True, default_for_string=True))
        self.env.filters["when"] = when
        self.listeners: set[trio.MemorySendChannel[str]] = set()

    # ------------------------------------------------------------------ events
    def memory_changed(self, op: str) -> None:
        """Tell every open event stream that memory changed (never blocks)."""
        for ch in list(self.listeners):
            try:
                with contextlib.suppress(trio.WouldBlock):  # full: the next change refreshes
                    ch.send_nowait(op)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                self.listeners.discard(ch)

    # ------------------------------------------------------------------- ASGI
    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        req = Request.from_scope(scope)
        if not host_allowed(req.headers.get(b"host"), self.cfg.host, self.cfg.allow_remote):
            await self._page(send, 421, "error.html", None, title="Refused",
                             message="This address is not the daemon's (Host header).")
            return
        try:
            await self._route(req, receive, send)
        except FormError as exc:
            await self._page(send, exc.status, "error.html", None, title="Refused",
                             message=str(exc))

    async def _route(self, req: Request, receive: Receive, send: Send) -> None:
        path, method = req.path, req.method
        if path == "/favicon.ico":  # browsers that ignore the page's icon link
            await self._static(send, "favicon.svg")
            return
        if path.startswith("/ui/static/") and method == "GET":
            await self._static(send, path.removeprefix("/ui/static/"))
            return
        if path == "/ui/api/login-code" and method == "POST":
            await self._login_code(req, send)
            return
        if path == "/ui/login" and method == "GET":
            await self._login(req, send)
            return
        session = self.logins.session(req.headers.get(b"cookie"))
        if session is None:
            await self._page(send, 401, "error.html", None, title="Log in",
                             message="Open the dashboard with the link that "
                                     "`atomic-agent ui` prints (it logs this browser in).")
            return
        if method == "POST":
            req.form = await read_form(receive, self.cfg.handshake_timeout_ms / 1000)
            if not same_origin(req.headers) or not csrf_ok(session, req.form.get("csrf")):
                log.warning("dashboard.csrf_refused", path=path)
                await self._page(send, 403, "error.html", session, title="Refused",
                                 message="This form did not come from the dashboard "
                                         "(origin or CSRF token); nothing was changed.")
                return
            await self._post(req, session, send)
            return
        if method != "GET":
            await self._page(send, 405, "error.html", session, title="Not allowed",
                             message=f"{method} is not allowed here.")
            return
        if path == "/ui/events":
            await self._events(receive, send)
            return
        await self._get(req, session, send)

    # ------------------------------------------------------------ login, files
    async def _login_code(self, req: Request, send: Send) -> None:
        token = bearer_token(req.headers.get(b"authorization"))
        principal = self.registry.resolve(token) if token else None
        if principal is None or not principal.owner:
            await THROTTLE.failed("dashboard")
            await send_bytes(send, 401, b'{"error": "the owner\'s token is needed"}',
                             b"application/json")
            return
        body = json.dumps({"path": f"/ui/login?code={self.logins.issue()}"}).encode()
        await send_bytes(send, 200, body, b"application/json")

    async def _login(self, req: Request, send: Send) -> None:
        session = self.logins.redeem(req.query.get("code", ""))
        if session is None:
            await THROTTLE.failed("dashboard")
            await self._page(send, 401, "error.html", None, title="Link expired",
                             message="This login link was used already or is too old; "
                                     "run `atomic-agent ui` for a new one.")
            return
        await send_redirect(send, "/ui", [(b"set-cookie", cookie_header(session))])

    async def _static(self, send: Send, name: str) -> None:
        ctype = STATIC.get(name)
        if ctype is None:
            await send_bytes(send, 404, b"not found", b"text/plain")
            return
        body = await trio.Path(HERE / "static" / name).read_bytes()
        await send_bytes(send, 200, body, ctype)

    async def _events(self, receive: Receive, send: Send) -> None:
        """``text/event-stream``: ``event: memory`` with the op on each change, a comment
        every :data:`EVENT_KEEPALIVE_S`; ends when the browser goes."""
        out, into = trio.open_memory_channel[str](16)
        self.listeners.add(out)
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream"), (b"cache-control", b"no-store"),
            (b"x-content-type-options", b"nosniff")]})
        try:
            async with trio.open_nursery() as nursery:
                async def gone() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    nursery.cancel_scope.cancel()

                nursery.start_soon(gone)
                while True:
                    with trio.move_on_after(EVENT_KEEPALIVE_S):
                        op = await into.receive()
                        data = f"event: memory\ndata: {json.dumps({'op': op})}\n\n"
                        await send({"type": "http.response.body", "body": data.encode(),
                                    "more_body": True})
                        continue
                    await send({"type": "http.response.body", "body": b": keepalive\n\n",
                                "more_body": True})
        finally:
            self.listeners.discard(out)
            out.close()

    # ------------------------------------------------------------------ render
    async def _page(self, send: Send, status: int, template: str, session: UiSession | None,
                    extra: list[tuple[bytes, bytes]] | None = None, **ctx: Any) -> None:
        offer = session.offer if session is not None else None
        if session is not None:
            session.offer = None  # offered on this page only
        html = self.env.get_template(template).render(
            csrf=session.csrf if session else "", logged_in=session is not None,
            undo=[(offer, session.undo[offer])] if session and offer in session.undo else [],
            **ctx)
        await send_bytes(send, status, html.encode(), b"text/html; charset=utf-8", extra)

    # ------------------------------------------------------------------ routes
    async def _get(self, req: Request, session: UiSession, send: Send) -> None:
        """A page: the first of :data:`GET_ROUTES` whose pattern matches the path."""
        try:
            for pattern, handler in GET_ROUTES:
                if m := pattern.fullmatch(req.path):
                    await handler(self, req, session, send, m)
                    return
            await self._page(send, 404, "error.html", session, title="Not found",
                             message=f"There is no page {req.path}.")
        except (BackendError, ClientsError) as exc:
            await self._page(send, 400 if exc.code in ("invalid_argument", "not_found")
                             else 503, "error.html", session, title="Could not show this",
                             message=f"{exc.code}: {exc}")

    async def _post(self, req: Request, session: UiSession, send: Send) -> None:
        """An action: the first of :data:`POST_ROUTES` whose pattern matches the path."""
        try:
            for pattern, handler in POST_ROUTES:
                if m := pattern.fullmatch(req.path):
                    await handler(self, req, session, send, m)
                    return
            await self._page(send, 404, "error.html", session, title="Not found",
                             message=f"There is no action {req.path}.")
        except (BackendError, ClientsError) as exc:
            section = "/".join(req.path.split("/")[:3])  # /ui/notes/7/forget -> /ui/notes
            await self._page(send, 400 if exc.code in ("invalid_argument", "not_found",
                                                       "exists") else 503,
                             "error.html", session, title="Nothing was changed",
                             message=str(exc), back=section)

    async def _view(self, send: Send, template: str, session: UiSession, view: View) -> None:
        await self._page(send, 200, template, session, **context(view))

    # -------------------------------------------------------------------- pages
    async def overview_page(self, req: Request, session: UiSession, send: Send,
                            m: re.Match[str]) -> None:
        await self._view(send, "overview.html", session, await self._overview())

    async def profile_page(self, req: Request, session: UiSession, send: Send,
                           m: re.Match[str]) -> None:
        facts = await self.backend.run(ops.ProfileList())
        await self._view(send, "profile.html", session,
                         ProfilePage(facts=facts, writers=await self._writers()))

    async def fact_page(self, req: Request, session: UiSession, send: Send,
                        m: re.Match[str]) -> None:
        key = m.group(1)
        history = await self.backend.run(ops.ProfileHistory(key=key))
        await self._view(send, "fact.html", session,
                         FactPage(key=key, history=history, writers=await self._writers()))

    async def notes_page(self, req: Request, session: UiSession, send: Send,
                         m: re.Match[str]) -> None:
        await self._view(send, "notes.html", session, await self._notes(req.query))

    async def note_page(self, req: Request, session: UiSession, send: Send,
                        m: re.Match[str]) -> None:
        note_id = int(m.group(1))
        found = await self.backend.run(ops.NotesRecall(id=note_id))
        links = await self.backend.run(ops.LinksList(id=note_id, limit=50))
        shared = req.query.get("shared", "")
        await self._view(send, "note.html", session, NotePage(
            note=found[0] if found else None, links=links, confirm=req.query.get("confirm"),
            writers=await self._writers(), team=self.team,
            shared=int(shared) if shared.isdigit() and len(shared) < 19 else None))

    async def lessons_page(self, req: Request, session: UiSession, send: Send,
                           m: re.Match[str]) -> None:
        b = self.backend
        await self._view(send, "lessons.html", session, LessonsPage(
            lessons=await b.run(ops.LessonsList(limit=100)),
            procedures=await b.run(ops.ProceduresList(limit=100))))

    async def sessions_page(self, req: Request, session: UiSession, send: Send,
                            m: re.Match[str]) -> None:
        await self._page(send, 200, "sessions.html", session, nav="sessions",
                         sessions=await self.backend.sessions(100))

    async def session_page(self, req: Request, session: UiSession, send: Send,
                           m: re.Match[str]) -> None:
        await self._page(send, 200, "session.html", session, nav="sessions",
                         chat=await self.backend.session(m.group(1)))

    async def activity_page(self, req: Request, session: UiSession, send: Send,
                            m: re.Match[str]) -> None:
        client = req.query.get("client") or None
        reads = req.query.get("reads") == "1"  # writes and refusals unless asked
        data = await self.backend.activity(limit=200, client=client, reads=reads)
        await self._page(send, 200, "activity.html", session, nav="activity",
                         activity=data, client=client, reads=reads)

    async def clients_page(self, req: Request, session: UiSession, send: Send,
                           m: re.Match[str]) -> None:
        token, session.new_token = session.new_token, None  # shown once
        await self._page(send, 200, "clients.html", session, nav="clients",
                         clients=read_clients(self.backend.state_dir).clients,
                         scopes=SCOPES, token=token[1] if token else None,
                         token_name=token[0] if token else None)

    async def tools_page(self, req: Request, session: UiSession, send: Send,
                         m: re.Match[str]) -> None:
        """The tool calls waiting for an answer, and each MCP server's tools with the
        policy in force (docs/tools.md)."""
        approvals = await self.backend.approvals()
        problem = ""
        try:
            servers = await self.backend.tool_servers()
        except BackendError:
            servers = []
            problem = ("No MCP server is running: add one with `atomic-agent tools add NAME "
                       "-- COMMAND ARGS` and start the daemon again.")
        try:
            book: PolicyBook | None = await trio.to_thread.run_sync(
                PolicyBook, self.backend.state_dir)
        except PolicyError as exc:
            book, problem = None, str(exc)
        rows = [(sv, [(t, standing(t, book.entry(t.qualified)) if book is not None else None)
                      for t in sv.tools]) for sv in servers]
        await self._page(send, 200, "tools.html", session, nav="tools", approvals=approvals,
                         servers=rows, problem=problem, policies=("allow", "ask", "deny"))

    async def answer_approval(self, req: Request, session: UiSession, send: Send,
                              m: re.Match[str]) -> None:
        decisions: dict[str, Decision] = {"once": "once", "always": "always", "deny": "deny"}
        decision = decisions.get(req.form.get("decision", ""))
        if decision is None:
            raise BackendError("invalid_argument", "the answer is once, always or deny")
        if not await self.backend.approve(m.group(1), decision):
            raise BackendError("not_found", "that call is no longer waiting (answered "
                                            "elsewhere, timed out, or its turn ended)")
        await send_redirect(send, "/ui/tools")

    async def set_tool_policy(self, req: Request, session: UiSession, send: Send,
                              m: re.Match[str]) -> None:
        policies: dict[str, Policy] = {"allow": "allow", "ask": "ask", "deny": "deny"}
        policy = policies.get(req.form.get("policy", ""))
        if policy is None:
            raise BackendError("invalid_argument", "the policy is allow, ask or deny")
        name = m.group(1)
        spec = next((t for sv in await self.backend.tool_servers() for t in sv.tools
                     if t.qualified == name), None)
        if spec is None:
            raise BackendError("not_found", f"no tool {name!r} is up now; `atomic-agent "
                                            f"tools {policy} {name}` sets it offline")
        try:
            book = await trio.to_thread.run_sync(PolicyBook, self.backend.state_dir)
            await trio.to_thread.run_sync(book.decide, spec, policy, "dashboard")
        except PolicyError as exc:
            raise BackendError("storage_error", str(exc)) from None
        await send_redirect(send, "/ui/tools")

    async def _overview(self) -> OverviewPage:
        b = self.backend
        stats = await b.stats()
        notes = await b.run(ops.NotesList(limit=1000, archived="all"))
        facts = await b.run(ops.ProfileList())
        activity = await b.activity(limit=1000)
        forgets = [e["at"] for e in activity["entries"]
                   if op_scope(e["op"]) == "forget" and e["outcome"] == "ok"]
        chart = days_chart({"notes": [n.created_at for n in notes],
                            "facts": [f.valid_from for f in facts], "forgets": forgets})
        metrics = await b.metrics()
        counters = metrics.get("counters", {})
        figures = {"recall": count_bars(by_label(counters, "agent.memory.recall")),
                   "reflection": count_bars(by_label(counters, "agent.memory.reflection")),
                   "turns": count_bars(by_label(counters, "agent.turns"))}
        last = next((e for e in activity["entries"] if e["op"] == "turn.context"), None)
        if last is None:
            return OverviewPage(stats=stats, chart=chart, figures=figures)
        named = [i for i in last["ids"] if isinstance(i, str)]
        given: dict[str, list[int]] = {}
        for kind in ("lesson", "procedure"):
            given[kind] = [int(i.split(":", 1)[1]) for i in named
                           if i.startswith(kind + ":") and i.split(":", 1)[1].isdigit()]
        notes_given = []
        for note_id in [i for i in last["ids"] if isinstance(i, int)][:10]:
            found = await b.run(ops.NotesRecall(id=note_id))
            notes_given.append(GivenNote(note_id, found[0].content if found else None))
        team_ids = [int(i[5:]) for i in named if i.startswith("team:") and i[5:].isdigit()]
        if team_ids and self.team:
            shared = {n.id: n.content for n in await b.run(
                ops.NotesList(limit=200, archived="all", space="team"))}
            notes_given += [GivenNote(i, shared.get(i), team=True) for i in team_ids]
        return OverviewPage(stats=stats, chart=chart, figures=figures, last=last,
                            given_keys=[i for i in named if ":" not in i],
                            given_notes=notes_given, given_lessons=given["lesson"],
                            given_procedures=given["procedure"], given_at=last["at"])

    async def _writers(self) -> dict[str | int, str]:
        """Which app last wrote each fact key and note id, from the activity log's newest
        1,000 entries (the store itself knows only ``user``, ``tool`` or ``reflection``)."""
        entries = (await self.backend.activity(limit=1000))["entries"]
        out: dict[str | int, str] = {}
        for e in entries:  # newest first: the first writer seen is the latest
            if e["outcome"] == "ok" and e["op"] in _WRITERS:
                for item in e["ids"]:
                    out.setdefault(item, e["client"])
        return out

    async def _notes(self, q: dict[str, str]) -> NotesPage:
        b = self.backend
        query = q.get("q", "").strip()
        mode: Literal["keyword", "meaning"] = "meaning" if q.get("mode") == "meaning" else "keyword"
        archived: Literal["active", "archived", "all"] = (
            "archived" if q.get("archived") == "archived"
            else "all" if q.get("archived") == "all" else "active")
        if self.team and q.get("space") == "team":
            return await self._team_notes(q, query, archived)
        if query and mode == "meaning":
            notes = await b.run(ops.NotesRecall(query=query, k=50))
        elif query:
            notes = await b.run(ops.NotesSearch(query=query, k=50))
        else:
            notes = await b.run(ops.NotesList(limit=200, archived=archived))
        links = await b.run(ops.LinksList(limit=1000))
        newer = {link.to_id: link.from_id for link in links if link.kind == "SUPERSEDES"}
        return NotesPage(notes=notes, q=query, mode=mode, archived=archived,
                         writers=await self._writers(), newer=newer, team=self.team)

    async def _team_notes(self, q: dict[str, str], query: str,
                          archived: Literal["active", "archived", "all"]) -> NotesPage:
        """The team space's notes (keyword search: the team's notes carry no vectors of
        this daemon's), each removable from the team after a confirmation."""
        b = self.backend
        if query:
            notes = await b.run(ops.NotesSearch(query=query, k=50, space="team"))
        else:
            notes = await b.run(ops.NotesList(limit=200, archived=archived, space="team"))
        confirm = q.get("confirm", "")
        return NotesPage(notes=notes, q=query, mode="keyword", archived=archived,
                         writers={}, newer={}, team=self.team, space="team",
                         confirm=int(confirm) if confirm.isdigit() and len(confirm) < 19
                         else None)

    # ------------------------------------------------------------------ actions
    async def logout(self, req: Request, session: UiSession, send: Send,
                     m: re.Match[str]) -> None:
        self.logins.end(session)
        await send_redirect(send, "/ui/login",
                            [(b"set-cookie", cookie_header(session, clear=True))])

    async def set_fact(self, req: Request, session: UiSession, send: Send,
                       m: re.Match[str]) -> None:
        f, b = req.form, self.backend
        key, value = f.get("key", "").strip().lower(), f.get("value", "").strip()
        before = await _active_value(b, key)
        await b.run(ops.ProfileSet(key=key, value=value))
        if before is not None and before != value:
            self._undo(session, f"Changed {key}", ops.ProfileSet(key=key, value=before))
        await send_redirect(send, "/ui/profile")

    async def forget_fact(self, req: Request, session: UiSession, send: Send,
                          m: re.Match[str]) -> None:
        key, b = m.group(1), self.backend
        before = await _active_value(b, key)
        await b.run(ops.ProfileRemove(key=key))
        if before is not None:
            self._undo(session, f"Forgot {key}", ops.ProfileSet(key=key, value=before))
        await send_redirect(send, "/ui/profile")

    async def add_note(self, req: Request, session: UiSession, send: Send,
                       m: re.Match[str]) -> None:
        f = req.form
        tags = [t.strip() for t in f.get("tags", "").split(",") if t.strip()]
        note = await self.backend.run(ops.NotesStore(content=f.get("content", ""),
                                                     tags=tags or None))
        await send_redirect(send, f"/ui/notes/{note.id}")

    async def change_note(self, req: Request, session: UiSession, send: Send,
                          m: re.Match[str]) -> None:
        note_id, action, b = int(m.group(1)), m.group(2), self.backend
        found = await b.run(ops.NotesRecall(id=note_id))
        if action == "forget":
            await b.run(ops.NotesForget(id=note_id))
            if found:
                self._undo(session, f"Forgot note #{note_id}", ops.NotesStore(
                    content=found[0].content, tags=found[0].tags or None))
            await send_redirect(send, "/ui/notes")
            return
        await b.run(ops.NotesArchive(id=note_id, archived=action == "archive"))
        if action == "archive":
            self._undo(session, f"Archived note #{note_id}",
                       ops.NotesArchive(id=note_id, archived=False))
        await send_redirect(send, f"/ui/notes/{note_id}")

    async def share_note(self, req: Request, session: UiSession, send: Send,
                         m: re.Match[str]) -> None:
        """Copy one of the person's notes into the team space (op ``memory.share``)."""
        copy = await self.backend.run(ops.Share(id=int(m.group(1))))
        await send_redirect(send, f"/ui/notes/{m.group(1)}?shared={copy.id}")

    async def unshare_note(self, req: Request, session: UiSession, send: Send,
                           m: re.Match[str]) -> None:
        """Remove a note from the team space (op ``memory.unshare``)."""
        await self.backend.run(ops.Unshare(id=int(m.group(1))))
        await send_redirect(send, "/ui/notes?space=team")

    async def undo(self, req: Request, session: UiSession, send: Send,
                   m: re.Match[str]) -> None:
        entry = session.undo.pop(m.group(1), None)
        if entry is None:
            raise BackendError("not_found", "there is nothing to undo any more")
        label, action = entry
        data = await self.backend.run(action)
        target = (f"/ui/notes/{data.id}" if isinstance(data, Note)
                  and isinstance(action, ops.NotesStore)
                  else "/ui/notes" if isinstance(action, ops.NotesArchive)
                  else "/ui/profile")
        await send_redirect(send, target)

    async def rename_session(self, req: Request, session: UiSession, send: Send,
                             m: re.Match[str]) -> None:
        await self.backend.rename_session(m.group(1), " ".join(req.form.get("title", "").split()))
        await send_redirect(send, f"/ui/sessions/{m.group(1)}")

    async def add_app(self, req: Request, session: UiSession, send: Send,
                      m: re.Match[str]) -> None:
        f, b = req.form, self.backend
        scopes = [s for s in SCOPES if f.get(f"scope_{s}")]
        name = f.get("name", "").strip()
        session.new_token = (name, add_client(b.state_dir, name, scopes))
        await send_redirect(send, "/ui/clients")

    async def change_app(self, req: Request, session: UiSession, send: Send,
                         m: re.Match[str]) -> None:
        name, action = m.group(1), m.group(2)
        set_client(self.backend.state_dir, name, revoke=action == "revoke",
                   paused={"pause": True, "resume": False}.get(action))
        if self.clients_changed is not None:  # closed before the page answers
            await self.clients_changed()
        await send_redirect(send, "/ui/clients")

    def _undo(self, session: UiSession, label: str, action: MemoryOp[Any]) -> None:
        """Offer one undo: ``action`` run again (the newest is shown; at most 20 kept per
        session)."""
        uid = secrets.token_urlsafe(8)
        session.undo[uid] = (label, action)
        session.offer = uid
        while len(session.undo) > 20:
            session.undo.pop(next(iter(session.undo)))


Route = tuple[re.Pattern[str], Callable[[DashboardApp, Request, UiSession, Send, re.Match[str]],
                                        Awaitable[None]]]
"""A path pattern (matched whole) and the handler of a page or an action."""

GET_ROUTES: tuple[Route, ...] = (
    (re.compile(r"/ui"), DashboardApp.overview_page),
    (re.compile(r"/ui/profile"), DashboardApp.profile_page),
    (re.compile(r"/ui/profile/([^/]+)"), DashboardApp.fact_page),
    (re.compile(r"/ui/notes"), DashboardApp.notes_page),
    (re.compile(r"/ui/notes/(\d{1,18})"), DashboardApp.note_page),
    (re.compile(r"/ui/lessons"), DashboardApp.lessons_page),
    (re.compile(r"/ui/sessions"), DashboardApp.sessions_page),
    (re.compile(r"/ui/sessions/([A-Za-z0-9_.-]{1,64})"), DashboardApp.session_page),
    (re.compile(r"/ui/activity"), DashboardApp.activity_page),
    (re.compile(r"/ui/clients"), DashboardApp.clients_page),
    (re.compile(r"/ui/tools"), DashboardApp.tools_page),
)
"""The pages (after login): path pattern → handler."""

POST_ROUTES: tuple[Route, ...] = (
    (re.compile(r"/ui/logout"), DashboardApp.logout),
    (re.compile(r"/ui/profile/set"), DashboardApp.set_fact),
    (re.compile(r"/ui/profile/([^/]+)/forget"), DashboardApp.forget_fact),
    (re.compile(r"/ui/notes/add"), DashboardApp.add_note),
    (re.compile(r"/ui/notes/(\d{1,18})/(forget|archive|restore)"), DashboardApp.change_note),
    (re.compile(r"/ui/notes/(\d{1,18})/share"), DashboardApp.share_note),
    (re.compile(r"/ui/notes/team/(\d{1,18})/unshare"), DashboardApp.unshare_note),
    (re.compile(r"/ui/undo/([A-Za-z0-9_-]{1,64})"), DashboardApp.undo),
    (re.compile(r"/ui/sessions/([A-Za-z0-9_.-]{1,64})/rename"), DashboardApp.rename_session),
    (re.compile(r"/ui/clients/add"), DashboardApp.add_app),
    (re.compile(r"/ui/tools/approvals/([0-9a-f]{16})"), DashboardApp.answer_approval),
    (re.compile(r"/ui/tools/([a-z][a-z0-9_-]{0,31}\.[^/]{1,128})/policy"),
     DashboardApp.set_tool_policy),
    (re.compile(r"/ui/clients/([A-Za-z0-9_.-]{1,40})/(pause|resume|revoke)"),
     DashboardApp.change_app),
)
"""The actions (posted forms, after the origin and CSRF checks): path pattern → handler."""


async def _active_value(b: Backend, key: str) -> str | None:
    """The active value of a profile fact, None when there is none."""
    if not KEY_RE.fullmatch(key):
        return None
    facts = await b.run(ops.ProfileList())
    return next((f.value for f in facts if f.key == key), None)

