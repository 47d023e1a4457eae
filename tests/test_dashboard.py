"""The dashboard's HTTP surface (runtime/shell/dashboard) against a real daemon, with an
HTTP client: the one-time login link, pages only with the session cookie, the CSRF token
and origin check on every change, DNS-rebinding and foreign-Host refusals, the
Content-Security-Policy on every page and no inline script anywhere, stored text shown as
text, undo, the live event stream, and ``atomic-agent ui``. The same flows in a real
browser are tests/test_dashboard_browser.py."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
import trio

from runtime.shell.client import ClientError, open_client
from runtime.shell.clients import add_client
from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama

HOSTILE = "I like <script>alert(1)</script> and ![x](http://evil.example/a.png)"
PAGES = ["/ui", "/ui/profile", "/ui/profile/city", "/ui/notes", "/ui/notes/1",
         "/ui/notes?q=bees&mode=meaning", "/ui/lessons", "/ui/sessions", "/ui/activity",
         "/ui/activity?client=cli", "/ui/clients", "/ui/tools"]


@asynccontextmanager
async def _login(base: str, token: str) -> AsyncIterator[httpx.AsyncClient]:
    """A logged-in client: the login code from the owner's token, then the link."""
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        code = await http.post("/ui/api/login-code", headers={"Authorization": f"Bearer {token}"})
        assert code.status_code == 200, code.text
        landed = await http.get(code.json()["path"])
        assert landed.status_code == 303 and landed.headers["location"] == "/ui"
        cookie = landed.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui" in cookie
        yield http


def _csrf(html: str) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', html)
    assert m, html[:500]
    return m.group(1)


async def test_login_pages_headers_and_stored_text(tmp_path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path / "fake") as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            base = d.ready["openaiUrl"].removesuffix("/v1")
            async with open_client(state, client="cli") as c:
                await c.memory("memory.notes.store", {"content": HOSTILE, "tags": ["x"]})
                await c.memory("memory.profile.set", {"key": "city", "value": "<b>Lyon</b>"})
            app_token = add_client(state, "app", ["read", "write", "forget", "admin"])
            async with httpx.AsyncClient(base_url=base, timeout=30) as anon:
                assert (await anon.get("/ui")).status_code == 401  # no cookie: no page
                assert "atomic-agent ui" in (await anon.get("/ui/notes")).text
                refused = await anon.post("/ui/api/login-code",
                                          headers={"Authorization": f"Bearer {app_token}"})
                assert refused.status_code == 401  # only the owner logs a browser in
                rebinding = await anon.get("/ui", headers={"Host": "evil.example:80"})
                assert rebinding.status_code == 421
            async with _login(base, d.token) as http:
                for path in PAGES:
                    page = await http.get(path)
                    assert page.status_code == 200, (path, page.text[:300])
                    csp = page.headers["content-security-policy"]
                    assert "script-src 'self'" in csp and "default-src 'none'" in csp
                    assert page.headers["x-frame-options"] == "DENY"
                    scripts = re.findall(r"<script\b([^>]*)>", page.text)
                    assert scripts == [' src="/ui/static/ui.js" defer'], (path, scripts)
                    assert "<script>alert" not in page.text and "<b>Lyon" not in page.text
                    assert not re.search(r"<img\b", page.text), path
                notes = (await http.get("/ui/notes")).text
                assert "I like &lt;script&gt;alert(1)&lt;/script&gt; and ![x](http://evil" \
                    in notes
                assert "&lt;b&gt;Lyon&lt;/b&gt;" in (await http.get("/ui/profile")).text
                js = await http.get("/ui/static/ui.js")
                css = await http.get("/ui/static/app.css")
                assert js.headers["content-type"].startswith("text/javascript")
                assert css.headers["content-type"].startswith("text/css")
                assert "http" not in re.sub(r"//.*", "", js.text)  # no remote origin
                assert (await http.get("/ui/static/../app.py")).status_code == 404
                reused = await http.get("/ui/login?code=" + "x" * 43)
                assert reused.status_code == 401


