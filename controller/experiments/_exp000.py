"""Seed 000 (ADMIRE D3.3): MEBF (§4.1, Algorithm 1) against EASY, and SFSJ node stealing (§3.1) against BASELINE."""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from malleable.controller.sched import get_policy
from malleable.controller.sched._mebf000 import MEBF0, MEBF0Config
from malleable.controller.sched._model import Phase, PhaseKind
from malleable.controller.sched._speedup import amdahl, fixed_reconfig_cost
from malleable.controller.sim._engine import simulate
from malleable.controller.sim._ioengine import simulate_io
from malleable.controller.sim._workload import Workload

from ._common import Recorder, effect, exact, jobs_per_node, record, result_metrics, rigid_at
from ._exp003 import columns
from ._failures import failure_plan
from ._spec import Claim, Control, Deviation, Experiment, Run, Stat, change, value
from ._verdict import Above, Below

__all__ = ["EXP_MEBF", "EXP_SFSJ", "phased", "w000"]

log = logging.getLogger(__name__)

SERIAL_000 = {"compute": 0.02, "read": 0.20, "write": 0.15}
MODELS = ("compute", "read", "write", "mixed")
PHASES = (10, 25)           # compute phases per job, uniform (D3.3 Table 4.3's 10-25 repetitions)
LINK = 100e9 / 8            # D3.3 Table 4.1: 100 Gbit/s per node (unused by compute phases)
PFS = 48e9                  # D3.3 §4.2.5's file system (unused by compute phases)
ALPHA = 120.0               # reconfiguration cost per resize (s), in the engine and in Eq. 4.2


def w000(n: int, model: str, seed: int = 1) -> Workload:
    """D3.3 §4.1.2 substitute: ``n`` malleable jobs at t=0 on 500 nodes; ``pref`` log-uniform in [2, 24]
    (about 4 jobs per node over 300 jobs under EASY, as D3.3's 4.1), ``min = ceil(pref / 2)``,
    ``max = min(500, 8 x pref)``, run times at ``pref`` uniform in [200, 500] min (exact estimates: "recorded"
    runs); Amdahl serial fraction by model (I/O phases through the shared PFS do not scale): compute 0.02, read
    0.20, write 0.15; mixed = 50 % compute, 25 % read, 25 % write."""
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


# -- MEBF ----------------------------------------------------------------------------------------------------

VARIANTS = ("easy", "mebf0", "easy-min", "easy-max")
POINTS = ("easy, phases", "mebf0, phases + points", "mebf0, no cost")


def _sizes(quick: bool) -> tuple[int, ...]:
    return (100, 200) if quick else (100, 200, 300)


def _mebf_plan(seeds: int, quick: bool) -> list[Run]:
    runs = []
    big = _sizes(quick)[-1]
    for s in range(seeds):
        for model in MODELS:
            for n in _sizes(quick):
                case = f"{model} {n}"
                nodes = model == "mixed" and n in (100, big)        # node sets recorded only where they are used
                for v in VARIANTS + POINTS:
                    runs.append(Run("000-mebf", case, v, s, quick, {"model": model, "n": n, "nodes": nodes},
                                    detail=s == 0 and model == "mixed" and n == 100 and v in ("easy", "mebf0"),
                                    cost=n / 100 * (2.0 if nodes else 0.5)))
        for n in _sizes(quick):
            for v in ("easy", "mebf0", "easy, phases", "mebf0, phases + points"):
                runs.append(Run("000-mebf", f"compute {n} pref = min", v, s, quick,
                                {"model": "compute", "n": n, "pref_min": True}, cost=n / 200))
    return runs


