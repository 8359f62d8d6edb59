"""Jacobi app throughput against serial NumPy measured in the same run, and the cost of adapting.

For each grid size n (default 2048 and 4096) and each round, in this order:

* ``numpy``: the plain whole-array NumPy loop (``apps.jacobi.reference``'s update, a fresh temporary
  per term), in this process;
* ``kernel``: the app's cache-blocked sweep with preallocated buffers, serial, no MPI, no driver;
* ``app xP``: ``mpiexec -n P python -m malleable.apps.jacobi`` (the EPOP program, probing every
  iteration, residual every 100), timed by the driver's solve-phase time (slowest rank).

Rates are interior cell updates per second, best of ``--reps`` rounds (the machine is shared, so
the best round is the least disturbed one). Parallel efficiency at P processes is
``rate(app xP) / (P * rate(app x1))``. Finally the app runs under ``malleable run -n 1`` with a
1 -> 2 -> 1 plan and the share of its run time spent adapting (the driver's adaptation records:
spawn/merge or shrink, data redistribution, rebuilding the Cartesian communicator) is reported.

Usage: python benchmarks/apps.py [--sizes 2048,4096] [--reps 3] [--procs 1,2]
Writes benchmarks/results/apps.json and apps.png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
MPI_ENV = {"MPIR_CVAR_CH4_NETMOD": "ofi", "MALLEABLE_ADAPT_TIMEOUT": "60"}
ITERS = {2048: 60, 4096: 20}


def iters_for(n: int) -> int:
    """Iterations per measurement: about the same work for every size."""
    return ITERS.get(n, max(10, int(60 * (2048 / n) ** 2)))


def time_numpy(n: int, iters: int) -> float:
    """Seconds of the plain NumPy loop."""
    from malleable.apps.jacobi import initial_grid

    u = initial_grid(n)
    v = u.copy()
    t0 = time.perf_counter()
    for _ in range(iters):
        v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        u, v = v, u
    return time.perf_counter() - t0


def time_kernel(n: int, iters: int) -> float:
    """Seconds of the app's serial sweep (same chunking, residual every 100 iterations)."""
    from malleable.apps.jacobi import CACHE_BYTES, initial_grid, sweep

    u = initial_grid(n)
    v = u.copy()
    tmp = np.empty((max(1, min(n - 2, CACHE_BYTES // (8 * n))), n - 2))
    t0 = time.perf_counter()
    for i in range(iters):
        sweep(u, v, tmp, residual=(i + 1) % 100 == 0 or i + 1 == iters)
        u, v = v, u
    return time.perf_counter() - t0


def _env() -> dict[str, str]:
    return dict(os.environ, **MPI_ENV)


def run_app(procs: int, n: int, iters: int, tmp: Path) -> dict:
    """Run the app under mpiexec; returns its stats JSON plus the wall time."""
    from malleable.launch import mpiexec_argv

    stats = tmp / f"app-{procs}-{n}.json"
    cmd = [sys.executable, "-m", "malleable.apps.jacobi", "--n", str(n), "--iters", str(iters), "--stats", str(stats)]
    t0 = time.perf_counter()
    subprocess.run(mpiexec_argv(procs, cmd), check=True, capture_output=True, env=_env(), timeout=600)
    out = json.loads(stats.read_text())
    out["wall"] = time.perf_counter() - t0
    return out


def solve_seconds(stats: dict) -> float:
    """Time of the solve phase (sum over its segments of the slowest rank's time)."""
    return sum(s["seconds"] for s in stats["stats"] if s["phase"] == "solve")


def run_adaptive(n: int, iters: int, tmp: Path) -> dict:
    """The app under ``malleable run -n 1`` with a 1 -> 2 -> 1 plan; returns shares and times."""
    from malleable.runtime._cli import build_run_argv

    stats = tmp / f"adapt-{n}.json"
    plan = [{"at_probe": iters // 3 + 1, "procs": 2}, {"at_probe": 2 * iters // 3 + 1, "procs": 1}]
    cmd = [sys.executable, "-m", "malleable.apps.jacobi", "--n", str(n), "--iters", str(iters), "--stats", str(stats)]
    ns = argparse.Namespace(procs=1, hosts=None, hostfile=None, plan=json.dumps(plan), timeout=None,
                            launcher_exec=None, no_auto_cleanup=False, cmd=["--", *cmd])
    t0 = time.perf_counter()
    subprocess.run(build_run_argv(ns), check=True, capture_output=True, env=_env(), timeout=600)
    wall = time.perf_counter() - t0
    s = json.loads(stats.read_text())
    adapt = sum(a["seconds"] for a in s["adaptations"])
    return {"n": n, "iters": iters, "plan": plan, "run_seconds": s["seconds"], "wall": wall,
            "adapt_seconds": adapt, "share": adapt / s["seconds"],
            "adaptations": s["adaptations"], "solve_seconds": solve_seconds(s)}


def plot(result: dict, path: Path) -> None:
    """Bar chart of cell updates per second per size and variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["sizes"]
    labels = ["numpy", "kernel"] + [f"app x{p}" for p in result["procs"]]
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(labels)
    for k, lab in enumerate(labels):
        vals = [r["rates"][lab] / 1e6 for r in rows]
        ax.bar([i + k * width for i in range(len(rows))], vals, width, label=lab)
    ax.set_xticks([i + width * (len(labels) - 1) / 2 for i in range(len(rows))])
    ax.set_xticklabels([f"n={r['n']}" for r in rows])
    ax.set_ylabel("cell updates / s (millions, best round)")
    share = result["adaptation"]["share"]
    ax.set_title(f"Jacobi: malleable app vs serial NumPy (1→2→1 adaptation share {share:.1%})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table, write JSON and PNG."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="2048,4096", help="grid sizes (comma-separated)")
    p.add_argument("--procs", default="1,2", help="process counts of the app (comma-separated, must include 1)")
    p.add_argument("--reps", type=int, default=3, help="rounds; the best is reported (default 3)")
    p.add_argument("--adapt-n", type=int, default=2048, help="grid size of the 1->2->1 run (default 2048)")
    p.add_argument("--adapt-iters", type=int, default=300, help="iterations of the 1->2->1 run (default 300)")
    p.add_argument("--out", default=str(RESULTS / "apps.json"), help="JSON output (PNG beside it)")
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    procs = [int(x) for x in args.procs.split(",")]
    if 1 not in procs or args.reps < 1:
        p.error("--procs must include 1 and --reps must be >= 1")
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for n in sizes:
            iters = iters_for(n)
            cells = (n - 2) ** 2 * iters
            times: dict[str, list[float]] = {"numpy": [], "kernel": []}
            for _ in range(args.reps):  # interleaved rounds: load changes hit every variant alike
                times["numpy"].append(time_numpy(n, iters))
                times["kernel"].append(time_kernel(n, iters))
                for pr in procs:
                    times.setdefault(f"app x{pr}", []).append(solve_seconds(run_app(pr, n, iters, tmp)))
            rates = {k: cells / min(v) for k, v in times.items()}
            medians = {k: cells / statistics.median(v) for k, v in times.items()}
            eff = {pr: rates[f"app x{pr}"] / (pr * rates["app x1"]) for pr in procs}
            rows.append({"n": n, "iters": iters, "times": times, "rates": rates, "median_rates": medians,
                         "efficiency": eff, "app1_vs_numpy": rates["app x1"] / rates["numpy"],
                         "app1_vs_kernel": rates["app x1"] / rates["kernel"]})
        shares = [run_adaptive(args.adapt_n, args.adapt_iters, tmp) for _ in range(args.reps)]
    adaptation = sorted(shares, key=lambda s: s["share"])[len(shares) // 2]  # the median run
    result = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                          "load": os.getloadavg()}, "procs": procs, "sizes": rows, "adaptation": adaptation,
              "adaptation_shares": [s["share"] for s in shares]}
    print(f"{'n':>5} {'variant':<8} {'Mcells/s':>9} {'median':>9}")
    for r in rows:
        for k in r["rates"]:
            print(f"{r['n']:>5} {k:<8} {r['rates'][k] / 1e6:>9.1f} {r['median_rates'][k] / 1e6:>9.1f}")
        effs = ", ".join(f"x{pr}: {e:.2f}" for pr, e in r["efficiency"].items() if pr > 1)
        print(f"{r['n']:>5} efficiency {effs}; app x1 / numpy loop {r['app1_vs_numpy']:.2f}, "
              f"app x1 / serial kernel {r['app1_vs_kernel']:.2f}")
    a = adaptation
    print(f"1->2->1 at n={a['n']}, {a['iters']} iterations: {a['adapt_seconds']:.2f} s of {a['run_seconds']:.2f} s "
          f"adapting ({a['share']:.1%}; all runs: {', '.join(f'{s:.1%}' for s in result['adaptation_shares'])})")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    plot(result, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
