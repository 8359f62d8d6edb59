"""The live core's vocabulary: the events it handles and the actions it returns (its records are in
:mod:`._records`).

Every record is frozen. The daemon turns what happens (a message, a process ending, a host checked, the clock)
into an event, hands it to :meth:`Core.handle <malleable.controller.daemon._core.Core.handle>` and carries out the
returned actions in order: the persistence actions first, in one transaction, then the others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TypeAlias

from . import _protocol as P
from ._access import OPERATOR, Principal
from ._records import JobRec

__all__ = [
    "PERSIST",
    "AbortFs",
    "Action",
    "AddEvent",
    "AddStep",
    "AttachFs",
    "DeleteHost",
    "Event",
    "FsAttached",
    "FsFailed",
    "FsFault",
    "FsHeld",
    "FsMounted",
    "FsProgress",
    "FsReady",
    "FsSample",
    "FsScaled",
    "FsStopped",
    "HostClean",
    "HostDown",
    "HostUp",
    "JobExited",
    "JobLaunched",
    "Kill",
    "Launch",
    "LaunchFailed",
    "MountFs",
    "Relaunch",
    "Reply",
    "Request",
    "ScaleFs",
    "SaveHost",
    "SaveJob",
    "Schedule",
    "StartFs",
    "Stop",
    "StopFs",
    "Tick",
    "UnmountFs",
]


# -- events ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Request:
    """A state-changing wire request (submit, cancel, or one of a job's runtime link) received at ``now`` from
    ``who`` (the key it was authenticated with); answered by exactly one :class:`Reply` (or refused by raising
    :class:`~malleable.errors.Refusal`)."""

    now: float
    msg: P.Message
    who: Principal = OPERATOR


@dataclass(frozen=True, slots=True)
class JobLaunched:
    """The job's shepherd process started (the start acknowledgement)."""

    now: float
    job_id: int
    pid: int
    ctime: float


@dataclass(frozen=True, slots=True)
class LaunchFailed:
    """The job could not be started at all (missing program, bad working directory)."""

    now: float
    job_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class Relaunch:
    """A launched job left no trace (the daemon died between recording and starting it): start it again."""

    now: float
    job_id: int


@dataclass(frozen=True, slots=True)
class JobExited:
    """The job's processes ended (``code`` None: unknown, e.g. lost while the daemon was down)."""

    now: float
    job_id: int
    code: int | None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class HostClean:
    """No process of the job that last used ``host`` is left on it."""

    now: float
    host: str


@dataclass(frozen=True, slots=True)
class HostDown:
    """``host`` failed its check or stopped answering; the job on it is interrupted and re-queued. ``until`` is
    when it is expected back (``inf``: unknown), what a policy sees in ``Snapshot.down``."""

    now: float
    host: str
    reason: str
    until: float = math.inf


@dataclass(frozen=True, slots=True)
class HostUp:
    """``host`` answers again (it is checked clean before reuse)."""

    now: float
    host: str


@dataclass(frozen=True, slots=True)
class Tick:
    """Periodic: time limits, unacknowledged orders, leftovers of ended jobs."""

    now: float


@dataclass(frozen=True, slots=True)
class Schedule:
    """Run a scheduling pass."""

    now: float


@dataclass(frozen=True, slots=True)
class FsReady:
    """The job's file system answers at ``address`` and every stage-in file is in it: the job can be launched."""

    now: float
    job_id: int
    address: str


@dataclass(frozen=True, slots=True)
class FsProgress:
    """One file of a job's stage-in (``direction`` "in") or stage-out ("out") is done: ``size`` bytes copied
    from ``src`` to ``dst``, or ``error`` says why not."""

    now: float
    job_id: int
    direction: str
    src: str
    dst: str
    size: int
    error: str = ""


@dataclass(frozen=True, slots=True)
class FsFailed:
    """The job's file system could not be started or a stage-in failed (``reason``); whatever was started of it
    is stopped already."""

    now: float
    job_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class FsStopped:
    """The job's file system was stopped after its stage-out; ``left`` names hosts where a server process was
    still found (and killed), ``errors`` what went wrong on the way ("": nothing)."""

    now: float
    job_id: int
    left: tuple[str, ...] = ()
    errors: str = ""


@dataclass(frozen=True, slots=True)
class FsHeld:
    """A stage-out failed (``errors``): the job's file system and its data are kept, its servers still run, and its
    buffer stays held until the stage-out is tried again and succeeds or the owner releases it."""

    now: float
    job_id: int
    errors: str


@dataclass(frozen=True, slots=True)
class FsSample:
    """The job's file system measured: ``aio`` is the achieved I/O rate (bytes/s read and written by its data
    servers since the previous sample; None: no I/O, which is no sample for the rule), ``servers`` its active data
    servers as ``(server id, host)``, oldest first."""

    now: float
    job_id: int
    aio: float | None
    servers: tuple[tuple[int, str], ...]


@dataclass(frozen=True, slots=True)
class FsScaled:
    """A :class:`ScaleFs` was carried out (``error`` "") or not: ``kind`` add or remove, server ``sid`` on
    ``host``."""

    now: float
    job_id: int
    kind: str
    host: str
    sid: int = 0
    error: str = ""


@dataclass(frozen=True, slots=True)
class FsAttached:
    """An :class:`AttachFs` was carried out: the metadata server answered (``error`` "") or not (the reason)."""

    now: float
    job_id: int
    error: str = ""


@dataclass(frozen=True, slots=True)
class FsFault:
    """A running job's file system lost servers: data servers ``sids`` on ``hosts`` do not answer (``text`` says
    which, where)."""

    now: float
    job_id: int
    sids: tuple[int, ...]
    text: str
    hosts: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FsMounted:
    """A job's file system was mounted (``verb`` "mount") or unmounted ("umount") at ``path``: ``results`` holds
    each host with "" (done) or why not. Reported for the mount before the launch, the mount on a host the job
    grows onto, the unmount from a host it left and the unmount at its end."""

    now: float
    job_id: int
    verb: str
    path: str
    results: tuple[tuple[str, str], ...]


Event: TypeAlias = (Request | JobLaunched | LaunchFailed | Relaunch | JobExited | HostClean | HostDown | HostUp
                    | Tick | Schedule | FsReady | FsProgress | FsFailed | FsStopped | FsSample | FsScaled
                    | FsAttached | FsFault | FsHeld | FsMounted)


# -- actions -----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SaveJob:
    """Persist a job record (its JSON form as of the event)."""

    job_id: int
    state: str
    text: str


@dataclass(frozen=True, slots=True)
class SaveHost:
    """Persist a host record."""

    name: str
    idx: int
    owner: int | None
    drain: int | None
    drain_since: float
    down: str = ""


@dataclass(frozen=True, slots=True)
class DeleteHost:
    """Forget a host that left the pool once nothing of its jobs is left on it."""

    name: str


@dataclass(frozen=True, slots=True)
class AddStep:
    """Append to a job's size history: from ``t`` on it runs on ``hosts``."""

    job_id: int
    t: float
    kind: str
    hosts: tuple[str, ...]
    decided: float | None = None
    seconds: float | None = None


@dataclass(frozen=True, slots=True)
class AddEvent:
    """Append to the event log."""

    job_id: int | None
    kind: str
    text: str
    t: float


@dataclass(frozen=True, slots=True)
class Launch:
    """Start the job's processes on its hosts (``job`` is a copy of the record at that time)."""

    job: JobRec


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop a running job's processes (cancel, time limit, interruption): SIGTERM to each of them once (repeated
    while the job is being stopped, it reaches the processes that appeared since), or SIGKILL to all when ``hard``
    (the grace period after the SIGTERM is over)."""

    job_id: int
    pid: int
    reason: str
    hard: bool = False


@dataclass(frozen=True, slots=True)
class Kill:
    """Kill processes of a job that ended (or was put back in the queue) still found on a host after the grace
    period."""

    job_id: int
    host: str


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to a :class:`Request`."""

    msg: P.Message | None = field(default=None)


