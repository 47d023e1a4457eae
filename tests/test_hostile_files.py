"""Files a client names (``memory.export``, ``memory.backup``, ``memory.import``): the
daemon reads and writes only in ``<state>/exports/``, regular files only; every bad name
is one ``invalid_argument`` answer, the memory actor never crashes, nothing outside the
folder is touched, and the CLI moves files to and from the user's paths itself."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from actors.store.errors import ValidationError
from actors.store.files import FileRoom
from runtime.shell.client import ClientError, open_client
from tests.daemon import REPO, run_daemon
from tests.fakes.llama_server import open_fake_llama


HOSTILE_FRAMES = 66
"""Frames the daemon test sends: 22 hostile names for each of three ops."""


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def hostile_names(state: Path, outside: Path) -> list[str]:
    """Every kind of name a client may send: NUL, too long, climbing out, other folders,
    device nodes, the store's own files, links and FIFOs planted in the folder."""
    exports = state / "exports"
    exports.mkdir(exist_ok=True)
    (exports / "to-token").symlink_to(state / "token")
    (exports / "to-db").symlink_to(state / "memory.sqlite")
    os.mkfifo(exports / "fifo.jsonl")
    (exports / "folder").mkdir()
    return ["a\x00b.jsonl", "x" * 10_000, "y" * 300, "../token", "..", ".", "", "   ",
            ".hidden", "sub/name.jsonl", "/dev/null", "/dev/zero", str(state / "memory.sqlite"),
            str(state / "memory.sqlite-wal"), str(state / "token"), str(outside / "out.jsonl"),
            str(exports / ".." / "token"), "to-token", "to-db", "fifo.jsonl", "folder",
            "\udcff.jsonl"]


async def test_every_hostile_path_is_one_clear_refusal_and_the_daemon_stays_up(tmp_path):
    state, outside = tmp_path / "state", tmp_path / "outside"
    outside.mkdir()
    async with open_fake_llama(tmp_path) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                await c.memory("memory.notes.store", {"content": "The user keeps bees"})
                token, null = digest(state / "token"), os.stat("/dev/null")
                names = hostile_names(state, outside)
                answers = []
                for op in ("memory.export", "memory.backup", "memory.import"):
                    for name in names:
                        args = {"path": name, "overwrite": True} if op != "memory.import" \
                            else {"path": name}
                        with trio.fail_after(10):  # a FIFO never blocks the actor
                            try:
                                await c.memory(op, args)
                                answers.append((op, name, "ok"))
                            except ClientError as exc:
                                answers.append((op, name, exc.code))
                assert len(answers) == HOSTILE_FRAMES
                assert all(code == "invalid_argument" for _, _, code in answers), [
                    a for a in answers if a[2] != "invalid_argument"]
                # the daemon serves on, with no actor restarted and nothing lost
                metrics = await c.request({"type": "metrics"}, "metrics.result")
                assert metrics["restarts"] == 0
                notes = await c.memory("memory.notes.list", {})
                assert [n["content"] for n in notes] == ["The user keeps bees"]
                done = await c.memory("memory.export", {"path": "fine.jsonl"})
                assert done["path"] == str(state / "exports" / "fine.jsonl")
    assert digest(state / "token") == token
    assert os.stat("/dev/null").st_rdev == null.st_rdev and stat.S_ISCHR(
        os.stat("/dev/null").st_mode)
    assert list(outside.iterdir()) == []
    assert (state / "exports" / "to-token").is_symlink()  # not replaced, not followed
    assert sorted(p.name for p in (state / "exports").iterdir()) == [
        "fifo.jsonl", "fine.jsonl", "folder", "to-db", "to-token"]


def cli(state: Path, *argv: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "runtime.shell.cli", "--state-dir", str(state),
                           "memory", *argv], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.mark.parametrize("running", [False, True], ids=["offline", "daemon"])
async def test_the_cli_never_writes_onto_the_live_memory_and_moves_files_itself(
        tmp_path, running):
    state = tmp_path / "state"
    state.mkdir()
    assert cli(state, "notes", "store", "The user keeps bees").returncode == 0
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)

    def check() -> None:
        for argv in (["backup", "--overwrite", str(state / "memory.sqlite")],
                     ["export", "--overwrite", str(state / "memory.sqlite")],
                     ["backup", "--overwrite", str(state / "token")],
                     ["backup", str(tmp_path / ("z" * 300))],
                     ["backup", str(tmp_path / "a\udcffb")],
                     ["import", str(fifo)],
                     ["import", str(state / "memory.sqlite")]):
            done = cli(state, *argv)
            assert done.returncode != 0 and done.stderr.count("\n") == 1, (argv, done.stderr)
        copy = tmp_path / "copy.sqlite"
        assert cli(state, "backup", str(copy)).returncode == 0
        assert copy.stat().st_mode & 0o777 == 0o600
        assert cli(state, "backup", str(copy)).returncode == 1  # exists: --overwrite
        assert cli(state, "export", str(tmp_path / "m.jsonl")).returncode == 0
        done = cli(state, "import", str(tmp_path / "m.jsonl"))
        assert done.returncode == 0 and str(tmp_path / "m.jsonl") in done.stdout

    if running:
        async with open_fake_llama(tmp_path) as fake:
            async with run_daemon(state, llm_url=fake.url):
                await trio.to_thread.run_sync(check)
                assert not any((state / "exports").iterdir())  # the CLI's files are gone
    else:
        check()
    done = cli(state, "notes", "list", "--json")
    assert "The user keeps bees" in done.stdout


