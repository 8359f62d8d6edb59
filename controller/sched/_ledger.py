"""The one decision path: the allocation state that the simulator and the live controller both keep, the
snapshot the policies see, and the validation and application of the policies' decisions.

A :class:`Ledger` holds what a policy may know: the node ids and which are free (in allocation order), the queue
in priority order, the running jobs' views (sorted by estimated end), reservations, the policy's memo and the
down nodes. :meth:`Ledger.apply` applies a pass's shrinks first (so the nodes a policy frees are free for its
starts and expansions, whatever order it lists them in), then the rest in order; it checks every decision
against that state (job queued or running, size within
the job's bounds, nodes free or owned, a resize of a malleable job only, reservations of queued jobs in the
future within the job's bounds, wake-ups in the future) and applies it, so a later decision of the same pass
sees the earlier ones. It returns the effects (what was started, resized, interrupted) for the caller to act on:
the simulator computes real end times from them, the live core turns them into launches and resize orders.

A decision that breaks an invariant raises :class:`~malleable.errors.PolicyError` (``strict``, the simulator)
or is rejected, recorded with its reason and skipped (the live controller, which must keep serving); in both
cases it changes nothing.

What the two callers differ in is kept outside the checks:

- *progress*: how much of a job's work is done when it is resized (the simulator knows the hidden real run
  time; the live controller uses the runtime's reports, else the elapsed share of the estimate), a callable;
- *clean hosts* (live only): nodes that a job released stay *dirty* until the controller has checked that no
  process is left on them; dirty nodes are not shown as free but as down, expected back ``dirty_eta`` seconds
  later (so availability profiles still see the whole machine), and nodes released by a decision may be taken
  by a later decision of the same pass (the new job then waits for the check);
- *busy jobs* (live only): a job with a resize order in flight (or not yet registered) cannot be resized, and a
  re-queued job whose processes are still being stopped cannot start; such a decision is *deferred* (a later
  pass may repeat it), not counted as a bad one;
- *allocation order*: ``order="release"`` (the simulator's default) hands free nodes out in the order they were
  freed; ``order="pool"`` (the live controller, and the simulator when asked) keeps the free list in the
  machine's node order, lowest first, as a resource manager hands out hosts.

Cost: with ``order="release"`` the free nodes are a window of an append-only array (:mod:`._nodes`): the usual
start (the first free nodes, as the snapshot lists them) and end cost the same on any machine size, and the
snapshot's ``free`` and the jobs' ``nodes`` are :class:`~._nodes.NodeRun` sequences that behave as tuples. With
``order="pool"`` they are tuples of a list-and-set store, as the live controller wants them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any, NamedTuple, TypeAlias

from malleable.errors import PolicyError

from ._decide import DISPATCH as _DISPATCH
from ._decide import Busy as _Busy
from ._decide import not_a_decision as _not_a_decision
from ._holds import Holds, Kind
from ._model import (
    NO_REQUESTS,
    Job,
    JobKind,
    NodeId,
    Reserve,
    ResizeJob,
    RunningJob,
    SizeRequest,
    Snapshot,
    StorageView,
)
from ._nodes import Bad as _Bad
from ._nodes import ListFree, RunFree
from ._qindex import LedgerQueue, QueueIndex
from ._speedup import MtctModel, ReconfigCost, SpeedupModel, amdahl, no_reconfig_cost

__all__ = ["Applied", "Effect", "Ledger", "Progress", "Rejected", "elapsed_progress"]

Progress: TypeAlias = Callable[[RunningJob, float], float]
"""``progress(view, now)``: the fraction of the job's work done at ``now`` (in [0, 1])."""

Effect: TypeAlias = tuple[Any, ...]
"""What an applied decision did, for the caller: ``("start", view, factor)``, ``("resize", old view, new view,
cost)``, ``("interrupt", old view, priority)`` or ``("wake", time)``. ``factor`` is the run-time factor of the
start size (1.0 at the requested size), ``cost`` the reconfiguration seconds."""

Rejected: TypeAlias = tuple[Any, str]
"""A decision that was not applied and why (lenient mode only)."""

