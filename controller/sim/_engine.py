"""The discrete-event simulator: replays a workload under a policy and records every job's start and end.

Events are ordered by ``(time, priority, seq)``: at equal times job ends (priority 0) are processed before
submissions (priority 1) and policy wake-ups (priority 2), then the policy runs once. Submissions come from the
workload, already sorted by submit time (a stream merged with the heap of ends and wake-ups); ``seq`` keeps
the order of equal entries deterministic.

What policies may know (free nodes, queue, running views, reservations, memo, down nodes) lives in a
:class:`~malleable.controller.sched.Ledger`, the decision path the live controller uses too: the engine adds
only what policies must not see (each job's real run time, hence its real end) and the event heap. Jobs can
change size while they run: the ledger tracks the fraction of work done under a speedup model (here from the
real run time), so a resize recomputes the end (and the estimated end), after a reconfiguration cost.

Failures (seed 000 §3.1): ``failures=[(t, node, downtime), ...]`` takes ``node`` down at ``t`` for ``downtime``
seconds. A job holding it is interrupted: its other nodes are freed at once and it is re-queued, to restart
from scratch (no checkpoints), with priority :data:`FAILED_PRIORITY`; an :class:`Interrupt` decision does the
same to a victim with the priority it names. The queue stays sorted by ``(-priority, submission)``.
"""

from __future__ import annotations

import heapq
import logging
import math
import os
import sys
import time
from array import array
from collections.abc import Callable, Hashable, Sequence
from heapq import heappush
from typing import Any

import numpy as np

from malleable.controller.sched._ledger import Effect, Ledger
from malleable.controller.sched._model import FAILED_PRIORITY, Job, Policy, RunningJob
from malleable.controller.sched._speedup import MtctModel, ReconfigCost, SpeedupModel, amdahl, no_reconfig_cost
from malleable.errors import SimulationError

from ._result import SimResult, SizeHistory
from ._workload import Workload

__all__ = ["SimResult", "Simulator", "simulate"]

log = logging.getLogger(__name__)

_END, _WAKE, _FAIL, _REPAIR = 0, 2, 3, 4
_INF = math.inf
_CHUNK = 1 << 16                  # workload rows turned into Python values at a time (memory follows the system)


class _Run:
    """Engine-private state of a running job (mutable; the policy sees the ledger's frozen view)."""

    __slots__ = ("area", "end", "evseq", "row", "seg")

    def __init__(self, row: int, end: float, evseq: int, seg: float) -> None:
        self.row = row
        self.end = end          # real end time (hidden from policies)
        self.evseq = evseq      # seq of the job's live END event (older ones are stale)
        self.seg = seg          # when the current size began (for the node-seconds area)
        self.area = 0.0         # node-seconds used before ``seg``


