"""Sections of ``benchmarks/simulator.py`` for the simulator at scale: jobs/s against the machine size, the
long-queue trace, sweep wall time and memory on long traces; every figure next to the old engine's in the same run.

The old engine is the package as it was before the redesign (commit 63cab20), run by another interpreter
(``--old-python``, default ``/work/wt-base/.venv/bin/python``, a worktree of that commit with its own venv): it runs
this same case code (``simulator.py --one``), which uses only what both versions have.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIZES = (128, 1024, 8192, 16384)
RIGID = ("fcfs", "easy", "conservative")


PYTHON_ENGINE = "python-engine"
"""``--old-python`` value naming this code with its compiled twin turned off (``MALLEABLE_NO_FASTPATH=1``)."""


def case(python: str, spec: dict, timeout: float) -> dict:
    """One case in a fresh interpreter ``python`` (clean peak RSS); ``{"timeout": ...}`` when it ran too long.
    ``python`` = :data:`PYTHON_ENGINE` runs this code on its Python engine only."""
    env = dict(os.environ)
    if python == PYTHON_ENGINE:
        python, env["MALLEABLE_NO_FASTPATH"] = sys.executable, "1"
    try:
        proc = subprocess.run([python, str(HERE / "simulator.py"), "--one", json.dumps(spec)], capture_output=True,
                              text=True, timeout=timeout, check=False, env=env)
    except subprocess.TimeoutExpired:
        return dict(spec, timeout=timeout, jobs_per_s=float("nan"), peak_rss_mib=float("nan"))
    if proc.returncode:
        raise RuntimeError(f"case {spec} with {python} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def pair(spec: dict, old: str | None, timeout: float) -> dict:
    """The case with this code, then with the old engine (same spec, right after)."""
    new = case(sys.executable, spec, timeout)
    row = {"spec": spec, "new": new}
    if old:
        row["old"] = case(old, spec, timeout)
        row["speedup"] = new["jobs_per_s"] / row["old"]["jobs_per_s"]
        row["speedup_cpu"] = new["jobs_per_cpu_s"] / row["old"]["jobs_per_cpu_s"]
        same = all(new.get(k) == row["old"].get(k) for k in ("mean_wait", "max_wait", "makespan"))
        row["same_schedule"] = same
    return row


def scale_section(old: str | None, timeout: float, n: int = 20000) -> list[dict]:
    """FCFS, EASY and conservative at 128 .. 16,384 nodes, load 0.9, ``n`` jobs."""
    print(f"\njobs/s vs machine size: synthetic, {n} jobs, load 0.9 (old = pre-redesign engine, same run; targets: "
          f"EASY >= 150k, conservative >= 20k, 16,384 nodes within 1.5x of 128)")
    print(f"{'nodes':>6} {'policy':13} {'jobs/s':>9} {'old jobs/s':>11} {'x old':>7} {'jobs/cpu-s':>11} "
          f"{'old':>9} {'x old':>6} {'same':>5} {'RSS MiB':>8}")
    rows = []
    for m in SIZES:
        for pol in RIGID:
            spec = {"source": "synthetic", "n": n, "machine": m, "load": 0.9, "seed": 1, "policy": pol}
            r = pair(spec, old, timeout)
            rows.append(r)
            o = r.get("old", {})
            print(f"{m:6d} {pol:13} {r['new']['jobs_per_s']:9,.0f} {o.get('jobs_per_s', float('nan')):11,.0f} "
                  f"{r.get('speedup', float('nan')):7.2f} {r['new']['jobs_per_cpu_s']:11,.0f} "
                  f"{o.get('jobs_per_cpu_s', float('nan')):9,.0f} {r.get('speedup_cpu', float('nan')):6.2f} "
                  f"{str(r.get('same_schedule', '-')):>5} {r['new']['peak_rss_mib']:8.0f}", flush=True)
    for pol in RIGID:
        a = next(r for r in rows if r["spec"]["machine"] == SIZES[0] and r["spec"]["policy"] == pol)
        b = next(r for r in rows if r["spec"]["machine"] == SIZES[-1] and r["spec"]["policy"] == pol)
        print(f"{pol}: {SIZES[-1]} nodes at {a['new']['jobs_per_s'] / b['new']['jobs_per_s']:.2f}x the time per job "
              f"of {SIZES[0]} nodes ({a['new']['jobs_per_cpu_s'] / b['new']['jobs_per_cpu_s']:.2f}x in CPU time)")
    return rows


def long_queue_section(trace: Path, old: str | None, timeout: float) -> list[dict]:
    """EASY and conservative on the development trace with its inter-arrival times halved (long queues)."""
    print(f"\nlong queues: {trace.name} with inter-arrival times halved (old = pre-redesign engine, same run)")
    print(f"{'records':>8} {'policy':13} {'jobs/s':>9} {'old jobs/s':>11} {'x old':>7} {'jobs/cpu-s':>11} "
          f"{'old':>9} {'x old':>6} {'same':>5} {'mean wait':>11}")
    rows = []
    for limit, pol in ((20000, "easy"), (20000, "conservative"), (None, "easy")):
        spec = {"source": "trace", "path": str(trace), "limit": limit, "submit_scale": 0.5, "policy": pol}
        r = pair(spec, old, timeout)
        rows.append(r)
        o = r.get("old", {})
        print(f"{limit or 'all':>8} {pol:13} {r['new']['jobs_per_s']:9,.0f} {o.get('jobs_per_s', float('nan')):11,.0f} "
              f"{r.get('speedup', float('nan')):7.2f} {r['new'].get('jobs_per_cpu_s', float('nan')):11,.0f} "
              f"{o.get('jobs_per_cpu_s', float('nan')):9,.0f} {r.get('speedup_cpu', float('nan')):6.2f} "
              f"{str(r.get('same_schedule', '-')):>5} {r['new'].get('mean_wait', float('nan')):11,.0f}", flush=True)
    return rows


SWEEP_SPEC = """
traces = ["synthetic:10000:256:0.9"]
policies = ["fcfs", "easy", "conservative", "mebf-spare"]
seeds = [1, 2, 3, 4]
[grid]
malleable = [0.5]
"""

DASK_RUN = """
import sys, time
from distributed import LocalCluster
from malleable.controller.sim._sweep import load_sweep, run_sweep
if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        t = time.perf_counter()
        run_sweep(load_sweep(sys.argv[1]), sys.argv[2], dask=c.scheduler_address)
        print(time.perf_counter() - t)
