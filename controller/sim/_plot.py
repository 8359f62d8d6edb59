"""Plots of a simulation: utilisation over time and a Gantt chart of a time window (matplotlib, Agg)."""

from __future__ import annotations

import logging
import os

import numpy as np

from ._engine import SimResult
from ._metrics import utilization_curve

__all__ = ["plot_result"]

log = logging.getLogger(__name__)


def plot_result(result: SimResult, path: str | os.PathLike[str], *, window: tuple[float, float] | None = None,
                max_jobs: int = 400) -> None:
    """Write a PNG with the utilisation curve (top) and a Gantt chart of a window (bottom).

    Args:
        result: the simulation.
        path: output file (.png).
        window: Gantt time window ``(t0, t1)``; default: from the first submit, long enough to hold about
            ``max_jobs`` job starts.
        max_jobs: most jobs drawn in the Gantt chart.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    w = result.workload
    t, busy = utilization_curve(result)
    t0 = float(w.submit.min()) if len(w) else 0.0
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 7), gridspec_kw={"height_ratios": [1, 2]})
    if len(t) > 1:
        # mean utilisation per bin (exact: the cumulative busy area of a step function is piecewise linear)
        area = np.r_[0.0, np.cumsum(busy[:-1] * np.diff(t))]
        edges = np.linspace(t[0], t[-1], min(400, len(t)) + 1)
        per_bin = np.diff(np.interp(edges, t, area)) / np.diff(edges) / w.machine
        ax1.step((edges[:-1] - t0) / 3600.0, per_bin, where="post", lw=0.8)
        ax1.set_title(f"{w.name or 'workload'}: policy {result.policy}, {len(w)} jobs, {w.machine} nodes "
                      f"(mean utilisation per {(edges[1] - edges[0]) / 3600.0:.3g} h bin)")
    ax1.set_ylim(0, 1.05)
    ax1.set_xlabel("time since first submit (h)")
    ax1.set_ylabel("utilisation")
    if window is None:
        order = np.argsort(result.start, kind="stable")
        k = min(len(order), max_jobs) - 1
        window = (float(result.start[order[0]]), float(result.start[order[k]])) if k >= 0 else (0.0, 1.0)
        if window[1] <= window[0]:
            window = (window[0], window[0] + 1.0)
    a, b = window
    sel = np.flatnonzero((result.start < b) & (result.end > a))[:max_jobs]
    # stack jobs onto node rows greedily (first fit by row availability) for a readable chart
    rows_free = np.full(w.machine, -np.inf)
    cmap = plt.get_cmap("tab20")
    for n, i in enumerate(sel[np.argsort(result.start[sel], kind="stable")]):
        s, e, p = float(result.start[i]), float(result.end[i]), int(result.size[i])
        free_rows = np.flatnonzero(rows_free <= s)
        if len(free_rows) < p:
            continue
        lo = int(free_rows[0])
        take = free_rows[:p]
        rows_free[take] = e
        ax2.add_patch(Rectangle(((s - t0) / 3600.0, lo), (e - s) / 3600.0, p, facecolor=cmap(n % 20),
                                edgecolor="black", lw=0.2))
    ax2.set_xlim((a - t0) / 3600.0, (b - t0) / 3600.0)
    ax2.set_ylim(0, w.machine)
    ax2.set_xlabel("time since first submit (h)")
    ax2.set_ylabel("nodes")
    ax2.set_title("Gantt chart (jobs drawn on the lowest free rows; rows are not node ids)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    log.info("plot written to %s", path)
