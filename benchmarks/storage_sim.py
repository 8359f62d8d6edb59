"""Elastic storage in the simulator: static against elastic job file systems on a small generated I/O workload.

The workload (seeded; written as JSON lines, read back by the workload reader, so it is the file format's path):
a 32-node machine, 80 jobs arriving as a Poisson process (mean gap 30 s):

* 40% rigid jobs with a file system of their own: 1, 2 or 4 nodes; phases compute, write, compute, read
  (computes 60-300 s, transfers 5-40 GB); ``fs_min`` 1, ``fs_max`` 2-8, ``io_rate`` 1.5-6 servers' bandwidth;
* 30% malleable compute jobs (4 nodes, 2-8, 300-1500 s at 4, Amdahl 0.05): the donors;
* 30% rigid compute jobs (1-8 nodes, 100-900 s).

One data server 1 GB/s, node links 5 GB/s, shared file system 10 GB/s; the live storage rule's defaults, samples
every 2 s, an addition costs 0.29 s and a removal 0.09 s. Each seed runs under ``malleable-fill`` (malleable jobs
grow into idle nodes, so hosts are taken back) and ``easy``, with ``static`` and with ``elastic`` storage.

Writes ``results/storage_sim.json`` and ``.png`` and prints a table (means over the seeds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
GB = 1e9
MACHINE = 32
SERVER_BW, LINK_BW, PFS_BW = 1 * GB, 5 * GB, 10 * GB


def workload(path: Path, seed: int, n: int = 80) -> None:
    """Write the seeded workload of the module docstring to ``path``."""
    from malleable.controller.sim._jobfile import write_jobs

    rng = np.random.default_rng(seed)
    t, jobs = 0.0, []
    for i in range(1, n + 1):
        t += float(rng.exponential(30.0)) if i > 1 else 0.0
        u = rng.random()
        if u < 0.4:
            c1, c2 = (float(x) for x in rng.uniform(60, 300, 2))
            wr, rd = (float(x) for x in rng.uniform(5, 40, 2) * GB)
            procs = int(rng.choice([1, 2, 4]))
            jobs.append({"id": i, "submit": round(t, 1), "run": round(c1 + c2), "procs": procs,
                         "estimate": round(3 * (c1 + c2 + (wr + rd) / SERVER_BW)),
                         "phases": [["compute", c1], ["write", wr], ["compute", c2], ["read", rd]],
                         "fs_min": 1, "fs_max": int(rng.integers(2, 9)),
                         "io_rate": round(float(rng.uniform(1.5, 6.0)) * SERVER_BW)})
        elif u < 0.7:
            run = float(rng.uniform(300, 1500))
            jobs.append({"id": i, "submit": round(t, 1), "run": round(run), "estimate": round(2 * run), "procs": 4,
                         "kind": "malleable", "min": 2, "max": 8, "speedup": "amdahl:0.05"})
        else:
            run = float(rng.uniform(100, 900))
            jobs.append({"id": i, "submit": round(t, 1), "run": round(run), "estimate": round(2 * run),
                         "procs": int(rng.integers(1, 9))})
    write_jobs(path, jobs, MACHINE)


def one(path: Path, policy: str, storage: str) -> dict:
    """One run: the metrics of the comparison."""
    from malleable.controller.sim._ioengine import simulate_io
    from malleable.controller.sim._iofs import StorageModel
    from malleable.controller.sim._jobfile import read_jobs

    w = read_jobs(path)
    t0 = time.perf_counter()
    r = simulate_io(w, policy, pfs_bw=PFS_BW, link_bw=LINK_BW, storage=StorageModel(SERVER_BW, storage))
    sec = time.perf_counter() - t0
    res, rep = r.result, r.storage
    assert rep is not None and w.fs is not None and w.phases is not None
    rows = [i for i, f in enumerate(w.fs) if f is not None]
    io_phases = sum(1 for i in rows for p in w.phases[i] if p.kind.value in ("read", "write"))
    mall = [i for i in range(len(w)) if w.kind is not None and int(w.kind[i]) == 2]
    return {"policy": policy, "storage": storage, "mean_wait_s": float(np.mean(res.start - res.workload.submit)),
            "makespan_s": float(np.max(res.end) - float(w.submit[0])),
            "mean_io_phase_s": float(sum(r.io_time[i] for i in rows) / io_phases),
            "server_seconds": rep.server_seconds, "decisions": rep.decisions, "hosts_taken_back": rep.taken_back,
            "fs_jobs": len(rows), "io_phases": io_phases,
            "malleable_mean_size": float(np.mean([res.area[i] / (res.end[i] - res.start[i]) for i in mall])),
            "sim_seconds": sec}


KEYS = ("mean_wait_s", "makespan_s", "mean_io_phase_s", "server_seconds", "decisions", "hosts_taken_back",
        "malleable_mean_size")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            path = Path(tmp) / f"storage-{seed}.jsonl"
            workload(path, seed)
            for policy in ("malleable-fill", "easy"):
                for storage in ("static", "elastic"):
                    runs.append({"seed": seed, **one(path, policy, storage)})
    table = []
    for policy in ("malleable-fill", "easy"):
        for storage in ("static", "elastic"):
            sel = [r for r in runs if r["policy"] == policy and r["storage"] == storage]
            table.append({"policy": policy, "storage": storage,
                          **{k: statistics.mean(r[k] for r in sel) for k in KEYS}})
    print(f"{'policy':15} {'storage':8} {'mean wait s':>11} {'makespan s':>10} {'I/O phase s':>11} "
          f"{'server-s':>9} {'decisions':>9} {'taken back':>10} {'mall. size':>10}")
    for r in table:
        print(f"{r['policy']:15} {r['storage']:8} {r['mean_wait_s']:11.1f} {r['makespan_s']:10.0f} "
              f"{r['mean_io_phase_s']:11.2f} {r['server_seconds']:9.0f} {r['decisions']:9.1f} "
              f"{r['hosts_taken_back']:10.1f} {r['malleable_mean_size']:10.2f}")
    (out / "storage_sim.json").write_text(json.dumps({
        "machine": MACHINE, "jobs": 80, "seeds": args.seeds, "server_bw": SERVER_BW, "link_bw": LINK_BW,
        "pfs_bw": PFS_BW, "table": table, "runs": runs}, indent=1) + "\n")
    _plot(table, out / "storage_sim.png")
    return 0


def _plot(table: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ("mean_wait_s", "makespan_s", "mean_io_phase_s", "server_seconds")
    fig, axes = plt.subplots(1, len(keys), figsize=(12, 3.2))
    for ax, k in zip(axes, keys, strict=True):
        labels = [f"{r['policy'].replace('malleable-', 'm-')}\n{r['storage']}" for r in table]
        ax.bar(labels, [r[k] for r in table], color=["tab:gray", "tab:blue"] * (len(table) // 2))
        ax.set_title(k.replace("_", " "), fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
    fig.suptitle("static vs elastic job file systems (means over seeds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
