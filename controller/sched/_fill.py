"""``malleable-fill``: the simplest useful policy for rigid + malleable jobs (FCFS, shrink to admit, grow when idle).

It is a pure policy like the others (:mod:`._model`), registered under ``malleable-fill``:

1. **Start** queued jobs in queue order (FCFS, no backfilling). A malleable job starts on
   ``min(preferred, free)`` nodes if that is at least its minimum.
2. **Shrink to admit.** When the queue head does not fit the free nodes, running malleable jobs give back
   nodes (newest nodes first, down to their minimum; the job with the most nodes above its minimum first)
   if that makes the head fit; the head then starts on the free and the released nodes.
3. **Grow into idle nodes.** When nothing is left waiting, free nodes are handed to running malleable jobs
   below their maximum, one node at a time to the job that is furthest below it (oldest first on ties).

Jobs' own size requests come first: a pass with requests to answer (:func:`._requests.answer_requests`) makes
only those decisions (the next pass sees their result), and a job with an outstanding request is not grown
(its size is the application's choice).

A shrink always drops the *last* nodes of the job's node tuple, which is the order a job's nodes were
added in; the live controller relies on this (the runtime releases the newest spawn groups first).
"""

from __future__ import annotations

from ._model import Decision, JobKind, NodeId, ResizeJob, RunningJob, Snapshot, StartJob
from ._requests import answer_requests

__all__ = ["malleable_fill"]


def _start_size(job, avail: int) -> int:
    if job.kind is JobKind.RIGID:
        return job.procs if job.procs <= avail else 0
    k = min(job.procs, avail, job.max_procs)
    return k if k >= job.min_procs else 0


def malleable_fill(snapshot: Snapshot, now: float) -> list[Decision]:
    """FCFS with shrink-to-admit and grow-when-idle for malleable jobs (see the module docstring).

    Args:
        snapshot: the machine and queues.
        now: the current time.

    Returns:
        ResizeJob shrinks first, then StartJob decisions, then ResizeJob expansions.
    """
    if snapshot.requests:
        answers = answer_requests(snapshot)
        if answers:
            return answers
    free = list(snapshot.free)
    sizes: dict[int, tuple[NodeId, ...]] = {r.id: tuple(r.nodes) for r in snapshot.running}
    mall: list[RunningJob] = [r for r in snapshot.running if r.job.kind is JobKind.MALLEABLE]
    shrinks: dict[int, tuple] = {}
    starts: list[Decision] = []
    blocked = False
    for job in snapshot.queue:
        k = _start_size(job, len(free))
        if not k:
            need = job.procs if job.kind is JobKind.RIGID else job.min_procs
            spare = sum(len(sizes[r.id]) - r.job.min_procs for r in mall)
            if need > job.max_procs or len(free) + spare < need:
                blocked = True
                break
            # take nodes from the malleable job with the most nodes above its minimum, newest nodes first
            while len(free) < need:
                r = max(mall, key=lambda x: (len(sizes[x.id]) - x.job.min_procs, -x.start))
                nodes = sizes[r.id]
                if len(nodes) <= r.job.min_procs:
                    break
                free.append(nodes[-1])
                sizes[r.id] = nodes[:-1]
                shrinks[r.id] = sizes[r.id]
            k = _start_size(job, len(free))
            if not k:
                blocked = True
                break
        starts.append(StartJob(job.id, tuple(free[:k])))
        del free[:k]
    out: list[Decision] = [ResizeJob(jid, nodes) for jid, nodes in shrinks.items()]
    out += starts
    if blocked or not free:
        return out
    grow: dict[int, tuple] = {}
    cands = [r for r in mall if r.id not in shrinks and len(sizes[r.id]) < r.job.max_procs
             and r.id not in snapshot.requests]
    while free and cands:
        r = max(cands, key=lambda x: (x.job.max_procs - len(sizes[x.id]), -x.start))
        sizes[r.id] = sizes[r.id] + (free.pop(0),)
        grow[r.id] = sizes[r.id]
        if len(sizes[r.id]) >= r.job.max_procs:
            cands.remove(r)
    out += [ResizeJob(jid, nodes) for jid, nodes in grow.items()]
    return out
