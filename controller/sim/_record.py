"""A run's record for a report: compact, JSON-ready data from which ``malleable report`` draws its page.

A record holds the summary, utilisation over time (and, with I/O, the file system's bandwidth in use and the
burst buffer held), the distributions of wait and bounded slowdown as quantiles, and a Gantt window: the first
jobs to start, each with its allocation segments (size, and node indices when known), so resizes (a segment of
another size) and interruptions (a segment of size 0, the job back in the queue) can be drawn. Curves are time
averages over at most ``bins`` equal bins, exact for step functions, so a record stays small for any trace.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ._metrics import bounded_slowdown, summary, utilization_curve
from ._result import SimResult

if TYPE_CHECKING:
    from ._ioengine import IOResult

__all__ = ["QUANTILES", "binned", "interruptions", "provenance", "result_segments", "run_record"]

QUANTILES = tuple(float(q) for q in np.linspace(0.0, 1.0, 101))
"""The quantile levels a record keeps of each distribution (every percent)."""

Segment = tuple[int, float, float, int, Sequence[Hashable] | None]
"""``(job id, from, to, size, nodes or None)``: a job holding ``size`` nodes over ``[from, to)``."""


def binned(t: np.ndarray, v: np.ndarray, t0: float, t1: float, bins: int = 300) -> tuple[list[float], list[float]]:
    """The time average of the step function ``v`` (``v[k]`` from ``t[k]`` on) over ``bins`` equal bins of
    ``[t0, t1]``: ``(bin starts, averages)``."""
    t = np.asarray(t, dtype=float)
    v = np.asarray(v, dtype=float)
    if len(t) == 0 or not t1 > t0:
        return [], []
    edges = np.linspace(t0, t1, bins + 1)
    tt = np.concatenate(([min(t0, t[0])], t, [max(t1, t[-1])]))
    vv = np.concatenate(([0.0], v, [v[-1]]))
    area = np.concatenate(([0.0], np.cumsum(vv[:-1] * np.diff(tt))))
    at = np.interp(edges, tt, area)
    return edges[:-1].tolist(), (np.diff(at) / np.diff(edges)).tolist()


def _quantiles(x: np.ndarray) -> list[float]:
    x = x[np.isfinite(x)]
    return np.quantile(x, QUANTILES).tolist() if len(x) else []


def result_segments(result: SimResult, rows: Sequence[int]) -> list[Segment]:
    """The allocation segments of the given workload rows, from the result's size history."""
    out: list[Segment] = []
    index = {x: k for k, x in enumerate(result.node_ids or ())}
    for i in rows:
        segs = result.segments(int(i))
        jid = int(result.workload.ids[i])
        for k, (s, size, nodes) in enumerate(segs):
            e = segs[k + 1][0] if k + 1 < len(segs) else float(result.end[i])
            if e > s or size == 0:
                out.append((jid, s, e, size, None if nodes is None else [index.get(x, x) for x in nodes]))
    return out


