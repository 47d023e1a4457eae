"""Per-app access (runtime/shell/clients.py) and the activity log (actors/store/activity.py)
through a real daemon: a client token with scopes over the websocket, the OpenAI API and
MCP; a typed refusal naming the scope that changes nothing; revoking or pausing one app
disconnects it and leaves the others; every memory read and write recorded under the app
that made it, bounded, and kept out of exports; the ``clients`` and ``activity`` CLI."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys

import httpx
import pytest
import trio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from actors.store.activity import ActivityEntry
from runtime.shell.client import ClientError, open_client
from runtime.shell.clients import (ClientRegistry, ClientsError, add_client, op_scope,
                                   parse_scopes, read_clients, set_client)
from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama


def _cli(state, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runtime.shell.cli", *args, "--state-dir",
                           str(state)], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_tokens_are_stored_as_digests_with_their_scopes(tmp_path):
    token = add_client(tmp_path, "editor", ["write", "read"])
    raw = (tmp_path / "clients.json").read_text()
    assert token not in raw and stat.S_IMODE(os.stat(tmp_path / "clients.json").st_mode) == 0o600
    (entry,) = read_clients(tmp_path).clients
    assert entry.name == "editor" and entry.scopes == ["read", "write"] and not entry.paused
    registry = ClientRegistry(tmp_path, "owner-token-" + "x" * 30)
    who = registry.resolve(token)
    assert who is not None and who.name == "editor" and who.lacks("read", "write") is None
    assert who.lacks("forget") == "forget" and registry.resolve("aa-wrong") is None
    assert registry.resolve("owner-token-" + "x" * 30).owner
    set_client(tmp_path, "editor", paused=True)
    assert registry.reload() and registry.resolve(token) is None
    assert registry.paused(token) == "editor"
    set_client(tmp_path, "editor", revoke=True)
    assert registry.reload() and registry.resolve(token) is None and not registry.entries
    for bad, code in (("owner", "invalid_argument"), ("x y", "invalid_argument"),
                      ("", "invalid_argument")):
        with pytest.raises(ClientsError) as info:
            add_client(tmp_path, bad, ["read"])
        assert info.value.code == code
    with pytest.raises(ClientsError, match="unknown scope"):
        parse_scopes("read,sudo")
    add_client(tmp_path, "twice", ["read"])
    with pytest.raises(ClientsError, match="exists"):
        add_client(tmp_path, "twice", ["read"])
    assert op_scope("memory.notes.forget") == "forget" and op_scope("memory.export") == "admin"
    assert op_scope("memory.notes.store") == "write" and op_scope("memory.notes.recall") == "read"


@pytest.mark.slow
def test_a_broken_clients_file_is_named_and_never_overwritten(tmp_path):
    (tmp_path / "clients.json").write_text("{not json")
    for args in (("list", "--json"), ("add", "x", "--scopes", "read")):
        out = _cli(tmp_path, "clients", *args)
        assert out.returncode == 1 and "clients.json is not a clients file" in out.stderr
        assert "Traceback" not in out.stderr
    assert (tmp_path / "clients.json").read_text() == "{not json"
    bad = _cli(tmp_path, "clients", "add", "y", "--scopes", "read,root")
    assert bad.returncode == 2 and "unknown scope(s) root" in bad.stderr
    (tmp_path / "clients.json").unlink()
    made = json.loads(_cli(tmp_path, "clients", "add", "y", "--scopes", "read", "--json").stdout)
    assert made["name"] == "y" and made["token"].startswith("aa-")
    listed = _cli(tmp_path, "clients", "list", "--json")
    assert json.loads(listed.stdout) == [{"name": "y", "scopes": ["read"], "paused": False,
                                          "createdAt": read_clients(tmp_path).clients[0]
                                          .created_at}]  # JSON only, and no token


async def test_a_tampered_clients_file_is_said_at_start_in_health_and_to_apps(tmp_path):
    """A clients.json the daemon cannot read fails closed, and says so: one line when
    the daemon starts, ``/health`` degraded naming the file and the fix, and an app's
    token is refused with ``clients_unreadable`` (not "wrong token"); the owner's token
    still works, and a fixed file is read again."""
    state = tmp_path / "state"
    state.mkdir()
    app = add_client(state, "notes-app", ["read"])
    good = (state / "clients.json").read_text()
    (state / "clients.json").write_text(good[: len(good) // 2])  # cut short
    async with open_fake_llama(tmp_path / "fake") as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            base = d.ready["openaiUrl"].removesuffix("/v1")
            async with httpx.AsyncClient(base_url=base, timeout=30) as http:
                health = await http.get("/health")
                assert health.status_code == 503, health.text
                (problem,) = health.json()["problems"]
                assert "clients.json is not a clients file" in problem
                assert "fix or remove it" in problem
                refused = await http.post("/v1/chat/completions", json={}, headers={
                    "Authorization": f"Bearer {app}"})
                assert refused.json()["error"]["code"] == "clients_unreadable"
            with pytest.raises(ClientError) as info:
                async with open_client(url=d.url, token=app):
                    pass
            assert info.value.code == "clients_unreadable"
            async with open_client(url=d.url, token=d.token) as owner:  # the owner's works
                await owner.request({"type": "ping"}, "pong")
            (state / "clients.json").write_text(good)
            async with httpx.AsyncClient(base_url=base, timeout=30) as http:
                assert (await http.get("/health")).json() == {"status": "ok", "problems": []}
            async with open_client(url=d.url, token=app) as c:
                await c.request({"type": "ping"}, "pong")
    started = [line for line in d.stderr_path.read_text().splitlines()
               if line.startswith("atomic-agent: warning:")]
    assert len(started) == 1 and "clients.json is not a clients file" in started[0], started


def test_the_activity_log_is_bounded_and_counts_what_it_dropped(activity_log_on):
    log = activity_log_on(max_entries=5)
    log.append([ActivityEntry(1000 + i, "a" if i % 2 else "b", "memory.notes.store", [i])
                for i in range(8)])
    assert log.count() == 5 and log.dropped() == 3
    entries = log.entries(limit=10)
    assert [e["ids"] for e in entries] == [[7], [6], [5], [4], [3]]  # newest first
    assert {e["client"] for e in log.entries(client="a")} == {"a"}
    assert log.entries(limit=2, before=entries[1]["id"])[0]["ids"] == [5]
    assert {c["client"] for c in log.clients()} == {"a", "b"}


def test_the_log_cannot_be_emptied_by_the_app_it_audits(activity_log_on):
    """An app's one write stays in the log whatever it sends after (cheap reads, refused
    requests, 28,000 of them); repeated refusals fold into one counted row; the counts
    are totals, not the rows kept."""
    log = activity_log_on(bounds={"write": 5, "refusal": 3, "read": 5})
    log.append([ActivityEntry(1000, "app", "memory.notes.store", [1], "ok", True)])
    log.append([ActivityEntry(2000 + i, "app", "memory.export", [], "forbidden", True)
                for i in range(28_000)])
    (folded,) = log.entries(reads=False, client="app", limit=1)
    assert (folded["op"], folded["count"]) == ("memory.export", 28_000)
    log.append([ActivityEntry(40_000 + i, "app", "memory.notes.list", [], "ok")
                for i in range(50)])
    log.append([ActivityEntry(900_000, "app", f"memory.op{i}", [], "forbidden")
                for i in range(6)])  # six different refusals: three kept
    writes = log.entries(reads=False, client="app")
    assert [e["op"] for e in writes if e["outcome"] == "ok"] == ["memory.notes.store"]
    (app,) = log.clients()
    assert (app["writes"], app["reads"], app["refusals"]) == (1, 50, 28_006)
    assert log.count() == 1 + 5 + 3


def test_a_team_note_is_logged_by_its_team_id_never_as_one_of_the_persons():
    """A team space's note has an id of its own numbering: the log names it
    ``team:<id>``, so the dashboard never opens the person's note of that number."""
    from actors.memory import ops
    from actors.memory.activity import entry_for
    from actors.memory.messages import BuildContext, ToolOp
    from actors.store.records import MemoryContext, Note

    def note(i: int, space: str | None = None) -> Note:
        return Note(id=i, content=f"n{i}", tags=[], source="user", scope="all",
                    working_dir=None, created_at=1, updated_at=1, space=space)

    listed = entry_for(ToolOp(request=ops.NotesList(space="team"), client="cli"),
                       [note(3, "team"), note(4, "team")], "ok")
    assert listed is not None and listed.ids == ["team:3", "team:4"]
    given = entry_for(BuildContext(session="s", user_message="hi"),
                      MemoryContext(profile=[], recalled=[note(3), note(3, "team")], index=[]),
                      "ok")
    assert given is not None and given.ids == [3, "team:3"]
    removed = entry_for(ToolOp(request=ops.Unshare(id=3), client="cli"), ops.Removed(True),
                        "ok")
    assert removed is not None and removed.ids == ["team:3"]