def elapsed_progress(speedup: SpeedupModel) -> Progress:
    """Progress estimated from the elapsed share of the user's estimate at the current size (no reports)."""

    def progress(v: RunningJob, now: float) -> float:
        full = v.job.estimate * speedup(v.job, v.size)
        done = v.progress + (max(0.0, now - v.since) / full if full > 0 else 1.0)
        return min(done, 1.0)

    return progress


class Ledger:
    """Allocation state and decision path shared by the simulator and the live controller.

    Mutated only through its methods; the views it hands out (:class:`RunningJob`, snapshots) are frozen and
    replaced, never changed. Invariants: every node is exactly one of free, held by one running job, or down;
    a queued job is not running; the running list is sorted by ``(end_estimate, order of start/resize)``.

    Args:
        nodes: the machine's node ids, in allocation order (free ones are handed out first-come).
        speedup: run-time factor of a job on another size than requested.
        reconfig_cost: seconds without progress after a resize.
        mtct: ``mtct(job, size)`` shown in the views (simulated MTCT), or None (views carry what
            :meth:`annotate` sets).
        progress: fraction of work done at a resize (default: elapsed share of the estimate).
        order: ``"release"`` or ``"pool"`` (module docstring).
        bb_total: burst-buffer capacity (bytes), a second resource: a job holds ``Job.bb`` of it while it runs.
    """

    def __init__(self, nodes: Sequence[NodeId], *, speedup: SpeedupModel = amdahl,
                 reconfig_cost: ReconfigCost = no_reconfig_cost, mtct: MtctModel | None = None,
                 progress: Progress | None = None, order: str = "release", bb_total: float = 0.0) -> None:
        self.nodes: tuple[NodeId, ...] = tuple(nodes)
        if len(set(self.nodes)) != len(self.nodes):
            raise ValueError("node ids must be distinct")
        if order not in ("release", "pool"):
            raise ValueError(f"order must be 'release' or 'pool', got {order!r}")
        self.order = order
        self._free: ListFree | RunFree = (RunFree(self.nodes) if order == "release" else
                                          ListFree(self.nodes, {x: i for i, x in enumerate(self.nodes)}))
        self.speedup = speedup
        self.reconfig_cost = reconfig_cost
        self.mtct = mtct
        self.progress: Progress = progress or elapsed_progress(speedup)
        self.queue: list[Job] = []
        self.queued: dict[int, Job] = {}
        self._qix: QueueIndex | None = None        # the queue by size and estimate, once a policy asked for it
        self.running: dict[int, RunningJob] = {}
        self._rkeys: list[tuple[float, int]] = []
        self._rviews: list[RunningJob] = []
        self._key: dict[int, tuple[float, int]] = {}
        self._seq = 0
        self.reservations: dict[int, Reserve] = {}
        self.memo: Any = None
        self.down: dict[NodeId, float] = {}
        self.owner: dict[NodeId, int] = {}
        self.dirty: set[NodeId] = set()
        self.busy: dict[int, str] = {}
        self.requests: dict[int, SizeRequest] = {}
        if not bb_total >= 0:
            raise ValueError(f"bb_total must be >= 0, got {bb_total}")
        self.bb_total = float(bb_total)
        self._bb = Holds()            # burst buffer held (hold_bb/release_bb)
        self.points: set[int] = set()  # running phased malleable jobs at a scheduling point (set by the engine)
        self.track_owner = False      # keep ``owner`` (node -> job) as nodes are taken (live); else looked up
        self._dirty_release = False
        self.dirty_eta = 1.0          # seconds a dirty node is expected to take to be checked (Snapshot.down)
        self._owner_for = 0
        self.counts: dict[str, int] = dict.fromkeys(
            ("StartJob", "ResizeJob", "Reserve", "Wake", "Remember", "Interrupt"), 0)
        """Applied decisions by type name."""
        self._res = MappingProxyType(self.reservations)
        self._free_t: Sequence[NodeId] | None = None
        self._run_t: tuple[RunningJob, ...] | None = None

    @property
    def dirty_release(self) -> bool:
        """Live: nodes a job released stay dirty until checked clean (switches to the list store)."""
        return self._dirty_release

    @dirty_release.setter
    def dirty_release(self, on: bool) -> None:
        if on and type(self._free) is RunFree:
            self._free = ListFree(self._free.free)
        self._dirty_release = on

    @property
    def bb_used(self) -> float:
        """Bytes of the burst buffer held (:meth:`hold_bb`)."""
        return self._bb.used

    @property
    def free(self) -> list[NodeId]:
        """The free node ids in allocation order (dirty ones included)."""
        return self._free.free

    @property
    def free_set(self) -> set[NodeId]:
        """The free node ids."""
        return self._free.set

    @property
    def n_free(self) -> int:
        """How many nodes are free (dirty ones included)."""
        return len(self._free)

    # -- the queue ------------------------------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        """Queue a newly submitted job (at the tail of its priority class).

        Raises:
            PolicyError: the job id is already queued or running.
        """
        jid = job.id
        if jid in self.queued or jid in self.running:
            raise PolicyError(f"job id {jid} submitted while already in the system")
        self.queued[jid] = job
        q = self.queue
        if not q or job.priority <= q[-1].priority:
            q.append(job)
            if self._qix is not None:
                self._qix.append(job)
        else:
            self._insert(job)

    def _insert(self, job: Job) -> None:
        q = self.queue
        i = 0
        while i < len(q) and (q[i].priority > job.priority or
                              (q[i].priority == job.priority and q[i].submit <= job.submit)):
            i += 1
        q.insert(i, job)
        if self._qix is not None:
            if i == len(q) - 1:
                self._qix.append(job)
            else:
                self._qix = None                # a job went ahead of others: rebuilt when next asked for

    def _unqueue(self, job: Job) -> None:
        """Take ``job`` out of the queue list (found through the index when there is one)."""
        q = self.queue
        if self._qix is not None:
            i = self._qix.remove(job)
            if i < len(q) and q[i] is job:
                del q[i]
                if not q:
                    self._qix = None            # a short queue again: no index until a policy asks anew
                return
            self._qix = None                    # pragma: no cover - out of step: rebuilt when next asked for
        q.remove(job)

    def _index(self) -> QueueIndex:
        """The queue's index by size and estimate (built now if needed, then kept in step)."""
        if self._qix is None:
            self._qix = QueueIndex(self.queue)
        return self._qix

    def dequeue(self, job_id: int, keep_reservation: bool = False) -> Job:
        """Remove a queued job (cancelled before it started, or held back until its old processes are gone: then
        its reservation, if any, is kept)."""
        if self._bb.early:
            self.release_bb(job_id, early=True)
        job = self.queued.pop(job_id)
        self._unqueue(job)
        if not keep_reservation:
            self.reservations.pop(job_id, None)
        return job

    def enqueue(self, job: Job) -> None:
        """Put a job back in the queue at its place by ``(-priority, submission)``."""
        self.queued[job.id] = job
        self._insert(job)

    # -- views ----------------------------------------------------------------------------------------------
    def snapshot(self, now: float, changed: bool = True, arrived: int = -1) -> Snapshot:
        """The state as a policy sees it at ``now`` (free excludes dirty nodes)."""
        free_t = self._free_t
        if free_t is None:
            if type(self._free) is RunFree:
                self._free.compact()
            free_t = self._free_t = self._free.view(self.dirty)
        run_t = self._run_t
        if run_t is None:
            run_t = self._run_t = tuple(self._rviews)
        if self.dirty:          # free but not checked yet: shown as down until shortly (live only)
            back = now + self.dirty_eta
            down = tuple(sorted([*self.down.items(), *((x, back) for x in self.free if x in self.dirty)],
                                key=lambda kv: kv[1]))
        else:
            down = tuple(sorted(self.down.items(), key=lambda kv: kv[1])) if self.down else ()
        q = self.queue
        return Snapshot(now, self.nodes, free_t, run_t, LedgerQueue(q, self._index), changed,
                        len(q) if arrived < 0 else arrived, self._res, self.memo, down,
                        MappingProxyType(dict(self.requests)) if self.requests else NO_REQUESTS,
                        StorageView(self.bb_total, self.bb_total - self.bb_used + self._bb.early,
                                    frozenset(self.points))
                        if self.bb_total or self.points else None)

    def view(self, job_id: int) -> RunningJob | None:
        """The running job's view, or None."""
        return self.running.get(job_id)

    def _stale(self) -> None:
        self._free_t = None
        self._run_t = None

    # -- the decision path ----------------------------------------------------------------------------------
    def apply(self, decisions: Iterable[Any], now: float, strict: bool = True,
              sink: Callable[[Effect], None] | None = None) -> Applied:
        """Validate and apply one pass's decisions in order.

        Args:
            decisions: what the policy returned.
            now: the pass time.
            strict: raise on the first bad decision (simulator); else reject it and go on (live controller).
            sink: called with each effect as soon as its decision is applied (before the next decision is
                checked), for callers whose own state must follow the ledger's within the pass.

        Returns:
            The effects of the applied decisions, the rejected decisions with their reasons, and the deferred
            ones (a resize of a job that cannot take one now: live only).

        Raises:
            PolicyError: a bad decision, in strict mode (the message names the pass time and the decision).
        """
        effects: list[Effect] = []
        rejected: list[Rejected] = []
        deferred: list[Rejected] = []
        released: set[NodeId] = set()
        n_eff = 0
        counts = self.counts
        if not isinstance(decisions, list):
            decisions = list(decisions)
        if len(decisions) > 1:
            decisions = self._shrinks_first(decisions)
        for d in decisions:
            t = type(d)
            fn = _DISPATCH.get(t, _not_a_decision)
            try:
                fn(self, d, now, effects, released)
                counts[t.__name__] = counts.get(t.__name__, 0) + 1
                if sink is not None and len(effects) > n_eff:
                    sink(effects[-1])
                    n_eff = len(effects)
            except _Busy as e:
                deferred.append((d, str(e)))
            except _Bad as e:
                if strict:
                    raise PolicyError(f"t={now:g}: {d!r}: {e}") from None
                rejected.append((d, str(e)))
        if released and self.dirty_release:
            self._stale()
        return Applied(effects, rejected, deferred)

    def _shrinks_first(self, decisions: list[Any]) -> list[Any]:
        running = self.running
        shrinks = [d for d in decisions if type(d) is ResizeJob and d.job_id in running
                   and len(d.nodes) < running[d.job_id].size]
        if not shrinks or decisions[:len(shrinks)] == shrinks:
            return decisions
        ids = {id(d) for d in shrinks}
        return shrinks + [d for d in decisions if id(d) not in ids]

    def _take(self, nodes: Sequence[NodeId], released: set[NodeId]) -> None:
        """Remove ``nodes`` from the free nodes (they must be free, distinct, and clean unless released now)."""
        self._free.take(nodes, released, self.dirty)
        if self.track_owner:
            jid = self._owner_for
            for x in nodes:
                self.owner[x] = jid

    def _give_back(self, nodes: Sequence[NodeId], released: set[NodeId] | None, dirty: bool = True) -> None:
        """Nodes a job no longer holds become free (dirty in the live controller until checked, unless the job
        never ran on them: ``dirty`` False)."""
        if not (self.down or self.track_owner or self._dirty_release):
            self._free.give(nodes)
            return
        down = self.down
        for x in nodes:
            if self.track_owner:
                self.owner.pop(x, None)
            if x in down:
                continue
            self._free.add(x)
            if self._dirty_release and dirty:
                self.dirty.add(x)
            if released is not None:
                released.add(x)

    # -- the running list -----------------------------------------------------------------------------------
    def _list(self, view: RunningJob) -> None:
        self._seq += 1
        key = (view.end_estimate, self._seq)
        self.running[view.job.id] = view
        self._key[view.job.id] = key
        rkeys = self._rkeys
        if not rkeys or rkeys[-1] < key:
            rkeys.append(key)
            self._rviews.append(view)
        else:
            j = bisect_left(rkeys, key)
            rkeys.insert(j, key)
            self._rviews.insert(j, view)
        self._stale()

    def _unlist(self, view: RunningJob) -> None:
        jid = view.job.id
        key = self._key.pop(jid)
        del self.running[jid]
        j = bisect_left(self._rkeys, key)
        if j >= len(self._rkeys) or self._rkeys[j] != key:
            raise PolicyError(f"running list lost job {jid}")
        del self._rkeys[j]
        del self._rviews[j]
        self._stale()

    def replace_view(self, view: RunningJob) -> None:
        """Put a new view of a running job in place of the old one (after a report); with the same estimated end
        it keeps its place among jobs ending at the same time."""
        jid = view.job.id
        old = self.running[jid]
        if old.end_estimate != view.end_estimate:
            self._unlist(old)
            self._list(view)
            return
        j = bisect_left(self._rkeys, self._key[jid])
        self._rviews[j] = view
        self.running[jid] = view
        self._stale()

    def annotate(self, job_id: int, mtct: float | None, serial: float | None = None,
                 intensity: float | None = None) -> None:
        """Show a running job's last reported MTCT in its view, its measured Amdahl serial fraction (the
        runtime's fit of its iteration times) in place of the declared one, unless it declared seed 002's rho,
        and its measured I/O intensity (in [0, 1], the same at every size) in place of the declared one."""
        v = self.running.get(job_id)
        if v is None:
            return
        job = v.job
        if serial is not None and 0.0 <= serial <= 1.0 and not job.rho and serial != job.serial:
            job = replace(job, serial=serial)
        if intensity is not None and 0.0 <= intensity <= 1.0:
            pts = ((max(1, job.procs), intensity),) if intensity > 0 else ()
            if pts != job.intensity:
                job = replace(job, intensity=pts)
        if v.mtct != mtct or job is not v.job:
            self.replace_view(RunningJob(job, v.nodes, v.size, v.start, v.since, v.progress, v.end_estimate,
                                         v.resizes, mtct))

    def ask(self, job_id: int, req: SizeRequest) -> None:
        """Record running malleable job ``job_id``'s size request (replacing an older one); policies see it in
        ``Snapshot.requests`` until they decline it or the job ends (a granted request stands: the job's size
        follows it).

        Raises:
            PolicyError: the job is not a running malleable job, or no size the request wants is allowed (the
                job's bounds, the machine): the caller declines it at once with this reason.
        """
        v = self.running.get(job_id)
        if v is None or v.job.kind is not JobKind.MALLEABLE:
            raise PolicyError(f"job {job_id} is not a running malleable job")
        job = v.job
        lo, hi = max(job.min_procs, 1), min(job.max_procs, len(self.nodes))
        if req.procs == v.size:
            raise PolicyError(f"the job already runs on {v.size} nodes")
        if req.procs:
            lo = hi = req.procs if lo <= req.procs <= hi else 0
        else:
            lo, hi = max(lo, req.min_procs), min(hi, req.max_procs or hi)
        if not 0 < lo <= hi:
            raise PolicyError(f"no size the request wants is within the job's {job.min_procs}..{job.max_procs} "
                              f"nodes on a machine of {len(self.nodes)}")
        self.requests[job_id] = req

    # -- what happens to running jobs ----------------------------------------------------------------------
    def finish(self, job_id: int) -> RunningJob:
        """The job ended: its nodes are given back. Returns its last view."""
        v = self.running[job_id]
        self._unlist(v)
        self._give_back(v.nodes, None)
        if self.requests:
            self.requests.pop(job_id, None)
        if v.job.bb or self.points:
            self._release_bb(v.job)
        return v

    def hold_bb(self, job_id: int, amount: float, *, after_run: bool = False, early: bool = False) -> None:
        """Hold ``amount`` bytes of the burst buffer for job ``job_id`` until :meth:`release_bb`: for its run (the
        decision path, simulated and live), ``after_run`` (live: while its file system is staged out and stopped) or
        ``early`` (live: a queued job's stage-in; policies see it as free, only its job may start on it, and that
        start makes it the run's hold, counted once)."""
        self._bb.hold(job_id, amount, Kind.AFTER if after_run else Kind.EARLY if early else Kind.RUN)

    def release_bb(self, job_id: int, *, after_run: bool = False, early: bool = False) -> float:
        """Free what :meth:`hold_bb` holds for job ``job_id`` (0 when it holds nothing); returns the amount."""
        return self._bb.release(job_id, Kind.AFTER if after_run else Kind.EARLY if early else Kind.RUN)

    def early_bb(self, job_id: int) -> float:
        """The buffer held early for queued job ``job_id`` (0: none)."""
        return self._bb.of(job_id, Kind.EARLY)

    def _release_bb(self, job: Job) -> None:
        if job.bb:
            self.release_bb(job.id)
        self.points.discard(job.id)

    def requeue(self, v: RunningJob, priority: int, released: set[NodeId] | None = None) -> Job:
        """Stop a running job and put it back in the queue with ``priority`` (a failure or an interruption):
        its nodes are given back (down ones stay down). Returns the queued record."""
        job = v.job
        self._unlist(v)
        self._give_back(v.nodes, released)
        self.requests.pop(job.id, None)
        self._release_bb(job)
        again = replace(job, priority=priority)
        self.queued[job.id] = again
        self._insert(again)
        return again

    def node_down(self, x: NodeId, until: float) -> int | None:
        """Node ``x`` failed until ``until`` (``inf``: unknown). Returns the running job holding it (which the
        caller interrupts with :meth:`requeue`), or None."""
        if x in self.down:
            self.down[x] = max(self.down[x], until)
            return None
        self.down[x] = until
        self._stale()
        if self._free.remove(x):
            self.dirty.discard(x)
            return None
        jid = self.owner.get(x) if self.track_owner else self._holder(x)
        if jid is None:
            raise PolicyError(f"node {x!r} is neither free nor held")
        return jid

    def _holder(self, x: NodeId) -> int | None:
        """The running job holding node ``x`` (looked up: owners are kept only with ``track_owner``)."""
        for v in self._rviews:
            if x in v.nodes:
                return v.job.id
        return None

    def node_up(self, x: NodeId) -> None:
        """Node ``x`` is back: free again."""
        if self.down.pop(x, None) is not None:
            self._free.add(x)
            self._stale()

    # -- live-only state ------------------------------------------------------------------------------------
    def revert(self, job_id: int, prev: RunningJob) -> None:
        """Undo a resize that could not be carried out: the job's view goes back to ``prev``. Nodes it had
        gained are given back (dirty: a failed spawn may have left something); nodes it had released must be
        free (the caller first un-starts a job that took them) and are its own again."""
        cur = self.running[job_id]
        now_has, had = set(cur.nodes), set(prev.nodes)
        back = [x for x in prev.nodes if x not in now_has]
        missing = self._free.missing(back)
        if missing:
            raise PolicyError(f"job {job_id}: cannot take back nodes held by others: {missing}")
        self._owner_for = job_id
        self.withhold(back)
        for x in back:
            self.dirty.discard(x)
            if self.track_owner:
                self.owner[x] = job_id
        self._give_back([x for x in cur.nodes if x not in had], None)
        self._unlist(cur)
        self._list(prev)

    def unstart(self, job_id: int) -> Job:
        """Put a job that was granted nodes but never ran back in the queue; its nodes are free again."""
        v = self.running[job_id]
        self._unlist(v)
        self._give_back(v.nodes, None, dirty=False)
        self._release_bb(v.job)
        self.enqueue(v.job)
        return v.job

    def withhold(self, nodes: Iterable[NodeId]) -> None:
        """Take free nodes out of the free list without giving them to a running job."""
        for x in nodes:
            self._free.remove(x)
        self._stale()

    def unwithhold(self, nodes: Iterable[NodeId]) -> None:
        """Give nodes taken out by :meth:`withhold` back to the free list (down ones stay down)."""
        free = self.free_set
        self._give_back([x for x in nodes if x not in free], None, dirty=False)
        self._stale()

    def clean(self, x: NodeId) -> None:
        """Node ``x`` was checked: nothing of its previous job is left; it is free for every policy."""
        if x in self.dirty:
            self.dirty.discard(x)
            self._stale()

    def restore(self, job: Job | None, view: RunningJob | None, nodes: Iterable[NodeId] = ()) -> None:
        """Rebuild state after a restart: queue ``job`` or list ``view`` as running on its nodes (taken from the
        free list), or take ``nodes`` out of the free list as dirty-held (draining)."""
        if job is not None:
            self.submit(job)
        if view is not None:
            for x in view.nodes:
                self._free.remove(x)
                self.owner[x] = view.job.id
            self.hold_bb(view.job.id, view.job.bb)
            self._list(view)
        for x in nodes:
            self.dirty.add(x)
        self._stale()


class Applied(NamedTuple):
    """What :meth:`Ledger.apply` did with one pass's decisions."""

    effects: list[Effect]
    rejected: list[Rejected]
    deferred: list[Rejected]
