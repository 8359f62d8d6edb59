"""The record of a job's own file system, as the live core keeps it in the job's record (``JobRec.fs``).

A job submitted with ``--bb`` gets a file system when its hosts are granted and clean; its :class:`FsPhase` says
where that file system is in its life::

    (none) -> starting -> ready -> staging-out -> stopped        the job ended for good: its files are copied out
                 |          |                  \\-> held       a copy failed: servers and data kept; tried again
                 |          |                                   (-> staging-out) or released (-> stopping)
                 |          \\---> stopping ----> stopped        re-queued, or nothing to stage out
                 |-> failed                                      a server did not start or a stage-in failed
                 \\-> abandoned -> stopped                        still starting when the job stopped waiting for it

``starting`` covers the stage-in (the job's reason is then ``StageIn``): the shell starts the servers, copies the
stage-in files and answers once (``FsReady`` or ``FsFailed``). From ``staging-out``, ``stopping`` and ``abandoned``
on, the file system is no longer the job's current one; its buffer stays held until it is stopped. A job back in
the queue keeps the one still being stopped as :attr:`JobFs.old` (its current record is empty until then), so
that a restart in between stops it again.

The stored form (inside the job's JSON) is a plain object with one key per field (``{}`` for a job without a file
system); :meth:`JobFs.from_dict` reads every form earlier versions wrote, which had the same keys, each one
present only once it was set.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields, replace
from typing import Any, NamedTuple

__all__ = ["RESTOP", "FsNote", "FsPhase", "JobFs", "StagedFile"]


class FsPhase(str, enum.Enum):
    """Where a job's file system is in its life (the values are what the store and ``malleable info`` show)."""

    NONE = ""                       # no file system (yet)
    STARTING = "starting"           # servers starting, stage-in files being copied
    READY = "ready"                 # in use: the job may run (or runs) on it
    STAGING_OUT = "staging-out"     # the job ended for good: stage-out files being copied, then the servers stop
    STOPPING = "stopping"           # being stopped without a stage-out (the job went back to the queue, or none)
    ABANDONED = "abandoned"         # was starting for a job that no longer waits for it: stopped once it answers
    HELD = "held"                   # a stage-out failed: servers and data kept, buffer held, until retried or released
    STOPPED = "stopped"             # every server stopped and searched for
    FAILED = "failed"               # could not be started (servers or stage-in); nothing of it is left

    def __str__(self) -> str:
        return self.value


RESTOP = frozenset({FsPhase.STARTING, FsPhase.READY, FsPhase.STAGING_OUT, FsPhase.STOPPING, FsPhase.ABANDONED})
"""Phases of a file system the shell may have been starting or stopping when the controller stopped: stopped again
at a restart (unless its job runs on it: then it is taken over)."""


class StagedFile(NamedTuple):
    """One file copied in or out: ``size`` bytes from ``src`` to ``dst``, or ``error`` says why not (stored as
    ``[src, dst, size, error]``)."""

    src: str
    dst: str
    size: int
    error: str = ""


@dataclass(frozen=True, slots=True)
class FsNote:
    """A decision of the storage policy kept for ``malleable info``: at ``t``, ``kind`` (add, remove, reclaim,
    keep) on ``host`` (server ``sid``), and why."""

    t: float
    kind: str
    host: str
    sid: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"t": self.t, "kind": self.kind, "host": self.host, "sid": self.sid, "reason": self.reason}


