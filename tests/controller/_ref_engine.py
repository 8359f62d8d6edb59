"""A frozen copy of the simulator as it was before its cost was made independent of the machine size (the
Ledger of free-node lists and sets, and the event engine over it), kept only as the reference that the new
engine must match schedule for schedule (tests/controller/test_sim_scale.py). Not used by the package.

Trimmed from controller/sched/_ledger.py and controller/sim/_engine.py at that time: the live controller's parts
(dirty hosts, busy jobs, revert/unstart/withhold/clean/restore) are left out.
"""

from __future__ import annotations

import heapq
import logging
import math
import sys
import time
from array import array
from bisect import bisect_left, insort
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from heapq import heappush
from types import MappingProxyType
from typing import Any, NamedTuple, TypeAlias

import numpy as np

from malleable.controller.sched._model import (
    FAILED_PRIORITY,
    Interrupt,
    Job,
    JobKind,
    NodeId,
    Policy,
    QueueView,
    Remember,
    Reserve,
    ResizeJob,
    RunningJob,
    Snapshot,
    StartJob,
    Wake,
)
from malleable.controller.sched._speedup import MtctModel, ReconfigCost, SpeedupModel, amdahl, no_reconfig_cost
from malleable.controller.sim._workload import Workload
from malleable.errors import PolicyError, SimulationError

__all__ = ["RefSimulator", "ref_simulate"]

Progress: TypeAlias = Callable[[RunningJob, float], float]
"""``progress(view, now)``: the fraction of the job's work done at ``now`` (in [0, 1])."""

Effect: TypeAlias = tuple[Any, ...]
"""What an applied decision did, for the caller: ``("start", view, factor)``, ``("resize", old view, new view,
cost)``, ``("interrupt", old view, priority)`` or ``("wake", time)``. ``factor`` is the run-time factor of the
start size (1.0 at the requested size), ``cost`` the reconfiguration seconds."""

Rejected: TypeAlias = tuple[Any, str]
"""A decision that was not applied and why (lenient mode only)."""

def elapsed_progress(speedup: SpeedupModel) -> Progress:
    """Progress estimated from the elapsed share of the user's estimate at the current size (no reports)."""

    def progress(v: RunningJob, now: float) -> float:
        full = v.job.estimate * speedup(v.job, v.size)
        done = v.progress + (max(0.0, now - v.since) / full if full > 0 else 1.0)
        return min(done, 1.0)

    return progress


