"""The adaptation verbs and the runtime's world handle (the one piece of module-level state).

Flow of an expansion: ``probe_adapt`` (pending, STAYING) → ``adapt_begin`` spawns one group per
host and merges → redistribute data over ``new_world`` → ``adapt_commit`` makes it ``world()``.
Joiners start with ``init_adapt`` → JOINING and call ``adapt_begin`` at once. A shrink keeps the
lowest ranks: leaving ranks get ``new_world == MPI.COMM_NULL``, send their data away inside the
window, and after ``adapt_commit`` (which disconnects them, waits for the rest of their spawn group
if it is split, and finalizes MPI) must return from the application.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Iterable

from mpi4py import MPI

from malleable.errors import AdaptError, AdaptTimeout, ConfigError
from malleable.runtime import _lifecycle, _mpi, _spawn
from malleable.runtime._layout import (
    ExpandPlan,
    Group,
    GroupLayout,
    apply_expand,
    plan_expand,
    plan_shrink,
    split_hosts,
)
from malleable.runtime._liveness import connect_back, hostname
from malleable.runtime._record import Record, get_logger
from malleable.runtime._settings import env_int, env_timeout
from malleable.runtime._types import AdaptWindow, ProbeResult, Resize, Status

# A joiner imports this module before it can answer its parents, on every expansion's path: what only the parents
# use (decisions, plans, requests, slot checks, registered arrays, the liveness listener) loads where it is used.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from malleable.runtime import _expand, _requests
    from malleable.runtime._bounds import Slots
    from malleable.runtime._liveness import Listener
    from malleable.runtime._plan import PlanStep
    from malleable.runtime._requests import AdaptRequest

__all__ = [
    "AdaptReport",
    "adapt_begin",
    "adapt_commit",
    "base_size",
    "init_adapt",
    "is_initialized",
    "layout",
    "probe_adapt",
    "probe_count",
    "report_progress",
    "set_source",
    "world",
]

log = get_logger(__name__)


class AdaptReport(Record):
    """What :func:`adapt_commit` returns: the change, its cost, and the hosts it really freed; ``idle`` counts
    processes that left the world but wait for their group, ``background`` the seconds an overlapped expansion's
    preparation took while the job computed."""

    __slots__ = ("kind", "old_size", "new_size", "status", "seconds", "freed_hosts", "idle", "background")
    kind: str
    old_size: int
    new_size: int
    status: Status
    seconds: float
    freed_hosts: tuple[str, ...]
    idle: int
    background: float

    def __init__(self, kind: str, old_size: int, new_size: int, status: Status, seconds: float,
                 freed_hosts: tuple[str, ...] = (), idle: int = 0, background: float = 0.0) -> None:
        self._init(kind=kind, old_size=old_size, new_size=new_size, status=status, seconds=seconds,
                   freed_hosts=freed_hosts, idle=idle, background=background)


class _Window:
    """An open adaptation window (between adapt_begin and adapt_commit)."""

    def __init__(self, kind: str, decision: Resize, old_world: Any, new_world: Any, intercomm: Any, status: Status,
                 t0: float, after: GroupLayout, gone: tuple[int, ...] = (), freed: tuple[str, ...] = (),
                 background: float = 0.0, metas: dict | None = None) -> None:
        self.kind, self.decision, self.status, self.t0, self.after = kind, decision, status, t0, after
        self.old_world, self.new_world, self.intercomm = old_world, new_world, intercomm
        self.gone, self.freed, self.background = gone, freed, background
        self.metas = metas   # registered arrays to move (an expansion's, from rank 0); None: ask rank 0


class _Runtime:
    """State of this process's participation in the job; mutated only by the verbs below."""

    def __init__(self, world: Any, layout: GroupLayout, gid: int, member: int, timeout: float,
                 plan: tuple[PlanStep, ...], plan_text: str, job_hosts: tuple[str, ...], status: Status = Status.NEW,
                 slots: Slots | None = None, overlap: bool = False) -> None:
        self.world, self.layout, self.gid, self.member, self.timeout = world, layout, gid, member, timeout
        self.plan, self.plan_text, self.job_hosts, self.status = plan, plan_text, job_hosts, status
        self.slots = slots                 # None on a joiner until it merges
        self.grow = ""                     # why this job cannot grow at all ('' if it can: a joiner's job could)
        self.overlap = overlap             # prepare expansions in the background (see _expand)
        self.probes = 0
        self.pending: Resize | None = None
        self.pending_kind = ""
        self.window: _Window | None = None
        self.listener: Listener | None = None
        self.alive_fd: int | None = None
        self.parent: Any = None            # a joiner's intercommunicator to its parents, until the merge
        self.joined_at = 0.0               # a joiner: when its init_adapt ran (time.monotonic())
        self.finished = False
        self.skip_probe = False
        self.source: Any = None
        self.exit_code = 0                 # what this process passed to sys.exit (reported to rank 0 at the end)
        self.spanned = False               # took part in an expansion: connected to other spawn groups
        self.leftovers = _spawn.Leftovers()  # of failed expansions
        self.requests: _requests.Channel | None = None   # carries request_adapt calls to rank 0
        self.queued_requests: list[AdaptRequest] = []     # made before the channel (sent at the next probe)
        self.outstanding: AdaptRequest | None = None   # rank 0: the request the decision source has not answered
        self.drained_at = 0.0              # rank 0: when it last looked for other ranks' requests
        self.registry: dict = {}           # registered arrays (see _registered)
        self.background: _expand.Background | None = None   # an expansion being prepared
        self.prepared: _expand.Prepared | None = None       # a prepared expansion waiting for adapt_begin


