"""The controller's live core: one state machine over jobs, hosts, file systems and resize orders, scheduling
with the simulator's policies through the simulator's decision path.

:meth:`Core.handle` takes one event (:mod:`._events`: a wire request, a process starting or ending, a host
checked, failing or coming back, a tick, a scheduling pass, a file system's answer) and returns actions:
persistence first (job and host records, size steps, log events), then processes to launch, stop or kill, file
systems to start, scale or stop, and the reply to a request. The core touches no socket, process, file or clock;
the daemon carries the actions out, the persistence ones in one transaction before the others, so a crash between
the two loses nothing.

Its state is a :class:`~._state.CoreState` (jobs, hosts, file systems being stopped) beside a
:class:`~malleable.controller.sched.Ledger` (what a policy may know, the same one the simulator keeps: each job's
declared speedup, progress, resizes, estimated end and MTCT, the hosts that are down, the burst buffer held); every
decision is validated and applied there, and a bad one is rejected, logged at ERROR with the policy's name and
counted (``controller status``) while the daemon keeps serving. The handlers are split by responsibility, each
built from the state, the ledger, the :class:`~._state.Outbox` and the settings (and the parts it calls, never the
core): :class:`~._jobs.Jobs` (a job's life and its hosts'), :class:`~._link.Link` (a job's runtime link),
:class:`~._pass.Pass` (scheduling passes), :class:`~._storage.Storage` (the burst buffer and job file systems),
:class:`~._fsscale.FsScaling` (file systems growing and shrinking with their job) and :class:`~._hosts.Hosts`
(host checks and failures). The core owns one table of events and one of requests, :attr:`Core.requests`, which
the daemon asks.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from malleable.controller.sched._depend import DepStatus, dependency_status, parse_dependency
from malleable.controller.sched._ledger import Ledger
from malleable.controller.sched._model import Job, RunningJob, Snapshot
from malleable.controller.sched._speedup import declared
from malleable.errors import Refusal

from . import _protocol as P
from ._access import authorize, submitter
from ._events import (
    Action,
    DeleteHost,
    Event,
    FsAttached,
    FsFailed,
    FsFault,
    FsHeld,
    FsMounted,
    FsProgress,
    FsReady,
    FsSample,
    FsScaled,
    FsStopped,
    HostClean,
    HostDown,
    HostUp,
    JobExited,
    JobLaunched,
    LaunchFailed,
    Relaunch,
    Request,
    Schedule,
    Tick,
)
from ._fsrequest import StageOutAgain
from ._fsscale import FsScaling
from ._hosts import Hosts
from ._jobs import Jobs
from ._link import Link
from ._mountplan import MountPlan
from ._pass import Pass, Policy
from ._records import HostRec, JobRec, JobState
from ._reports import mtct_of
from ._state import UNLIMITED_ESTIMATE, CoreConfig, CoreState, Outbox, reported_progress, to_job
from ._storage import Storage

__all__ = ["Core", "CoreConfig", "Parts"]


class Parts(NamedTuple):
    """The core's handlers."""

    storage: Storage
    jobs: Jobs
    link: Link
    scheduling: Pass
    scaling: FsScaling
    hosts: Hosts
    mounts: MountPlan