@dataclass(frozen=True, slots=True)
class StartFs:
    """Start a job's file system: a metadata server on ``meta`` and one data server per entry of ``data`` (each
    holding at most ``capacity`` bytes, 0: no limit), keeping ``replicas`` copies of each block, then copy each
    ``(local, fs path)`` of ``stage_in`` into it. Answered by :class:`FsProgress` per file, then :class:`FsReady` or
    :class:`FsFailed`."""

    job_id: int
    meta: str
    data: tuple[str, ...]
    capacity: int
    stage_in: tuple[tuple[str, str], ...] = ()
    replicas: int = 1
    uid: int | None = None          # the user the stage-in runs as (None: the daemon's own)
    gid: int | None = None
    limit: float = 0.0              # seconds the stage-in may take (the job's time limit; 0: none)
    mount_hosts: tuple[str, ...] = ()   # the job's hosts: where it is mounted before the launch (a mount root set)


@dataclass(frozen=True, slots=True)
class StopFs:
    """Copy each ``(fs path, local)`` of ``stage_out`` out of the job's file system at ``address`` (as far as
    possible), stop its servers and check that none is left on ``hosts``. Answered by :class:`FsStopped`."""

    job_id: int
    address: str
    hosts: tuple[str, ...]
    stage_out: tuple[tuple[str, str], ...] = ()
    uid: int | None = None          # the user the stage-out runs as (None: the daemon's own)
    gid: int | None = None
    limit: float = 0.0              # seconds the stage-out may take (0: none)
    mount_hosts: tuple[str, ...] = ()   # the job's hosts: where its mount is taken down after the stage-out