class Ledger:
    """Allocation state and decision path shared by the simulator and the live controller.

    Mutated only through its methods; the views it hands out (:class:`RunningJob`, snapshots) are frozen and
    replaced, never changed. Invariants: every node is exactly one of free, held by one running job, or down;
    a queued job is not running; the running list is sorted by ``(end_estimate, order of start/resize)``.

    Args:
        nodes: the machine's node ids, in allocation order (free ones are handed out first-come).
        speedup: run-time factor of a job on another size than requested.
        reconfig_cost: seconds without progress after a resize.
        mtct: ``mtct(job, size)`` shown in the views (simulated MTCT), or None (views carry what
            :meth:`annotate` sets).
        progress: fraction of work done at a resize (default: elapsed share of the estimate).
        order: ``"release"`` or ``"pool"`` (module docstring).
    """

    def __init__(self, nodes: Sequence[NodeId], *, speedup: SpeedupModel = amdahl,
                 reconfig_cost: ReconfigCost = no_reconfig_cost, mtct: MtctModel | None = None,
                 progress: Progress | None = None, order: str = "release") -> None:
        self.nodes: tuple[NodeId, ...] = tuple(nodes)
        if len(set(self.nodes)) != len(self.nodes):
            raise ValueError("node ids must be distinct")
        if order not in ("release", "pool"):
            raise ValueError(f"order must be 'release' or 'pool', got {order!r}")
        self._rank: dict[NodeId, int] | None = (
            {x: i for i, x in enumerate(self.nodes)} if order == "pool" else None)
        self.speedup = speedup
        self.reconfig_cost = reconfig_cost
        self.mtct = mtct
        self.progress: Progress = progress or elapsed_progress(speedup)
        self.free: list[NodeId] = list(self.nodes)
        self.free_set: set[NodeId] = set(self.nodes)
        self.queue: list[Job] = []
        self.queued: dict[int, Job] = {}
        self.running: dict[int, RunningJob] = {}
        self._rkeys: list[tuple[float, int]] = []
        self._rviews: list[RunningJob] = []
        self._key: dict[int, tuple[float, int]] = {}
        self._seq = 0
        self.reservations: dict[int, Reserve] = {}
        self.memo: Any = None
        self.down: dict[NodeId, float] = {}
        self.owner: dict[NodeId, int] = {}
        self.dirty: set[NodeId] = set()
        self.busy: dict[int, str] = {}
        self.track_owner = False      # keep ``owner`` (node -> job): needed for node failures and live
        self.dirty_release = False    # live: released nodes stay dirty until checked clean
        self._owner_for = 0
        self.counts: dict[str, int] = dict.fromkeys(
            ("StartJob", "ResizeJob", "Reserve", "Wake", "Remember", "Interrupt"), 0)
        """Applied decisions by type name."""
        self._res = MappingProxyType(self.reservations)
        self._free_t: tuple[NodeId, ...] | None = None
        self._run_t: tuple[RunningJob, ...] | None = None

    # -- the queue ------------------------------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        """Queue a newly submitted job (at the tail of its priority class).

        Raises:
            PolicyError: the job id is already queued or running.
        """
        jid = job.id
        if jid in self.queued or jid in self.running:
            raise PolicyError(f"job id {jid} submitted while already in the system")
        self.queued[jid] = job
        q = self.queue
        if not q or job.priority <= q[-1].priority:
            q.append(job)
        else:
            self._insert(job)

    def _insert(self, job: Job) -> None:
        q = self.queue
        i = 0
        while i < len(q) and (q[i].priority > job.priority or
                              (q[i].priority == job.priority and q[i].submit <= job.submit)):
            i += 1
        q.insert(i, job)

    def dequeue(self, job_id: int) -> Job:
        """Remove a queued job (cancelled before it started, or held back until its old processes are gone)."""
        job = self.queued.pop(job_id)
        self.queue.remove(job)
        self.reservations.pop(job_id, None)
        return job

    def enqueue(self, job: Job) -> None:
        """Put a job back in the queue at its place by ``(-priority, submission)``."""
        self.queued[job.id] = job
        self._insert(job)

    # -- views ----------------------------------------------------------------------------------------------
    def snapshot(self, now: float, changed: bool = True, arrived: int = -1) -> Snapshot:
        """The state as a policy sees it at ``now`` (free excludes dirty nodes)."""
        free_t = self._free_t
        if free_t is None:
            free_t = tuple(self.free) if not self.dirty else tuple(x for x in self.free if x not in self.dirty)
            self._free_t = free_t
        run_t = self._run_t
        if run_t is None:
            run_t = self._run_t = tuple(self._rviews)
        down = tuple(sorted(self.down.items(), key=lambda kv: kv[1])) if self.down else ()
        q = self.queue
        return Snapshot(now, self.nodes, free_t, run_t, QueueView(q), changed,
                        len(q) if arrived < 0 else arrived, self._res, self.memo, down)

    def view(self, job_id: int) -> RunningJob | None:
        """The running job's view, or None."""
        return self.running.get(job_id)

    def _stale(self) -> None:
        self._free_t = None
        self._run_t = None

    # -- the decision path ----------------------------------------------------------------------------------
    def apply(self, decisions: Iterable[Any], now: float, strict: bool = True,
              sink: Callable[[Effect], None] | None = None) -> Applied:
        """Validate and apply one pass's decisions in order.

        Args:
            decisions: what the policy returned.
            now: the pass time.
            strict: raise on the first bad decision (simulator); else reject it and go on (live controller).
            sink: called with each effect as soon as its decision is applied (before the next decision is
                checked), for callers whose own state must follow the ledger's within the pass.

        Returns:
            The effects of the applied decisions, the rejected decisions with their reasons, and the deferred
            ones (a resize of a job that cannot take one now: live only).

        Raises:
            PolicyError: a bad decision, in strict mode (the message names the pass time and the decision).
        """
        effects: list[Effect] = []
        rejected: list[Rejected] = []
        deferred: list[Rejected] = []
        released: set[NodeId] = set()
        n_eff = 0
        counts = self.counts
        if not isinstance(decisions, list):
            decisions = list(decisions)
        if len(decisions) > 1:
            decisions = self._shrinks_first(decisions)
        for d in decisions:
            t = type(d)
            fn = _DISPATCH.get(t, _not_a_decision)
            try:
                fn(self, d, now, effects, released)
                counts[t.__name__] += 1
                if sink is not None and len(effects) > n_eff:
                    sink(effects[-1])
                    n_eff = len(effects)
            except _Busy as e:
                deferred.append((d, str(e)))
            except _Bad as e:
                if strict:
                    raise PolicyError(f"t={now:g}: {d!r}: {e}") from None
                rejected.append((d, str(e)))
        if released and self.dirty_release:
            self._stale()
        return Applied(effects, rejected, deferred)

    def _shrinks_first(self, decisions: list[Any]) -> list[Any]:
        running = self.running
        shrinks = [d for d in decisions if type(d) is ResizeJob and d.job_id in running
                   and len(d.nodes) < running[d.job_id].size]
        if not shrinks or decisions[:len(shrinks)] == shrinks:
            return decisions
        ids = {id(d) for d in shrinks}
        return shrinks + [d for d in decisions if id(d) not in ids]

    def _take(self, nodes: tuple, released: set[NodeId]) -> None:
        """Remove ``nodes`` from the free list (they must be free, distinct, and clean unless released now)."""
        k = len(nodes)
        free = self.free
        dirty = self.dirty
        if free[:k] == list(nodes) and not dirty:
            del free[:k]
        else:
            fs = self.free_set
            if not fs.issuperset(nodes):
                raise _Bad(f"nodes not free: {[x for x in nodes if x not in fs][:8]}")
            if len(set(nodes)) != k:
                raise _Bad("a node is named twice")
            if dirty:
                bad = [x for x in nodes if x in dirty and x not in released]
                if bad:
                    raise _Bad(f"nodes not checked clean yet: {bad[:8]}")
            drop = set(nodes)
            free[:] = [x for x in free if x not in drop]
        self.free_set.difference_update(nodes)
        if self.track_owner:
            jid = self._owner_for
            for x in nodes:
                self.owner[x] = jid

    def _give_back(self, nodes: Iterable[NodeId], released: set[NodeId] | None, dirty: bool = True) -> None:
        """Nodes a job no longer holds become free (dirty in the live controller until checked, unless the job
        never ran on them: ``dirty`` False)."""
        if not (self.down or self.track_owner or self.dirty_release or self._rank):
            self.free.extend(nodes)
            self.free_set.update(nodes)
            return
        down = self.down
        for x in nodes:
            if self.track_owner:
                self.owner.pop(x, None)
            if x in down:
                continue
            self._free_one(x)
            if self.dirty_release and dirty:
                self.dirty.add(x)
            if released is not None:
                released.add(x)

    def _start(self, d: StartJob, now: float, effects: list[Effect], released: set[NodeId]) -> None:
        job = self.queued.get(d.job_id)
        if job is None:
            raise _Bad("job is " + ("already running" if d.job_id in self.running else "not queued"))
        if self.busy and job.id in self.busy:
            raise _Busy(f"job {job.id} cannot start now: {self.busy[job.id]}")
        nodes = d.nodes
        if type(nodes) is not tuple:
            raise _Bad("nodes must be a tuple of node ids")
        k = len(nodes)
        if not job.min_procs <= k <= job.max_procs:
            raise _Bad(f"{k} nodes: the job allows {job.min_procs}..{job.max_procs}")
        self._owner_for = job.id
        self._take(nodes, released)
        del self.queued[job.id]
        q = self.queue
        if q[0] is job:
            del q[0]
        else:
            q.remove(job)
        if self.reservations:
            self.reservations.pop(job.id, None)
        f = 1.0 if k == job.procs else self.speedup(job, k)
        view = RunningJob(job, nodes, k, now, now, 0.0, now + job.estimate * f if k != job.procs else
                          now + job.estimate, 0, None if self.mtct is None else self.mtct(job, k))
        self._list(view)
        effects.append(("start", view, f))

    def _resize(self, d: ResizeJob, now: float, effects: list[Effect], released: set[NodeId]) -> None:
        v = self.running.get(d.job_id)
        if v is None:
            raise _Bad("job is not running")
        job = v.job
        if job.kind is not JobKind.MALLEABLE:
            raise _Bad(f"job {job.id} is {job.kind.value}, not malleable")
        why = self.busy.get(job.id) if self.busy else None
        if why:
            raise _Busy(f"job {job.id} cannot be resized now: {why}")
        nodes = d.nodes
        k = len(nodes)
        if type(nodes) is not tuple or not job.min_procs <= k <= job.max_procs:
            raise _Bad(f"size {k} outside {job.min_procs}..{job.max_procs}")
        vn = v.nodes
        m = len(vn)
        fs = self.free_set
        if k < m and vn[:k] == nodes:                    # the usual shrink: keep a prefix
            added: Sequence[NodeId] = ()
            removed: Sequence[NodeId] = vn[k:]
        elif k > m and nodes[:m] == vn and fs.issuperset(nodes[m:]) and len(set(nodes[m:])) == k - m:
            added, removed = nodes[m:], ()               # the usual grow: append free nodes
        else:
            new = set(nodes)
            if len(new) != k:
                raise _Bad("a node is named twice")
            if k == m and new == set(vn):
                raise _Bad("same nodes: nothing to resize")
            old = set(vn)
            added = [x for x in nodes if x not in old]
            if not fs.issuperset(added):
                raise _Bad(f"nodes not free: {[x for x in added if x not in fs][:8]}")
            removed = [x for x in vn if x not in new]
        if added and self.dirty:
            bad = [x for x in added if x in self.dirty and x not in released]
            if bad:
                raise _Bad(f"nodes not checked clean yet: {bad[:8]}")
        done = self.progress(v, now)
        cost = float(self.reconfig_cost(job, v.size, k))
        if cost < 0:
            raise _Bad(f"negative reconfiguration cost {cost}")
        if added:
            self._owner_for = job.id
            self._take(tuple(added), released)
        if removed:
            self._give_back(removed, released)
        since = now + cost
        new_view = RunningJob(job, nodes, k, v.start, since, done,
                              since + (1.0 - done) * job.estimate * self.speedup(job, k), v.resizes + 1,
                              None if self.mtct is None else self.mtct(job, k))
        self._unlist(v)
        self._list(new_view)
        effects.append(("resize", v, new_view, cost))

    def _interrupt(self, d: Interrupt, now: float, effects: list[Effect], released: set[NodeId]) -> None:
        v = self.running.get(d.job_id)
        if v is None:
            raise _Bad("job is not running")
        self.requeue(v, int(d.priority), released)
        effects.append(("interrupt", v, int(d.priority)))

    def _reserve(self, d: Reserve, now: float, effects: list[Effect], released: set[NodeId]) -> None:
        job = self.queued.get(d.job_id)
        if job is None:
            raise _Bad(f"job {d.job_id} is not queued")
        if d.start < now:
            raise _Bad("reservation in the past")
        if not job.min_procs <= d.size <= job.max_procs:
            raise _Bad(f"reserved size {d.size} outside {job.min_procs}..{job.max_procs}")
        self.reservations[d.job_id] = d

    def _wake(self, d: Wake, now: float, effects: list[Effect], released: set[NodeId]) -> None:
        if not d.at > now:
            raise _Bad("a wake-up must be in the future")
        effects.append(("wake", float(d.at)))

    def _remember(self, d: Remember, now: float, effects: list[Effect], released: set[NodeId]) -> None:
        self.memo = d.value

    # -- the running list -----------------------------------------------------------------------------------
    def _list(self, view: RunningJob) -> None:
        self._seq += 1
        key = (view.end_estimate, self._seq)
        self.running[view.job.id] = view
        self._key[view.job.id] = key
        rkeys = self._rkeys
        if not rkeys or rkeys[-1] < key:
            rkeys.append(key)
            self._rviews.append(view)
        else:
            j = bisect_left(rkeys, key)
            rkeys.insert(j, key)
            self._rviews.insert(j, view)
        self._stale()

    def _unlist(self, view: RunningJob) -> None:
        jid = view.job.id
        key = self._key.pop(jid)
        del self.running[jid]
        j = bisect_left(self._rkeys, key)
        if j >= len(self._rkeys) or self._rkeys[j] != key:
            raise PolicyError(f"running list lost job {jid}")
        del self._rkeys[j]
        del self._rviews[j]
        self._stale()

    def replace_view(self, view: RunningJob) -> None:
        """Put a new view of a running job in place of the old one (after a report); with the same estimated end
        it keeps its place among jobs ending at the same time."""
        jid = view.job.id
        old = self.running[jid]
        if old.end_estimate != view.end_estimate:
            self._unlist(old)
            self._list(view)
            return
        j = bisect_left(self._rkeys, self._key[jid])
        self._rviews[j] = view
        self.running[jid] = view
        self._stale()

    def annotate(self, job_id: int, mtct: float | None) -> None:
        """Show a running job's last reported MTCT in its view."""
        v = self.running.get(job_id)
        if v is not None and v.mtct != mtct:
            self.replace_view(RunningJob(v.job, v.nodes, v.size, v.start, v.since, v.progress, v.end_estimate,
                                         v.resizes, mtct))

    # -- what happens to running jobs ----------------------------------------------------------------------
    def finish(self, job_id: int) -> RunningJob:
        """The job ended: its nodes are given back. Returns its last view."""
        v = self.running[job_id]
        self._unlist(v)
        self._give_back(v.nodes, None)
        return v

    def requeue(self, v: RunningJob, priority: int, released: set[NodeId] | None = None) -> Job:
        """Stop a running job and put it back in the queue with ``priority`` (a failure or an interruption):
        its nodes are given back (down ones stay down). Returns the queued record."""
        job = v.job
        self._unlist(v)
        self._give_back(v.nodes, released)
        again = Job(job.id, job.submit, job.procs, job.estimate, job.kind, job.min_procs, job.max_procs,
                    job.serial, job.rho, priority, job.constraint)
        self.queued[job.id] = again
        self._insert(again)
        return again

    def node_down(self, x: NodeId, until: float) -> int | None:
        """Node ``x`` failed until ``until`` (``inf``: unknown). Returns the running job holding it (which the
        caller interrupts with :meth:`requeue`), or None."""
        if x in self.down:
            self.down[x] = max(self.down[x], until)
            return None
        self.down[x] = until
        self._stale()
        if x in self.free_set:
            self.free.remove(x)
            self.free_set.discard(x)
            self.dirty.discard(x)
            return None
        jid = self.owner.get(x)
        if jid is None:
            raise PolicyError(f"node {x!r} is neither free nor held")
        return jid

    def node_up(self, x: NodeId) -> None:
        """Node ``x`` is back: free again."""
        if self.down.pop(x, None) is not None:
            self._free_one(x)
            self._stale()

    def _free_one(self, x: NodeId) -> None:
        if self._rank is None:
            self.free.append(x)
        else:
            insort(self.free, x, key=self._rank.__getitem__)
        self.free_set.add(x)


