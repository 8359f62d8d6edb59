"""The adaptation verbs and the runtime's world handle (the one piece of module-level state).

Flow of an expansion: ``probe_adapt`` (pending, STAYING) → ``adapt_begin`` spawns one group per
host and merges → redistribute data over ``new_world`` → ``adapt_commit`` makes it ``world()``.
Joiners start with ``init_adapt`` → JOINING and call ``adapt_begin`` at once. A shrink keeps the
lowest ranks: leaving ranks get ``new_world == MPI.COMM_NULL``, send their data away inside the
window, and after ``adapt_commit`` (which disconnects them, waits for the rest of their spawn group
if it is split, and finalizes MPI) must return from the application.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from mpi4py import MPI

from malleable.errors import AdaptError, AdaptTimeout, ConfigError
from malleable.runtime import _expand, _lifecycle, _mpi, _registered, _requests, _spawn
from malleable.runtime._bounds import Slots, check_expand, check_plan, host_resolves, initial_layout, slots_from_env
from malleable.runtime._layout import (
    ExpandPlan,
    Group,
    GroupLayout,
    apply_expand,
    plan_expand,
    plan_shrink,
)
from malleable.runtime._liveness import Listener, connect_back
from malleable.runtime._plan import PlanStep, parse_plan, validate_plan
from malleable.runtime._requests import AdaptRequest
from malleable.runtime._settings import env_int, env_timeout
from malleable.runtime._sources import NullSource, PlanSource, choose_hosts, make_source
from malleable.runtime._types import AdaptWindow, Pause, ProbeResult, Resize, Status
from malleable.runtime._waits import wait_request

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

log = logging.getLogger(__name__)



@dataclass(frozen=True, slots=True)
class AdaptReport:
    """What :func:`adapt_commit` returns: the change, its cost, and the hosts it really freed."""

    kind: str
    old_size: int
    new_size: int
    status: Status
    seconds: float
    freed_hosts: tuple[str, ...] = ()
    idle: int = 0
    background: float = 0.0   # seconds of an overlapped expansion's preparation, spent while the job computed


@dataclass
class _Window:
    kind: str
    decision: Resize
    old_world: Any
    new_world: Any
    intercomm: Any
    status: Status
    t0: float
    after: GroupLayout
    gone: tuple[int, ...] = ()
    freed: tuple[str, ...] = ()
    background: float = 0.0


@dataclass
class _Runtime:
    """State of this process's participation in the job; mutated only by the verbs below."""

    world: Any
    layout: GroupLayout
    gid: int
    member: int
    timeout: float
    plan: tuple[PlanStep, ...]
    plan_text: str
    job_hosts: tuple[str, ...]
    probes: int = 0
    status: Status = Status.NEW
    pending: Resize | None = None
    pending_kind: str = ""
    window: _Window | None = None
    listener: Listener | None = None
    alive_fd: int | None = None
    joiner_ctx: dict | None = None
    finished: bool = False
    skip_probe: bool = False
    source: Any = field(default=None)
    slots: Slots = field(default_factory=lambda: Slots(os.cpu_count() or 1))
    exit_code: int = 0                 # what this process passed to sys.exit (reported to rank 0 at the end)
    leftovers: _spawn.Leftovers = field(default_factory=_spawn.Leftovers)  # of failed expansions
    req_comm: Any = None               # a dup of the world carrying request_adapt calls to rank 0
    outstanding: AdaptRequest | None = None   # rank 0: the request the decision source has not answered yet
    req_sends: list = field(default_factory=list)   # other ranks: requests on their way to rank 0
    req_sent: int = 0                  # requests this rank sent on ``req_comm`` (other ranks)
    req_got: int = 0                   # requests rank 0 received on ``req_comm``
    drained_at: float = 0.0            # rank 0: when it last looked for other ranks' requests
    registry: dict = field(default_factory=dict)    # registered arrays (see _registered)
    overlap: bool = False              # prepare expansions in the background (see _expand)
    background: _expand.Background | None = None   # an expansion being prepared
    prepared: _expand.Prepared | None = None       # a prepared expansion waiting for adapt_begin


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
    parent = MPI.Comm.Get_parent()
    if parent != MPI.COMM_NULL:
        return _joiner_init(t)
    comm = MPI.COMM_WORLD
    hosts = comm.allgather(socket.gethostname())
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
                         local, _remote_limit())
    except AdaptError as e:
        raise ConfigError(f"cannot start the job with {initial} processes: {e}") from None
    check_plan(steps, initial_layout(base, initial, job_hosts, local), slots, local,
               lambda lay, n: choose_hosts(lay, job_hosts, n), _remote_limit())
    rt = _Runtime(comm.Dup(), base, 0, comm.rank, t, steps, text, job_hosts, slots=slots,
                  overlap=overlap if overlap is not None else os.environ.get("MALLEABLE_OVERLAP", "0") == "1")
    rt.source = make_source(steps, comm.rank)
    rt.req_comm = rt.world.Dup()
    if comm.rank == 0:
        rt.listener = Listener()
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
    if b.spawn_across_hosts:
        return ""
    return f"{b.name} cannot spawn processes onto another host here (see docs/runtime.md)"


