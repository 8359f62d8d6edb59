"""Plan-based scheduling with simulated annealing over job orders (seed 004, Algorithm 2, ``plan-α``).

Each pass builds an execution plan for a permutation of the queue: every job, in permutation order, gets the
earliest time at which its processors and burst buffer are free for its whole estimate, on a two-resource
profile (:class:`~._burst.Profile2`) that already holds the running jobs and the jobs placed before it. The plan's
score is ``Σ waitᵅ`` (wait = planned start - submission). The search:

* queues of at most ``exhaustive`` (5) jobs: every permutation;
* otherwise the 9 candidate orders (submission; processors, buffer per processor, buffer per processor over
  processors and estimate, each ascending and descending); if the best and worst of them score the same the
  best is used, else simulated annealing from the best with ``T₀ = worst - best``, ``N`` cooling steps of
  ``M`` swap moves each, cooling ``T ← r·T`` once per outer step (the digest's reading of the listing).

Jobs the best plan starts now are started. The random generator is seeded from the policy's seed and the pass
(time and queue), so a run is reproducible.

Choices where the text allows two readings (both parameters): ``holes`` (default True): a job later in the
permutation may be planned before an earlier one when resources allow, as in conservative backfilling (the text's
"earliest point in time when sufficient resources are available"); False plans jobs in non-decreasing start order.
``window`` (default 0, unlimited): only the first ``window`` queued jobs are permuted, the rest are planned after
them in submission order (a cost bound for long queues; the paper permutes the whole queue).
"""

from __future__ import annotations

import itertools
import math
import random
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from malleable.errors import ConfigError, PolicyError

from ._burst import Profile2, short
from ._kernels import kernel
from ._model import Decision, Job, Snapshot, StartJob

__all__ = ["Plan", "PlanConfig", "PlanStats", "build_plan", "candidate_orders"]


@dataclass(frozen=True, slots=True)
class PlanConfig:
    """Parameters of ``plan-α`` (defaults: the paper's r 0.9, N 30, M 6, exhaustive search up to 5 jobs)."""

    alpha: float = 2.0
    r: float = 0.9
    n: int = 30
    m: int = 6
    exhaustive: int = 5
    holes: bool = True
    window: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.alpha > 0:
            raise ConfigError(f"plan: alpha must be > 0, got {self.alpha}")
        if not 0 < self.r < 1:
            raise ConfigError(f"plan: cooling rate r must be in (0, 1), got {self.r}")
        if self.n < 0 or self.m < 0 or self.exhaustive < 0 or self.window < 0:
            raise ConfigError("plan: n, m, exhaustive and window must be >= 0")


def candidate_orders(jobs: Sequence[Job]) -> list[list[Job]]:
    """The 9 initial orders of Algorithm 2 (ties keep submission order)."""
    def per(j: Job) -> float:
        return j.bb / j.procs

    keys: list[Callable[[Job], float]] = [lambda j: j.procs, per, lambda j: per(j) / j.procs,
                                          lambda j: j.estimate]
    out = [list(jobs)]
    for key in keys:
        out.append(sorted(jobs, key=key))
        out.append(sorted(jobs, key=key, reverse=True))
    return out


class _Base:
    """One pass's starting profile and queue as arrays, for building many plans (the compiled kernel)."""

    __slots__ = ("bb", "bbs", "cpu", "ests", "jobs", "n", "pos", "procs", "scratch", "subs", "times")

    def __init__(self, prof: Profile2, jobs: Sequence[Job]) -> None:
        n, m = len(prof.times), len(jobs)
        self.n = n
        self.times = np.array(prof.times, dtype=np.float64)
        self.cpu = np.array(prof.cpu, dtype=np.int64)
        self.bb = np.array(prof.bb, dtype=np.float64)
        self.scratch = (np.empty(n + m + 1), np.empty(n + m + 1, dtype=np.int64), np.empty(n + m + 1),
                        np.empty(m))
        self.jobs = list(jobs)
        self.pos = {id(j): i for i, j in enumerate(jobs)}
        self.procs = np.array([j.procs for j in jobs], dtype=np.int64)
        self.bbs = np.array([j.bb for j in jobs], dtype=np.float64)
        self.ests = np.array([j.estimate for j in jobs], dtype=np.float64)
        self.subs = np.array([j.submit for j in jobs], dtype=np.float64)
        top, buf = prof.cpu[-1], prof.bb[-1]
        for j in jobs:
            if j.procs > top or short(buf, j.bb):
                raise PolicyError(f"a job of {j.procs} processors and {j.bb:g} burst buffer can never start: the "
                                  f"machine has {top} and {buf:g}")

    def plan(self, order: np.ndarray, alpha: float, holes: bool) -> tuple[float, np.ndarray]:
        """``(score, starts)`` of the jobs in ``order`` (positions into ``jobs``)."""
        times, cpu, bb, slots = self.scratch
        score = kernel("plan2")(self.times, self.cpu, self.bb, self.n, order, self.procs, self.bbs, self.ests,
                                self.subs, alpha, holes, times, cpu, bb, slots)
        return float(score), slots[:len(order)].copy()

    def order_of(self, jobs: Sequence[Job]) -> np.ndarray:
        """Positions of ``jobs`` (a permutation of the pass's queue)."""
        return np.array([self.pos[id(j)] for j in jobs], dtype=np.int64)


