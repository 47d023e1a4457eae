"""Every note has a context: notes that one writer stores in a row are neighbours for
recall's context step (a note next to a hit, ids ±2, in the same context inherits part of
its score), whichever way they were written.

The same conversation (the first LoCoMo dev conversation's first three sessions,
``bench/data/locomo-dev.json``, CC BY-NC 4.0, see ``bench/data/locomo10.NOTICE.md``) is
stored five ways: in process with ``MemoryStore.store`` and a session id per LoCoMo
session (the reference: how a session's own turns are stored), through the websocket
(one connection per LoCoMo session), through the MCP server (one ``atomic-agent mcp``
per session), with ``memory import`` (one file per session, notes without session ids),
and in process with neither session nor batch (what the ops path gave before batches:
no context). Each of the three ops paths goes into a real daemon of its own (keyword
recall: embeddings off, so the comparison is exact), and its top 10 for
every question of those sessions must equal the reference's, note for note; the
context-less store must differ, so the check can fail.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from actors.memory.router import OpCall, run_op
from actors.store.files import FileRoom
from actors.store.notes import MemoryStore
from actors.store.schema import open_database
from actors.store.stores import open_stores
from actors.store.transfer import export_memory, import_memory
from runtime.services.config import load_config
from runtime.shell.client import open_client
from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama

DATA = REPO / "bench" / "data" / "locomo-dev.json"
SESSIONS = 3
K = 10


def _conversation() -> tuple[list[list[str]], list[str]]:
    """(the turns of each session as ``"Speaker: text"``, the questions whose evidence
    lies in those sessions)."""
    conv = json.loads(DATA.read_text())[0]
    sessions = [[f"{t['speaker']}: {t['text']}" for t in conv["conversation"][f"session_{n}"]]
                for n in range(1, SESSIONS + 1)]
    questions = [qa["question"] for qa in conv["qa"]
                 if qa.get("category") in (1, 2, 3, 4) and qa.get("evidence")
                 and all(int(m) <= SESSIONS for m in re.findall(r"D(\d+):", " ".join(
                     qa["evidence"])))]
    return sessions, questions


def _in_process(sessions: list[list[str]], questions: list[str], *, with_sessions: bool
                ) -> list[list[str]]:
    conn = open_database(":memory:")
    store = MemoryStore(conn)
    for n, turns in enumerate(sessions, 1):
        for text in turns:
            store.store(text, session_id=f"s{n}" if with_sessions else None)
    out = [[h.content for h in store.recall(q, k=K, bump=False)] for q in questions]
    conn.close()
    return out


def _cli(state: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtime.shell.cli", *args, "--state-dir",
                           str(state)], cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.mark.timeout(300)
async def test_notes_stored_through_the_websocket_mcp_and_import_recall_as_a_sessions_do(
        tmp_path):
    sessions, questions = _conversation()
    assert len(questions) >= 10 and sum(map(len, sessions)) >= 50
    reference = _in_process(sessions, questions, with_sessions=True)
    contextless = _in_process(sessions, questions, with_sessions=False)
    assert contextless != reference  # the context step matters on these questions

    async with open_fake_llama(tmp_path) as fake:
        for route in ("ws", "mcp", "import"):  # a daemon of its own each: the same corpus
            state = tmp_path / route
            state.mkdir()
            (state / "config.json").write_text(json.dumps({"memory": {
                "embeddings": {"enabled": False}, "reflection": {"enabled": False}}}))
            async with run_daemon(state, llm_url=fake.url) as d:
                await STORE[route](tmp_path, state, d, sessions)
                async with open_client(url=d.url, token=d.token) as c:
                    got = [[h["content"] for h in await c.memory(
                        "memory.notes.recall", {"query": q, "k": K})] for q in questions]
            assert got == reference, route


async def _by_websocket(tmp_path: Path, state: Path, d, sessions: list[list[str]]) -> None:
    for turns in sessions:  # one connection per session
        async with open_client(url=d.url, token=d.token) as c:
            for text in turns:
                await c.memory("memory.notes.store", {"content": text})


async def _by_mcp(tmp_path: Path, state: Path, d, sessions: list[list[str]]) -> None:
    params = StdioServerParameters(command=sys.executable, cwd=str(REPO), args=[
        "-m", "runtime.shell.cli", "mcp", "--state-dir", str(state)])
    for turns in sessions:  # one MCP server (one daemon connection) per session
        async with Client(params) as mcp:
            for text in turns:
                result = await mcp.call_tool("memory_notes_store", {"content": text})
                assert not result.is_error


async def _by_import(tmp_path: Path, state: Path, d, sessions: list[list[str]]) -> None:
    for n, turns in enumerate(sessions, 1):  # one import per session, no session ids
        path = tmp_path / f"session-{n}.jsonl"
        lines = [{"type": "atomic-agent.memory", "version": 1}] + [
            {"type": "note", "id": i, "content": text, "createdAt": 1_700_000_000_000 + i}
            for i, text in enumerate(turns, 1)]
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))
        done = _cli(state, "memory", "import", str(path))
        assert done.returncode == 0, done.stderr


STORE = {"ws": _by_websocket, "mcp": _by_mcp, "import": _by_import}


def _batches(conn) -> list[tuple[str, str | None, str | None]]:
    return [tuple(r) for r in conn.execute(
        "SELECT content, session_id, batch_id FROM memories ORDER BY id")]


def test_the_writers_batch_is_kept_by_export_and_given_to_what_an_import_adds(tmp_path):
    room = FileRoom(tmp_path / "exports")
    room.folder_ready()
    source = open_database(":memory:")
    stores = open_stores(source, load_config(tmp_path).memory)
    for text in ("Nina: I moved to Porto", "Sam: how is the flat?"):
        run_op(stores, "memory.notes.store", {"content": text},
               OpCall(source="user", batch="conn-aaaaaaaaaa"))
    run_op(stores, "memory.notes.store", {"content": "Nina: it has a balcony"},
           OpCall(source="user", session="s1"))
    export_memory(source, "all.jsonl", room)
    notes = [json.loads(x) for x in (tmp_path / "exports" / "all.jsonl").read_text()
             .splitlines() if '"note"' in x]
    assert [n["batchId"] for n in notes] == ["conn-aaaaaaaaaa", "conn-aaaaaaaaaa", None]

    target = open_database(":memory:")
    target_notes = open_stores(target, load_config(tmp_path).memory).notes
    import_memory(target_notes, "all.jsonl", room)
    assert _batches(target) == _batches(source)  # kept as exported

    lines = [{"type": "atomic-agent.memory", "version": 1}] + [
        {"type": "note", "id": i, "content": f"Turn {i} of a chat about gardens",
         "createdAt": 1_700_000_000_000 + i} for i in (1, 2)]
    for name in ("first.jsonl", "second.jsonl"):
        (tmp_path / "exports" / name).write_text("".join(json.dumps(x) + "\n" for x in lines)
                                                 .replace("chat", name.split(".")[0]))
        import_memory(target_notes, name, room)
    added = _batches(target)[3:]
    assert [s for _c, s, _b in added] == [None] * 4
    first, second = {b for _c, _s, b in added[:2]}, {b for _c, _s, b in added[2:]}
    assert len(first) == len(second) == 1 and first != second  # one batch per import
    assert next(iter(first)).startswith("import-")