@dataclass(frozen=True, slots=True)
class AbortFs:
    """Stop the stage-in of a file system being started for a job that no longer waits for it (answered as a
    failed start: :class:`FsFailed`)."""

    job_id: int


@dataclass(frozen=True, slots=True)
class ScaleFs:
    """Change the job's running file system at ``address`` with adhocfs's own expand and shrink: ``kind`` add (a
    data server on ``host`` holding at most ``capacity`` bytes) or remove (server ``sid``, its blocks moved to the
    others by partial redistribution). Answered by :class:`FsScaled`."""

    job_id: int
    address: str
    kind: str
    host: str
    sid: int = 0
    capacity: int = 0


@dataclass(frozen=True, slots=True)
class AttachFs:
    """Take over the running file system of a job from before a restart: check that its metadata server at
    ``address`` answers and measure it again; ``servers`` are its data servers as ``(server id, host)``.
    Answered by :class:`FsAttached`."""

    job_id: int
    address: str
    servers: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class MountFs:
    """Mount the running job's file system at ``address`` on ``hosts`` (hosts an expansion adds: mounted before
    the order reaches the job, so its new processes find the mount), for the job's user ``uid``/``gid``.
    Answered by :class:`FsMounted`."""

    job_id: int
    address: str
    hosts: tuple[str, ...]
    uid: int | None = None
    gid: int | None = None


@dataclass(frozen=True, slots=True)
class UnmountFs:
    """Take the running job's mount down on ``hosts`` (hosts it left, checked free of its processes). Answered by
    :class:`FsMounted`."""

    job_id: int
    hosts: tuple[str, ...]


Action: TypeAlias = (SaveJob | SaveHost | DeleteHost | AddStep | AddEvent | Launch | Stop | Kill | Reply | StartFs
                     | StopFs | ScaleFs | AttachFs | AbortFs | MountFs | UnmountFs)

PERSIST: tuple[type, ...] = (SaveJob, SaveHost, DeleteHost, AddStep, AddEvent)
"""Action types that change the state file (carried out first, in one transaction)."""