def _mebf_sim(run: Run) -> dict[str, Any]:
    p = run.params
    w = w000(int(p["n"]), p["model"], seed=run.seed)
    if p.get("pref_min"):
        w.procs = w.min_procs.copy()
    v = run.variant
    if "phases" in v:
        wp = phased(w, seed=1000 + run.seed)
        pol = get_policy("easy") if v.startswith("easy") else MEBF0(MEBF0Config(alpha=ALPHA, at_points=True))
        r = simulate_io(wp, pol, name=v, pfs_bw=PFS, link_bw=LINK, speedup=amdahl).result
        return result_metrics(r)
    if v.startswith("easy-"):
        return result_metrics(simulate(rigid_at(w, v[5:], "amdahl"), get_policy("easy"), name=v, speedup=amdahl))
    pol = get_policy("easy") if v == "easy" else MEBF0(MEBF0Config(alpha=ALPHA))
    cost = fixed_reconfig_cost(ALPHA) if v == "mebf0" else fixed_reconfig_cost(0.0)
    rec = Recorder(pol) if p.get("nodes") else None
    r = simulate(w, rec or pol, name=v, speedup=amdahl, reconfig_cost=cost)
    m: dict[str, Any] = result_metrics(r)
    if rec is not None:
        if run.detail:
            m["record"] = record(r, f"{p['model']}, {p['n']} jobs, {'EASY' if v == 'easy' else 'MEBF (000)'}, "
                                    "seed 0", rec)
        else:
            rec.close(float(r.end.max()))
        m["jobs_per_node"] = jobs_per_node(rec.segments)
    return m


def _best_change(model: str, v: str, quick: bool, suffix: str = "", base: str = "easy") -> Stat:
    """The largest reduction of mean execution time against EASY over the sizes ("up to"), in percent."""
    cases = [f"{model} {n}{suffix}" for n in _sizes(quick)]
    return lambda runs, s: min(change(c, v, base, "mean_exec")(runs, s) for c in cases)


def _mebf_claims(quick: bool) -> list[Claim]:
    pub = {"compute": 30.4, "read": 29.27, "write": 27.1, "mixed": 28.9}
    step = {"compute": 0.1, "read": 0.01, "write": 0.1, "mixed": 0.1}
    out = []
    for model in MODELS:
        ctl = tuple(Control(f"rigid EASY at {w}", _best_change(model, f"easy-{w}", quick)) for w in ("min", "max"))
        out.append(Claim(model, "avg execution time vs EASY, best of the sizes", f"up to -{pub[model]:g}%",
                         effect(-pub[model], step[model]), _best_change(model, "mebf0", quick), "%", controls=ctl))
    for model in MODELS:
        out.append(Claim(f"{model}, phases + points", "avg execution time vs EASY, best of the sizes",
                         f"up to -{pub[model]:g}%", effect(-pub[model], step[model]),
                         _best_change(model, "mebf0, phases + points", quick, base="easy, phases"), "%",
                         controls=(Control("MEBF without phases and without cost",
                                           _best_change(model, "mebf0, no cost", quick)),),
                         note="resizes only at scheduling points between 10-25 phases (ElastiSim's jobs); that "
                              "simulator charges no reconfiguration cost"))
    out.append(Claim("compute, pref = min", "avg execution time vs EASY, best of the sizes", "up to -30.4%",
                     effect(-30.4, 0.1), _best_change("compute", "mebf0", quick, " pref = min"), "%",
                     note="sensitivity: every job asks for its minimum, so it starts small and is grown"))
    m = 1 / 60.0
    out += [
        Claim("mixed, 100 jobs", "makespan, MEBF", "< 400 min", Below(400.0), value("mixed 100", "mebf0", "makespan",
                                                                                    m), " min", 0),
        Claim("mixed, 100 jobs", "makespan, EASY", "> 700 min", Above(700.0), value("mixed 100", "easy", "makespan",
                                                                                    m), " min", 0),
        Claim("mixed, 100 jobs", "makespan MEBF vs EASY", "< -42.9% (derived)", Below(-42.9),
              change("mixed 100", "mebf0", "easy", "makespan"), "%",
              controls=tuple(Control(f"rigid EASY at {w}", change("mixed 100", f"easy-{w}", "easy", "makespan"))
                             for w in ("min", "max"))),
        Claim("mixed, 100 jobs", "utilisation MEBF - EASY", "higher (Fig. 4.4)", Above(0.0),
              lambda runs, s: 100 * (runs("mixed 100", "mebf0", s, "utilization")
                                     - runs("mixed 100", "easy", s, "utilization")), " pts"),
    ]
    big = _sizes(quick)[-1]
    out += [
        Claim(f"mixed, {big} jobs", "jobs per node, MEBF", "> 6.4 (300 jobs)", Above(6.4),
              value(f"mixed {big}", "mebf0", "jobs_per_node"), "", 2),
        Claim(f"mixed, {big} jobs", "jobs per node, EASY", "4.1 (300 jobs)", exact(4.1, 0.1),
              value(f"mixed {big}", "easy", "jobs_per_node"), "", 2),
    ]
    for model in ("compute", "mixed"):
        out.append(Claim(f"{model}, {big} jobs", "avg turnaround vs EASY", "(not given)", None,
                         change(f"{model} {big}", "mebf0", "easy", "mean_tat"), "%"))
    return out


