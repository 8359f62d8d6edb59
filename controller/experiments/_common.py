"""Parts the experiments share: a recorder of the node sets jobs hold (for Gantt charts with node rows), the
metrics of a run, and the tolerances published numbers are read with."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Hashable
from typing import Any

import numpy as np

from malleable.controller.sched._model import Decision, Interrupt, Policy, ResizeJob, Snapshot, StartJob
from malleable.controller.sim._engine import SimResult
from malleable.controller.sim._metrics import bounded_slowdown
from malleable.controller.sim._record import Segment, run_record
from malleable.controller.sim._workload import Workload

from ._verdict import Near

__all__ = ["Recorder", "about", "effect", "exact", "jobs_per_node", "record", "result_metrics", "rigid_at"]

log = logging.getLogger(__name__)


def exact(value: float, step: float) -> Near:
    """A printed value: ``value`` is read as ``value ± step / 2`` (``step``: the unit of its last digit)."""
    return Near(value, step / 2.0)


def effect(value: float, step: float) -> Near:
    """A printed change against a baseline (``exact``), which a control confounds by meeting it or by changing
    more in the same direction."""
    return Near(value, step / 2.0, beyond=True)


def about(value: float, share: float = 0.05) -> Near:
    """A value printed with "about", "~" or read off a figure: ``value ± share x |value|`` (5 % unless given)."""
    return Near(value, abs(value) * share)


class Recorder:
    """Wraps a policy and records which nodes every job holds after each pass (exact: between passes sizes
    change only through job ends and failures, and both cause a pass).

    ``segments`` lists ``(job id, t0, t1, nodes)`` once :meth:`close` is called with the end of the run.
    """

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.passes: list[tuple[float, dict[int, tuple[Hashable, ...]]]] = []
        self.segments: list[tuple[int, float, float, tuple[Hashable, ...]]] = []
        self.__name__ = getattr(policy, "__name__", "policy")

    def __call__(self, snapshot: Snapshot, now: float) -> list[Decision]:
        out = self.policy(snapshot, now)
        state = {r.id: r.nodes for r in snapshot.running}
        for d in out:
            if isinstance(d, (StartJob, ResizeJob)):
                state[d.job_id] = d.nodes
            elif isinstance(d, Interrupt):
                state.pop(d.job_id, None)
        self.passes.append((now, state))
        return out

    def close(self, end: float) -> list[tuple[int, float, float, tuple[Hashable, ...]]]:
        """Turn the passes into segments ending at ``end`` (the last job end)."""
        segs: list[tuple[int, float, float, tuple[Hashable, ...]]] = []
        open_: dict[int, tuple[float, tuple[Hashable, ...]]] = {}
        for t, state in self.passes + [(end, {})]:
            for jid, (t0, nodes) in list(open_.items()):
                if state.get(jid) != nodes:
                    if t > t0:
                        segs.append((jid, t0, t, nodes))
                    del open_[jid]
            for jid, nodes in state.items():
                if jid not in open_:
                    open_[jid] = (t, nodes)
        self.segments = segs
        return segs

    def gantt(self) -> list[Segment]:
        """The segments in the run record's form ``(job, from, to, size, nodes)``."""
        return [(jid, t0, t1, len(nodes), nodes) for jid, t0, t1, nodes in self.segments]


def jobs_per_node(segments: list[tuple[int, float, float, tuple[Hashable, ...]]]) -> float:
    """Mean number of distinct jobs that ran on a node (over the nodes that ran any job)."""
    per: dict[Hashable, set[int]] = {}
    for jid, _, _, nodes in segments:
        for x in nodes:
            per.setdefault(x, set()).add(jid)
    return float(np.mean([len(s) for s in per.values()])) if per else 0.0


def result_metrics(result: SimResult, tau: float = 10.0) -> dict[str, float]:
    """Mean, median and 90th-percentile wait, mean turnaround (response), mean execution time, makespan (from
    the first submit), utilisation, mean bounded slowdown (``tau``) and resizes."""
    w = result.workload
    makespan = float(result.end.max() - w.submit.min())
    wait = result.wait
    return {"mean_wait": float(wait.mean()), "p50_wait": float(np.percentile(wait, 50)),
            "p90_wait": float(np.percentile(wait, 90)), "mean_tat": float((result.end - w.submit).mean()),
            "mean_exec": float((result.end - result.start).mean()), "makespan": makespan,
            "utilization": float(result.area.sum()) / (w.machine * makespan) if makespan > 0 else 0.0,
            "mean_bsld": float(bounded_slowdown(result, tau).mean()), "resizes": int(result.resizes.sum())}


def record(result: SimResult, label: str, rec: Recorder | None = None, **kw: Any) -> dict[str, Any]:
    """The run record of ``result`` for the report; with a :class:`Recorder`, its Gantt chart has node rows."""
    if rec is not None:
        rec.close(float(result.end.max()))
        kw["segments"] = rec.gantt()
    return run_record(result, label=label, **kw)


def rigid_at(w: Workload, which: str, model: str) -> Workload:
    """``w`` with every malleable job made rigid at its minimum (``which="min"``) or maximum (``"max"``) size, its
    run time and estimate scaled by the speedup model the experiment runs (``"rho"``: seed 002's power law,
    ``"amdahl"``: the job's serial fraction): the same jobs without malleability, started at that size. This is
    the control that says whether a malleable policy's gain needs malleability at all."""
    assert w.kind is not None and w.min_procs is not None and w.max_procs is not None
    mall = w.kind == 2
    size = np.where(mall, w.min_procs if which == "min" else w.max_procs, w.procs).astype(np.int32)
    p = w.procs.astype(float)
    if model == "rho":
        assert w.rho is not None
        factor = (p / size) ** (1.0 - w.rho)
    else:
        s = w.serial if w.serial is not None else np.zeros(len(w))
        factor = (s + (1.0 - s) / size) / (s + (1.0 - s) / p)
    out = dataclasses.replace(w, run=w.run * factor, estimate=w.estimate * factor, procs=size,
                              kind=np.zeros(len(w), dtype=np.int8), min_procs=size.copy(), max_procs=size.copy(),
                              name=f"{w.name}, rigid at {which}")
    if w.phases is not None:
        out.phases = None           # a rigid job without an application model runs its (scaled) time whole
    return out
