"""Shared parts of the published-vs-ours experiments: a recorder of per-job node sets over time, the report
record, its text table, JSON file and plots."""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Hashable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from malleable.controller.sched._model import Decision, Interrupt, Policy, ResizeJob, Snapshot, StartJob
from malleable.controller.sim._engine import SimResult

__all__ = ["Recorder", "Report", "Row", "jobs_per_node", "pct", "plot_bars", "plot_timelines", "result_metrics"]

log = logging.getLogger(__name__)


class Recorder:
    """Wraps a policy and records which nodes every job holds after each pass (exact: between passes sizes
    change only through job ends and failures, and both cause a pass).

    ``segments`` lists ``(job id, t0, t1, nodes)`` once :meth:`close` is called with the end of the run.
    """

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.passes: list[tuple[float, dict[int, tuple[Hashable, ...]]]] = []
        self.segments: list[tuple[int, float, float, tuple[Hashable, ...]]] = []

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

    def busy(self) -> tuple[np.ndarray, np.ndarray]:
        """Busy nodes as a step function ``(times, busy)`` from the segments."""
        ev: dict[float, int] = {}
        for _, t0, t1, nodes in self.segments:
            ev[t0] = ev.get(t0, 0) + len(nodes)
            ev[t1] = ev.get(t1, 0) - len(nodes)
        ts = np.array(sorted(ev))
        return ts, np.cumsum([ev[t] for t in ts])


def jobs_per_node(segments: list[tuple[int, float, float, tuple[Hashable, ...]]]) -> float:
    """Mean number of distinct jobs that ran on a node (over the nodes that ran any job)."""
    per: dict[Hashable, set[int]] = {}
    for jid, _, _, nodes in segments:
        for x in nodes:
            per.setdefault(x, set()).add(jid)
    return float(np.mean([len(s) for s in per.values()])) if per else 0.0


@dataclass(slots=True)
class Row:
    """One line of a published-vs-ours table."""

    scenario: str
    metric: str
    published: str
    ours: str
    note: str = ""


@dataclass(slots=True)
class Report:
    """The outcome of one experiment: assumptions, the table, and raw numbers per run."""

    name: str
    title: str
    assumptions: list[str]
    rows: list[Row] = field(default_factory=list)
    runs: dict[str, Any] = field(default_factory=dict)

    def table(self) -> str:
        """The table as aligned text, assumptions first."""
        lines = [f"== {self.name}: {self.title}", "assumptions:"]
        lines += [f"  - {a}" for a in self.assumptions]
        heads = ("scenario", "metric", "published", "ours", "note")
        cells = [heads] + [(r.scenario, r.metric, r.published, r.ours, r.note) for r in self.rows]
        widths = [max(len(c[i]) for c in cells) for i in range(4)]
        for c in cells:
            lines.append("  ".join(c[i].ljust(widths[i]) for i in range(4)) + ("  " + c[4] if c[4] else ""))
        return "\n".join(lines)

    def write(self, out: str | os.PathLike[str]) -> Path:
        """Write ``<out>/<name>.json`` (returns its path)."""
        d = Path(out)
        d.mkdir(parents=True, exist_ok=True)
        p = d / f"{self.name}.json"
        body = {"name": self.name, "title": self.title, "assumptions": self.assumptions,
                "rows": [asdict(r) for r in self.rows], "runs": self.runs}
        p.write_text(json.dumps(body, indent=1, default=_jsonable) + "\n")
        return p


def _jsonable(x: Any) -> Any:
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def pct(new: float, old: float) -> str:
    """Relative change of ``new`` against ``old`` in percent, as text (negative = a reduction)."""
    if not old or math.isnan(old) or math.isnan(new):
        return "n/a"
    return f"{100.0 * (new - old) / old:+.1f}%"


def plot_timelines(path: str | os.PathLike[str], panels: list[tuple[str, Recorder, int]], title: str) -> None:
    """One panel per run: a Gantt chart of node sets over time (resizes visible) and the busy-node curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 2.2 * len(panels) + 0.8), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for ax, (label, rec, machine) in zip(axes[:, 0], panels):
        index: dict[Hashable, int] = {}
        tmax = 0.0
        for jid, t0, t1, nodes in rec.segments:
            for x in nodes:
                row = index.setdefault(x, len(index)) if not isinstance(x, int) else x
                ax.add_patch(Rectangle((t0, row), t1 - t0, 1, facecolor=cmap(jid % 10), edgecolor="white", lw=0.3))
            ax.text((t0 + t1) / 2, min(nodes) if all(isinstance(x, int) for x in nodes) else 0, f"J{jid}",
                    fontsize=6, va="bottom", ha="center")
            tmax = max(tmax, t1)
        ts, busy = rec.busy()
        if len(ts):
            ax.step(ts, busy, where="post", color="black", lw=0.8, label="busy nodes")
        ax.set_xlim(0, tmax * 1.02 or 1)
        ax.set_ylim(0, machine)
        ax.set_ylabel("node")
        ax.set_title(label, fontsize=9)
    axes[-1, 0].set_xlabel("time (s)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_bars(path: str | os.PathLike[str], labels: list[str], ours: list[float], published: list[float | None],
              ylabel: str, title: str) -> None:
    """Bars for our values with the published values as markers (where the document gives one)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(labels) + 2), 4.5))
    x = np.arange(len(labels))
    ax.bar(x, ours, color="tab:blue", label="ours")
    px = [i for i, p in enumerate(published) if p is not None]
    ax.scatter(px, [published[i] for i in px], color="tab:red", marker="D", zorder=3, label="published")
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(ylabel)
    ax.axhline(0, color="black", lw=0.5)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def result_metrics(result: SimResult) -> dict[str, float]:
    """Mean wait, mean turnaround (response), mean execution time, makespan (from first submit), utilisation."""
    w = result.workload
    makespan = float(result.end.max() - w.submit.min())
    return {"mean_wait": float(result.wait.mean()), "mean_tat": float((result.end - w.submit).mean()),
            "mean_exec": float((result.end - result.start).mean()), "makespan": makespan,
            "utilization": float(result.area.sum()) / (w.machine * makespan) if makespan > 0 else 0.0,
            "resizes": int(result.resizes.sum())}
