"""Test program for the controller: a malleable 1-D Jacobi heat solver that probes every iteration.

Rank 0 prints JSON lines: {"it", "size", "hosts"} per iteration where the size changed, and at the end
{"done": true, "ok": <equal to the serial reference, bit for bit>, "sizes": [...]}. Env: PROG_N (cells,
default 4096), PROG_ITERS (default 60), PROG_SLEEP (seconds per iteration, default 0.05), PROG_WORK
(seconds per iteration at one process, divided by the size: a linear-speedup job), PROG_OUT (write the
result as .npy), PROG_CRASH_IN_RESIZE=1 (rank 0 is killed inside its first adaptation window),
PROG_REQUEST ("it:procs:min:max;..." with 0 for not given: rank 0 asks for a size at those iterations; the answers
are printed as {"answer", "at", "reason", "procs"}), PROG_STATUS (a file rank 0 rewrites with its iteration).
"""

import json
import os
import socket
import sys
import time

import numpy as np
from mpi4py import MPI

from malleable import runtime as mr

N = int(os.environ.get("PROG_N", "4096"))
ITERS = int(os.environ.get("PROG_ITERS", "60"))
SLEEP = float(os.environ.get("PROG_SLEEP", "0.05"))
WORK = float(os.environ.get("PROG_WORK", "0"))  # seconds of perfectly parallel "work" per iteration at 1 process
ASKS = {int(a): tuple(int(x) or None for x in rest) for a, *rest in
        (item.split(":") for item in os.environ.get("PROG_REQUEST", "").split(";") if item)}
STATUS = os.environ.get("PROG_STATUS")


def initial():
    x = np.linspace(0.0, 1.0, N)
    return np.sin(7 * np.pi * x) + x * x


def step_serial(u):
    v = u.copy()
    v[1:-1] = 0.5 * (u[:-2] + u[2:])
    return v


def step(local, comm, lo, hi):
    """One Jacobi sweep of the block [lo, hi) with halo exchange (fixed boundary values)."""
    r, s = comm.rank, comm.size
    left = np.empty(1) if r > 0 else None
    right = np.empty(1) if r < s - 1 else None
    reqs = []
    if r > 0:
        reqs += [comm.Isend(local[:1].copy(), r - 1, 1), comm.Irecv(left, r - 1, 2)]
    if r < s - 1:
        reqs += [comm.Isend(local[-1:].copy(), r + 1, 2), comm.Irecv(right, r + 1, 1)]
    MPI.Request.Waitall(reqs)
    ext = np.concatenate([left if left is not None else local[:1], local, right if right is not None else local[-1:]])
    new = 0.5 * (ext[:-2] + ext[2:])
    if lo == 0:
        new[0] = local[0]
    if hi == N:
        new[-1] = local[-1]
    return new


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


status = mr.init_adapt()
local = None
if status is mr.Status.NEW:
    w = mr.world()
    lo, hi = mr.block_range(N, w.size, w.rank)
    local = initial()[lo:hi].copy()
joined = status is mr.Status.JOINING
left = False
sizes = []
t_last = time.perf_counter()
while True:
    if joined:
        win = mr.adapt_begin()
        local = mr.redistribute(None, (N,), np.float64, win.staying + win.leaving, win.staying + win.joining,
                                win.new_world)
        mr.adapt_commit()
        joined = False
        continue  # the next probe_adapt is the joiner's no-op one, standing for the probe its parents just made
    else:
        if mr.world().rank == 0 and mr.probe_count() + 1 in ASKS:
            procs, lo, hi = ASKS[mr.probe_count() + 1]
            mr.request_adapt(procs=procs, min=lo, max=hi)
        pending, st, info = mr.probe_adapt()
        if "request" in info and mr.world().rank == 0:
            emit({"answer": info["request"], "at": mr.probe_count(), "reason": info.get("reason", ""),
                  "procs": info.get("procs")})
        if pending:
            win = mr.adapt_begin()
            if os.environ.get("PROG_CRASH_IN_RESIZE") == "1" and mr.world().rank == 0:
                os.kill(os.getpid(), 9)  # rank 0 dies in the middle of the resize (joiners already spawned)
            local = mr.redistribute(local, (N,), np.float64, win.staying + win.leaving, win.staying + win.joining,
                                    mr.span_comm(win))
            mr.adapt_commit()
            if st is mr.Status.LEAVING:
                left = True
                break
    it = mr.probe_count()
    if it > ITERS:
        break
    w = mr.world()
    lo, hi = mr.block_range(N, w.size, w.rank)
    assert local.shape == (hi - lo,)
    local = step(local, w, lo, hi)
    time.sleep(SLEEP + WORK / w.size)
    hosts = w.gather(socket.gethostname())
    if w.rank == 0:
        if STATUS:
            with open(STATUS + ".tmp", "w") as f:
                f.write(str(it))
            os.replace(STATUS + ".tmp", STATUS)
        if not sizes or sizes[-1] != w.size:
            sizes.append(w.size)
            emit({"it": it, "size": w.size, "hosts": hosts})
        now = time.perf_counter()
        if it % 5 == 0:
            mr.report_progress("elastic", {"iter_time": now - t_last, "mtct": 0.1, "iter": it,
                                           "fraction": min(1.0, it / ITERS)})
        t_last = now

if not left:
    w = mr.world()
    parts = w.gather(local)
    if w.rank == 0:
        u = np.concatenate(parts)
        ref = initial()
        for _ in range(ITERS):
            ref = step_serial(ref)
        ok = bool(np.array_equal(u, ref))
        if os.environ.get("PROG_OUT"):
            np.save(os.environ["PROG_OUT"], u)
        emit({"done": True, "ok": ok, "sizes": sizes, "size": w.size})