def test_a_program_with_the_owners_token_cannot_claim_anothers_name(tmp_path):
    add_client(tmp_path, "notes-app", ["read"])
    registry = ClientRegistry(tmp_path, "owner-token")
    for claimed in ("dashboard", "Reflection", "reflection for notes-app", "agent for x",
                    "NOTES-APP", "owner", "backfill", None, ""):
        assert registry.owner_label(claimed) == "owner", claimed
    for own in ("cli", "tui", "my-script"):
        assert registry.owner_label(own) == own


def test_a_refusal_repeated_within_a_minute_is_one_counted_row(activity_log_on):
    log = activity_log_on()
    log.append([ActivityEntry(1000 + i, "app", "memory.export", [], "forbidden", True)
                for i in range(100)])
    log.append([ActivityEntry(1000 + 120_000, "app", "memory.export", [], "forbidden", True)])
    rows = log.entries()
    assert [(r["op"], r["count"]) for r in rows] == [("memory.export", 1),
                                                    ("memory.export", 100)]


async def _memory(c, op: str, args: dict | None = None):
    return await c.memory(op, args or {})


async def test_a_scoped_client_is_refused_by_name_and_nothing_changes(tmp_path):
    """A read-only app reads; its write, forget, export and turn are refused with
    ``forbidden`` naming the scope, and the store is as it was; the activity log names
    the app, the CLI and the agent."""
    state = tmp_path / "state"
    rules = [{"grammar_contains": "reply", "response": '{"reply": "Hello."}'}]
    async with open_fake_llama(tmp_path / "fake", rules) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            reader = add_client(state, "reader", ["read"])
            async with open_client(state, client="cli") as owner:
                await _memory(owner, "memory.profile.set", {"key": "city", "value": "Lyon"})
            await trio.sleep(0.7)  # (the daemon reads clients.json again within 0.5 s)
            async with open_client(url=d.url, token=reader, client="pretends-to-be-cli") as c:
                facts = await _memory(c, "memory.profile.list")
                assert [f["value"] for f in facts] == ["Lyon"]
                for op, args, scope in (
                        ("memory.notes.store", {"content": "x"}, "write"),
                        ("memory.profile.set", {"key": "city", "value": "Oslo"}, "write"),
                        ("memory.profile.remove", {"key": "city"}, "forget"),
                        ("memory.export", {"path": "x.jsonl"}, "admin"),
                        ("memory.activity", {}, "admin")):
                    with pytest.raises(ClientError) as info:
                        await _memory(c, op, args)
                    assert info.value.code == "forbidden", op
                    assert f"lacks the scope '{scope}'" in str(info.value)
                await c.send({"type": "say", "text": "hi"})
                refusal = await c.wait_for(lambda f: f["type"] == "error")
                assert refusal["code"] == "forbidden" and refusal["scope"] == "write"
            async with open_client(state, client="cli") as owner:
                assert [f["value"] for f in await _memory(owner, "memory.profile.list")] \
                    == ["Lyon"]
                assert await _memory(owner, "memory.notes.list") == []
                frames = [f async for f in owner.say("Hello there")]
                assert frames[-1]["reason"] == "reply"
                await trio.sleep(1.0)  # the activity buffer is written every 0.5 s
                log = await _memory(owner, "memory.activity", {"limit": 100})
    by = {(e["client"], e["op"]) for e in log["entries"]}
    assert ("reader", "memory.profile.list") in by  # its registered name, not its claim
    assert ("cli", "memory.profile.set") in by and ("cli", "turn.context") in by  # its turn
    mine = [(e["op"], e["outcome"]) for e in log["entries"] if e["client"] == "reader"]
    assert ("memory.profile.list", "ok") in mine  # its read, and each refusal, recorded
    assert {op for op, outcome in mine if outcome == "forbidden"} == {
        "memory.notes.store", "memory.profile.set", "memory.profile.remove", "memory.export",
        "memory.activity", "say"}
    assert {"client", "reads", "writes", "lastAt"} <= set(log["clients"][0])


