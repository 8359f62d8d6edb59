"""Seed 004's evaluation rebuilt: burst-buffer-aware scheduling of the KTH-SP2 log (fcfs, fcfs-easy, filler,
fcfs-bb, sjf-bb, plan-1, plan-2), on the whole log and on its 16 three-week parts, normalised to sjf-bb, plus the
sensitivity to the burst-buffer request distribution the paper does not give."""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from malleable.controller.sched._plan import Plan, PlanConfig, PlanStats
from malleable.controller.sched._registry import get_policy
from malleable.controller.sim._ioengine import simulate_io
from malleable.controller.sim._metrics import bounded_slowdown
from malleable.controller.sim._workload import Workload

from ._common import Report, Row
from ._io004 import ASSUMPTIONS, LINK_BW, PFS_BW, bb_workload, kth, parts

__all__ = ["POLICIES_004", "exp_004", "run_004"]

log = logging.getLogger(__name__)

POLICIES_004 = ("fcfs", "fcfs-easy", "filler", "fcfs-bb", "sjf-bb", "plan-1", "plan-2")
TAU = 600.0                 # bounded slowdown threshold: 10 minutes
SERIES = ("fcfs-easy", "fcfs-bb")       # runs whose bandwidth and buffer curves are plotted
SERIES_SPAN = 14 * 86400.0  # first two weeks


def run_004(w: Workload, policy: str, series: bool = False) -> dict[str, Any]:
    """One run of ``policy`` on ``w`` (a workload with burst buffers and phases): its metrics (and curves)."""
    stats = PlanStats()
    if policy.startswith("plan-"):
        pol: Any = Plan(PlanConfig(alpha=float(policy[5:])), stats)
    else:
        pol = get_policy(policy)
    t0 = time.perf_counter()
    r = simulate_io(w, pol, pfs_bw=PFS_BW, link_bw=LINK_BW, name=policy)
    res = r.result
    out: dict[str, Any] = {
        "policy": policy, "jobs": len(w), "seconds": time.perf_counter() - t0,
        "mean_wait_h": float(res.wait.mean()) / 3600, "mean_bsld": float(bounded_slowdown(res, TAU).mean()),
        "p99_wait_h": float(np.percentile(res.wait, 99)) / 3600, "max_wait_h": float(res.wait.max()) / 3600,
        "makespan_h": float(res.end.max() - w.submit.min()) / 3600,
        "utilization": float(res.area.sum()) / (w.machine * float(res.end.max() - w.submit.min())),
        "io_h": float(r.io_time.sum()) / 3600, "passes": res.passes,
        "plan_passes": stats.passes, "plan_evaluations": stats.evaluations,
    }
    if series:
        t0 = float(w.submit[0])
        out["pfs"] = _hourly(*_cut(np.asarray(r.pfs[0]), np.asarray(r.pfs[1]), t0))
        out["bb"] = _hourly(*_cut(np.asarray(r.bb[0]), np.asarray(r.bb[1]), t0))
        out["busy"] = _busy(res.start, res.end, res.size, t0)
    return out


def _cut(t: np.ndarray, v: np.ndarray, t0: float) -> tuple[np.ndarray, np.ndarray]:
    """The step function ``(t, v)`` over the first :data:`SERIES_SPAN` after ``t0``, times relative to ``t0``."""
    before = v[t < t0]
    keep = (t >= t0) & (t <= t0 + SERIES_SPAN)
    return (np.concatenate(([0.0], t[keep] - t0)),
            np.concatenate(([float(before[-1]) if len(before) else 0.0], v[keep])))


def _busy(start: np.ndarray, end: np.ndarray, size: np.ndarray, t0: float) -> list[list[float]]:
    """Busy processors as a step function (at equal times ends count before starts; one value per time)."""
    t = np.concatenate((end, start))
    d = np.concatenate((-size, size))
    o = np.lexsort((np.arange(len(t)), t))
    ts, busy = t[o], np.cumsum(d[o]).astype(float)
    last = np.append(ts[1:] != ts[:-1], True)
    a, b = _cut(ts[last], busy[last], t0)
    return [a.tolist(), b.tolist()]


def _hourly(t: np.ndarray, v: np.ndarray) -> list[list[float]]:
    """The time average of a step function over each hour (readable where the raw curve switches often)."""
    edges = np.arange(t[0], t[-1] + 3600.0, 3600.0)
    if len(edges) < 2:
        return [t.tolist(), v.tolist()]
    dt = np.diff(np.append(t, t[-1]))
    area = np.cumsum(np.concatenate(([0.0], v * dt)))
    at = np.interp(edges, np.append(t, t[-1] + 1e-9), area)
    return [edges[:-1].tolist(), (np.diff(at) / 3600.0).tolist()]


