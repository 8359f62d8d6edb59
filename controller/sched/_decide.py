"""The handlers of the policies' decisions, one per decision type (:data:`DISPATCH`), used by
:meth:`~._ledger.Ledger.apply`: each checks one decision against the ledger's state and applies it, appending what
happened to ``effects``; a decision that breaks an invariant raises :class:`~._nodes.Bad` and changes nothing, one
that cannot be taken now (live only) raises :class:`Busy`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ._model import Decline, Interrupt, JobKind, NodeId, Remember, Reserve, ResizeJob, RunningJob, StartJob, Wake
from ._nodes import Bad, is_run

if TYPE_CHECKING:
    from ._ledger import Effect, Ledger

__all__ = ["DISPATCH", "Busy"]


class Busy(Bad):
    """A decision about a job that cannot take one now (live only: deferred, not rejected)."""


def start(self: Ledger, d: StartJob, now: float, effects: list[Effect], released: set[NodeId]) -> None:
    job = self.queued.get(d.job_id)
    if job is None:
        raise Bad("job is " + ("already running" if d.job_id in self.running else "not queued"))
    if self.busy and job.id in self.busy:
        raise Busy(f"job {job.id} cannot start now: {self.busy[job.id]}")
    nodes = d.nodes
    if not is_run(nodes):
        raise Bad("nodes must be a tuple of node ids")
    k = len(nodes)
    if not job.min_procs <= k <= job.max_procs:
        raise Bad(f"{k} nodes: the job allows {job.min_procs}..{job.max_procs}")
    if job.bb:
        own = self.early_bb(job.id) if self._bb.early else 0.0            # its own early hold is its own
        free = self.bb_total - self.bb_used + own
        if job.bb > free + 1e-9 * max(1.0, job.bb):
            if job.bb <= free + self._bb.early - own + 1e-9 * max(1.0, job.bb):
                raise Busy(f"job {job.id} cannot start now: the burst buffer it needs is held for other jobs' "
                           "stage-in")
            raise Bad(f"needs {job.bb:g} of burst buffer, {free:g} free")
    self._owner_for = job.id
    self._take(nodes, released)
    if job.bb and self._bb.early:
        self.release_bb(job.id, early=True)                             # the run's hold below takes its place
    nodes = self._free.own(nodes)
    del self.queued[job.id]
    q = self.queue
    if q[0] is job and self._qix is None:
        del q[0]
    else:
        self._unqueue(job)
    if self.reservations:
        self.reservations.pop(job.id, None)
    f = 1.0 if k == job.procs else self.speedup(job, k)
    view = RunningJob(job, nodes, k, now, now, 0.0, now + job.estimate * f if k != job.procs else
                      now + job.estimate, 0, None if self.mtct is None else self.mtct(job, k))
    self._list(view)
    if job.bb:
        self.hold_bb(job.id, job.bb)
    effects.append(("start", view, f))

def resize(self: Ledger, d: ResizeJob, now: float, effects: list[Effect], released: set[NodeId]) -> None:
    v = self.running.get(d.job_id)
    if v is None:
        raise Bad("job is not running")
    job = v.job
    if job.kind is not JobKind.MALLEABLE:
        raise Bad(f"job {job.id} is {job.kind.value}, not malleable")
    why = self.busy.get(job.id) if self.busy else None
    if why:
        raise Busy(f"job {job.id} cannot be resized now: {why}")
    if job.phases and job.id not in self.points:
        raise Bad(f"job {job.id} is between scheduling points (it may be resized only at one)")
    nodes = d.nodes
    k = len(nodes)
    if not is_run(nodes) or not job.min_procs <= k <= job.max_procs:
        raise Bad(f"size {k} outside {job.min_procs}..{job.max_procs}")
    vn = v.nodes
    m = len(vn)
    if k < m and vn[:k] == nodes:                    # the usual shrink: keep a prefix
        added: Sequence[NodeId] = ()
        removed: Sequence[NodeId] = vn[k:]
    elif k > m and nodes[:m] == vn:                  # the usual grow: append free nodes (checked when taken)
        added, removed = nodes[m:], ()
    else:
        new = set(nodes)
        if len(new) != k:
            raise Bad("a node is named twice")
        if k == m and new == set(vn):
            raise Bad("same nodes: nothing to resize")
        old = set(vn)
        added = [x for x in nodes if x not in old]
        missing = self._free.missing(added)
        if missing:
            raise Bad(f"nodes not free: {missing[:8]}")
        removed = [x for x in vn if x not in new]
    done = self.progress(v, now)
    cost = float(self.reconfig_cost(job, v.size, k))
    if cost < 0:
        raise Bad(f"negative reconfiguration cost {cost}")
    if added:
        self._owner_for = job.id
        self._take(added, released)
        nodes = self._free.own(nodes)
    if removed:
        self._give_back(removed, released)
    since = now + cost
    new_view = RunningJob(job, nodes, k, v.start, since, done,
                          since + (1.0 - done) * job.estimate * self.speedup(job, k), v.resizes + 1,
                          None if self.mtct is None else self.mtct(job, k))
    self._unlist(v)
    self._list(new_view)
    effects.append(("resize", v, new_view, cost))

def interrupt(self: Ledger, d: Interrupt, now: float, effects: list[Effect], released: set[NodeId]) -> None:
    v = self.running.get(d.job_id)
    if v is None:
        raise Bad("job is not running")
    self.requeue(v, int(d.priority), released)
    effects.append(("interrupt", v, int(d.priority)))

def reserve(self: Ledger, d: Reserve, now: float, effects: list[Effect], released: set[NodeId]) -> None:
    job = self.queued.get(d.job_id)
    if job is None:
        raise Bad(f"job {d.job_id} is not queued")
    if d.start < now:
        raise Bad("reservation in the past")
    if not job.min_procs <= d.size <= job.max_procs:
        raise Bad(f"reserved size {d.size} outside {job.min_procs}..{job.max_procs}")
    self.reservations[d.job_id] = d

def wake(self: Ledger, d: Wake, now: float, effects: list[Effect], released: set[NodeId]) -> None:
    if not d.at > now:
        raise Bad("a wake-up must be in the future")
    effects.append(("wake", float(d.at)))

def remember(self: Ledger, d: Remember, now: float, effects: list[Effect], released: set[NodeId]) -> None:
    self.memo = d.value


def decline(self: Ledger, d: Decline, now: float, effects: list[Effect], released: set[NodeId]) -> None:
    if d.job_id not in self.requests:
        raise Bad(f"job {d.job_id} has no outstanding request")
    del self.requests[d.job_id]
    effects.append(("decline", d.job_id, str(d.reason)[:300]))


def not_a_decision(self: Ledger, d: Any, *_: Any) -> None:
    """The handler of anything that is not a decision type."""
    raise Bad("not a decision")


DISPATCH: dict[type, Callable[..., None]] = {
    StartJob: start,
    ResizeJob: resize,
    Interrupt: interrupt,
    Reserve: reserve,
    Wake: wake,
    Remember: remember,
    Decline: decline,
}
"""One handler per decision type."""
