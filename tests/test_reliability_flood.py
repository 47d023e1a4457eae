"""A client that floods the daemon affects only itself.

A flooder sends :data:`FLOOD_FRAMES` memory writes and recalls as fast as its socket
takes them — once while reading its answers, once never reading them — while a second,
polite client pings, recalls and runs a turn. The polite client's requests never wait
behind the flood (each is answered well inside :data:`POLITE_BOUND_S`), the flooder that
reads gets an answer for every frame it sent (a typed one, ``busy`` past its in-flight
limit: nothing is dropped silently), the flooder that never reads is dropped on its own,
and the daemon shuts down cleanly afterwards.
"""

from __future__ import annotations

import json
import time

import pytest
import trio
from trio_websocket import ConnectionClosed, open_websocket_url

from runtime.shell.client import open_client
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama

FLOOD_FRAMES = 3000
"""Frames one flooder sends per case (docs/RELIABILITY.md)."""
POLITE_BOUND_S = 3.0
"""Liveness bound on each polite request during the flood (seconds; the flood itself
needs far longer than this to be worked through)."""
RULES = [{"grammar_contains": "reply", "response": '{"reply": "fine"}'}]


def _frame(i: int, *, big: bool = False) -> str:
    """A write, or a read: a recall, or (``big``) a list of up to 200 notes, so the
    answers of a client that never reads outgrow every socket buffer."""
    if i % 2 and big:
        return json.dumps({"type": "memory", "id": f"f{i}", "op": "memory.notes.list",
                           "args": {"limit": 200}})
    if i % 2:
        return json.dumps({"type": "memory", "id": f"f{i}", "op": "memory.notes.recall",
                           "args": {"query": "harbour lantern"}})
    return json.dumps({"type": "memory", "id": f"f{i}", "op": "memory.notes.store",
                       "args": {"content": f"flood note {i} harbour lantern cobalt"}})


async def _flood(url: str, token: str, *, read: bool, answered: list[int],
                 done: trio.Event, closed: list[int]) -> None:
    """Send FLOOD_FRAMES frames; with ``read``, count their answers (``done`` once all
    arrived); without, never read (``done`` once the daemon drops the connection)."""
    async with open_websocket_url(url, max_message_size=64 * 1024 * 1024) as ws:
        await ws.send_message(json.dumps({"type": "hello", "token": token}))
        assert json.loads(await ws.get_message())["type"] == "welcome"

        async def reader() -> None:
            while len(answered) < FLOOD_FRAMES:
                frame = json.loads(await ws.get_message())
                if frame.get("type") in ("memory.result", "error") and frame.get("id"):
                    answered.append(1)
            done.set()

        if read:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(reader)
                for i in range(FLOOD_FRAMES):
                    await ws.send_message(_frame(i))
            return
        try:
            for i in range(FLOOD_FRAMES):
                await ws.send_message(_frame(i, big=True))
            while True:  # still never reading: only the daemon dropping us ends this
                await ws.send_message(json.dumps({"type": "ping"}))
                await trio.sleep(0.05)
        except ConnectionClosed as exc:
            closed.append(exc.reason.code)
        done.set()


@pytest.mark.parametrize("reads", [True, False], ids=["reads", "never-reads"])
async def test_a_flooding_client_affects_only_itself(tmp_path, reads):
    async with open_fake_llama(tmp_path, RULES) as fake:
        async with run_daemon(tmp_path / "state", llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as polite:
                canary = await polite.memory("memory.notes.store",
                                             {"content": "the canary sings at dawn"})
                answered: list[int] = []
                closed: list[int] = []
                done = trio.Event()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(lambda: _flood(d.url, d.token, read=reads,
                                                      answered=answered, done=done,
                                                      closed=closed))
                    await trio.sleep(0.5)  # the flood is under way
                    waits = []
                    for i in range(10):
                        t0 = time.monotonic()
                        with trio.fail_after(POLITE_BOUND_S):
                            await polite.send({"type": "ping"})
                            await polite.wait_for(lambda f: f.get("type") == "pong")
                            got = await polite.memory("memory.notes.recall", {"id": canary["id"]})
                        assert got[0]["content"] == "the canary sings at dawn"
                        waits.append(time.monotonic() - t0)
                    with trio.fail_after(POLITE_BOUND_S * 4):
                        frames = [f async for f in polite.say("still there?")]
                    assert frames[-1].get("reason") == "reply", frames
                    in_flood = not done.is_set()
                    with trio.fail_after(180):
                        await done.wait()
                    nursery.cancel_scope.cancel()
                if reads:
                    # every frame got its answer: a result, or `busy` past its in-flight
                    # limit (answered at once, so the flood may be over by now: in_flood
                    # is no longer required)
                    assert len(answered) == FLOOD_FRAMES, (len(answered), in_flood)
                else:
                    assert closed, "the flooder that never reads was not dropped"
                await polite.send({"type": "ping"})
                await polite.wait_for(lambda f: f.get("type") == "pong")
    assert "Traceback" not in d.stderr_path.read_text()


KEEPALIVE_WRITES = 60
"""Writes the keepalive client sends at once while the store's write lock is held."""


async def test_a_client_past_its_limit_is_answered_busy_and_its_keepalive_pings_answered(
        tmp_path):
    """A client with more requests in flight than ``server.clientInflight`` while the
    store is slow (another process holds the write lock) gets a ``busy`` answer for each
    extra request at once, the rest in time, and its keepalive pings are answered all the
    while: the daemon keeps reading its frames (before, it stopped reading, pings went
    unanswered, and the client's own keepalive closed the connection)."""
    import apsw

    state = tmp_path / "state"
    async with open_fake_llama(tmp_path, RULES) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_websocket_url(d.url) as ws:
                await ws.send_message(json.dumps({"type": "hello", "token": d.token}))
                assert json.loads(await ws.get_message())["type"] == "welcome"
                lock = apsw.Connection(str(state / "memory.sqlite"))
                lock.execute("BEGIN IMMEDIATE")  # a long writer elsewhere (8 s)
                answers: dict[str, str] = {}
                pings = 0
                try:
                    for i in range(KEEPALIVE_WRITES):
                        await ws.send_message(json.dumps({
                            "type": "memory", "id": f"w{i}", "op": "memory.notes.store",
                            "args": {"content": f"note {i} about the ferry"}}))

                    async def keepalive() -> None:  # as the websockets library does
                        nonlocal pings
                        while True:
                            with trio.fail_after(2):
                                await ws.ping()
                            pings += 1
                            await trio.sleep(0.5)

                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(keepalive)
                        with trio.fail_after(8):
                            while len(answers) < KEEPALIVE_WRITES - 16:
                                f = json.loads(await ws.get_message())
                                answers[f["id"]] = f.get("code") or f["type"]
                        await trio.sleep(8 - 1)
                        lock.execute("COMMIT")
                        with trio.fail_after(30):
                            while len(answers) < KEEPALIVE_WRITES:
                                f = json.loads(await ws.get_message())
                                answers[f["id"]] = f.get("code") or f["type"]
                        nursery.cancel_scope.cancel()
                finally:
                    if lock.in_transaction:
                        lock.execute("ROLLBACK")
                    lock.close()
    codes = sorted(set(answers.values()))
    assert len(answers) == KEEPALIVE_WRITES and pings >= 10, (pings, codes)
    assert list(answers.values()).count("busy") == KEEPALIVE_WRITES - 16
    assert set(codes) <= {"busy", "database_busy", "memory.result"}, codes
