"""EPOP phase driver: a malleable program as a list of phases over one data block (003, §EPOP).

A program is a sequence of phases that share one *data block* (any object, ``ctx.data``):

* :class:`Init` runs once when the job starts, and again on every joining process (before it has a
  world) so that it can set up the data block's structure. Init phases come first.
* :class:`Elastic` is the body of the computation: ``body(ctx, i)`` for ``i`` in ``range(iters)``.
  The driver probes for an adaptation at every iteration boundary (every ``probe_every``
  iterations); when one is pending it runs the phase's adaptation block for this process's role
  (staying, leaving, joining), commits, rebuilds what ``setup`` builds, and goes on. Joining
  processes resume at the same iteration of the same phase.
* :class:`Rigid` never adapts (e.g. writing the result).
* :class:`Branch` returns the name of the next phase (or ``None`` to end the program).

The driver measures, per phase and per process count, the phase time and the time spent in MPI
calls made through ``ctx.comm`` (or inside ``with ctx.mpi():``); an allgather gives every rank
the mean MPI-to-phase time ratio (MTCT), and world rank 0 reports it with
:func:`malleable.runtime.report_progress`.

Example::

    from malleable.runtime import epop

    prog = epop.Program([
        epop.Init("init", make_block),
        epop.Elastic("solve", body=step, iters=1000, setup=neighbours, adapt=move_rows),
        epop.Rigid("write", save),
    ])
    result = epop.run_program(prog, data=Block())
    if result.left:
        return  # this process was released by a shrink
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from mpi4py import MPI

from malleable.errors import AdaptError
from malleable.runtime._epop_phases import Branch, Elastic, Init, Program, Rigid
from malleable.runtime._epop_records import AdaptRecord, PhaseStats, RunResult, mean_profile
from malleable.runtime._model import fit_amdahl
from malleable.runtime._types import AdaptWindow, Status

__all__ = [
    "AdaptRecord",
    "Adaptation",
    "Branch",
    "Context",
    "Elastic",
    "Init",
    "PhaseStats",
    "Program",
    "Rigid",
    "RunResult",
    "TimedComm",
    "run_program",
]

log = logging.getLogger(__name__)

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Adaptation:
    """What an adaptation block receives besides the context.

    ``span`` is the intracommunicator holding the old owners as ranks ``0..old_size-1`` and the
    new owners as ranks ``0..new_size-1`` (see :func:`malleable.runtime.span_comm`).
    """

    kind: str
    role: Status
    old_size: int
    new_size: int
    window: AdaptWindow
    span: Any

    def move(self, local: Any, global_shape: Sequence[int], dtype: Any, axis: int = 0) -> Any:
        """Redistribute a block-distributed array from the old to the new owners.

        Args:
            local: this rank's old block (None on joiners).
            global_shape: shape of the whole array.
            dtype: its dtype.
            axis: the distributed axis.

        Returns:
            This rank's new block (empty along ``axis`` on leaving ranks).
        """
        from malleable.runtime._redistribute import redistribute

        return redistribute(local, global_shape, dtype, self.old_size, self.new_size, self.span, axis)


class TimedComm:
    """A communicator proxy that adds the time of every method call to its context's MPI time.

    Communicators it creates (``Dup``, ``Split``, ``Create_cart``, ...) come back wrapped and are
    owned by the context, which frees them before each adaptation and at the end of the program.
    The wrapped communicator is ``raw``; pass it where mpi4py needs a real ``Comm``.
    """

    __slots__ = ("_ctx", "raw")

    def __init__(self, raw: Any, ctx: Context) -> None:
        self.raw = raw
        self._ctx = ctx

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.raw, name)
        if not callable(attr):
            return attr
        ctx = self._ctx

        def timed(*args: Any, **kwargs: Any) -> Any:
            with ctx.mpi(name):
                result = attr(*args, **kwargs)
            return ctx._adopt(result)

        return timed

    def __repr__(self) -> str:
        return f"TimedComm({self.raw!r})"


class Context:
    """Per-process state handed to every phase callable.

    The driver sets ``status``, ``phase``, ``iteration`` and the world; phases read them and own
    ``data`` (the data block) and ``shared`` (small picklable values that world rank 0 sends to
    joining processes, e.g. counters a Branch relies on). ``stats`` and ``adaptations`` are the
    same on every rank.
    """

    def __init__(self, rt: Any, data: Any, clock: Clock) -> None:
        self.data = data
        self.shared: dict[str, Any] = {}
        self.status = Status.NEW
        self.phase = ""
        self.iteration = 0
        self.stats: list[PhaseStats] = []
        self.adaptations: list[AdaptRecord] = []
        self._rt = rt
        self._clock = clock
        self._mpi = 0.0
        self._calls: dict[str, list[float]] = {}  # per MPI call of the current segment: [seconds, count]
        self._depth = 0
        self._owned: list[Any] = []
        self._comm: TimedComm | None = None

    @property
    def comm(self) -> TimedComm:
        """The job's current world, timed (``ctx.comm.raw`` is the mpi4py communicator).

        Raises:
            AdaptError: on a joiner during Init (it has no world yet).
        """
        if self._comm is None:
            raise AdaptError(f"phase {self.phase!r}: no world yet (Init on a joining process)")
        return self._comm

    @property
    def rank(self) -> int:
        """This process's rank in the current world."""
        return int(self.comm.raw.Get_rank())

    @property
    def size(self) -> int:
        """Size of the current world."""
        return int(self.comm.raw.Get_size())

    @contextlib.contextmanager
    def mpi(self, name: str = "ctx.mpi") -> Iterator[None]:
        """Count the time spent inside the block as MPI time (e.g. around ``Request.Waitall``), profiled as ``name``."""
        if self._depth:
            yield
            return
        self._depth = 1
        t0 = self._clock()
        try:
            yield
        finally:
            dt = self._clock() - t0
            self._mpi += dt
            entry = self._calls.setdefault(name, [0.0, 0])
            entry[0] += dt
            entry[1] += 1
            self._depth = 0

    @property
    def mpi_seconds(self) -> float:
        """MPI time counted so far in the current phase segment."""
        return self._mpi

    def own(self, comm: Any) -> Any:
        """Make the driver free ``comm`` before the next adaptation and at the end; returns it."""
        self._owned.append(comm)
        return comm

    def mtct(self, phase: str) -> float | None:
        """The latest MTCT measured for ``phase`` (None before its first segment ends)."""
        for s in reversed(self.stats):
            if s.phase == phase:
                return s.mtct
        return None

    def _adopt(self, result: Any) -> Any:
        if isinstance(result, MPI.Comm) and result != MPI.COMM_NULL:
            self.own(result)
            return TimedComm(result, self)
        return result

    def _free_owned(self) -> None:
        from malleable.runtime._mpi import current

        for comm in reversed(self._owned):
            if not MPI.Is_finalized() and comm != MPI.COMM_NULL:
                current().release(comm)  # it may span spawn groups
        self._owned.clear()

    def _set_world(self, world: Any) -> None:
        self._comm = TimedComm(world, self)