def _task(args: tuple[str, int, int, float, str, bool]) -> tuple[tuple[str, int, float], dict[str, Any]]:
    """A worker's run: (scope, part or -1, seed, sigma scale, policy, series)."""
    scope, part, seed, sigma, policy, series = args
    base = kth()
    w = base if part < 0 else parts(base)[part]
    out = run_004(bb_workload(w, seed=seed, sigma_scale=sigma), policy, series)
    out.update(scope=scope, part=part, sigma=sigma)
    return (scope, part, sigma), out


def exp_004(out: Path, quick: bool) -> Report:
    """The experiment (``quick``: two parts, the fast policies and plan-2, no sensitivity runs)."""
    rep = Report("004", "burst-buffer-aware scheduling on KTH-SP2: mean wait and bounded slowdown vs sjf-bb",
                 ASSUMPTIONS + [f"bounded slowdown with tau = {TAU / 60:g} min; waits in hours; plan-α: r 0.9, "
                                "N 30, M 6, exhaustive up to 5 jobs, holes allowed; seed 0",
                                "parts: 16 consecutive three-week windows of the log, each replayed alone"])
    tasks: list[tuple[str, int, int, float, str, bool]] = []
    pols = ("fcfs-easy", "fcfs-bb", "sjf-bb", "filler", "plan-2") if quick else POLICIES_004
    n_parts = 2 if quick else 16
    if not quick:
        tasks += [("whole", -1, 0, 1.0, p, p in SERIES) for p in pols]
    tasks += [("parts", k, 0, 1.0, p, quick and k == 0 and p in SERIES) for k in range(n_parts) for p in pols]
    if not quick:
        tasks += [("sigma", k, 0, s, p, False) for s in (0.5, 1.5) for k in range(4)
                  for p in ("fcfs-bb", "sjf-bb", "filler", "plan-2")]
    runs: dict[tuple[str, int, float], dict[str, dict[str, Any]]] = {}
    t0 = time.perf_counter()
    workers = min(len(tasks), os.cpu_count() or 1)
    tasks.sort(key=lambda t: 0 if t[4].startswith("plan") or t[0] == "whole" else 1)   # long runs first
    with ProcessPoolExecutor(workers) as ex:
        for k, ((scope, part, sigma), r) in enumerate(ex.map(_task, tasks), 1):
            runs.setdefault((scope, part, sigma), {})[r["policy"]] = r
            log.info("004: %d/%d runs done (%s part %d sigma x%g %s: %.0f s)", k, len(tasks), scope, part, sigma,
                     r["policy"], r["seconds"])
    wall = time.perf_counter() - t0
    _rows(rep, runs, pols, quick)
    rep.runs = {f"{s}:{p}:{g}": v for (s, p, g), v in runs.items()}
    rep.runs["wall_seconds"] = wall
    _plot(out / "004.png", runs, pols, quick)
    return rep


def _norm(by: dict[str, dict[str, Any]], key: str) -> dict[str, float]:
    ref = by["sjf-bb"][key]
    return {p: r[key] / ref if ref else float("nan") for p, r in by.items()}


