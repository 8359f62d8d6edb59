"""Worker of benchmarks/reconfig.py: runs under an MPI launcher in one of three modes, prints one JSON line on rank 0.

``malleable``: follows MALLEABLE_PLAN (expand/shrink steps), computing BENCH_COMPUTE seconds (NumPy, busy) per
iteration when asked; reports each adaptation as the application sees it: its *stall*, from the start of the probe
that said pending to the end of ``adapt_commit`` (plan checks, spawn, merge, commit: everything), the runtime's own
``AdaptReport.seconds`` and the iterations done between the decision and that probe (non-zero only when
overlapped). With BENCH_PROFILE=DIR every process also times the runtime's steps (see ``_Profile``) and writes them
to DIR. The runtime may be another commit's (``reconfig.py --against``): only the four verbs are used.
``raw``: the baseline: every rank of ``mpiexec -n P`` calls ``Comm_spawn(maxprocs=d)`` + ``Merge`` (so the parents
are as many as the malleable step's), then, the clock started, parent 0 tells the children to go (a synchronous send:
before, the children began to leave while the parents still gathered, up to 30 ms before the clock started), each
side disconnects and rank 0 waits for the children to exit. The children run this file too and import mpi4py only:
the baseline is the MPI's own cost, the same code for every MPI (but for how the merged communicator is released,
see ``_release``).
``probe``: cost of probe_adapt with nothing pending.
"""

import json
import os
import sys
import time

T_MAIN = time.time()  # a joiner's first Python line (BENCH_PROFILE)

from mpi4py import MPI  # noqa: E402

T_MPI = time.time()
JOINER = MPI.Comm.Get_parent() != MPI.COMM_NULL
mode = sys.argv[1]



def _release(comm):
    """Disconnect, the standard's way to let each side finalize alone; Open MPI 5.0 only frees (its Disconnect of
    a merged communicator hangs; its finalize does not wait for other jobs), Intel MPI needs the Disconnect."""
    if "Open MPI" in MPI.Get_library_version():
        comm.Free()
    else:
        comm.Disconnect()


if mode == "raw-child":
    parent = MPI.Comm.Get_parent()
    merged = parent.Merge(high=True)
    merged.gather(os.getpid())
    merged.Recv(bytearray(1), source=0, tag=7)   # the shrink starts when the parents say so, as a leaver's at the probe
    _release(merged)
    parent.Disconnect()
    sys.exit(0)


def _wait_gone(pids):
    """Until the children have exited, driving MPI progress meanwhile: Intel MPI's children finish their
    ``MPI_Finalize`` only with the parent's help (its OFI finalize waits on the disconnected parent otherwise)."""
    import psutil

    for pid in pids:
        while True:
            try:
                if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            MPI.COMM_WORLD.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)
            time.sleep(0.0005)


if mode == "raw":
    import psutil  # noqa: F401 - loaded before anything is timed

    spec = json.loads(sys.argv[2])  # {"cases": [{"delta": d, "host": "node2" or ""}], "reps": r}
    world = MPI.COMM_WORLD
    out = []
    for case in spec["cases"]:
        for _ in range(spec["reps"]):
            info = MPI.Info.Create()
            if case["host"]:
                info.Set("host", case["host"])
            world.Barrier()
            t0 = time.perf_counter()
            inter = world.Spawn(sys.executable, [__file__, "raw-child"], maxprocs=case["delta"], info=info)
            merged = inter.Merge(high=False)
            t_expand = time.perf_counter() - t0
            pids = merged.gather(os.getpid())
            world.Barrier()
            t1 = time.perf_counter()
            if world.rank == 0:   # the children start leaving now, not while the parents gather; a synchronous
                # send (a message sent just before MPICH's Disconnect may never arrive)
                MPI.Request.Waitall([merged.Issend(bytearray(1), dest=c, tag=7)
                                     for c in range(world.size, merged.size)])
            _release(merged)
            inter.Disconnect()
            if world.rank == 0:
                _wait_gone(pids[world.size:])  # same PID space here (one machine; namespaces share it)
            t_shrink = time.perf_counter() - t1
            info.Free()
            out.append({"parents": world.size, "delta": case["delta"], "host": case["host"], "expand": t_expand,
                        "shrink": t_shrink})
    if world.rank == 0:
        print(json.dumps({"raw": out}), flush=True)
    sys.exit(0)