class _Driver:
    """Runs one program on one process; mutated only by its own methods."""

    def __init__(self, program: Program, rt: Any, ctx: Context, clock: Clock) -> None:
        self.program = program
        self.rt = rt
        self.ctx = ctx
        self.clock = clock
        self.visits: dict[str, int] = {}

    # --- measurements ------------------------------------------------------------------------

    def flush(self, phase: str, kind: str, visit: int, first: int, iterations: int, seconds: float,
              total: int = 0) -> None:
        """Collective over the world: turn this segment's times into a PhaseStats on every rank (``total``: the
        elastic phase's iteration count, reported so the controller knows how far the job got)."""
        ctx = self.ctx
        mpi, ctx._mpi = ctx._mpi, 0.0
        calls, ctx._calls = ctx._calls, {}
        if iterations == 0 and kind == "elastic":
            return
        rows = ctx.comm.raw.allgather((seconds, mpi, calls))
        ratios = [m / s if s > 0 else 0.0 for s, m, _ in rows]
        stats = PhaseStats(phase, kind, visit, len(rows), first, iterations, max(s for s, _, _ in rows),
                           sum(m for _, m, _ in rows) / len(rows), sum(ratios) / len(ratios),
                           mean_profile([c for _, _, c in rows]))
        ctx.stats.append(stats)
        if ctx.comm.raw.Get_rank() == 0:
            log.info("phase %s (%s) on %d procs: %d iteration(s) in %.4f s, MTCT %.3f", phase, kind,
                     stats.procs, iterations, stats.seconds, stats.mtct)
            report = stats.as_dict()
            model = fit_amdahl((s.procs, s.iter_seconds) for s in ctx.stats if s.phase == phase and s.iterations)
            if kind == "elastic" and model is not None:
                report.update(serial_fraction=model.serial, t1=model.t1, speedup=model.speedup(stats.procs))
            if kind == "elastic" and total:
                report["total"] = total
            self.rt.report_progress(phase, report)

    # --- phases ------------------------------------------------------------------------------

    def run_once(self, ph: Init | Rigid, kind: str) -> None:
        ctx = self.ctx
        visit = self._visit(ph.name)
        ctx._mpi, ctx._calls = 0.0, {}
        t0 = self.clock()
        ph.fn(ctx)
        self.flush(ph.name, kind, visit, 0, 1, self.clock() - t0)

    def elastic(self, ph: Elastic, resume: dict[str, Any] | None = None) -> bool:
        """Run an elastic phase from its start or from a joiner's resume point; False if this process left."""
        ctx = self.ctx
        if resume is None:
            visit = self._visit(ph.name)
            total = ph.total(ctx)
            start = 0
            if ph.setup is not None:
                ph.setup(ctx)
        else:
            visit, total, start = resume["visit"], resume["total"], resume["iter"]
        ctx._mpi, ctx._calls = 0.0, {}
        first, busy, i = start, 0.0, start
        while i < total:
            # a joiner enters at the boundary its parents just probed: its first probe_adapt() is
            # the runtime's no-op standing for that probe
            if i % ph.probe_every == 0:
                pending, status, info = self.rt.probe_adapt()
                if pending:
                    self.flush(ph.name, "elastic", visit, first, i - first, busy, total)
                    if not self.adapt(ph, visit, i, total, status, info):
                        return False
                    first, busy = i, 0.0
                    ctx._mpi, ctx._calls = 0.0, {}
            ctx.iteration = i
            t0 = self.clock()
            done = ph.body(ctx, i)
            busy += self.clock() - t0
            i += 1
            if done:
                break
        self.flush(ph.name, "elastic", visit, first, i - first, busy, total)
        return True

    def _visit(self, name: str) -> int:
        self.visits[name] = self.visits.get(name, 0) + 1
        self.ctx.phase = name
        return self.visits[name]

    # --- adaptation --------------------------------------------------------------------------

    def adapt(self, ph: Elastic, visit: int, i: int, total: int, status: Status, info: dict) -> bool:
        """Parent side of an adaptation at iteration boundary ``i``; False if this process left."""
        ctx, rt = self.ctx, self.rt
        t0 = self.clock()
        ctx._free_owned()
        old_size = ctx.comm.raw.Get_size()
        try:
            win = rt.adapt_begin()
        except AdaptError as e:
            log.warning("adaptation to %s processes failed, going on with %d: %s",
                        info.get("procs"), old_size, e)
            if ph.setup is not None:
                ph.setup(ctx)
            return True
        new_size = win.staying + win.joining
        span = rt.span_comm(win)
        if win.joining:
            resume = {"phase": ph.name, "visit": visit, "iter": i, "total": total, "shared": ctx.shared,
                      "stats": ctx.stats, "adaptations": ctx.adaptations, "visits": self.visits}
            span.bcast(resume if span.Get_rank() == 0 else None, root=0)
        kind = "expand" if win.joining else "shrink"
        ctx.status = status
        block = ph.block(status)
        if block is not None:
            block(ctx, Adaptation(kind, status, old_size, new_size, win, span))
        rep = rt.adapt_commit()
        if status is Status.LEAVING:
            ctx._comm = None
            return False
        self._after_commit(ph, kind, old_size, new_size, i, int(info.get("probe", 0)), t0, rep.seconds)
        return True

    def join(self) -> tuple[Elastic, dict[str, Any]]:
        """Joiner side: open the window, learn where the job is, take our share, commit."""
        ctx, rt = self.ctx, self.rt
        t0 = self.clock()
        win = rt.adapt_begin()
        span = win.new_world
        resume = span.bcast(None, root=0)
        ctx.shared = resume["shared"]
        ctx.stats = list(resume["stats"])
        ctx.adaptations = list(resume["adaptations"])
        self.visits = dict(resume["visits"])
        ph = self.program.phases[self.program.index(resume["phase"])]
        if not isinstance(ph, Elastic):
            raise AdaptError(f"joined in phase {ph.name!r}, which is not elastic")
        ctx.phase = ph.name
        old_size, new_size = win.staying + win.leaving, win.staying + win.joining
        block = ph.block(Status.JOINING)
        if block is not None:
            block(ctx, Adaptation("expand", Status.JOINING, old_size, new_size, win, span))
        rep = rt.adapt_commit()
        self._after_commit(ph, "expand", old_size, new_size, resume["iter"], rt.probe_count(), t0,
                           rep.seconds)
        return ph, resume

    def _after_commit(self, ph: Elastic, kind: str, old: int, new: int, i: int, probe: int, t0: float,
                      runtime_seconds: float) -> None:
        ctx = self.ctx
        ctx.status = Status.STAYING
        ctx._set_world(self.rt.world())
        if ph.setup is not None:
            ph.setup(ctx)
        raw = ctx.comm.raw
        seconds, runtime_seconds = raw.bcast((self.clock() - t0, runtime_seconds), root=0)
        rec = AdaptRecord(kind, old, new, ph.name, i, probe, seconds, runtime_seconds)
        ctx.adaptations.append(rec)
        if raw.Get_rank() == 0:
            log.info("%s %d -> %d at %s[%d] in %.3f s", kind, old, new, ph.name, i, seconds)

    # --- the flow ----------------------------------------------------------------------------

    def run(self, status: Status) -> bool:
        """Run the program from the start (NEW) or from the join point (JOINING); False if this left."""
        prog, ctx = self.program, self.ctx
        pos: int | None = 0
        if status is Status.JOINING:
            ctx.status = Status.JOINING
            for ph in prog.phases:
                if isinstance(ph, Init):
                    ctx.phase = ph.name
                    ph.fn(ctx)
            elastic, resume = self.join()
            if not self.elastic(elastic, resume):
                return False
            pos = prog.index(elastic.name) + 1
        else:
            ctx.status = Status.NEW
            ctx._set_world(self.rt.world())
        while pos is not None and pos < len(prog.phases):
            ph = prog.phases[pos]
            if isinstance(ph, Branch):
                self._visit(ph.name)
                target = ph.fn(ctx)
                if target is None:
                    break
                pos = prog.index(target)
                if isinstance(prog.phases[pos], Init):
                    raise ValueError(  # noqa: TRY004 - a wrong phase name, not a wrong type
                        f"branch {ph.name!r} returned Init phase {target!r}; Init runs only once")
                continue
            if isinstance(ph, Elastic):
                if not self.elastic(ph):
                    return False
            else:
                self.run_once(ph, "init" if isinstance(ph, Init) else "rigid")
            pos += 1
        return True