_STATE: _Runtime | None = None  # the runtime's world handle


def _rt() -> _Runtime:
    if _STATE is None:
        raise AdaptError("the malleable runtime is not initialised: call init_adapt() first")
    return _STATE


def is_initialized() -> bool:
    """Whether init_adapt() has run in this process."""
    return _STATE is not None


def world() -> Any:
    """The job's current world communicator (use it instead of ``MPI.COMM_WORLD``)."""
    rt = _rt()
    if rt.finished:
        raise AdaptError("this process has left the job (LEAVING); it has no world")
    return rt.world


def layout() -> GroupLayout:
    """The job's process groups (hosts, sizes) as this process knows them."""
    return _rt().layout


def base_size() -> int:
    """Number of launcher-started processes (they never leave)."""
    return _rt().layout.base_size


def probe_count() -> int:
    """How many times the job has called probe_adapt (the same on every rank)."""
    return _rt().probes


def init_adapt(timeout: float | None = None, plan: str | None = None, overlap: bool | None = None) -> Status:
    """Join the malleable runtime; call once per process instead of relying on ``MPI.COMM_WORLD``.

    Args:
        timeout: seconds any adaptation step may wait (default ``MALLEABLE_ADAPT_TIMEOUT`` or 60).
        plan: JSON plan text (default ``MALLEABLE_PLAN``); ignored on joiners, which get the job's.
        overlap: prepare expansions in the background while the job computes (default ``MALLEABLE_OVERLAP=1``):
            ``probe_adapt`` says pending only once the new processes are ready to merge.

    Returns:
        ``Status.NEW`` for processes of the job's start, ``Status.JOINING`` for processes spawned
        by an expansion, which must call :func:`adapt_begin` next.

    Raises:
        PlanError: the plan is invalid (the message says what is wrong).
        AdaptError: already initialised, or a joiner could not reach its parents.
    """
    global _STATE
    if _STATE is not None:
        raise AdaptError("init_adapt() was already called in this process")
    t = env_timeout(timeout)
    if MPI.Comm.Get_parent() != MPI.COMM_NULL:
        return _joiner_init(t, overlap)
    from malleable.runtime._bounds import check_expand, check_plan, host_resolves, initial_layout, slots_from_env
    from malleable.runtime._liveness import Listener
    from malleable.runtime._plan import parse_plan, validate_plan
    from malleable.runtime._sources import choose_hosts, make_source

    comm = MPI.COMM_WORLD
    seen = comm.allgather((hostname(), _mpi.current().growth_limit() if comm.rank == 0 else ""))
    hosts, grow = [h for h, _ in seen], seen[0][1]   # whether the job may grow is rank 0's answer on every rank
    base = GroupLayout((Group(0, tuple(hosts), comm.size, base=True),))
    text = plan if plan is not None else os.environ.get("MALLEABLE_PLAN", "")
    steps = parse_plan(text)  # same input on every rank: every rank raises alike
    job_hosts = tuple(h for h in os.environ.get("MALLEABLE_HOSTS", "").split(",") if h)
    initial = max(comm.size, env_int("MALLEABLE_INITIAL_PROCS", comm.size))
    validate_plan(steps, initial, comm.size, host_resolves)
    slots = slots_from_env()
    local = hosts[0]
    try:
        if initial > comm.size:
            check_expand(base, plan_expand(base, initial, _initial_hosts(job_hosts, initial, comm.size)), slots,
                         local, _remote_limit(), grow)
    except AdaptError as e:
        raise ConfigError(f"cannot start the job with {initial} processes: {e}") from None
    check_plan(steps, initial_layout(base, initial, job_hosts, local), slots, local,
               lambda lay, n: choose_hosts(lay, job_hosts, n), _remote_limit(), grow)
    rt = _Runtime(comm.Dup(), base, 0, comm.rank, t, steps, text, job_hosts, slots=slots,
                  overlap=overlap if overlap is not None else os.environ.get("MALLEABLE_OVERLAP", "0") == "1")
    rt.grow = grow
    rt.source = make_source(steps, comm.rank)
    if comm.rank == 0:
        rt.listener = Listener()
        from malleable.runtime._bytecode import cache_bytecode

        cache_bytecode()   # before anything is spawned: joiners then load it instead of compiling the runtime
    _STATE = rt
    _lifecycle.install_hooks(lambda: _STATE)
    marker = os.environ.get("MALLEABLE_RUN_MARKER")
    if marker and comm.rank == 0:           # tell ``malleable run`` that the program is malleable
        try:
            with open(marker, "w") as f:
                f.write("init_adapt\n")
        except OSError as e:
            log.warning("could not leave the init marker %s: %s", marker, e)
    if initial > comm.size:
        ihosts = _initial_hosts(job_hosts, initial, comm.size)
        _parent_expand(rt, Resize(initial, ihosts), kind="initial")
    if comm.rank == 0:
        rt.source.started(rt.layout)
    return Status.NEW


