"""EPOP driver logic against a fake runtime and clock (no mpiexec): phase order, branches, MTCT, roles."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest

from malleable.errors import AdaptError
from malleable.runtime import AdaptWindow, Status, epop


class FakeClock:
    """Time moves only when a test says so."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


@dataclass
class FakeComm:
    """Stands in for an mpi4py intracommunicator of identical ranks (collectives return this rank's value)."""

    size: int
    clock: FakeClock
    box: dict = field(default_factory=dict)
    rank: int = 0
    freed: int = 0

    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return self.size

    def allgather(self, x: Any) -> list:
        return [x] * self.size

    def bcast(self, x: Any, root: int = 0) -> Any:
        if x is None:  # a joiner's receive: what the parents sent in the window
            return self.box["resume"]
        if isinstance(x, dict):
            self.box["resume"] = copy.deepcopy(x)  # as if pickled
        return x

    def Barrier(self) -> None:
        self.clock.advance(0.1)

    def Free(self) -> None:
        self.freed += 1


@dataclass
class FakeReport:
    seconds: float


class FakeRuntime:
    """The verbs the driver uses; ``plan`` maps probe number -> (target size, this rank's role)."""

    def __init__(self, clock: FakeClock, size: int = 1, plan: dict | None = None, status: Status = Status.NEW,
                 box: dict | None = None, probes: int = 0, fail_at: tuple = ()) -> None:
        self.clock = clock
        self.box = box if box is not None else {}
        self._world = FakeComm(size, clock, self.box)
        self.plan = plan or {}
        self.status = status
        self.probes = probes
        self._skip_probe = False
        self.fail_at = fail_at
        self.progress: list[tuple[str, dict]] = []
        self.events: list[str] = []
        self._target: tuple[int, Status] | None = None
        self.joining_new = size + 2 if status is Status.JOINING else 0

    def init_adapt(self) -> Status:
        return self.status

    def world(self) -> FakeComm:
        return self._world

    def probe_count(self) -> int:
        return self.probes

    def probe_adapt(self):
        if self._skip_probe:  # like the runtime: a joiner's first probe stands for its parents' one
            self._skip_probe = False
            self.events.append("probe-noop")
            return False, Status.STAYING, {}
        self.probes += 1
        self.events.append(f"probe{self.probes}")
        if self.probes in self.plan:
            self._target = self.plan[self.probes]
            procs, role = self._target
            kind = "expand" if procs > self._world.size else "shrink"
            return True, role, {"procs": procs, "probe": self.probes, "kind": kind}
        return False, Status.STAYING, {}

    def adapt_begin(self) -> AdaptWindow:
        self.events.append("begin")
        if self.status is Status.JOINING:
            new = FakeComm(self.joining_new, self.clock, self.box)
            self._next = new
            return AdaptWindow(None, new, self.joining_new - 1, 0, 1)
        if self.probes in self.fail_at:
            raise AdaptError("spawn failed (fake)")
        procs, role = self._target
        old = self._world.size
        new = FakeComm(procs, self.clock, self.box) if role is not Status.LEAVING else None
        self._next = new
        self.clock.advance(0.5)
        if procs > old:
            return AdaptWindow(None, new, old, 0, procs - old)
        return AdaptWindow(None, new, procs, old - procs, 0)

    def span_comm(self, win: AdaptWindow) -> FakeComm:
        return win.new_world if win.joining else self._world

    def adapt_commit(self) -> FakeReport:
        self.events.append("commit")
        if self._next is not None:
            self._world = self._next
        self._skip_probe = self.status is Status.JOINING
        self.status = Status.STAYING
        return FakeReport(0.5)

    def report_progress(self, phase: str, data: dict) -> None:
        self.progress.append((phase, data))


