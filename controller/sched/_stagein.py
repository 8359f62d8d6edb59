"""Early stage-in: which queued jobs copy their data into a burst buffer of their own before they start, as Slurm's
burst-buffer plugin does.

A job with files to stage in need not hold its compute hosts while they are copied. Once the scheduling policy
has planned its start, its file system is started and filled on the storage hosts while it still waits, and it
is started on its hosts with its data already in place. The rule, applied after each scheduling pass to the
ledger's snapshot (pure: the live core carries it out, holding the buffer through
:meth:`Ledger.hold_bb <._ledger.Ledger.hold_bb>` ``early``):

1. A queued job's start is **planned** when the policy reserved it (``Snapshot.reservations``) or it is the head
   of the queue (every list policy starts the head first).
2. Planned jobs that want an early stage-in (they have files to copy and none is being copied for them yet) are
   taken in queue order. One whose whole buffer fits in the free buffer begins its stage-in now and holds that
   buffer from now on; the first that does not fit **waits for buffer** (Slurm's ``BurstBufferResources``), and
   so do the planned jobs behind it, so that a later job never takes the buffer an earlier one is waiting for.
3. A job whose stage-in runs may not be started by the policy until the copy is done (the live core tells the
   ledger it is busy); its buffer is then counted once: the early hold becomes the run's at its start. Policies
   plan as if there were no early holds (they see them as free buffer); the ledger defers a start of another
   job that would need buffer held early.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import NamedTuple

from ._burst import short
from ._model import Snapshot

__all__ = ["StagePlan", "plan_stage_in"]


class StagePlan(NamedTuple):
    """What :func:`plan_stage_in` decided: jobs whose stage-in begins now, and jobs that wait for buffer."""

    begin: tuple[int, ...]
    wait: tuple[int, ...]


def plan_stage_in(snapshot: Snapshot, wants: Collection[int], bb_free: float) -> StagePlan:
    """Apply the rule of the module docstring.

    Args:
        snapshot: the machine after the pass (its queue and reservations).
        wants: ids of queued jobs that want an early stage-in now.
        bb_free: the burst buffer nobody holds, early holds counted as held (``Snapshot.bb_free`` counts them as
            free, as the policies plan without them).

    Returns:
        The jobs to begin and those to wait, each in queue order.
    """
    if not wants:
        return StagePlan((), ())
    queue = snapshot.queue
    head = queue[0].id if len(queue) else None
    free = bb_free
    reserved = snapshot.reservations or {}
    begin: list[int] = []
    wait: list[int] = []
    for job in queue:
        if job.id not in wants or (job.id != head and job.id not in reserved):
            continue
        if wait or short(free, job.bb):
            wait.append(job.id)
            continue
        begin.append(job.id)
        free -= job.bb
    return StagePlan(tuple(begin), tuple(wait))