async def test_revoking_one_app_disconnects_it_and_leaves_the_others(tmp_path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path / "fake") as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            one = add_client(state, "one", ["read"])
            two = add_client(state, "two", ["read"])
            await trio.sleep(0.7)
            async with open_client(url=d.url, token=one) as c1, \
                    open_client(url=d.url, token=two) as c2:
                await _memory(c1, "memory.profile.list")
                out = await trio.to_thread.run_sync(_cli, state, "clients", "revoke", "one")
                assert out.returncode == 0 and "revoked" in out.stdout
                with trio.fail_after(5), pytest.raises(ClientError) as closed:
                    await c1.wait_for(lambda f: False)
                assert closed.value.code == "closed" and "revoked: the client 'one'" in str(
                    closed.value)
                assert await _memory(c2, "memory.profile.list") == []  # the other stays
            with pytest.raises(ClientError) as info:
                async with open_client(url=d.url, token=one):
                    pass
            assert info.value.code == "unauthorized"
            set_client(state, "two", paused=True)
            await trio.sleep(0.7)
            with pytest.raises(ClientError) as info:
                async with open_client(url=d.url, token=two):
                    pass
            assert info.value.code == "paused" and "'two' is paused" in str(info.value)
            shown = await trio.to_thread.run_sync(_cli, state, "activity", "--client", "two")
            assert "two  hello  " in shown.stdout and "[paused]" in shown.stdout
            nobody = await trio.to_thread.run_sync(_cli, state, "activity", "--client", "x")
            assert "no activity by 'x' (apps seen: " in nobody.stdout
            set_client(state, "two", paused=False)
            await trio.sleep(0.7)
            async with open_client(url=d.url, token=two) as c2:
                assert await _memory(c2, "memory.profile.list") == []


