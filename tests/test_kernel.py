"""Kernel tests against real child processes (docs/architecture.md §1-§3).

Rules: every test spawns real ``python -m runtime.kernel._child`` processes; deadlines are
wall-clock ``fail_after`` bounds (never autojump_clock with real children); the
autouse ``no_orphans`` fixture fails a test that leaves any child alive.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest
import trio

from runtime import (
    ActorCrashed,
    ActorSpec,
    ActorUnavailable,
    RemoteError,
    RestartIntensityExceeded,
    RestartPolicy,
    open_supervisor,
    spawn_actor,
    stop_process,
)
from tests.conftest import pid_alive
from tests.fakes.echo_actor import Echo, Emit, Fail, Pid, Raise, Relay, Sleep, Spoof

MOD = "tests.fakes.echo_actor"


def spec(name: str, **cfg) -> ActorSpec:
    return ActorSpec(name=name, module=MOD, config=msgspec.msgpack.encode(cfg))


async def test_request_reply_and_routing_between_actors():
    async with open_supervisor([spec("a"), spec("b")]) as sup:
        with trio.fail_after(10):
            assert await sup.request("a", Echo(text="hi"), dict) == {"text": "hi", "by": "a"}
            # a asks b through the root (star topology)
            assert await sup.request("a", Relay(dest="b", text="x"), dict) == {"text": "x", "by": "b"}


@pytest.mark.slow
async def test_actors_start_together_and_a_request_to_one_still_starting_waits(tmp_path):
    """The actors start concurrently (``serve`` ready is bounded by the slowest start, not
    the sum); ``a``, ready first, asks ``slow`` at once: the request waits for ``slow``
    to be ready instead of failing as unavailable."""
    t0 = trio.current_time()
    async with open_supervisor([spec("a", ask_at_ready="slow", marker_dir=str(tmp_path)),
                                spec("slow", boot_delay_s=4.0),
                                spec("slow2", boot_delay_s=4.0)]) as sup:
        started_s = trio.current_time() - t0
        with trio.fail_after(10):
            while not (tmp_path / "asked").exists():
                await trio.sleep(0.05)
        assert (tmp_path / "asked").read_text() == "ok: hi by slow"
        assert sup.running("slow2")
    assert started_s < 7.5  # one after another: at least 8 s of boot delay alone


@pytest.mark.slow
async def test_a_cast_to_an_actor_still_starting_is_delivered_once_it_is_ready(tmp_path):
    async with open_supervisor([spec("a", cast_at_ready="slow"),
                                spec("slow", boot_delay_s=2.0, marker_dir=str(tmp_path))]):
        with trio.fail_after(10):
            while not (tmp_path / "cast").exists():
                await trio.sleep(0.05)
        assert (tmp_path / "cast").read_text() == "hi from a"


async def test_typed_error_reply_keeps_actor_alive():
    async with open_supervisor([spec("a")]) as sup:
        with trio.fail_after(10):
            pid = (await sup.request("a", Pid(), dict))["pid"]
            with pytest.raises(RemoteError) as info:
                await sup.request("a", Fail(code="invalid_argument", message="bad k"), dict)
            assert info.value.code == "invalid_argument" and info.value.message == "bad k"
            assert (await sup.request("a", Pid(), dict))["pid"] == pid


async def test_raising_actor_reports_remote_type_and_restarts():
    crashes: list[ActorCrashed] = []

    async def on_crash(c: ActorCrashed) -> None:
        crashes.append(c)

    async with open_supervisor([spec("a")], on_crash=on_crash) as sup:
        with trio.fail_after(15):
            pid1 = (await sup.request("a", Pid(), dict))["pid"]
            with pytest.raises(ActorUnavailable):
                await sup.request("a", Raise(message="boom"), dict)
            while not sup.running("a") or sup.pid_of("a") == pid1:
                await trio.sleep(0.02)
            pid2 = (await sup.request("a", Pid(), dict))["pid"]
    assert pid2 != pid1
    assert len(crashes) == 1
    assert crashes[0].name == "a" and crashes[0].remote_type == "ValueError"
    assert "boom" in crashes[0].remote_traceback and crashes[0].exitcode == 1


async def test_sigkilled_actor_fails_inflight_request_fast_and_restarts():
    async with open_supervisor([spec("a")]) as sup:
        with trio.fail_after(15):
            pid1 = (await sup.request("a", Pid(), dict))["pid"]
            async with trio.open_nursery() as nursery:
                async def kill_soon():
                    await trio.sleep(0.3)
                    os.kill(pid1, signal.SIGKILL)
                nursery.start_soon(kill_soon)
                t0 = time.monotonic()
                with pytest.raises(ActorUnavailable):
                    await sup.request("a", Sleep(seconds=60), dict)
                assert time.monotonic() - t0 < 3.0
            while not sup.running("a"):
                await trio.sleep(0.02)
            assert (await sup.request("a", Pid(), dict))["pid"] != pid1
            assert sup.restart_count == 1


async def test_caller_cancellation_cancels_remote_handler(tmp_path):
    async with open_supervisor([spec("a", marker_dir=str(tmp_path))]) as sup:
        with trio.fail_after(10):
            with trio.move_on_after(0.5):
                await sup.request("a", Sleep(seconds=60, marker="nap"), dict)
            while not (tmp_path / "nap.cancelled").exists():
                await trio.sleep(0.02)
            assert (await sup.request("a", Echo(text="still here"), dict))["text"] == "still here"


async def test_request_to_unknown_or_stopped_actor_is_unavailable_at_once():
    async with open_supervisor([spec("a")]) as sup:
        with trio.fail_after(5):
            with pytest.raises(ActorUnavailable):
                await sup.request("nobody", Echo(text="x"), dict)


async def test_casts_reach_the_root():
    got: list[dict] = []

    async def on_cast(src: str, body: msgspec.Raw) -> None:
        got.append({"src": src, **msgspec.msgpack.decode(body)})

    async with open_supervisor([spec("a")], on_cast=on_cast) as sup:
        with trio.fail_after(10):
            await sup.request("a", Emit(text="event"), dict)
            while not got:
                await trio.sleep(0.01)
    assert got == [{"src": "a", "text": "event"}]


async def test_restart_intensity_limit_shuts_down_instead_of_looping():
    policy = RestartPolicy(max_restarts=2, window_s=60, backoff_initial_s=0.01)
    with trio.fail_after(30):
        with pytest.raises(BaseExceptionGroup) as info:
            async with open_supervisor([spec("a"), spec("b")], policy=policy) as sup:
                while True:
                    try:
                        await sup.request("a", Raise(message="again"), dict)
                    except ActorUnavailable:
                        await trio.sleep(0.05)
    assert info.group_contains(RestartIntensityExceeded)


async def test_shutdown_is_ordered_and_bounded():
    async with open_supervisor([spec("memory"), spec("agent"), spec("reflection")]) as sup:
        pids = [sup.pid_of(n) for n in ("memory", "agent", "reflection")]
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 3.0
    assert not any(pid_alive(p) for p in pids)


@pytest.mark.slow
async def test_ladder_escalates_to_sigterm_then_sigkill():
    proc, chan = await spawn_actor(spec("stubborn", stubborn=True))
    t0 = time.monotonic()
    code = await stop_process(proc, chan, cancel_grace_s=0.5, term_grace_s=0.5)
    assert code == -signal.SIGTERM and time.monotonic() - t0 < 2.5
    await chan.aclose()

    proc, chan = await spawn_actor(spec("mule", stubborn=True, ignore_term=True))
    code = await stop_process(proc, chan, cancel_grace_s=0.3, term_grace_s=0.3)
    assert code == -signal.SIGKILL
    await chan.aclose()


async def test_handshake_failure_is_actor_crashed():
    bad = ActorSpec(name="ghost", module="tests.fakes.no_such_module")
    with pytest.raises(ActorCrashed) as info:
        await spawn_actor(bad)
    assert info.value.name == "ghost"


def test_root_killed_every_child_exits_on_its_own():
    root = subprocess.Popen([sys.executable, "-m", "tests.fakes.mini_root"],
                            stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(root.stdout.readline())
        assert all(pid_alive(p) for p in pids.values())
        root.send_signal(signal.SIGKILL)
        root.wait(5)
        deadline = time.monotonic() + 5
        while any(pid_alive(p) for p in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(pid_alive(p) for p in pids.values())
    finally:
        root.kill()
        root.wait()


async def test_a_child_cannot_speak_for_another_actor():
    async with open_supervisor([spec("a"), spec("b")]) as sup:
        with trio.fail_after(10):
            pid_b = (await sup.request("b", Pid(), dict))["pid"]
            await sup.request("a", Spoof(dest="b", pretend="memory"), dict)
            await trio.sleep(0.5)
            assert sup.restart_count == 0 and sup.pid_of("b") == pid_b


def _nice_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[16])  # field 19: nice


async def test_background_actor_runs_at_the_niceness_it_was_given():
    # "reflection never delays the reply" (docs/architecture.md §10): the daemon starts
    # reflection and backfill with ActorSpec(nice=BACKGROUND_NICE).
    from runtime.shell.daemon import BACKGROUND, BACKGROUND_NICE

    assert set(BACKGROUND) == {"reflection", "backfill"} and BACKGROUND_NICE > 0
    base = os.nice(0)
    bg = ActorSpec(name="bg", module=MOD, config=msgspec.msgpack.encode({}), nice=5)
    async with open_supervisor([spec("fg"), bg]) as sup:
        assert _nice_of(sup.pid_of("fg")) == base
        assert _nice_of(sup.pid_of("bg")) == min(base + 5, 19)
        assert await sup.request("bg", Echo(text="hi"), dict) == {"text": "hi", "by": "bg"}
