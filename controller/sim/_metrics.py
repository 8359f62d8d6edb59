"""Per-job metrics and the run summary (wait, bounded slowdown with its tau, makespan, utilisation)."""

from __future__ import annotations

import csv
import os
from typing import Any

import numpy as np

from malleable.errors import ConfigError

from ._result import SimResult

__all__ = ["bounded_slowdown", "summary", "utilization_curve", "write_batsim_csv", "write_jobs_csv"]


def bounded_slowdown(result: SimResult, tau: float = 10.0) -> np.ndarray:
    """Per-job bounded slowdown ``max(1, (wait + run) / max(run, tau))``, run = end - start as simulated.

    Raises:
        ConfigError: tau <= 0.
    """
    if not tau > 0:
        raise ConfigError(f"tau must be > 0 s, got {tau}")
    run = result.end - result.start
    return np.maximum(1.0, (result.wait + run) / np.maximum(run, tau))


def summary(result: SimResult, tau: float = 10.0) -> dict[str, Any]:
    """The run summary with the keys of ``malleable simulate --json``.

    Returns:
        ``policy, jobs, skipped, mean_wait, max_wait, mean_bsld, tau, makespan, utilization, resizes,
        resized_jobs, sim_seconds``; makespan = last end - first submit; utilization = node-seconds held / (nodes
        x makespan); resizes = resizes of all jobs, resized_jobs = jobs resized at least once.
    """
    w = result.workload
    n = len(w)
    if n == 0:
        return {"policy": result.policy, "jobs": 0, "skipped": w.n_skipped, "mean_wait": 0.0, "max_wait": 0.0,
                "mean_bsld": 0.0, "tau": tau, "makespan": 0.0, "utilization": 0.0, "resizes": 0, "resized_jobs": 0,
                "sim_seconds": result.sim_seconds}
    wait = result.wait
    makespan = float(result.end.max() - w.submit.min())
    util = float(result.area.sum()) / (w.machine * makespan) if makespan > 0 else 0.0
    return {
        "policy": result.policy,
        "jobs": n,
        "skipped": w.n_skipped,
        "mean_wait": float(wait.mean()),
        "max_wait": float(wait.max()),
        "mean_bsld": float(bounded_slowdown(result, tau).mean()),
        "tau": tau,
        "makespan": makespan,
        "utilization": util,
        "resizes": int(result.resizes.sum()),
        "resized_jobs": int(np.count_nonzero(result.resizes)),
        "sim_seconds": result.sim_seconds,
    }


def utilization_curve(result: SimResult) -> tuple[np.ndarray, np.ndarray]:
    """Busy nodes over time as a step function ``(times, busy)``: ``busy[k]`` nodes from ``times[k]`` on.

    Follows every job's allocation segments (resizes, interruptions), so it never exceeds the machine.
    """
    t, d = result.size_changes()
    order = np.lexsort((d, t))           # at equal times, ends (negative) first
    t, d = t[order], d[order]
    busy = np.cumsum(d)
    last = np.r_[t[1:] != t[:-1], True]  # keep the value after all changes at one time
    return t[last], busy[last]


def write_jobs_csv(result: SimResult, path: str | os.PathLike[str], tau: float = 10.0) -> None:
    """One row per job: ``id, submit, start, end, procs, wait, run, bsld, resizes`` (``procs``: the start size)."""
    w = result.workload
    bsld = bounded_slowdown(result, tau)
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["id", "submit", "start", "end", "procs", "wait", "run", "bsld", "resizes"])
        for i in range(len(w)):
            s, e, sub = float(result.start[i]), float(result.end[i]), float(w.submit[i])
            out.writerow([int(w.ids[i]), f"{sub:.10g}", f"{s:.10g}", f"{e:.10g}", int(result.size[i]),
                          f"{s - sub:.10g}", f"{e - s:.10g}", f"{float(bsld[i]):.6g}", int(result.resizes[i])])


BATSIM_COLUMNS = ("job_id", "workload_name", "profile", "submission_time", "requested_number_of_resources",
                  "requested_time", "success", "final_state", "starting_time", "execution_time", "finish_time",
                  "waiting_time", "turnaround_time", "stretch", "allocated_resources", "consumed_energy", "segment",
                  "resizes")
"""Columns of :func:`write_batsim_csv`: Batsim's ``_jobs.csv`` ones, then the segment number and the job's
resizes."""


def write_batsim_csv(result: SimResult, path: str | os.PathLike[str]) -> None:
    """A Batsim-style jobs CSV (what evalys' ``JobSet.from_csv`` reads): one row per allocation segment.

    A job that kept its size is one row, as in Batsim. A resized (or interrupted and restarted) job has one row per
    segment, with ``segment`` 0, 1, ... and ``starting_time``/``finish_time`` those of the segment; its
    ``waiting_time``, ``turnaround_time`` and ``stretch`` are the job's. ``allocated_resources`` are node indices
    (positions in the machine's node list) as Batsim's interval sets (``0-3 8 10-11``).

    Raises:
        ConfigError: the result has no node ids per segment (run the simulator with ``nodes=True``).
    """
    h = result.history
    if h is None or h.nodes is None:
        raise ConfigError("a Batsim jobs file needs node ids per segment: simulate with nodes=True")
    w = result.workload
    index = {x: i for i, x in enumerate(result.node_ids or range(w.machine))}
    order = np.lexsort((np.arange(len(h.row)), h.row))
    rows, times, sizes = h.row[order].tolist(), h.time[order].tolist(), h.size[order].tolist()
    ids, sub, est = w.ids.tolist(), w.submit.tolist(), w.estimate.tolist()
    req = w.procs.tolist()
    start, end, resizes = result.start.tolist(), result.end.tolist(), result.resizes.tolist()
    name = w.name or "workload"
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(BATSIM_COLUMNS)
        seg = 0
        for k, i in enumerate(rows):
            if not k or rows[k - 1] != i:
                seg = 0
            t0 = times[k]
            t1 = times[k + 1] if k + 1 < len(rows) and rows[k + 1] == i else end[i]
            if sizes[k] == 0 or t1 <= t0 < end[i]:
                continue                    # a gap (interrupted, waiting to restart) or resized again at once
            seg += 1
            run = end[i] - start[i]
            turnaround = end[i] - sub[i]
            out.writerow([ids[i], name, "", f"{sub[i]:.10g}", req[i], f"{est[i]:.10g}", 1, "COMPLETED_SUCCESSFULLY",
                          f"{t0:.10g}", f"{t1 - t0:.10g}", f"{t1:.10g}", f"{start[i] - sub[i]:.10g}",
                          f"{turnaround:.10g}", f"{turnaround / run if run > 0 else 1.0:.10g}",
                          _intervals(sorted(index[x] for x in h.nodes[order[k]])), -1, seg - 1, resizes[i]])


def _intervals(idx: list[int]) -> str:
    """``[0, 1, 2, 3, 8]`` -> ``"0-3 8"`` (Batsim's interval-set notation)."""
    parts = []
    k = 0
    while k < len(idx):
        a = b = idx[k]
        while k + 1 < len(idx) and idx[k + 1] == b + 1:
            k += 1
            b = idx[k]
        parts.append(f"{a}-{b}" if b > a else str(a))
        k += 1
    return " ".join(parts)