async def test_a_name_revoked_and_added_again_is_a_new_identity(tmp_path):
    """The rotation race: revoked and re-added under the same name and scopes before the
    daemon's next look at clients.json, the old token's open connection writes nothing
    more — its very next request closes it — and the new token works."""
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path / "fake") as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            old = add_client(state, "rotating", ["read", "write"])
            await trio.sleep(0.7)
            async with open_client(url=d.url, token=old) as c:
                await _memory(c, "memory.notes.store", {"content": "before the rotation"})
                set_client(state, "rotating", revoke=True)
                new = add_client(state, "rotating", ["read", "write"])
                with pytest.raises(ClientError) as closed:  # no wait for the watcher
                    await _memory(c, "memory.notes.store", {"content": "after the rotation"})
                assert closed.value.code == "closed" and "revoked" in str(closed.value)
            async with open_client(url=d.url, token=new) as fresh:
                notes = await _memory(fresh, "memory.notes.list")
    assert [n["content"] for n in notes] == ["before the rotation"]


async def test_the_openai_api_and_mcp_take_client_tokens_with_their_scopes(tmp_path):
    state = tmp_path / "state"
    rules = [{"grammar_contains": "reply", "response": '{"reply": "Hi."}'}]
    async with open_fake_llama(tmp_path / "fake", rules) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            reader = add_client(state, "reader", ["read"])
            chat = add_client(state, "chatter", ["read", "write"])
            await trio.sleep(0.7)
            body = {"model": "atomic-agent", "messages": [{"role": "user", "content": "hi"}]}
            async with httpx.AsyncClient(base_url=d.ready["openaiUrl"], timeout=60) as http:
                refused = await http.post("/chat/completions", json=body,
                                          headers={"Authorization": f"Bearer {reader}"})
                listed = await http.get("/models", headers={"Authorization": f"Bearer {reader}"})
                ok = await http.post("/chat/completions", json=body,
                                     headers={"Authorization": f"Bearer {chat}"})
            assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
            assert "lacks the scope 'write'" in refused.json()["error"]["message"]
            assert listed.status_code == 200 and ok.status_code == 200, ok.text
            env = {**os.environ, "ATOMIC_AGENT_TOKEN": reader}
            params = StdioServerParameters(command=sys.executable, cwd=str(REPO), env=env, args=[
                "-m", "runtime.shell.cli", "mcp", "--state-dir", str(state)])
            async with Client(params) as mcp:
                listed_facts = await mcp.call_tool("memory_profile_list", {})
                stored = await mcp.call_tool("memory_notes_store", {"content": "a note"})
            assert not listed_facts.is_error
            text = "".join(p.text for p in stored.content)
            assert stored.is_error and "forbidden: the client 'reader' lacks the scope 'write'" in text
            async with open_client(state) as owner:
                assert await _memory(owner, "memory.notes.list") == []
                await trio.sleep(1.0)
                log = await _memory(owner, "memory.activity", {"client": "reader"})
            assert {(e["op"], e["outcome"]) for e in log["entries"]} == {
                ("memory.profile.list", "ok"), ("openai-api /v1/chat/completions", "forbidden"),
                ("memory.notes.store", "forbidden")}