"""


def sweep_section() -> list[dict]:
    """Wall time of a 16-run sweep on 1 process, on all local cores, and on a 2-worker local Dask cluster."""
    from malleable.controller.sim._sweep import load_sweep, read_table, run_sweep

    print(f"\nsweep of 16 runs (1 synthetic trace x 4 policies x 4 seeds, 10,000 jobs each), {os.cpu_count()} cores")
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp, "sweep.toml")
        spec.write_text(SWEEP_SPEC)
        runs = load_sweep(spec)
        tables = {}
        for label, workers in (("1 process", 1), (f"{os.cpu_count()} processes", None)):
            t = time.perf_counter()
            run_sweep(runs, Path(tmp, f"{workers}.csv"), workers=workers)
            out.append({"how": label, "seconds": time.perf_counter() - t})
            tables[label] = read_table(Path(tmp, f"{workers}.csv"))
            print(f"{label:22} {out[-1]['seconds']:8.1f} s", flush=True)
        proc = subprocess.run([sys.executable, "-c", DASK_RUN, str(spec), str(Path(tmp, "dask.csv"))],
                              capture_output=True, text=True, timeout=1800, check=True)
        out.append({"how": "Dask, 2 workers (local cluster)", "seconds": float(proc.stdout.strip().splitlines()[-1])})
        tables["dask"] = read_table(Path(tmp, "dask.csv"))
        print(f"{out[-1]['how']:22} {out[-1]['seconds']:8.1f} s", flush=True)
        keyed = [{r["key"]: (r["mean_wait"], r["utilization"]) for r in t} for t in tables.values()]
        same = all(k == keyed[0] for k in keyed)
        print(f"same numbers in the three tables: {same}")
        out.append({"same_numbers": same})
    return out


def memory_section(sizes: list[int], timeout: float) -> list[dict]:
    """Peak RSS of ``malleable simulate --trace`` (EASY) on synthetic SWF files of ``sizes`` jobs."""
    from malleable.controller import synthetic, write_swf

    print("\nlong traces: malleable simulate --trace FILE --policy easy (synthetic SWF, 256 nodes, load 0.7)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = Path(tmp, f"w{n}.swf")
            t = time.perf_counter()
            write_swf(synthetic(n, machine=256, load=0.7, seed=3), path)
            wrote = time.perf_counter() - t
            t = time.perf_counter()
            cli = str(Path(sys.executable).with_name("malleable"))
            proc = subprocess.run(["/usr/bin/time", "-f", "%M", cli, "simulate",
                                   "--trace", str(path), "--policy", "easy", "--no-progress"],
                                  capture_output=True, text=True, timeout=timeout, check=False)
            wall = time.perf_counter() - t
            if proc.returncode:
                raise RuntimeError(proc.stderr[-2000:])
            rss = int(proc.stderr.strip().splitlines()[-1]) / 1024.0
            rate = next(x for x in proc.stdout.splitlines() if x.startswith("simulated in"))
            rows.append({"jobs": n, "peak_rss_mib": rss, "wall_seconds": wall, "write_seconds": wrote,
                         "simulated": rate})
            print(f"{n:>10,} jobs: peak RSS {rss:8.0f} MiB, {wall:7.1f} s in all ({rate})", flush=True)
    return rows


def plot(scale: list[dict], path: Path) -> None:
    """jobs/s against machine size, new and old, one line per policy."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for pol, color in zip(RIGID, ("tab:blue", "tab:orange", "tab:green"), strict=True):
        rs = [r for r in scale if r["spec"]["policy"] == pol]
        ax.loglog([r["spec"]["machine"] for r in rs], [r["new"]["jobs_per_s"] for r in rs], "o-", color=color,
                  label=f"{pol} (this code)")
        if all("old" in r for r in rs):
            ax.loglog([r["spec"]["machine"] for r in rs], [r["old"]["jobs_per_s"] for r in rs], "x--", color=color,
                      alpha=0.6, label=f"{pol} (old engine, same run)")
    ax.set_xlabel("nodes")
    ax.set_ylabel("simulated jobs / s (20,000 jobs, load 0.9)")
    ax.set_title("simulator throughput against machine size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_all(args, out: Path, trace: Path) -> None:  # noqa: ANN001 - the driver's argparse namespace
    """The scale sections selected on the command line; writes ``simulator_scale.json`` and ``.png``."""
    old = (args.old_python if args.old_python == PYTHON_ENGINE or
           (args.old_python and Path(args.old_python).exists()) else None)
    if not old:
        print("no old engine interpreter (--old-python): figures without a same-run baseline")
    path = out / "simulator_scale.json"
    res: dict = json.loads(path.read_text()) if path.exists() else {}      # sections not re-run are kept
    res["meta"] = {"python": sys.version.split()[0], "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M"),
                   "old_python": old, "load_avg_start": os.getloadavg()}
    sections = [("scale", args.scale, lambda: scale_section(old, args.timeout)),
                ("long_queue", args.long_queue and trace.exists(),
                 lambda: long_queue_section(trace, old, args.timeout)),
                ("sweep", args.sweep_bench, sweep_section),
                ("memory", bool(args.memory),
                 lambda: memory_section([int(x) for x in args.memory.split(",")], args.timeout * 6))]
    for name, wanted, run in sections:
        if wanted:
            res[name] = run()
            res["meta"]["load_avg_end"] = os.getloadavg()
            path.write_text(json.dumps(res, indent=1))                   # after each section
    if res.get("scale"):
        plot(res["scale"], out / "simulator_scale.png")
    print(f"\nwrote {path}" + (" and simulator_scale.png" if res.get("scale") else ""))