EXP_MEBF = Experiment(
    "000-mebf", "D3.3 §4.1: MEBF (Algorithm 1, sf 0.20, gamma 1.24) vs EASY backfilling",
    "the synthetic jobs (preferred sizes, run times, application models of the mixed set) and the phase counts",
    ("500 nodes; all jobs malleable and submitted at t=0; synthetic jobs (pref 2-24 nodes log-uniform, min "
     "pref/2, max 8 pref, 200-500 min at pref) - the deliverable gives no job sizes or loads",
     "application models as Amdahl serial fractions: compute 0.02, read 0.20, write 0.15, mixed 50/25/25",
     "reconfiguration cost: fixed alpha = 120 s per resize in the engine and in Eq. 4.2",
     "EASY runs the same jobs rigid at pref; 'execution time' = end - first start; jobs per node = distinct "
     "jobs that held a node, averaged over nodes",
     "'phases + points': the same jobs on the I/O-aware simulator split into 10-25 equal compute phases with a "
     "scheduling point after each; MEBF resizes only jobs at a point; EASY on the same simulator",
     "controls: rigid EASY with every job at its minimum (or maximum) size, run time scaled by Amdahl"),
    (Deviation("workload", "D3.3's job mix (sizes, loads, application phases) is in figures not in the text",
               "synthetic jobs (assumptions)", "the main candidate for the gap in execution time"),
     Deviation("Algorithm 1", "damaged pseudo-code (spec §5)", "our reading in MEBF0's docstring",
               "shrink_scope / expand_scope 'all' are the other readings"),
     Deviation("application model", "setup phase (PFS read + scatter), iterative compute + PFS write",
               "Amdahl fractions by type (and compute phases in the points variant)",
               "I/O phases are not scheduled by MEBF; their effect is a poorer speedup")),
    _mebf_plan, _mebf_sim, _mebf_claims)


# -- SFSJ ----------------------------------------------------------------------------------------------------

TOY = [(1, 0, 8, 8, 1), (2, 0, 5, 5, 1), (3, 0, 10, 10, 6), (4, 0, 10, 10, 6), (5, 0, 2, 2, 1)]


def _flows(w: Workload, end: np.ndarray) -> tuple[float, float, float]:
    flow = end - w.submit
    return float(flow.mean()), float(flow.max()), float((flow * w.procs).sum() / w.procs.sum())


def _hpc2n() -> Path:
    """The repository's cut of the trace (workloads/README.md), or the whole log where MALLEABLE_HPC2N names it."""
    return Path(os.environ.get("MALLEABLE_HPC2N", Path(__file__).resolve().parents[2] / "workloads" /
                               "HPC2N-2002-2.1-cln-first20000.swf.gz"))


def _sfsj_plan(seeds: int, quick: bool) -> list[Run]:
    runs = [Run("000-sfsj", "toy", name, 0, quick, detail=True, cost=0.1) for name in ("baseline", "sfsj")]
    if _hpc2n().exists():
        n = 3000 if quick else 10000
        runs += [Run("000-sfsj", f"HPC2N {n} jobs", name, s, quick, {"n": n}, cost=n / 1000)
                 for s in range(seeds) for name in ("baseline", "sfsj")]
    return runs


