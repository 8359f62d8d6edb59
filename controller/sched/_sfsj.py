"""Node stealing of seed 000 §3.1: BASELINE (conservative backfilling with failed jobs re-queued first) and SFSJ
("Steal From Small Jobs"), over the engine's node failures.

The engine interrupts the job on a failed node and re-queues it with :data:`FAILED_PRIORITY` (it restarts from
scratch: no checkpoints). Both policies then recompute the conservative schedule of every queued job; down
nodes count as nodes that come back at their repair time. SFSJ adds one step at the pass where a failed job
is first seen: if it cannot restart on the free nodes, it interrupts a victim (a running job with the fewest
nodes, the latest submitted among them, strictly smaller than the failed job), re-queued with medium priority,
and the failed job restarts at once on the free nodes plus the victim's.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from ._conservative import conservative
from ._down import with_down
from ._model import FAILED_PRIORITY, Decision, Interrupt, Job, Remember, RunningJob, Snapshot

__all__ = ["MEDIUM_PRIORITY", "baseline", "pick_victim", "sfsj"]

log = logging.getLogger(__name__)

MEDIUM_PRIORITY = 1
"""Queue priority of an SFSJ victim: after failed jobs, before every other job."""

@dataclass(frozen=True, slots=True)
class _Memo:
    inner: object                   # the conservative policy's memo
    seen: frozenset[int]            # failed jobs already considered for stealing


def baseline(snapshot: Snapshot, now: float) -> list[Decision]:
    """BASELINE of seed 000 §3.1.3: conservative backfilling; failed jobs come first in the queue (the engine
    orders them by priority, then release time) and the whole schedule is recomputed after a failure.

    Args:
        snapshot: the machine and queues.
        now: the current time.

    Returns:
        The conservative policy's decisions.
    """
    memo = snapshot.memo
    inner = memo.inner if isinstance(memo, _Memo) else memo
    return conservative(with_down(replace(snapshot, memo=inner)), now)


def pick_victim(failed: Job, running: tuple[RunningJob, ...] | list[RunningJob], now: float) -> RunningJob | None:
    """SFSJ's victim for ``failed``: among running jobs with the fewest nodes, the one submitted latest
    (ties: the least elapsed time, then the larger id) [interp.: L293's rule first, L243's second]; None unless
    it has strictly fewer nodes than ``failed``."""
    cands = [r for r in running if r.job.id >= 0]
    if not cands:
        return None
    v = min(cands, key=lambda r: (r.size, -r.job.submit, -(r.start - now), -r.job.id))
    return v if v.size < failed.procs else None


def sfsj(snapshot: Snapshot, now: float) -> list[Decision]:
    """SFSJ of seed 000 §3.1.4 (the "steal from small jobs" protocol; see the module docstring).

    A failed job that fits the free nodes restarts as under BASELINE (no stealing). Otherwise one victim is
    interrupted, only if that frees enough nodes; else the job waits as under BASELINE. Nodes are never
    returned. Each failed job is considered once, at the first pass after its failure.

    Args:
        snapshot: the machine and queues.
        now: the current time.

    Returns:
        ``Interrupt`` for the victim (if any), then BASELINE's decisions on the state after the theft.
    """
    memo = snapshot.memo
    seen = memo.seen if isinstance(memo, _Memo) else frozenset()
    inner = memo.inner if isinstance(memo, _Memo) else memo
    queued = {j.id for j in snapshot.queue}
    seen = seen & queued
    out: list[Decision] = []
    s = replace(snapshot, memo=inner)
    for job in snapshot.queue:
        if job.priority < FAILED_PRIORITY:
            break
        if job.id in seen:
            continue
        seen = seen | {job.id}
        if job.procs <= len(s.free):
            continue
        v = pick_victim(job, s.running, now)
        if v is None or job.procs > len(s.free) + v.size:
            continue
        out.append(Interrupt(v.id, MEDIUM_PRIORITY))
        log.debug("t=%g: SFSJ: job %d steals from job %d", now, job.id, v.id)
        again = replace(v.job, priority=MEDIUM_PRIORITY)
        q = list(s.queue)
        k = 0
        while k < len(q) and q[k].priority >= MEDIUM_PRIORITY and (q[k].priority > MEDIUM_PRIORITY or
                                                                  q[k].submit <= again.submit):
            k += 1
        q.insert(k, again)
        s = replace(s, free=(*s.free, *v.nodes), running=tuple(r for r in s.running if r.id != v.id),
                    queue=tuple(q), changed=True)
    inner_out = conservative(with_down(s), now)
    for i, d in enumerate(inner_out):
        if isinstance(d, Remember):
            inner_out[i] = Remember(_Memo(d.value, seen))
    return out + inner_out