@dataclass
class JobFs:
    """A job's file system; mutated only by the core's storage handlers (see the module docstring).

    Attributes:
        phase: where it is in its life.
        meta: host of the metadata server.
        data: hosts of the active data servers (one entry per server).
        address: the metadata server's address ("" until it answers).
        stage_in, stage_out: the files copied so far, in the order the shell reported them.
        error: the last thing that went wrong ("" none).
        servers: active data servers as ``(server id, host)``, oldest first (from the last sample).
        aio: the achieved I/O rate of the last sample (bytes/s; None: no I/O in it, or no sample yet).
        samples: the last achieved rates with I/O in them, oldest first.
        since: samples since the last change (None: no sample yet).
        last_change: when the last change was decided (None: never).
        decisions: the storage policy's last decisions.
        scaling: a change in flight ("add" or "remove"; "" none).
        used: every host a data server was added on (searched for leftovers at the stop).
        lent: hosts taken back from compute jobs that serve this file system (withheld from the policies).
        reclaiming: a host being taken back for a data server ("" none), since ``reclaim_since``.
        taken_over: found running at a restart and not yet answering again (it keeps its servers until then).
        lost: data servers that stopped answering.
        left: hosts where a server process was still found (and killed) at the stop.
        restarted: its phase when the controller restarted while it was being started or stopped.
        old: (a job back in the queue) the earlier file system still being stopped.
        mounted: hosts where it is mounted for the job (``controller start --bb-mount-root``).
        mounting: hosts an expansion adds where it is being mounted (the order waits for them).
    """

    phase: FsPhase = FsPhase.NONE
    meta: str = ""
    data: list[str] = field(default_factory=list)
    address: str = ""
    stage_in: list[StagedFile] = field(default_factory=list)
    stage_out: list[StagedFile] = field(default_factory=list)
    error: str = ""
    servers: list[tuple[int, str]] = field(default_factory=list)
    aio: float | None = None
    samples: list[float] = field(default_factory=list)
    since: int | None = None
    last_change: float | None = None
    decisions: list[FsNote] = field(default_factory=list)
    scaling: str = ""
    used: list[str] = field(default_factory=list)
    lent: list[str] = field(default_factory=list)
    reclaiming: str = ""
    reclaim_since: float | None = None
    taken_over: bool = False
    lost: list[int] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    restarted: FsPhase = FsPhase.NONE
    old: JobFs | None = None
    mounted: list[str] = field(default_factory=list)
    mounting: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """No file system: never started for this run, and none of an earlier run being stopped."""
        return type(self) is JobFs and vars(self) == _EMPTY_FIELDS    # ``self == JobFs()``, at a tenth of the cost

    def hosts(self) -> tuple[str, ...]:
        """Every host a server of it ran on (those removed since included: searched for leftovers at the stop)."""
        return tuple(dict.fromkeys([self.meta, *self.data, *self.used]))

    def copy_as(self, phase: FsPhase) -> JobFs:
        """A copy in ``phase`` (its lists shared)."""
        return replace(self, phase=phase)

    # -- the stored form -------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``{}`` when empty, else every field (``old`` only when there is one)."""
        if self.empty:
            return {}
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "old":
                if v is not None:
                    out["old"] = v.to_dict()
            elif f.name in ("phase", "restarted"):
                out[f.name] = v.value
            elif f.name in ("stage_in", "stage_out", "servers"):
                out[f.name] = [list(x) for x in v]
            elif f.name == "decisions":
                out[f.name] = [d.to_dict() for d in v]
            else:
                out[f.name] = list(v) if isinstance(v, list) else v
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> JobFs:
        """Inverse of :meth:`to_dict`; also reads the forms earlier versions stored (same keys, absent ones at
        their defaults).

        Raises:
            ValueError: a phase this version does not know.
        """
        if not d:
            return cls()

        def phase(key: str) -> FsPhase:
            v = d.get(key) or ""
            try:
                return FsPhase(v)
            except ValueError:
                raise ValueError(f"unknown file-system phase {str(v)[:40]!r}") from None

        since, last, rs, aio = d.get("since"), d.get("last_change"), d.get("reclaim_since"), d.get("aio")
        old = d.get("old")
        return cls(
            phase("phase"), str(d.get("meta", "")), [str(h) for h in d.get("data", [])], str(d.get("address", "")),
            [StagedFile(str(s), str(t), int(n), str(e)) for s, t, n, e in d.get("stage_in", [])],
            [StagedFile(str(s), str(t), int(n), str(e)) for s, t, n, e in d.get("stage_out", [])],
            str(d.get("error", "")), [(int(s), str(h)) for s, h in d.get("servers", [])],
            None if aio is None else float(aio), [float(x) for x in d.get("samples", [])],
            None if since is None else int(since), None if last is None else float(last),
            [FsNote(float(x["t"]), str(x["kind"]), str(x["host"]), int(x["sid"]), str(x["reason"]))
             for x in d.get("decisions", [])],
            str(d.get("scaling", "")), [str(h) for h in d.get("used", [])], [str(h) for h in d.get("lent", [])],
            str(d.get("reclaiming", "")), None if rs is None else float(rs), bool(d.get("taken_over", False)),
            [int(s) for s in d.get("lost", [])], [str(h) for h in d.get("left", [])], phase("restarted"),
            cls.from_dict(old) if isinstance(old, dict) else None, [str(h) for h in d.get("mounted", [])],
            [str(h) for h in d.get("mounting", [])])


_EMPTY_FIELDS = vars(JobFs())