def set_source(source: Any) -> None:
    """Replace the decision source (e.g. a controller link made by the application); call on every rank."""
    _rt().source = source


def _initial_hosts(job_hosts: tuple[str, ...], n: int, base: int) -> tuple[str, ...]:
    """Hosts for processes base..n-1 when the job starts: round robin over the job's hosts."""
    if not job_hosts:
        return ()
    return tuple(job_hosts[i % len(job_hosts)] for i in range(base, n))


def _joiner_init(timeout: float) -> Status:
    global _STATE
    parent, ctx = _spawn.child_connect(timeout)  # gives up (exits) if the parents do not answer in time
    if ctx.get("kind") == "abort":
        log.warning("expansion was cancelled by the parents; joiner exits")
        parent.Disconnect()
        MPI.Finalize()
        os._exit(0)
    lay = GroupLayout.from_json(ctx["layout"])
    steps = parse_plan(ctx["plan"])
    cores, per_host, hostfile = ctx["slots"]
    rt = _Runtime(None, lay, ctx["gids"][ctx["index"]], ctx["member"], ctx["timeout"], steps, ctx["plan"],
                  tuple(ctx["job_hosts"]), probes=ctx["probes"],
                  slots=Slots(cores, per_host, tuple((h, n) for h, n in hostfile)))
    rt.source = PlanSource(steps, start=ctx["probes"]) if ctx.get("local_source", True) else NullSource()
    rt.joiner_ctx = dict(ctx, parent=parent)
    rt.overlap = bool(ctx.get("job_overlap"))
    rt.leftovers.stale = bool(ctx.get("stale"))  # the job's processes end alike (see _at_exit)
    rt.alive_fd = connect_back(ctx["liveness"], rt.gid, rt.member, timeout)
    _STATE = rt
    _lifecycle.install_hooks(lambda: _STATE)
    if ctx["kind"] == "initial":
        _joiner_merge(rt)
        rt.status = Status.NEW
        return Status.NEW
    rt.status = Status.JOINING
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
    if rt.background is not None:
        return _probe_background(rt)
    if rt.world.rank == 0 and rt.world.size > 1:
        now = time.monotonic()
        # a probe stays cheap: look for requests now and then (at every probe under a plan, so that its answer
        # steps see every request made at an earlier probe)
        if rt.source.local or now - rt.drained_at >= _requests.DRAIN_EVERY:
            rt.drained_at = now
            for req in _requests.drain(rt.req_comm):
                rt.req_got += 1
                _take_request(rt, req)
    if rt.source.local:
        d = rt.source.poll(rt.probes)
    else:
        d = rt.world.bcast(_poll_rank0(rt) if rt.world.rank == 0 else None, root=0)
    granted = False
    if isinstance(d, PlanStep):  # a plan's answer step: every rank learns the outstanding request from rank 0
        sent = rt.world.reduce(rt.req_sent if rt.world.rank else 0, root=0)   # requests made at earlier probes
        if rt.world.rank == 0 and sent > rt.req_got:
            for req in _requests.drain(rt.req_comm, sent - rt.req_got):
                rt.req_got += 1
                _take_request(rt, req)
        req = rt.world.bcast(rt.outstanding, root=0)
        if req is None or d.answer == "defer":
            return ProbeResult(False, Status.STAYING, {})
        rt.outstanding = None
        d = _requests.Refusal("refused by the plan") if d.answer == "refuse" else (_requests.grant(req), True)
    if isinstance(d, tuple):  # (decision, answers the outstanding request)
        d, granted = d
    if isinstance(d, Pause):
        return _lifecycle.pause(rt, d)
    if isinstance(d, _requests.Refusal):
        rt.outstanding = None
        return ProbeResult(False, Status.STAYING, {"request": "refused", "reason": d.reason, "probe": rt.probes})
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
        try:
            hosts = d.hosts or choose_hosts(rt.layout, rt.job_hosts, d.procs - size)
            check_expand(rt.layout, plan_expand(rt.layout, d.procs, hosts), rt.slots, rt.layout.groups[0].hosts[0],
                         _remote_limit())
        except AdaptError as e:
            log.error("refusing the adaptation: %s", e)  # noqa: TRY400 - the reason is the whole story
            if rt.world.rank == 0:
                rt.source.refused(d, str(e))
            return ProbeResult(False, Status.STAYING, {})
    if kind == "expand" and rt.overlap and _mpi.current().concurrent_spawn:
        rt.background = _expand.Background(d, rt.world.Dup()).start(rt)
        return ProbeResult(False, Status.STAYING, {})
    rt.pending, rt.pending_kind = d, kind
    status = Status.LEAVING if kind == "shrink" and rt.world.rank >= d.procs else Status.STAYING
    info = d.as_info(rt.probes, kind)
    if granted:
        info["request"] = "granted"
    return ProbeResult(True, status, info)


def _poll_rank0(rt: _Runtime) -> Any:
    """A controller's answer on rank 0: a decision (with whether it answers the outstanding request) or a refusal."""
    d = rt.source.poll(rt.probes)
    if isinstance(d, Resize):
        granted, rt.outstanding = rt.outstanding is not None, None
        return d, granted
    return d


