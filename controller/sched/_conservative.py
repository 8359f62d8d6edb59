"""Conservative backfilling over an availability profile kept as two sorted arrays.

The profile is a step function: ``free[k]`` nodes are free in ``[times[k], times[k+1])`` (the last step lasts
forever). At a pass where something ended or was resized, it is rebuilt from the running jobs' estimated ends
and every queued job, in queue order, gets the earliest reservation that fits under the profile (so it delays
no earlier job); jobs whose reservation is ``now`` start. When nothing ended since the previous pass, the
previous profile (handed over with ``Remember``) is still exact and only the newly arrived jobs are placed.

``conservative`` is the fast implementation: the profile is two NumPy arrays and one pass's placements run in one
call of a loop compiled by Numba (:mod:`._kernels`; the same loop runs as plain Python when Numba is missing), so a
placement costs the same on any machine size; ``conservative_reference`` is the straightforward one it must match
decision for decision (tests/controller/test_conservative_speed.py).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from dataclasses import dataclass
from itertools import islice

import numpy as np

from malleable.errors import PolicyError

from ._kernels import kernel
from ._model import Decision, Remember, Reserve, Snapshot, StartJob

__all__ = ["Profile", "conservative", "conservative_reference"]


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


def conservative_reference(snapshot: Snapshot, now: float) -> list[Decision]:
    """The straightforward conservative backfilling (list profile, full re-plan): the specification that
    :func:`conservative` must match decision for decision; kept for the equivalence tests and benchmarks.

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
                return conservative_reference(_full(snapshot), now)
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


# -- the fast implementation --------------------------------------------------------------------------------------
#
# Same algorithm and the same decisions as ``conservative_reference``: the profile lives in two arrays with room for
# one more step per placement, and the placements of one pass run in one kernel call (``place``), which returns each
# job's reserved start.


@dataclass(frozen=True, slots=True, eq=False)
class _ArrayMemo:
    times: np.ndarray                 # never mutated once remembered (the next pass copies it)
    free: np.ndarray
    n: int                            # steps in use
    ids: np.ndarray                   # the reserved (not started) queued jobs, in queue order
    slots: np.ndarray                 # their reserved starts
    id_list: list[int]                # their ids again, as a list (compared with the next queue at C speed)
    needs: np.ndarray                 # their sizes and estimates
    ests: np.ndarray

    def __eq__(self, other: object) -> bool:
        if type(other) is not _ArrayMemo:
            return NotImplemented
        n = self.n
        return (n == other.n and np.array_equal(self.ids, other.ids) and np.array_equal(self.slots, other.slots)
                and np.array_equal(self.times[:n], other.times[:n]) and np.array_equal(self.free[:n], other.free[:n]))

    __hash__ = None  # type: ignore[assignment]


