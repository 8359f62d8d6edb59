"""Test program: follows MALLEABLE_PLAN, keeps a block-row array through every adaptation, reports JSON lines.

Rank 0 prints one line per iteration: {"probe", "size", "hosts", "pids", "fds", "ok"} and one line per
adaptation {"report": ...,"left_pids": [...], "left_alive": [...]}. ``ok`` says the distributed array
still equals the reference. Env: PROG_ITERS (default 12), PROG_DIE_JOINER=1 kills the first joiner of
the first expansion before it reports in, PROG_COLS (array columns, default 5). Faults: PROG_KILL_JOINER (SIGKILL
before reporting in), PROG_STOP_JOINER (SIGSTOP after the handshake), PROG_SLOW_JOINER (sleep before MPI_Init),
PROG_EXIT_RANK/PROG_EXIT_CODE (that rank ends with sys.exit(code)). PROG_PIDS_DIR: every process leaves a file named
by its pid there as it starts.
"""

import json
import os
import signal
import socket
import sys
import time

if os.environ.get("PROG_PIDS_DIR"):  # every process of the job leaves its pid there as it starts
    open(os.path.join(os.environ["PROG_PIDS_DIR"], str(os.getpid())), "w").close()  # noqa: SIM115

_slow = os.environ.get("PROG_SLOW_JOINER")  # "marker:seconds": joiners sleep before MPI_Init (a slow spawn)
if _slow:
    _path, _secs = _slow.rsplit(":", 1)
    try:
        os.close(os.open(_path, os.O_CREAT | os.O_EXCL))  # the first process (the anchor) makes the marker
    except FileExistsError:
        time.sleep(float(_secs))

import numpy as np  # noqa: E402
import psutil  # noqa: E402
from mpi4py import MPI  # noqa: E402

from malleable import runtime as mr  # noqa: E402


def _running(pid: int) -> bool:
    """True while ``pid`` has not ended (a zombie has); a process may end between two checks."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
from malleable.errors import AdaptError  # noqa: E402

ITERS = int(os.environ.get("PROG_ITERS", "12"))
N, COLS = 37, int(os.environ.get("PROG_COLS", "5"))
REF = np.arange(N * COLS, dtype=np.float64).reshape(N, COLS) * 1.5


def _netns_pids(host, freed):
    """PIDs of this program's processes inside a test-cluster host's network namespace (pids are shared across
    namespaces). For a host the runtime reported free they are gone already; a process still tearing down there
    gets up to 2 s.
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
    """Whether ``pid`` is a process of this program in this job: it runs this file and descends from the job's
    launcher (other test sessions may use the same hosts; the launcher's own daemons are not the job's processes)."""
    me = psutil.Process()
    launcher = next((p.pid for p in me.parents() if p.name().startswith(("mpiexec", "prterun", "orterun"))), None)
    try:
        proc = psutil.Process(pid)
        if not any(a.endswith(os.path.basename(__file__)) for a in proc.cmdline()):
            return False
        return launcher is None or launcher in {p.pid for p in proc.parents()}
    except psutil.NoSuchProcess:
        return False


def emit(obj):
    line = json.dumps(obj) + "\n"
    sys.stdout.write(line)
    sys.stdout.flush()
    if os.environ.get("PROG_OUT"):  # the program's own record: a launcher's output forwarding may cut the tail
        with open(os.environ["PROG_OUT"], "a") as f:
            f.write(line)


_marker = os.environ.get("PROG_DIE_JOINER")
if _marker and MPI.Comm.Get_parent() != MPI.COMM_NULL and MPI.COMM_WORLD.rank == 0:
    try:
        os.close(os.open(_marker, os.O_CREAT | os.O_EXCL))  # only the first expansion's joiner dies
        # abrupt death without any cleanup (no MPI_Finalize, no atexit). A death by signal is not used:
        # MPICH 5.0.2's hydra then tears the whole job down, even with -disable-auto-cleanup.
        os._exit(1)
    except FileExistsError:
        pass
