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

from malleable.errors import ConfigError

from ._burst import Profile2
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


def build_plan(order: Sequence[Job], base: Profile2, now: float, alpha: float,
               holes: bool = True) -> tuple[float, list[float]]:
    """Plan ``order`` on a copy of ``base``: ``(score, planned start of each job)``."""
    prof = base.copy()
    starts: list[float] = []
    score = 0.0
    k0 = 0
    for j in order:
        k = prof.earliest(j.procs, j.bb, j.estimate, 0 if holes else k0)
        t = prof.times[k]
        prof.reserve(t, j.estimate, j.procs, j.bb)
        if not holes:
            k0 = prof.split(t)
        starts.append(t)
        w = t - j.submit
        score += w ** alpha if w > 0 else 0.0
    return score, starts


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
        base = Profile2.of(snapshot, now)
        tail: list[Job] = []
        if c.window and len(q) > c.window:
            q, tail = q[:c.window], q[c.window:]
        best = self._search(q, base, now, c)
        order = best + tail
        _, starts = build_plan(order, base, now, c.alpha, c.holes)
        free = snapshot.free
        taken = 0
        out: list[Decision] = []
        for j, t in zip(order, starts):
            if t <= now:
                out.append(StartJob(j.id, free[taken:taken + j.procs]))
                taken += j.procs
        return out

    def _score(self, order: Sequence[Job], base: Profile2, now: float, c: PlanConfig,
               cache: dict[tuple[int, ...], float]) -> float:
        key = tuple(j.id for j in order)
        s = cache.get(key)
        if s is None:
            s = build_plan(order, base, now, c.alpha, c.holes)[0]
            cache[key] = s
            if self.stats is not None:
                self.stats.evaluations += 1
        return s

    def _search(self, q: list[Job], base: Profile2, now: float, c: PlanConfig) -> list[Job]:
        cache: dict[tuple[int, ...], float] = {}
        if len(q) <= c.exhaustive:
            return list(min(itertools.permutations(q), key=lambda p: self._score(p, base, now, c, cache)))
        scored = [(self._score(o, base, now, c, cache), i, o) for i, o in enumerate(candidate_orders(q))]
        s_best, _, p_best = min(scored, key=lambda x: (x[0], x[1]))
        s_worst = max(s for s, _, _ in scored)
        if s_best == s_worst:
            return p_best
        rng = random.Random(zlib.crc32(repr((c.seed, now, [j.id for j in q[:16]], len(q))).encode()))
        temp = s_worst - s_best
        p, s = p_best, s_best
        n = len(q)
        for _ in range(c.n):
            for _ in range(c.m):
                a, b = rng.randrange(n), rng.randrange(n)
                p2 = list(p)
                p2[a], p2[b] = p2[b], p2[a]
                s2 = self._score(p2, base, now, c, cache)
                if s2 < s_best:
                    s_best, p_best = s2, p2
                    s, p = s2, p2
                elif s2 <= s or rng.random() < math.exp((s - s2) / temp):
                    s, p = s2, p2
            temp *= c.r
        return p_best
