"""The dashboard in a real browser: headless Chromium (Debian's ``chromium``) driven by
Playwright, against a real daemon. One walk through what a person does -- log in with
the link ``atomic-agent ui`` prints, search by keyword and by meaning, edit a fact,
forget a note and undo it, add a read-only app and see its write refused, watch a page
update itself -- plus the attacks: a note holding ``<script>`` and a markdown image
shows as text and fetches nothing, and a form on a foreign page cannot change memory.

``ATOMIC_AGENT_SCREENSHOTS=DIR`` saves a screenshot of each screen there
(``ops/screenshots`` writes docs/screens/). ``./ops/install`` installs Chromium where it
is missing; without it the test is skipped (in CI it fails).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import trio

from runtime.shell.client import ClientError, open_client
from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
HOSTILE = "I like <script>alert(1)</script> and ![x](http://evil.example/a.png)"
SHOTS = os.environ.get("ATOMIC_AGENT_SCREENSHOTS")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


def _need_browser() -> None:
    try:
        import playwright  # noqa: F401
    except ImportError:
        CHROMIUM_MISSING = True
    else:
        CHROMIUM_MISSING = CHROMIUM is None
    if CHROMIUM_MISSING:
        if os.environ.get("CI"):
            pytest.fail("CI must install Chromium and Playwright (./ops/install does)")
        pytest.skip("needs Chromium (apt-get install chromium) and playwright")


class _Foreign(BaseHTTPRequestHandler):
    """Another site on another port: a form that posts to the dashboard."""

    target = ""

    def do_GET(self) -> None:  # noqa: N802
        body = (f'<form method="post" action="{self.target}/ui/profile/set">'
                '<input name="key" value="city"><input name="value" value="Hacked">'
                '<input name="csrf" value="guess"><button id="go">win a prize</button>'
                '</form>').encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _shot(page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


def _walk(login_url: str, base: str, store_live_note, reader_refused) -> dict:
    """The browser part (Playwright's sync API, on a thread of its own)."""
    from playwright.sync_api import sync_playwright

    seen: dict = {"requests": [], "dialogs": [], "console": []}
    foreign = ThreadingHTTPServer(("127.0.0.1", 0), type("F", (_Foreign,), {"target": base}))
    threading.Thread(target=foreign.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1100, "height": 760})
            page.on("request", lambda r: seen["requests"].append(r.url))
            page.on("console", lambda m: seen["console"].append(m.text))

            def on_dialog(dialog) -> None:
                seen["dialogs"].append(dialog.message)
                dialog.accept()

            page.on("dialog", on_dialog)
            page.goto(login_url)
            assert page.url == base + "/ui"
            page.wait_for_selector("text=Memory over time")
            seen["overview"] = page.inner_text("#last-context")

            # search: keyword, then meaning
            page.goto(base + "/ui/notes")
            page.fill("input[name=q]", "pytest")
            page.click("form.search button")
            seen["keyword"] = page.inner_text("ul.notes")
            page.fill("input[name=q]", "which tool runs my unit tests")
            page.select_option("select[name=mode]", "meaning")
            page.click("form.search button")
            seen["meaning"] = page.inner_text("ul.notes")
            page.goto(base + "/ui/notes")
            seen["hostile_text"] = page.inner_text("ul.notes")
            _shot(page, "notes")

            # edit a fact
            page.goto(base + "/ui/profile")
            page.fill("input[aria-label='value of city']", "Paris")
            page.click("tr:has(a:text-is('city')) form.edit button")
            seen["after_edit"] = page.input_value("input[aria-label='value of city']")
            _shot(page, "profile")

            # forget a note (confirmed), then undo
            page.goto(base + "/ui/notes/2")
            _shot(page, "note")
            page.click("#forget")
            page.click("#confirm-forget")
            seen["after_forget"] = page.inner_text("main")
            seen["undo_banner"] = page.inner_text(".undo")
            page.click("#undo")
            seen["after_undo"] = page.inner_text("main")

            # a read-only app, added here, is refused a write
            page.goto(base + "/ui/clients")
            page.fill("input[name=name]", "reader")
            page.click("form.add button")
            token = page.inner_text("#new-token").strip()
            seen["reader_refusal"] = reader_refused(token)
            page.goto(base + "/ui/clients")
            page.click("tr:has-text('reader') button:text-is('Pause')")
            seen["clients"] = page.inner_text("table")
            _shot(page, "apps")
            page.goto(base + "/ui/activity")
            seen["activity"] = page.inner_text("main")  # writes and refusals
            _shot(page, "activity")
            page.click("text=show reads too")
            seen["activity_reads"] = page.inner_text("main")

            # the page updates itself when memory changes
            page.goto(base + "/ui/notes")
            page.wait_for_function("document.body.dataset.live === '1'")
            store_live_note()
            page.wait_for_selector("text=A note from elsewhere", timeout=10_000)
            page.goto(base + "/ui")
            _shot(page, "overview")
            page.goto(base + "/ui/sessions")
            _shot(page, "sessions")
            page.goto(base + "/ui/lessons")
            _shot(page, "lessons")

            # CSRF: a form on another site posts to the dashboard
            page.goto(f"http://127.0.0.1:{foreign.server_address[1]}/")
            page.click("#go")
            page.wait_for_load_state()
            seen["csrf_page"] = page.inner_text("body")
            page.goto(base + "/ui/profile")
            seen["city_after_csrf"] = page.input_value("input[aria-label='value of city']")
            browser.close()
    finally:
        foreign.shutdown()
    return seen