def _rows(rep: Report, runs: dict, pols: tuple[str, ...], quick: bool) -> None:
    whole = runs.get(("whole", -1, 1.0))
    if whole:
        wn, bn = _norm(whole, "mean_wait_h"), _norm(whole, "mean_bsld")
        for p in pols:
            r = whole[p]
            rep.rows.append(Row(f"whole log, {p}", "mean wait / bounded slowdown",
                                "", f"{r['mean_wait_h']:.2f} h ({wn[p]:.2f}x sjf-bb) / {r['mean_bsld']:.1f} "
                                f"({bn[p]:.2f}x)", f"{r['seconds']:.0f} s"))
        best_plan = min(("plan-1", "plan-2"), key=lambda p: whole[p]["mean_wait_h"])
        rep.rows.append(Row("whole log, plan-based vs sjf-bb", "mean wait", "more than -20%",
                            f"{100 * (wn[best_plan] - 1):+.1f}% ({best_plan})"))
        rep.rows.append(Row("whole log, plan-based vs sjf-bb", "mean bounded slowdown", "-27%",
                            f"{100 * (bn[best_plan] - 1):+.1f}% ({best_plan})"))
        others = [whole[p]["mean_wait_h"] for p in pols if p not in ("fcfs", "fcfs-easy")]
        rep.rows.append(Row("whole log, fcfs-easy vs the others (fcfs excluded)", "mean wait",
                            "two orders of magnitude higher",
                            f"{whole['fcfs-easy']['mean_wait_h'] / float(np.mean(others)):.0f}x their mean"))
        rep.rows.append(Row("whole log, sjf-bb vs fcfs-bb", "mean wait", "-4.5%",
                            f"{100 * (whole['sjf-bb']['mean_wait_h'] / whole['fcfs-bb']['mean_wait_h'] - 1):+.1f}%"))
        p2 = whole["plan-2"]
        rep.rows.append(Row("whole log, plan-2", "plan evaluations per planning pass", "189 at most (8742 for "
                            "Zheng et al.)", f"{p2['plan_evaluations'] / max(1, p2['plan_passes']):.0f} on average "
                            f"({p2['plan_passes']} passes)"))
    keys = sorted(k for k in runs if k[0] == "parts")
    if keys:
        norm = {p: [_norm(runs[k], "mean_wait_h")[p] for k in keys] for p in pols}
        for p in pols:
            v = np.array(norm[p])
            rep.rows.append(Row(f"{len(keys)} parts, {p}", "mean wait / sjf-bb's (geometric mean, range)", "",
                                f"{float(np.exp(np.mean(np.log(v)))):.2f} ({v.min():.2f}-{v.max():.2f})"))
        if "plan-1" in pols:
            wins = sum(runs[k]["plan-1"]["mean_wait_h"] < runs[k]["plan-2"]["mean_wait_h"] for k in keys)
            rep.rows.append(Row(f"{len(keys)} parts", "parts where plan-1 beats plan-2", "plan-1 better on the "
                                "shorter workloads", f"{wins} of {len(keys)}"))
        fill = sum(runs[k]["filler"]["mean_wait_h"] > min(runs[k]["fcfs-bb"]["mean_wait_h"],
                                                          runs[k]["sjf-bb"]["mean_wait_h"]) for k in keys)
        rep.rows.append(Row(f"{len(keys)} parts", "parts where filler's mean wait is above fcfs-bb/sjf-bb",
                            "mostly", f"{fill} of {len(keys)}"))
    for s in (0.5, 1.5):
        ks = sorted(k for k in runs if k[0] == "sigma" and k[2] == s)
        if ks:
            v = [_norm(runs[k], "mean_wait_h")["plan-2"] for k in ks]
            f = [_norm(runs[k], "mean_wait_h")["fcfs-bb"] for k in ks]
            rep.rows.append(Row(f"parts 1-{len(ks)}, log-normal sigma x{s:g}", "mean wait plan-2 / fcfs-bb vs "
                                "sjf-bb (geometric mean)", "not studied",
                                f"{float(np.exp(np.mean(np.log(v)))):.2f} / {float(np.exp(np.mean(np.log(f)))):.2f}"))


def _plot(path: Path, runs: dict, pols: tuple[str, ...], quick: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 2, figsize=(12, 8))
    whole = runs.get(("whole", -1, 1.0)) or runs.get(("parts", 0, 1.0))
    x = np.arange(len(pols))
    a = ax[0, 0]
    wn, bn = _norm(whole, "mean_wait_h"), _norm(whole, "mean_bsld")
    a.bar(x - 0.2, [wn[p] for p in pols], 0.4, label="mean wait")
    a.bar(x + 0.2, [bn[p] for p in pols], 0.4, label="mean bounded slowdown")
    a.set_yscale("log")
    a.set_xticks(x)
    a.set_xticklabels(pols, rotation=30, fontsize=8)
    a.set_ylabel("relative to sjf-bb")
    a.set_title("whole log" if ("whole", -1, 1.0) in runs else "part 1", fontsize=9)
    a.legend(fontsize=8)
    a = ax[0, 1]
    keys = sorted(k for k in runs if k[0] == "parts")
    for p in pols:
        if p != "sjf-bb":
            a.plot([k[1] + 1 for k in keys], [_norm(runs[k], "mean_wait_h")[p] for k in keys], marker="o", ms=3,
                   label=p)
    a.axhline(1.0, color="black", lw=0.6)
    a.set_yscale("log")
    a.set_xlabel("three-week part")
    a.set_ylabel("mean wait / sjf-bb's")
    a.legend(fontsize=7)
    for p in SERIES:
        r = whole.get(p, {})
        if "pfs" in r:
            ax[1, 0].step(np.array(r["pfs"][0]) / 86400, np.array(r["pfs"][1]) / 1e9, where="post", lw=0.6,
                          label=f"{p}: file system GB/s")
            ax[1, 0].step(np.array(r["bb"][0]) / 86400, np.array(r["bb"][1]) / 1e12, where="post", lw=0.6,
                          label=f"{p}: buffer held TB")
            ax[1, 1].step(np.array(r["busy"][0]) / 86400, r["busy"][1], where="post", lw=0.6, label=p)
    ax[1, 0].set_xlabel("day (from the first submission)")
    ax[1, 0].set_title("file-system bandwidth in use and burst buffer held, hourly means (first two weeks)",
                       fontsize=9)
    ax[1, 0].legend(fontsize=7)
    ax[1, 1].set_xlabel("day (from the first submission)")
    ax[1, 1].set_ylabel("busy processors (of 96)")
    ax[1, 1].set_title("processors in use: the fcfs-easy barrier idles the machine", fontsize=9)
    ax[1, 1].legend(fontsize=7)
    fig.suptitle("seed 004 on KTH-SP2" + (" (quick)" if quick else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