def _base(now: float, n_free: int, running, room: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The profile of the running jobs alone (``Profile.from_running``) in arrays with ``room`` spare steps."""
    cap = len(running) + room + 1
    times = np.empty(cap)
    free = np.empty(cap, dtype=np.int64)
    ends = np.fromiter([r.end_estimate for r in running], dtype=np.float64, count=len(running))
    sizes = np.fromiter([r.size for r in running], dtype=np.int64, count=len(running))
    n = kernel("base")(now, n_free, ends, sizes, times, free)
    return times, free, n


def _previous(ids: np.ndarray, memo: _ArrayMemo | None) -> np.ndarray:
    """Each job's reserved start in the previous pass (NaN for jobs it did not reserve)."""
    if memo is None or not len(memo.ids) or not len(ids):
        return np.full(len(ids), np.nan)
    order = np.argsort(memo.ids, kind="stable")
    sorted_ids = memo.ids[order]
    at = np.minimum(np.searchsorted(sorted_ids, ids), len(sorted_ids) - 1)
    return np.where(sorted_ids[at] == ids, memo.slots[order][at], np.nan)


def conservative(snapshot: Snapshot, now: float) -> list[Decision]:
    """Conservative backfilling: every queued job holds the earliest reservation that delays no earlier one.

    Args:
        snapshot: the machine and queues.
        now: the current time.

    Returns:
        StartJob for the jobs whose reservation is now, Reserve for every new or moved reservation, and a
        Remember carrying the profile to the next pass.

    Raises:
        PolicyError: a queued job needs more nodes than the machine has.
    """
    q = snapshot.queue
    memo = snapshot.memo if type(snapshot.memo) is _ArrayMemo else None
    fresh = snapshot.new_jobs
    nq = len(q)
    first = 0
    if fresh < nq and memo is not None:
        first = nq - fresh
        mi = memo.ids
        if len(mi) == first and mi[0] == q[0].id and mi[first - 1] == q[first - 1].id and (
                memo.n == 1 or memo.times[1] > now):
            n = memo.n
            times = np.empty(n + fresh + 1)
            free = np.empty(n + fresh + 1, dtype=np.int64)
            times[:n] = memo.times[:n]
            free[:n] = memo.free[:n]
            times[0] = now
        else:                                      # pragma: no cover - memo out of step: recompute everything
            first = 0
    if not first:
        times, free, n = _base(now, len(snapshot.free), snapshot.running, nq)
    jobs = q[first:] if first else q
    k = len(jobs)
    id_list = [j.id for j in jobs]
    m = len(memo.id_list) if memo is not None and not first else 0
    if m and memo is not None and id_list[:m] == memo.id_list:       # the queue is the jobs reserved last time, then arrivals
        tail = jobs[m:]
        needs = np.concatenate((memo.needs, np.fromiter([j.procs for j in tail], dtype=np.int64, count=k - m)))
        ests = np.concatenate((memo.ests, np.fromiter([j.estimate for j in tail], dtype=np.float64, count=k - m)))
        prev = np.concatenate((memo.slots, np.full(k - m, np.nan)))
    else:
        needs = np.fromiter([j.procs for j in jobs], dtype=np.int64, count=k)
        ests = np.fromiter([j.estimate for j in jobs], dtype=np.float64, count=k)
        prev = None
    ids = np.array(id_list, dtype=np.int64)
    slots = np.empty(k)
    cap = min(int(needs.max()) + 1, 1 << 16) if k else 1
    n = kernel("place")(times, free, n, needs, ests, slots, np.zeros(cap), np.full(cap, -1.0))
    if n < 0:
        total = len(snapshot.free) + sum(r.size for r in snapshot.running)
        raise PolicyError(f"a job of {int(needs[-n - 1])} nodes can never start: the machine has {total}")
    started: list[tuple[int, Decision]] = []
    reserved = np.ones(k, dtype=bool)
    free_ids = snapshot.free
    taken = 0
    for i in np.flatnonzero(slots == now).tolist():     # slot now: start, unless a zero-length job started before
        j = jobs[i]
        need = j.procs
        started.append((i, StartJob(j.id, free_ids[taken:taken + need])))
        reserved[i] = False
        taken += need
        if j.estimate <= 0:         # it holds its nodes until its end (at this same time): later ones wait for it
            break
    if prev is None:
        prev = np.full(k, np.nan) if first else _previous(ids, memo)
    moved = np.flatnonzero(reserved & (slots != prev)).tolist()
    out: list[Decision] = []
    if moved:                       # every decision in queue order, as the reference makes them
        tagged = [(i, Reserve(int(ids[i]), float(slots[i]), int(needs[i]))) for i in moved]
        out = [d for _, d in heapq.merge(started, tagged, key=lambda x: x[0])]
    else:
        out = [d for _, d in started]
    if started:
        res_ids, res_slots, res_needs, res_ests = ids[reserved], slots[reserved], needs[reserved], ests[reserved]
        res_list = [x for x, keep in zip(id_list, reserved.tolist(), strict=True) if keep]
    else:
        res_ids, res_slots, res_needs, res_ests, res_list = ids, slots, needs, ests, id_list
    if first:
        assert memo is not None
        res_ids = np.concatenate((memo.ids, res_ids))
        res_slots = np.concatenate((memo.slots, res_slots))
        res_needs = np.concatenate((memo.needs, res_needs))
        res_ests = np.concatenate((memo.ests, res_ests))
        res_list = memo.id_list + res_list
    out.append(Remember(_ArrayMemo(times, free, n, res_ids, res_slots, res_list, res_needs, res_ests)))
    return out
