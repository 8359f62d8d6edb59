"""The report's figures as inline SVG (matplotlib, text kept as text): published values against ours with their
intervals, Gantt charts with resizes and interruptions, curves over time and distributions.

Every figure is 9 inches wide (about 860 px on a page) with 9-10 pt text, so it reads at its default size.
"""

from __future__ import annotations

import io
import math
import re
from typing import Any

import numpy as np

from malleable.controller.sim._plot import _spans

__all__ = ["claims_figure", "curves_figure", "distribution_figure", "gantt_figure"]

WIDTH = 9.0
PUBLISHED, OURS, CONTROL = "#c0392b", "#1f5fa8", "#7f8c8d"


def _plt():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "malleable-report", "font.size": 9.5,
                         "axes.titlesize": 10.5, "axes.labelsize": 9.5,
                         "legend.fontsize": 8.5, "xtick.labelsize": 9, "ytick.labelsize": 9,
                         "axes.spines.top": False, "axes.spines.right": False})
    return plt


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    _plt().close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    # scale with the page: drop the fixed size, keep the aspect ratio from the viewBox
    return re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"', r'<svg\1 class="fig"', text, count=1)


def _time_unit(span: float) -> tuple[float, str]:
    if span > 3 * 86400:
        return 86400.0, "days"
    if span > 3 * 3600:
        return 3600.0, "hours"
    if span > 3 * 60:
        return 60.0, "minutes"
    return 1.0, "seconds"


def _short(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def claims_figure(rows: list[dict[str, Any]], unit: str) -> str:
    """Published values (red diamonds) against ours (blue, with the 95 % interval) and the controls (grey) for
    the table rows with a published value in ``unit``."""
    plt = _plt()
    rows = [r for r in rows if r.get("pub_value") is not None and r["ours"]["n"] > 0]
    fig, ax = plt.subplots(figsize=(WIDTH, 0.34 * len(rows) + 1.1))
    y = np.arange(len(rows))[::-1]
    for yi, r in zip(y, rows, strict=True):
        o = r["ours"]
        ax.errorbar([o["mean"]], [yi], xerr=[[o["mean"] - o["lo"]], [o["hi"] - o["mean"]]], fmt="o", color=OURS,
                    ms=5, capsize=3, lw=1.4, label="ours (mean, 95% interval)" if yi == y[0] else None)
        for k, c in enumerate(r["controls"]):
            if c["n"] > 0:
                ax.errorbar([c["mean"]], [yi - 0.22], xerr=[[c["mean"] - c["lo"]], [c["hi"] - c["mean"]]], fmt="s",
                            color=CONTROL, ms=3.5, capsize=2, lw=0.9,
                            label="controls" if yi == y[0] and k == 0 else None)
        ax.plot([r["pub_value"]], [yi + 0.18], marker="D", color=PUBLISHED, ms=6, ls="none",
                label="published" if yi == y[0] else None)
    ax.set_yticks(y)
    ax.set_yticklabels([_short(f"{r['scenario']}: {r['metric']}", 70) for r in rows])
    ax.set_xlabel(unit.strip() or "value")
    ax.grid(axis="x", color="#dddddd", lw=0.6)
    ax.set_ylim(-0.8, len(rows) - 0.3)
    ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), frameon=False, ncols=3)
    ax.set_title(f"published vs ours ({unit.strip() or 'no unit'})", loc="left")
    return _svg(fig)


def gantt_figure(rec: dict[str, Any]) -> str:
    """A Gantt chart of the record's window: node rows when node sets are known (a resize changes the set),
    job rows otherwise (bar height = share of the job's largest size, a tick at each resize); an interruption
    (size 0: back in the queue) is a red cross and a dotted line until the restart."""
    plt = _plt()
    from matplotlib.patches import Rectangle

    g = rec["gantt"]
    jobs = g["jobs"]
    t0 = float(rec.get("t0", 0.0))
    ends = [s[1] for j in jobs for s in j["segments"]] or [1.0]
    starts = [s[0] for j in jobs for s in j["segments"]] or [0.0]
    scale, unit = _time_unit(max(ends) - min(min(starts), t0))
    nodes = g["rows"] == "nodes"
    n_rows = rec["machine"] if nodes else len(jobs)
    fig, ax = plt.subplots(figsize=(WIDTH, min(6.0, 1.4 + 0.16 * max(n_rows, 8))))
    cmap = plt.get_cmap("tab20")
    index: dict[Any, int] = {}
    order = sorted(jobs, key=lambda j: min(s[0] for s in j["segments"]))
    biggest = max([s[2] for j in jobs for s in j["segments"]] + [1])
    for k, j in enumerate(order):
        color = cmap(k % 20)
        for m, (a, b, size, ids) in enumerate(j["segments"]):
            x0, w = (a - t0) / scale, (b - a) / scale
            if size == 0:                               # interrupted: waiting to restart
                yk = (min(index.get(x, 0) for x in ids) if nodes and ids else n_rows - 1 - k)
                ax.plot([x0], [yk + 0.5], marker="x", color=PUBLISHED, ms=7, mew=2)
                ax.plot([x0, x0 + w], [yk + 0.5] * 2, ls=":", color=PUBLISHED, lw=1)
                continue
            if nodes:
                rows = sorted(index.setdefault(x, x if isinstance(x, int) else len(index)) for x in ids)
                for lo, hi in _spans(rows):
                    ax.add_patch(Rectangle((x0, lo), w, hi - lo + 1, facecolor=color, edgecolor="white", lw=0.4))
                ax.text(x0 + w / 2, rows[0] + (rows[-1] - rows[0] + 1) / 2, f"J{j['id']}", fontsize=7.5,
                        ha="center", va="center")
            else:
                yk = n_rows - 1 - k
                h = 0.2 + 0.7 * size / biggest
                ax.add_patch(Rectangle((x0, yk + 0.5 - h / 2), w, h, facecolor=color, edgecolor="black", lw=0.3))
                if m and j["segments"][m - 1][2] not in (0, size):
                    ax.plot([x0, x0], [yk + 0.05, yk + 0.95], color="black", lw=1.0)
    for t, jid in g.get("interruptions", []):
        _interrupted(ax, order, t, int(jid), t0, scale, nodes, index, n_rows)
    xmax = (max(ends) - t0) / scale
    ax.set_xlim(min(0.0, (min(starts) - t0) / scale), xmax * 1.01 or 1.0)
    ax.set_ylim(0, max(n_rows, 1))
    ax.set_xlabel(f"time since the first submission ({unit})")
    if nodes:
        ax.set_ylabel("node")
        ax.set_title(f"{rec['label']}: nodes held over time (a resize changes a job's node set)")
    else:
        ax.set_ylabel("job (first to start at the top)")
        ax.set_yticks([])
        ax.set_title(f"{rec['label']}: the first {len(jobs)} jobs to start\n(bar height: size, the largest "
                     f"{biggest} nodes; a tick marks a resize)")
    return _svg(fig)


