"""Simulator throughput: FCFS / EASY / conservative on the HPC2N trace and on synthetic workloads, vs AccaSim;
and the malleable policies against EASY on the same trace with 50 % of the jobs malleable.

Scale (``--scale --long-queue --sweep-bench --memory 1000000``, code in ``_sim_scale.py``): jobs/s against the
machine size (128 .. 16,384 nodes), the HPC2N trace with halved inter-arrival times (long queues), a 16-run sweep on
1 process / all cores / a 2-worker Dask cluster, and peak memory on long traces; each throughput figure paired
with the pre-redesign engine in the same run (``--old-python``). Writes ``simulator_scale.json`` and ``.png``.

Run: ``.venv/bin/python benchmarks/simulator.py [--quick] [--accasim-records N] [--skip-accasim]``.
Writes ``benchmarks/results/simulator.json`` and ``simulator.png`` (log-log time vs jobs) and prints a table.
``--malleable-only [--malleable-limit N]`` runs only the malleable section and writes
``benchmarks/results/simulator_malleable.json``: jobs/s of every malleable policy and of EASY, each in its own
process, on the same workload (HPC2N with a seeded 50 % made malleable: min 0.5x, max 2x, rho U[0, 0.3], Amdahl
serial U[0, 0.1]; MTCT reported from the Amdahl model; BASELINE/SFSJ with Poisson node failures, one per 6 h,
1 h downtime, and compared with conservative, their base, as well).

Every case runs in a fresh subprocess, so ``peak_rss_mib`` is that case's own peak resident memory (workload
generation or parsing included). ``jobs_per_s`` counts simulated jobs over the event loop's wall time
(``sim_seconds``); ``read_seconds`` is the SWF parsing or synthetic generation time.

AccaSim (pip ``accasim``; optional extra ``bench``) replays the same records (written by us as an SWF file with
memory fields set, which its reader needs) on the same machine in the same run; its time covers its whole
``start_simulation`` (it streams the workload while simulating), so ours is given both with and without parsing.
"""

from __future__ import annotations

import argparse
import collections
import collections.abc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# the whole HPC2N log where MALLEABLE_HPC2N names it (workloads/README.md), else the repository's cut of it
TRACE = Path(os.environ.get("MALLEABLE_HPC2N", HERE.parent / "workloads" / "HPC2N-2002-2.1-cln-first20000.swf.gz"))
POLICIES = ("fcfs", "easy", "conservative")
MALLEABLE = ("easy", "mebf-handoff", "mebf-spare", "mebf-intensive", "mebf-handoff-expand+", "mebf-handoff-shrink+",
             "mebf0", "fpsma-pwma", "fpsma-prma", "egs-pwma", "egs-prma", "fpsma-mtct-pwma", "conservative",
             "baseline", "sfsj")


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def one_case(spec: dict) -> dict:
    """Run one (workload, policy) case in this process and return its measurements."""
    from malleable.controller import mtct_amdahl, read_swf, simulate, summary, synthetic

    t = time.perf_counter()
    if spec["source"] == "trace":
        w = read_swf(spec["path"], limit=spec.get("limit"))
        if spec.get("submit_scale"):
            w.submit = w.submit * spec["submit_scale"]
    else:
        w = synthetic(spec["n"], machine=spec["machine"], load=spec["load"], seed=spec.get("seed", 1))
    extra = {}
    if spec.get("malleable"):
        w = w.with_malleable(spec["malleable"], seed=0, rho=(0.0, 0.3))
        extra["mtct"] = mtct_amdahl
        if spec["policy"] in ("baseline", "sfsj"):
            from malleable.controller.experiments import failure_plan
            extra["failures"] = failure_plan(w.machine, float(w.submit[0]), float(w.submit[-1]), 6 * 3600.0,
                                             3600.0, seed=5)
    read = time.perf_counter() - t
    try:                            # load Numba and the compiled loops before the timed event loop (~0.5 s)
        from malleable.controller.sched._kernels import kernel
        kernel("base"), kernel("place")
        from malleable.controller.sim._fastpath import warm
        warm()
    except ImportError:             # the old engine has none
        pass
    cpu = time.process_time()
    r = simulate(w, spec["policy"], **extra)
    cpu = time.process_time() - cpu
    s = summary(r, tau=10.0)
    s.update(spec)
    s.update(read_seconds=read, jobs_per_s=len(w) / r.sim_seconds, jobs_per_cpu_s=len(w) / cpu, cpu_seconds=cpu,
             passes=r.passes, peak_rss_mib=_rss_mib(),
             machine=w.machine, resizes=int(r.decisions.get("ResizeJob", 0)),
             interrupts=int(r.decisions.get("Interrupt", 0)))
    return s