def run_record(result: SimResult, *, label: str, tau: float = 10.0, io: IOResult | None = None,
               segments: list[Segment] | None = None, gantt_jobs: int = 120, bins: int = 300,
               series: dict[str, Any] | None = None) -> dict[str, Any]:
    """The record of one run (module docstring).

    Args:
        result: the run.
        label: its name in the report.
        tau: the bounded-slowdown threshold (s).
        io: the I/O-aware simulator's result, for the file-system and burst-buffer curves.
        segments: the Gantt segments to draw (default: the first ``gantt_jobs`` jobs to start, from the result).
        gantt_jobs: jobs in the default Gantt window.
        bins: bins of the curves.
        series: more curves, ``{name: {"t": [...], "y": [...], "unit": ..., "title": ...}}`` (t in seconds).
    """
    w = result.workload
    s = summary(result, tau)
    t0 = float(w.submit.min()) if len(w) else 0.0
    t1 = float(np.nanmax(result.end)) if len(w) else 0.0
    rec: dict[str, Any] = {"label": label, "policy": result.policy, "workload": w.name, "jobs": len(w),
                           "machine": w.machine, "tau": tau, "t0": t0,
                           "summary": {k: v for k, v in s.items() if k != "sim_seconds"}}
    t, busy = utilization_curve(result)
    bt, bu = binned(t, busy / max(w.machine, 1), t0, t1, bins)
    curves: dict[str, Any] = {"utilisation": {"t": bt, "y": bu, "unit": "share of the nodes",
                                              "title": "utilisation (share of the nodes busy)"}}
    if io is not None:
        pt, pv = binned(io.pfs[0], io.pfs[1] / 1e9, t0, t1, bins)
        curves["pfs"] = {"t": pt, "y": pv, "unit": "GB/s", "title": "file-system bandwidth in use"}
        if w.bb_total > 0:
            qt, qv = binned(io.bb[0], io.bb[1] / w.bb_total, t0, t1, bins)
            curves["bb"] = {"t": qt, "y": qv, "unit": "share of the buffer",
                            "title": "burst buffer held (share of the capacity)"}
    for name, c in (series or {}).items():
        ct, cv = binned(np.asarray(c["t"]), np.asarray(c["y"]), t0, t1, bins)
        curves[name] = dict(c, t=ct, y=cv)
    rec["curves"] = curves
    rec["distributions"] = {"wait": {"unit": "s", "q": _quantiles(np.asarray(result.wait, dtype=float))},
                            "bsld": {"unit": "", "q": _quantiles(bounded_slowdown(result, tau))}}
    if segments is None:
        order = np.argsort(result.start, kind="stable")[:gantt_jobs]
        segments = result_segments(result, order.tolist())
    rec["gantt"] = _gantt(segments, w, result)
    return rec


def interruptions(result: SimResult) -> list[list[float]]:
    """``[time, job id]`` of every interruption (a failure or a stolen node sent the job back to the queue)."""
    h = result.history
    if h is None or not len(h.row):
        return []
    gaps = np.flatnonzero(h.size == 0)
    return [[float(h.time[k]), int(result.workload.ids[h.row[k]])] for k in gaps]


def _gantt(segments: list[Segment], w: Any, result: SimResult) -> dict[str, Any]:
    jobs: dict[int, list[list[Any]]] = {}
    for jid, a, b, size, nodes in segments:
        jobs.setdefault(int(jid), []).append([float(a), float(b), int(size), None if nodes is None else
                                              sorted(int(x) if isinstance(x, (int, np.integer)) else str(x)
                                                     for x in nodes)])
    row = {int(j): k for k, j in enumerate(w.ids.tolist())}
    out = []
    for jid, segs in jobs.items():
        k = row.get(jid)
        sub = float(w.submit[k]) if k is not None else math.nan
        restarts = int(result.restarts[k]) if k is not None and result.restarts is not None else 0
        out.append({"id": jid, "submit": sub, "segments": sorted(segs, key=lambda x: x[0]), "restarts": restarts})
    nodes = all(seg[3] is not None for j in out for seg in j["segments"] if seg[2] > 0)
    shown = set(jobs)
    return {"rows": "nodes" if nodes and out else "jobs", "jobs": out,
            "interruptions": [x for x in interruptions(result) if x[1] in shown]}


def provenance(command: Sequence[str] | None = None) -> dict[str, Any]:
    """Where a result comes from: the command (default ``malleable`` and this process's arguments), the commit of
    the source tree (and whether it had uncommitted changes), the version, the time and the machine's core
    count."""
    import datetime
    import os
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    from malleable import __version__

    cmd = ["malleable", *sys.argv[1:]] if command is None else list(command)
    root = Path(__file__).resolve().parents[2]
    commit, dirty = "unknown", False
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip() or "unknown"
        dirty = bool(subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=10, check=True).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return {"command": shlex.join(cmd), "commit": commit, "dirty": dirty, "version": __version__,
            "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "cores": os.cpu_count() or 1}
