"""Malleable EASY backfilling of seed 002 (MEBF): shrink, feasibility, the Handoff/Spare/Intensive expands and
the basic / expand+ / shrink+ variants, with moldable starts between ``pref`` and ``min``.

The algorithms of the paper are figures missing from the text; this follows the prose as digested in
``spec/002_malleable_backfill.md`` §3. Every choice the text leaves open is marked **[interp.]** or **[gap]**
in :class:`MEBFConfig` and, where the document allows two readings, is a parameter.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice

from ._model import Decision, Job, JobKind, RunningJob, Snapshot
from ._resize import Pool, is_malleable, predicted_remaining, shadow, work_left
from ._speedup import ReconfigCost, SpeedupModel, no_reconfig_cost, rho_power

__all__ = ["MEBF", "MEBFConfig", "expand_amount", "feasible", "shrink_amount"]

log = logging.getLogger(__name__)

VARIANTS = ("basic", "expand+", "shrink+")
EXPANDS = ("handoff", "spare", "intensive")


@dataclass(frozen=True, slots=True)
class MEBFConfig:
    """Parameters of seed 002's MEBF (defaults: the paper's experiments, L164-172).

    Attributes:
        variant: ``basic`` (shrink when full and jobs wait, expand when the queue is empty), ``expand+`` (also
            expand when backfilling finds no job) or ``shrink+`` (also shrink then).
        expand: the expand policy, ``handoff``, ``spare`` or ``intensive``.
        share_factor: Shrink gives up ``floor(share_factor x size)`` nodes, never below ``min`` (0.4) [interp.].
        theta: Feasibility refuses a job with less than ``theta`` of its estimated work left (0.5) [interp.: the
            guard reads "remaining estimated time < theta x initial estimated time", measured here as the
            fraction of work left, so it does not depend on the sizes the job ran at].
        gamma: Feasibility accepts ``T_new / T_static <= gamma`` (2.0).
        spare_ratio: Spare expands only when ``GetResources > ratio x size`` and then by
            ``ceil(ratio x size)`` nodes, keeping the rest spare (0.5) [gap: how much Spare gives is not stated].
        basis: what T_new and T_static measure [gap]: ``remaining`` (time left with the change, cost included,
            over time left without it) or ``whole`` (elapsed time added to both).
        shrink_once: Shrink skips jobs resized before, ever (True, "excludes the previously configured ones")
            or only within this pass (False) [gap].
        all_or_nothing: a shrink round is applied only if it frees enough nodes for the blocked head's minimum
            (True) [interp.: the stop condition is not stated; a partial shrink would only idle nodes].
        speedup: the scalability model the policy predicts with (the paper's rho model by default).
        cost: the reconfiguration-overhead model it predicts with (T_dr + T_p).
    """

    variant: str = "basic"
    expand: str = "handoff"
    share_factor: float = 0.4
    theta: float = 0.5
    gamma: float = 2.0
    spare_ratio: float = 0.5
    basis: str = "remaining"
    shrink_once: bool = True
    all_or_nothing: bool = True
    speedup: SpeedupModel = rho_power
    cost: ReconfigCost = no_reconfig_cost

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS or self.expand not in EXPANDS or self.basis not in ("remaining", "whole"):
            raise ValueError(f"MEBF: variant in {VARIANTS}, expand in {EXPANDS}, basis remaining|whole "
                             f"(got {self.variant!r}, {self.expand!r}, {self.basis!r})")
        if not (0 < self.share_factor < 1 and 0 <= self.theta <= 1 and self.gamma > 0 and self.spare_ratio > 0):
            raise ValueError(f"MEBF: bad parameters {self!r}")


def feasible(cfg: MEBFConfig, r: RunningJob, n: int, now: float) -> bool:
    """Seed 002's Algorithm 3: is resizing running job ``r`` to ``n`` nodes at ``now`` worth it?

    False if less than ``theta`` of the work is left; otherwise ``T_new / T_static <= gamma`` with T_new the
    predicted time (model + overhead) and T_static the time without the change (``cfg.basis``).
    """
    if work_left(r, now, cfg.speedup) < cfg.theta:
        return False
    static = max(0.0, r.end_estimate - now)
    new = predicted_remaining(r, n, now, cfg.speedup, cfg.cost)
    if cfg.basis == "whole":
        elapsed = now - r.start
        static += elapsed
        new += elapsed
    if static <= 0:
        return False
    return new / static <= cfg.gamma


def shrink_amount(cfg: MEBFConfig, r: RunningJob) -> int:
    """Nodes Shrink takes from ``r``: ``floor(share_factor x size)``, clipped so ``size - k >= min``."""
    return max(0, min(math.floor(cfg.share_factor * r.size), r.size - r.job.min_procs))


def expand_amount(cfg: MEBFConfig, r: RunningJob, avail: int) -> int:
    """Nodes the expand policy gives ``r`` when ``avail`` are free (0 = no expand; feasibility not checked).

    ``GetResources`` = ``min(avail, max - size)`` [interp.]. Handoff expands by all of it only if that more
    than doubles the job (``a > size``); Spare only if ``a > ratio x size``, by ``ceil(ratio x size)``;
    Intensive always, by all of it (up to ``max``).
    """
    a = min(avail, r.job.max_procs - r.size)
    if a <= 0:
        return 0
    if cfg.expand == "handoff":
        return a if a > r.size else 0
    if cfg.expand == "spare":
        return min(a, math.ceil(cfg.spare_ratio * r.size)) if a > cfg.spare_ratio * r.size else 0
    return a


def _start_size(job: Job, avail: int) -> int:
    """MEBF's start rule: ``pref`` if free, else (moldable and malleable jobs) what is free down to ``min``."""
    if job.procs <= avail:
        return job.procs
    if job.kind is not JobKind.RIGID and job.min_procs <= avail:
        return avail
    return 0


@dataclass(frozen=True, slots=True)
class MEBF:
    """Seed 002's MEBF as a pure policy: ``MEBF(MEBFConfig(...))(snapshot, now) -> decisions``.

    One pass: (1) start queued jobs in order at ``pref`` or, if malleable/moldable, at what is free down to
    ``min``, until the head does not fit; (2) no node free and jobs wait: Shrink; some free and jobs wait:
    EASY backfilling behind the head's reservation, and if nothing backfills, Expand (expand+) or Shrink
    (shrink+); queue empty and nodes free: Expand. Shrink takes the least scalable running malleable jobs
    first (highest rho), Expand gives to the most scalable first (lowest rho), each gated by
    :func:`feasible`. After a successful shrink the freed head starts in the same pass.
    """

    cfg: MEBFConfig = MEBFConfig()

    def __call__(self, snapshot: Snapshot, now: float) -> list[Decision]:
        cfg = self.cfg
        pool = Pool(snapshot.free)
        out: list[Decision] = []
        started: list[tuple[float, int]] = []
        resized: set[int] = set()
        queue = snapshot.queue
        # every queued job is tried at every pass: the incremental hint cannot be used, since the shadow time
        # is computed from the policy's model, which may differ from the engine's
        running = list(snapshot.running)
        i = self._start_in_order(queue, 0, pool, out, started, now)
        if i < len(queue):
            head = queue[i]
            if not len(pool):
                if self._shrink(head, running, pool, out, resized, now):
                    i = self._start_in_order(queue, i, pool, out, started, now)
            else:
                if not self._backfill(queue, i, i + 1, running, pool, out, started, now):
                    if cfg.variant == "expand+":
                        self._expand(running, pool, out, resized, now)
                    elif cfg.variant == "shrink+" and self._shrink(head, running, pool, out, resized, now):
                        self._start_in_order(queue, i, pool, out, started, now)
        elif len(pool):
            self._expand(running, pool, out, resized, now)
        return out

    def _start_in_order(self, queue: Sequence[Job], i: int, pool: Pool, out: list[Decision],
                        started: list[tuple[float, int]], now: float) -> int:
        while i < len(queue):
            job = queue[i]
            k = _start_size(job, len(pool))
            if not k:
                break
            out.append(pool.start(job, k))
            started.append((now + job.estimate * (1.0 if k == job.procs else self.cfg.speedup(job, k)), k))
            i += 1
        return i

    def _backfill(self, queue: Sequence[Job], i: int, first: int, running: list[RunningJob], pool: Pool,
                  out: list[Decision], started: list[tuple[float, int]], now: float) -> bool:
        """EASY behind the head ``queue[i]``: the jobs from ``queue[first]`` on start if they end by the shadow
        time or fit the extra nodes (moldable ones at what is free down to ``min``). Returns whether any job
        started."""
        head = queue[i]
        sh, extra = -1.0, 0
        any_started = False
        for job in islice(queue, first, None):
            if not pool:
                break
            k = _start_size(job, len(pool))
            if not k:
                continue
            if sh < 0:          # the head's reservation, computed once a candidate fits (as EASY does)
                ends = [(r.end_estimate, r.size) for r in running] + started
                need = head.min_procs if head.kind is not JobKind.RIGID else head.procs
                sh, extra = shadow(ends, len(pool), need)
            est = job.estimate * self.cfg.speedup(job, k) if k != job.procs else job.estimate
            if now + est <= sh:
                pass
            elif k <= extra:
                extra -= k
            else:
                continue
            out.append(pool.start(job, k))
            any_started = True
        return any_started

    def _shrink(self, head: Job, running: list[RunningJob], pool: Pool, out: list[Decision], resized: set[int],
                now: float) -> bool:
        """Algorithm 2 for the blocked ``head``: least scalable first, each by the share factor if feasible,
        until the head's minimum is free. Returns whether nodes were freed (all-or-nothing by default)."""
        cfg = self.cfg
        need = (head.min_procs if head.kind is not JobKind.RIGID else head.procs) - len(pool)
        plan: list[tuple[RunningJob, int]] = []
        cands = [r for r in running if is_malleable(r.job) and r.id not in resized
                 and not (cfg.shrink_once and r.resizes)]
        cands.sort(key=lambda r: (-r.job.rho, r.start, r.id))
        for r in cands:
            if need <= 0:
                break
            k = shrink_amount(cfg, r)
            if k > 0 and feasible(cfg, r, r.size - k, now):
                plan.append((r, k))
                need -= k
        if not plan or (need > 0 and cfg.all_or_nothing):
            return False
        for r, k in plan:
            out.append(pool.shrink(r, k))
            resized.add(r.id)
            running.remove(r)
        log.debug("t=%g: MEBF shrank %s for job %d", now, [(r.id, k) for r, k in plan], head.id)
        return True

    def _expand(self, running: list[RunningJob], pool: Pool, out: list[Decision], resized: set[int],
                now: float) -> None:
        """The configured expand policy: most scalable first, while nodes are free."""
        cfg = self.cfg
        avail = len(pool)
        mall = JobKind.MALLEABLE
        # cheap pre-filter: room to grow, and (Handoff) fewer nodes than are free, else expand_amount gives 0
        # Handoff needs size < avail, Spare ratio x size < avail (expand_amount is 0 otherwise)
        lim = avail if cfg.expand == "handoff" else avail / cfg.spare_ratio if cfg.expand == "spare" else 1 << 62
        cands = [r for r in running if r.job.kind is mall and r.size < r.job.max_procs and r.size < lim
                 and r.id not in resized]
        if len(cands) > 1:
            cands.sort(key=lambda r: (r.job.rho, r.start, r.id))
        for r in cands:
            if not pool:
                break
            a = expand_amount(cfg, r, len(pool))
            if a > 0 and feasible(cfg, r, r.size + a, now):
                out.append(pool.grow(r, a))
                resized.add(r.id)