def run_case(spec: dict, timeout: float) -> dict:
    """``one_case`` in a fresh interpreter (clean peak RSS)."""
    try:
        proc = subprocess.run([sys.executable, __file__, "--one", json.dumps(spec)], capture_output=True,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return dict(spec, timeout=timeout, jobs=spec.get("n") or 0, sim_seconds=float("nan"),
                    jobs_per_s=float("nan"), peak_rss_mib=float("nan"), mean_wait=float("nan"),
                    mean_bsld=float("nan"), utilization=float("nan"))
    if proc.returncode:
        raise RuntimeError(f"case {spec} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- AccaSim ----------------------------------------------------------------------------------------------------

def _accasim_import():
    for name in ("Mapping", "MutableMapping", "Sequence", "Iterable", "Callable", "MutableSet", "Set", "Hashable",
                 "Iterator"):
        setattr(collections, name, getattr(collections.abc, name))   # aliases removed in Python 3.10
    import logging

    from accasim.base.allocator_class import FirstFit
    from accasim.base.scheduler_class import EASYBackfilling, FirstInFirstOut
    from accasim.base.simulator_class import Simulator
    logging.getLogger("accasim").setLevel(logging.WARNING)
    return Simulator, FirstInFirstOut, EASYBackfilling, FirstFit


def accasim_case(policy: str, limit: int | None) -> dict:
    """Run AccaSim's FIFO or EBF (first-fit allocator) on the trace's first ``limit`` records."""
    from malleable.controller import read_swf, simulate

    w = read_swf(TRACE, limit=limit)
    Simulator, FIFO, EBF, FirstFit = _accasim_import()
    with tempfile.TemporaryDirectory() as tmp:
        swf, cfg, res = Path(tmp, "w.swf"), Path(tmp, "sys.json"), Path(tmp, "res")
        lines = [f"; MaxProcs: {w.machine}"]
        for i in range(len(w)):
            p = int(w.procs[i])
            lines.append(f"{int(w.ids[i])} {int(w.submit[i])} -1 {int(w.run[i])} {p} -1 1 {p} "
                         f"{int(w.estimate[i])} 1 1 1 1 -1 1 1 -1 -1")
        swf.write_text("\n".join(lines) + "\n")
        cfg.write_text(json.dumps({"groups": {"g0": {"core": 1, "mem": 10**9}}, "resources": {"g0": w.machine},
                                   "equivalence": {"processor": {"core": 1}}, "start_time": 0}))
        disp = FIFO(FirstFit()) if policy == "fcfs" else EBF(FirstFit())
        sim = Simulator(str(swf), str(cfg), disp, RESULTS_FOLDER_PATH=str(res), show_statistics=False,
                        statistics_output=False)
        t = time.perf_counter()
        sim.start_simulation()
        acc_seconds = time.perf_counter() - t
        starts = {}
        for line in next(res.glob("sched-*")).read_text().splitlines():
            head, _, tail = line.split("__")
            st = tail.split(";")[0]
            starts[int(head.split(";")[0])] = datetime.strptime(st, "%Y-%m-%d %H:%M:%S").replace(
                tzinfo=timezone.utc).timestamp()
    t = time.perf_counter()
    w2 = read_swf(TRACE, limit=limit)
    ours = simulate(w2, policy)
    ours_total = time.perf_counter() - t
    acc_start = np.array([starts[int(j)] for j in w.ids])
    run = w.run
    acc_wait = acc_start - w.submit
    acc_bsld = np.maximum(1.0, (acc_wait + run) / np.maximum(run, 10.0))
    ours_bsld = np.maximum(1.0, (ours.wait + run) / np.maximum(run, 10.0))
    same = int(np.sum(acc_start == ours.start))
    return {"policy": policy, "records": len(w), "accasim_seconds": acc_seconds,
            "accasim_jobs_per_s": len(w) / acc_seconds, "ours_sim_seconds": ours.sim_seconds,
            "ours_total_seconds": ours_total, "ours_jobs_per_s": len(w) / ours.sim_seconds,
            "speedup_sim": acc_seconds / ours.sim_seconds, "speedup_with_parse": acc_seconds / ours_total,
            "accasim_mean_wait": float(acc_wait.mean()), "ours_mean_wait": float(ours.wait.mean()),
            "accasim_mean_bsld": float(acc_bsld.mean()), "ours_mean_bsld": float(ours_bsld.mean()),
            "identical_starts": same, "jobs": len(w)}


# -- driver -----------------------------------------------------------------------------------------------------

def plot(results: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    for pol, marker in zip(POLICIES, "osD"):
        for load, ls in ((0.7, "-"), (0.95, "--")):
            pts = sorted((r["jobs"], r["sim_seconds"]) for r in results
                         if r["source"] == "synthetic" and "timeout" not in r and r["policy"] == pol and r["load"] == load)
            if pts:
                ax.loglog(*zip(*pts), marker=marker, ls=ls, label=f"{pol}, synthetic load {load}")
        tr = [(r["jobs"], r["sim_seconds"]) for r in results if r["source"] == "trace" and r["policy"] == pol]
        if tr:
            ax.loglog(*zip(*sorted(tr)), marker=marker, ls=":", color="black", alpha=0.6)
    ax.set_xlabel("jobs")
    ax.set_ylabel("simulation wall time (s)")
    ax.set_title("malleable simulator: time vs jobs (dotted black: HPC2N, 240 nodes; synthetic: 256 nodes)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="synthetic sizes 10^4 and 10^5 only")
    ap.add_argument("--accasim-records", type=int, default=10000,
                    help="trace records AccaSim replays (default 10000; 0 = the whole trace, minutes)")
    ap.add_argument("--skip-accasim", action="store_true")
    ap.add_argument("--conservative-max", type=int, default=10**5,
                    help="largest synthetic workload run under conservative (default 10^5: its full re-planning "
                         "at every job end makes 10^6 jobs at load 0.95 take far longer than the others)")
    ap.add_argument("--timeout", type=float, default=600.0, help="per case (s); a case over it is reported as such")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--malleable-only", action="store_true", help="only the malleable policies vs EASY")
    ap.add_argument("--malleable-limit", type=int, default=None,
                    help="trace records for the malleable section (default: the whole trace)")
    ap.add_argument("--skip-malleable", action="store_true", help="no malleable section")
    ap.add_argument("--scale", action="store_true", help="jobs/s at 128 .. 16,384 nodes (scale sections only)")
    ap.add_argument("--long-queue", action="store_true", help="HPC2N with halved inter-arrival times")
    ap.add_argument("--sweep-bench", action="store_true", help="16-run sweep: 1 process, all cores, Dask")
    ap.add_argument("--memory", metavar="N,N", help="peak RSS of simulate --trace on synthetic SWF files of N jobs")
    ap.add_argument("--io", action="store_true", help="the I/O section only: benchmarks/simulator_io.py (the I/O "
                                                       "model's cost when unused; fcfs-bb and plan-2 on KTH-SP2)")
    ap.add_argument("--old-python", default="/work/wt-base/.venv/bin/python",
                    help="interpreter whose malleable is the old engine (the same-run baseline); 'python-engine': "
                         "this code with its compiled twin turned off")
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one_case(json.loads(args.one))))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"trace: {TRACE} (MALLEABLE_HPC2N names another, e.g. the whole log: workloads/README.md)", flush=True)
    if args.io:
        from simulator_io import main as io_main
        return io_main(["--out", str(out)])
    if args.scale or args.long_queue or args.sweep_bench or args.memory:
        from _sim_scale import run_all
        run_all(args, out, TRACE)
        return 0
    if args.malleable_only:
        malleable_section(args, out)
        return 0
    specs = []
    for pol in POLICIES:
        specs.append({"source": "trace", "path": str(TRACE), "limit": 10000, "policy": pol})
        specs.append({"source": "trace", "path": str(TRACE), "limit": None, "policy": pol})
    sizes = (10**4, 10**5) if args.quick else (10**4, 10**5, 10**6)
    for n in sizes:
        for load in (0.7, 0.95):
            for pol in POLICIES:
                if pol == "conservative" and n > args.conservative_max:
                    continue
                specs.append({"source": "synthetic", "n": n, "machine": 256, "load": load, "policy": pol})
    results = []
    print(f"{'workload':34} {'policy':13} {'jobs':>8} {'sim s':>8} {'jobs/s':>10} {'RSS MiB':>8} "
          f"{'mean wait':>10} {'bsld':>8} {'util':>6}")
    for spec in specs:
        r = run_case(spec, args.timeout)
        results.append(r)
        name = (f"HPC2N first {spec['limit']}" if spec.get("limit") else f"HPC2N all {r['jobs']}") if spec["source"] == \
            "trace" else f"synthetic n={spec['n']} load={spec['load']}"
        print(f"{name:34} {r['policy']:13} {r['jobs']:8d} {r['sim_seconds']:8.2f} {r['jobs_per_s']:10,.0f} "
              f"{r['peak_rss_mib']:8.0f} {r['mean_wait']:10.0f} {r['mean_bsld']:8.2f} {r['utilization']:6.3f}",
              flush=True)
    acc = []
    if not args.skip_accasim:
        print(f"\nAccaSim vs ours, HPC2N first {args.accasim_records or 'all'} records")
        print(f"{'policy':6} {'AccaSim s':>10} {'ours sim s':>10} {'ours+parse':>10} {'x (sim)':>8} "
              f"{'x (+parse)':>10} {'wait Acca':>10} {'wait ours':>10} {'bsld Acca':>10} {'bsld ours':>10} "
              f"{'same start':>10}")
        for pol in ("fcfs", "easy"):
            a = accasim_case(pol, args.accasim_records or None)
            acc.append(a)
            print(f"{pol:6} {a['accasim_seconds']:10.2f} {a['ours_sim_seconds']:10.3f} "
                  f"{a['ours_total_seconds']:10.3f} {a['speedup_sim']:8.1f} {a['speedup_with_parse']:10.1f} "
                  f"{a['accasim_mean_wait']:10.1f} {a['ours_mean_wait']:10.1f} {a['accasim_mean_bsld']:10.2f} "
                  f"{a['ours_mean_bsld']:10.2f} {a['identical_starts']:>5}/{a['jobs']}", flush=True)
    meta = {"python": sys.version.split()[0], "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M"),
            "trace": TRACE.name}
    (out / "simulator.json").write_text(json.dumps({"meta": meta, "cases": results, "accasim": acc}, indent=1))
    plot(results, out / "simulator.png")
    print(f"\nwrote {out / 'simulator.json'} and {out / 'simulator.png'}")
    if not args.skip_malleable:
        malleable_section(args, out)
    return 0


