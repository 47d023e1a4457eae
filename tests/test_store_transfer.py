"""``memory export`` / ``memory import``: a versioned JSON-lines file that
carries facts with their history, notes with tags, scope and links, lessons and
procedures; importing it into an empty state directory reproduces recall for a fixed
query set; importing twice adds nothing; a bad file is one error and writes nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
import trio

from actors.store.lessons import LessonStore
from actors.store.procedures import ProcedureStore
from actors.store.schema import open_database
from runtime.shell.client import open_client
from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama

pytestmark = pytest.mark.slow  # real daemons, CLI subprocesses and a 100,000-line import

NOTES = [
    ("The user keeps two beehives on the roof of their flat", ["bees"]),
    ("The user's sister Maria lives in Porto and teaches chemistry", ["family"]),
    ("Standup meeting moved to 9:30 on Tuesdays", ["work"]),
    ("The user is learning the cello, lessons on Thursday evenings", []),
    ("Favourite bakery: the one on Rua Augusta with custard tarts", ["food"]),
]
QUERIES = ["beehives on the roof", "where does my sister live", "when is standup",
           "cello lessons", "custard tarts bakery", "chemistry teacher in Porto"]


@pytest.fixture
def conn(engine_conn):
    """Every test here runs on each engine (SQLite, PostgreSQL)."""
    return engine_conn


def cli(state: Path, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "runtime.shell.cli", "--state-dir", str(state),
                           *argv], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    if check:
        assert done.returncode == 0, done.stderr
    return done


async def _recall_view(c) -> dict:
    """What recall and the browsing ops show, without ids and times (they differ)."""
    notes = {n["id"]: n["content"] for n in await c.memory("memory.notes.list", {"limit": 100})}
    links = sorted((notes[e["fromId"]], e["kind"], notes[e["toId"]])
                   for e in await c.memory("memory.links.list", {}))
    return {
        "recall": {q: [n["content"] for n in await c.memory("memory.notes.recall",
                                                             {"query": q, "k": 3})]
                   for q in QUERIES},
        "notes": sorted((n, tuple(t)) for n, t in (
            (x["content"], x["tags"]) for x in await c.memory("memory.notes.list",
                                                              {"limit": 100}))),
        "profile": sorted((f["key"], f["value"]) for f in await c.memory("memory.profile.list")),
        "history": [(f["value"], f["supersededBy"] is None) for f in await c.memory(
            "memory.profile.history", {"key": "city"})],
        "removed": [f["value"] for f in await c.memory("memory.profile.history",
                                                       {"key": "employer"})],
        "links": links,
        "lessons": [(r["activation"], r["principle"]) for r in
                    [await c.memory("memory.lessons.get", {"id": x["id"]})
                     for x in await c.memory("memory.lessons.list", {})]],
        "procedures": [(r["activation"], [s["description"] for s in r["steps"]]) for r in
                       [await c.memory("memory.procedures.get", {"id": x["id"]})
                        for x in await c.memory("memory.procedures.list", {})]],
    }


async def test_export_then_import_into_an_empty_state_dir_reproduces_recall(tmp_path):
    source, target = tmp_path / "source", tmp_path / "target"
    source.mkdir()
    conn = open_database(str(source / "memory.sqlite"))  # the cold path's stores: no op writes them
    conn.execute("INSERT INTO memories (content, content_key, created_at, updated_at)"
                 " VALUES ('The user asked twice how the hives are', 'k', 1, 1)")
    lesson = LessonStore(conn).create("when the user asks about bees",
                                      "mention the roof hives first", parent_ids=[1])
    ProcedureStore(conn).create("repot a plant", ["water it the day before",
                                                  "loosen the root ball"], source="manual",
                                parent_lesson_ids=[lesson.id])
    conn.close()
    async with open_fake_llama(tmp_path) as fake:
        async with run_daemon(source, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                ids = [(await c.memory("memory.notes.store", {"content": text, "tags": tags}))["id"]
                       for text, tags in NOTES]
                await c.memory("memory.links.add", {"fromId": ids[0], "toId": ids[4],
                                                    "kind": "RELATES_TO", "weight": 0.5})
                for city in ("Paris", "Lisbon"):
                    await c.memory("memory.profile.set", {"key": "city", "value": city})
                await c.memory("memory.profile.set", {"key": "employer", "value": "Acme"})
                await c.memory("memory.profile.remove", {"key": "employer"})
                await c.memory("memory.profile.set", {"key": "editor", "value": "helix",
                                                      "pinned": False, "keywords": ["editor"]})
                before = await _recall_view(c)
            export = tmp_path / "memory.jsonl"
            done = cli(source, "memory", "export", str(export))  # through the running daemon
            assert done.stdout.startswith("exported 3 facts, 4 fact versions, 6 notes, 1 links, "
                                          "1 lessons, 1 procedures")
            streamed = cli(source, "memory", "export").stdout  # to stdout
            assert cli(source, "memory", "export", "-").stdout.splitlines()[1:] \
                == streamed.splitlines()[1:]  # "-" is stdout too
        assert export.stat().st_mode & 0o777 == 0o600  # memory is private
        lines = [json.loads(x) for x in export.read_text().splitlines()]
        assert lines[0]["type"] == "atomic-agent.memory" and lines[0]["version"] == 1
        assert [x["type"] for x in lines[1:]] == ["fact"] * 3 + ["note"] * 6 + [
            "link", "lesson", "procedure"]
        assert not any("vector" in json.dumps(x) for x in lines)
        assert streamed.splitlines()[1:] == export.read_text().splitlines()[1:]

        # into a state directory that does not exist yet, with no daemon: created
        done = cli(target, "memory", "import", str(export), "--json")
        first = json.loads(done.stdout)
        assert first["added"] == {"factVersions": 4, "notes": 6, "links": 1, "lessons": 1,
                                  "procedures": 1}
        async with run_daemon(target, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                assert await _recall_view(c) == before
                (target / "exports").mkdir(exist_ok=True)  # the daemon reads files there only
                shutil.copy(export, target / "exports" / "again.jsonl")
                again = await c.memory("memory.import", {"path": "again.jsonl"})
                assert again["added"] == dict.fromkeys(first["added"], 0)
                assert again["skipped"] == {"factVersions": 4, "notes": 6, "links": 1,
                                            "lessons": 1, "procedures": 1}
                assert await _recall_view(c) == before
                procedure = await c.memory("memory.procedures.get", {"id": 1})
                lesson = await c.memory("memory.lessons.get", {
                    "id": (await c.memory("memory.lessons.list", {}))[0]["id"]})
                assert procedure["parentLessonIds"] == [lesson["id"]]
                parent = await c.memory("memory.notes.recall", {"id": lesson["parentIds"][0]})
                assert parent[0]["content"] == "The user asked twice how the hives are"
            # a bad file through the running daemon: the error names the user's file
            bad = tmp_path / "bad.jsonl"
            bad.write_text("not json\n")
            done = cli(target, "memory", "import", str(bad), check=False)
            assert done.returncode == 1 and f"path: {bad} line 1" in done.stderr, done.stderr
            assert "cli-" not in done.stderr


async def test_import_merges_histories_newest_value_wins(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for state in (a, b):
        state.mkdir()
    cli(a, "memory", "profile", "set", "city", "Paris")
    cli(b, "memory", "profile", "set", "city", "Berlin")  # newer than Paris
    cli(b, "memory", "notes", "store", "The user keeps two beehives on the roof")
    cli(a, "memory", "notes", "store", "the user keeps two beehives on the roof!")
    cli(b, "memory", "export", str(tmp_path / "b.jsonl"))
    cli(a, "memory", "import", str(tmp_path / "b.jsonl"))
    history = json.loads(cli(a, "memory", "profile", "history", "city", "--json").stdout)
    assert [(f["value"], f["supersededBy"] is None) for f in history] == [
        ("Paris", False), ("Berlin", True)]
    notes = json.loads(cli(a, "memory", "notes", "list", "--json").stdout)
    assert len(notes) == 1  # the same note in other words is not added twice
    cli(a, "memory", "profile", "set", "city", "Rome")  # newer than the export
    cli(a, "memory", "import", str(tmp_path / "b.jsonl"))
    assert json.loads(cli(a, "memory", "profile", "list", "--json").stdout)[0]["value"] == "Rome"


async def test_a_bad_export_file_is_one_error_and_writes_nothing(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    cli(state, "memory", "notes", "store", "something to keep")
    good = tmp_path / "good.jsonl"
    cli(state, "memory", "export", str(good))
    lines = good.read_text().splitlines()
    cases = {
        "truncated.jsonl": (lines + ['{"type": "note", "content": "half'], "line 3"),
        "missing.jsonl": (lines + ['{"type": "note", "content": "no id"}'], "`id`"),
        "headless.jsonl": (lines[1:], "not an atomic-agent memory export"),
        "newer.jsonl": ([lines[0].replace('"version":1', '"version":99')] + lines[1:],
                        "format version 99"),
        "badkind.jsonl": (lines + ['{"type": "link", "fromId": 1, "toId": 2, "kind": "X"}'],
                          "line 3"),
        "empty.jsonl": ([], "is empty"),
        # a time from the future would date every later write after it
        "future.jsonl": (lines + ['{"type": "note", "id": 9, "content": "x", "tags": [], '
                                  '"createdAt": 4102444800000}'],
                         "line 3: createdAt is 2100-01-01, more than a day ahead"),
        "huge.jsonl": (lines + ['{"type": "note", "id": 99999999999999999999, '
                                '"content": "x", "tags": [], "createdAt": 1}'],
                       "line 3: id 99999999999999999999 is out of range"),
        "twice.jsonl": (lines + [lines[1]], "line 3: note id"),
    }
    other = tmp_path / "other"
    other.mkdir()
    for name, (content, expected) in cases.items():
        path = tmp_path / name
        path.write_text("\n".join(content) + "\n")
        done = cli(other, "memory", "import", str(path), check=False)
        assert done.returncode == 1 and expected in done.stderr, (name, done.stderr)
        assert done.stderr.count("\n") == 1
    assert json.loads(cli(other, "memory", "notes", "list", "--json").stdout) == []
    done = cli(state, "memory", "import", str(tmp_path / "nope.jsonl"), check=False)
    assert done.returncode == 1 and "no such file" in done.stderr
    done = cli(state, "memory", "export", str(good), check=False)
    assert done.returncode == 1 and "exists" in done.stderr and "--overwrite" in done.stderr
    cli(state, "memory", "export", str(good), "--overwrite")


def _facts_file(path: Path, n: int) -> None:
    with open(path, "w") as f:
        f.write(json.dumps({"type": "atomic-agent.memory", "version": 1}) + "\n")
        for i in range(n):
            f.write(json.dumps({"type": "fact", "key": f"imported_{i}", "versions": [
                {"value": f"value {i} " + "x" * 60, "validFrom": 1_700_000_000_000 + i}]})
                + "\n")


def test_a_100000_line_import_holds_no_more_than_a_chunk(tmp_path):
    """The file is read line by line (checked, then written in three passes, a chunk per
    transaction): a 16 MB export imports with well under a megabyte of Python objects
    at its peak, where reading it whole held the file and every record (~130 MB)."""
    from actors.store.files import FileRoom
    from actors.store.notes import MemoryStore
    from actors.store.transfer import import_memory

    _facts_file(tmp_path / "big.jsonl", 100_000)
    conn = open_database(str(tmp_path / "memory.sqlite"))
    tracemalloc.start()
    try:
        result = import_memory(MemoryStore(conn), str(tmp_path / "big.jsonl"), FileRoom(None))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result["added"]["factVersions"] == 100_000
    assert peak < 8_000_000, peak
    conn.close()


async def test_an_import_goes_on_beside_turns_and_writes(tmp_path):
    """A large import runs in steps: memory writes and turns made meanwhile are answered
    at once and kept (the import lets the store go between two chunks)."""
    state = tmp_path / "state"
    _facts_file(tmp_path / "big.jsonl", 30_000)
    rules = [{"grammar_contains": "reply", "response": '{"reply": "Hello."}'}]
    async with open_fake_llama(tmp_path / "fake", rules) as fake, \
            run_daemon(state, llm_url=fake.url) as d:
        waits: list[float] = []
        async with trio.open_nursery() as nursery:
            done = trio.Event()

            async def importing() -> None:
                await trio.to_thread.run_sync(
                    lambda: cli(state, "memory", "import", str(tmp_path / "big.jsonl")))
                done.set()

            nursery.start_soon(importing)
            async with open_client(url=d.url, token=d.token) as c:
                i = 0
                while not done.is_set():
                    t0 = trio.current_time()
                    with trio.fail_after(10):
                        await c.memory("memory.profile.set", {"key": f"during_{i}",
                                                              "value": f"kept {i}"})
                        [f async for f in c.say("hello")]
                    waits.append(trio.current_time() - t0)
                    i += 1
        async with open_client(url=d.url, token=d.token) as c:
            facts = {f["key"]: f["value"] for f in await c.memory("memory.profile.list")}
    assert i >= 1 and all(facts[f"during_{k}"] == f"kept {k}" for k in range(i))
    assert sum(k.startswith("imported_") for k in facts) == 30_000
    assert max(waits) < 5, waits


def test_importing_the_same_file_again_adds_no_copy_of_an_archived_note(tmp_path):
    """A note archived since (it stated a fact's old value) is in the export as archived;
    importing that export again, any number of times, adds nothing: the store's own
    dedup looks at active notes only, the import at every stored text."""
    from actors.memory.router import OpCall, run_op
    from actors.store.files import FileRoom
    from actors.store.stores import open_stores
    from runtime.services.config import Config

    room = FileRoom(None, private=tmp_path / "state")
    s = open_stores(open_database(str(tmp_path / "memory.sqlite")), Config().memory)
    run_op(s, "memory.profile.set", {"key": "city", "value": "Porto"})
    run_op(s, "memory.notes.store", {"content": "The user lives in Porto and works as a nurse."})
    run_op(s, "memory.profile.set", {"key": "city", "value": "Lisbon"})  # archives the note
    assert [n.archived for n in run_op(s, "memory.notes.list", {"archived": "all"})[0]] == [True]
    run_op(s, "memory.export", {"path": str(tmp_path / "x.jsonl")}, OpCall(files=room))
    for _ in range(3):
        result = run_op(s, "memory.import", {"path": str(tmp_path / "x.jsonl")},
                        OpCall(files=room))[0]
        assert result.added["notes"] == 0 and result.skipped["notes"] == 1
    assert len(run_op(s, "memory.notes.list", {"archived": "all"})[0]) == 1
