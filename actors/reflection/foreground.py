"""Background LLM work yields to the user's turns (docs/architecture.md §10, "Turns
first").

The reflection actor's LLM calls (reflection, link generator, vote runner, the
consolidator, its start-up warm-up) share the model server, and on a small machine
its cores, with the agent's turns: a reflection decoding while a person waits made
the next reply 1.77× slower on 2 cores (``bench/latency.py``). So every background call
goes through a :class:`ForegroundGate`:

* it **waits** while a turn runs (the agent casts
  :class:`~actors.reflection.messages.Foreground` with its number of running turns,
  counting its own start-up warm-up as one);
* a call already running when a turn starts is **cancelled**: its HTTP request is
  closed, the server stops that slot after the batch it is evaluating, and the call
  starts again when the turns are over (the server's prompt cache keeps what the slot
  had already read, so a retry pays only for what it had not);
* a call is deferred at most :data:`DEFER_MAX_S` seconds in all, counted from its
  first wait; after that it runs to the end whatever the turns do, so a daemon that
  is never idle still forms memory.

The gate knows nothing of the model server: it only holds cancel scopes and an event.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from runtime.services.backends import BackendPool, OnToken, Prefill
from runtime.services.llm import Completion

T = TypeVar("T")

DEFER_MAX_S = 20.0
"""Longest a background call is held back or restarted for turns, seconds in all. A
person reads a reply and types the next message in more than this, so a reflection
normally runs in the gap; a daemon that is never idle still reflects after this."""


class ForegroundGate:
    """Turn-first scheduling of background calls (module docstring).

    ``busy``: the agent's last count of running turns (its start-up warm-up counts as
    one); ``yields``: calls cancelled for a turn so far; ``deferred_s``: seconds
    background calls spent held back, in all. ``max_defer_s``: see :data:`DEFER_MAX_S`.
    """

    def __init__(self, max_defer_s: float = DEFER_MAX_S) -> None:
        self.max_defer_s = max_defer_s
        self.busy = 0
        self.heard = trio.Event()  # set by the first count from the agent
        self.yields = 0
        self.deferred_s = 0.0
        self._idle = trio.Event()
        self._idle.set()
        self._running: set[trio.CancelScope] = set()
        self._seq = 0  # the newest Foreground.seq taken

    def set_busy(self, turns: int, seq: int | None = None) -> None:
        """Take the agent's count of running turns; the first turn to start cancels
        every background call in progress (each starts again once the turns are over).
        ``seq`` (:class:`~.messages.Foreground`): a count older than one already taken
        is ignored (the casts' handlers may run out of order); None = always take it.
        """
        if seq is not None:
            if seq <= self._seq:
                return
            self._seq = seq
        was, self.busy = self.busy, max(0, turns)
        self.heard.set()
        if self.busy and not was:
            self._idle = trio.Event()
            for scope in self._running:
                scope.cancel()
        elif was and not self.busy:
            self._idle.set()

    async def run(self, call: Callable[[], Awaitable[T]], *,
                  max_defer_s: float | None = None) -> T:
        """Await ``call()`` when no turn runs, starting it again each time a turn
        interrupts it, until ``max_defer_s`` (default :attr:`max_defer_s`; ``math.inf``:
        no bound, for work nobody waits for, such as a warm-up) has passed since the
        first wait; then run it to the end. ``call`` must be safe to start again (an
        LLM request is). Exceptions of ``call`` propagate unchanged; so does an outer
        cancellation."""
        bound = self.max_defer_s if max_defer_s is None else max_defer_s
        deadline = trio.current_time() + bound
        while True:
            if self.busy:
                t0 = trio.current_time()
                with trio.move_on_at(deadline):
                    await self._idle.wait()
                self.deferred_s += trio.current_time() - t0
            if trio.current_time() >= deadline:
                return await call()
            scope = trio.CancelScope()
            self._running.add(scope)
            try:
                with scope:
                    return await call()
            finally:
                self._running.discard(scope)
            self.yields += 1  # reached only when a turn cancelled the call


class YieldingPool(BackendPool):
    """A :class:`~runtime.services.backends.BackendPool` whose completions go through a
    :class:`ForegroundGate`: the same backends and sticky choices, each ``complete``
    held back and restarted for turns as the gate decides."""

    def __init__(self, pool: BackendPool, gate: ForegroundGate, *,
                 max_defer_s: float | None = None) -> None:
        super().__init__(pool.backends)
        self.sticky = pool.sticky
        self.gate = gate
        self.max_defer_s = max_defer_s

    def unbounded(self) -> "YieldingPool":
        """The same backends and gate, its calls held back for turns without a bound
        (``math.inf``): for the start-up warm-up, which nobody waits for and which,
        run beside a turn, would slow every token of that turn's reply."""
        return YieldingPool(self, self.gate, max_defer_s=math.inf)

    async def complete(self, partition: str, system: str, user: str, *, role: str = "main",
                       grammar: str | None = None, n_predict: int = 256,
                       temperature: float = 0.2, on_token: OnToken | None = None,
                       prefill: Prefill | None = None) -> Completion:
        """:meth:`BackendPool.complete <runtime.services.backends.BackendPool.complete>`
        through the gate (same arguments, result and errors)."""
        async def call() -> Completion:
            return await BackendPool.complete(self, partition, system, user, role=role,
                                              grammar=grammar, n_predict=n_predict,
                                              temperature=temperature, on_token=on_token,
                                              prefill=prefill)

        return await self.gate.run(call, max_defer_s=self.max_defer_s)
