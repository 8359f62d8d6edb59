"""The I/O-aware simulator: jobs run their application model (phases) against a shared parallel file system and
a burst buffer, under the same policies and decision path as every other engine.

Model (seeds 000 §4.2/§6, 004 §1.4; an event-driven fluid model, not time steps):

* a job runs its phases in order; a job without phases has one compute phase of its run time;
* compute: ``amount`` seconds of work at the requested size, scaled by the speedup model at the current size;
* file-system transfers (read, write, stage-in, stage-out, and the background drains of checkpoints) share the
  file system's bandwidth ``pfs_bw`` equally per participating node: a transfer of a job on ``n`` nodes gets
  ``min(n * link_bw, pfs_bw * n / N)`` where ``N`` counts the nodes of every transfer in progress (000 §6; the
  bandwidth a capped transfer leaves unused is not handed to the others: the model as the text states it);
* a checkpoint writes to the burst buffer at ``n * bb_bw`` (computation suspended), then drains to the file system
  in the background while the next phases run; the job ends when its last phase and every drain are done;
* a phase with ``point`` is followed by a scheduling point: a pass runs at that instant with the job listed in
  ``Snapshot.points``, the only moment it may be resized (ElastiSim's semantics);
* the rates of all transfers are recomputed whenever the set of transfers changes, so every end time is exact;
* a job with storage fields has a file system of its own that its read, write and checkpoint phases use, grown and
  shrunk by the live storage policy (``storage``; the model is in :mod:`._iofs`).

The machine's burst-buffer capacity is ``workload.bb_total``; the ledger refuses a start beyond it.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np

from malleable.controller.sched._ledger import Effect, Ledger
from malleable.controller.sched._model import Job, Phase, PhaseKind, Policy, RunningJob
from malleable.controller.sched._speedup import SpeedupModel, amdahl
from malleable.errors import ConfigError, SimulationError

from ._iofs import Storage, StorageModel, StorageReport
from ._result import SimResult, SizeHistory
from ._workload import Workload

__all__ = ["IOResult", "IOSimulator", "simulate_io"]

log = logging.getLogger(__name__)

_PFS = frozenset({k.value for k in (PhaseKind.READ, PhaseKind.WRITE, PhaseKind.STAGE_IN, PhaseKind.STAGE_OUT)})
_COMPUTE, _CHECKPOINT, _DRAIN = PhaseKind.COMPUTE.value, PhaseKind.CHECKPOINT.value, "drain"
_OWN = frozenset({k.value for k in (PhaseKind.READ, PhaseKind.WRITE, PhaseKind.CHECKPOINT)})
"""Phases a job with a file system of its own runs against it."""


@dataclass(slots=True)
class IOResult:
    """A run of the I/O-aware simulator.

    Attributes:
        result: the per-job result, as every engine returns it.
        io_time: per job, seconds spent in blocking transfers (everything but computation and background drains).
        pfs: file-system bandwidth in use over time, ``(times, bytes/s)`` as a step function.
        bb: burst buffer held over time, ``(times, bytes)`` as a step function.
        moved: bytes transferred, by phase kind (drains under ``"drain"``).
        storage: the jobs' own file systems (servers over time, decisions), or None: no model was given.
    """

    result: SimResult
    io_time: np.ndarray
    pfs: tuple[np.ndarray, np.ndarray]
    bb: tuple[np.ndarray, np.ndarray]
    moved: dict[str, float] = field(default_factory=dict)
    storage: StorageReport | None = None


class _Flow:
    """A transfer or a computation in progress (mutable, engine-private)."""

    __slots__ = ("amount", "job", "kind", "left", "rate", "t0")

    def __init__(self, job: int, kind: str, left: float, t0: float) -> None:
        self.job = job
        self.kind = kind         # a PhaseKind value, or "drain"
        self.left = left         # seconds of work or bytes
        self.amount = left       # all of it (bytes moved when the flow is done)
        self.rate = 0.0
        self.t0 = t0             # when it began (a blocking transfer's time is counted when it is done)


class _Run:
    __slots__ = ("drains", "flow", "io", "phase", "phases", "row", "size", "speed")

    def __init__(self, row: int, phases: tuple[Phase, ...], size: int, speed: float) -> None:
        self.row = row
        self.phases = phases
        self.phase = -1
        self.size = size
        self.speed = speed      # compute work done per second at this size (1 / the speedup model's factor)
        self.flow: _Flow | None = None
        self.drains: list[_Flow] = []
        self.io = 0.0


class IOSimulator:
    """Replays a workload with I/O under ``policy`` (module docstring); create one per run.

    Args:
        workload: the jobs (``Workload.phases``/``bb``/``bb_total`` give their I/O).
        policy: ``decide(snapshot, now) -> list[Decision]``.
        pfs_bw: the file system's total bandwidth (bytes/s).
        link_bw: each node's link to the file system (bytes/s).
        bb_bw: each node's bandwidth to the burst buffer (bytes/s; default ``link_bw``).
        speedup: run-time factor of compute work at another size than requested.
        tick: also run a pass every ``tick`` seconds while jobs are queued (a periodic scheduler).
        name: the policy's name in results.
        storage: the model of the jobs' own file systems (needed when the workload has storage fields).
    """

    def __init__(self, workload: Workload, policy: Policy, *, pfs_bw: float, link_bw: float,
                 bb_bw: float | None = None, speedup: SpeedupModel = amdahl, tick: float | None = None,
                 name: str | None = None, storage: StorageModel | None = None) -> None:
        if not (pfs_bw > 0 and link_bw > 0 and (bb_bw is None or bb_bw > 0)):
            raise ConfigError(f"bandwidths must be > 0 (pfs {pfs_bw}, link {link_bw}, burst buffer {bb_bw})")
        if tick is not None and not tick > 0:
            raise ConfigError(f"tick must be > 0, got {tick}")
        self.w = workload
        self.policy = policy
        self.name = name or getattr(policy, "__name__", "policy")
        self.pfs_bw, self.link_bw = float(pfs_bw), float(link_bw)
        self.bb_bw = float(link_bw if bb_bw is None else bb_bw)
        self.speedup = speedup
        self.tick = tick
        self.nodes = tuple(range(workload.machine))
        self.ledger = Ledger(self.nodes, speedup=speedup, progress=self._progress, bb_total=workload.bb_total)
        n = len(workload)
        self._start = np.full(n, np.nan)
        self._end = np.full(n, np.nan)
        self._size = np.zeros(n, dtype=np.int64)
        self._area = np.zeros(n)
        self._resizes = np.zeros(n, dtype=np.int64)
        self._io = np.zeros(n)
        self._since = np.zeros(n)
        self._hist: list[tuple[int, float, int]] = []
        self._runs: dict[int, _Run] = {}
        self._rows: dict[int, int] = {}
        self._flows: list[_Flow] = []
        self._now = 0.0
        self._wakes: list[float] = []
        self._pfs_t: list[float] = [0.0]
        self._pfs_v: list[float] = [0.0]
        self._bb_t: list[float] = [0.0]
        self._bb_v: list[float] = [0.0]
        self.moved: dict[str, float] = {}
        if workload.fs is not None and storage is None:
            raise ConfigError("jobs with a file system of their own need the storage model (its server bandwidth)")
        self.fs = Storage(storage, workload.fs or [None] * n, self.ledger, self._effect) if storage else None

    # -- model ---------------------------------------------------------------------------------------------

    def _phases(self, row: int) -> tuple[Phase, ...]:
        ph = self.w.phases[row] if self.w.phases is not None else ()
        return ph or (Phase(PhaseKind.COMPUTE, float(self.w.run[row])),)

    def _progress(self, v: RunningJob, now: float) -> float:
        """Share of the job's compute work done (the ledger's view of progress at a resize)."""
        r = self._runs[v.job.id]
        total = sum(p.amount for p in r.phases if p.kind is PhaseKind.COMPUTE) or 1.0
        done = sum(p.amount for p in r.phases[:max(r.phase, 0)] if p.kind is PhaseKind.COMPUTE)
        return min(1.0, done / total)

    def _rates(self) -> None:
        """Recompute every flow's rate (called whenever the set of flows or a size changes)."""
        runs, fs = self._runs, self.fs
        own = {} if fs is None else {f.job: bw for f in self._flows
                                     if f.kind in _OWN and (bw := fs.bw(f.job)) is not None}
        pfs_nodes = 0
        for f in self._flows:
            if (f.kind in _PFS or f.kind == _DRAIN) and not (own and f.job in own and f.kind in _OWN):
                pfs_nodes += runs[f.job].size
        used = 0.0
        pfs_bw, link_bw = self.pfs_bw, self.link_bw
        for f in self._flows:
            r = runs[f.job]
            kind = f.kind
            if own and f.job in own and kind in _OWN:
                f.rate = min(r.size * (self.bb_bw if kind == _CHECKPOINT else link_bw), own[f.job])
            elif kind == _COMPUTE:
                f.rate = r.speed
            elif kind == _CHECKPOINT:
                f.rate = r.size * self.bb_bw
            else:
                f.rate = min(r.size * link_bw, pfs_bw * r.size / pfs_nodes)
                used += f.rate
        if used != self._pfs_v[-1]:
            self._mark(self._pfs_t, self._pfs_v, used)

    def _mark(self, ts: list[float], vs: list[float], v: float) -> None:
        if ts[-1] == self._now:
            vs[-1] = v
        else:
            ts.append(self._now)
            vs.append(v)

    def _advance(self, t: float) -> None:
        dt = t - self._now
        if dt > 0:
            for f in self._flows:
                f.left -= f.rate * dt
            if self.fs is not None:                  # the own file systems sample what their jobs moved
                for f in self._flows:
                    if f.kind in _OWN:
                        self.fs.moved(f.job, f.rate * dt)
        self._now = t

    def _next_phase(self, jid: int) -> bool:
        """Start job ``jid``'s next phase; True when it waits at a scheduling point first."""
        r = self._runs[jid]
        if r.phase >= 0 and r.phases[r.phase].point and self.ledger.running[jid].job.phases:
            self.ledger.points.add(jid)
            r.flow = None
            return True
        return self._begin(jid)

    def _begin(self, jid: int) -> bool:
        r = self._runs[jid]
        r.phase += 1
        if r.phase >= len(r.phases):
            r.flow = None
            if not r.drains:
                self._finish(jid)
            return False
        p = r.phases[r.phase]
        f = _Flow(jid, p.kind.value, float(p.amount), self._now)
        r.flow = f
        self._flows.append(f)
        return False

    def _finish(self, jid: int) -> None:
        r = self._runs.pop(jid)
        v = self.ledger.finish(jid)
        self._end[r.row] = self._now
        self._area[r.row] += v.size * (self._now - self._since[r.row])
        self._io[r.row] = r.io
        if self.fs is not None:
            self.fs.end(jid, self._now)
        self._mark(self._bb_t, self._bb_v, self.ledger.bb_used)

    def _done(self, f: _Flow) -> bool:
        """Flow ``f`` ended: move its job on. True when a pass is due (a job ended or reached a point)."""
        self._flows.remove(f)
        r = self._runs[f.job]
        if f.kind != _COMPUTE:
            self.moved[f.kind] = self.moved.get(f.kind, 0.0) + f.amount
            if f.kind != _DRAIN:
                r.io += self._now - f.t0
        if f.kind == _DRAIN:
            r.drains.remove(f)
            if r.flow is None and r.phase >= len(r.phases):
                self._finish(f.job)
                return True
            return False
        if f.kind == _CHECKPOINT:
            d = _Flow(f.job, _DRAIN, float(r.phases[r.phase].amount), self._now)
            r.drains.append(d)
            self._flows.append(d)
        at_point = self._next_phase(f.job)
        return at_point or f.job not in self._runs

    # -- the policy's effects -----------------------------------------------------------------------------

    def _effect(self, e: Effect) -> None:
        kind = e[0]
        now = self._now
        if kind == "start":
            v: RunningJob = e[1]
            row = self._rows[v.job.id]
            self._runs[v.job.id] = _Run(row, self._phases(row), v.size, 1.0 / self.speedup(v.job, v.size))
            self._start[row], self._size[row], self._since[row] = now, v.size, now
            self._hist.append((row, now, v.size))
            if self.fs is not None:
                self.fs.start(v.job.id, row, tuple(v.nodes), now)
            self._begin(v.job.id)
            self._mark(self._bb_t, self._bb_v, self.ledger.bb_used)
        elif kind == "resize":
            old, new = e[1], e[2]
            r = self._runs[new.job.id]
            self._area[r.row] += old.size * (now - self._since[r.row])
            self._since[r.row] = now
            r.size = new.size
            r.speed = 1.0 / self.speedup(new.job, new.size)
            self._resizes[r.row] += 1
            self._hist.append((r.row, now, new.size))
        elif kind == "wake":
            heapq.heappush(self._wakes, e[1])
        elif kind == "interrupt":
            raise SimulationError("the I/O-aware simulator does not model interruptions")

    # -- the event loop -----------------------------------------------------------------------------------

    def run(self) -> IOResult:
        """Run to completion.

        Raises:
            PolicyError: the policy returned an invalid decision.
            SimulationError: jobs are left queued with nothing running.
        """
        w, led = self.w, self.ledger
        jobs: list[Job] = w.jobs(0, len(w))
        subs = w.submit.tolist()
        n, i, passes = len(w), 0, 0
        next_tick = math.inf
        fs = self.fs
        t0 = time.perf_counter()
        while True:
            prev = self._now
            ends = [prev + f.left / f.rate if f.rate > 0 else math.inf for f in self._flows]
            t_flow = min(ends, default=math.inf)
            t_sub = subs[i] if i < n else math.inf
            t_wake = self._wakes[0] if self._wakes else math.inf
            now = min(t_flow, t_sub, t_wake, next_tick, math.inf if fs is None else fs.next_event())
            if now == math.inf:
                break
            self._advance(now)
            due = False
            # a flow ends when its end time is reached (compared as computed: no rounding can leave a sliver)
            for f in [f for f, e in zip(self._flows, ends) if e <= now]:
                f.left = 0.0
                if f in self._flows:
                    due = self._done(f) or due
            while self._wakes and self._wakes[0] <= now:
                heapq.heappop(self._wakes)
                due = True
            if next_tick <= now:
                next_tick = math.inf
                due = True
            if fs is not None:
                due = fs.step(now) or due
            while i < n and subs[i] <= now:
                self._rows[jobs[i].id] = i
                led.submit(jobs[i])
                i += 1
                due = True
            while due:
                passes += 1
                if fs is not None:
                    fs.sync()
                decisions = self.policy(led.snapshot(now), now)
                if decisions:
                    led.apply(decisions, now, True, self._effect)
                due = False
                for jid in list(led.points):          # the jobs at a point go on (resized or not)
                    led.points.discard(jid)
                    if jid in self._runs:
                        self._begin(jid)
                        due = due or jid not in self._runs
            self._rates()
            if self.tick is not None and led.queue and next_tick == math.inf:
                next_tick = now + self.tick
        if led.queue:
            raise SimulationError(f"{self.name}: {len(led.queue)} jobs left queued with nothing running "
                                  f"(first: job {led.queue[0].id})")
        elapsed = time.perf_counter() - t0
        log.info("%s: %d jobs with I/O simulated in %.3f s (%d passes)", self.name, n, elapsed, passes)
        h = self._hist
        history = SizeHistory(np.array([x[0] for x in h], dtype=np.int64), np.array([x[1] for x in h]),
                              np.array([x[2] for x in h], dtype=np.int64))
        res = SimResult(w, self.name, self._start, self._end, self._size, self._area, self._resizes, elapsed,
                        passes, dict(led.counts), None, None, history, self.nodes)
        return IOResult(res, self._io, (np.array(self._pfs_t), np.array(self._pfs_v)),
                        (np.array(self._bb_t), np.array(self._bb_v)), dict(self.moved),
                        None if fs is None else fs.report)


def simulate_io(workload: Workload, policy: Policy | str, **kwargs: object) -> IOResult:
    """Run ``workload`` with its I/O under ``policy`` (a function or a registered name); options of
    :class:`IOSimulator`."""
    if isinstance(policy, str):
        from malleable.controller.sched import get_policy
        kwargs.setdefault("name", policy)
        policy = get_policy(policy)
    return IOSimulator(workload, policy, **kwargs).run()  # type: ignore[arg-type]