T_IMPORT0 = time.time()
from malleable import runtime as mr  # noqa: E402
from malleable.runtime import _world  # noqa: E402, F401 - what init_adapt loads, timed here (BENCH_PROFILE)

T_IMPORTED = time.time()

if mode == "probe":
    from malleable.runtime._mpi import current

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


class _Profile:
    """Wall-clock spans of the runtime's steps in this process, written to BENCH_PROFILE/<pid>.json at exit.

    Wraps the runtime's module functions by name where they exist (the names differ between commits): every
    module-level binding of the function in ``malleable.runtime.*`` is replaced, so calls through ``from x import
    f`` are timed too. Each span records (name, start, end) in ``time.time()``; the driver lines them up. A joiner
    wraps only modules it has loaded (importing others would lengthen the start being measured).
    """

    STEPS = {  # span name: [(module, attribute)] (a class attribute as "Class.method")
        "probe_adapt": [("_world", "probe_adapt")],
        "plan checks": [("_bounds", "check_expand")],
        "host resolution": [("_sources", "choose_hosts"), ("_bounds", "host_resolves")],
        "prepare": [("_expand", "prepare")],
        "spawn+handshake": [("_spawn", "parent_spawn")],
        "MPI_Comm_spawn": [("_spawn", "_spawn_call"), ("_spawn", "_spawn_one")],   # the first that exists
        "context": [("_spawn", "parent_send_context")],
        "liveness": [("_liveness", "Listener.accept")],
        "ready": [("_spawn", "parent_ready")],
        "go": [("_spawn", "parent_go")],
        "merge": [("_spawn", "parent_merge")],
        "finish": [("_expand", "finish")],
        "members": [("_expand", "gather_members"), ("_world", "_gather_members")],
        "adapt_begin": [("_world", "adapt_begin")],
        "adapt_commit": [("_world", "adapt_commit")],
        "registered data": [("_registered", "move_all")],
        "request channel": [("_world", "_renew_req_comm"), ("_requests", "Channel.__init__")],
        "wait gone": [("_liveness", "Listener.wait_gone")],
        "shrink begin": [("_world", "_begin_shrink")],
        "leave": [("_lifecycle", "leave")],
        "group barrier": [("_lifecycle", "group_exit_barrier")],
        # joiners
        "init_adapt": [("_world", "init_adapt")],
        "child handshake": [("_spawn", "child_connect")],
        "child liveness": [("_liveness", "connect_back")],
        "child ready": [("_spawn", "child_ready")],
        "child merge": [("_spawn", "child_merge")],
    }

    # names of one function in different commits
    ALTERNATIVES = frozenset({"MPI_Comm_spawn", "members", "request channel"})

    def __init__(self, where):
        self.where = where
        self.spans = []
        self.marks = {"main": T_MAIN, "mpi4py": T_MPI, "import0": T_IMPORT0, "imported": T_IMPORTED,
                      "exec": _exec_time()}

    def install(self):
        import functools
        import importlib

        for name, targets in self.STEPS.items():
            for mod_name, attr in targets:
                full = f"malleable.runtime.{mod_name}"
                if JOINER and full not in sys.modules:
                    continue   # a joiner times what it loads anyway: importing more here would slow its start
                try:
                    mod = importlib.import_module(full)
                except ImportError:
                    continue
                owner, _, meth = attr.rpartition(".")
                holder = getattr(mod, owner) if owner else mod
                fn = getattr(holder, meth, None)
                if fn is None:
                    continue

                def wrapper(*a, _fn=fn, _name=name, **k):
                    t0 = time.time()
                    try:
                        return _fn(*a, **k)
                    finally:
                        self.spans.append((_name, t0, time.time()))

                functools.update_wrapper(wrapper, fn)
                if owner:
                    setattr(holder, meth, wrapper)
                else:
                    for m in list(sys.modules.values()):
                        if getattr(m, "__name__", "").startswith("malleable.runtime") and getattr(m, meth, None) is fn:
                            setattr(m, meth, wrapper)
                if name in self.ALTERNATIVES:
                    break
        if hasattr(mr, "__dict__"):  # the package's lazily bound verbs point at the wrappers too
            for verb in ("init_adapt", "probe_adapt", "adapt_begin", "adapt_commit"):
                mr.__dict__.pop(verb, None)
                mr.__dict__[verb] = getattr(sys.modules["malleable.runtime._world"], verb)

    def mark(self, name):
        self.marks[name] = time.time()

    def dump(self):
        rank = -1
        try:
            rank = mr.world().rank if mr.is_initialized() else -1
        except Exception:  # noqa: BLE001, S110 - a leaver has no world any more
            pass
        path = os.path.join(self.where, f"{os.getpid()}.json")
        with open(path, "w") as f:
            json.dump({"pid": os.getpid(), "rank": rank, "joiner": JOINER,
                       "marks": self.marks, "spans": self.spans}, f)