_kill = os.environ.get("PROG_KILL_JOINER")  # the first joiner dies by SIGKILL before it reports in
if _kill and MPI.Comm.Get_parent() != MPI.COMM_NULL and MPI.COMM_WORLD.rank == 0:
    try:
        os.close(os.open(_kill, os.O_CREAT | os.O_EXCL))
        os.kill(os.getpid(), signal.SIGKILL)
    except FileExistsError:
        pass

class Decisions:
    """A decision source that is not a plan (like a controller's): its sizes are not checked at init_adapt."""

    local = True

    def __init__(self, steps):
        self.steps = {s["at_probe"]: mr.Resize(s["procs"], tuple(s.get("hosts", ()))) for s in steps}

    def poll(self, probe):
        return self.steps.get(probe)

    def refused(self, decision, reason):
        emit({"refused": reason, "procs": decision.procs})  # called on world rank 0

    def started(self, layout):
        pass

    def committed(self, report, layout):
        pass

    def progress(self, phase, data):
        pass


status = mr.init_adapt()
if os.environ.get("PROG_DECISIONS"):
    mr.set_source(Decisions(json.loads(os.environ["PROG_DECISIONS"])))
_stop = os.environ.get("PROG_STOP_JOINER")  # the first joiner stops (SIGSTOP) after its handshake; pid in the file
if _stop and status is mr.Status.JOINING:
    try:
        fd = os.open(_stop, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        os.kill(os.getpid(), signal.SIGSTOP)
    except FileExistsError:
        pass
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
_req = os.environ.get("PROG_REQUEST")  # "rank:probe:procs:min:max" (0: not given): that rank asks at that probe
while True:
    if _req:
        r_rank, r_probe, r_procs, r_min, r_max = (int(x) for x in _req.split(":"))
        if mr.world().rank == r_rank and mr.probe_count() == r_probe:
            mr.request_adapt(procs=r_procs or None, min=r_min or None, max=r_max or None)
    # a joiner's first probe stands for the one its parents made (the runtime makes it a no-op)
    pending, st, info = mr.probe_adapt()
    if "request" in info and mr.world().rank == 0:
        emit({"answer": info["request"], "at": mr.probe_count(), "reason": info.get("reason", ""),
              "procs": info.get("procs")})
    if pending:
        w0 = mr.world()
        pids_before = w0.gather(os.getpid())
        t_begin = time.monotonic()
        try:
            win = mr.adapt_begin()
        except AdaptError as e:
            if w0.rank == 0:
                emit({"adapt_error": str(e), "type": type(e).__name__, "seconds": time.monotonic() - t_begin})
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
                alive = [p for p in left if _running(p)]
                on_hosts = {h: _netns_pids(h, rep.freed_hosts)
                            for h in os.environ.get("PROG_CHECK_HOSTS", "").split(",") if h}
                emit({"report": {"kind": rep.kind, "old": rep.old_size, "new": rep.new_size,
                                 "seconds": rep.seconds, "freed": list(rep.freed_hosts), "idle": rep.idle,
                                 "background": rep.background, "probe": mr.probe_count()},
                      "left_pids": left, "left_alive": alive, "host_pids": on_hosts})
    time.sleep(float(os.environ.get("PROG_SLEEP", "0")))
    it = mr.probe_count()
    if it > ITERS:
        if mr.world().rank == int(os.environ.get("PROG_EXIT_RANK", "-1")):
            sys.exit(int(os.environ.get("PROG_EXIT_CODE", "3")))
        break
    w = mr.world()
    total = w.allreduce(1)
    rows = w.gather(local)
    who = w.gather((socket.gethostname(), os.getpid()))
    if w.rank == 0:
        ok = total == w.size and np.array_equal(np.concatenate(rows), REF)
        emit({"probe": it, "size": w.size, "hosts": [h for h, _ in who], "pids": [p for _, p in who],
              "fds": psutil.Process().num_fds(), "ok": bool(ok)})