def _remote_limit() -> str:
    """Why this MPI cannot spawn onto another host ('' if it can)."""
    b = _mpi.current()
    return "" if b.can_reach() else b.reach_limit()


def set_source(source: Any) -> None:
    """Replace the decision source (e.g. a controller link made by the application); call on every rank."""
    _rt().source = source


def _initial_hosts(job_hosts: tuple[str, ...], n: int, base: int) -> tuple[str, ...]:
    """Hosts for processes base..n-1 when the job starts: round robin over the job's hosts."""
    if not job_hosts:
        return ()
    return tuple(job_hosts[i % len(job_hosts)] for i in range(base, n))


def _joiner_init(timeout: float, overlap: bool | None) -> Status:
    """A joiner's ``init_adapt``: no communication (the parents learn that it is alive in its ``adapt_begin``); the
    processes of the job's initial size join at once."""
    global _STATE
    rt = _Runtime(None, GroupLayout(()), -1, MPI.COMM_WORLD.rank, timeout, (), "", (), status=Status.JOINING)
    rt.parent, rt.joined_at = MPI.Comm.Get_parent(), time.monotonic()
    # the same program on the same environment: the parents' overlap setting (a joiner of an overlapped expansion
    # waits for the word to merge until the parents' next safe point)
    rt.overlap = overlap if overlap is not None else os.environ.get("MALLEABLE_OVERLAP", "0") == "1"
    _STATE = rt
    _lifecycle.install_hooks(lambda: _STATE)
    if _spawn.INITIAL_OPTION in getattr(sys, "_xoptions", {}):
        _joiner_merge(rt)
        _commit(rt)
        rt.status = Status.NEW
        return Status.NEW
    return Status.JOINING


