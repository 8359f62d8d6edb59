"""The discrete-event simulator: replays a workload under a policy and records every job's start and end.

Events are ordered by ``(time, priority, seq)``: at equal times job ends (priority 0) are processed before
submissions (priority 1) and policy wake-ups (priority 2), then the policy runs once. Submissions come from the
workload, already sorted by submit time (a stream merged with the heap of ends and wake-ups); ``seq`` keeps
the order of equal entries deterministic.

Jobs are first-class records that can change size while they run: the engine tracks the fraction of work done
under a speedup model, so a resize recomputes the end (and the estimated end), after a reconfiguration cost.

Failures (seed 000 §3.1): ``failures=[(t, node, downtime), ...]`` takes ``node`` down at ``t`` for ``downtime``
seconds. A job holding it is interrupted: its other nodes are freed at once and it is re-queued, to restart
from scratch (no checkpoints), with priority :data:`FAILED_PRIORITY`; an :class:`Interrupt` decision does the
same to a victim with the priority it names. The queue stays sorted by ``(-priority, submission)``.
"""

from __future__ import annotations

import heapq
import logging
import math
import sys
import time
from array import array
from bisect import bisect_left
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from heapq import heappush
from types import MappingProxyType

import numpy as np

from malleable.controller.sched._model import (
    FAILED_PRIORITY,
    Interrupt,
    Job,
    JobKind,
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
from malleable.errors import PolicyError, SimulationError

from ._workload import Workload

__all__ = ["SimResult", "Simulator", "simulate"]

log = logging.getLogger(__name__)

_END, _WAKE, _FAIL, _REPAIR = 0, 2, 3, 4
_INF = math.inf


class _Run:
    """Engine-private state of a running job (mutable; the policy sees the frozen ``view``)."""

    __slots__ = ("area", "end", "key", "row", "seg", "view")

    def __init__(self, row: int, view: RunningJob, end: float, key: tuple[float, int], seg: float) -> None:
        self.row = row
        self.view = view
        self.end = end          # real end time (hidden from policies)
        self.key = key          # (end_estimate, seq): position in the sorted running list, seq = end event id
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


class Simulator:
    """Replays ``workload`` under ``policy``; create one per run.

    The simulator is the only mutator of its state; policies see frozen snapshots and return decisions, which
    are validated (the job is queued or running, node ids exist and are free, sizes within the job's bounds,
    no job started twice) before being applied. A bad decision raises :class:`PolicyError` naming the pass time
    and the decision.

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
    """

    def __init__(self, workload: Workload, policy: Policy, *, name: str | None = None,
                 speedup: SpeedupModel = amdahl, reconfig_cost: ReconfigCost = no_reconfig_cost,
                 node_ids: Sequence[Hashable] | None = None, hints: bool = True,
                 progress: Callable[[int], None] | None = None,
                 failures: Sequence[tuple[float, Hashable, float]] = (),
                 mtct: MtctModel | None = None) -> None:
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
        n = len(workload)
        self._start = array("d", [math.nan]) * n
        self._end = array("d", [math.nan]) * n
        self._size = array("l", [0]) * n
        self._area = array("d", [0.0]) * n
        self._resizes = array("l", [0]) * n
        self._free: list[Hashable] = list(nodes)
        self._free_set: set[Hashable] = set(nodes)
        self._queue: list[Job] = []
        self._qrow: dict[int, int] = {}            # queued job id -> workload row
        self._qjob: dict[int, Job] = {}            # queued job id -> its record
        self._runs: list[float] = workload.run.tolist()
        self._running: dict[int, _Run] = {}
        self._rkeys: list[tuple[float, int]] = []  # sorted (end_estimate, seq) of running jobs
        self._rviews: list[RunningJob] = []        # running views in the same order
        self._heap: list[tuple[float, int, int, int]] = []
        self._seq = 0
        self._reservations: dict[int, Reserve] = {}
        self._memo: object = None
        self._counts = {"StartJob": 0, "ResizeJob": 0, "Reserve": 0, "Wake": 0, "Remember": 0, "Interrupt": 0}
        self._now = 0.0
        self._done = False
        self.mtct = mtct
        self._failures = sorted((float(t), x, float(d)) for t, x, d in failures)
        for t, x, d in self._failures:
            if x not in self._free_set or not (t >= 0 and d > 0):
                raise SimulationError(f"bad failure ({t}, {x!r}, {d}): unknown node or non-positive downtime")
        self._down: dict[Hashable, float] = {}       # failed node -> repair time
        self._owner: dict[Hashable, int] = {}        # node -> running job id (kept only with failures)
        self._restarts = array("l", [0]) * n if self._failures else None
        self._lost = array("d", [0.0]) * n if self._failures else None
        for k, (t, _, _) in enumerate(self._failures):
            self._seq += 1
            heapq.heappush(self._heap, (t, _FAIL, self._seq, k))

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
        queue = self._queue
        qrow = self._qrow
        qjob = self._qjob
        running = self._running
        make_job = self._job_factory()
        policy = self.policy
        hints = self.hints
        progress = self.progress
        nodes = self.nodes
        finish = self._finish
        apply = self._apply
        proxy = MappingProxyType(self._reservations)
        heappop = heapq.heappop
        getrefcount = sys.getrefcount
        passes = 0
        i = 0
        changed = True
        free_t: tuple[Hashable, ...] = ()
        run_t: tuple[RunningJob, ...] = ()
        stale = True
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
                    if r is not None and r.key[1] == seq:
                        finish(jid, r, now)
                        changed = stale = event = True
                elif prio == _WAKE:
                    event = True
                else:
                    self._fault(prio, jid, now)
                    changed = stale = event = True
            if not event:
                continue        # only stale end entries of resized jobs: no pass
            first_new = len(queue)
            while i < n and subs[i] <= now:
                job = make_job(i)
                jid = job.id
                if jid in qrow or jid in running:
                    raise SimulationError(f"job id {jid} submitted at {now} while already in the system")
                qrow[jid] = i
                qjob[jid] = job
                queue.append(job)
                i += 1
                if progress is not None and not i & 8191:
                    progress(i)
            if stale:
                free_t = tuple(self._free)
                run_t = tuple(self._rviews)
                stale = False
            qview = QueueView(queue)
            down_t = self._down_view() if self._down else ()
            if hints:
                snap = Snapshot(now, nodes, free_t, run_t, qview, changed, len(queue) - first_new, proxy,
                                self._memo, down_t)
            else:
                snap = Snapshot(now, nodes, free_t, run_t, qview, True, len(queue), proxy, self._memo, down_t)
            passes += 1
            decisions = policy(snap, now)
            if getrefcount(snap) > 2 or getrefcount(qview) > 3:
                qview.freeze()          # the policy kept the snapshot: it must not see later changes
            del snap, qview
            changed = False
            if decisions:
                changed = apply(decisions, now)
                stale = True
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
                         np.array(self._resizes, dtype=np.int64), elapsed, passes, dict(self._counts),
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

    # -- applying decisions ---------------------------------------------------------------------------------

    def _apply(self, decisions: list, now: float) -> bool:
        """Validate and apply one pass's decisions in order; returns whether a job was resized."""
        resized = False
        counts = self._counts
        for d in decisions:
            t = type(d)
            if t is StartJob:
                self._start_job(d, now)
                counts["StartJob"] += 1
            elif t is ResizeJob:
                self._resize(d, now)
                counts["ResizeJob"] += 1
                resized = True
            elif t is Reserve:
                if d.job_id not in self._qrow:
                    raise PolicyError(f"t={now:g}: {d!r}: job {d.job_id} is not queued")
                if d.start < now:
                    raise PolicyError(f"t={now:g}: {d!r}: reservation in the past")
                self._reservations[d.job_id] = d
                counts["Reserve"] += 1
            elif t is Wake:
                if not d.at > now:
                    raise PolicyError(f"t={now:g}: {d!r}: a wake-up must be in the future")
                self._seq += 1
                heappush(self._heap, (float(d.at), _WAKE, self._seq, -1))
                counts["Wake"] += 1
            elif t is Remember:
                self._memo = d.value
                counts["Remember"] += 1
            elif t is Interrupt:
                r = self._running.get(d.job_id)
                if r is None:
                    raise PolicyError(f"t={now:g}: {d!r}: job is not running")
                self._interrupt(r, int(d.priority), now)
                counts["Interrupt"] += 1
                resized = True
            else:
                raise PolicyError(f"t={now:g}: not a decision: {d!r}")
        return resized

    def _take_nodes(self, nodes: tuple, now: float, d: object) -> None:
        k = len(nodes)
        free = self._free
        if free[:k] == list(nodes):
            del free[:k]
        else:
            fs = self._free_set
            if not fs.issuperset(nodes):
                bad = [x for x in nodes if x not in fs]
                raise PolicyError(f"t={now:g}: {d!r}: nodes not free: {bad[:8]}")
            if len(set(nodes)) != k:
                raise PolicyError(f"t={now:g}: {d!r}: a node is named twice")
            drop = set(nodes)
            free[:] = [x for x in free if x not in drop]
        self._free_set.difference_update(nodes)

    def _start_job(self, d: StartJob, now: float) -> None:
        row = self._qrow.get(d.job_id)
        if row is None:
            why = "already running" if d.job_id in self._running else "not queued"
            raise PolicyError(f"t={now:g}: StartJob(job_id={d.job_id}): job is {why}")
        nodes = d.nodes
        if type(nodes) is not tuple:
            raise PolicyError(f"t={now:g}: StartJob(job_id={d.job_id}): nodes must be a tuple of node ids")
        k = len(nodes)
        q = self._queue
        job = self._qjob[d.job_id]
        if not job.min_procs <= k <= job.max_procs:
            raise PolicyError(f"t={now:g}: StartJob(job_id={d.job_id}) on {k} nodes: the job allows "
                              f"{job.min_procs}..{job.max_procs}")
        self._take_nodes(nodes, now, d)
        del self._qrow[d.job_id]
        del self._qjob[d.job_id]
        if q[0] is job:
            del q[0]
        else:
            q.remove(job)
        if self._reservations:
            self._reservations.pop(d.job_id, None)
        if k == job.procs:
            run, est = self._runs[row], job.estimate
        else:
            f = self.speedup(job, k)
            run, est = self._runs[row] * f, job.estimate * f
        self._seq += 1
        seq = self._seq
        end = now + run
        view = RunningJob(job, nodes, k, now, now, 0.0, now + est, 0,
                          None if self.mtct is None else self.mtct(job, k))
        r = _Run(row, view, end, (now + est, seq), now)
        self._running[job.id] = r
        if self._failures:
            for x in nodes:
                self._owner[x] = job.id
        if self._restarts is not None and self._restarts[row]:
            r.area = self._area[row]          # a restart: keep the first start and the earlier runs' area
            self._size[row] = k
            self._push_run(r, job, end, seq)
            return
        self._push_run(r, job, end, seq)
        self._start[row] = now
        self._size[row] = k

    def _push_run(self, r: _Run, job: Job, end: float, seq: int) -> None:
        view = r.view
        key = r.key
        rkeys = self._rkeys
        if not rkeys or rkeys[-1] < key:
            rkeys.append(key)
            self._rviews.append(view)
        else:
            j = bisect_left(rkeys, key)
            rkeys.insert(j, key)
            self._rviews.insert(j, view)
        heappush(self._heap, (end, _END, seq, job.id))

    def _unlist(self, r: _Run) -> None:
        j = bisect_left(self._rkeys, r.key)
        if j >= len(self._rkeys) or self._rkeys[j] != r.key:
            raise SimulationError(f"running list lost job {r.view.job.id}")
        del self._rkeys[j]
        del self._rviews[j]

    def _finish(self, jid: int, r: _Run, now: float) -> None:
        del self._running[jid]
        self._unlist(r)
        nodes = r.view.nodes
        self._free.extend(nodes)
        self._free_set.update(nodes)
        if self._failures:
            for x in nodes:
                self._owner.pop(x, None)
        self._end[r.row] = now
        self._area[r.row] = r.area + r.view.size * (now - r.seg)

    def _resize(self, d: ResizeJob, now: float) -> None:
        r = self._running.get(d.job_id)
        if r is None:
            raise PolicyError(f"t={now:g}: {d!r}: job is not running")
        v = r.view
        job = v.job
        if job.kind is not JobKind.MALLEABLE:
            raise PolicyError(f"t={now:g}: {d!r}: job {job.id} is {job.kind.value}, not malleable")
        nodes = d.nodes
        k = len(nodes)
        if type(nodes) is not tuple or not job.min_procs <= k <= job.max_procs:
            raise PolicyError(f"t={now:g}: {d!r}: size {k} outside {job.min_procs}..{job.max_procs}")
        vn = v.nodes
        m = len(vn)
        fs = self._free_set
        if k < m and vn[:k] == nodes:                    # the usual shrink: keep a prefix
            added, removed = (), vn[k:]
        elif k > m and nodes[:m] == vn and fs.issuperset(nodes[m:]) and len(set(nodes[m:])) == k - m:
            added, removed = nodes[m:], ()               # the usual grow: append free nodes
        else:
            new = set(nodes)
            if len(new) != k:
                raise PolicyError(f"t={now:g}: {d!r}: a node is named twice")
            old = set(vn)
            added = [x for x in nodes if x not in old]
            if not fs.issuperset(added):
                raise PolicyError(f"t={now:g}: {d!r}: nodes not free: {[x for x in added if x not in fs]}")
            removed = [x for x in vn if x not in new]
        # work done so far at the old size (none while a previous reconfiguration is still being paid)
        run_old = self._runs[r.row] * self.speedup(job, v.size)
        done = v.progress + (max(0.0, now - v.since) / run_old if run_old > 0 else 1.0)
        done = min(done, 1.0)
        cost = float(self.reconfig_cost(job, v.size, k))
        if cost < 0:
            raise SimulationError(f"negative reconfiguration cost {cost} for job {job.id}")
        f = self.speedup(job, k)
        since = now + cost
        end = since + (1.0 - done) * self._runs[r.row] * f
        est_end = since + (1.0 - done) * job.estimate * f
        if added:
            self._take_nodes(tuple(added), now, d)
        if removed:
            self._free.extend(removed)
            self._free_set.update(removed)
        self._unlist(r)
        r.area += v.size * (now - r.seg)
        r.seg = now
        self._seq += 1
        if self._failures:
            for x in removed:
                self._owner.pop(x, None)
            for x in added:
                self._owner[x] = job.id
        view = RunningJob(job, nodes, k, v.start, since, done, est_end, v.resizes + 1,
                          None if self.mtct is None else self.mtct(job, k))
        r.view, r.end, r.key = view, end, (est_end, self._seq)
        j = bisect_left(self._rkeys, r.key)
        self._rkeys.insert(j, r.key)
        self._rviews.insert(j, view)
        heappush(self._heap, (end, _END, self._seq, job.id))
        self._resizes[r.row] += 1
        log.debug("t=%g: job %d resized %d -> %d, end %g", now, job.id, v.size, k, end)


    # -- failures and interruptions ---------------------------------------------------------------------------

    def _down_view(self) -> tuple[tuple[Hashable, float], ...]:
        return tuple(sorted(self._down.items(), key=lambda kv: kv[1]))

    def _fault(self, prio: int, k: int, now: float) -> None:
        """A node failure (``_FAIL``) or repair (``_REPAIR``) event for ``self._failures[k]``."""
        _, x, downtime = self._failures[k]
        if prio == _REPAIR:
            if self._down.get(x) == now:
                del self._down[x]
                self._free.append(x)
                self._free_set.add(x)
                log.debug("t=%g: node %r repaired", now, x)
            return
        back = now + downtime
        if x in self._down:                       # already down: the later repair time wins
            back = max(back, self._down[x])
        elif x in self._free_set:
            self._free.remove(x)
            self._free_set.discard(x)
        else:
            jid = self._owner.get(x)
            if jid is None or jid not in self._running:
                raise SimulationError(f"node {x!r} is neither free nor held at t={now}")
            self._down[x] = back                  # not returned to the free list by the interruption
            self._interrupt(self._running[jid], FAILED_PRIORITY, now)
            log.debug("t=%g: node %r failed, job %d interrupted", now, x, jid)
        self._down[x] = back
        self._seq += 1
        heappush(self._heap, (back, _REPAIR, self._seq, k))

    def _interrupt(self, r: _Run, priority: int, now: float) -> None:
        """Stop running job ``r``, free its nodes (except failed ones) and re-queue it with ``priority``."""
        v = r.view
        job = v.job
        del self._running[job.id]
        self._unlist(r)
        if self._restarts is None:
            n = len(self.workload)
            self._restarts = array("l", [0]) * n
            self._lost = array("d", [0.0]) * n
        held = r.area + v.size * (now - r.seg)
        self._lost[r.row] += held - self._area[r.row]
        self._area[r.row] = held
        self._restarts[r.row] += 1
        for x in v.nodes:
            self._owner.pop(x, None)
            if x not in self._down:
                self._free.append(x)
                self._free_set.add(x)
        again = Job(job.id, job.submit, job.procs, job.estimate, job.kind, job.min_procs, job.max_procs,
                    job.serial, job.rho, priority)
        q = self._queue
        i = 0
        while i < len(q) and (q[i].priority > priority or (q[i].priority == priority and q[i].submit <= job.submit)):
            i += 1
        q.insert(i, again)
        self._qrow[job.id] = r.row
        self._qjob[job.id] = again


def simulate(workload: Workload, policy: Policy | str, **kwargs: object) -> SimResult:
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
    return Simulator(workload, policy, **kwargs).run()  # type: ignore[arg-type]
