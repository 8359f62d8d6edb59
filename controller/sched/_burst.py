"""Burst-buffer-aware list scheduling (seed 004, Algorithm 1): FCFS, EASY with or without the buffer in the head
job's reservation, SJF EASY, and the reservation-free ``filler``.

The burst buffer is a second cluster-wide resource (``Job.bb`` bytes held for the whole run, ``Snapshot.bb_free``
free). Every start needs enough free processors *and* buffer. What the variants differ in is the head job's
reservation (Algorithm 1, line 14): ``fcfs-easy`` reserves only processors (Slurm-like, the pathology of the
paper's Fig. 1: the head can become a barrier that idles the machine), ``fcfs-bb`` and ``sjf-bb`` reserve
processors and buffer together, ``filler`` reserves nothing (greedy first fit over the whole queue).

A backfilled job must not overlap the head's reservation: the test is made on a two-resource availability
profile (:class:`Profile2`) built from the running jobs' estimated ends, so "overlap" means exactly that some
instant of the candidate's run would leave the head without what was reserved for it.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from malleable.errors import ConfigError, PolicyError

from ._model import Decision, Job, Snapshot, StartJob

__all__ = ["BBEasy", "BBEasyConfig", "Profile2", "bb_fcfs", "short"]

_EPS = 1e-9
OVERDUE = 1.0
"""Seconds after ``now`` at which a profile expects a job running past its estimated end to end."""


def short(have: float, need: float) -> bool:
    """Whether ``have`` bytes of buffer fall short of ``need`` (beyond rounding of sums of large numbers)."""
    return have < need - _EPS * max(1.0, need)


class Profile2:
    """Free processors and free burst buffer as step functions of time (mutable, inside one policy call).

    ``times[k]`` starts step ``k``; ``cpu[k]`` / ``bb[k]`` are free during ``[times[k], times[k+1])``; the last
    step lasts for ever.
    """

    __slots__ = ("bb", "cpu", "times")

    def __init__(self, times: list[float], cpu: list[int], bb: list[float]) -> None:
        self.times = times
        self.cpu = cpu
        self.bb = bb

    @classmethod
    def of(cls, snapshot: Snapshot, now: float, n_free: int | None = None, bb_free: float | None = None,
           extra: Sequence[tuple[float, int, float]] = ()) -> Profile2:
        """The profile from ``now``: free now, plus what running jobs (and ``extra`` ``(end, cpus, bb)`` of jobs
        started in this pass) give back at their estimated ends, and down nodes at their expected return.

        What is not free now is never counted as free now: a job running past its estimate (slowed by I/O
        contention, say) or a node past its expected return is expected :data:`OVERDUE` seconds later."""
        soon = now + OVERDUE
        ends = [(r.end_estimate if r.end_estimate > now else soon, r.size, r.job.bb) for r in snapshot.running
                if r.job.id >= 0]
        ends += [(t if t > now else soon, 1, 0.0) for _, t in snapshot.down]
        ends += [(t if t > now else soon, c, b) for t, c, b in extra]
        ends.sort(key=lambda e: e[0])
        times = [now]
        cpu = [snapshot.n_free if n_free is None else n_free]
        bb = [snapshot.bb_free if bb_free is None else bb_free]
        for t, c, b in ends:
            if t <= times[-1]:
                cpu[-1] += c
                bb[-1] += b
            else:
                times.append(t)
                cpu.append(cpu[-1] + c)
                bb.append(bb[-1] + b)
        return cls(times, cpu, bb)

    def copy(self) -> Profile2:
        """An independent copy."""
        return Profile2(list(self.times), list(self.cpu), list(self.bb))

    def fits(self, k: int, cpus: int, bb: float, duration: float) -> bool:
        """Whether ``cpus`` and ``bb`` stay free from ``times[k]`` for ``duration`` seconds."""
        times, cpu, buf = self.times, self.cpu, self.bb
        end = times[k] + duration
        n = len(times)
        m = k
        while m < n and (m == k or times[m] < end):
            if cpu[m] < cpus or short(buf[m], bb):
                return False
            m += 1
        return True

    def earliest(self, cpus: int, bb: float, duration: float, start: int = 0) -> int:
        """Index of the first step (from ``start``) at whose beginning the job fits for ``duration``.

        Raises:
            PolicyError: the job never fits (more processors or buffer than the machine has).
        """
        if self.cpu[-1] < cpus or short(self.bb[-1], bb):
            raise PolicyError(f"a job of {cpus} processors and {bb:g} burst buffer can never start: the machine "
                              f"has {self.cpu[-1]} and {self.bb[-1]:g}")
        k = start
        while not self.fits(k, cpus, bb, duration):
            k += 1
        return k

    def split(self, t: float) -> int:
        """Make ``t`` a step boundary (``t >= times[0]``); return its index."""
        times = self.times
        k = bisect_right(times, t) - 1
        if times[k] == t:
            return k
        times.insert(k + 1, t)
        self.cpu.insert(k + 1, self.cpu[k])
        self.bb.insert(k + 1, self.bb[k])
        return k + 1

    def reserve(self, t: float, duration: float, cpus: int, bb: float) -> None:
        """Take ``cpus`` and ``bb`` during ``[t, t + duration)``."""
        a = self.split(t)
        b = self.split(t + duration) if math.isfinite(duration) else len(self.times)
        cpu, buf = self.cpu, self.bb
        for m in range(a, b):
            cpu[m] -= cpus
            buf[m] -= bb


def bb_fcfs(snapshot: Snapshot, now: float) -> list[Decision]:
    """First come, first served without backfilling: start the leading jobs while processors and burst buffer
    suffice (seed 004's ``fcfs``)."""
    return _fcfs(snapshot, now)[0]


def _fcfs(snapshot: Snapshot, now: float) -> tuple[list[Decision], int, int, float,
                                                  list[tuple[float, int, float]]]:
    free = snapshot.free
    avail, bbf = len(free), snapshot.bb_free
    taken = 0
    out: list[Decision] = []
    started: list[tuple[float, int, float]] = []
    for j in snapshot.queue:
        p = j.procs
        if p > avail or short(bbf, j.bb):
            break
        out.append(StartJob(j.id, free[taken:taken + p]))
        started.append((now + j.estimate, p, j.bb))
        taken += p
        avail -= p
        bbf -= j.bb
    return out, taken, avail, bbf, started


@dataclass(frozen=True, slots=True)
class BBEasyConfig:
    """Which variant of Algorithm 1.

    Attributes:
        reserve: give the head job a reservation (False: ``filler``, greedy first fit over the whole queue).
        bb_reserve: the reservation holds the burst buffer too (line 14's "[and storage]"); False is Slurm-like
            ``fcfs-easy``.
        sjf: backfill candidates in ascending estimate order (SJF EASY; the head stays the FCFS head).
    """

    reserve: bool = True
    bb_reserve: bool = True
    sjf: bool = False

    def __post_init__(self) -> None:
        if not self.reserve and (self.sjf or not self.bb_reserve):
            raise ConfigError("filler (reserve=False) takes no bb_reserve=False or sjf=True")


@dataclass(frozen=True, slots=True)
class BBEasy:
    """Algorithm 1 of seed 004 as a policy: FCFS, then one reservation for the head, then backfilling."""

    config: BBEasyConfig = BBEasyConfig()

    @property
    def __name__(self) -> str:  # noqa: A003 - policies are named by their function name in results
        c = self.config
        if not c.reserve:
            return "filler"
        return ("sjf" if c.sjf else "fcfs") + ("-bb" if c.bb_reserve else "-easy")

    def __call__(self, snapshot: Snapshot, now: float) -> list[Decision]:
        if not snapshot.queue:
            return []
        c = self.config
        out, taken, avail, bbf, started = _fcfs(snapshot, now)
        rest = list(snapshot.queue)[len(out):]
        if not rest or not avail:
            return out
        free = snapshot.free
        if c.reserve:
            prof = Profile2.of(snapshot, now, avail, bbf if c.bb_reserve else math.inf, started)
            head = rest.pop(0)
            need_bb = head.bb if c.bb_reserve else 0.0
            k = prof.earliest(head.procs, need_bb, head.estimate)
            prof.reserve(prof.times[k], head.estimate, head.procs, need_bb)
            cands: list[Job] = sorted(rest, key=lambda j: j.estimate) if c.sjf else rest
        else:
            prof = None
            cands = rest
        for j in cands:
            p = j.procs
            if p > avail or short(bbf, j.bb):
                continue
            if prof is not None:
                b = j.bb if c.bb_reserve else 0.0
                if not prof.fits(0, p, b, j.estimate):
                    continue
                prof.reserve(now, j.estimate, p, b)
            out.append(StartJob(j.id, free[taken:taken + p]))
            taken += p
            avail -= p
            bbf -= j.bb
            if not avail:
                break
        return out