def _interrupted(ax: Any, order: list[dict[str, Any]], t: float, jid: int, t0: float, scale: float, nodes: bool,
                 index: dict[Any, int], n_rows: int) -> None:
    """A red cross where job ``jid`` lost its nodes at ``t`` (on the nodes it held, or on its row)."""
    for k, j in enumerate(order):
        if j["id"] != jid:
            continue
        held = [s for s in j["segments"] if s[2] > 0 and s[0] < t <= s[1]] or [s for s in j["segments"] if s[2] > 0]
        if nodes and held and held[0][3]:
            rows = [index.get(x, 0) for x in held[0][3]]
            y = (min(rows) + max(rows) + 1) / 2
        else:
            y = n_rows - 1 - k + 0.5
        ax.plot([(t - t0) / scale], [y], marker="X", color=PUBLISHED, ms=11, mec="white", mew=1.2, zorder=5)
        ax.annotate("interrupted", ((t - t0) / scale, y), xytext=(6, 6), textcoords="offset points",
                    fontsize=8, color=PUBLISHED)
        return


def curves_figure(records: list[dict[str, Any]], key: str) -> str:
    """The curve ``key`` (utilisation, pfs, bb, ...) of every record that has it, on one panel."""
    plt = _plt()
    have = [r for r in records if key in r.get("curves", {}) and r["curves"][key]["t"]]
    c0 = have[0]["curves"][key]
    span = max(max(r["curves"][key]["t"]) - float(r.get("t0", 0.0)) for r in have)
    scale, unit = _time_unit(span)
    fig, ax = plt.subplots(figsize=(WIDTH, 3.0))
    for r in have:
        c = r["curves"][key]
        t = (np.asarray(c["t"]) - float(r.get("t0", 0.0))) / scale
        ax.step(t, c["y"], where="post", lw=1.1, label=_short(r["label"], 50))
    ax.set_xlabel(f"time since the first submission ({unit})")
    ax.set_ylabel(c0.get("unit", ""))
    ax.set_title(c0.get("title", key))
    ax.grid(color="#eeeeee", lw=0.6)
    if len(have) > 1:
        ax.legend(loc="best")
    return _svg(fig)


def distribution_figure(records: list[dict[str, Any]], key: str) -> str:
    """The distribution ``key`` (``wait`` or ``bsld``) of every record as a cumulative curve (log axis)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(WIDTH, 3.2))
    levels = None
    wait = key == "wait"
    for r in records:
        d = r.get("distributions", {}).get(key)
        if not d or not d["q"]:
            continue
        q = np.asarray(d["q"], dtype=float)
        levels = np.linspace(0, 1, len(q))
        if wait:
            q = q / 3600.0 if q.max() > 3 * 3600 else (q / 60.0 if q.max() > 180 else q)
        ax.step(np.maximum(q, 1e-3 if wait else 1.0), levels, where="post", lw=1.1, label=_short(r["label"], 50))
    if levels is None:
        ax.text(0.5, 0.5, "no distribution recorded", ha="center", transform=ax.transAxes)
    ax.set_xscale("log")
    ax.set_ylabel("share of the jobs")
    if wait:
        top = max((max(r["distributions"][key]["q"] or [0]) for r in records if key in r.get("distributions", {})),
                  default=0)
        unit = "hours" if top > 3 * 3600 else ("minutes" if top > 180 else "seconds")
        ax.set_xlabel(f"wait ({unit}, log scale; waits of 0 at the left edge)")
        ax.set_title("wait: cumulative distribution")
    else:
        tau = records[0].get("tau", math.nan) if records else math.nan
        ax.set_xlabel(f"bounded slowdown (tau = {tau:g} s, log scale)")
        ax.set_title("bounded slowdown: cumulative distribution")
    ax.grid(color="#eeeeee", lw=0.6)
    ax.legend(loc="lower right")
    return _svg(fig)
