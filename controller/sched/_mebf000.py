"""MEBF of seed 000 (ADMIRE D3.3 §4.1, Algorithm 1): moldable starts, shrinking lower-priority jobs with the
sharing factor and the cut-off gamma, backfilling the smallest job, expanding the longest higher-priority job.

Algorithm 1 is OCR-damaged in the source; this follows the rebuilt version and the **[interp.]** choices of
``spec/000_admire_d33.md`` §5, each recorded in :class:`MEBF0Config`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from itertools import islice

from ._model import Decision, Job, RunningJob, Snapshot
from ._resize import Pool, is_malleable, shadow

__all__ = ["MEBF0", "MEBF0Config", "expand_allowed", "shrink_allowed"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MEBF0Config:
    """Parameters of seed 000's MEBF (defaults: D3.3's evaluation).

    Attributes:
        sharing_factor: a shrunk job gives ``floor(size x sharing_factor)`` nodes (Eq. 4.1; 0.20); a job where
            that is 0 is skipped, and none goes below its ``min``.
        gamma: shrink only if ``new_est / rem <= gamma`` (Eq. 4.4; 1.24).
        alpha: the deallocation cost added to the shrunk job's time in Eq. 4.2 (seconds; 120 = the digest's
            "2 min" test value; the document gives none).
        expand_guard: expand only if the remaining time is more than this share of the recorded execution
            time (the job's estimate at ``pref``; 0.25, strict).
        shrink_scope: ``lower`` (only jobs of lower priority than the waiting job, the text) or ``all``.
        expand_scope: ``higher`` (only jobs of higher priority than the waiting job, the text) or ``all``.
        expand_all: expand the longest job, then the next longest while nodes are free (True) [interp.: the
            text expands "the longest job"; one job per pass leaves nodes idle when all jobs arrive at t=0],
            or only the longest (False).
        all_or_nothing: apply a shrink round only if it frees the waiting job's minimum (True) [interp.].
        at_points: resize only the running jobs waiting at a scheduling point (``Snapshot.points``; jobs with an
            application model on the I/O-aware simulator, ElastiSim's semantics, which D3.3's evaluation ran on)
            (True), or any running malleable job (False).
    """

    sharing_factor: float = 0.20
    gamma: float = 1.24
    alpha: float = 120.0
    expand_guard: float = 0.25
    shrink_scope: str = "lower"
    expand_scope: str = "higher"
    expand_all: bool = True
    all_or_nothing: bool = True
    at_points: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.sharing_factor < 1 or self.gamma < 1 or self.alpha < 0 or not 0 <= self.expand_guard <= 1:
            raise ValueError(f"MEBF0: bad parameters {self!r}")
        if self.shrink_scope not in ("lower", "all") or self.expand_scope not in ("higher", "all"):
            raise ValueError(f"MEBF0: shrink_scope lower|all, expand_scope higher|all ({self!r})")


def shrink_allowed(cfg: MEBF0Config, size: int, rem: float) -> tuple[int, bool]:
    """Eqs. 4.1-4.4: ``(granted nodes, allowed)`` for a job of ``size`` nodes with ``rem`` seconds left.

    ``granted = floor(size x sf)``; ``shrink_increase = granted / size x rem + alpha``; ``new_est = rem +
    shrink_increase``; allowed iff ``granted > 0`` and ``new_est / rem <= gamma``.
    """
    granted = math.floor(size * cfg.sharing_factor + 1e-9)
    if granted <= 0 or rem <= 0:
        return granted, False
    new_est = rem + granted / size * rem + cfg.alpha
    return granted, new_est / rem <= cfg.gamma + 1e-12


def expand_allowed(cfg: MEBF0Config, rem: float, recorded: float) -> bool:
    """The expand guard: remaining time strictly more than ``expand_guard x recorded`` execution time."""
    return rem > cfg.expand_guard * recorded


def _key(job: Job) -> tuple[int, float, int]:
    """Priority order: higher ``priority`` first, then submission (earlier = higher priority), then id."""
    return (-job.priority, job.submit, job.id)


@dataclass(frozen=True, slots=True)
class MEBF0:
    """Seed 000's Algorithm 1 as a pure policy: ``MEBF0(MEBF0Config())(snapshot, now)``.

    Queued jobs, in priority order, start on ``pref`` nodes or fewer down to ``min`` (``for i = pref downto
    min``). At the first job that cannot start (the waiting job W) [interp.: the branch runs only for an
    unassigned job, and the loop stops there, as EASY's head]: no node free -> shrink lower-priority running
    malleable jobs, lowest priority first, then start W; some free and other jobs pending -> backfill, repeatedly,
    the pending job with the smallest need that fits without delaying W's EASY reservation (on
    ``min(pref, free)``), and if none fits, expand; otherwise expand. Expand gives the higher-priority running
    malleable job with the longest estimated remaining time ``min(free, max - size)`` nodes if it passes the
    guard. When the queue is empty, free nodes go to the running jobs the same way. With ``at_points`` only the
    jobs in ``snapshot.points`` are shrunk or expanded.
    """

    cfg: MEBF0Config = MEBF0Config()

    def __call__(self, snapshot: Snapshot, now: float) -> list[Decision]:
        pool = Pool(snapshot.free)
        out: list[Decision] = []
        running = list(snapshot.running)
        if self.cfg.at_points:
            pts = snapshot.points
            resizable = [r for r in running if r.id in pts]
        else:
            resizable = running
        queue = snapshot.queue
        started: list[tuple[float, int]] = []
        i = 0
        while i < len(queue):
            job = queue[i]
            k = min(job.procs, len(pool))
            if k < job.min_procs:
                break
            out.append(pool.start(job, k))
            started.append((now + job.estimate * job.procs / k, k))
            i += 1
        if i == len(queue):
            if len(pool):
                self._expand(None, resizable, pool, out, now)
            return out
        wait = queue[i]
        if not len(pool):
            if self._shrink(wait, resizable, pool, out, now):
                out.append(pool.start(wait, min(wait.procs, len(pool))))
        elif i + 1 < len(queue):
            rest = list(islice(queue, i + 1, None))
            if not self._backfill(wait, rest, running, started, pool, out, now):
                self._expand(wait, resizable, pool, out, now)
        else:
            self._expand(wait, resizable, pool, out, now)
        return out

    def _shrink(self, wait: Job, running: list[RunningJob], pool: Pool, out: list[Decision], now: float) -> bool:
        cfg = self.cfg
        need = wait.min_procs - len(pool)
        low = [r for r in running if is_malleable(r.job) and (cfg.shrink_scope == "all" or _key(r.job) > _key(wait))]
        low.sort(key=lambda r: _key(r.job), reverse=True)
        plan: list[tuple[RunningJob, int]] = []
        for r in low:
            if need <= 0:
                break
            granted, ok = shrink_allowed(cfg, r.size, r.end_estimate - now)
            granted = min(granted, r.size - r.job.min_procs)
            if ok and granted > 0:
                plan.append((r, granted))
                need -= granted
        if not plan or (need > 0 and cfg.all_or_nothing):
            return False
        for r, k in plan:
            out.append(pool.shrink(r, k))
            running.remove(r)
        log.debug("t=%g: MEBF0 shrank %s for job %d", now, [(r.id, k) for r, k in plan], wait.id)
        return need <= 0

    def _backfill(self, wait: Job, rest: list[Job], running: list[RunningJob], started: list[tuple[float, int]],
                  pool: Pool, out: list[Decision], now: float) -> bool:
        avail = len(pool)
        left = sorted((j for j in rest if j.min_procs <= avail), key=lambda j: (j.min_procs, _key(j)))
        if not left:
            return False
        ends = [(r.end_estimate, r.size) for r in running] + started
        sh, extra = shadow(ends, avail, wait.min_procs)
        any_started = False
        for job in left:
            if job.min_procs > len(pool):
                break                       # sorted by need: nothing later fits either
            k = min(job.procs, len(pool))
            if now + job.estimate * job.procs / k <= sh:
                pass
            elif k <= extra:
                extra -= k
            elif job.min_procs <= extra:
                k = extra
                extra = 0
            else:
                continue
            out.append(pool.start(job, k))
            any_started = True
        return any_started

    def _expand(self, wait: Job | None, running: list[RunningJob], pool: Pool, out: list[Decision],
                now: float) -> None:
        cfg = self.cfg
        high = [r for r in running if is_malleable(r.job) and r.size < r.job.max_procs
                and (wait is None or cfg.expand_scope == "all" or _key(r.job) < _key(wait))]
        high.sort(key=lambda r: (-(r.end_estimate - now), _key(r.job)))
        for r in high:
            if not len(pool):
                break
            if expand_allowed(cfg, r.end_estimate - now, r.job.estimate):
                out.append(pool.grow(r, min(len(pool), r.job.max_procs - r.size)))
                if not cfg.expand_all:
                    break
