"""A compiled twin of the simulator for the commonest runs: rigid jobs under the built-in ``fcfs`` or ``easy``.

The whole event loop (ends, submissions, one pass per event time) and the two policies run as one Numba-compiled
function over arrays: counts of free nodes instead of node ids, the running jobs in an array sorted by estimated
end. It gives exactly the schedule of :class:`~._engine.Simulator` with the policy functions of
:mod:`malleable.controller.sched._rigid` (same event order, same float arithmetic, same EASY shadow and extra
nodes; the tests compare both job by job), and is taken only where nothing else could differ: rigid jobs without
burst buffers or phases, no failures, no periodic passes, no recording, no node histories, no MTCT model.
``Simulator(..., fast=False)`` or ``MALLEABLE_NO_FASTPATH=1`` turns it off.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from malleable.controller.sched._kernels import base_profile, place

__all__ = ["conservative_kernel", "fast_kernel", "run_conservative", "run_rigid", "warm"]

log = logging.getLogger(__name__)


def run_rigid(submit: np.ndarray, run: np.ndarray, est: np.ndarray, procs: np.ndarray, machine: int, easy: bool,
              start: np.ndarray, end: np.ndarray) -> int:
    """Replay rigid jobs (rows sorted by submit) under FCFS (``easy`` False) or EASY; fills ``start``/``end``
    and returns the number of passes. Every job must fit the machine."""
    n = submit.shape[0]
    inf = math.inf
    # running jobs, sorted by (estimated end, start order)
    cap = min(n, machine) + 1             # every running job holds at least one node
    r_est = np.empty(cap)
    r_seq = np.empty(cap, dtype=np.int64)
    r_end = np.empty(cap)
    r_size = np.empty(cap, dtype=np.int64)
    r_row = np.empty(cap, dtype=np.int64)
    nr = 0
    q = np.empty(n, dtype=np.int64)       # queued rows in order; -1 = started (removed)
    qh = 0                                # first entry that may still be queued
    qt = 0                                # one past the last entry
    gone = 0                              # removed entries in q[qh:qt]
    avail = machine
    seq = 0
    i = 0
    passes = 0
    te = inf
    while True:
        ts = submit[i] if i < n else inf
        now = ts if ts < te else te       # te: the earliest real end of a running job (kept up to date)
        if now == inf:
            break
        if te <= now:                     # job ends (all at this time)
            nr, freed, te = _end_jobs(r_est, r_seq, r_end, r_size, r_row, nr, now, end)
            avail += freed
        while i < n and submit[i] <= now:
            q[qt] = i
            qt += 1
            i += 1
        passes += 1
        if gone > 64 and gone * 2 > qt - qh:   # compact the queue now and then
            w = qh
            for k in range(qh, qt):
                if q[k] >= 0:
                    q[w] = q[k]
                    w += 1
            qt = w
            gone = 0
        # FCFS: the leading jobs while they fit
        while qh < qt:
            j = q[qh]
            if j < 0:
                qh += 1
                gone -= 1
                continue
            p = procs[j]
            if p > avail:
                break
            e = now + est[j]
            nr = _insert(r_est, r_seq, r_end, r_size, r_row, nr, e, seq, now + run[j], p, j)
            if now + run[j] < te:
                te = now + run[j]
            seq += 1
            start[j] = now
            avail -= p
            qh += 1
        if not easy or qh >= qt or avail == 0:
            continue
        need = procs[q[qh]]
        shadow = -1.0
        extra = 0
        for k in range(qh + 1, qt):
            j = q[k]
            if j < 0:
                continue
            p = procs[j]
            if p > avail:
                continue
            if shadow < 0:
                a = avail
                m = 0
                shadow = inf
                while m < nr:
                    t = r_est[m]
                    a += r_size[m]
                    m += 1
                    if a >= need:
                        while m < nr and r_est[m] == t:
                            a += r_size[m]
                            m += 1
                        shadow = t
                        extra = a - need
                        break
            if now + est[j] <= shadow:
                pass
            elif p <= extra:
                extra -= p
            else:
                continue
            nr = _insert(r_est, r_seq, r_end, r_size, r_row, nr, now + est[j], seq, now + run[j], p, j)
            if now + run[j] < te:
                te = now + run[j]
            seq += 1
            start[j] = now
            avail -= p
            q[k] = -1
            gone += 1
            if avail == 0:
                break
    return passes


def _end_jobs(r_est: np.ndarray, r_seq: np.ndarray, r_end: np.ndarray, r_size: np.ndarray, r_row: np.ndarray,
              nr: int, now: float, end: np.ndarray) -> tuple[int, int, float]:
    """Remove the running jobs whose real end is ``now`` or earlier (recording it in ``end``), keeping the others'
    order; returns the new count, the nodes freed and the earliest real end left (``inf`` for none)."""
    te = math.inf
    freed = 0
    w = 0
    for k in range(nr):
        if r_end[k] <= now:
            freed += r_size[k]
            end[r_row[k]] = r_end[k]
        else:
            if r_end[k] < te:
                te = r_end[k]
            r_est[w] = r_est[k]
            r_seq[w] = r_seq[k]
            r_end[w] = r_end[k]
            r_size[w] = r_size[k]
            r_row[w] = r_row[k]
            w += 1
    return w, freed, te


def _insert(r_est: np.ndarray, r_seq: np.ndarray, r_end: np.ndarray, r_size: np.ndarray, r_row: np.ndarray,
            nr: int, e: float, s: int, t_end: float, p: int, row: int) -> int:
    """Insert a running job by (estimated end, start order); returns the new count."""
    lo = 0
    hi = nr
    while lo < hi:                        # after every job with an estimated end <= e (start order breaks ties)
        mid = (lo + hi) // 2
        if r_est[mid] <= e:
            lo = mid + 1
        else:
            hi = mid
    for k in range(nr, lo, -1):
        r_est[k] = r_est[k - 1]
        r_seq[k] = r_seq[k - 1]
        r_end[k] = r_end[k - 1]
        r_size[k] = r_size[k - 1]
        r_row[k] = r_row[k - 1]
    r_est[lo] = e
    r_seq[lo] = s
    r_end[lo] = t_end
    r_size[lo] = p
    r_row[lo] = row
    return nr + 1


def run_conservative(submit: np.ndarray, run: np.ndarray, est: np.ndarray, procs: np.ndarray, machine: int,
                     start: np.ndarray, end: np.ndarray, reserves: np.ndarray) -> int:
    """Replay rigid jobs under conservative backfilling (the registered ``conservative``); fills ``start``/``end``,
    ``reserves[0]`` (Reserve decisions: new or moved reservations) and returns the number of passes.

    As the policy does: after a job end, the profile is rebuilt from the running jobs' estimated ends and every
    queued job placed in queue order; otherwise the previous profile stays exact and only arrivals are placed. Jobs
    placed at ``now`` start in queue order (after a zero-length start the others wait for the next pass)."""
    n = submit.shape[0]
    inf = math.inf
    cap = min(n, machine) + 1             # every running job holds at least one node
    r_est = np.empty(cap)
    r_seq = np.empty(cap, dtype=np.int64)
    r_end = np.empty(cap)
    r_size = np.empty(cap, dtype=np.int64)
    r_row = np.empty(cap, dtype=np.int64)
    nr = 0
    q = np.empty(n, dtype=np.int64)       # queued rows in order (compacted after every pass)
    nq = 0
    times = np.empty(2 * n + 2)
    free = np.empty(2 * n + 2, dtype=np.int64)
    steps = 0
    prev = np.full(n, np.nan)             # each job's reserved start at the previous pass
    needs = np.empty(n, dtype=np.int64)
    ests = np.empty(n)
    slots = np.empty(n)
    last_t = np.zeros(machine + 1)
    last_e = np.full(machine + 1, -1.0)
    b_ends = np.empty(cap)
    b_sizes = np.empty(cap, dtype=np.int64)
    avail = machine
    seq = 0
    i = 0
    passes = 0
    ended = True
    te = inf
    while True:
        ts = submit[i] if i < n else inf
        now = ts if ts < te else te       # te: the earliest real end of a running job (kept up to date)
        if now == inf:
            break
        if te <= now:                     # job ends (all at this time)
            nr, freed, te = _end_jobs(r_est, r_seq, r_end, r_size, r_row, nr, now, end)
            avail += freed
            ended = True
        old = nq
        while i < n and submit[i] <= now:
            q[nq] = i
            nq += 1
            i += 1
        passes += 1
        if ended or (steps > 1 and times[1] <= now):
            for k in range(nr):
                b_ends[k] = r_est[k]
                b_sizes[k] = r_size[k]
            steps = base_profile(now, avail, b_ends[:nr], b_sizes[:nr], times, free)
            first = 0
            ended = False
        else:
            times[0] = now
            first = old
        m = nq - first
        for k in range(m):
            j = q[first + k]
            needs[k] = procs[j]
            ests[k] = est[j]
        steps = place(times, free, steps, needs[:m], ests[:m], slots[:m], last_t, last_e)
        for k in range(m):
            last_e[needs[k]] = -1.0       # only the sizes used: the next call finds them fresh
        stop = False
        w = first
        for k in range(m):
            j = q[first + k]
            if not stop and slots[k] == now:
                e = now + est[j]
                nr = _insert(r_est, r_seq, r_end, r_size, r_row, nr, e, seq, now + run[j], procs[j], j)
                if now + run[j] < te:
                    te = now + run[j]
                seq += 1
                start[j] = now
                avail -= procs[j]
                if est[j] <= 0:
                    stop = True
                continue
            if slots[k] != prev[j]:
                reserves[0] += 1
            prev[j] = slots[k]
            q[w] = j
            w += 1
        nq = w
    return passes


_READY: list[Callable[..., Any]] = []


def fast_kernel() -> Callable[..., Any]:
    """:func:`run_rigid`, compiled with Numba when it is there (and ``MALLEABLE_NO_JIT`` is not 1)."""
    if _READY:
        return _READY[0]
    f: Callable[..., Any] = run_rigid
    if os.environ.get("MALLEABLE_NO_JIT") != "1":
        try:
            import numba
        except ImportError:                                    # pragma: no cover - numba is a dependency
            log.warning("numba is not installed: the simulator's fast path runs as plain Python")
        else:
            g = globals()
            for name in ("_end_jobs", "_insert", "base_profile", "place"):
                g[name] = numba.njit(cache=True, nogil=True)(g[name])
            f = numba.njit(cache=True, nogil=True)(run_rigid)
            g["_conservative_jit"] = numba.njit(cache=True, nogil=True)(run_conservative)
    _READY.append(f)
    return f


def conservative_kernel() -> Callable[..., Any]:
    """:func:`run_conservative`, compiled when Numba is there."""
    fast_kernel()
    return globals().get("_conservative_jit", run_conservative)


def warm(which: str = "both") -> None:
    """Compile (or load from Numba's cache) the kernels now with a one-job run, so that timings cover the event
    loop only: ``"rigid"`` (fcfs, easy), ``"conservative"`` or ``"both"``."""
    one = np.ones(1)
    if which in ("rigid", "both"):
        fast_kernel()(np.zeros(1), one, one, np.ones(1, dtype=np.int64), 1, True, np.zeros(1), np.zeros(1))
    if which in ("conservative", "both"):
        conservative_kernel()(np.zeros(1), one, one, np.ones(1, dtype=np.int64), 1, np.zeros(1), np.zeros(1),
                              np.zeros(1, dtype=np.int64))
