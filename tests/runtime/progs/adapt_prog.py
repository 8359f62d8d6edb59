"""Test program: follows MALLEABLE_PLAN, keeps a block-row array through every adaptation, reports JSON lines.

Rank 0 prints one line per iteration: {"probe", "size", "hosts", "pids", "fds", "ok"} and one line per
adaptation {"report": ...,"left_pids": [...], "left_alive": [...]}. ``ok`` says the distributed array
still equals the reference. Env: PROG_ITERS (default 12), PROG_DIE_JOINER=1 kills the first joiner of
the first expansion before it reports in, PROG_COLS (array columns, default 5).
"""

import json
import os
import socket
import sys

import numpy as np
import psutil
from mpi4py import MPI

from malleable import runtime as mr
from malleable.errors import AdaptError

ITERS = int(os.environ.get("PROG_ITERS", "12"))
N, COLS = 37, int(os.environ.get("PROG_COLS", "5"))
REF = np.arange(N * COLS, dtype=np.float64).reshape(N, COLS) * 1.5


def _netns_pids(host, freed):
    """PIDs inside a test-cluster host's network namespace (pids are shared across namespaces).

    For a host the runtime reported free, the job's application processes are gone already; hydra's
    proxy on that host exits right after its children, so allow it up to 2 s to go too.
    """
    import subprocess
    import time

    deadline = time.monotonic() + (2.0 if host in freed else 0.0)
    while True:
        out = subprocess.run(["ip", "netns", "pids", host], capture_output=True, text=True, timeout=10).stdout
        pids = [int(x) for x in out.split() if _of_this_job(int(x))]
        if not pids or time.monotonic() > deadline:
            return pids
        time.sleep(0.02)


def _of_this_job(pid):
    """Whether ``pid`` descends from this job's mpiexec (other test sessions may use the same hosts)."""
    me = psutil.Process()
    launcher = next((p.pid for p in me.parents() if p.name().startswith(("mpiexec", "prterun"))), None)
    try:
        return launcher is None or launcher in {p.pid for p in psutil.Process(pid).parents()}
    except psutil.NoSuchProcess:
        return False


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


_marker = os.environ.get("PROG_DIE_JOINER")
if _marker and MPI.Comm.Get_parent() != MPI.COMM_NULL and MPI.COMM_WORLD.rank == 0:
    try:
        os.close(os.open(_marker, os.O_CREAT | os.O_EXCL))  # only the first expansion's joiner dies
        # abrupt death without any cleanup (no MPI_Finalize, no atexit). A death by signal is not used:
        # MPICH 5.0.2's hydra then tears the whole job down, even with -disable-auto-cleanup.
        os._exit(1)
    except FileExistsError:
        pass

status = mr.init_adapt()
local = None
if status is mr.Status.NEW:
    w = mr.world()
    lo, hi = mr.block_range(N, w.size, w.rank)
    local = REF[lo:hi].copy()
if status is mr.Status.JOINING:
    win = mr.adapt_begin()
    old = win.staying + win.leaving
    local = mr.redistribute(None, REF.shape, REF.dtype, old, win.staying + win.joining, win.new_world)
    mr.adapt_commit()
while True:
    # a joiner's first probe stands for the one its parents made (the runtime makes it a no-op)
    pending, st, info = mr.probe_adapt()
    if pending:
        w0 = mr.world()
        pids_before = w0.gather(os.getpid())
        try:
            win = mr.adapt_begin()
        except AdaptError as e:
            if w0.rank == 0:
                emit({"adapt_error": str(e), "type": type(e).__name__})
            win = None
        if win is not None:
            span = mr.span_comm(win)
            old = win.staying + win.leaving
            local = mr.redistribute(local, REF.shape, REF.dtype, old, win.staying + win.joining, span)
            rep = mr.adapt_commit()
            if st is mr.Status.LEAVING:
                assert local.shape[0] == 0
                break
            w = mr.world()
            if w.rank == 0:
                left = pids_before[w.size:] if rep.kind == "shrink" else []
                alive = [p for p in left if psutil.pid_exists(p)
                         and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
                on_hosts = {h: _netns_pids(h, rep.freed_hosts)
                            for h in os.environ.get("PROG_CHECK_HOSTS", "").split(",") if h}
                emit({"report": {"kind": rep.kind, "old": rep.old_size, "new": rep.new_size,
                                 "seconds": rep.seconds, "freed": list(rep.freed_hosts), "idle": rep.idle},
                      "left_pids": left, "left_alive": alive, "host_pids": on_hosts})
    it = mr.probe_count()
    if it > ITERS:
        break
    w = mr.world()
    total = w.allreduce(1)
    rows = w.gather(local)
    who = w.gather((socket.gethostname(), os.getpid()))
    if w.rank == 0:
        ok = total == w.size and np.array_equal(np.concatenate(rows), REF)
        emit({"probe": it, "size": w.size, "hosts": [h for h, _ in who], "pids": [p for _, p in who],
              "fds": psutil.Process().num_fds(), "ok": bool(ok)})
