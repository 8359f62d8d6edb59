"""The live core's records: a job (:class:`JobRec`, with its state, its resize order in flight and its file
system), a host (:class:`HostRec`). The core mutates them; the store saves each whole, as JSON (jobs) or a row
(hosts), after every change."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field, fields
from operator import itemgetter
from typing import Any

from ._fsrecord import JobFs

__all__ = ["PUBLIC_COLS", "HostRec", "JobRec", "JobState", "ResizeOrder"]


class JobState(str, enum.Enum):
    """Where a job is in its life (the values are what the store and the command line show)."""

    PENDING = "PENDING"        # queued
    STARTING = "STARTING"      # hosts granted; launched once every host is checked clean
    RUNNING = "RUNNING"        # its processes were started
    COMPLETED = "COMPLETED"    # exit code 0
    FAILED = "FAILED"          # non-zero or unknown exit code, or could not be launched
    CANCELLED = "CANCELLED"    # cancelled by a user
    TIMEOUT = "TIMEOUT"        # stopped at its time limit

    @property
    def final(self) -> bool:
        """Whether the job has ended."""
        return self not in (JobState.PENDING, JobState.STARTING, JobState.RUNNING)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class ResizeOrder:
    """A resize the core decided for a malleable job, until the runtime acknowledges it.

    ``target`` is the job's hosts afterwards, ``added``/``removed`` the change; ``procs`` the process count the
    runtime goes to; ``decided``/``sent`` when the pass decided it and when the runtime first fetched it (0: not
    yet). ``prev`` is the job's view before the order (since, progress, estimated end, resizes), restored when
    the runtime refuses.
    """

    seq: int
    kind: str
    target: tuple[str, ...]
    added: tuple[str, ...]
    removed: tuple[str, ...]
    procs: int
    decided: float
    sent: float = 0.0
    prev: tuple[float, float, float, int] = (0.0, 0.0, 0.0, 0)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (stored inside the job record)."""
        return {"seq": self.seq, "kind": self.kind, "target": list(self.target), "added": list(self.added),
                "removed": list(self.removed), "procs": self.procs, "decided": self.decided, "sent": self.sent,
                "prev": list(self.prev)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ResizeOrder:
        """Inverse of :meth:`to_dict`."""
        prev = d.get("prev") or (0.0, 0.0, 0.0, 0)
        return cls(int(d["seq"]), str(d["kind"]), tuple(d["target"]), tuple(d.get("added", ())),
                   tuple(d.get("removed", ())), int(d["procs"]), float(d["decided"]), float(d.get("sent", 0.0)),
                   (float(prev[0]), float(prev[1]), float(prev[2]), int(prev[3])))


@dataclass
class JobRec:
    """A job as the controller knows it; mutated only by the controller core, saved whole on each change.

    ``hosts`` are in allocation order (the anchor's host first, then in the order they were added), which is
    also the order in which a shrink of the runtime frees them (newest spawn groups first).
    """

    id: int
    name: str
    cmd: list[str]
    nodes: int
    min_nodes: int
    max_nodes: int
    malleable: bool
    time_limit: float
    out: str
    err: str
    cwd: str
    env: dict[str, str]
    submit: float
    state: str = "PENDING"
    priority: int = 0
    hosts: list[str] = field(default_factory=list)
    order: ResizeOrder | None = None         # resize in flight
    seq: int = 0                             # last order number
    launched: bool = False                   # the launch was attempted (the shepherd may exist)
    pid: int = 0                             # the shepherd's pid
    pid_ctime: float = 0.0                   # its create time (guards against pid reuse)
    start: float = 0.0
    since: float = 0.0                       # start of the current size
    end: float = 0.0
    exit_code: int | None = None
    reason: str = ""                         # why pending / how it ended
    registered: bool = False                 # the runtime link said hello
    link_pid: int = 0
    unresponsive: bool = False               # an order was not acknowledged in time
    progress: dict[str, Any] = field(default_factory=dict)   # last data per phase
    cancel: bool = False                     # cancel requested; the processes are being stopped
    stop_at: float = 0.0                     # when SIGTERM was sent to its processes (0: not being stopped)
    killed_at: float = 0.0                   # when SIGKILL was last sent (the grace after SIGTERM was over)
    speedup: str = ""                        # declared speedup model ("", linear, amdahl:F, rho:R)
    constraint: str = ""                     # node-count constraint ("", pof2, even, odd)
    user: str = ""                           # who submitted it
    uid: int = -1                            # the Unix user and group its processes run as (-1: the daemon's,
    gid: int = -1                            # in records of before they existed)
    view: list[Any] | None = None            # the scheduler's view: start, since, progress, est. end, resizes
    paused: str = ""                         # "" running, "pause" asked, "paused" told, "resume" asked
    bb: float = 0.0                          # burst buffer (bytes) held for the whole run: a job file system
    fs_servers: int = 0                      # data servers of that file system (0: one)
    stage_in: list[list[str]] = field(default_factory=list)    # [local, fs path] copied in before the start
    stage_out: list[list[str]] = field(default_factory=list)   # [fs path, local] copied out after the end
    fs: JobFs = field(default_factory=JobFs)                    # its file system (``--bb``)
    fs_min: int = 0                          # fewest data servers its file system may shrink to (0: fs_servers)
    fs_max: int = 0                          # most data servers it may grow to (0: fs_servers)
    io_rate: float = 0.0                     # requested I/O rate (RIO, bytes/s) its file system grows for
    fs_replicas: int = 0                     # copies of each block in its file system (0: one)
    io_intensity: float = 0.0                # declared I/O intensity (0..1; the runtime's measure replaces it)
    dependency: str = ""                     # jobs it waits for ("afterok:3,afterany:4"; see sched._depend)

    @property
    def acting_ids(self) -> tuple[int | None, int | None]:
        """The uid and gid the daemon acts as for this job (staging, its mount): its user's, or None for the daemon's
        own (a root job's, or a record from before jobs had a user: uid -1)."""
        if self.uid <= 0:
            return None, None
        return self.uid, (self.gid if self.gid >= 0 else None)

    @property
    def size(self) -> int:
        """Hosts held now."""
        return len(self.hosts)

    def to_json(self) -> str:
        """The record as JSON (the stored form)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["state"] = str(self.state)
        if self.order is not None:
            data["order"] = self.order.to_dict()
        data["fs"] = self.fs.to_dict()
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> JobRec:
        """Inverse of :meth:`to_json` (unknown keys of newer versions are ignored)."""
        data = json.loads(text)
        names = _JOB_FIELDS
        rec = cls(**{k: v for k, v in data.items() if k in names})
        if isinstance(rec.order, dict):
            rec.order = ResizeOrder.from_dict(rec.order)
        rec.fs = JobFs.from_dict(data.get("fs"))
        return rec

    def public(self) -> dict[str, Any]:
        """The fields shown by ``queue``/``info``/``history`` (no environment: it holds the secret)."""
        return dict(zip(PUBLIC_COLS, self.public_values()))

    def public_values(self) -> list[Any]:
        """The values of :meth:`public`, in :data:`PUBLIC_COLS` order (a long table sends rows this way)."""
        out = list(_GET_PUBLIC(vars(self)))      # fields are instance attributes: read as one lookup each
        out[_AT_STATE] = str(self.state)
        if self.order is not None:
            out[_AT_ORDER] = self.order.to_dict()
        out[_AT_FS] = self.fs.to_dict()
        if not self.user:                        # records written before the field existed
            out[_AT_USER] = self.env.get("USER", "")
        out.append(len(self.hosts))
        return out


_JOB_FIELDS = frozenset(f.name for f in fields(JobRec))
_PUBLIC_FIELDS = tuple(f.name for f in fields(JobRec) if f.name != "env")  # no environment: it holds secrets
PUBLIC_COLS = (*_PUBLIC_FIELDS, "size")
"""The names of a job's public fields (:meth:`JobRec.public`), in order."""
_GET_PUBLIC = itemgetter(*_PUBLIC_FIELDS)
_AT_STATE, _AT_ORDER, _AT_FS, _AT_USER = (_PUBLIC_FIELDS.index(n) for n in ("state", "order", "fs", "user"))


@dataclass
class HostRec:
    """A host: ``owner`` is the job holding (or about to hold) it; ``drain`` the job whose processes may still
    be on it (checked before the host is given to anyone)."""

    name: str
    idx: int
    owner: int | None = None
    drain: int | None = None
    drain_since: float = 0.0
    down: str = ""                   # why the host is down ("" when it is up)

    @property
    def free(self) -> bool:
        """Neither held, nor waiting to be checked empty, nor down."""
        return self.owner is None and self.drain is None and not self.down
