"""Seed 001 (I/O mapping and scheduling, ICS 2020) §6.2 rebuilt: Make-Pack with I/O sensibility S = 1 and
S = alpha against First-Fit on synthetic workloads, on 1 I/O node and on 1, 3 and 5 I/O nodes (LPT)."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from malleable.controller.sched._iomap import ALPHA_GRID, App, generate_workload, io_load, make_pack
from malleable.controller.sched._iomap_sim import simulate

from ._common import Report, Row

__all__ = ["STRATEGIES", "exp_001", "run_workload"]

log = logging.getLogger(__name__)

P = 2048      # compute nodes per I/O node (§6.2)
B = 1.0       # normalised I/O bandwidth (§6.2)
R_SET = (1, 3, 5)
STRATEGIES: dict[str, tuple[str, str]] = {
    # name: (sensibility: "inf", "1" or "alpha", I/O priority order)
    "first-fit": ("inf", "fifo"),
    "S=1": ("1", "fifo"),
    "S=alpha": ("alpha", "fifo"),
    "S=1 longest-remaining": ("1", "longest-remaining"),
}
"""The §6.2.3 variants: First-Fit is Make-Pack with S = inf, all use FIFO unless named."""


def run_workload(apps: tuple[App, ...], r_set: tuple[int, ...] = R_SET) -> dict[str, Any]:
    """Every strategy on one workload: per strategy its number of packs, makespan, the mean over packs of
    the pack's worst stretch, the worst stretch, robustness and the (exec, delay, idle) node-time split on
    one I/O node; the makespan on each ``r_set`` I/O node count for First-Fit and S = 1."""
    alpha = io_load(apps, P, B)
    out: dict[str, Any] = {"alpha": alpha, "apps": len(apps)}
    for name, (sens, prio) in STRATEGIES.items():
        s = {"inf": math.inf, "1": 1.0, "alpha": alpha}[sens]
        packs = make_pack(apps, s, P, B)
        sc = simulate(packs, 1, prio, B, P)
        m: dict[str, Any] = {"packs": len(packs), "makespan": sc.makespan,
                             "stretch": sc.mean_pack_max_stretch(), "max_stretch": max(sc.stretch().values()),
                             "robustness": sc.robustness(), "split": sc.time_split()}
        if name in ("first-fit", "S=1"):
            m["makespan_r"] = {r: (sc.makespan if r == 1 else simulate(packs, r, prio, B, P).makespan)
                               for r in r_set}
        out[name] = m
    return out


def _gmean(x: list[float]) -> float:
    return float(np.exp(np.mean(np.log(x)))) if x else math.nan


def _bands(alpha: np.ndarray, vals: np.ndarray) -> str:
    parts = []
    for lo, hi in ((0.0, 1.0), (1.0, 3.0), (3.0, math.inf)):
        sel = (alpha >= lo) & (alpha < hi)
        if sel.any():
            label = f"a<{hi:g}" if lo == 0 else (f"a>={lo:g}" if math.isinf(hi) else f"{lo:g}-{hi:g}")
            parts.append(f"{label}: {_gmean(vals[sel].tolist()):.2f}")
    return ", ".join(parts)


def exp_001(out: Path, quick: bool) -> Report:
    grid = (0.5, 1.0, 2.0, 4.0, 8.0) if quick else ALPHA_GRID
    reps = 2 if quick else 10
    iters = (25, 100) if quick else (250, 1000)
    rep = Report("001", "seed 001 §6.2: Make-Pack (S = 1, S = alpha) vs First-Fit, 1 to 5 I/O nodes", [
        f"P = {P} compute nodes per I/O node, b = 1 (§6.2); alpha_gen in {{{', '.join(f'{a:g}' for a in grid)}}}"
        f" ('1...10' read as steps of 1), {reps} workloads each, seeded; results against each workload's actual "
        "I/O load alpha (Eq. 6)" + ("; QUICK: 25-100 iterations per application instead of 250-1000" if quick
                                     else ""),
        "generator (§6.2.2) choices: I/O load v/w ~ normal(0.1 or 0.9, standard deviation 0.1) truncated on "
        "[0.01, 1]; round(beta n) random applications are low-I/O; Q_i from the maximum-entropy distribution "
        "on {2^0..2^11} with the paper's mean Qbar",
        "applications: compute then I/O in each iteration; all released at time 0; exclusive, non-preemptive "
        "I/O at bandwidth b; event-driven simulation (the paper's is time-stepped, step not given)",
        "First-Fit = Make-Pack with S = inf + FIFO (§6.2.3); priority ties: earlier request, then lower id",
        "stretch = (C_i - pack start) / T_i(b), reported as the mean over packs of each pack's worst stretch "
        "(footnote 4); ratios are geometric means over workloads",
        "robustness = makespan / makespan with every pack lasting its contention-free length T^Pack (Fig. 13)",
        "several I/O nodes: the same packs distributed by LPT on T^Pack (§6.2.4), S = 1 and First-Fit, FIFO"])
    rows: list[dict[str, Any]] = []
    for gi, ag in enumerate(grid):
        for k in range(reps):
            apps = generate_workload(np.random.default_rng([1, gi, k]), ag, P, B, iterations=iters)
            res = run_workload(apps)
            res["alpha_gen"] = ag
            rows.append(res)
            log.info("001: alpha_gen %g #%d: alpha %.2f, %d apps", ag, k, res["alpha"], len(apps))
    rep.runs["workloads"] = rows
    alpha = np.array([x["alpha"] for x in rows])

    def col(name: str, key: str) -> np.ndarray:
        return np.array([x[name][key] for x in rows], dtype=float)

    def ratio(name: str, key: str, base: str = "first-fit") -> np.ndarray:
        return col(name, key) / col(base, key)

    ms1, st1 = ratio("S=1", "makespan"), ratio("S=1", "stretch")
    msa, sta = ratio("S=alpha", "makespan"), ratio("S=alpha", "stretch")
    add = rep.rows.append
    add(Row("1 I/O node, S=1 / First-Fit", "makespan", "~1.10 (average 10% overhead, Fig. 10)",
            f"{_gmean(ms1.tolist()):.3f} geo, {ms1.mean():.3f} mean ({_bands(alpha, ms1)})"))
    add(Row("1 I/O node, S=1 / First-Fit", "stretch", "significant improvement (Fig. 11)",
            f"{_gmean(st1.tolist()):.2f} geo ({_bands(alpha, st1)})"))
    add(Row("1 I/O node, S=1", "stretch", "close to 1",
            f"mean {col('S=1', 'stretch').mean():.2f}, max {col('S=1', 'stretch').max():.2f}"))
    ffst = col("first-fit", "stretch")
    add(Row("1 I/O node, First-Fit", "stretch vs alpha", "grows with alpha",
            f"{_bands(alpha, ffst)}; max {ffst.max():.1f}"))
    add(Row("1 I/O node, S=alpha / First-Fit", "makespan, stretch", "less makespan loss, stretch mostly better",
            f"{_gmean(msa.tolist()):.3f}, {_gmean(sta.tolist()):.2f} (stretch better in "
            f"{100 * float((sta < 1).mean()):.0f}% of workloads)"))
    lr_m, lr_s = ratio("S=1 longest-remaining", "makespan", "S=1"), ratio("S=1 longest-remaining", "stretch", "S=1")
    add(Row("S=1 longest-remaining / S=1 FIFO", "makespan, stretch", "no visible impact",
            f"{_gmean(lr_m.tolist()):.3f}, {_gmean(lr_s.tolist()):.3f}"))
    pk1, pka = ratio("S=1", "packs"), ratio("S=alpha", "packs")
    add(Row("packs / First-Fit's", "S=1", "grows with alpha (Fig. 12)", _bands(alpha, pk1)))
    add(Row("packs / First-Fit's", "S=alpha", "smaller, roughly constant", _bands(alpha, pka)))
    for name, pub in (("S=1", "within 20% (<= 1.2)"), ("first-fit", "up to 1000% (~10-11)"),
                      ("S=alpha", "close to First-Fit")):
        rb = col(name, "robustness")
        add(Row(f"robustness {name}", "measured / ideal", pub, f"max {rb.max():.2f}, geo {_gmean(rb.tolist()):.2f}"))
    split = {n: np.array([x[n]["split"] for x in rows], dtype=float) for n in ("first-fit", "S=1")}
    tot = split["first-fit"].sum(axis=1)
    sh = {n: (split[n] / tot[:, None]).mean(axis=0) for n in split}
    add(Row("node time, share of First-Fit's", "exec/delay/idle", "S=1: ~25% moves delay -> idle, +10% idle",
            "FF " + "/".join(f"{v:.2f}" for v in sh["first-fit"]) + "; S=1 " + "/".join(f"{v:.2f}" for v in sh["S=1"])))
    rel = {}
    for r, pub in zip(R_SET, ("1.09", "0.71", "0.53")):
        x = np.array([w["S=1"]["makespan_r"][r] / w["first-fit"]["makespan_r"][r] for w in rows])
        rel[r] = x
        add(Row(f"{r} I/O node(s), S=1 / First-Fit", "makespan (geo mean)", pub,
                f"{_gmean(x.tolist()):.2f} (range {x.min():.2f}-{x.max():.2f})"))
    rep.runs["summary"] = {"makespan_ratio_s1": _gmean(ms1.tolist()), "stretch_ratio_s1": _gmean(st1.tolist()),
                           "relative_makespan_r": {r: _gmean(v.tolist()) for r, v in rel.items()}}
    _plot(out / "001.png", alpha, ms1, msa, st1, sta, {n: col(n, "robustness") for n in ("first-fit", "S=1",
                                                                                            "S=alpha")}, rel)
    return rep


def _plot(path: Path, alpha: np.ndarray, ms1: np.ndarray, msa: np.ndarray, st1: np.ndarray, sta: np.ndarray,
          rob: dict[str, np.ndarray], rel: dict[int, np.ndarray]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 2, figsize=(11, 8))
    a = ax[0, 0]
    a.scatter(alpha, ms1, s=10, label="S=1")
    a.scatter(alpha, msa, s=10, marker="x", label="S=alpha")
    a.axhline(1.10, color="tab:red", ls="--", lw=0.8, label="published mean (S=1)")
    a.set_title("makespan / First-Fit's (1 I/O node)", fontsize=9)
    a = ax[0, 1]
    a.scatter(alpha, st1, s=10, label="S=1")
    a.scatter(alpha, sta, s=10, marker="x", label="S=alpha")
    a.set_yscale("log")
    a.set_title("stretch / First-Fit's (mean of packs' worst stretch)", fontsize=9)
    a = ax[1, 0]
    for name, v in rob.items():
        a.scatter(alpha, v, s=10, label=name)
    a.axhline(1.2, color="tab:red", ls="--", lw=0.8, label="published S=1 bound")
    a.set_yscale("log")
    a.set_title("robustness: makespan / contention-free makespan", fontsize=9)
    a = ax[1, 1]
    for (r, v), pub, c in zip(rel.items(), (1.09, 0.71, 0.53), ("tab:blue", "tab:orange", "tab:green")):
        a.scatter(alpha, v, s=10, color=c, label=f"R={r} (geo {_gmean(v.tolist()):.2f})")
        a.axhline(pub, color=c, ls="--", lw=0.8)
    a.set_title("makespan S=1 / First-Fit on R I/O nodes (dashed: published geo means)", fontsize=9)
    for a in ax.flat:
        a.set_xscale("log")
        a.set_xlabel("I/O load alpha (Eq. 6)")
        a.legend(fontsize=7)
    fig.suptitle("seed 001: Make-Pack vs First-Fit (FIFO I/O, P = 2048, b = 1)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