def malleable_section(args: argparse.Namespace, out: Path) -> list[dict]:
    """Every malleable policy and EASY on HPC2N with 50 % malleable jobs, each in its own process."""
    lim = args.malleable_limit
    print(f"\nmalleable policies, HPC2N {'first ' + str(lim) if lim else 'whole'}, 50% malleable "
          f"(x EASY = EASY jobs/s / policy jobs/s, EASY re-run right before each policy: the machine is shared "
          f"and noisy; target <= 3)")
    print(f"{'policy':22} {'jobs':>8} {'sim s':>8} {'jobs/s':>10} {'EASY j/s':>10} {'x EASY':>7} {'resizes':>8} "
          f"{'mean wait':>10} {'util':>6}")
    results = []
    for pol in MALLEABLE[1:]:
        base = {"source": "trace", "path": str(TRACE), "limit": lim, "policy": "easy", "malleable": 0.5}
        e = run_case(base, args.timeout)
        r = run_case(dict(base, policy=pol), args.timeout)
        r["easy_jobs_per_s"] = e["jobs_per_s"]
        r["slower_than_easy"] = e["jobs_per_s"] / r["jobs_per_s"]
        results.append(r)
        print(f"{pol:22} {r['jobs']:8d} {r['sim_seconds']:8.2f} {r['jobs_per_s']:10,.0f} {e['jobs_per_s']:10,.0f} "
              f"{r['slower_than_easy']:7.2f} {r.get('resizes', 0):8d} {r['mean_wait']:10.0f} "
              f"{r['utilization']:6.3f}", flush=True)
    meta = {"python": sys.version.split()[0], "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M"),
            "trace": TRACE.name, "limit": lim, "malleable": 0.5}
    (out / "simulator_malleable.json").write_text(json.dumps({"meta": meta, "cases": results}, indent=1))
    print(f"wrote {out / 'simulator_malleable.json'}")
    return results


if __name__ == "__main__":
    sys.exit(main())