def probe_adapt() -> ProbeResult:
    """Ask whether an adaptation is pending; call it at a safe point on every rank of the world.

    A joiner's first call after its ``adapt_commit`` returns ``pending=False`` without counting:
    it stands for the probe its parents made just before the expansion, so a loop that probes at
    its top works unchanged for joiners entering it.

    Returns:
        ``(pending, status, info)``: ``pending`` is the same on every rank; ``status`` is
        ``LEAVING`` on ranks a pending shrink removes, else ``STAYING``; ``info`` has the target
        size (``procs``), the ``hosts`` for new processes, the ``kind`` and the ``probe`` count.

    Raises:
        AdaptError: called inside an adaptation window or on a process that left.
    """
    rt = _rt()
    if rt.window is not None or rt.status is Status.JOINING:
        raise AdaptError("probe_adapt() inside an adaptation window; call adapt_commit() first")
    if rt.finished:
        raise AdaptError("this process has left the job")
    if rt.skip_probe:  # a joiner's first probe: its parents made this one already
        rt.skip_probe = False
        return ProbeResult(False, Status.STAYING, {})
    rt.probes += 1
    from malleable.runtime import _decide

    heard = _decide.poll(rt)
    if isinstance(heard, ProbeResult):
        return heard
    d, granted = heard
    if rt.background is not None:
        return _probe_background(rt, d, granted)
    return _act(rt, d, granted)


def _act(rt: _Runtime, d: Resize | None, granted: bool) -> ProbeResult:
    """Turn decision ``d`` into the probe's answer: a pending expansion or shrink, or nothing (refused decisions are
    reported to the source)."""
    if d is None or d.procs == rt.layout.world_size:
        return ProbeResult(False, Status.STAYING, {"request": "granted"} if granted else {})
    size = rt.layout.world_size
    if d.procs < max(1, rt.layout.base_size):
        reason = (f"refusing to shrink to {d.procs} process(es): below the base of "
                  f"{rt.layout.base_size} launcher-started process(es)")
        log.error("%s", reason)
        if rt.world.rank == 0:
            rt.source.refused(d, reason)
        return ProbeResult(False, Status.STAYING, {})
    kind = "expand" if d.procs > size else "shrink"
    if kind == "expand":
        from malleable.runtime._bounds import check_expand
        from malleable.runtime._sources import choose_hosts

        assert rt.slots is not None   # set by init_adapt, on a joiner by its merge
        try:
            hosts = d.hosts or choose_hosts(rt.layout, rt.job_hosts, d.procs - size)
            check_expand(rt.layout, plan_expand(rt.layout, d.procs, hosts), rt.slots, rt.layout.groups[0].hosts[0],
                         _remote_limit(), rt.grow)
        except AdaptError as e:
            log.error("refusing the adaptation: %s", e)  # noqa: TRY400 - the reason is the whole story
            if rt.world.rank == 0:
                rt.source.refused(d, str(e))
            return ProbeResult(False, Status.STAYING, {})
    if kind == "expand" and rt.overlap and _mpi.current().concurrent_spawn:
        from malleable.runtime import _expand

        rt.background = _expand.Background(d, rt.world.Dup()).start(rt)
        return ProbeResult(False, Status.STAYING, {})
    rt.pending, rt.pending_kind = d, kind
    status = Status.LEAVING if kind == "shrink" and rt.world.rank >= d.procs else Status.STAYING
    info = d.as_info(rt.probes, kind)
    if granted:
        info["request"] = "granted"
    return ProbeResult(True, status, info)


