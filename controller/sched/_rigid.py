"""The rigid baseline policies: FCFS and EASY backfilling (conservative backfilling is in :mod:`._conservative`).

Every policy is a pure function ``decide(snapshot, now) -> list[Decision]`` (see :mod:`._model`). Jobs start on
their requested size (``procs``), on the first free nodes (``snapshot.free[:procs]``). The policies use the
incremental hint of the snapshot (``changed``/``arrived``) only where that provably gives the same decisions as
a full pass; ``Simulator(..., hints=False)`` turns it off and the tests compare both.
"""

from __future__ import annotations

from collections.abc import Sequence
from heapq import heappop, heappush
from itertools import islice

from malleable.errors import PolicyError

from ._burst import bb_fcfs
from ._down import down_ends
from ._model import Decision, RunningJob, Snapshot, StartJob
from ._qindex import LedgerQueue, QueueIndex
from ._resize import first_fit_end

__all__ = ["easy", "easy_shadow", "fcfs"]

_INDEXED = 256
"""Above this many jobs behind the head, EASY's full backfilling scan goes through the ledger's queue index."""


def fcfs(snapshot: Snapshot, now: float) -> list[Decision]:
    """First come, first served: start queued jobs in order while the head fits (processors, and the burst
    buffer when the machine has one); never reorder.

    Args:
        snapshot: the machine and queues.
        now: the current time.

    Returns:
        StartJob decisions for the leading jobs of the queue that fit the free nodes.
    """
    q = snapshot.queue
    nq = len(q)
    if not nq or snapshot.new_jobs < nq:
        return []           # the head is an old job that did not fit, and nothing was freed since
    if snapshot.bb_total:
        return bb_fcfs(snapshot, now)       # the burst buffer is a second resource
    free = snapshot.free
    avail = len(free)
    taken = 0
    out: list[Decision] = []
    for j in q:
        p = j.procs
        if p > avail:
            break
        out.append(StartJob(j.id, free[taken:taken + p]))
        taken += p
        avail -= p
    return out


def easy_shadow(running: Sequence[RunningJob], started: list[tuple[float, int]], avail: int,
                need: int, down: Sequence[tuple[float, int]] = ()) -> tuple[float, int]:
    """The head job's reservation under EASY: ``(shadow time, extra nodes)``.

    Args:
        running: running jobs sorted by estimated end.
        started: ``(estimated end, size)`` of jobs started earlier in the same pass, sorted.
        avail: nodes free now (after those starts).
        need: the head job's size (> avail).
        down: ``(expected return, 1)`` of nodes that are down (``Snapshot.down``), sorted.

    Returns:
        The earliest estimated end (or return of a down node) at which ``need`` nodes are free, and how many
        nodes beyond ``need`` are free then (all jobs ending exactly at the shadow time count); ``(inf, 0)``
        when the head needs a node whose return is unknown.

    Raises:
        PolicyError: ``need`` nodes never become free (more than the machine).
    """
    if started or down:
        ends = sorted([(r.end_estimate, r.size) for r in running] + started + list(down))
    else:
        ends = [(r.end_estimate, r.size) for r in running]
    t, extra = first_fit_end(ends, avail, need)
    if t == float("inf"):
        total = avail + sum(size for _, size in ends)
        if need > total:
            raise PolicyError(f"a job of {need} nodes can never start: only {total} nodes exist")
        return t, 0
    return t, extra


def easy(snapshot: Snapshot, now: float) -> list[Decision]:
    """EASY backfilling (Lifka; Mu'alem and Feitelson's formulation).

    FCFS first; then the queue head gets a reservation at the shadow time (from running jobs' start +
    estimate); then every later job, in queue order, starts now if it fits the free nodes and either ends (by
    its estimate) no later than the shadow time or uses only the extra nodes (which it then consumes).

    Args:
        snapshot: the machine and queues.
        now: the current time.

    Returns:
        StartJob decisions.
    """
    q = snapshot.queue
    nq = len(q)
    if not nq:
        return []
    free = snapshot.free
    avail = len(free)
    taken = 0
    out: list[Decision] = []
    started: list[tuple[float, int]] = []
    fresh = snapshot.new_jobs
    if fresh >= nq:
        i = 0
        for j in q:
            p = j.procs
            if p > avail:
                break
            out.append(StartJob(j.id, free[taken:taken + p]))
            started.append((now + j.estimate, p))
            taken += p
            avail -= p
            i += 1
        if i == nq or not avail:
            return out
        head = q[i]
        first = i + 1
        if nq - first > _INDEXED:
            ix = q.index() if type(q) is LedgerQueue else None
            if ix is not None:
                return _backfill(ix, snapshot, now, head, out, started, avail, taken)
    else:
        # Nothing was freed since the last pass and the head is old: old jobs failed then under conditions at
        # least as favourable as now, so only the newly arrived tail can backfill.
        if not avail:
            return out
        head = q[0]
        first = nq - fresh
    shadow = -1.0
    extra = 0
    for j in islice(q, first, None):
        p = j.procs
        if p > avail:
            continue
        if shadow < 0:
            shadow, extra = easy_shadow(snapshot.running, started, avail, head.procs, down_ends(snapshot))
        if now + j.estimate <= shadow:
            pass
        elif p <= extra:
            extra -= p
        else:
            continue
        out.append(StartJob(j.id, free[taken:taken + p]))
        taken += p
        avail -= p
        if not avail:
            break
    return out


def _backfill(ix: QueueIndex, snapshot: Snapshot, now: float, head, out: list[Decision],
              started: list[tuple[float, int]], avail: int, taken: int) -> list[Decision]:
    """EASY's backfilling over the queue index: only the jobs that can start are looked at, in queue order.

    A job behind the head starts if it fits the free nodes and ends by the shadow time (estimate small enough) or
    fits the extra nodes (size small enough); both only shrink during the scan, so every other job would be
    skipped by the plain scan too. Candidates by estimate are taken with a small margin above the shadow time
    and checked exactly, as the plain scan does.
    """
    after = ix.seq_of[head.id]
    if ix.first(after, avail) < 0:
        return out                          # nothing behind the head fits: no shadow time needed
    shadow, extra = easy_shadow(snapshot.running, started, avail, head.procs, down_ends(snapshot))
    short = ix.short_jobs(after, avail, (shadow - now) + abs(shadow) * 1e-12 + 1e-9)
    jobs = ix.job
    free = snapshot.free
    cur = after
    while True:
        while short and (short[0][0] <= cur or short[0][1] > avail):
            _, p, it = heappop(short)               # passed by the scan, or a size that no longer fits: next
            if p <= avail:
                s = next(it, None)
                if s is not None:
                    heappush(short, (s, p, it))
        nxt = short[0][0] if short else -1
        b = avail if avail < extra else extra
        if b > 0:
            x = ix.first(cur, b)
            if x >= 0 and (nxt < 0 or x < nxt):
                nxt = x
        if nxt < 0:
            return out
        cur = nxt
        j = jobs[cur]
        p = j.procs
        if p > avail:
            continue
        if now + j.estimate <= shadow:
            pass
        elif p <= extra:
            extra -= p
        else:
            continue
        out.append(StartJob(j.id, free[taken:taken + p]))
        taken += p
        avail -= p
        if not avail:
            return out