def recording_program(log: list, iters: int = 5, probe_every: int = 1, stop_at: int | None = None,
                      loops: int = 2) -> epop.Program:
    """init -> work (elastic) -> again? (branch, loops times) -> final (rigid)."""

    def init(ctx):
        log.append(("init", ctx.status))
        if ctx.status is Status.NEW:
            ctx.shared["loops"] = 0

    def setup(ctx):
        log.append(("setup", ctx.size))

    def body(ctx, i):
        log.append(("body", i, ctx.size))
        return stop_at is not None and i == stop_at

    def block(role_name):
        def fn(ctx, a):
            log.append((role_name, a.kind, a.old_size, a.new_size, ctx.status))
        return fn

    def again(ctx):
        ctx.shared["loops"] += 1
        log.append(("branch", ctx.shared["loops"]))
        return "work" if ctx.shared["loops"] < loops else "final"

    def final(ctx):
        log.append(("final", ctx.size))

    return epop.Program([
        epop.Init("init", init),
        epop.Elastic("work", body=body, iters=iters, setup=setup, on_staying=block("staying"),
                     on_leaving=block("leaving"), on_joining=block("joining"), probe_every=probe_every),
        epop.Branch("again", again),
        epop.Rigid("final", final),
    ])


def test_phase_order_and_branches_without_adaptation():
    log: list = []
    rt = FakeRuntime(FakeClock(), size=2)
    res = epop.run_program(recording_program(log, iters=2), runtime=rt, clock=rt.clock)
    assert not res.left and (res.rank, res.size) == (0, 2)
    assert log == [("init", Status.NEW), ("setup", 2), ("body", 0, 2), ("body", 1, 2), ("branch", 1),
                   ("setup", 2), ("body", 0, 2), ("body", 1, 2), ("branch", 2), ("final", 2)]
    assert [(s.phase, s.kind, s.visit, s.iterations) for s in res.stats] == [
        ("init", "init", 1, 1), ("work", "elastic", 1, 2), ("work", "elastic", 2, 2),
        ("final", "rigid", 1, 1)]
    assert rt.probes == 4  # one probe per iteration boundary, none in init/branch/rigid


def test_mtct_from_known_mpi_and_compute_times():
    clock = FakeClock()

    def body(ctx, i):
        clock.advance(0.3)      # compute
        ctx.comm.Barrier()      # 0.1 s inside a (fake) MPI call, timed by the proxy

    def rigid(ctx):
        with ctx.mpi():
            clock.advance(0.2)
            ctx.comm.Barrier()  # nested: not counted twice
        clock.advance(0.7)

    prog = epop.Program([epop.Elastic("e", body=body, iters=4), epop.Rigid("r", rigid)])
    rt = FakeRuntime(clock, size=3)
    res = epop.run_program(prog, runtime=rt, clock=clock)
    e, r = res.stats
    assert (e.procs, e.iterations) == (3, 4)
    assert e.seconds == pytest.approx(1.6) and e.mpi_seconds == pytest.approx(0.4)
    assert e.mtct == pytest.approx(0.25) and e.iter_seconds == pytest.approx(0.4)
    assert r.mtct == pytest.approx(0.3) and r.seconds == pytest.approx(1.0)
    assert [p for p, _ in rt.progress] == ["e", "r"]
    assert rt.progress[0][1]["mtct"] == pytest.approx(0.25) and rt.progress[0][1]["procs"] == 3


def test_mtct_is_available_to_the_application():
    clock = FakeClock()
    seen = []

    def body(ctx, i):
        with ctx.mpi():
            clock.advance(0.1)
        clock.advance(0.1)

    prog = epop.Program([epop.Elastic("e", body=body, iters=2),
                         epop.Branch("b", lambda ctx: seen.append(ctx.mtct("e")) or None),
                         epop.Rigid("never", lambda ctx: seen.append("ran"))])
    epop.run_program(prog, runtime=FakeRuntime(clock), clock=clock)
    assert seen == [pytest.approx(0.5)]


