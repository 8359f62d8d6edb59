"""Conservative backfilling over an availability profile kept as two sorted arrays.

The profile is a step function: ``free[k]`` nodes are free in ``[times[k], times[k+1])`` (the last step lasts
forever). At a pass where something ended or was resized, it is rebuilt from the running jobs' estimated ends
and every queued job, in queue order, gets the earliest reservation that fits under the profile (so it delays
no earlier job); jobs whose reservation is ``now`` start. When nothing ended since the previous pass, the
previous profile (handed over with ``Remember``) is still exact and only the newly arrived jobs are placed.

``conservative`` is the fast implementation (free counts in a bytearray, searched and updated in C, machines of
up to 255 nodes); ``conservative_reference`` is the straightforward one it must match decision for decision
(tests/controller/test_conservative_speed.py), also used above 255 nodes.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from itertools import accumulate, islice

from malleable.errors import PolicyError

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
# Same algorithm and the same decisions as ``conservative_reference``; the profile's free counts are held in a
# bytearray (machines of at most 255 nodes), so the per-step work runs in C: ``translate`` with a 0/1 table gives
# the steps where a job fits, ``find`` walks their runs, and a reservation is one ``translate`` of a slice with a
# subtraction table. Larger machines use the reference implementation.

_BYTE_NODES = 255
_FITS = [bytes(1 if x >= n else 0 for x in range(256)) for n in range(256)]      # step has >= n free nodes
_MINUS = [bytes((x - n) & 255 for x in range(256)) for n in range(256)]          # x - n (x >= n where used)


@dataclass(frozen=True, slots=True)
class _FastMemo:
    times: list[float]                # never mutated once remembered (the next pass copies it)
    free: bytes
    starts: dict[int, float]          # queued job id -> reserved start (treated as immutable)


def _base(now: float, n_free: int, running) -> tuple[list[float], bytearray]:
    """The profile of the running jobs alone (``Profile.from_running``), as (times, free bytes)."""
    if not running:
        return [now], bytearray((n_free,))
    ends = [r.end_estimate for r in running]
    if ends[0] > now and ends == sorted(ends):
        cum = accumulate([r.size for r in running], initial=n_free)
        next(cum)
        steps = dict(zip(ends, cum, strict=True))            # equal ends merge: the last (largest) count wins
        times = [now]
        times += steps
        free = bytearray((n_free,))
        free += bytes(steps.values())
        return times, free
    p = Profile.from_running(now, n_free, list(zip(ends, [r.size for r in running], strict=True)))
    return p.times, bytearray(p.free)


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
    if len(snapshot.nodes) > _BYTE_NODES:
        return conservative_reference(snapshot, now)
    q = snapshot.queue
    memo = snapshot.memo
    fresh = snapshot.new_jobs
    nq = len(q)
    first = 0
    if fresh < nq and type(memo) is _FastMemo:
        first = nq - fresh
        old = memo.starts
        mt = memo.times
        if len(old) == first and q[0].id in old and q[first - 1].id in old and (len(mt) == 1 or mt[1] > now):
            times = list(mt)
            times[0] = now
            fb = bytearray(memo.free)
            starts = dict(old)
        else:                                      # pragma: no cover - memo out of step: recompute everything
            first = 0
            memo = None
    if not first:
        times, fb = _base(now, len(snapshot.free), snapshot.running)
        old = memo.starts if type(memo) is _FastMemo else {}
        starts = {}
    out: list[Decision] = []
    append = out.append
    free_ids = snapshot.free
    taken = 0
    held = 0
    n = len(times)
    fits, minus = _FITS, _MINUS
    lower: dict[int, tuple[float, float]] = {}      # size -> (estimate, slot) of its last reservation
    for j in islice(q, first, None) if first else q:
        need = j.procs
        est = j.estimate
        if fb[-1] < need:
            raise PolicyError(f"a job of {need} nodes can never start: the machine has {fb[-1]}")
        if need <= 0:
            a = 0
        else:
            mask = fb.translate(fits[need])
            if est > 0:
                # the profile only loses nodes during a pass, so a job of the same size and no shorter estimate
                # cannot fit before the previous one's slot: start the search there
                prev = lower.get(need)
                if prev is not None and est >= prev[0]:
                    a = mask.find(1, bisect_left(times, prev[1]))
                else:
                    a = mask.find(1)
                while True:
                    b = mask.find(0, a)
                    if b < 0 or times[b] >= times[a] + est:
                        break
                    a = mask.find(1, b)
                end = times[a] + est
                m = bisect_left(times, end, a + 1)
                if m == n or times[m] != end:
                    times.insert(m, end)
                    fb.insert(m, fb[m - 1])
                    n += 1
                fb[a:m] = fb[a:m].translate(minus[need])
                lower[need] = (est, times[a])
            else:
                a = mask.find(1)
        if a == 0 and not held:
            append(StartJob(j.id, free_ids[taken:taken + need]))
            taken += need
            if est <= 0:        # a zero-length job holds its nodes until its end (at this same time)
                held += need
        else:       # a == 0 here: it starts in the pass right after the zero-length jobs' ends, at this time
            t = times[a]
            jid = j.id
            starts[jid] = t
            if old.get(jid) != t:
                append(Reserve(jid, t, need))
    append(Remember(_FastMemo(times, bytes(fb), starts)))
    return out