def _probe_background(rt: _Runtime, d: Resize | None, granted: bool) -> ProbeResult:
    """A probe while an expansion is prepared in the background: pending once every rank's part is done.

    A newer decision (``d``: another size, a shrink) cancels the preparation: once every rank's part is done, the
    prepared processes are told to exit and the newer decision is carried out at that probe.
    """
    bg = rt.background
    assert bg is not None
    if d is not None and d.procs != bg.decision.procs and d.procs != rt.layout.world_size:
        bg.cancel = (d, granted)   # the latest decision wins
    if not rt.world.allreduce(1 if bg.done() else 0, op=MPI.MIN):
        return ProbeResult(False, Status.STAYING, {})
    rt.background = None
    if bg.cancel is not None:
        if bg.result is not None:
            _spawn.abandon(bg.world, bg.result.inters, rt.timeout, rt.leftovers)
        bg.world.Free()
        log.info("expansion to %d cancelled by a newer decision (%d processes)", bg.decision.procs,
                 bg.cancel[0].procs)
        if rt.world.rank == 0:
            rt.source.refused(bg.decision, f"cancelled: the job is to have {bg.cancel[0].procs} process(es) now")
        return _act(rt, *bg.cancel)
    bg.world.Free()
    if bg.error is not None or bg.result is None:
        log.warning("background expansion to %d failed, going on: %s", bg.decision.procs, bg.error)
        if rt.world.rank == 0:
            rt.source.refused(bg.decision, str(bg.error))
        return ProbeResult(False, Status.STAYING, {})
    rt.prepared, rt.pending, rt.pending_kind = bg.result, bg.decision, "expand"
    return ProbeResult(True, Status.STAYING, bg.decision.as_info(rt.probes, "expand"))


def adapt_begin() -> AdaptWindow:
    """Open the adaptation window (collective over the world and, in an expansion, the joiners).

    Returns:
        ``(intercomm, new_world, staying, leaving, joining)``.

    Raises:
        AdaptError: nothing pending, a window already open, or the expansion failed; on failure
            the world is unchanged and usable, and the pending decision is dropped.
    """
    rt = _rt()
    if rt.window is not None:
        raise AdaptError("adaptation windows cannot be nested: adapt_commit() the open one first")
    if rt.status is Status.JOINING:
        return _joiner_begin(rt)
    if rt.pending is None:
        raise AdaptError("adapt_begin() without a pending adaptation (probe_adapt() returned pending=False)")
    d, kind = rt.pending, rt.pending_kind
    rt.pending = None
    try:
        if kind == "expand":
            _parent_expand(rt, d, kind="expand")
        else:
            _begin_shrink(rt, d)
    except AdaptError as e:
        if rt.world.rank == 0:
            rt.source.refused(d, str(e))
        raise
    w = rt.window
    assert w is not None
    old, new = rt.layout.world_size, w.after.world_size
    if kind == "expand":
        return AdaptWindow(w.intercomm, w.new_world, old, 0, new - old)
    return AdaptWindow(w.intercomm, w.new_world, new, old - new, 0)


def _parent_expand(rt: _Runtime, d: Resize, kind: str) -> None:
    from malleable.runtime import _expand  # the parents' side only: a joiner does not load it

    t0 = time.perf_counter()
    prepared, rt.prepared = rt.prepared, None
    if prepared is None:
        prepared = _expand.prepare(rt, rt.world, d, kind)
    ctx = None
    if rt.world.rank == 0:
        from malleable.runtime._registered import metadata

        ctx = _expand.joiner_context(rt, prepared, metadata(rt.registry))
    merged, after, ctx = _expand.finish(rt.world, rt.layout, prepared, ctx)
    rt.window = _Window(kind, d, rt.world, merged.world, merged.intercomm, Status.STAYING, t0, after,
                        background=prepared.seconds if prepared.overlap else 0.0, metas=ctx["registered"])
    if kind == "initial":
        _commit(rt)