async def test_the_dashboard_in_a_real_browser(tmp_path):
    _need_browser()
    state = tmp_path / "state"
    rules = [{"grammar_contains": "reply", "response": '{"reply": "You prefer pytest."}'}]
    async with open_fake_llama(tmp_path / "fake", rules) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            base = d.ready["openaiUrl"].removesuffix("/v1")
            async with open_client(state, client="cli") as c:
                await c.memory("memory.notes.store", {"content": HOSTILE})
                await c.memory("memory.notes.store", {"content": "I prefer pytest for unit "
                                                                 "tests", "tags": ["python"]})
                await c.memory("memory.notes.store", {"content": "My sister lives in Oslo"})
                await c.memory("memory.profile.set", {"key": "city", "value": "Lyon"})
                await c.memory("memory.profile.set", {"key": "name", "value": "Dana"})
                turn = [f async for f in c.say("Which test runner do I prefer, pytest?")]
                assert turn[-1]["reason"] == "reply"
            out = await trio.to_thread.run_sync(lambda: subprocess.run(
                [sys.executable, "-m", "runtime.shell.cli", "ui", "--no-open", "--state-dir",
                 str(state)], cwd=REPO, capture_output=True, text=True, timeout=60))
            login = re.search(r"Dashboard: (\S+)", out.stdout).group(1)
            token = trio.lowlevel.current_trio_token()

            def store_live_note() -> None:
                async def store() -> None:
                    async with open_client(state, client="script") as c:
                        await c.memory("memory.notes.store", {"content": "A note from "
                                                                         "elsewhere"})
                trio.from_thread.run(store, trio_token=token)

            def reader_refused(reader: str) -> str:
                async def attempt() -> str:
                    await trio.sleep(0.7)  # the daemon reads clients.json every 0.5 s
                    async with open_client(url=d.url, token=reader) as c:
                        await c.memory("memory.profile.list")
                        try:
                            await c.memory("memory.notes.store", {"content": "sneaky"})
                        except ClientError as exc:
                            return f"{exc.code}: {exc}"
                    return "stored"
                return trio.from_thread.run(attempt, trio_token=token)

            seen = await trio.to_thread.run_sync(_walk, login, base, store_live_note,
                                                 reader_refused)
            async with open_client(state) as c:
                notes = await c.memory("memory.notes.list", {"limit": 50})
                facts = {f["key"]: f["value"] for f in await c.memory("memory.profile.list")}
        stderr = d.stderr_path.read_text()
    assert "### recalled" in seen["overview"] and "I prefer pytest" in seen["overview"]
    assert "pytest" in seen["keyword"] and "Oslo" not in seen["keyword"]
    assert seen["meaning"].lstrip().startswith("#2") and "pytest" in seen["meaning"]
    assert HOSTILE in seen["hostile_text"]  # shown as text ...
    assert not seen["dialogs"]  # ... never run ...
    assert not [u for u in seen["requests"] if "evil.example" in u]  # ... never fetched
    assert seen["after_edit"] == "Paris"
    assert "Forgot note #2" in seen["undo_banner"] and "I prefer pytest" not in \
        seen["after_forget"]
    assert "I prefer pytest for unit tests" in seen["after_undo"]
    assert seen["reader_refusal"].startswith("forbidden: ") and "'write'" in \
        seen["reader_refusal"]
    assert "paused" in seen["clients"]
    assert "reader" in seen["activity"] and "memory.notes.store" in seen["activity"]
    assert "memory.profile.list" not in seen["activity"]  # reads only when asked
    assert "memory.profile.list" in seen["activity_reads"]
    assert facts["city"] == "Paris" and seen["city_after_csrf"] == "Paris"  # CSRF changed nothing
    assert "Log in" in seen["csrf_page"] or "Refused" in seen["csrf_page"]
    assert not any("sneaky" in n["content"] for n in notes)
    assert any(n["content"] == "I prefer pytest for unit tests" for n in notes)
    assert not [m for m in seen["console"] if "Content Security Policy" in m]
    assert "Traceback" not in stderr