def test_the_file_room_reads_regular_files_within_the_limit(tmp_path):
    room = FileRoom(tmp_path / "exports")
    room.folder_ready()
    (tmp_path / "exports" / "big.jsonl").write_bytes(b"x" * 2048)
    with pytest.raises(ValidationError, match="at most"):
        room.read("big.jsonl", limit=1024)
    assert room.read("big.jsonl")[1] == b"x" * 2048
    with pytest.raises(ValidationError, match="exports"):
        room.target(str(tmp_path / "elsewhere.jsonl"), overwrite=True)
    assert room.target(str(tmp_path / "exports" / "ok.jsonl"), False) == \
        (tmp_path / "exports" / "ok.jsonl").resolve()
    with pytest.raises(ValidationError, match="not a regular file"):
        FileRoom(None).read("/dev/null")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


def poison_frames() -> list[tuple[str, dict]]:
    """Every op with each of its arguments set to hostile values of every JSON kind."""
    from actors.memory.ops import OPS

    values = ["\x00", "a\x00b", "x" * 10_000, "\ud800", "..", " \u200b" * 10, "",
              -1, 0, 2**62, 1.5e308, True, None, [], [[["deep"]]], {"a": {"b": 1}}]
    frames = []
    for op, spec in OPS.items():
        for field in spec.__struct_fields__:
            for value in values:
                frames.append((op, {_camel(field): value}))
    return frames


POISON_FRAMES = len(poison_frames())
"""Memory frames the poison test sends (every op × argument × hostile value)."""


async def test_poison_frames_of_every_kind_never_crash_the_memory_actor(tmp_path):
    state = tmp_path / "state"
    async with open_fake_llama(tmp_path) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                await c.memory("memory.notes.store", {"content": "The user keeps bees"})
                codes: dict[str, int] = {}
                for op, args in poison_frames():
                    with trio.fail_after(10):
                        try:
                            await c.memory(op, args)
                            code = "ok"
                        except ClientError as exc:
                            code = exc.code
                    codes[code] = codes.get(code, 0) + 1
                    assert code != "internal_error", (op, args)
                metrics = await c.request({"type": "metrics"}, "metrics.result")
            async with open_client(url=d.url, token=d.token) as fresh:  # the next client
                notes = await fresh.memory("memory.notes.list", {})
    assert metrics["restarts"] == 0, codes
    assert "The user keeps bees" in [n["content"] for n in notes]
    assert sum(codes.values()) == POISON_FRAMES >= 100
    assert "Traceback" not in d.stderr_path.read_text()


def test_an_exports_folder_swapped_for_a_link_cannot_redirect_a_write(tmp_path):
    """The folder is held for the whole write: swapped for a symbolic link mid-export,
    the file still lands in the folder that was checked, never where the link points;
    a folder that is a link when an export begins is refused."""
    folder, elsewhere = tmp_path / "exports", tmp_path / "elsewhere"
    elsewhere.mkdir()
    room = FileRoom(folder)
    target = room.target("memory.jsonl", overwrite=False)
    with room.writing(target) as tmp:
        folder.rename(tmp_path / "moved")  # the swap, while the export writes
        folder.symlink_to(elsewhere)
        Path(tmp).write_text("exported\n")
    assert (tmp_path / "moved" / "memory.jsonl").read_text() == "exported\n"
    assert list(elsewhere.iterdir()) == []
    with pytest.raises(ValidationError) as info:
        with room.writing(room.target("again.jsonl", overwrite=False)):
            pass
    assert "is not a folder" in str(info.value)
    with pytest.raises(ValidationError):
        room.read("memory.jsonl")
    assert list(elsewhere.iterdir()) == []


def test_a_write_killed_midway_leaves_no_temp_file_past_the_next_start(tmp_path):
    folder = tmp_path / "exports"
    folder.mkdir()
    (folder / ".memory.jsonl.4242-0a1b2c3d.tmp").write_text("half an export")
    (folder / "memory.jsonl").write_text("a finished export")
    assert FileRoom(folder).remove_stale() == 1
    assert [p.name for p in folder.iterdir()] == ["memory.jsonl"]