def _take_request(rt: _Runtime, req: AdaptRequest) -> None:
    rt.outstanding = req
    log.info("application asks for %s", req.as_dict())
    rt.source.request(req)


def _probe_background(rt: _Runtime) -> ProbeResult:
    """A probe while an expansion is prepared in the background: pending once every rank's part is done."""
    bg = rt.background
    assert bg is not None
    if not rt.world.allreduce(1 if bg.done() else 0, op=MPI.MIN):
        return ProbeResult(False, Status.STAYING, {})
    rt.background = None
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
    t0 = time.perf_counter()
    prepared, rt.prepared = rt.prepared, None
    if prepared is None:
        prepared = _expand.prepare(rt, rt.world, d, kind)
    merged, after = _expand.finish(rt.world, rt.layout, prepared, rt.probes)
    rt.window = _Window(kind, d, rt.world, merged.world, merged.intercomm, Status.STAYING, t0, after,
                        background=prepared.seconds if prepared.overlap else 0.0)
    if kind == "initial":
        _commit(rt)


def _joiner_merge(rt: _Runtime) -> None:
    ctx = rt.joiner_ctx
    assert ctx is not None
    t0 = time.perf_counter()
    _spawn.child_ready(ctx["parent"], rt.timeout, None if ctx.get("overlap") else rt.timeout)
    merged = _spawn.child_merge(ctx["parent"], ctx["index"], ctx["n_groups"], ctx["n_old"])
    ctx["parent"].Disconnect()
    rt.probes = merged.world.bcast(None, root=0)  # the job's count at the merge (see _expand.finish)
    if isinstance(rt.source, PlanSource):
        rt.source = PlanSource(rt.plan, start=rt.probes)
    member_hosts = _expand.gather_members(merged.world, ctx["n_old"], ctx["index"], ctx["n_groups"])
    before = GroupLayout.from_json(ctx["layout"])
    plan = ExpandPlan(tuple([None] * ctx["n_groups"]), tuple(len(h) for h in member_hosts), ctx["gids"][0])
    after = apply_expand(before, plan, member_hosts)
    d = Resize(ctx["decision"][0], tuple(ctx["decision"][1]))
    rt.layout = before
    rt.window = _Window(ctx["kind"], d, None, merged.world, merged.intercomm, Status.JOINING, t0, after)
    if ctx["kind"] == "initial":
        _commit(rt)


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
    new_world = comm.Split(MPI.UNDEFINED if leaving else 0, comm.rank)
    local = comm.Split(1 if leaving else 0, comm.rank)
    inter = local.Create_intercomm(0, comm, 0 if leaving else sp.target, 4710)
    _mpi.current().release(local)  # the leavers' side may span several spawn groups
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
    if w.kind != "initial":  # registered arrays move over the communicator spanning old and new owners
        span, new_size = (w.new_world, w.after.world_size) if w.kind == "expand" else (w.old_world, w.after.world_size)
        _registered.move_all(rt.registry, old_size, new_size, span)
    w.intercomm.Disconnect()
    if w.kind != "shrink":
        if w.old_world is not None:
            _mpi.current().release(w.old_world)
        rt.skip_probe = w.status is Status.JOINING and w.kind == "expand"
        rt.world, rt.layout, rt.window, rt.status = w.new_world, w.after, None, Status.STAYING
        _renew_req_comm(rt)
        return _report(rt, w, old_size, Status.STAYING if w.status is Status.STAYING else Status.JOINING)
    _mpi.current().release(w.old_world)
    if w.status is Status.LEAVING:
        _renew_req_comm(rt, leaving=True)
        rt.window, rt.finished, rt.status = None, True, Status.LEAVING
        report = AdaptReport("shrink", old_size, w.after.world_size, Status.LEAVING,
                             time.perf_counter() - w.t0, w.freed, w.after.idle())
        _lifecycle.leave()
        return report
    rt.world, rt.window = w.new_world, None
    _renew_req_comm(rt)
    freed: tuple[str, ...] = ()
    if rt.world.rank == 0 and rt.listener is not None:
        try:
            rt.listener.wait_gone(w.gone, rt.timeout, progress=_lifecycle.progress)
            freed = w.freed
        except AdaptTimeout as e:
            log.warning("%s; their hosts are not reported free", e)
    rt.layout = w.after
    freed = rt.world.bcast(freed, root=0)
    return _report(rt, w, old_size, Status.STAYING, tuple(freed))


def _renew_req_comm(rt: _Runtime, leaving: bool = False) -> None:
    """The request channel follows the world (collective over the new world; leavers only drop theirs)."""
    old = rt.req_comm
    if old is not None:
        for req in rt.req_sends:   # rank 0 has them (it answered): completed, or Intel MPI's disconnect crashes
            with contextlib.suppress(AdaptTimeout):
                wait_request(req, 5.0, "a size request to rank 0")
        rt.req_sends = []
        _mpi.current().release(old)
    rt.req_sent = rt.req_got = 0
    rt.req_comm = None if leaving else rt.world.Dup()


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
