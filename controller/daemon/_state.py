"""The live core's state and what its handlers share: the settings (:class:`CoreConfig`), the state besides the
ledger (:class:`CoreState`: jobs, hosts, file systems being stopped, the queue's bookkeeping), the actions of the
event being handled (:class:`Outbox`, through which every change of a record goes) and the base of the handlers
(:class:`Part`: each is built from the state, the ledger, the outbox and the settings, plus the parts it calls).

What a policy may know lives in the :class:`~malleable.controller.sched.Ledger` beside it (the simulator's);
:func:`to_job` turns a job record into what the ledger holds.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from malleable.controller.sched._ledger import Ledger, Progress
from malleable.controller.sched._model import Job, JobKind, RunningJob
from malleable.controller.sched._speedup import declared, speedup_params
from malleable.errors import ConfigError, UnknownJob
from malleable.launch import compress_hostlist

from ._events import Action, AddEvent, SaveHost, SaveJob
from ._fsrecord import JobFs
from ._records import HostRec, JobRec, JobState
from ._reports import intensity_of, serial_of

__all__ = ["UNLIMITED_ESTIMATE", "CoreConfig", "CoreState", "Outbox", "Part", "StoppingFs", "host_list",
           "reported_progress", "to_job"]

log = logging.getLogger(__name__)

UNLIMITED_ESTIMATE = 365 * 86400.0
"""What the policies read as the run time of a job without a time limit (a year: it never ends for planning)."""


@dataclass(frozen=True, slots=True)
class CoreConfig:
    """Settings of the core (the daemon's command line).

    Attributes:
        slots: processes per host.
        ack_timeout: seconds a sent resize order may stay unacknowledged before the job is marked unresponsive
            (its hosts stay reserved until it answers or ends).
        refuse_backoff: seconds without new orders for a job after it refused one.
        drain_grace: seconds after a job's end (or the end of a run that put it back in the queue) before its
            processes still found on a host are killed.
        default_time: time limit of jobs submitted without one (s; 0: unlimited).
        kill_wait: seconds between the SIGTERM that stops a job (cancel, time limit, interruption) and the SIGKILL
            of whatever is left of it (Slurm's KillWait).
        bb_capacity: bytes each storage host's data servers may hold; the burst buffer is their sum.
        storage_hosts: the hosts that may run data servers (empty: every host of the pool).
        fs_per_host: data servers a job's file system may run on one storage host (its ``--fs-servers`` and
            ``--fs-max`` are at most this times the storage hosts).
        mounts: job file systems are mounted on their jobs' hosts (``controller start --bb-mount-root``): the
            core names those hosts in :class:`~._events.StartFs` and :class:`~._events.StopFs`.
    """

    slots: int = 1
    ack_timeout: float = 120.0
    refuse_backoff: float = 30.0
    drain_grace: float = 5.0
    default_time: float = 3600.0
    kill_wait: float = 30.0
    bb_capacity: float = 0.0
    storage_hosts: tuple[str, ...] = ()
    fs_per_host: int = 4
    mounts: bool = False


class StoppingFs(NamedTuple):
    """A file system being stopped (after its job's run, or started for a job that no longer waits for it), with
    its job's record; its buffer stays held in the ledger until the shell says it stopped."""

    job: JobRec
    fs: JobFs


@dataclass
class CoreState:
    """The live core's state besides the ledger; changed only by the core's handlers.

    Attributes:
        pool: the host pool, in allocation order.
        storage: the hosts that may run data servers.
        jobs: the jobs that have not ended, by id.
        hosts: every host, by name (the pool's, and those that left it while a job still uses them).
        ended: ids and final states of the jobs that ended.
        stopping: file systems being stopped, by job id.
        held: interrupted jobs kept out of the queue until their hosts are clean.
        holding: jobs interrupted in the current pass (held once it is over).
        backoff: job id -> time before which it gets no order (it refused one).
        reported: job id -> the progress fraction its runtime last reported.
        declined: job id -> why its size request was declined (told at its next poll).
        wakes: times a policy asked to be woken at.
        next_id: the next job id.
        passes, policy_errors, last_error: counters for ``controller status``.
    """

    pool: tuple[str, ...]
    storage: tuple[str, ...]
    jobs: dict[int, JobRec] = field(default_factory=dict)
    hosts: dict[str, HostRec] = field(default_factory=dict)
    ended: dict[int, str] = field(default_factory=dict)
    stopping: dict[int, StoppingFs] = field(default_factory=dict)
    held: set[int] = field(default_factory=set)
    holding: list[int] = field(default_factory=list)
    backoff: dict[int, float] = field(default_factory=dict)
    reported: dict[int, float] = field(default_factory=dict)
    declined: dict[int, str] = field(default_factory=dict)
    wakes: list[float] = field(default_factory=list)
    next_id: int = 1
    passes: int = 0
    policy_errors: int = 0
    last_error: str = ""

    def queue(self) -> list[JobRec]:
        """Pending jobs in priority order (priority, then submission)."""
        return sorted((j for j in self.jobs.values() if j.state == JobState.PENDING),
                      key=lambda j: (-j.priority, j.id))

    def draining(self) -> list[HostRec]:
        """Hosts to check (their job ended or released them), oldest first (down hosts cannot be checked)."""
        return sorted((h for h in self.hosts.values() if h.drain is not None and h.drain_since > 0 and not h.down),
                      key=lambda h: h.drain_since)

    def active(self, job_id: int) -> JobRec:
        """A job that has not ended.

        Raises:
            UnknownJob: there is none with that id.
        """
        j = self.jobs.get(job_id)
        if j is None:
            raise UnknownJob(f"no active job {job_id}")
        return j

    def all_hosts(self, j: JobRec) -> list[str]:
        """The job's hosts and those an expansion in flight adds."""
        out = list(j.hosts)
        if j.order and j.order.kind == "expand":
            out += [h for h in j.order.added if h not in out]
        return out

    def hosts_clean(self, names: Sequence[str]) -> bool:
        """Whether every one of the hosts is checked empty and up."""
        return all(self.hosts[n].drain is None and not self.hosts[n].down for n in names)

    def lent_hosts(self) -> dict[str, int]:
        """The hosts lent to job file systems, each with the job whose file system holds it."""
        return {h: o.id for o in self.jobs.values() for h in o.fs.lent}


class Outbox:
    """The actions of the event being handled, in order: persistence and process actions and the reply. Every
    change of a job or host record goes through it (:meth:`save`, :meth:`set_host`), so none is left unsaved."""

    def __init__(self, state: CoreState) -> None:
        self.state = state
        self.actions: list[Action] = []

    def take(self) -> list[Action]:
        """The actions so far; the outbox is empty again."""
        out, self.actions = self.actions, []
        return out

    def emit(self, action: Action) -> None:
        self.actions.append(action)

    def save(self, j: JobRec) -> None:
        """Persist the job's record; a job that ended leaves the active ones."""
        self.emit(SaveJob(j.id, str(j.state), j.to_json()))
        if JobState(j.state).final:
            self.state.jobs.pop(j.id, None)
            self.state.ended[j.id] = str(j.state)
        else:
            self.state.jobs[j.id] = j

    def save_host(self, h: HostRec) -> None:
        self.emit(SaveHost(h.name, h.idx, h.owner, h.drain, h.drain_since, h.down))

    def set_host(self, name: str, **kw: Any) -> None:
        """Change fields of a host record and persist it."""
        h = self.state.hosts[name]
        for k, v in kw.items():
            setattr(h, k, v)
        self.save_host(h)

    def log_event(self, job_id: int | None, kind: str, text: str, now: float) -> None:
        log.info("job %s %s: %s", job_id if job_id is not None else "-", kind, text)
        self.emit(AddEvent(job_id, kind, text, now))


class Part:
    """A handler of the live core: what it changes and where it writes (its collaborators are added by each)."""

    def __init__(self, state: CoreState, ledger: Ledger, out: Outbox, config: CoreConfig) -> None:
        self.state = state
        self.ledger = ledger
        self.out = out
        self.config = config

    def keep_view(self, j: JobRec) -> None:
        """Copy the ledger's view of a running job into its record (restored after a restart)."""
        v = self.ledger.view(j.id)
        if v is not None:
            j.view = [v.start, v.since, v.progress, v.end_estimate, v.resizes]


def host_list(hosts: Sequence[str]) -> str:
    """Host names as event texts print them: Slurm's compressed form (``local[1-3]``), like every other view; names
    that cannot be written so (brackets or commas in them) are joined with commas."""
    try:
        return compress_hostlist(hosts)
    except ConfigError:
        return ",".join(hosts)


def to_job(j: JobRec) -> Job:
    """The job as the ledger and the policies see it: its declared speedup (the runtime's measured Amdahl fraction
    replacing a declared one), its I/O intensity (measured, else declared), an estimate for an unlimited one."""
    serial, rho = speedup_params(j.speedup or "linear")
    measured = serial_of(j.progress)
    if measured is not None and not rho:
        serial = measured
    kind = JobKind.MALLEABLE if j.malleable else JobKind.RIGID
    return Job(j.id, j.submit, j.nodes, j.time_limit or UNLIMITED_ESTIMATE, kind, j.min_nodes, j.max_nodes,
               serial, rho, j.priority, j.constraint, bb=j.bb, intensity=job_intensity(j))


def job_intensity(j: JobRec) -> tuple[tuple[int, float], ...]:
    """``Job.intensity`` of a job: the measured I/O intensity, else the declared one, at every size."""
    i = intensity_of(j.progress)
    i = j.io_intensity if i is None else i
    return ((max(1, j.nodes), i),) if i > 0 else ()


def reported_progress(reported: dict[int, float]) -> Progress:
    """The ledger's progress of a running job: its runtime's last report, else the elapsed share of its estimate
    at its size."""

    def progress(v: RunningJob, now: float) -> float:
        rep = reported.get(v.job.id)
        if rep is not None:
            return rep
        full = v.job.estimate * declared(v.job, v.size)
        return min(1.0, v.progress + (max(0.0, now - v.since) / full if full > 0 else 1.0))

    return progress