def build_plan(order: Sequence[Job], base: Profile2, now: float, alpha: float,
               holes: bool = True) -> tuple[float, list[float]]:
    """Plan ``order`` on ``base``: ``(score, planned start of each job)`` (``base`` is not changed)."""
    b = _Base(base, order)
    score, starts = b.plan(np.arange(len(order)), alpha, holes)
    return score, starts.tolist()


@dataclass(slots=True)
class PlanStats:
    """Counters a caller may hand to :class:`Plan` (benchmarks): passes that planned, plans built."""

    passes: int = 0
    evaluations: int = 0


class Plan:
    """``plan-α`` as a policy (module docstring); ``stats`` (optional) counts passes and plan evaluations."""

    def __init__(self, config: PlanConfig = PlanConfig(), stats: PlanStats | None = None) -> None:
        self.config = config
        self.stats = stats
        self.__name__ = f"plan-{config.alpha:g}"

    def __call__(self, snapshot: Snapshot, now: float) -> list[Decision]:
        q = list(snapshot.queue)
        if not q or not snapshot.n_free:
            return []
        if self.stats is not None:
            self.stats.passes += 1
        c = self.config
        tail: list[Job] = []
        if c.window and len(q) > c.window:
            q, tail = q[:c.window], q[c.window:]
        base = _Base(Profile2.of(snapshot, now), q + tail)
        best = self.search(base, len(q))
        _, starts = base.plan(best, c.alpha, c.holes)
        free = snapshot.free
        taken = 0
        out: list[Decision] = []
        for i, t in zip(best.tolist(), starts.tolist()):
            if t <= now:
                j = base.jobs[i]
                out.append(StartJob(j.id, free[taken:taken + j.procs]))
                taken += j.procs
        return out

    def search(self, base: _Base, m: int) -> np.ndarray:
        """The best order found of the first ``m`` queued jobs of ``base`` (the others follow in queue order),
        as positions into ``base.jobs``."""
        c = self.config
        rest = np.arange(m, len(base.jobs), dtype=np.int64)
        cache: dict[bytes, float] = {}

        def score(order: np.ndarray) -> float:
            full = np.concatenate((order, rest)) if len(rest) else order
            key = order.tobytes()
            s = cache.get(key)
            if s is None:
                s = cache[key] = base.plan(full, c.alpha, c.holes)[0]
                if self.stats is not None:
                    self.stats.evaluations += 1
            return s

        def done(order: np.ndarray) -> np.ndarray:
            return np.concatenate((order, rest)) if len(rest) else order

        q = base.jobs[:m]
        if m <= c.exhaustive:
            perms = [np.array(p, dtype=np.int64) for p in itertools.permutations(range(m))]
            return done(min(perms, key=score))
        scored = [(score(base.order_of(o)), i, base.order_of(o)) for i, o in enumerate(candidate_orders(q))]
        s_best, _, p_best = min(scored, key=lambda x: (x[0], x[1]))
        s_worst = max(s for s, _, _ in scored)
        if s_best == s_worst:
            return done(p_best)
        rng = random.Random(zlib.crc32(repr((c.seed, float(base.times[0]), [j.id for j in q[:16]], m)).encode()))
        temp = s_worst - s_best
        p, s = p_best, s_best
        for _ in range(c.n):
            for _ in range(c.m):
                a, b = rng.randrange(m), rng.randrange(m)
                p2 = p.copy()
                p2[a], p2[b] = p2[b], p2[a]
                s2 = score(p2)
                if s2 < s_best:
                    s_best, p_best = s2, p2
                    s, p = s2, p2
                elif s2 <= s or rng.random() < math.exp((s - s2) / temp):
                    s, p = s2, p2
            temp *= c.r
        return done(p_best)
