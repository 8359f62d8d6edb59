"""Seed 003 (the IMPI thesis) experiments W1 and W2 of its section 7.3."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from malleable.controller.sched import get_policy
from malleable.controller.sched._ebs import EBS, EBSConfig
from malleable.controller.sched._speedup import amdahl, linear
from malleable.controller.sim._engine import simulate
from malleable.controller.sim._workload import Workload

from ._common import Recorder, Report, Row, pct, plot_bars, plot_timelines, result_metrics

__all__ = ["columns", "exp_003_w1", "exp_003_w2", "w1", "w2"]

log = logging.getLogger(__name__)

STRATEGIES = ("fpsma-pwma", "fpsma-prma", "egs-pwma", "egs-prma")


def columns(rows: list[tuple], machine: int, name: str) -> Workload:
    """A workload from ``(id, submit, run, est, procs, kind, min, max, serial, rho)`` rows (kind 0/1/2)."""
    c = list(zip(*rows))
    return Workload(np.array(c[0], dtype=np.int64), np.array(c[1], dtype=np.float64),
                    np.array(c[2], dtype=np.float64), np.array(c[3], dtype=np.float64),
                    np.array(c[4], dtype=np.int32), machine, np.array(c[5], dtype=np.int8),
                    np.array(c[6], dtype=np.int32), np.array(c[7], dtype=np.int32),
                    np.array(c[8], dtype=np.float64), name=name, rho=np.array(c[9], dtype=np.float64))


# -- seed 003: W1 and W2 ------------------------------------------------------------------------------------

W1_T = (700.0, 200.0, 650.0, 550.0, 550.0)
W1_S = 3 / 19


def w1(malleable: bool = True) -> Workload:
    """Thesis §7.3 W1: 5 jobs 100 s apart on 16 nodes, sizes 4/16/6/10/8, malleable with min 4 / max 16."""
    sizes = (4, 16, 6, 10, 8)
    return columns([(i + 1, 100.0 * i, W1_T[i], W1_T[i], sizes[i], 2 if malleable else 0,
                     4 if malleable else sizes[i], 16 if malleable else sizes[i], W1_S if malleable else 0.0, 0.0)
                    for i in range(5)], 16, "W1")


def exp_003_w1(out: Path, quick: bool) -> Report:
    rep = Report("003-w1", "thesis §7.3, workload W1: rigid FCFS vs the four EBS strategies", [
        "16 nodes; static times at the start sizes 700/200/650/550/550 s (not in the thesis: chosen so rigid "
        "FCFS ends at 2000 s with job 1 ending at 700 and jobs 2/3 waiting 600/700 s, as printed)",
        "Amdahl speedup, serial fraction 3/19, so job 1 grown 4 -> 16 at t=0 ends at 400 s, as printed",
        "no reconfiguration cost (the thesis measured 0.05-2.25 s per step); passes on submit and end only",
        "utilisation = node-seconds held / (16 x makespan)"])
    published = {"fcfs": ("~2000 s", "59%"), "fpsma-pwma": ("~1500 s", "~90%"), "fpsma-prma": ("~1600 s", "~90%"),
                 "egs-pwma": ("~1500 s", "~90%"), "egs-prma": ("~1600 s (like FPSMA+PRMA)", "~90%")}
    panels = []
    for name in ("fcfs",) + STRATEGIES:
        rec = Recorder(get_policy(name))
        r = simulate(w1(name != "fcfs"), rec, name=name, speedup=amdahl)
        rec.close(float(r.end.max()))
        m = result_metrics(r)
        rep.runs[name] = dict(m, start=r.start, end=r.end)
        pm, pu = published[name]
        rep.rows.append(Row(name, "makespan", pm, f"{m['makespan']:.0f} s"))
        rep.rows.append(Row(name, "utilisation", pu, f"{100 * m['utilization']:.0f}%"))
        rep.rows.append(Row(name, "mean wait / response", "-", f"{m['mean_wait']:.0f} / {m['mean_tat']:.0f} s"))
        panels.append((f"{name}: makespan {m['makespan']:.0f} s", rec, 16))
    f = rep.runs["fcfs"]
    rep.rows.insert(0, Row("fcfs", "wait of jobs 2, 3", "600, 700 s",
                           f"{f['start'][1] - 100:.0f}, {f['start'][2] - 200:.0f} s"))
    plot_timelines(out / "003-w1.png", panels, "W1 (thesis §7.3): nodes held over time; black = busy nodes")
    return rep


ESP = (("C", 8, 2, 1204.0), ("D", 4, 2, 513.0), ("G", 2, 3, 696.0), ("J", 1, 2, 522.0), ("Z", 16, 1, 458.0))


def w2(fraction: float, seed: int = 7) -> Workload:
    """Thesis §7.4 W2: the 10-job ESP mix of Table 7.2, 60 s apart, the 2nd job of type Z, malleable ones
    with min 1 / max 16 (the malleable subset is random, seeded)."""
    rng = np.random.default_rng(seed)
    types = [t for t in ESP for _ in range(t[2]) if t[0] != "Z"]
    order = [types[i] for i in rng.permutation(len(types))]
    order.insert(1, ESP[4])
    k = round(fraction * len(order))
    mall = set(rng.choice(len(order), size=k, replace=False).tolist()) if k else set()
    rows = []
    for i, (_, nodes, _, t) in enumerate(order):
        m = i in mall
        rows.append((i + 1, 60.0 * i, t, t, nodes, 2 if m else 0, 1 if m else nodes, 16 if m else nodes,
                     0.05 if m else 0.0, 0.0))
    return columns(rows, 16, f"W2-{fraction:g}")


def work_bound(w: Workload) -> float:
    """The makespan no schedule can beat when every job's node-seconds are fixed: total work / machine (s)."""
    return float((w.run * w.procs).sum()) / w.machine


