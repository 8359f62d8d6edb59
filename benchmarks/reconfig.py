"""Benchmark: cost of expanding and shrinking a malleable job vs raw MPI spawn + merge, and probe cost.

Runs, in one go: on this host and (when the namespace test cluster is usable) across namespace
hosts, expansions by +1, +2, +4 processes and the shrinks back, each repeated; the baseline is a raw
mpi4py ``Comm_spawn`` + ``Merge`` of the same size onto the same hosts, measured in the same run.
The shrink baseline is the raw ``Disconnect`` plus the wait until the raw children have exited
(they run a normal interpreter exit; malleable leavers skip Python's teardown). Then
``probe_adapt`` with nothing pending at 1, 2 and 4 ranks. Prints a table, writes
``benchmarks/results/reconfig.json`` and ``reconfig.png``.

Usage: python benchmarks/reconfig.py [--reps 5] [--no-netns]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_reconfig_worker.py"
RESULTS = HERE / "results"
TESTBED = Path(os.environ.get("NETNS_TESTBED", HERE.parent.parent / "shared" / "testbed"))
DELTAS = (1, 2, 4)


def mpiexec(n, args, hosts=None, env=None, timeout=600):
    exe = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
    argv = [exe]
    if hosts:
        argv += ["-launcher", "rsh", "-launcher-exec", str(TESTBED / "netns-launch"), "-localhost", "head",
                 "-hosts", ",".join(hosts)]
    argv += ["-n", str(n), sys.executable, str(WORKER), *args]
    e = dict(os.environ, MPIR_CVAR_CH4_NETMOD="ofi", **(env or {}))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=e)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{proc.stdout}\n{proc.stderr}")
    return [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]


def host_groups(delta, hosts):
    """The hosts a +delta expansion uses (round robin), and hydra's host string for one raw spawn."""
    if not hosts:
        return [], ""
    chosen = [hosts[i % len(hosts)] for i in range(delta)]
    counts: dict[str, int] = {}
    for h in chosen:
        counts[h] = counts.get(h, 0) + 1
    return chosen, ",".join(f"{h}:{c}" for h, c in counts.items())


def run_setting(label, anchor, targets, reps):
    plan, probe = [], 1
    for d in DELTAS:
        chosen, _ = host_groups(d, targets)
        for _ in range(reps):
            plan.append({"at_probe": probe + 1, "procs": 1 + d, **({"hosts": chosen} if chosen else {})})
            plan.append({"at_probe": probe + 2, "procs": 1})
            probe += 2
    env = {"MALLEABLE_PLAN": json.dumps(plan), "BENCH_LAST_PROBE": str(probe + 1)}
    mall = mpiexec(1, ["malleable"], hosts=anchor, env=env)[0]["malleable"]
    cases = [{"delta": d, "host": host_groups(d, targets)[1]} for d in DELTAS]
    raw = mpiexec(1, ["raw", json.dumps({"cases": cases, "reps": reps})], hosts=anchor)[0]["raw"]
    rows = []
    for d in DELTAS:
        ex = [r["seconds"] for r in mall if r["kind"] == "expand" and r["new"] == 1 + d]
        sh = [r["seconds"] for r in mall if r["kind"] == "shrink" and r["old"] == 1 + d]
        rex = [r["expand"] for r in raw if r["delta"] == d]
        rsh = [r["shrink"] for r in raw if r["delta"] == d]
        rows.append({
            "setting": label, "delta": d, "groups": len(set(host_groups(d, targets)[0])) or 1,
            "expand_median": statistics.median(ex), "expand_min": min(ex),
            "raw_spawn_merge_median": statistics.median(rex), "raw_spawn_merge_min": min(rex),
            "expand_ratio": statistics.median(ex) / statistics.median(rex),
            "shrink_median": statistics.median(sh), "shrink_max": max(sh),
            "raw_disconnect_median": statistics.median(rsh), "reps": reps,
        })
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="repetitions of each expand/shrink (default 5)")
    ap.add_argument("--no-netns", action="store_true", help="skip the namespace-host setting")
    ap.add_argument("--probes", type=int, default=100_000, help="probe_adapt calls timed per rank")
    args = ap.parse_args(argv)
    rows = run_setting("one host", None, [], args.reps)
    netns_ok = (not args.no_netns and os.geteuid() == 0 and (TESTBED / "netns-cluster").exists()
                and Path("/run/netns/node4").exists())
    if netns_ok:
        rows += run_setting("namespace hosts", ["node1"], ["node2", "node3", "node4"], args.reps)
    probes = []
    for n in (1, 2, 4):
        probes.append(mpiexec(n, ["probe", str(args.probes)])[0]["probe"])
    print(f"{'setting':16} {'+d':>3} {'groups':>6} {'expand s':>9} {'raw s':>8} {'ratio':>6} "
          f"{'shrink s':>9} {'raw exit s':>10}")
    for r in rows:
        print(f"{r['setting']:16} {r['delta']:>3} {r['groups']:>6} {r['expand_median']:>9.3f} "
              f"{r['raw_spawn_merge_median']:>8.3f} {r['expand_ratio']:>6.2f} {r['shrink_median']:>9.3f} "
              f"{r['raw_disconnect_median']:>10.4f}")
    for p in probes:
        print(f"probe_adapt, nothing pending, {p['ranks']} rank(s): {p['seconds'] * 1e6:.2f} us/call")
    RESULTS.mkdir(exist_ok=True)
    out = {"rows": rows, "probe": probes, "netns": netns_ok,
           "targets": {"expand_ratio": 1.3, "shrink_seconds": 0.1, "probe_seconds": 50e-6},
           "thesis": {"expand_1_to_2_nodes": 0.11, "shrink_2_to_1": 0.05}}
    (RESULTS / "reconfig.json").write_text(json.dumps(out, indent=2))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 4))
        labels = [f"{r['setting']}\n+{r['delta']}" for r in rows]
        x = range(len(rows))
        ax.bar([i - 0.27 for i in x], [r["expand_median"] for r in rows], 0.27, label="malleable expand")
        ax.bar(list(x), [r["raw_spawn_merge_median"] for r in rows], 0.27, label="raw Comm_spawn + Merge")
        ax.bar([i + 0.27 for i in x], [r["shrink_median"] for r in rows], 0.27, label="malleable shrink")
        ax.set_xticks(list(x), labels, fontsize=7)
        ax.set_ylabel("seconds (median)")
        ax.legend(fontsize=8)
        ax.set_title("Reconfiguration cost vs raw MPI spawn")
        fig.tight_layout()
        fig.savefig(RESULTS / "reconfig.png", dpi=110)
    except ImportError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