async def test_every_change_needs_the_csrf_token_and_the_dashboards_origin(tmp_path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path / "fake") as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            base = d.ready["openaiUrl"].removesuffix("/v1")
            async with _login(base, d.token) as http:
                token = _csrf((await http.get("/ui/profile")).text)
                own = {"Origin": base}
                for form, headers in (
                        ({"key": "city", "value": "Oslo"}, own),  # no token
                        ({"key": "city", "value": "Oslo", "csrf": "wrong"}, own),
                        ({"key": "city", "value": "Oslo", "csrf": token},
                         {"Origin": "http://evil.example"}),
                        ({"key": "city", "value": "Oslo", "csrf": token}, {})):  # no origin
                    refused = await http.post("/ui/profile/set", data=form, headers=headers)
                    assert refused.status_code == 403, (form, headers)
                    assert "nothing was changed" in refused.text
                async with open_client(state) as c:
                    assert await c.memory("memory.profile.list") == []
                done = await http.post("/ui/profile/set", headers=own,
                                       data={"key": "city", "value": "Oslo", "csrf": token})
                assert done.status_code == 303
                changed = await http.post("/ui/profile/set", headers=own,
                                          data={"key": "city", "value": "Bergen", "csrf": token})
                assert changed.status_code == 303
                page = (await http.get("/ui/profile")).text
                assert "Changed city." in page and "Bergen" in page
                undo = re.search(r'action="(/ui/undo/[^"]+)"', page).group(1)
                assert "Changed city." not in (await http.get("/ui/profile")).text  # once
                assert (await http.post(undo, headers=own, data={"csrf": token})).status_code \
                    == 303
                async with open_client(state) as c:
                    (fact,) = await c.memory("memory.profile.list")
                    assert fact["value"] == "Oslo"  # undone
                note = await http.post("/ui/notes/add", headers=own, data={
                    "content": "The user keeps bees", "tags": "hobby, bees", "csrf": token})
                assert note.status_code == 303 and note.headers["location"] == "/ui/notes/1"
                confirm = (await http.get("/ui/notes/1?confirm=1")).text
                assert "Forget note #1 for good?" in confirm
                gone = await http.post("/ui/notes/1/forget", headers=own, data={"csrf": token})
                assert gone.status_code == 303
                page = (await http.get("/ui/notes")).text
                assert "Forgot note #1." in page and "No notes" in page
                undo = re.search(r'action="(/ui/undo/[^"]+)"', page).group(1)
                back = await http.post(undo, headers=own, data={"csrf": token})
                assert back.status_code == 303
                restored = (await http.get(back.headers["location"])).text
                assert "The user keeps bees" in restored and "hobby" in restored
                history = (await http.get("/ui/profile/city")).text
                assert history.count("<td>dashboard</td>") == 2, history  # who ended each
                async with open_client(state, session="bees") as c:
                    [f async for f in c.say("Hello there")]
                renamed = await http.post("/ui/sessions/bees/rename", headers=own,
                                          data={"title": "  Bee   keeping ", "csrf": token})
                assert renamed.status_code == 303, renamed.text
                assert "<td>Bee keeping</td>" in (await http.get("/ui/sessions")).text
                missing = await http.post("/ui/sessions/nope/rename", headers=own,
                                          data={"title": "x", "csrf": token})
                assert missing.status_code == 400 and "Nothing was changed" in missing.text
                # revoking an app closes its connection before the page answers
                app_token = add_client(state, "doomed", ["read"])
                async with open_client(url=d.url, token=app_token) as app:
                    await app.request({"type": "ping"}, "pong")
                    revoked = await http.post("/ui/clients/doomed/revoke", headers=own,
                                              data={"csrf": token})
                    assert revoked.status_code == 303
                    with trio.fail_after(1), pytest.raises(ClientError) as closed:
                        await app.wait_for(lambda f: False)
                    assert "revoked" in str(closed.value)
                out = await http.post("/ui/logout", headers=own, data={"csrf": token})
                assert out.status_code == 303
                assert (await http.get("/ui")).status_code == 401
            await trio.sleep(1.0)  # (the activity log is written every 0.5 s)
            async with open_client(state) as c:
                log = await c.memory("memory.activity", {"client": "dashboard"})
    ops = {e["op"] for e in log["entries"]}
    assert {"memory.profile.set", "memory.notes.store", "memory.notes.forget"} <= ops
    # (its changes are recorded ...)
    assert not ops & {"memory.profile.list", "memory.notes.list"}  # ... its page views not


async def test_the_event_stream_and_the_ui_command(tmp_path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path / "fake") as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            base = d.ready["openaiUrl"].removesuffix("/v1")
            out = await trio.to_thread.run_sync(lambda: subprocess.run(
                [sys.executable, "-m", "runtime.shell.cli", "ui", "--no-open", "--state-dir",
                 str(state)], cwd=REPO, capture_output=True, text=True, timeout=60))
            assert out.returncode == 0, out.stderr
            url = re.search(r"Dashboard: (\S+)", out.stdout).group(1)
            assert url.startswith(base + "/ui/login?code=")
            async with httpx.AsyncClient(timeout=30) as http:
                assert (await http.get(url)).status_code == 303
                async with http.stream("GET", base + "/ui/events") as events:
                    assert events.headers["content-type"] == "text/event-stream"
                    async with open_client(state) as c:
                        await c.memory("memory.notes.store", {"content": "A change"})
                    with trio.fail_after(10):
                        async for line in events.aiter_lines():
                            if line.startswith("data:"):
                                assert "memory.notes.store" in line
                                break
    stopped = subprocess.run([sys.executable, "-m", "runtime.shell.cli", "ui", "--no-open",
                              "--state-dir", str(state)], cwd=REPO, capture_output=True,
                             text=True, timeout=60)
    assert stopped.returncode == 3 and "no daemon is running" in stopped.stderr


@pytest.mark.parametrize("path", ["/ui/nope", "/ui/notes/999", "/ui/sessions/nope"])
async def test_missing_things_are_pages_not_tracebacks(tmp_path, path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path / "fake") as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with _login(d.ready["openaiUrl"].removesuffix("/v1"), d.token) as http:
                page = await http.get(path)
        stderr = d.stderr_path.read_text()
    assert page.status_code in (200, 400, 404) and "Traceback" not in page.text
    assert "Traceback" not in stderr


async def test_a_corrected_note_shows_what_supersedes_it(tmp_path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path / "fake") as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(state) as c:
                await c.memory("memory.notes.store", {"content": "Works at Acme as a data "
                                                                 "engineer in the Berlin office"})
                await c.memory("memory.notes.store", {"content": "No longer works at Acme as a "
                                                                 "data engineer in the Berlin "
                                                                 "office"})
            async with _login(d.ready["openaiUrl"].removesuffix("/v1"), d.token) as http:
                listing = (await http.get("/ui/notes")).text
                older = (await http.get("/ui/notes/1")).text
    assert re.search(r'superseded by <a href="/ui/notes/2">#2</a>', listing)
    assert "superseded by" in older and "SUPERSEDES" in older
