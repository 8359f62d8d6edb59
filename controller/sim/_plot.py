"""Plots of a simulation: utilisation over time and a Gantt chart of a time window (matplotlib, Agg)."""

from __future__ import annotations

import logging
import os

import numpy as np

from ._metrics import utilization_curve
from ._result import SimResult

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
    cmap = plt.get_cmap("tab20")
    h = result.history
    with_nodes = h is not None and h.nodes is not None
    index = {x: i for i, x in enumerate(result.node_ids or range(w.machine))} if with_nodes else {}
    rows_free = np.full(w.machine, -np.inf)
    for n, i in enumerate(sel[np.argsort(result.start[sel], kind="stable")]):
        segs = result.segments(int(i))
        color = cmap(n % 20)
        for k, (s, p, nodes) in enumerate(segs):
            e = segs[k + 1][0] if k + 1 < len(segs) else float(result.end[i])
            if p == 0 or e <= s:
                continue
            if k:
                ax2.axvline((s - t0) / 3600.0, color="black", lw=0.3, alpha=0.5)    # a resize
            if with_nodes and nodes is not None:
                spans = _spans(sorted(index[x] for x in nodes))
            else:           # no node ids: stack on the lowest free rows (rows are not node ids then)
                free_rows = np.flatnonzero(rows_free <= s)
                if len(free_rows) < p:
                    continue
                rows_free[free_rows[:p]] = e
                spans = _spans(free_rows[:p].tolist())
            for lo, hi in spans:
                ax2.add_patch(Rectangle(((s - t0) / 3600.0, lo), (e - s) / 3600.0, hi - lo + 1, facecolor=color,
                                        edgecolor="black", lw=0.2))
    ax2.set_xlim((a - t0) / 3600.0, (b - t0) / 3600.0)
    ax2.set_ylim(0, w.machine)
    ax2.set_xlabel("time since first submit (h)")
    ax2.set_ylabel("node" if with_nodes else "nodes")
    ax2.set_title("Gantt chart: jobs on their nodes, vertical lines at resizes" if with_nodes else
                  "Gantt chart (no node ids recorded: jobs stacked on the lowest free rows), vertical lines at resizes")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    log.info("plot written to %s", path)


def _spans(idx: list[int]) -> list[tuple[int, int]]:
    """Sorted indices as runs ``(first, last)``."""
    out: list[tuple[int, int]] = []
    for x in idx:
        if out and out[-1][1] == x - 1:
            out[-1] = (out[-1][0], x)
        else:
            out.append((x, x))
    return out