class Core:
    """Jobs, hosts and orders; mutated only by :meth:`handle`, which returns what the shell must do.

    Args:
        nodes: the host pool (node ids are host names), in allocation order.
        policy: ``decide(snapshot, now) -> list[Decision]``, a simulator policy, used unchanged.
        config: settings.
        hosts, jobs: the records of an earlier run (from the store), re-attached.
        ended: ids and final states of jobs that already ended (to answer a cancel of one).
        policy_name: shown in logs and status.
    """

    def __init__(self, nodes: Sequence[str], policy: Policy, config: CoreConfig | None = None, *,
                 hosts: Sequence[HostRec] = (), jobs: Sequence[JobRec] = (), ended: dict[int, str] | None = None,
                 policy_name: str = "") -> None:
        if len(set(nodes)) != len(nodes) or not nodes:
            raise ValueError("the host pool must name distinct hosts")
        self.config = cfg = config or CoreConfig()
        pool = tuple(nodes)
        storage = tuple(cfg.storage_hosts) or pool
        if not set(storage) <= set(pool) or cfg.bb_capacity < 0:
            raise ValueError("storage hosts must be hosts of the pool and the capacity >= 0")
        st = self.state = CoreState(pool, storage, ended=dict(ended or {}))
        st.next_id = max([j.id for j in jobs] + list(st.ended) + [0]) + 1
        self.out = Outbox(st)
        self._load_hosts(list(hosts))
        led = self.ledger = Ledger(tuple(st.hosts), speedup=declared, progress=reported_progress(st.reported),
                                   order="pool", bb_total=cfg.bb_capacity * len(storage))
        led.track_owner = led.dirty_release = True
        led.withhold(n for n in st.hosts if n not in pool)
        parts = (st, led, self.out, cfg)
        fs = Storage(*parts)
        life = Jobs(*parts, fs)
        mounts = MountPlan(*parts)
        link = Link(*parts, life, mounts)
        sched = Pass(*parts, policy, policy_name or getattr(policy, "__name__", type(policy).__name__), life, link,
                     fs)
        scaling = FsScaling(*parts, fs, sched)
        self.parts = Parts(fs, life, link, sched, scaling, Hosts(*parts, life, scaling, mounts), mounts)
        self.requests: Mapping[type[P.Message], Callable[[Any, float], None]] = {
            P.Submit: life.submit, P.Cancel: life.cancel, P.Register: link.register, P.Poll: link.poll,
            P.Committed: link.committed, P.Refused: link.refused, P.Progress: link.progress,
            P.ResizeRequest: link.request, P.Suspend: link.suspend, StageOutAgain: fs.stage_out_again}
        """The one table of state-changing wire requests, each with its handler (read-only ones are answered by
        the daemon from its views)."""
        self._events: Mapping[type, Callable[[Any], None]] = {
            Request: self._request, JobLaunched: life.launched, LaunchFailed: life.launch_failed,
            Relaunch: life.relaunch, JobExited: life.exited, Tick: life.tick, HostClean: self.parts.hosts.clean,
            HostDown: self.parts.hosts.down, HostUp: self.parts.hosts.up, Schedule: sched.schedule,
            FsReady: self._fs_ready, FsProgress: fs.progress, FsFailed: self._fs_failed, FsStopped: self._fs_stopped,
            FsAttached: fs.attached, FsFault: fs.fault, FsSample: scaling.sampled, FsScaled: scaling.scaled,
            FsHeld: fs.held, FsMounted: self._fs_mounted}
        self._load_jobs(list(jobs))

    # -- the one entry point ---------------------------------------------------------------------------------
    def handle(self, event: Event) -> list[Action]:
        """Apply one event; returns the actions to carry out (persistence first, in order, then the others).

        Raises:
            Refusal: a request the controller will not carry out (nothing changed).
        """
        self.out.take()
        self._events[type(event)](event)
        return self.out.take()

    def withdraw(self, job_id: int) -> None:
        """Forget a job just submitted whose record the store could not save (a full disk): it was never queued,
        and its submitter is told so. Its id is not given again."""
        j = self.state.jobs.pop(job_id, None)
        if j is not None:
            self.ledger.dequeue(job_id)
        self.out.take()

    def take_actions(self) -> list[Action]:
        """Actions produced outside :meth:`handle` (re-attaching state at construction)."""
        return self.out.take()

    def _request(self, e: Request) -> None:
        msg = e.msg
        fn = self.requests.get(type(msg))
        if fn is None:
            raise Refusal(f"{getattr(msg, 'TYPE', type(msg).__name__)} is not a request the core handles")
        owner = None
        if isinstance(msg, P.Cancel | P.Suspend | StageOutAgain):
            j = self.state.jobs.get(msg.job_id)
            held = self.state.stopping.get(msg.job_id)
            j = j if j is not None else held.job if held is not None else None
            owner = j.user if j is not None else None
        authorize(e.who, msg, owner)
        if isinstance(msg, P.Submit):
            msg = dataclasses.replace(msg, user=submitter(e.who, msg.user))
        fn(msg, e.now)

    # -- where a file system's answer reaches the job life cycle ----------------------------------------------
    def _fs_ready(self, e: FsReady) -> None:
        if self.parts.storage.ready(e):
            self.parts.jobs.launch_ready(e.now)

    def _fs_failed(self, e: FsFailed) -> None:
        j = self.parts.storage.failed(e)
        if j is not None:
            if j.id in self.ledger.queued:        # an early stage-in failed: out of the queue, its buffer free
                self.ledger.dequeue(j.id)
            life = self.parts.jobs
            life.drain_all(j, e.now)
            life.finish(j, JobState.FAILED, None, e.now, f"file system: {e.reason}"[:500])
            life.launch_ready(e.now)

    def _fs_mounted(self, e: FsMounted) -> None:
        why = self.parts.mounts.reported(e)
        j = self.state.jobs.get(e.job_id)
        if why and j is not None and j.order is not None:   # its expansion cannot go on: as if the job refused it
            self.parts.link.refused(P.Refused(j.id, j.order.seq, why), e.now)

    def _fs_stopped(self, e: FsStopped) -> None:
        self.parts.storage.stopped(e)
        self.parts.jobs.launch_ready(e.now)

    # -- loading ---------------------------------------------------------------------------------------------
    def _load_hosts(self, hosts: list[HostRec]) -> None:
        st = self.state
        old = {h.name: h for h in hosts}
        for i, name in enumerate(st.pool):
            h = old.pop(name, None) or HostRec(name, i)
            h.idx = i
            st.hosts[name] = h
            self.out.save_host(h)
        for name, h in old.items():             # left the pool: kept only while a job still uses it
            if h.owner is None and h.drain is None:
                self.out.emit(DeleteHost(name))
            else:
                h.idx = len(st.hosts)
                st.hosts[name] = h

    def _load_jobs(self, jobs: list[JobRec]) -> None:
        st, led = self.state, self.ledger
        for j in jobs:                          # an ended job is read back only to stop its file system again
            if not JobState((j := self.parts.storage.reload(j)).state).final:
                st.jobs[j.id] = j
        for j in sorted(st.jobs.values(), key=lambda j: j.id):
            if j.state in (JobState.STARTING, JobState.RUNNING) and j.reason != "INTERRUPTED":
                led.restore(None, _view(j))
        for h in st.hosts.values():
            if h.drain is not None and h.owner is None:
                led.dirty.add(h.name)
            if h.down:
                led.node_down(h.name, math.inf)
        for j in sorted(st.jobs.values(), key=lambda j: (-j.priority, j.id)):
            if j.state == JobState.PENDING:
                if any(h.drain == j.id and not h.down for h in st.hosts.values()):
                    st.held.add(j.id)           # re-queued, its hosts not checked yet
                elif j.reason == DepStatus.WAITING.value and dependency_status(
                        parse_dependency(j.dependency), st.ended)[0] is not DepStatus.SATISFIED:
                    continue                    # waits for its dependencies (an unsatisfiable one: at the next end)
                else:
                    if j.reason == DepStatus.WAITING.value:
                        j.reason = "Priority"
                        self.out.save(j)
                    led.submit(to_job(j))

    # -- views -----------------------------------------------------------------------------------------------
    @property
    def nodes(self) -> tuple[str, ...]:
        """Host names of the pool, in pool order."""
        return self.state.pool

    @property
    def jobs(self) -> dict[int, JobRec]:
        """The jobs that have not ended, by id."""
        return self.state.jobs

    @property
    def hosts(self) -> dict[str, HostRec]:
        """Every host record, by name."""
        return self.state.hosts

    @property
    def ended(self) -> dict[int, str]:
        """Ids and final states of the jobs that ended."""
        return self.state.ended

    @property
    def held(self) -> set[int]:
        """Interrupted jobs kept out of the queue until their hosts are clean."""
        return self.state.held

    @property
    def wakes(self) -> list[float]:
        """Times a policy asked to be woken at."""
        return self.state.wakes

    @property
    def policy(self) -> Policy:
        """The scheduling policy (may be replaced between events)."""
        return self.parts.scheduling.policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        self.parts.scheduling.policy = policy

    @property
    def policy_name(self) -> str:
        return self.parts.scheduling.policy_name

    def queue(self) -> list[JobRec]:
        """Pending jobs in priority order (priority, then submission)."""
        return self.state.queue()

    def draining(self) -> list[HostRec]:
        """Hosts to check (their job ended or released them), oldest first (down hosts cannot be checked)."""
        return self.state.draining()

    def lent_hosts(self) -> dict[str, int]:
        """The hosts lent to job file systems, each with the job whose file system holds it."""
        return self.state.lent_hosts()

    def snapshot(self, now: float) -> Snapshot:
        """The machine as the policy sees it (jobs with an order in flight at their target size)."""
        return self.parts.scheduling.snapshot(now)

    def reservation(self, job_id: int) -> float | None:
        """The expected start the policy reserved for a queued job, or None."""
        r = self.ledger.reservations.get(job_id)
        return r.start if r is not None else None

    def to_job(self, j: JobRec) -> Job:
        """The job as the ledger and the policies see it (:func:`~._state.to_job`)."""
        return to_job(j)

    def status(self) -> dict[str, Any]:
        """Counters for ``controller status``."""
        st, led = self.state, self.ledger
        states: dict[str, int] = {}
        for j in st.jobs.values():
            states[str(j.state)] = states.get(str(j.state), 0) + 1
        return {"hosts": len(st.pool), "free": sum(st.hosts[n].free for n in st.pool),
                "storage_hosts": list(st.storage), "bb_total": led.bb_total, "bb_free": led.bb_total - led.bb_used,
                "down": sorted(n for n, h in st.hosts.items() if h.down), "jobs": states, "passes": st.passes,
                "policy_errors": st.policy_errors, "last_policy_error": st.last_error,
                "decisions": dict(led.counts)}


def _view(j: JobRec) -> RunningJob:
    """The ledger's view of a running job read back at a restart (jobs with an order in flight at its target)."""
    start, since, done, end, resizes = (j.view or [j.start, j.since, 0.0, 0.0, 0])
    nodes = tuple(j.order.target if j.order else j.hosts)
    end = end or (start or 0.0) + (j.time_limit or UNLIMITED_ESTIMATE)
    return RunningJob(to_job(j), nodes, len(nodes), start, since, done, end, resizes, mtct_of(j.progress))
