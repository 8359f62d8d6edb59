"""Seed 001 (I/O mapping and scheduling, ICS 2020) §6.2 rebuilt: Make-Pack with I/O sensibility S = 1 and
S = alpha against First-Fit on synthetic workloads, on 1 I/O node and on 1, 3 and 5 I/O nodes (LPT).

A seed draws one workload per generation target ``alpha_gen``; a seed's number is the geometric mean over its
workloads (ratios) or their maximum (the "up to" numbers), so the interval is over independent workload sets.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from malleable.controller.sched._iomap import ALPHA_GRID, App, generate_workload, io_load, make_pack
from malleable.controller.sched._iomap_sim import simulate

from ._common import about, exact
from ._spec import Claim, Deviation, Experiment, Run, Runs, Stat
from ._verdict import Above, Below, Near

__all__ = ["EXP_001", "STRATEGIES", "run_workload"]

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
QUICK_GRID = (0.5, 1.0, 2.0, 4.0, 8.0)


def run_workload(apps: tuple[App, ...], r_set: tuple[int, ...] = R_SET) -> dict[str, Any]:
    """Every strategy on one workload: per strategy its number of packs, makespan, the mean over packs of the
    pack's worst stretch, the worst stretch, robustness and the (exec, delay, idle) node-time split on one I/O
    node; the makespan on each ``r_set`` I/O node count for First-Fit and S = 1."""
    alpha = io_load(apps, P, B)
    out: dict[str, Any] = {"alpha": alpha, "apps": len(apps)}
    for name, (sens, prio) in STRATEGIES.items():
        s = {"inf": math.inf, "1": 1.0, "alpha": alpha}[sens]
        packs = make_pack(apps, s, P, B)
        sc = simulate(packs, 1, prio, B, P)
        m: dict[str, Any] = {"packs": len(packs), "makespan": sc.makespan,
                             "stretch": sc.mean_pack_max_stretch(), "max_stretch": max(sc.stretch().values()),
                             "robustness": sc.robustness(), "split": list(sc.time_split())}
        if name in ("first-fit", "S=1"):
            m["makespan_r"] = {str(r): (sc.makespan if r == 1 else simulate(packs, r, prio, B, P).makespan)
                               for r in r_set}
        out[name] = m
    return out


def _grid(quick: bool) -> tuple[float, ...]:
    return QUICK_GRID if quick else ALPHA_GRID


def _plan(seeds: int, quick: bool) -> list[Run]:
    return [Run("001", f"alpha_gen {ag:g}", "all strategies", s, quick, {"alpha_gen": ag, "gi": gi},
                cost=0.1 + ag / 10) for s in range(seeds) for gi, ag in enumerate(_grid(quick))]


def _simulate(run: Run) -> dict[str, Any]:
    iters = (25, 100) if run.quick else (250, 1000)
    ag = float(run.params["alpha_gen"])
    apps = generate_workload(np.random.default_rng([1, int(run.params["gi"]), run.seed]), ag, P, B,
                             iterations=iters)
    return run_workload(apps)


def _vals(runs: Runs, s: int, quick: bool, f: Any) -> list[float]:
    return [float(f(runs.metrics[(f"alpha_gen {ag:g}", "all strategies", s)])) for ag in _grid(quick)]


def _geo(quick: bool, f: Any) -> Stat:
    """The geometric mean over a seed's workloads of ``f(workload's metrics)``."""
    return lambda runs, s: float(np.exp(np.mean(np.log(_vals(runs, s, quick, f)))))


def _ratio(name: str, key: str, base: str = "first-fit") -> Any:
    return lambda m: m[name][key] / m[base][key]


def _band(quick: bool, f: Any) -> Stat:
    """The geometric mean of ``f`` over the workloads of I/O load alpha >= 3 over that of alpha < 1 (> 1: it
    grows with alpha)."""
    def stat(runs: Runs, s: int) -> float:
        ms = [runs.metrics[(f"alpha_gen {ag:g}", "all strategies", s)] for ag in _grid(quick)]
        hi = [f(m) for m in ms if m["alpha"] >= 3]
        lo = [f(m) for m in ms if m["alpha"] < 1]
        if not hi or not lo:
            raise KeyError("no workload in one of the bands")
        return float(np.exp(np.mean(np.log(hi)) - np.mean(np.log(lo))))
    return stat


def _max(quick: bool, f: Any) -> Stat:
    return lambda runs, s: max(_vals(runs, s, quick, f))


def _share(quick: bool, f: Any) -> Stat:
    return lambda runs, s: 100.0 * float(np.mean([x < 1 for x in _vals(runs, s, quick, f)]))


def _claims(quick: bool) -> list[Claim]:
    ms1, msa = _ratio("S=1", "makespan"), _ratio("S=alpha", "makespan")
    st1, sta = _ratio("S=1", "stretch"), _ratio("S=alpha", "stretch")
    out = [
        Claim("1 I/O node, S=1 / First-Fit", "makespan (geometric mean)", "~1.10 (average 10% overhead, Fig. 10)",
              about(1.10), _geo(quick, ms1), "", 3),
        Claim("1 I/O node, S=1 / First-Fit", "stretch (geometric mean)", "significant improvement (Fig. 11)",
              Below(1.0), _geo(quick, st1), "", 2),
        Claim("1 I/O node, S=1", "stretch (mean over workloads)", "close to 1", Near(1.0, 0.2),
              lambda runs, s: float(np.mean(_vals(runs, s, quick, lambda m: m["S=1"]["stretch"]))), "", 2,
              note="'close' read as within 20%"),
        Claim("1 I/O node, First-Fit", "stretch at alpha >= 3 over alpha < 1", "grows with alpha", Above(1.0),
              _band(quick, lambda m: m["first-fit"]["stretch"]), "x", 2),
        Claim("1 I/O node, S=alpha vs S=1", "makespan ratio S=1 - S=alpha", "less makespan loss than S=1",
              Above(0.0), lambda runs, s: _geo(quick, ms1)(runs, s) - _geo(quick, msa)(runs, s), "", 3),
        Claim("1 I/O node, S=alpha / First-Fit", "share of workloads with a better stretch", "stretch mostly better",
              Above(50.0), _share(quick, sta), "%", 0),
        Claim("S=1 longest-remaining / S=1 FIFO", "makespan (geometric mean)", "no visible impact",
              Near(1.0, 0.02), _geo(quick, _ratio("S=1 longest-remaining", "makespan", "S=1")), "", 3,
              note="'no visible impact' read as within 2%"),
        Claim("S=1 longest-remaining / S=1 FIFO", "stretch (geometric mean)", "no visible impact",
              Near(1.0, 0.02), _geo(quick, _ratio("S=1 longest-remaining", "stretch", "S=1")), "", 3),
        Claim("packs, S=1 / First-Fit", "at alpha >= 3 over alpha < 1", "grows with alpha (Fig. 12)", Above(1.0),
              _band(quick, _ratio("S=1", "packs")), "x", 2),
        Claim("packs, S=alpha / S=1", "geometric mean", "smaller than S=1's", Below(1.0),
              _geo(quick, _ratio("S=alpha", "packs", "S=1")), "", 2),
        Claim("robustness S=1", "worst measured / ideal", "within 20% (<= 1.2)", Below(1.205),
              _max(quick, lambda m: m["S=1"]["robustness"]), "", 2),
        Claim("robustness First-Fit", "worst measured / ideal", "up to 1000% (~10-11)", Near(10.5, 1.0),
              _max(quick, lambda m: m["first-fit"]["robustness"]), "", 1),
        Claim("robustness S=alpha / First-Fit", "geometric mean", "close to First-Fit", Near(1.0, 0.2),
              _geo(quick, _ratio("S=alpha", "robustness")), "", 2, note="'close' read as within 20%"),
    ]
    for r, pub in zip(R_SET, (1.09, 0.71, 0.53), strict=True):
        out.append(Claim(f"{r} I/O node(s), S=1 / First-Fit", "makespan (geometric mean)", f"{pub:g}",
                         exact(pub, 0.01), _geo(quick, lambda m, r=r: m["S=1"]["makespan_r"][str(r)] /
                                                m["first-fit"]["makespan_r"][str(r)]), "", 2))
    for k, part in enumerate(("exec", "delay", "idle")):
        for name in ("first-fit", "S=1"):
            out.append(Claim(f"node time, {name}", f"{part} share of First-Fit's total", "S=1: ~25% moves delay -> "
                             "idle, +10% idle" if k else "-", None,
                             lambda runs, s, k=k, name=name: float(np.mean(_vals(
                                 runs, s, quick, lambda m: m[name]["split"][k] / sum(m["first-fit"]["split"])))),
                             "", 2))
    return out


EXP_001 = Experiment(
    "001", "seed 001 §6.2: Make-Pack (S = 1, S = alpha) vs First-Fit, 1 to 5 I/O nodes",
    "the synthetic applications of each workload (one per alpha_gen per seed)",
    (f"P = {P} compute nodes per I/O node, b = 1 (§6.2); alpha_gen in {{0.5, 0.75, 1 ... 10}} ('1...10' read as "
     "steps of 1; quick: 0.5, 1, 2, 4, 8 and 25-100 iterations per application instead of 250-1000)",
     "generator (§6.2.2) choices: I/O load v/w ~ normal(0.1 or 0.9, standard deviation 0.1) truncated on [0.01, 1]; "
     "round(beta n) random applications are low-I/O; Q_i from the maximum-entropy distribution on {2^0..2^11} "
     "with the paper's mean Qbar",
     "applications: compute then I/O in each iteration; all released at time 0; exclusive, non-preemptive I/O at "
     "bandwidth b; event-driven simulation (the paper's is time-stepped, step not given)",
     "First-Fit = Make-Pack with S = inf + FIFO (§6.2.3); priority ties: earlier request, then lower id",
     "stretch = (C_i - pack start) / T_i(b), the mean over packs of each pack's worst stretch (footnote 4)",
     "robustness = makespan / makespan with every pack lasting its contention-free length T^Pack (Fig. 13)",
     "several I/O nodes: the same packs distributed by LPT on T^Pack (§6.2.4), S = 1 and First-Fit, FIFO"),
    (Deviation("simulation", "time-stepped (step not given)", "event-driven", "exact event times"),
     Deviation("workloads per point", "not given", "one workload per alpha_gen per seed", "the seeds give the "
               "interval over independent workload sets")),
    _plan, _simulate, _claims)
