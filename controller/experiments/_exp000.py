"""Seed 000 (ADMIRE D3.3) experiments: MEBF (Algorithm 1) and SFSJ node stealing."""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import numpy as np

from malleable.controller.sched import get_policy
from malleable.controller.sched._mebf000 import MEBF0, MEBF0Config
from malleable.controller.sched._model import Phase, PhaseKind
from malleable.controller.sched._speedup import amdahl, fixed_reconfig_cost
from malleable.controller.sim._engine import simulate
from malleable.controller.sim._ioengine import simulate_io
from malleable.controller.sim._workload import Workload

from ._common import Recorder, Report, Row, jobs_per_node, pct, plot_bars, plot_timelines, result_metrics
from ._exp003 import columns

__all__ = ["exp_000_mebf", "exp_000_sfsj", "failure_plan", "phased", "w000"]

log = logging.getLogger(__name__)


SERIAL_000 = {"compute": 0.02, "read": 0.20, "write": 0.15}
PHASES = (10, 25)           # compute phases per job, uniform (D3.3 Table 4.3's 10-25 repetitions)
LINK = 100e9 / 8            # D3.3 Table 4.1: 100 Gbit/s per node (unused by compute phases)
PFS = 48e9                  # D3.3 §4.2.5's file system (unused by compute phases)


def w000(n: int, model: str, seed: int = 1) -> Workload:
    """D3.3 §4.1.2 substitute: ``n`` malleable jobs at t=0 on 500 nodes; ``pref`` log-uniform in [2, 24]
    (about 4 jobs per node over 300 jobs under EASY, as D3.3's 4.1), ``min = ceil(pref / 2)``,
    ``max = min(500, 8 x pref)``, run times at ``pref`` uniform in [200, 500] min
    (exact estimates: "recorded" runs); Amdahl serial fraction by model (I/O phases through the shared PFS do
    not scale): compute 0.02, read 0.20, write 0.15; mixed = 50 % compute, 25 % read, 25 % write."""
    rng = np.random.default_rng(seed)
    pref = np.round(np.exp(rng.uniform(math.log(2), math.log(24), n))).astype(int)
    run = np.round(rng.uniform(200, 500, n)) * 60.0
    if model == "mixed":
        kinds = rng.choice(["compute", "read", "write"], size=n, p=[0.5, 0.25, 0.25])
    else:
        kinds = np.array([model] * n)
    rows = [(i + 1, 0.0, float(run[i]), float(run[i]), int(pref[i]), 2, math.ceil(pref[i] / 2),
             min(500, 8 * int(pref[i])), SERIAL_000[str(kinds[i])], 0.0) for i in range(n)]
    return columns(rows, 500, f"000-{model}-{n}")


def phased(w: Workload, seed: int = 2) -> Workload:
    """``w`` with an application model per job: its run time split into ``PHASES`` (uniform) compute phases of
    equal whole seconds (the rest in the last), a scheduling point after each but the last (ElastiSim's malleable
    jobs, as in D3.3's evaluation)."""
    rng = np.random.default_rng(seed)
    k = rng.integers(PHASES[0], PHASES[1] + 1, len(w))
    out = []
    for i in range(len(w)):
        n, run = int(k[i]), float(w.run[i])
        step = math.floor(run / n)        # whole seconds, the rest in the last phase: the sum is exactly the run
        out.append(tuple(Phase(PhaseKind.COMPUTE, float(step) if j < n - 1 else run - step * (n - 1), j < n - 1)
                         for j in range(n)))
    w.phases = out
    return w


def _reduction(e: dict[str, float], m: dict[str, float]) -> float:
    """Reduction of the mean execution time of ``m`` against ``e``, in percent (positive = shorter)."""
    return 100 * (e["mean_exec"] - m["mean_exec"]) / e["mean_exec"]


