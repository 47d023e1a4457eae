"""The memory store's wall clock: Unix ms that never go backwards.

Timestamps order things here: which note is the oldest (eviction), which fact version
is the newest, when a note was recalled last. When the machine's clock steps back (an
NTP correction, a VM snapshot restored, a laptop with a bad RTC), a row written after
the step would look older than rows written before it: the note just stored would be
the first evicted. So the store reads time from :data:`CLOCK`, which returns
``max(wall clock, the latest time it issued or saw)``:

* :meth:`WallClock.now` never returns less than an earlier call in this process;
* :meth:`WallClock.observe` raises that floor to the newest timestamp already in a
  database when it is opened (``schema.open_database``), so a restart after a step
  back keeps the order too;
* a stamp more than :data:`FUTURE_LIMIT_MS` ahead of the wall clock is never observed:
  one imported ``createdAt`` in 2100 would otherwise date every later write 2100
  (``memory.clock_future`` is logged once); ``schema.open_database`` repairs such rows
  first (:func:`actors.store.schema.repair_future_stamps`) and imports refuse them;
* a step back of more than :data:`SKEW_WARN_MS` is logged once
  (``memory.clock_skew``, with how far behind) and counted (:attr:`WallClock.skews`,
  the memory actor's ``memory.clock_skew`` counter); time then stands still at the
  floor until the wall clock catches up, and ties are broken by row id (write order).

Deadlines and timeouts never use this clock: they are trio's monotonic clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

__all__ = ["CLOCK", "FUTURE_LIMIT_MS", "SKEW_WARN_MS", "WallClock"]

log = structlog.get_logger("actors.store.clock")

SKEW_WARN_MS = 1000
"""A wall clock this far behind the floor is a step back worth a warning (ms)."""
FUTURE_LIMIT_MS = 24 * 3600 * 1000
"""A stored time further ahead of the wall clock than this (a day: time zones and a
clock set a little wrong stay well inside it) is no time this machine issued."""


class WallClock:
    """Non-decreasing Unix-ms time (module docstring). ``source`` returns the wall
    clock in ms (replaceable: tests step it back)."""

    def __init__(self, source: Callable[[], int] | None = None) -> None:
        self.source = source or (lambda: int(time.time() * 1000))
        self.floor = 0
        self.skews = 0
        self._behind = False
        self._warned_future = False

    def observe(self, stamp: int | None) -> None:
        """Raise the floor to ``stamp`` (a time already stored); None is ignored, and so
        is a stamp more than :data:`FUTURE_LIMIT_MS` ahead of the wall clock (logged once)."""
        if stamp is None or stamp <= self.floor:
            return
        if stamp > self.source() + FUTURE_LIMIT_MS:
            if not self._warned_future:
                self._warned_future = True
                log.warning("memory.clock_future", stamp=int(stamp))
            return
        self.floor = int(stamp)

    def now(self) -> int:
        """The current time in Unix ms, never less than an earlier result or an
        observed stamp; a step back is logged and counted once per step."""
        wall = self.source()
        if wall < self.floor - SKEW_WARN_MS:
            if not self._behind:
                self._behind = True
                self.skews += 1
                log.warning("memory.clock_skew", behind_ms=self.floor - wall)
        elif wall >= self.floor:
            self._behind = False
        self.floor = max(self.floor, wall)
        return self.floor


CLOCK = WallClock()
"""The process's store clock (the memory actor, an offline command)."""