def test_expand_splits_stats_and_runs_the_staying_block():
    log: list = []
    clock = FakeClock()
    rt = FakeRuntime(clock, size=1, plan={3: (3, Status.STAYING)})
    owned = FakeComm(1, clock)

    prog = recording_program(log, iters=5, loops=1)
    setup = prog.phases[1].setup

    def setup_owning(ctx):
        setup(ctx)
        ctx.own(owned)

    prog = epop.Program([prog.phases[0], epop.Elastic(
        "work", body=prog.phases[1].body, iters=5, setup=setup_owning, on_staying=prog.phases[1].on_staying),
        *prog.phases[2:]])
    res = epop.run_program(prog, runtime=rt, clock=clock)
    assert ("staying", "expand", 1, 3, Status.STAYING) in log
    bodies = [(e[1], e[2]) for e in log if e[0] == "body"]
    assert bodies == [(0, 1), (1, 1), (2, 3), (3, 3), (4, 3)]
    assert log.index(("setup", 3)) < log.index(("body", 2, 3))
    assert owned.freed == 2  # before the adaptation and at the end
    work = [s for s in res.stats if s.phase == "work"]
    assert [(s.procs, s.first_iter, s.iterations) for s in work] == [(1, 0, 2), (3, 2, 3)]
    (a,) = res.adaptations
    assert (a.kind, a.old_size, a.new_size, a.phase, a.iteration, a.probe) == ("expand", 1, 3, "work", 2, 3)
    assert a.seconds == pytest.approx(0.5) and a.runtime_seconds == 0.5
    assert rt.box["resume"]["iter"] == 2  # what joiners are told


def test_joiner_runs_init_then_resumes_at_the_parents_iteration():
    clock = FakeClock()
    parent_log: list = []
    box: dict = {}
    parent = FakeRuntime(clock, size=1, plan={3: (3, Status.STAYING)}, box=box)
    epop.run_program(recording_program(parent_log, iters=5, loops=2), runtime=parent, clock=clock)

    log: list = []
    joiner = FakeRuntime(clock, size=1, status=Status.JOINING, box={"resume": box["resume"]}, probes=3)
    res = epop.run_program(recording_program(log, iters=5, loops=2), runtime=joiner, clock=clock)
    assert log[0] == ("init", Status.JOINING)
    assert log[1] == ("joining", "expand", 2, 3, Status.JOINING)
    assert log[2] == ("setup", 3)
    assert [e[1] for e in log if e[0] == "body"] == [2, 3, 4, 0, 1, 2, 3, 4]
    assert ("branch", 1) in log and log[-1] == ("final", 3)
    assert joiner.events[:2] == ["begin", "commit"]
    # the boundary the parents already probed costs the joiner only the runtime's no-op probe
    assert joiner.events[2:4] == ["probe-noop", "probe4"]
    assert [s.phase for s in res.stats][:2] == ["init", "work"]  # history came from rank 0
    assert len(res.adaptations) == 1


def test_joiner_init_has_no_world():
    clock = FakeClock()
    box: dict = {}
    parent = FakeRuntime(clock, plan={2: (2, Status.STAYING)}, box=box)
    epop.run_program(recording_program([], iters=3, loops=1), runtime=parent, clock=clock)

    def init(ctx):
        with pytest.raises(AdaptError, match="no world yet"):
            _ = ctx.comm

    prog = epop.Program([epop.Init("init", init), *recording_program([], iters=3, loops=1).phases[1:]])
    resume = dict(box["resume"], shared={"loops": 0})
    joiner = FakeRuntime(clock, status=Status.JOINING, box={"resume": resume})
    assert not epop.run_program(prog, runtime=joiner, clock=clock).left


def test_leaving_rank_returns_left_and_skips_later_phases():
    log: list = []
    rt = FakeRuntime(FakeClock(), size=4, plan={2: (2, Status.LEAVING)})
    res = epop.run_program(recording_program(log, iters=4), runtime=rt, clock=rt.clock)
    assert res.left and res.rank == -1
    assert ("leaving", "shrink", 4, 2, Status.LEAVING) in log
    assert log[-1][0] == "leaving" and not any(e[0] in ("branch", "final") for e in log)


def test_staying_side_of_a_shrink():
    log: list = []
    rt = FakeRuntime(FakeClock(), size=4, plan={2: (2, Status.STAYING)})
    res = epop.run_program(recording_program(log, iters=3, loops=1), runtime=rt, clock=rt.clock)
    assert ("staying", "shrink", 4, 2, Status.STAYING) in log and res.size == 2
    assert "resume" not in rt.box  # nobody joins, nothing to tell