async def test_the_activity_cli_and_export_without_the_log(tmp_path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path / "fake") as fake:
        async with run_daemon(state, llm_url=fake.url):
            store = await trio.to_thread.run_sync(
                _cli, state, "memory", "notes", "store", "I keep bees")
            assert store.returncode == 0, store.stderr
            await trio.sleep(1.0)
            shown = await trio.to_thread.run_sync(_cli, state, "activity", "--client", "cli")
            assert shown.returncode == 0 and "cli  memory.notes.store  #1" in shown.stdout
            assert re.search(r"\((1 entry|[2-9]\d* entries) kept, 0 older ones dropped\)",
                             shown.stdout), shown.stdout
            bad = await trio.to_thread.run_sync(_cli, state, "activity", "--limit", "0")
            assert bad.returncode == 2 and "--limit must be 1..1000" in bad.stderr
            target = tmp_path / "all.jsonl"
            export = await trio.to_thread.run_sync(
                _cli, state, "memory", "export", str(target))
            assert export.returncode == 0, export.stderr
    lines = [json.loads(x) for x in target.read_text().splitlines()]
    assert lines and not any("activity" in json.dumps(x) for x in lines)
    assert (state / "activity.sqlite").exists()


async def test_mcp_over_http_takes_a_client_token_with_its_scopes(tmp_path):
    """``atomic-agent mcp --http``: a client token is accepted as the bearer and its tool
    calls go through a daemon connection of its own, bound by its scopes; the owner's
    token still does everything."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from tests.test_mcp import _start_http

    state = tmp_path / "state"
    async with open_fake_llama(tmp_path / "fake") as fake, run_daemon(state, llm_url=fake.url) as d:
        reader = add_client(state, "reader", ["read"])
        proc, url = await _start_http(state)
        try:
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {reader}"}) as h, \
                    Client(streamable_http_client(url, http_client=h)) as mcp:
                listed = await mcp.call_tool("memory_profile_list", {})
                stored = await mcp.call_tool("memory_notes_store", {"content": "a note"})
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {d.token}"}) as h, \
                    Client(streamable_http_client(url, http_client=h)) as mcp:
                owner = await mcp.call_tool("memory_notes_store", {"content": "mine"})
        finally:
            proc.terminate()
            with trio.fail_after(10):
                await proc.wait()
        async with open_client(state) as c:
            notes = await _memory(c, "memory.notes.list")
            await trio.sleep(1.0)
            log = await _memory(c, "memory.activity", {"client": "reader"})
    assert not listed.is_error and not owner.is_error
    assert stored.is_error and "lacks the scope 'write'" in "".join(p.text for p in stored.content)
    assert [n["content"] for n in notes] == ["mine"]
    assert {(e["op"], e["outcome"]) for e in log["entries"]} == {
        ("memory.profile.list", "ok"), ("memory.notes.store", "forbidden")}