def run_program(
    program: Program,
    data: Any = None,
    *,
    status: Status | None = None,
    runtime: Any = None,
    clock: Clock = time.perf_counter,
) -> RunResult:
    """Run an EPOP program on this process until it ends or this process leaves the job.

    Args:
        program: the phases.
        data: the initial data block (``ctx.data``); joiners get theirs from Init and the
            joining adaptation block.
        status: the result of an ``init_adapt()`` the caller already made; by default the driver
            calls ``init_adapt()`` itself.
        runtime: the adaptation verbs (default :mod:`malleable.runtime`; tests pass a fake).
        clock: the time source for phase and MPI times.

    Returns:
        A :class:`RunResult`; when ``left`` is True the process was released and must return.

    Raises:
        ValueError: a Branch named an unknown phase or an Init phase.
        AdaptError: the runtime failed in a way the job cannot survive.
    """
    if runtime is None:
        from malleable import runtime as rt_module

        runtime = rt_module
    t0 = clock()
    if status is None:
        status = runtime.init_adapt()
    ctx = Context(runtime, data, clock)
    driver = _Driver(program, runtime, ctx, clock)
    stayed = driver.run(status)
    ctx._free_owned()
    rank, size = (ctx.comm.raw.Get_rank(), ctx.comm.raw.Get_size()) if stayed else (-1, 0)
    return RunResult(not stayed, ctx.data, tuple(ctx.stats), tuple(ctx.adaptations), clock() - t0, rank, size)
