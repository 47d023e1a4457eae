"""The consolidator: the cold path's periodic tick.

Runs inside the reflection actor (its LLM client, its side-call slot, its nursery, so
shutdown cancels it like a reflection). Every ``memory.consolidation.intervalMs``, and
on :class:`~actors.reflection.messages.Consolidate` (``atomic-agent memory
consolidate``), one tick:

1. ``ClaimClusters`` → clusters of linked notes older than the cool-down, each member
   leased (``memory`` actor, :mod:`actors.store.cold`).
2. Per cluster, serially: one distill call (:mod:`.distill`) within
   ``distillTimeoutMs``; a lesson → ``PersistDistilled`` (lesson, procedure, parents
   archived, one transaction); the abstain sentinel, a parse error, a timeout or an LLM
   error → the cluster is released untouched. Per-cluster failures never abort the
   others.
3. Always (``finally``, shielded): leases not persisted are released, then
   ``SweepCold`` (vote decay, deprecation sweeps).

A tick that fails or is cancelled therefore leaves every note as it was: the only
write before the persist is the lease, and it is released (and ignored once older
than ``leaseMs`` if the process dies first). Re-entry: a tick requested while one runs
returns outcome ``busy`` at once. Outcome ``ok`` if a lesson was made, ``failed`` if
every cluster failed, else ``none``; counted in ``agent.memory.consolidator{outcome}``,
timed in ``agent.memory.consolidator.duration_ms``, logged as ``consolidator.tick``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import structlog
import trio

from actors.memory.messages import (
    ClaimClusters,
    Cluster,
    PersistDistilled,
    Persisted,
    ReleaseCluster,
    SweepCold,
    SweepResult,
)
from runtime.kernel.actor import ActorContext
from runtime.kernel.errors import RuntimeFailure
from runtime.services.backends import BackendPool
from runtime.services.config import MemoryConfig
from runtime.services.llm import LLMError
from runtime.services.metrics import Metrics

from .distill import (
    DISTILL_SYSTEM,
    N_PREDICT,
    DistillError,
    build_distill_prompt,
    distill_grammar,
    parse_distill,
)
from actors.memory.ops import TickReport

from .messages import ConsolidationEvent

log = structlog.get_logger()

__all__ = ["Consolidator"]

MEMORY_TIMEOUT_S = 30
"""Bound on each request to the memory actor (a claim or persist is one transaction)."""


class Consolidator:
    """See the module docstring. ``emit`` casts progress to the root (never raises)."""

    def __init__(self, ctx: ActorContext, cfg: MemoryConfig, llm: BackendPool | None,
                 metrics: Metrics, emit: Callable[[ConsolidationEvent], Awaitable[None]]) -> None:
        self.ctx = ctx
        self.cfg = cfg
        self.llm = llm
        self.metrics = metrics
        self.emit = emit
        self._lock = trio.Lock()

    @property
    def enabled(self) -> bool:
        """Whether ticks can make lessons (consolidation and lessons on, an LLM)."""
        return self.cfg.consolidation.enabled and self.cfg.lessons.enabled and self.llm is not None

    async def run_periodic(self) -> None:
        """Tick every ``intervalMs`` until cancelled (the first after one interval)."""
        while True:
            await trio.sleep(self.cfg.consolidation.interval_ms / 1000)
            await self.tick()

    async def tick(self, *, ignore_cooldown: bool = False) -> TickReport:
        """One tick (module docstring) → its :class:`TickReport`."""
        if not self.enabled:
            why = ("no LLM is configured" if self.llm is None else
                   "memory.consolidation.enabled or memory.lessons.enabled is false")
            return TickReport(outcome="off", reason=why)
        if self._lock.locked():
            return TickReport(outcome="busy", reason="a consolidator tick is already running")
        async with self._lock:
            t0 = time.monotonic()
            report = TickReport(outcome="none")
            try:
                await self._clusters(report, ignore_cooldown)
            except (RuntimeFailure, trio.TooSlowError) as exc:
                report.reason = f"memory actor: {exc}"[:200]
                report.outcome = "failed"
            finally:
                with trio.CancelScope(shield=True):
                    await self._sweep(report)
            if report.lessons:
                report.outcome = "ok"
            elif report.clusters and report.failed == report.clusters:
                report.outcome = "failed"
            report.duration_ms = round((time.monotonic() - t0) * 1000, 1)
            self.metrics.inc("agent.memory.consolidator", {"outcome": report.outcome})
            self.metrics.observe("agent.memory.consolidator.duration_ms", report.duration_ms)
            log.info("consolidator.tick", outcome=report.outcome, clusters=report.clusters,
                     lessons=report.lessons, procedures=report.procedures,
                     abstained=report.abstained, failed=report.failed, changed=report.changed,
                     deprecated=report.deprecated, duration_ms=report.duration_ms)
            await self.emit(ConsolidationEvent(stage="finished", report=report))
            return report

    async def _clusters(self, report: TickReport, ignore_cooldown: bool) -> None:
        c = self.cfg.consolidation
        with trio.fail_after(MEMORY_TIMEOUT_S):
            clusters = await self.ctx.request("memory", ClaimClusters(
                now_ms=int(time.time() * 1000),
                cooldown_ms=0 if ignore_cooldown else c.cooldown_ms,
                min_size=c.min_cluster_size, max_clusters=c.max_clusters_per_tick,
                require_shared_tag=c.require_shared_tag, lease_ms=c.lease_ms), list[Cluster])
        report.clusters = len(clusters)
        await self.emit(ConsolidationEvent(stage="started", clusters=len(clusters)))
        for n, cluster in enumerate(clusters, 1):
            result, lesson_id = await self._one(cluster, report)
            await self.emit(ConsolidationEvent(stage="cluster", clusters=len(clusters), index=n,
                                               result=result, lesson_id=lesson_id))

    async def _one(self, cluster: Cluster, report: TickReport) -> tuple[str, int | None]:
        """Distil and persist one cluster → (result, lesson id); its leases are always
        released unless it was persisted."""
        assert self.llm is not None
        persisted = False
        try:
            with trio.move_on_after(self.cfg.consolidation.distill_timeout_ms / 1000) as timer:
                completion = await self.llm.complete(
                    "consolidator", DISTILL_SYSTEM, build_distill_prompt(cluster.previews),
                    role="reflection", grammar=distill_grammar(self.cfg.procedures.enabled),
                    n_predict=N_PREDICT, temperature=0.0)
            if timer.cancelled_caught:
                report.failed += 1
                log.warning("consolidator.timeout", notes=cluster.ids,
                            timeout_ms=self.cfg.consolidation.distill_timeout_ms)
                return "failed", None
            log.debug("consolidator.completion", notes=cluster.ids, text=completion.text[:2000])
            try:
                distilled = parse_distill(completion.text)
            except DistillError as exc:
                report.failed += 1
                log.info("consolidator.parse_failed", notes=cluster.ids, error=str(exc))
                return "failed", None
            if distilled is None:
                report.abstained += 1
                return "abstained", None
            if not self.cfg.procedures.enabled:
                distilled.steps = []
            if cluster.tags:  # the members' shared tags join the model's
                distilled.tags = list(dict.fromkeys([*distilled.tags, *cluster.tags]))[:12]
            with trio.fail_after(MEMORY_TIMEOUT_S):
                result = await self.ctx.request("memory", PersistDistilled(
                    cluster=cluster, distilled=distilled), Persisted)
            if result.lesson_id is None:
                if result.changed:
                    report.changed += 1
                    return "changed", None
                report.failed += 1
                log.info("consolidator.invalid", notes=cluster.ids, error=result.error)
                return "failed", None
            persisted = True
            report.lessons.append(result.lesson_id)
            if result.procedure_id is not None:
                report.procedures.append(result.procedure_id)
            return "lesson", result.lesson_id
        except (LLMError, RuntimeFailure, trio.TooSlowError) as exc:
            report.failed += 1
            log.warning("consolidator.cluster_failed", notes=cluster.ids, error=str(exc)[:200])
            return "failed", None
        finally:
            if not persisted:
                with trio.CancelScope(shield=True), trio.move_on_after(MEMORY_TIMEOUT_S):
                    try:
                        await self.ctx.request("memory", ReleaseCluster(
                            ids=cluster.ids, claimed_at=cluster.claimed_at), int)
                    except RuntimeFailure as exc:  # the lease expires on its own (leaseMs)
                        log.warning("consolidator.release_failed", error=str(exc))

    async def _sweep(self, report: TickReport) -> None:
        """Vote decay and deprecation sweeps, whatever happened to the clusters."""
        decay = self.cfg.voting.signal_decay if self.cfg.voting.enabled else None
        with trio.move_on_after(MEMORY_TIMEOUT_S):
            try:
                swept = await self.ctx.request("memory", SweepCold(
                    now_ms=int(time.time() * 1000), decay=decay), SweepResult)
            except RuntimeFailure as exc:
                log.warning("consolidator.sweep_failed", error=str(exc))
                return
            report.deprecated = swept.deprecated