def _exec_time():
    """When this process was started (exec), from /proc: clock-tick precision (10 ms)."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - age
    except (OSError, ValueError, IndexError):
        return None


PROFILE = _Profile(os.environ["BENCH_PROFILE"]) if os.environ.get("BENCH_PROFILE") else None
if PROFILE is not None:
    PROFILE.install()

# malleable
COMPUTE = float(os.environ.get("BENCH_COMPUTE", "0"))
if COMPUTE > 0:
    import numpy as np

    a = np.random.default_rng(0).standard_normal((200, 200))


def compute():
    t_end = time.perf_counter() + COMPUTE
    while time.perf_counter() < t_end:
        a @ a  # noqa: B018 - busy work standing for the application's


status = mr.init_adapt()
if status is mr.Status.JOINING:
    mr.adapt_begin()
    mr.adapt_commit()  # then the loop below: the first probe stands for the parents' one
    if PROFILE is not None:
        PROFILE.dump()   # now: a joiner that leaves later ends without Python's exit handlers
plan = {s["at_probe"]: s["procs"] for s in json.loads(os.environ["MALLEABLE_PLAN"])}
reports = []
last = int(os.environ["BENCH_LAST_PROBE"])
decided = None  # probe at which the current decision was due
if status is not mr.Status.JOINING:   # joiners meet the others at the loop's end (their first probe is skipped)
    mr.world().Barrier()
while mr.probe_count() < last:
    t_probe = time.perf_counter()
    pending, st, info = mr.probe_adapt()
    if mr.probe_count() in plan and decided is None:
        decided = mr.probe_count()
    if pending:
        t0 = time.perf_counter()
        mr.adapt_begin()
        rep = mr.adapt_commit()
        t1 = time.perf_counter()
        if st is mr.Status.LEAVING:   # (its profile was written when it joined: writing it now would delay its exit,
            sys.exit(0)               # which rank 0's shrink waits for)
        if mr.world().rank == 0:
            reports.append({"kind": rep.kind, "old": rep.old_size, "new": rep.new_size, "seconds": t1 - t_probe,
                            "runtime_seconds": rep.seconds, "stall": t1 - t0,
                            "background": getattr(rep, "background", 0.0), "freed": list(rep.freed_hosts),
                            "overlapped_iterations": info["probe"] - (decided or info["probe"]), "t": time.time()})
        decided = None
    if COMPUTE > 0:
        compute()
    mr.world().Barrier()   # every rank starts the next probe together, as the raw baseline's spawn
if mr.world().rank == 0:
    if PROFILE is not None:
        PROFILE.dump()
    print(json.dumps({"malleable": reports}), flush=True)