def _sfsj_sim(run: Run) -> dict[str, Any]:
    from malleable.controller.sim._swf import read_swf

    if run.case == "toy":
        w = Workload.from_jobs(TOY, 8, "toy")
        rec = Recorder(get_policy(run.variant))
        r = simulate(w, rec, name=run.variant, failures=[(1.0, 2, 5.0)])
        mean, mx, wt = _flows(w, r.end)
        idle = w.machine * float(r.end.max()) - float(r.area.sum()) - 5.0      # node-seconds idle (P3 down 5 s)
        return {"mean_flow": mean, "max_flow": mx, "weighted_flow": wt, "idle_node_s": idle,
                "record": record(r, f"toy (Table 3.1), {run.variant.upper()}: P3 fails at t=1 for 5 s", rec, tau=1.0)}
    tw = read_swf(_hpc2n(), limit=int(run.params["n"]))
    fails = failure_plan(tw.machine, float(tw.submit[0]), float(tw.submit[-1]), 6 * 3600.0, 3600.0, seed=run.seed)
    r = simulate(tw, run.variant, failures=fails)
    mean, mx, wt = _flows(tw, r.end)
    assert r.restarts is not None and r.lost is not None
    return {"mean_flow": mean, "max_flow": mx, "weighted_flow": wt, "restarts": int(r.restarts.sum()),
            "steals": int(r.decisions.get("Interrupt", 0)), "lost_node_hours": float(r.lost.sum()) / 3600,
            "mean_wait": float(r.wait.mean()), "failures": len(fails)}


def _sfsj_claims(quick: bool) -> list[Claim]:
    out = []
    for name, pub in (("baseline", (11.2, 25.0, 17.07)), ("sfsj", (12.2, 21.0, 14.73))):
        for k, (metric, step) in enumerate((("mean_flow", 0.1), ("max_flow", 1), ("weighted_flow", 0.01))):
            out.append(Claim(f"toy, {name.upper()}", metric.replace("_", " "), f"{pub[k]:g}", exact(pub[k], step),
                             value("toy", name, metric), "", 2))
    out.append(Claim("toy", "idle node time, SFSJ - BASELINE", "decreases", Below(0.0),
                     lambda runs, s: runs("toy", "sfsj", s, "idle_node_s") - runs("toy", "baseline", s, "idle_node_s"),
                     " node-s", 0, note="idle: nodes up and unused until the last end"))
    n = 3000 if quick else 10000
    case = f"HPC2N {n} jobs"
    for metric in ("mean_flow", "max_flow", "weighted_flow", "mean_wait"):
        out.append(Claim(case, f"{metric.replace('_', ' ')}, SFSJ vs BASELINE", "n/a (in D3.3's reference [13])",
                         None, change(case, "sfsj", "baseline", metric), "%"))
    out.append(Claim(case, "steals by SFSJ", "-", None, value(case, "sfsj", "steals"), "", 0))
    out.append(Claim(case, "node failures", "-", None, value(case, "baseline", "failures"), "", 0))
    return out


EXP_SFSJ = Experiment(
    "000-sfsj", "D3.3 §3.1: node stealing (SFSJ) vs BASELINE over conservative backfilling",
    "the node failures of the trace runs (the toy example is fixed: one run)",
    ("toy example: Table 3.1 (8 nodes, P3 fails at t=1 for D=5, no checkpoints, no recovery cost)",
     "trace: HPC2N (the development trace; processors as nodes), first 10,000 jobs (quick: 3,000); Poisson node "
     "failures, one per 6 h system-wide, downtime 1 h, on a random node; jobs restart from scratch",
     "flow = completion - release; node-weighted flow weights each job by its size",
     "D3.3 has no trace-driven SFSJ numbers (they are in its reference [13]): ours are reported alone"),
    (Deviation("trace", "none in D3.3", "HPC2N with Poisson failures", "a setting for our own observation only"),),
    _sfsj_plan, _sfsj_sim, _sfsj_claims)