def _points_runs(rep: Report, sizes: tuple[int, ...], pub: dict[str, str], pref_min: bool = False) -> None:
    """The variant on the I/O-aware simulator: phased jobs, MEBF0 resizing only at scheduling points; beside it
    the same jobs without phases on the plain engine without a reconfiguration cost (the I/O-aware simulator
    charges none), so that the two differ only in the phases and points."""
    pol, plain = MEBF0(MEBF0Config(alpha=120.0, at_points=True)), MEBF0(MEBF0Config(alpha=120.0))
    for model in (("compute",) if pref_min else ("compute", "read", "write", "mixed")):
        best, best0 = -math.inf, -math.inf
        for n in sizes:
            w = w000(n, model)
            if pref_min:
                w.procs = w.min_procs.copy()
            wp = phased(w000(n, model))
            if pref_min:
                wp.procs = wp.min_procs.copy()
            kw = {"pfs_bw": PFS, "link_bw": LINK, "speedup": amdahl}
            e = result_metrics(simulate_io(wp, get_policy("easy"), name="easy", **kw).result)
            m = result_metrics(simulate_io(wp, pol, name="mebf0-points", **kw).result)
            e0 = result_metrics(simulate(w, get_policy("easy"), name="easy", speedup=amdahl))
            m0 = result_metrics(simulate(w, plain, name="mebf0", speedup=amdahl))
            tag = f"{model}-{n}-{'pref=min-' if pref_min else ''}"
            rep.runs[tag + "points"] = {"easy": e, "mebf0": m}
            rep.runs[tag + "no-cost"] = {"easy": e0, "mebf0": m0}
            best, best0 = max(best, _reduction(e, m)), max(best0, _reduction(e0, m0))
        scen = f"{model}, pref = min" if pref_min else f"{model}, phases + points"
        rep.rows.append(Row(scen, "avg execution time vs EASY (best of sizes)", f"up to {pub[model]}",
                            f"up to {-best:+.1f}% (no phases, no cost: {-best0:+.1f}%)"))