def _fixed_work(rep: Report) -> None:
    """The 100% malleable mix under the linear speedup (node-seconds fixed), against the work bound."""
    w = w2(1.0)
    bound = work_bound(w)
    rep.runs["work_bound"] = bound
    for name in STRATEGIES:
        cfg = get_policy(name).cfg  # type: ignore[attr-defined]
        if cfg.management == "prma":
            cfg = EBSConfig(management="prma", strategy=cfg.strategy, max_expansions=2)
        m = result_metrics(simulate(w, EBS(cfg), name=name, speedup=linear))
        rep.runs[f"{name}@1-linear"] = m
    fp = rep.runs["fpsma-pwma@1"]["makespan"]
    lin = rep.runs["fpsma-pwma@1-linear"]
    rep.rows.append(Row("100%, FPSMA+PWMA", "makespan vs work bound (Amdahl 0.05)", "38 min",
                        f"{fp / 60:.1f} min vs {bound / 60:.1f} min ({pct(fp, bound)})"))
    rep.rows.append(Row("100%, FPSMA+PWMA, fixed work", "makespan vs work bound (linear)", "38 min",
                        f"{lin['makespan'] / 60:.1f} min vs {bound / 60:.1f} min ({pct(lin['makespan'], bound)})"))
    rep.rows.append(Row("100%, FPSMA+PWMA, fixed work", "AWT / ART / utilisation", "~8 / 22.25 min / 92%",
                        f"{lin['mean_wait'] / 60:.1f} / {lin['mean_tat'] / 60:.1f} min / "
                        f"{100 * lin['utilization']:.0f}%"))
    others = ", ".join(f"{n} {rep.runs[f'{n}@1-linear']['makespan'] / 60:.1f}" for n in STRATEGIES
                       if n != "fpsma-pwma")
    rep.rows.append(Row("100%, fixed work", "makespan, other strategies", "-", f"{others} min"))