class _Bad(Exception):
    """A decision that breaks an invariant (internal: turned into PolicyError or a rejection)."""


class _Busy(_Bad):
    """A resize of a job that cannot take one now (live only: deferred, not rejected)."""


class Applied(NamedTuple):
    """What :meth:`Ledger.apply` did with one pass's decisions."""

    effects: list[Effect]
    rejected: list[Rejected]
    deferred: list[Rejected]


def _not_a_decision(self: Ledger, d: Any, *_: Any) -> None:
    raise _Bad("not a decision")


_DISPATCH: dict[type, Callable[..., None]] = {
    StartJob: Ledger._start,
    ResizeJob: Ledger._resize,
    Interrupt: Ledger._interrupt,
    Reserve: Ledger._reserve,
    Wake: Ledger._wake,
    Remember: Ledger._remember,
}
"""One handler per decision type."""



log = logging.getLogger(__name__)

_END, _WAKE, _FAIL, _REPAIR = 0, 2, 3, 4
_INF = math.inf


class _Run:
    """Engine-private state of a running job (mutable; the policy sees the ledger's frozen view)."""

    __slots__ = ("area", "end", "evseq", "row", "seg")

    def __init__(self, row: int, end: float, evseq: int, seg: float) -> None:
        self.row = row
        self.end = end          # real end time (hidden from policies)
        self.evseq = evseq      # seq of the job's live END event (older ones are stale)
        self.seg = seg          # when the current size began (for the node-seconds area)
        self.area = 0.0         # node-seconds used before ``seg``


