"""Worker of benchmarks/reconfig.py: runs under an MPI launcher in one of three modes, prints one JSON line on rank 0.

``malleable``: follows MALLEABLE_PLAN (expand/shrink cycles), computing BENCH_COMPUTE seconds (NumPy, busy) per
iteration; reports each AdaptReport plus the application's *stall* (from the probe that said pending to the end
of adapt_commit) and the iterations done between the decision and that probe (non-zero only when overlapped).
``raw``: the baseline: rank 0 alone does Comm_spawn(maxprocs=d, host=...) + Merge, then Disconnect and waits for
the children to exit; the children run this same file, so they import exactly the modules a malleable joiner
imports (mpi4py, numpy, malleable.runtime): only the protocol differs.
``probe``: cost of probe_adapt with nothing pending.
"""

import json
import os
import sys
import time

import numpy as np
import psutil
from mpi4py import MPI

from malleable import runtime as mr
from malleable.runtime._mpi import current

mode = sys.argv[1]

if mode == "raw-child":
    parent = MPI.Comm.Get_parent()
    merged = parent.Merge(high=True)
    merged.gather(os.getpid())
    current().release(merged)  # as the runtime does (Intel MPI: a disconnect, else finalize waits forever)
    parent.Disconnect()
    sys.exit(0)


def _wait_gone(pids):
    for pid in pids:
        while True:
            try:
                if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.0005)


if mode == "raw":
    spec = json.loads(sys.argv[2])  # [{"delta": d, "host": "node2:1,node3:1" or ""}], reps
    out = []
    for case in spec["cases"]:
        for _ in range(spec["reps"]):
            info = MPI.Info.Create()
            if case["host"]:
                info.Set("host", case["host"])
            t0 = time.perf_counter()
            inter = MPI.COMM_WORLD.Spawn(sys.executable, [__file__, "raw-child"], maxprocs=case["delta"], info=info)
            merged = inter.Merge(high=False)
            t_expand = time.perf_counter() - t0
            pids = merged.gather(os.getpid())[1:]
            t1 = time.perf_counter()
            current().release(merged)
            inter.Disconnect()
            _wait_gone(pids)  # same PID space here (one machine, namespaces share it)
            t_shrink = time.perf_counter() - t1
            info.Free()
            out.append({"delta": case["delta"], "host": case["host"], "expand": t_expand, "shrink": t_shrink})
    print(json.dumps({"raw": out}), flush=True)
    sys.exit(0)

if mode == "probe":
    mr.init_adapt(plan="")
    w = mr.world()
    n = int(sys.argv[2])
    for _ in range(1000):
        mr.probe_adapt()
    w.Barrier()
    t0 = time.perf_counter()
    for _ in range(n):
        mr.probe_adapt()
    dt = (time.perf_counter() - t0) / n
    worst = w.allreduce(dt, op=MPI.MAX)
    if w.rank == 0:
        print(json.dumps({"probe": {"ranks": w.size, "seconds": worst, "mpi": current().name}}), flush=True)
    sys.exit(0)

# malleable
COMPUTE = float(os.environ.get("BENCH_COMPUTE", "0"))
a = np.random.default_rng(0).standard_normal((200, 200))


def compute():
    t_end = time.perf_counter() + COMPUTE
    while time.perf_counter() < t_end:
        a @ a  # noqa: B018 - busy work standing for the application's


status = mr.init_adapt()
if status is mr.Status.JOINING:
    mr.adapt_begin()
    mr.adapt_commit()  # then the loop below: the first probe stands for the parents' one
plan = {s["at_probe"]: s["procs"] for s in json.loads(os.environ["MALLEABLE_PLAN"])}
reports = []
last = int(os.environ["BENCH_LAST_PROBE"])
decided = None  # probe at which the current decision was due
while mr.probe_count() < last:
    pending, st, info = mr.probe_adapt()
    if mr.probe_count() in plan and decided is None:
        decided = mr.probe_count()
    if pending:
        t0 = time.perf_counter()
        mr.adapt_begin()
        rep = mr.adapt_commit()
        stall = time.perf_counter() - t0
        if st is mr.Status.LEAVING:
            sys.exit(0)
        if mr.world().rank == 0:
            reports.append({"kind": rep.kind, "old": rep.old_size, "new": rep.new_size, "seconds": rep.seconds,
                            "stall": stall, "background": rep.background, "freed": list(rep.freed_hosts),
                            "overlapped_iterations": info["probe"] - (decided or info["probe"])})
        decided = None
    compute()
    mr.world().Barrier()
if mr.world().rank == 0:
    print(json.dumps({"malleable": reports}), flush=True)
