"""Shared hypothesis settings of the fuzz tests.

In CI every fuzz test replays the same inputs (``derandomize``: the seed comes from the
test itself) with the example counts its module states, so ``docs/RELIABILITY.md`` can
cite them. ``python -m bench.fuzz`` runs the same tests longer: it sets
``ATOMIC_AGENT_FUZZ_SCALE`` (examples × scale) and passes ``--hypothesis-seed``, so each
long run explores new inputs and can be replayed from its seed.

No shrinking phase: most examples boot a daemon, so a failure is reported as generated.
Each fuzz module lists what it fuzzed per CI run in ``FUZZ_COUNTS``
(``{"what": count}``), which the bench multiplies by the scale.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

BENCH = "ATOMIC_AGENT_FUZZ_SCALE" in os.environ
"""Run by ``bench.fuzz`` (the seed comes from ``--hypothesis-seed``), not by CI."""
SCALE = max(1, int(os.environ.get("ATOMIC_AGENT_FUZZ_SCALE", "1") or 1))
"""Multiplier of every fuzz test's example count (1 in CI)."""


def fuzz_settings(max_examples: int) -> settings:
    """Settings for a fuzz test with ``max_examples`` examples per CI run: fixed seed
    in CI, ``max_examples × SCALE`` and the run's own seed under ``bench.fuzz``."""
    return settings(max_examples=max_examples * SCALE, derandomize=not BENCH, deadline=None,
                    phases=[Phase.explicit, Phase.reuse, Phase.generate],
                    suppress_health_check=list(HealthCheck), database=None)