@dataclass(slots=True)
class SimResult:
    """Outcome of one simulation.

    Attributes:
        workload: the replayed workload (rows align with the arrays below).
        policy: the policy's name.
        start, end: per-job first start and end times (s).
        size: per-job size at start.
        area: per-job node-seconds actually held (size x time, summed over resizes).
        resizes: per-job number of resizes.
        sim_seconds: wall-clock seconds spent in the event loop.
        passes: number of scheduling passes (policy calls).
        decisions: number of decisions applied, by type name.
        restarts: per-job number of interruptions (failures, Interrupt decisions), or None if none could occur.
        lost: per-job node-seconds thrown away by interruptions (included in ``area``), or None likewise.
    """

    workload: Workload
    policy: str
    start: np.ndarray
    end: np.ndarray
    size: np.ndarray
    area: np.ndarray
    resizes: np.ndarray
    sim_seconds: float
    passes: int
    decisions: dict[str, int] = field(default_factory=dict)
    restarts: np.ndarray | None = None
    lost: np.ndarray | None = None

    @property
    def wait(self) -> np.ndarray:
        """Per-job wait (start - submit)."""
        return self.start - self.workload.submit


class RefSimulator:
    """Replays ``workload`` under ``policy``; create one per run.

    The simulator is the only mutator of its state; policies see frozen snapshots and return decisions, which
    the ledger validates (the job is queued or running, node ids exist and are free, sizes within the job's
    bounds, no job started twice) before applying them. A bad decision raises :class:`PolicyError` naming the
    pass time and the decision.

    Args:
        workload: the jobs (sorted by submit time).
        policy: ``decide(snapshot, now) -> list[Decision]``.
        name: the policy's name in results (default: the function's name).
        speedup: run-time factor of a job on another size (default Amdahl with the job's serial fraction).
        reconfig_cost: seconds without progress after a resize (default none).
        node_ids: node ids of the machine (default ``range(workload.machine)``).
        hints: pass incremental hints (``Snapshot.changed``/``arrived``) to the policy; False always sends
            ``changed=True`` (the policy then recomputes everything; results must be identical).
        progress: called with the number of submitted jobs every 8192 submissions.
        failures: ``(time, node id, downtime)`` node failures to inject (module docstring).
        mtct: ``mtct(job, size)``, the MTCT a running job reports (``RunningJob.mtct``); default none.
        order: how free nodes are handed out: ``"release"`` (in the order they were freed) or ``"pool"`` (node
            order, lowest first, as the live controller does); start and end times do not depend on it.
        record: a list that receives what happened, in order, for replaying the run elsewhere (the live core's
            equivalence test): ``("submit", t, job)``, ``("end", t, job id)``, ``("down", t, node, until)``,
            ``("up", t, node)``, ``("pass", t, decisions, effects)``.
    """

    def __init__(self, workload: Workload, policy: Policy, *, name: str | None = None,
                 speedup: SpeedupModel = amdahl, reconfig_cost: ReconfigCost = no_reconfig_cost,
                 node_ids: Sequence[Hashable] | None = None, hints: bool = True,
                 progress: Callable[[int], None] | None = None,
                 failures: Sequence[tuple[float, Hashable, float]] = (),
                 mtct: MtctModel | None = None, record: list[tuple[Any, ...]] | None = None,
                 order: str = "release") -> None:
        self.workload = workload
        self.policy = policy
        self.name = name or getattr(policy, "__name__", "policy")
        self.speedup = speedup
        self.reconfig_cost = reconfig_cost
        nodes = tuple(range(workload.machine)) if node_ids is None else tuple(node_ids)
        if len(nodes) != workload.machine or len(set(nodes)) != len(nodes):
            raise SimulationError(f"need {workload.machine} distinct node ids, got {len(nodes)}")
        self.nodes = nodes
        self.hints = hints
        self.progress = progress
        self.record = record
        n = len(workload)
        self._start = array("d", [math.nan]) * n
        self._end = array("d", [math.nan]) * n
        self._size = array("l", [0]) * n
        self._area = array("d", [0.0]) * n
        self._resizes = array("l", [0]) * n
        self._runs: list[float] = workload.run.tolist()
        self._qrow: dict[int, int] = {}            # queued job id -> workload row
        self._running: dict[int, _Run] = {}
        self._heap: list[tuple[float, int, int, int]] = []
        self._seq = 0
        self._now = 0.0
        self._changed = False
        self._done = False
        self.mtct = mtct
        self.ledger = Ledger(nodes, speedup=speedup, reconfig_cost=reconfig_cost, mtct=mtct,
                             progress=self._real_progress, order=order)
        self._failures = sorted((float(t), x, float(d)) for t, x, d in failures)
        for t, x, d in self._failures:
            if x not in self.ledger.free_set or not (t >= 0 and d > 0):
                raise SimulationError(f"bad failure ({t}, {x!r}, {d}): unknown node or non-positive downtime")
        self.ledger.track_owner = bool(self._failures)
        self._restarts = array("l", [0]) * n if self._failures else None
        self._lost = array("d", [0.0]) * n if self._failures else None
        for k, (t, _, _) in enumerate(self._failures):
            self._seq += 1
            heapq.heappush(self._heap, (t, _FAIL, self._seq, k))

    def _real_progress(self, v: RunningJob, now: float) -> float:
        """Work done at ``now`` from the hidden real run time (none while a reconfiguration is being paid)."""
        run_old = self._runs[self._running[v.job.id].row] * self.speedup(v.job, v.size)
        done = v.progress + (max(0.0, now - v.since) / run_old if run_old > 0 else 1.0)
        return min(done, 1.0)

    # -- the event loop -------------------------------------------------------------------------------------

    def run(self) -> SimResult:
        """Run to completion and return the result.

        Raises:
            PolicyError: the policy returned an invalid decision.
            SimulationError: the run was already done, or jobs are left queued with nothing running or pending.
        """
        if self._done:
            raise SimulationError("a Simulator runs once; create a new one")
        self._done = True
        w = self.workload
        subs = w.submit.tolist()
        n = len(subs)
        heap = self._heap
        led = self.ledger
        queue = led.queue
        queued = led.queued
        qrow = self._qrow
        running = self._running
        make_job = self._job_factory()
        policy = self.policy
        hints = self.hints
        progress = self.progress
        record = self.record
        apply = led.apply
        effect = self._effect
        finish = self._finish
        heappop = heapq.heappop
        getrefcount = sys.getrefcount
        passes = 0
        i = 0
        changed = True
        t0 = time.perf_counter()
        while True:
            ts = subs[i] if i < n else _INF
            th = heap[0][0] if heap else _INF
            now = ts if ts < th else th
            if now == _INF:
                break
            self._now = now
            event = ts <= now
            while heap and heap[0][0] <= now:
                _, prio, seq, jid = heappop(heap)
                if prio == _END:
                    r = running.get(jid)
                    if r is not None and r.evseq == seq:
                        finish(jid, r, now)
                        changed = event = True
                elif prio == _WAKE:
                    event = True
                else:
                    self._fault(prio, jid, now)
                    changed = event = True
            if not event:
                continue        # only stale end entries of resized jobs: no pass
            first_new = len(queue)
            while i < n and subs[i] <= now:
                job = make_job(i)
                jid = job.id
                if jid in queued or jid in running:
                    raise SimulationError(f"job id {jid} submitted at {now} while already in the system")
                qrow[jid] = i
                led.submit(job)
                if record is not None:
                    record.append(("submit", now, job))
                i += 1
                if progress is not None and not i & 8191:
                    progress(i)
            snap = led.snapshot(now, changed, len(queue) - first_new) if hints else led.snapshot(now)
            qview = snap.queue
            passes += 1
            decisions = policy(snap, now)
            if getrefcount(snap) > 2 or getrefcount(qview) > 3:
                qview.freeze()          # the policy kept the snapshot: it must not see later changes
            del snap, qview
            changed = False
            if decisions:
                self._changed = False
                effects = apply(decisions, now, True, effect).effects
                changed = self._changed
                if record is not None:
                    record.append(("pass", now, list(decisions), effects))
            elif record is not None:
                record.append(("pass", now, [], []))
        elapsed = time.perf_counter() - t0
        if progress is not None:
            progress(n)
        if queue:
            raise SimulationError(f"{self.name}: {len(queue)} jobs left queued with no running job or pending "
                                  f"event (first: job {queue[0].id}, {queue[0].procs} nodes)")
        log.info("%s: %d jobs simulated in %.3f s (%d passes)", self.name, n, elapsed, passes)
        restarts = lost = None
        if self._restarts is not None:
            restarts = np.array(self._restarts, dtype=np.int64)
            lost = np.frombuffer(self._lost, dtype=np.float64).copy()
        return SimResult(w, self.name, np.frombuffer(self._start, dtype=np.float64).copy(),
                         np.frombuffer(self._end, dtype=np.float64).copy(),
                         np.array(self._size, dtype=np.int64), np.frombuffer(self._area, dtype=np.float64).copy(),
                         np.array(self._resizes, dtype=np.int64), elapsed, passes, dict(led.counts),
                         restarts, lost)

    def _job_factory(self) -> Callable[[int], Job]:
        w = self.workload
        ids, sub, procs, est = w.ids.tolist(), w.submit.tolist(), w.procs.tolist(), w.estimate.tolist()
        if w.kind is None:
            rigid = JobKind.RIGID

            def make(i: int) -> Job:
                p = procs[i]
                return Job(ids[i], sub[i], p, est[i], rigid, p, p, 0.0)
            return make
        return w.job

    # -- what the ledger's effects mean here ----------------------------------------------------------------

    def _effect(self, e: Effect) -> None:
        """Carry out one applied decision's effect (``_changed``: a running job changed, not only starts)."""
        kind = e[0]
        now = self._now
        if kind == "start":
            self._started(e[1], e[2], now)
        elif kind == "resize":
            self._resized(e[1], e[2], now)
            self._changed = True
        elif kind == "interrupt":
            self._interrupted(e[1], now)
            self._changed = True
        else:
            self._seq += 1
            heappush(self._heap, (e[1], _WAKE, self._seq, -1))

    def _started(self, view: RunningJob, f: float, now: float) -> None:
        jid = view.job.id
        row = self._qrow.pop(jid)
        self._seq += 1
        seq = self._seq
        end = now + self._runs[row] * f
        r = _Run(row, end, seq, now)
        self._running[jid] = r
        heappush(self._heap, (end, _END, seq, jid))
        if self._restarts is not None and self._restarts[row]:
            r.area = self._area[row]          # a restart: keep the first start and the earlier runs' area
        else:
            self._start[row] = now
        self._size[row] = view.size

    def _resized(self, old: RunningJob, new: RunningJob, now: float) -> None:
        job = new.job
        r = self._running[job.id]
        r.area += old.size * (now - r.seg)
        r.seg = now
        r.end = new.since + (1.0 - new.progress) * self._runs[r.row] * self.speedup(job, new.size)
        self._seq += 1
        r.evseq = self._seq
        heappush(self._heap, (r.end, _END, self._seq, job.id))
        self._resizes[r.row] += 1
        log.debug("t=%g: job %d resized %d -> %d, end %g", now, job.id, old.size, new.size, r.end)

    def _finish(self, jid: int, r: _Run, now: float) -> None:
        del self._running[jid]
        v = self.ledger.finish(jid)
        if self.record is not None:
            self.record.append(("end", now, jid))
        self._end[r.row] = now
        self._area[r.row] = r.area + v.size * (now - r.seg)

    # -- failures and interruptions ---------------------------------------------------------------------------

    def _fault(self, prio: int, k: int, now: float) -> None:
        """A node failure (``_FAIL``) or repair (``_REPAIR``) event for ``self._failures[k]``."""
        _, x, downtime = self._failures[k]
        led = self.ledger
        if prio == _REPAIR:
            if led.down.get(x) == now:
                led.node_up(x)
                if self.record is not None:
                    self.record.append(("up", now, x))
                log.debug("t=%g: node %r repaired", now, x)
            return
        back = now + downtime
        if x in led.down:                         # already down: the later repair time wins
            back = max(back, led.down[x])
        if self.record is not None:
            self.record.append(("down", now, x, back))
        jid = led.node_down(x, back)
        if jid is not None:
            v = led.running[jid]
            led.requeue(v, FAILED_PRIORITY)
            self._interrupted(v, now)
            log.debug("t=%g: node %r failed, job %d interrupted", now, x, jid)
        self._seq += 1
        heappush(self._heap, (back, _REPAIR, self._seq, k))

    def _interrupted(self, v: RunningJob, now: float) -> None:
        """Engine bookkeeping of a job the ledger stopped and re-queued (its area so far counts as lost)."""
        r = self._running.pop(v.job.id)
        if self._restarts is None:
            n = len(self.workload)
            self._restarts = array("l", [0]) * n
            self._lost = array("d", [0.0]) * n
        assert self._lost is not None
        held = r.area + v.size * (now - r.seg)
        self._lost[r.row] += held - self._area[r.row]
        self._area[r.row] = held
        self._restarts[r.row] += 1
        self._qrow[v.job.id] = r.row


def ref_simulate(workload: Workload, policy: Policy | str, **kwargs: object) -> SimResult:
    """Run ``workload`` under ``policy`` (a function or a registered name) and return the result.

    Args:
        workload: the jobs.
        policy: a policy function or a name from :data:`malleable.controller.POLICIES`.
        **kwargs: options of :class:`Simulator`.

    Raises:
        PolicyError: an unknown policy name or an invalid decision.
    """
    if isinstance(policy, str):
        from malleable.controller.sched import get_policy
        kwargs.setdefault("name", policy)
        policy = get_policy(policy)
    return RefSimulator(workload, policy, **kwargs).run()  # type: ignore[arg-type]
