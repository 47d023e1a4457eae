"""The daemon's first start of its actors by fork (``runtime.kernel._fork``; target:
``serve`` ready ≤ 2 s, docs/architecture.md §10).

With ``llm.url`` set, ``serve`` imports the actors' modules once and forks the four
children before ``trio.run``; restarts spawn a fresh interpreter. These tests run a real
daemon and look at its processes through ``/proc``: the children are forked (the root's
command line), named ``aa-<actor>``, hold no copy of the state lock, and exit when the
root is SIGKILLed (no child holds another child's channel open); a restarted actor is
spawned (``runtime.kernel._child --actor NAME``) under the same name.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import trio

from runtime.shell.client import open_client
from tests.conftest import actor_name, descendants, pid_alive
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama

ACTORS = {"memory", "agent", "reflection", "backfill"}


def actors_of(root: int) -> dict[str, int]:
    """``{actor: pid}`` of the daemon ``root``'s direct children."""
    out = {}
    for pid in descendants(root):
        name = actor_name(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue  # exited since it was listed (the killed actor, a reaped helper)
        if name is not None and int(stat[stat.rfind(")") + 2:].split()[1]) == root:
            out[name] = pid
    return out


def cmdline(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")


async def test_actors_are_forked_named_and_die_with_a_killed_root(tmp_path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path) as fake:
        async with run_daemon(state, llm_url=fake.url, expect_exit=None) as d:
            root = d.proc.pid
            kids = actors_of(root)
            assert set(kids) == ACTORS
            for name, pid in kids.items():
                assert Path(f"/proc/{pid}/comm").read_text().strip() == f"aa-{name}"
                assert cmdline(pid)[0] == f"atomic-agent: {name} actor (forked)".encode(), \
                    f"{name} was not forked"
                held = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
                assert str(state / "daemon.lock") not in held, f"{name} holds the state lock"
            async with open_client(url=d.url, token=d.token) as c:
                note = await c.memory("memory.notes.store", {"content": "forked kettle note"})
            d.proc.send_signal(signal.SIGKILL)
            await d.proc.wait()
            with trio.fail_after(10):  # each child reads EOF on its own channel and exits
                while any(pid_alive(p) for p in kids.values()):
                    await trio.sleep(0.05)
        async with run_daemon(state, llm_url=fake.url) as d2:  # the lock is free again
            async with open_client(url=d2.url, token=d2.token) as c:
                hits = await c.memory("memory.notes.recall", {"id": note["id"]})
    assert [n["content"] for n in hits] == ["forked kettle note"]


async def test_a_killed_forked_actor_is_restarted_by_spawn_under_the_same_name(tmp_path):
    async with open_fake_llama(tmp_path) as fake:
        async with run_daemon(tmp_path / "state", llm_url=fake.url) as d:
            forked = actors_of(d.proc.pid)["memory"]
            os.kill(forked, signal.SIGKILL)
            with trio.fail_after(20):
                while actors_of(d.proc.pid).get("memory") in (None, forked):
                    await trio.sleep(0.05)
            spawned = actors_of(d.proc.pid)["memory"]
            with trio.fail_after(20):  # python -m runtime.kernel._child --actor memory, then titled
                while cmdline(spawned)[0] != b"atomic-agent: memory actor (spawned)":
                    argv = cmdline(spawned)
                    assert b"runtime.kernel._child" in argv or argv[0].startswith(b"atomic-agent:"), argv
                    await trio.sleep(0.05)
            async with open_client(url=d.url, token=d.token) as c:
                with trio.fail_after(20):
                    while True:  # the restart is ready once memory answers again
                        try:
                            note = await c.memory("memory.notes.store",
                                                  {"content": "after the restart"})
                            break
                        except Exception:  # noqa: BLE001 - unavailable while it starts
                            await trio.sleep(0.1)
                assert (await c.memory("memory.notes.recall", {"id": note["id"]}))[0][
                    "content"] == "after the restart"


async def test_forked_memory_and_backfill_embed_and_recall_by_meaning(tmp_path):
    """numpy (its OpenBLAS threads started in the root before the fork) and the local
    embedder work in forked children: the backfill embeds the notes, the memory actor
    finds a paraphrase that keyword recall cannot."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "config.json").write_text('{"memory": {"embeddings": {"backfillStartDelayMs": 50}}}')
    async with open_fake_llama(tmp_path) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            assert cmdline(actors_of(d.proc.pid)["memory"])[0] == \
                b"atomic-agent: memory actor (forked)"
            async with open_client(url=d.url, token=d.token) as c:
                for text in ("I prefer pytest for unit work", "My sister lives in Lyon",
                             "I drink oat flat whites"):
                    await c.memory("memory.notes.store", {"content": text})
                with trio.fail_after(60):
                    while True:
                        emb = (await c.memory("memory.stats"))["embeddings"]
                        if emb["vectors"] == 3 and emb["recall"] == "hybrid":
                            break
                        await trio.sleep(0.05)
                hits = await c.memory("memory.notes.recall", {
                    "query": "what did I tell you about my Python testing setup?"})
    assert [h["content"] for h in hits] == ["I prefer pytest for unit work"]


async def test_forked_process_waits_from_several_tasks_and_reports_signals():
    """``ForkedProcess`` as the supervisor uses ``trio.Process``: two tasks wait at once
    (the supervisor's loop and its shutdown), a signal's death is ``-signum``, a reaped
    child is never signalled again, an exit status comes back as is."""
    from runtime.kernel._fork import ForkedProcess

    pid = os.fork()
    if pid == 0:  # a child that only sleeps
        try:
            import time

            time.sleep(30)
        finally:
            os._exit(0)
    proc = ForkedProcess(pid)
    assert proc.returncode is None
    codes: list[int] = []
    async with trio.open_nursery() as nursery:
        for _ in range(2):
            nursery.start_soon(lambda: _append(codes, proc.wait()))
        await trio.sleep(0.1)
        proc.kill()
    assert codes == [-signal.SIGKILL, -signal.SIGKILL] and proc.returncode == -signal.SIGKILL
    proc.terminate()  # reaped: not sent to a pid that may be reused

    pid = os.fork()
    if pid == 0:
        os._exit(3)
    with trio.fail_after(5):
        assert await ForkedProcess(pid).wait() == 3


async def _append(out: list[int], wait) -> None:
    out.append(await wait)


async def test_a_returncode_poll_while_another_task_waits_is_not_an_error():
    """The supervisor's shutdown polls ``returncode`` while its loop waits on the same
    child: the poll reaps and closes the pidfd; the waiter must return the status, not
    fail with ``ClosedResourceError`` (it stopped the daemon with exit 1 once)."""
    from runtime.kernel._fork import ForkedProcess

    for _ in range(20):
        pid = os.fork()
        if pid == 0:
            os._exit(5)
        proc = ForkedProcess(pid)
        codes: list[int] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: _append(codes, proc.wait()))
            await trio.sleep(0)  # the waiter parks on the pidfd
            with trio.fail_after(5):
                while proc.returncode is None:  # the poll reaps it under the waiter
                    await trio.sleep(0.001)
        assert codes == [5]