def _joiner_merge(rt: _Runtime) -> None:
    """A joiner's side of the merge: ask to merge, merge, and learn the job's state from rank 0."""
    t0 = time.perf_counter()
    parent = rt.parent
    go_timeout = None if rt.overlap and _mpi.current().concurrent_spawn else rt.timeout
    index, n_groups, n_old = _spawn.child_ready(parent, rt.timeout, go_timeout, rt.joined_at)  # or it exits
    merged = _spawn.child_merge(parent, index, n_groups, n_old)
    rows = merged.world.allgather(hostname())   # see _expand.finish
    ctx = rows[0]
    before = ctx["layout"]
    plan = ExpandPlan(tuple([None] * n_groups), tuple(ctx["counts"]), ctx["gids"][0])
    rt.gid, rt.probes, rt.timeout = ctx["gids"][index], ctx["probes"], ctx["timeout"]
    rt.plan_text, rt.plan, rt.job_hosts = ctx["plan"], ctx["steps"], tuple(ctx["job_hosts"])
    # after the merge the parents no longer wait for this joiner: what it needs as a member (its first probe's
    # modules among them, which would otherwise delay the job's next adaptation) loads now
    from malleable.runtime import _decide, _requests  # noqa: F401
    from malleable.runtime._bounds import Slots
    from malleable.runtime._sources import NullSource, PlanSource

    cores, per_host, hostfile = ctx["slots"]
    rt.slots = Slots(cores, per_host, tuple((h, n) for h, n in hostfile))
    rt.source = PlanSource(rt.plan, start=rt.probes) if ctx["local_source"] else NullSource()
    rt.leftovers.stale = bool(ctx["stale"])  # the job's processes end alike (see _lifecycle.at_exit)
    rt.alive_fd = connect_back(ctx["liveness"], rt.gid, rt.member, rt.timeout)
    after = apply_expand(before, plan, split_hosts(rows[n_old:], plan.counts))
    d = Resize(ctx["decision"][0], tuple(ctx["decision"][1]))
    rt.layout = before
    rt.window = _Window(ctx["kind"], d, None, merged.world, merged.intercomm, Status.JOINING, t0, after,
                        metas=ctx["registered"])


def _joiner_begin(rt: _Runtime) -> AdaptWindow:
    _joiner_merge(rt)
    w = rt.window
    assert w is not None
    old, new = rt.layout.world_size, w.after.world_size
    return AdaptWindow(w.intercomm, w.new_world, old, 0, new - old)


def _begin_shrink(rt: _Runtime, d: Resize) -> None:
    t0 = time.perf_counter()
    sp = plan_shrink(rt.layout, d.procs)
    comm = rt.world
    leaving = comm.rank >= sp.target
    local = comm.Split(1 if leaving else 0, comm.rank)   # the stayers' side is their new world
    inter = local.Create_intercomm(0, comm, 0 if leaving else sp.target, 4710)
    new_world = MPI.COMM_NULL
    if leaving:
        _mpi.current().release(local)  # the leavers' side may span several spawn groups
    else:
        new_world = local
    status = Status.LEAVING if leaving else Status.STAYING
    rt.window = _Window("shrink", d, comm, new_world, inter, status, t0, sp.after, sp.gone, sp.freed_hosts)


def adapt_commit() -> AdaptReport:
    """Close the adaptation window: ``world()`` becomes the new world.

    On leaving ranks this disconnects from the job, waits (idle) until the rest of the process's
    spawn group leaves too, finalizes MPI and returns; the application must then return. On rank
    0 it returns only once the processes of fully released groups have exited.

    Returns:
        An :class:`AdaptReport` (kind, sizes, time from begin to commit, hosts really freed).

    Raises:
        AdaptError: no window is open.
    """
    rt = _rt()
    if rt.window is None:
        raise AdaptError("adapt_commit() without an open window (call adapt_begin() first)")
    return _commit(rt)


