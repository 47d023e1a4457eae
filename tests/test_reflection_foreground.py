"""Background LLM calls yield to turns: the gate alone (virtual clock), then the
reflection actor against a real memory actor and a scripted llama-server."""

from __future__ import annotations

import math
from functools import partial

import pytest
import trio
import trio.testing

from actors.reflection.foreground import ForegroundGate, YieldingPool
from actors.reflection.messages import Foreground
from runtime import open_supervisor
from runtime.services.backends import BackendPool
from runtime.services.llm import Completion
from tests.fakes.llama_server import open_fake_llama
from tests.test_reflection_actor import Events, profile, reflect, specs


class Call:
    """A background call that takes ``seconds`` and counts its starts and ends."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.starts: list[float] = []
        self.done: list[float] = []

    async def __call__(self) -> str:
        self.starts.append(trio.current_time())
        await trio.sleep(self.seconds)
        self.done.append(trio.current_time())
        return "answer"


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_idle_gate_runs_at_once(clock):
    gate, call = ForegroundGate(), Call(1.0)
    assert await gate.run(call) == "answer"
    assert call.starts == [0.0] and gate.yields == 0 and gate.deferred_s == 0


async def test_a_call_waits_while_a_turn_runs(clock):
    gate, call = ForegroundGate(max_defer_s=60), Call(1.0)
    gate.set_busy(1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gate.run, call)
        await trio.sleep(5)
        assert call.starts == []  # held back for the turn
        gate.set_busy(0)
    assert call.starts == [5.0] and call.done == [6.0] and gate.deferred_s == 5.0


async def test_a_turn_interrupts_a_running_call_which_starts_again_after_it(clock):
    gate, call = ForegroundGate(max_defer_s=60), Call(4.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gate.run, call)
        await trio.sleep(1)
        gate.set_busy(1)   # a turn starts: the call is cancelled
        gate.set_busy(2)   # a second turn changes nothing more
        await trio.sleep(2)
        gate.set_busy(0)   # both over: the call starts again
    assert call.starts == [0.0, 3.0] and call.done == [7.0] and gate.yields == 1


async def test_deferral_is_bounded_then_the_call_runs_to_the_end(clock):
    gate, call = ForegroundGate(max_defer_s=10), Call(4.0)
    gate.set_busy(1)  # a daemon that is never idle
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gate.run, call)
        await trio.sleep(12)
        gate.set_busy(0)
        gate.set_busy(1)  # a turn after the bound no longer interrupts it
    assert call.starts == [10.0] and call.done == [14.0] and gate.yields == 0


class SlowBackend:
    """A backend whose completion takes ``seconds`` (virtual clock); counts starts."""

    label = "slow"

    def __init__(self, seconds: float) -> None:
        self.call = Call(seconds)

    async def complete(self, system: str, user: str, **_kw: object) -> Completion:
        return Completion(text=await self.call())


async def test_a_warm_up_waits_for_turns_without_a_bound(clock):
    """The start-up warm-up nobody waits for (``YieldingPool.unbounded``): held back and
    interrupted for turns past the gate's bound, since run beside a turn it would slow
    that turn's reply; the pool's other calls keep the bound."""
    gate, backend = ForegroundGate(max_defer_s=10), SlowBackend(4.0)
    bounded = YieldingPool(BackendPool([backend]), gate)
    warm = bounded.unbounded()
    assert warm.gate is gate and warm.max_defer_s == math.inf
    gate.set_busy(1)  # the agent's own warm-up, slower than the bound on a small CPU
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(warm.complete, "warm", "system", "Ready?"))
        await trio.sleep(21)
        assert backend.call.starts == []  # still held back at twice the bound
        gate.set_busy(0)
        await trio.sleep(1)
        gate.set_busy(1)  # a turn still interrupts it
        await trio.sleep(3)
        gate.set_busy(0)
    assert backend.call.starts == [21.0, 25.0] and backend.call.done == [29.0]
    gate.set_busy(1)  # the bounded pool gives up waiting after 10 s
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(bounded.complete, "reflect", "system", "exchange"))
        await trio.sleep(12)
    assert backend.call.starts[-1] == 39.0


async def test_errors_and_outer_cancellation_pass_through(clock):
    gate = ForegroundGate()

    async def failing() -> None:
        raise ValueError("bad answer")

    with pytest.raises(ValueError, match="bad answer"):
        await gate.run(failing)
    with trio.move_on_after(1) as outer:
        await gate.run(Call(5.0))
    assert outer.cancelled_caught and gate.yields == 0


@pytest.mark.slow
async def test_reflection_waits_for_turns_and_restarts_after_one(tmp_path):
    """A reflection cast while a turn runs is not sent until it ends; one already
    running when a turn starts is cancelled and sent again after it, and lands once."""
    rules = [{"match": "### output", "response": "SET city=Lyon\n", "delay_ms": 1500}]
    ev = Events()
    async with open_fake_llama(tmp_path, rules) as fake:
        async with open_supervisor(specs(tmp_path, fake.url), on_cast=ev.on_cast) as sup:
            await sup.cast("reflection", Foreground(turns=1))
            await sup.cast("reflection", reflect("a", "I live in Lyon"))
            await trio.sleep(1.0)
            assert fake.completions() == []  # held back while the turn runs
            await sup.cast("reflection", Foreground(turns=0))
            with trio.fail_after(10):
                while not fake.completions():
                    await trio.sleep(0.02)
            await sup.cast("reflection", Foreground(turns=1))  # interrupts it
            await trio.sleep(0.3)
            await sup.cast("reflection", Foreground(turns=0))
            (event,) = await ev.wait(1)
            assert event.outcome == "ok" and event.fact_keys == ["city"]
            assert await profile(sup) == {"city": "Lyon"}
    assert len(fake.completions()) == 2  # the interrupted request, then the one that landed


def test_a_count_older_than_one_already_taken_is_ignored():
    """The kernel handles each cast in a task of its own and trio may run two of them in
    either order: the agent's "warm-up running" (1) can arrive after its "warm-up done"
    (0) and would hold every background call back until the next turn. Each count
    carries a sequence number; a stale one changes nothing."""
    gate = ForegroundGate()
    gate.set_busy(0, seq=2)   # the newer count, handled first
    gate.set_busy(1, seq=1)   # the older one, handled second: ignored
    assert gate.busy == 0
    gate.set_busy(1, seq=3)
    assert gate.busy == 1
    gate.set_busy(0, seq=3)   # the same seq again: ignored
    assert gate.busy == 1
    gate.set_busy(0)          # no seq: always taken (tests, local callers)
    assert gate.busy == 0
