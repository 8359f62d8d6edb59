"""Conservative backfilling over an availability profile kept as two sorted arrays.

The profile is a step function: ``free[k]`` nodes are free in ``[times[k], times[k+1])`` (the last step lasts
forever). At a pass where something ended or was resized, it is rebuilt from the running jobs' estimated ends
and every queued job, in queue order, gets the earliest reservation that fits under the profile (so it delays
no earlier job); jobs whose reservation is ``now`` start. When nothing ended since the previous pass, the
previous profile (handed over with ``Remember``) is still exact and only the newly arrived jobs are placed.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from itertools import islice

from malleable.errors import PolicyError

from ._model import Decision, Remember, Reserve, Snapshot, StartJob

__all__ = ["Profile", "conservative"]


class Profile:
    """A mutable availability profile (used inside one policy call; frozen copies go into the memo)."""

    __slots__ = ("free", "times")

    def __init__(self, times: list[float], free: list[int]) -> None:
        self.times = times
        self.free = free

    @classmethod
    def from_running(cls, now: float, n_free: int, ends: list[tuple[float, int]]) -> Profile:
        """The profile at ``now`` from the free count and ``(estimated end, size)`` of running jobs (sorted)."""
        times = [now]
        free = [n_free]
        for t, size in ends:
            if t <= times[-1]:
                free[-1] += size
            else:
                times.append(t)
                free.append(free[-1] + size)
        return cls(times, free)

    def earliest(self, need: int, duration: float) -> int:
        """Index of the earliest step at whose start ``need`` nodes stay free for ``duration`` seconds.

        Raises:
            PolicyError: ``need`` exceeds the nodes free in the last step (the whole machine).
        """
        times, free = self.times, self.free
        n = len(times)
        if free[-1] < need:
            raise PolicyError(f"a job of {need} nodes can never start: the machine has {free[-1]}")
        k = 0
        while True:
            while free[k] < need:
                k += 1
            end = times[k] + duration
            m = k + 1
            while m < n and times[m] < end:
                if free[m] < need:
                    break
                m += 1
            else:
                return k
            k = m + 1

    def reserve(self, k: int, need: int, duration: float) -> None:
        """Take ``need`` nodes from the start of step ``k`` for ``duration`` seconds (must fit)."""
        if duration <= 0 or need <= 0:
            return
        times, free = self.times, self.free
        end = times[k] + duration
        m = bisect_left(times, end, k + 1)
        if m == len(times) or times[m] != end:
            times.insert(m, end)
            free.insert(m, free[m - 1])
        for x in range(k, m):
            free[x] -= need


@dataclass(frozen=True, slots=True)
class _Memo:
    times: tuple[float, ...]
    free: tuple[int, ...]
    starts: dict[int, float]          # queued job id -> reserved start (treated as immutable)


def conservative(snapshot: Snapshot, now: float) -> list[Decision]:
    """Conservative backfilling: every queued job holds the earliest reservation that delays no earlier one.

    Args:
        snapshot: the machine and queues.
        now: the current time.

    Returns:
        StartJob for the jobs whose reservation is now, Reserve for every new or moved reservation, and a
        Remember carrying the profile to the next pass.
    """
    q = snapshot.queue
    memo = snapshot.memo
    fresh = snapshot.new_jobs
    nq = len(q)
    if fresh < nq and isinstance(memo, _Memo):
        prof = Profile(list(memo.times), list(memo.free))
        prof.times[0] = now
        old = memo.starts
        first = nq - fresh
        starts = dict(old)
        for j in islice(q, first):
            if j.id not in starts:                 # pragma: no cover - memo out of step: recompute everything
                return conservative(_full(snapshot), now)
    else:
        ends = [(r.end_estimate, r.size) for r in snapshot.running]
        prof = Profile.from_running(now, len(snapshot.free), ends)
        old = memo.starts if isinstance(memo, _Memo) else {}
        first = 0
        starts = {}
    out: list[Decision] = []
    free_ids = snapshot.free
    taken = 0
    held = 0
    for j in islice(q, first, None):
        k = prof.earliest(j.procs, j.estimate)
        prof.reserve(k, j.procs, j.estimate)
        t = prof.times[k]
        if k == 0 and not held:
            out.append(StartJob(j.id, free_ids[taken:taken + j.procs]))
            taken += j.procs
            if j.estimate <= 0:         # a zero-length job holds its nodes until its end (at this same time)
                held += j.procs
        else:       # k == 0 here: it starts in the pass right after the zero-length jobs' ends, at this time
            starts[j.id] = t
            if old.get(j.id) != t:
                out.append(Reserve(j.id, t, j.procs))
    out.append(Remember(_Memo(tuple(prof.times), tuple(prof.free), starts)))
    return out


def _full(snapshot: Snapshot) -> Snapshot:
    from dataclasses import replace
    return replace(snapshot, changed=True, memo=None)
