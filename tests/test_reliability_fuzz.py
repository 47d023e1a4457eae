"""Fuzzed websocket frames against the real daemon, hypothesis-driven with a
fixed seed (``derandomize``) so CI replays the same inputs.

Each example boots a daemon (scripted llama-server), stores a canary note, then sends
:data:`FRAMES_PER_EXAMPLE` hostile frames on one authenticated connection: random text,
random bytes as binary messages, invalid and deeply nested JSON, random JSON values,
frames of every known ``type`` with fields of random shapes, and strings over the frame
cap. After every frame the connection must still answer a ``ping`` — or, for a frame
over the cap, be closed with 1009 and a new connection must work. At the end the daemon
still serves, the canary note is intact and the daemon shuts down cleanly.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import trio
from hypothesis import given
from hypothesis import strategies as st
from trio_websocket import ConnectionClosed

from runtime.shell.client import ClientError, open_client
from tests.daemon import run_daemon
from tests.fakes.llama_server import open_fake_llama
from tests.fuzzing import fuzz_settings

EXAMPLES = 5
FRAMES_PER_EXAMPLE = 40
FRAMES_FUZZED = EXAMPLES * FRAMES_PER_EXAMPLE
"""Hostile frames per CI run (docs/RELIABILITY.md)."""
FUZZ_COUNTS = {"websocket frames": FRAMES_FUZZED}
MAX_FRAME = 64 * 1024  # a small cap, so the oversized case is cheap

TYPES = ["hello", "say", "cancel", "memory", "subscribe", "sessions", "metrics", "ping",
         "shutdown-not", "nope", ""]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner,
                                                                max_size=5),
    max_leaves=20)
typed = st.builds(lambda t, extra: json.dumps({"type": t, **extra}),
                  st.sampled_from(TYPES), st.dictionaries(
                      st.sampled_from(["text", "id", "op", "args", "channels", "limit",
                                       "session", "token"]), json_values, max_size=4))
frames = st.one_of(
    st.text(max_size=200),                                       # not JSON (mostly)
    st.binary(max_size=200),                                     # binary messages
    json_values.map(json.dumps),                                 # any JSON value
    typed,                                                       # known types, odd fields
    st.integers(100, 5000).map(lambda n: "[" * n + "]" * n),     # deep nesting
    st.just(json.dumps({"type": "say", "text": "x" * (MAX_FRAME + 10)})),  # over the cap
)


async def _pong(c) -> None:
    await c.send({"type": "ping"})
    await c.wait_for(lambda f: f.get("type") == "pong")


async def _fuzz(tmp_path, batch: list[str | bytes]) -> dict[str, int]:
    outcome = {"answered": 0, "closed_1009": 0}
    # One fresh state per example (hypothesis runs several within a second).
    state = Path(tempfile.mkdtemp(prefix="state-", dir=tmp_path))
    (state / "config.json").write_text(json.dumps({"server": {"maxFrameBytes": MAX_FRAME}}))
    async with open_fake_llama(tmp_path) as fake:
        async with run_daemon(state, llm_url=fake.url) as d:
            async with open_client(url=d.url, token=d.token) as c:
                canary = await c.memory("memory.notes.store", {"content": "canary note kept"})
            pending = list(batch)
            while pending:
                async with open_client(url=d.url, token=d.token) as c:
                    while pending:
                        frame = pending.pop(0)
                        try:
                            with trio.fail_after(30):
                                await c.ws.send_message(frame)  # bytes: a binary message
                                await _pong(c)
                            outcome["answered"] += 1
                        except (ClientError, ConnectionClosed):
                            assert c.ws.closed is not None
                            assert c.ws.closed.code == 1009, (frame[:80], c.ws.closed)
                            outcome["closed_1009"] += 1
                            break
            async with open_client(url=d.url, token=d.token) as c:
                with trio.fail_after(30):
                    got = await c.memory("memory.notes.recall", {"id": canary["id"]})
                    await _pong(c)
    assert got[0]["content"] == "canary note kept"
    assert d.shutdown_s is not None and d.shutdown_s < 3.0
    assert "Traceback" not in d.stderr_path.read_text()
    return outcome


@fuzz_settings(EXAMPLES)
@given(batch=st.lists(frames, min_size=FRAMES_PER_EXAMPLE, max_size=FRAMES_PER_EXAMPLE))
def test_fuzzed_frames_get_typed_answers_and_never_break_the_daemon(tmp_path, batch):
    outcome = trio.run(_fuzz, tmp_path, batch)
    oversized = sum(isinstance(f, str) and len(f) > MAX_FRAME for f in batch)
    # Only frames over the cap close a client (each close is checked to be 1009 above).
    assert outcome["closed_1009"] <= oversized
    assert outcome["answered"] + outcome["closed_1009"] == len(batch)