class Simulator:
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
        tick: also run a pass every ``tick`` seconds while jobs are queued or running, as the live controller
            does (``malleable controller start --tick``); None: passes only at events.
        record: a list that receives what happened, in order, for replaying the run elsewhere (the live core's
            equivalence test): ``("submit", t, job)``, ``("end", t, job id)``, ``("down", t, node, until)``,
            ``("up", t, node)``, ``("pass", t, decisions, effects)``.
        nodes: keep every job's node ids per allocation segment in ``SimResult.history`` (Gantt with node rows,
            Batsim files); memory grows with the jobs' sizes. Sizes of resized jobs are always kept.
        fast: let rigid runs under the built-in ``fcfs`` or ``easy`` take the compiled twin of this engine
            (:mod:`._fastpath`: the same schedule, several times faster); ``MALLEABLE_NO_FASTPATH=1`` also
            turns it off.
    """

    def __init__(self, workload: Workload, policy: Policy, *, name: str | None = None,
                 speedup: SpeedupModel = amdahl, reconfig_cost: ReconfigCost = no_reconfig_cost,
                 node_ids: Sequence[Hashable] | None = None, hints: bool = True,
                 progress: Callable[[int], None] | None = None,
                 failures: Sequence[tuple[float, Hashable, float]] = (),
                 mtct: MtctModel | None = None, record: list[tuple[Any, ...]] | None = None,
                 order: str = "release", tick: float | None = None, nodes: bool = False,
                 fast: bool = True) -> None:
        self.workload = workload
        self.policy = policy
        self.name = name or getattr(policy, "__name__", "policy")
        self.speedup = speedup
        self.reconfig_cost = reconfig_cost
        keep_nodes = nodes
        nodes = tuple(range(workload.machine)) if node_ids is None else tuple(node_ids)
        if len(nodes) != workload.machine or len(set(nodes)) != len(nodes):
            raise SimulationError(f"need {workload.machine} distinct node ids, got {len(nodes)}")
        self.nodes = nodes
        self.hints = hints
        self.progress = progress
        self.record = record
        if tick is not None and not tick > 0:
            raise SimulationError(f"tick must be > 0, got {tick}")
        self.tick = tick
        self.fast = fast
        self._keep_nodes = keep_nodes
        n = len(workload)
        self._start = array("d", [math.nan]) * n
        self._end = array("d", [math.nan]) * n
        self._size = array("q", [0]) * n
        self._area = array("d", [0.0]) * n
        self._resizes = array("q", [0]) * n
        self._run_of = workload.run.item           # real run time of a row (hidden from policies)
        self._hrow = array("q")                      # size history: row, from, size (and nodes) per segment
        self._htime = array("d")
        self._hsize = array("q")
        self._hnodes: list | None = [] if keep_nodes else None
        self._kept = bytearray(n)                    # rows whose segments are in the history
        self._qrow: dict[int, int] = {}            # queued job id -> workload row
        self._running: dict[int, _Run] = {}
        self._heap: list[tuple[float, int, int, int]] = []
        self._seq = 0
        self._now = 0.0
        self._changed = False
        self._done = False
        self.mtct = mtct
        self.ledger = Ledger(nodes, speedup=speedup, reconfig_cost=reconfig_cost, mtct=mtct,
                             progress=self._real_progress, order=order, bb_total=workload.bb_total)
        self._failures = sorted((float(t), x, float(d)) for t, x, d in failures)
        known = set(nodes) if self._failures else ()
        for t, x, d in self._failures:
            if x not in known or not (t >= 0 and d > 0):
                raise SimulationError(f"bad failure ({t}, {x!r}, {d}): unknown node or non-positive downtime")
        self._restarts = array("q", [0]) * n if self._failures else None
        self._lost = array("d", [0.0]) * n if self._failures else None
        for k, (t, _, _) in enumerate(self._failures):
            self._seq += 1
            heapq.heappush(self._heap, (t, _FAIL, self._seq, k))

    def _real_progress(self, v: RunningJob, now: float) -> float:
        """Work done at ``now`` from the hidden real run time (none while a reconfiguration is being paid)."""
        run_old = self._run_of(self._running[v.job.id].row) * self.speedup(v.job, v.size)
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
        if self._fast_ok():
            return self._run_fast()
        w = self.workload
        n = len(w)
        c0 = c1 = 0                 # rows [c0, c1) of the workload are in subs/jobs (chunks: memory stays small)
        subs: list[float] = []
        jobs: list[Job] = []
        heap = self._heap
        led = self.ledger
        queue = led.queue
        queued = led.queued
        qrow = self._qrow
        running = self._running
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
        tick = self.tick
        next_tick = _INF
        t0 = time.perf_counter()
        while True:
            if i == c1 and i < n:
                c0, c1 = i, min(n, i + _CHUNK)
                subs, jobs = w.submit[c0:c1].tolist(), w.jobs(c0, c1)
            ts = subs[i - c0] if i < n else _INF
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
            while i < n:
                if i == c1:
                    c0, c1 = i, min(n, i + _CHUNK)
                    subs, jobs = w.submit[c0:c1].tolist(), w.jobs(c0, c1)
                if subs[i - c0] > now:
                    break
                job = jobs[i - c0]
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
            if tick is not None and (queue or running) and not now < next_tick < _INF:
                next_tick = now + tick          # the next periodic pass (one pending at a time)
                self._seq += 1
                heappush(heap, (next_tick, _WAKE, self._seq, -1))
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
            lost = np.frombuffer(self._lost, dtype=np.float64)
        history = SizeHistory(np.frombuffer(self._hrow, dtype=np.int64), np.frombuffer(self._htime, dtype=np.float64),
                              np.frombuffer(self._hsize, dtype=np.int64), self._hnodes)
        return SimResult(w, self.name, np.frombuffer(self._start, dtype=np.float64),
                         np.frombuffer(self._end, dtype=np.float64), np.frombuffer(self._size, dtype=np.int64),
                         np.frombuffer(self._area, dtype=np.float64), np.frombuffer(self._resizes, dtype=np.int64),
                         elapsed, passes, dict(led.counts), restarts, lost, history, self.nodes)

    # -- the compiled twin (rigid fcfs / easy) ---------------------------------------------------------------

    def _fast_ok(self) -> bool:
        """Whether this run may take the compiled twin: nothing it leaves out could matter (module docstring of
        :mod:`._fastpath`)."""
        from malleable.controller.sched._registry import POLICIES

        w = self.workload
        return (self.fast and os.environ.get("MALLEABLE_NO_FASTPATH") != "1" and len(w) > 0
                and any(self.policy is POLICIES[k] for k in ("fcfs", "easy", "conservative"))
                and w.kind is None and not w.has_io
                and not w.bb_total and not self._failures and self.tick is None and self.record is None
                and self.mtct is None and not self._keep_nodes and int(w.procs.min()) >= 1
                and int(w.procs.max()) <= w.machine and len(np.unique(w.ids)) == len(w))

    def _run_fast(self) -> SimResult:
        from malleable.controller.sched._registry import POLICIES

        from ._fastpath import conservative_kernel, fast_kernel, warm

        w = self.workload
        n = len(w)
        start = np.full(n, np.nan)
        end = np.full(n, np.nan)
        procs = w.procs.astype(np.int64)
        cols = (w.submit.astype(np.float64), w.run.astype(np.float64), w.estimate.astype(np.float64), procs,
                int(w.machine))
        reserves = np.zeros(1, dtype=np.int64)
        conservative = self.policy is POLICIES["conservative"]
        warm("conservative" if conservative else "rigid")      # loading Numba's code is not simulating
        t0 = time.perf_counter()
        if conservative:
            passes = conservative_kernel()(*cols, start, end, reserves)
        else:
            passes = fast_kernel()(*cols, self.policy is POLICIES["easy"], start, end)
        elapsed = time.perf_counter() - t0
        if self.progress is not None:
            self.progress(n)
        log.info("%s: %d jobs simulated in %.3f s (%d passes, compiled)", self.name, n, elapsed, passes)
        counts = dict.fromkeys(("StartJob", "ResizeJob", "Reserve", "Wake", "Remember", "Interrupt"), 0)
        counts["StartJob"] = n
        if conservative:
            counts["Reserve"], counts["Remember"] = int(reserves[0]), int(passes)
        empty = np.zeros(0, dtype=np.int64)
        return SimResult(w, self.name, start, end, procs, procs * (end - start), np.zeros(n, dtype=np.int64),
                         elapsed, int(passes), counts, None, None,
                         SizeHistory(empty, np.zeros(0), empty.copy(), None), self.nodes)

    # -- the size history ------------------------------------------------------------------------------------

    def _segment(self, row: int, t: float, size: int, nodes: Sequence[Hashable]) -> None:
        self._hrow.append(row)
        self._htime.append(t)
        self._hsize.append(size)
        if self._hnodes is not None:
            self._hnodes.append(nodes)

    def _keep(self, row: int, first: RunningJob) -> None:
        """Row ``row`` changes size: from now on its segments are kept (its first one, ``first``, too)."""
        if not self._kept[row]:
            self._kept[row] = 1
            self._segment(row, self._start[row], first.size, first.nodes)

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
        elif kind == "decline":
            pass                                # a request's answer: nothing to simulate
        else:
            self._seq += 1
            heappush(self._heap, (e[1], _WAKE, self._seq, -1))

    def _started(self, view: RunningJob, f: float, now: float) -> None:
        jid = view.job.id
        row = self._qrow.pop(jid)
        self._seq += 1
        seq = self._seq
        end = now + self._run_of(row) * f
        r = _Run(row, end, seq, now)
        self._running[jid] = r
        heappush(self._heap, (end, _END, seq, jid))
        if self._restarts is not None and self._restarts[row]:
            r.area = self._area[row]          # a restart: keep the first start and the earlier runs' area
        else:
            self._start[row] = now
        self._size[row] = view.size
        if self._kept[row]:
            self._segment(row, now, view.size, view.nodes)      # a restart after an interruption
        elif self._hnodes is not None:
            self._kept[row] = 1
            self._segment(row, now, view.size, view.nodes)

    def _resized(self, old: RunningJob, new: RunningJob, now: float) -> None:
        job = new.job
        r = self._running[job.id]
        r.area += old.size * (now - r.seg)
        r.seg = now
        r.end = new.since + (1.0 - new.progress) * self._run_of(r.row) * self.speedup(job, new.size)
        self._keep(r.row, old)
        self._segment(r.row, now, new.size, new.nodes)
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
            self._restarts = array("q", [0]) * n
            self._lost = array("d", [0.0]) * n
        assert self._lost is not None
        held = r.area + v.size * (now - r.seg)
        self._lost[r.row] += held - self._area[r.row]
        self._area[r.row] = held
        self._restarts[r.row] += 1
        self._qrow[v.job.id] = r.row
        self._keep(r.row, v)
        self._segment(r.row, now, 0, ())


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