def exp_000_mebf(out: Path, quick: bool) -> Report:
    rep = Report("000-mebf", "D3.3 §4.1: MEBF (Algorithm 1, sf 0.20, gamma 1.24) vs EASY backfilling", [
        "500 nodes; all jobs malleable and submitted at t=0; synthetic jobs (see w000: pref 2-24 nodes, "
        "min pref/2, max 8 pref, 200-500 min at pref) - the deliverable gives no job sizes or loads",
        "application models as Amdahl serial fractions: compute 0.02, read 0.20, write 0.15, mixed 50/25/25",
        "reconfiguration cost: fixed alpha = 120 s per resize in the engine and in Eq. 4.2",
        "EASY runs the same jobs rigid at pref; 'execution time' = end - first start; jobs per node = distinct "
        "jobs that held a node, averaged over nodes",
        "'phases + points': the same jobs on the I/O-aware simulator, each split into 10-25 (uniform, D3.3 Table "
        "4.3's repetitions) equal compute phases with a scheduling point after each; MEBF0 resizes only jobs at "
        "a point (at_points); EASY on the same simulator; that simulator charges no reconfiguration cost, so "
        "beside it: the plain engine without one ('no phases, no cost')",
        "'pref = min' (sensitivity): the same runs with every job's preferred size set to its minimum (start "
        "small, be grown), run time at pref unchanged"])
    pub = {"compute": "-30.4%", "write": "-27.1%", "read": "-29.27%", "mixed": "-28.9%"}
    sizes = (100, 200) if quick else (100, 200, 300)
    pol = MEBF0(MEBF0Config(alpha=120.0))
    labels, ours, pubs = [], [], []
    panels = []
    for model in ("compute", "read", "write", "mixed"):
        best = None
        for n in sizes:
            w = w000(n, model)
            rec = model == "mixed"          # node-level recording is slow on 500 nodes: only where it is used
            re, rm = Recorder(get_policy("easy")), Recorder(pol)
            e = simulate(w, re if rec else get_policy("easy"), name="easy", speedup=amdahl)
            m = simulate(w, rm if rec else pol, name="mebf0", speedup=amdahl, reconfig_cost=fixed_reconfig_cost(120.0))
            me, mm = result_metrics(e), result_metrics(m)
            if rec:
                se, sm = re.close(float(e.end.max())), rm.close(float(m.end.max()))
                me["jobs_per_node"], mm["jobs_per_node"] = jobs_per_node(se), jobs_per_node(sm)
            rep.runs[f"{model}-{n}"] = {"easy": me, "mebf0": mm}
            red = 100 * (me["mean_exec"] - mm["mean_exec"]) / me["mean_exec"]
            best = red if best is None else max(best, red)
            labels.append(f"{model} {n}")
            ours.append(-red)   # change in %, negative = shorter
            pubs.append(None)
            if model == "mixed" and n == 100:
                panels = [(f"EASY, mixed, 100 jobs: makespan {me['makespan'] / 60:.0f} min", re, 500),
                          (f"MEBF (000), mixed, 100 jobs: makespan {mm['makespan'] / 60:.0f} min", rm, 500)]
        rep.rows.append(Row(model, "avg execution time vs EASY (best of sizes)", f"up to {pub[model]}",
                            f"up to {-best:+.1f}%"))
        pubs[-1] = float(pub[model].rstrip("%"))
    mx = rep.runs["mixed-100"]
    rep.rows.append(Row("mixed, 100 jobs", "makespan MEBF vs EASY", "<400 vs >700 min",
                        f"{mx['mebf0']['makespan'] / 60:.0f} vs {mx['easy']['makespan'] / 60:.0f} min"))
    k = f"mixed-{sizes[-1]}"
    rep.rows.append(Row(f"mixed, {sizes[-1]} jobs", "jobs per node MEBF vs EASY", ">6.4 vs 4.1 (300 jobs)",
                        f"{rep.runs[k]['mebf0']['jobs_per_node']:.1f} vs {rep.runs[k]['easy']['jobs_per_node']:.1f}"))
    for model in ("compute", "mixed"):
        x = rep.runs[f"{model}-{sizes[-1]}"]
        rep.rows.append(Row(f"{model}, {sizes[-1]} jobs", "avg turnaround vs EASY", "(not given)",
                            pct(x["mebf0"]["mean_tat"], x["easy"]["mean_tat"])))
    _points_runs(rep, sizes, pub)
    _points_runs(rep, sizes, pub, pref_min=True)
    plot_timelines(out / "000-mebf.png", panels, "D3.3 MEBF vs EASY, mixed workload, 100 jobs at t=0")
    plot_bars(out / "000-mebf-bars.png", labels, ours, pubs, "avg execution time change vs EASY (%)",
              "D3.3 §4.1: MEBF vs EASY (red: published best per model)")
    return rep


TOY = [(1, 0, 8, 8, 1), (2, 0, 5, 5, 1), (3, 0, 10, 10, 6), (4, 0, 10, 10, 6), (5, 0, 2, 2, 1)]


def _flows(w: Workload, end: np.ndarray) -> tuple[float, float, float]:
    flow = end - w.submit
    return float(flow.mean()), float(flow.max()), float((flow * w.procs).sum() / w.procs.sum())


def failure_plan(machine: int, t0: float, t1: float, mtbf: float, downtime: float,
                 seed: int) -> list[tuple[float, int, float]]:
    """Poisson node failures: system-wide mean time between failures ``mtbf`` (s), each on a random node."""
    rng = np.random.default_rng(seed)
    out, t = [], t0
    while True:
        t += rng.exponential(mtbf)
        if t >= t1:
            return out
        out.append((float(round(t)), int(rng.integers(machine)), downtime))