def exp_003_w2(out: Path, quick: bool) -> Report:
    rep = Report("003-w2", "thesis §7.4, workload W2 (10-job ESP mix): rigid FCFS vs the EBS strategies", [
        "Table 7.2 types and static times; order seeded-random with job 2 of type Z; 60 s apart; 16 nodes",
        "malleable jobs min 1 / max 16, Amdahl serial fraction 0.05 (the thesis assumes time falls with "
        "nodes by changing the iteration count; no figure given)",
        "PRMA capped at 2 expansions per job (the thesis's evaluation, L1189); no reconfiguration cost",
        "throughput = jobs / makespan; utilisation = node-seconds / (16 x makespan) (the thesis's 17.5% for "
        "rigid FCFS cannot be node occupancy: the jobs alone fill 35,916 of 16 x makespan node-seconds)",
        "work bound = the jobs' node-seconds at their sizes / 16 nodes (37.4 min); under Amdahl a job shrunk below "
        "its size uses fewer node-seconds, so a makespan can fall below it; 'fixed work' runs the 100% malleable "
        "mix under the linear speedup T(n) = T(p) p / n, which keeps every job's node-seconds"])
    base = simulate(w2(0.0), "fcfs")
    b = result_metrics(base)
    rep.runs["fcfs"] = b
    rep.rows.append(Row("rigid FCFS", "makespan / util", "- / 17.5%",
                        f"{b['makespan'] / 60:.1f} min / {100 * b['utilization']:.0f}%"))
    rep.rows.append(Row("rigid FCFS", "AWT / ART", "~15.5 / ~27.8 min (derived)",
                        f"{b['mean_wait'] / 60:.1f} / {b['mean_tat'] / 60:.1f} min"))
    labels, ours_m = [], []
    for frac in (0.1, 0.5, 1.0):
        for name in STRATEGIES:
            cfg = get_policy(name).cfg  # type: ignore[attr-defined]
            if cfg.management == "prma":
                cfg = EBSConfig(management="prma", strategy=cfg.strategy, max_expansions=2)
            r = simulate(w2(frac), EBS(cfg), name=name)
            m = result_metrics(r)
            rep.runs[f"{name}@{frac:g}"] = m
            labels.append(f"{name} {int(frac * 100)}%")
            ours_m.append(m["makespan"] / 60)
    best = {f: min((k for k in rep.runs if k.endswith(f"@{f:g}")), key=lambda k: rep.runs[k]["makespan"])
            for f in (0.1, 0.5, 1.0)}
    r10 = rep.runs[best[0.1]]
    rep.rows.append(Row("10% malleable", "best makespan - FCFS", "~1 min",
                        f"{(r10['makespan'] - b['makespan']) / 60:+.1f} min ({best[0.1]})"))
    fp = rep.runs["fpsma-pwma@1"]
    rep.rows.append(Row("100%, FPSMA+PWMA", "makespan", "38 min", f"{fp['makespan'] / 60:.1f} min"))
    rep.rows.append(Row("100%, FPSMA+PWMA", "throughput vs rigid", "+22%",
                        f"{100 * (b['makespan'] / fp['makespan'] - 1):+.0f}%"))
    for f in (0.5, 1.0):
        x = rep.runs[f"fpsma-pwma@{f:g}"]
        rep.rows.append(Row(f"{int(f * 100)}%, FPSMA+PWMA", "AWT (vs rigid)", "~8 min (-48.5%)",
                            f"{x['mean_wait'] / 60:.1f} min ({pct(x['mean_wait'], b['mean_wait'])})"))
    rep.rows.append(Row("100%, FPSMA+PWMA", "ART (vs rigid)", "22.25 min (-20%)",
                        f"{fp['mean_tat'] / 60:.1f} min ({pct(fp['mean_tat'], b['mean_tat'])})"))
    x = rep.runs["fpsma-prma@0.5"]
    rep.rows.append(Row("50%, FPSMA+PRMA", "ART", "23.1 min", f"{x['mean_tat'] / 60:.1f} min"))
    for f, pub in ((0.1, "29%"), (0.5, "82%"), (1.0, "92%")):
        k = max((k for k in rep.runs if k.endswith(f"@{f:g}")), key=lambda k: rep.runs[k]["utilization"])
        rep.rows.append(Row(f"{int(f * 100)}% malleable", "max utilisation", pub,
                            f"{100 * rep.runs[k]['utilization']:.0f}% ({k.split('@')[0]})"))
    best_all = min((k for k in rep.runs if k != "fcfs"), key=lambda k: rep.runs[k]["makespan"])
    rep.rows.append(Row("all", "best strategy (makespan)", "FPSMA+PWMA", best_all))
    _fixed_work(rep)
    plot_bars(out / "003-w2.png", labels, ours_m, [38.0 if lab == "fpsma-pwma 100%" else None for lab in labels],
              "makespan (min)", f"W2: makespan per strategy and malleable share (rigid FCFS {b['makespan'] / 60:.1f}"
              " min)")
    return rep