def test_failed_adaptation_goes_on_with_the_old_world():
    log: list = []
    rt = FakeRuntime(FakeClock(), size=1, plan={2: (3, Status.STAYING)}, fail_at=(2,))
    res = epop.run_program(recording_program(log, iters=3, loops=1), runtime=rt, clock=rt.clock)
    assert not res.adaptations and res.size == 1
    assert [e for e in log if e[0] == "setup"] == [("setup", 1), ("setup", 1)]  # rebuilt after freeing
    assert [e[1] for e in log if e[0] == "body"] == [0, 1, 2]


def test_probe_every_and_early_stop():
    log: list = []
    rt = FakeRuntime(FakeClock())
    res = epop.run_program(recording_program(log, iters=10, probe_every=3, stop_at=6, loops=1), runtime=rt,
                           clock=rt.clock)
    assert [e[1] for e in log if e[0] == "body"] == list(range(7))
    assert rt.probes == 3  # boundaries 0, 3, 6
    assert res.stats[1].iterations == 7


def test_iters_callable_and_context_fields():
    seen = []

    def body(ctx, i):
        seen.append((ctx.phase, ctx.iteration, ctx.status))

    prog = epop.Program([epop.Elastic("e", body=body, iters=lambda ctx: ctx.data["n"])])
    res = epop.run_program(prog, data={"n": 2}, runtime=FakeRuntime(FakeClock()))
    assert seen == [("e", 0, Status.NEW), ("e", 1, Status.NEW)] and res.data == {"n": 2}


@pytest.mark.parametrize("make, exc, message", [
    (lambda: epop.Program([]), ValueError, "at least one phase"),
    (lambda: epop.Program([epop.Rigid("a", print), epop.Rigid("a", print)]), ValueError, "duplicate phase"),
    (lambda: epop.Program([epop.Rigid("a", print), epop.Init("i", print)]), ValueError, "must come before"),
    (lambda: epop.Program(["nope"]), TypeError, "not a phase"),
    (lambda: epop.Elastic("e", body=print, iters=-1), ValueError, "iters must be an int >= 0"),
    (lambda: epop.Elastic("e", body=print, iters=3, probe_every=0), ValueError, "probe_every"),
    (lambda: epop.Elastic("e", body=None, iters=3), TypeError, "Elastic.body must be callable"),
    (lambda: epop.Rigid("", print), ValueError, "non-empty string"),
])
def test_bad_programs_are_rejected(make, exc, message):
    with pytest.raises(exc, match=message):
        make()


@pytest.mark.parametrize("target, message", [("nowhere", "no phase called 'nowhere'"),
                                             ("i", "returned Init phase")])
def test_bad_branch_targets(target, message):
    prog = epop.Program([epop.Init("i", lambda ctx: None), epop.Branch("b", lambda ctx: target)])
    with pytest.raises(ValueError, match=message):
        epop.run_program(prog, runtime=FakeRuntime(FakeClock()))


def test_bad_iteration_count_from_callable():
    prog = epop.Program([epop.Elastic("e", body=lambda ctx, i: None, iters=lambda ctx: "3")])
    with pytest.raises(ValueError, match="iters must give an int"):
        epop.run_program(prog, runtime=FakeRuntime(FakeClock()))


def test_timed_comm_owns_real_communicators():
    from mpi4py import MPI

    ctx = epop.Context(None, None, FakeClock())
    ctx._set_world(MPI.COMM_SELF)
    dup = ctx.comm.Dup()
    assert isinstance(dup, epop.TimedComm) and dup.raw.Get_size() == 1
    cart = ctx.comm.Create_cart([1], periods=[False])
    assert cart.Shift(0, 1) == (MPI.PROC_NULL, MPI.PROC_NULL)
    assert ctx.comm.size == 1 and len(ctx._owned) == 2
    raws = [dup.raw, cart.raw]
    ctx._free_owned()
    assert not ctx._owned and all(r == MPI.COMM_NULL for r in raws)