def _commit(rt: _Runtime) -> AdaptReport:
    w = rt.window
    assert w is not None
    old_size = rt.layout.world_size
    if w.kind == "expand" and w.metas:  # registered arrays move over the communicator spanning old and new owners
        from malleable.runtime._registered import move_all

        move_all(rt.registry, old_size, w.after.world_size, w.new_world, w.metas)
    elif w.kind == "shrink" and rt.registry:  # every rank registers the same arrays (see mr.register)
        from malleable.runtime._registered import move_all

        move_all(rt.registry, old_size, w.after.world_size, w.old_world)
    _mpi.current().release(w.intercomm)
    if rt.requests is not None:   # the old world's (renewed at the next probe)
        rt.requests.close(_mpi.current().release)
        rt.requests = None
    if w.kind != "shrink":
        rt.spanned = True
        if w.old_world is not None:
            _mpi.current().release(w.old_world)
        rt.skip_probe = w.status is Status.JOINING and w.kind == "expand"
        rt.world, rt.layout, rt.window, rt.status = w.new_world, w.after, None, Status.STAYING
        if rt.listener is not None:
            rt.listener.accept((), 0)   # take the reports that arrived (never waits)
        return _report(rt, w, old_size, Status.STAYING if w.status is Status.STAYING else Status.JOINING)
    _mpi.current().release(w.old_world)
    if w.status is Status.LEAVING:
        rt.window, rt.finished, rt.status = None, True, Status.LEAVING
        report = AdaptReport("shrink", old_size, w.after.world_size, Status.LEAVING,
                             time.perf_counter() - w.t0, w.freed, w.after.idle())
        mine = next((g for g in rt.layout.groups if g.gid == rt.gid), None)
        # a group leaving whole, none of it idle from an earlier split, meets in MPI_Finalize; else in a barrier
        _lifecycle.leave(whole_group=rt.gid in w.gone and mine is not None and mine.active == mine.size,
                         spanned=rt.spanned)
        return report
    rt.world, rt.window = w.new_world, None
    freed: tuple[str, ...] = ()
    if rt.world.rank == 0 and rt.listener is not None:
        try:
            rt.listener.accept(_members(rt.layout, w.gone), rt.timeout)   # joiners report in after their merge
            rt.listener.wait_gone(w.gone, rt.timeout, progress=functools.partial(_lifecycle.progress, rt.world))
            freed = w.freed
        except AdaptTimeout as e:
            log.warning("%s; their hosts are not reported free", e)
    rt.layout = w.after
    freed = rt.world.bcast(freed, root=0)
    return _report(rt, w, old_size, Status.STAYING, tuple(freed))


def _members(layout: GroupLayout, gids: Iterable[int] | None = None) -> list[tuple[int, int]]:
    """(gid, member) of every spawned process of the groups ``gids`` (default: all spawned groups) in ``layout``."""
    want = None if gids is None else set(gids)
    return [(g.gid, m) for g in layout.groups if not g.base and (want is None or g.gid in want) for m in range(g.size)]


def _report(rt: _Runtime, w: _Window, old_size: int, status: Status, freed: tuple[str, ...] = ()) -> AdaptReport:
    kind = "expand" if w.kind == "initial" else w.kind
    rep = AdaptReport(kind, old_size, rt.layout.world_size, status, time.perf_counter() - w.t0, freed,
                      rt.layout.idle(), w.background)
    if rt.world.rank == 0:
        log.info("adaptation %s %d -> %d in %.3f s (freed hosts: %s)", kind, old_size, rep.new_size,
                 rep.seconds, ",".join(freed) or "-")
        if w.kind != "initial":
            rt.source.committed(rep, rt.layout)
    return rep


def report_progress(phase: str, data: dict) -> None:
    """Send per-phase performance data (e.g. MTCT) to the decision source; call on world rank 0."""
    rt = _rt()
    if rt.world.rank == 0:
        rt.source.progress(phase, data)


def _reset_for_tests() -> None:
    """Forget the runtime state (only for in-process unit tests that never adapt)."""
    global _STATE
    _STATE = None