def exp_000_sfsj(out: Path, quick: bool) -> Report:
    from malleable.controller.sim._swf import read_swf

    n = 3000 if quick else 10000
    rep = Report("000-sfsj", "D3.3 §3.1: node stealing (SFSJ) vs BASELINE over conservative backfilling", [
        "toy example: Table 3.1 (8 nodes, P3 fails at t=1 for D=5, no checkpoints, no recovery cost)",
        f"trace: HPC2N (the development trace; processors as nodes), first {n} jobs; Poisson node failures, "
        "one per 6 h system-wide, downtime 1 h, on a random node; jobs restart from scratch",
        "flow = completion - release; node-weighted flow weights each job by its size",
        "D3.3 has no trace-driven SFSJ numbers (they are in its reference [13]): ours are reported alone"])
    w = Workload.from_jobs(TOY, 8, "toy")
    pub = {"baseline": (11.2, 25.0, 17.07), "sfsj": (12.2, 21.0, 14.73)}
    panels = []
    for name in ("baseline", "sfsj"):
        rec = Recorder(get_policy(name))
        r = simulate(w, rec, name=name, failures=[(1.0, 2, 5.0)])
        rec.close(float(r.end.max()))
        mean, mx, wt = _flows(w, r.end)
        p = pub[name]
        rep.rows.append(Row(f"toy, {name}", "mean / max / node-weighted flow", f"{p[0]} / {p[1]:g} / {p[2]}",
                            f"{mean:.1f} / {mx:g} / {wt:.2f}"))
        rep.runs[f"toy-{name}"] = {"end": r.end, "flows": [mean, mx, wt]}
        panels.append((f"toy, {name}: flows {[int(x) for x in r.end - w.submit]}", rec, 8))
    plot_timelines(out / "000-sfsj.png", panels, "D3.3 Table 3.1: P3 (row 2) fails at t=1 for 5 s")
    # the repository's cut of the trace (workloads/README.md), or the whole log where MALLEABLE_HPC2N names it
    path = Path(os.environ.get("MALLEABLE_HPC2N", Path(__file__).resolve().parents[2] / "workloads" /
                               "HPC2N-2002-2.1-cln-first20000.swf.gz"))
    if not path.exists():
        rep.rows.append(Row("trace", "-", "-", f"skipped: {path} not found"))
        return rep
    tw = read_swf(path, limit=n)
    fails = failure_plan(tw.machine, float(tw.submit[0]), float(tw.submit[-1]), 6 * 3600.0, 3600.0, seed=5)
    res = {}
    for name in ("baseline", "sfsj"):
        r = simulate(tw, name, failures=fails)
        mean, mx, wt = _flows(tw, r.end)
        res[name] = {"mean_flow": mean, "max_flow": mx, "weighted_flow": wt, "restarts": int(r.restarts.sum()),
                     "steals": int(r.decisions.get("Interrupt", 0)), "lost_node_hours": float(r.lost.sum()) / 3600,
                     "mean_wait": float(r.wait.mean())}
    rep.runs["trace"] = dict(res, failures=len(fails))
    b, s = res["baseline"], res["sfsj"]
    rep.rows.append(Row(f"HPC2N {n} jobs, {len(fails)} failures", "mean flow", "n/a ([13])",
                        f"{b['mean_flow']:.0f} -> {s['mean_flow']:.0f} s ({pct(s['mean_flow'], b['mean_flow'])})"))
    rep.rows.append(Row("", "max flow", "n/a", f"{b['max_flow']:.0f} -> {s['max_flow']:.0f} s"))
    rep.rows.append(Row("", "node-weighted flow", "n/a",
                        f"{b['weighted_flow']:.0f} -> {s['weighted_flow']:.0f} s "
                        f"({pct(s['weighted_flow'], b['weighted_flow'])})"))
    rep.rows.append(Row("", "steals / lost node-hours", "-",
                        f"{s['steals']} / {b['lost_node_hours']:.0f} -> {s['lost_node_hours']:.0f}"))
    return rep
