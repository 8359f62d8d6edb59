"""Per-job metrics and the run summary (wait, bounded slowdown with its tau, makespan, utilisation)."""

from __future__ import annotations

import csv
import os
from typing import Any

import numpy as np

from malleable.errors import ConfigError

from ._engine import SimResult

__all__ = ["bounded_slowdown", "summary", "utilization_curve", "write_jobs_csv"]


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
        ``policy, jobs, skipped, mean_wait, max_wait, mean_bsld, tau, makespan, utilization, sim_seconds``;
        makespan = last end - first submit; utilization = node-seconds held / (nodes x makespan).
    """
    w = result.workload
    n = len(w)
    if n == 0:
        return {"policy": result.policy, "jobs": 0, "skipped": w.n_skipped, "mean_wait": 0.0, "max_wait": 0.0,
                "mean_bsld": 0.0, "tau": tau, "makespan": 0.0, "utilization": 0.0,
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
        "sim_seconds": result.sim_seconds,
    }


def utilization_curve(result: SimResult) -> tuple[np.ndarray, np.ndarray]:
    """Busy nodes over time as a step function ``(times, busy)``: ``busy[k]`` nodes from ``times[k]`` on.

    Uses each job's start size (resized jobs are drawn at their start size).
    """
    t = np.concatenate([result.start, result.end])
    d = np.concatenate([result.size, -result.size]).astype(np.int64)
    order = np.lexsort((d, t))           # at equal times, ends (negative) first
    t, d = t[order], d[order]
    busy = np.cumsum(d)
    last = np.r_[t[1:] != t[:-1], True]  # keep the value after all changes at one time
    return t[last], busy[last]


def write_jobs_csv(result: SimResult, path: str | os.PathLike[str], tau: float = 10.0) -> None:
    """One row per job: ``id, submit, start, end, procs, wait, run, bsld``."""
    w = result.workload
    bsld = bounded_slowdown(result, tau)
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["id", "submit", "start", "end", "procs", "wait", "run", "bsld"])
        for i in range(len(w)):
            s, e, sub = float(result.start[i]), float(result.end[i]), float(w.submit[i])
            out.writerow([int(w.ids[i]), f"{sub:.10g}", f"{s:.10g}", f"{e:.10g}", int(result.size[i]),
                          f"{s - sub:.10g}", f"{e - s:.10g}", f"{float(bsld[i]):.6g}"])
