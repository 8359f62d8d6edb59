"""Each job's own file system in the I/O-aware simulator, grown and shrunk by the live storage policy.

A job whose workload line carries ``fs_servers``/``fs_min``/``fs_max``/``io_rate`` (the live submit's storage
fields) gets a file system of its own, as ``malleable submit --bb`` does live. The model (docs/io.md, "Elastic
storage in the simulator"):

* its blocking ``read``, ``write`` and ``checkpoint`` phases run against that file system, not the shared one: at
  ``min(servers x server_bw, n x link_bw)`` (``n x bb_bw`` for a checkpoint), for a job on ``n`` nodes; stage-in,
  stage-out and the background drains of checkpoints stay transfers of the shared file system;
* it starts with ``fs_servers`` data servers (default ``fs_min``) on the job's own hosts, in turn (node-local, as
  the live controller places the first servers); every host of the machine may run data servers;
* ``static`` keeps those servers for the whole run; ``elastic`` runs the live storage policy
  (:func:`~malleable.controller.sched._fspolicy.decide_storage`, the same function the live core calls) every
  ``sample`` seconds on each running file system without a change in flight, with the achieved rate AIO over the
  interval (bytes its phases moved / seconds; an interval without I/O gives no sample, as live), the free hosts,
  the hosts compute jobs hold and the donors (running malleable jobs that the ledger may resize now);
* a change costs time: adding a server stalls the file system's I/O for ``add_cost`` seconds, removing one (with
  partial redistribution) for ``remove_cost`` seconds; then the count changes and the rule's cool-down starts
  (live: when the shell answers). A ``reclaim`` is a :class:`~malleable.controller.sched.ResizeJob` of the donor by
  its newest host through the ledger (the path of every resize, effects to the engine); the release is immediate
  in the simulator, so the policy is asked again at once and adds the server on that host;
* a host that runs a data server and no compute job of that file system's job is out of the compute pool while it
  serves: it is marked down with an unknown return (``Snapshot.down``, as a host being repaired) and comes back
  free when its last server leaves. A server on a host another job was given since (the job shrank and a pass gave
  the host away in the same instant) shares it, and the policy's making-room rule removes it beyond ``fs_min``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from malleable.controller.sched._fspolicy import (
    Donor,
    FsDecision,
    FsState,
    StorageRule,
    decide_storage,
    host_loss,
)
from malleable.controller.sched._ledger import Effect, Ledger
from malleable.controller.sched._model import JobKind, NodeId, ResizeJob
from malleable.errors import ConfigError

__all__ = ["POLICIES", "FsCall", "FsJobReport", "Storage", "StorageModel", "StorageReport"]

log = logging.getLogger(__name__)

POLICIES = ("static", "elastic")
KEEP_SAMPLES = 12           # AIO samples kept per file system, as the live core


@dataclass(frozen=True, slots=True)
class StorageModel:
    """Parameters of the job file systems.

    Attributes:
        server_bw: one data server's bandwidth (bytes/s).
        policy: ``static`` (the servers a job starts with, for its whole run) or ``elastic`` (the storage policy).
        sample: seconds between two samples (the live sampler's 2 s).
        add_cost: seconds a server's addition stalls the file system (measured live: 0.29 s).
        remove_cost: seconds a server's removal with partial redistribution stalls it (measured live: 0.09 s).
        rule: the storage policy's parameters (the live core's defaults).
        trace: keep every call of the policy with its inputs and answer (:attr:`StorageReport.calls`).
    """

    server_bw: float
    policy: str = "static"
    sample: float = 2.0
    add_cost: float = 0.29
    remove_cost: float = 0.09
    rule: StorageRule = StorageRule()
    trace: bool = False

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ConfigError(f"storage policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        if not (self.server_bw > 0 and self.sample > 0 and self.add_cost >= 0 and self.remove_cost >= 0):
            raise ConfigError(f"file-system server bandwidth and sample interval must be > 0, costs >= 0 (got "
                              f"{self.server_bw}, {self.sample}, {self.add_cost}, {self.remove_cost})")


@dataclass(frozen=True, slots=True)
class FsCall:
    """One call of the storage policy: its inputs and what it answered (kept with ``trace``)."""

    now: float
    fs: FsState
    storage: tuple[str, ...]
    free: tuple[str, ...]
    taken: dict[str, int]
    donors: tuple[Donor, ...]
    decisions: tuple[FsDecision, ...]


@dataclass(slots=True)
class FsJobReport:
    """One job's file system over its run.

    Attributes:
        job_id: the job.
        servers: ``(time, data servers)`` at its start and at each change (0 at its end).
        server_seconds: data servers x seconds.
        decisions: changes decided (add, remove, reclaim), by kind.
        taken_back: hosts taken back from malleable jobs for it.
    """

    job_id: int
    servers: list[tuple[float, int]]
    server_seconds: float = 0.0
    decisions: dict[str, int] = field(default_factory=dict)
    taken_back: int = 0


@dataclass(slots=True)
class StorageReport:
    """The file systems of a run: per job, and the calls of the policy when traced."""

    policy: str
    jobs: dict[int, FsJobReport] = field(default_factory=dict)
    calls: list[FsCall] = field(default_factory=list)

    @property
    def server_seconds(self) -> float:
        """Data servers x seconds over every job."""
        return sum(j.server_seconds for j in self.jobs.values())

    @property
    def decisions(self) -> int:
        """Changes decided over every job."""
        return sum(sum(j.decisions.values()) for j in self.jobs.values())

    @property
    def taken_back(self) -> int:
        """Hosts taken back from malleable jobs."""
        return sum(j.taken_back for j in self.jobs.values())

    def summary(self) -> dict:
        """A JSON-ready dict: the totals and each job's servers over time."""
        return {"policy": self.policy, "server_seconds": self.server_seconds, "decisions": self.decisions,
                "hosts_taken_back": self.taken_back,
                "jobs": {str(k): {"servers": [[t, n] for t, n in j.servers], "server_seconds": j.server_seconds,
                                  "decisions": dict(j.decisions), "taken_back": j.taken_back}
                         for k, j in sorted(self.jobs.items())}}


class _Fs:
    """A running job's file system (mutable, engine-private)."""

    __slots__ = ("bytes", "change", "hi", "job_id", "last_change", "lo", "mark", "next_sid", "reclaiming", "rep",
                 "rio", "samples", "servers", "since", "t")

    def __init__(self, job_id: int, servers: list[tuple[int, str]], lo: int, hi: int, rio: float,
                 now: float, rep: FsJobReport) -> None:
        self.job_id = job_id
        self.servers = servers
        self.next_sid = len(servers)
        self.lo, self.hi, self.rio = lo, hi, rio
        self.samples: list[float] = []
        self.since = 0
        self.last_change: float | None = None
        self.reclaiming = ""
        self.mark = now              # start of the sample interval
        self.bytes = 0.0             # moved since ``mark``
        self.change: tuple[str, int, str, float] | None = None   # (kind, sid, host, until) in flight
        self.t = now                 # last time server_seconds was brought up to date
        self.rep = rep


class Storage:
    """The job file systems of one run of :class:`~._ioengine.IOSimulator` (module docstring).

    Args:
        model: the parameters.
        fs: per workload row, ``(servers at start, fs_min, fs_max, io_rate)`` or None.
        ledger: the engine's ledger (hosts, running jobs, the decision path of a reclaim).
        effect: the engine's handler of the ledger's effects.
    """

    def __init__(self, model: StorageModel, fs: list[tuple[int, int, int, float] | None], ledger: Ledger,
                 effect: Callable[[Effect], None]) -> None:
        self.m = model
        self.spec = fs
        self.ledger = ledger
        self.effect = effect
        self.names: dict[NodeId, str] = {x: str(x) for x in ledger.nodes}
        self.node: dict[str, NodeId] = {v: k for k, v in self.names.items()}
        self.pool = tuple(self.names[x] for x in ledger.nodes)
        self.live: dict[int, _Fs] = {}
        self.held: dict[NodeId, int] = {}        # hosts out of the compute pool for a data server, by job
        self.report = StorageReport(model.policy)
        self._k = 0                              # the next sample is at _k * sample

    # -- the engine's hooks -----------------------------------------------------------------------------------

    def start(self, job_id: int, row: int, nodes: tuple[NodeId, ...], now: float) -> None:
        """A job started: its file system, if it has one, with its first servers on its own hosts."""
        spec = self.spec[row]
        if spec is None:
            return
        n, lo, hi, rio = spec
        servers = [(i, self.names[nodes[i % len(nodes)]]) for i in range(n)]
        rep = self.report.jobs.setdefault(job_id, FsJobReport(job_id, [(now, n)]))
        if not self.live and self.m.policy == "elastic":
            self._k = math.floor(now / self.m.sample) + 1
        self.live[job_id] = _Fs(job_id, servers, lo, hi, rio, now, rep)

    def end(self, job_id: int, now: float) -> None:
        """A job ended: its file system's servers stop (the hosts they held come back at the next :meth:`sync`)."""
        fs = self.live.pop(job_id, None)
        if fs is not None:
            self._count(fs, now)
            fs.rep.servers.append((now, 0))

    def bw(self, job_id: int) -> float | None:
        """The job's file-system bandwidth now (0 while a change is in flight), or None: it has none."""
        fs = self.live.get(job_id)
        if fs is None:
            return None
        return 0.0 if fs.change is not None else len(fs.servers) * self.m.server_bw

    def moved(self, job_id: int, nbytes: float) -> None:
        """``nbytes`` went through the job's file system (for its next AIO sample)."""
        fs = self.live.get(job_id)
        if fs is not None:
            fs.bytes += nbytes

    def next_event(self) -> float:
        """When the next sample or change completion is due (inf: none)."""
        t = min((fs.change[3] for fs in self.live.values() if fs.change is not None), default=math.inf)
        if self.live and self.m.policy == "elastic":
            t = min(t, self._k * self.m.sample)
        return t

    def step(self, now: float) -> bool:
        """Complete the changes due and take the samples due at ``now``; True when hosts came back free."""
        back = self.sync()
        for fs in list(self.live.values()):
            if fs.change is not None and fs.change[3] <= now:
                self._complete(fs, now)
        if self.live and self.m.policy == "elastic" and self._k * self.m.sample <= now:
            self._k = max(self._k + 1, math.floor(now / self.m.sample) + 1)
            for fs in sorted(self.live.values(), key=lambda f: f.job_id):
                if fs.change is None and fs.job_id in self.live:
                    self._sample(fs, now)
        return self.sync() or back

    def sync(self) -> bool:
        """Take free hosts that run a data server out of the compute pool, and give back those that no longer
        do; True when a host came back."""
        led = self.ledger
        serving = self._serving()
        back = False
        for x, jid in list(self.held.items()):
            if x not in serving:
                del self.held[x]
                led.node_up(x)
                back = True
        if serving:
            free = led.free_set
            for x, jid in serving.items():
                if x not in self.held and x in free:
                    led.node_down(x, math.inf)
                    self.held[x] = jid
        return back

    def _serving(self) -> dict[NodeId, int]:
        """The hosts running a data server (or about to), each with one job whose file system it serves."""
        serving: dict[NodeId, int] = {}
        for fs in self.live.values():
            hosts = [h for _, h in fs.servers]
            if fs.change is not None and fs.change[0] == "add":
                hosts.append(fs.change[2])
            for h in hosts:
                serving.setdefault(self.node[h], fs.job_id)
        return serving

    # -- the policy -------------------------------------------------------------------------------------------

    def _count(self, fs: _Fs, now: float) -> None:
        fs.rep.server_seconds += len(fs.servers) * (now - fs.t)
        fs.t = now

    def _complete(self, fs: _Fs, now: float) -> None:
        assert fs.change is not None
        kind, sid, host, _ = fs.change
        self._count(fs, now)
        if kind == "add":
            fs.servers.append((sid, host))
        else:
            fs.servers = [s for s in fs.servers if s[0] != sid]
        fs.change = None
        fs.last_change, fs.since, fs.mark, fs.bytes = now, 0, now, 0.0
        fs.rep.servers.append((now, len(fs.servers)))

    def _sample(self, fs: _Fs, now: float) -> None:
        dt = now - fs.mark
        if dt > 0 and fs.bytes > 0:
            fs.samples = [*fs.samples, fs.bytes / dt][-KEEP_SAMPLES:]
            fs.since += 1
        fs.mark, fs.bytes = now, 0.0
        self._decide(fs, now)

    def _decide(self, fs: _Fs, now: float) -> None:
        led = self.ledger
        v = led.running[fs.job_id]
        intensity = v.job.io_intensity(v.size) if v.job.intensity else 1.0
        state = FsState(fs.job_id, tuple(fs.servers), fs.lo, fs.hi, fs.rio, tuple(fs.samples), fs.since,
                        fs.last_change, tuple(self.names[x] for x in v.nodes), fs.reclaiming, max(1, v.size),
                        intensity)
        free_set = led.free_set
        free = tuple(h for x, h in self.names.items() if x in free_set)
        taken = {self.names[x]: o.job.id for o in led.running.values() for x in o.nodes}
        donors = tuple(self._donors(fs.job_id))
        out = decide_storage(state, self.pool, free, taken, donors, now, self.m.rule)
        if self.m.trace:
            self.report.calls.append(FsCall(now, state, self.pool, free, taken, donors, tuple(out)))
        for d in out:
            self._carry_out(fs, d, now)

    def _donors(self, job_id: int) -> list[Donor]:
        """Running malleable jobs (not ``job_id``) the ledger may resize now (a job with phases only at one of
        its scheduling points, which a sample never falls on) and whose newest host runs no data server (it would
        not be free once given)."""
        led = self.ledger
        serving = self._serving()
        return [Donor(v.job.id, self.names[v.nodes[-1]], v.size, max(v.job.min_procs, 1),
                      host_loss(led.speedup, v.job, v.size))
                for v in led.running.values()
                if v.job.id != job_id and v.job.kind is JobKind.MALLEABLE and v.nodes
                and (not v.job.phases or v.job.id in led.points) and v.nodes[-1] not in serving]

    def _carry_out(self, fs: _Fs, d: FsDecision, now: float) -> None:
        if d.kind == "keep":
            return
        fs.rep.decisions[d.kind] = fs.rep.decisions.get(d.kind, 0) + 1
        if d.kind == "add":
            fs.change = ("add", fs.next_sid, d.host, now + self.m.add_cost)
            fs.next_sid += 1
            fs.reclaiming = ""
            x = self.node[d.host]
            if x in self.ledger.free_set and x not in self.held:
                self.ledger.node_down(x, math.inf)
                self.held[x] = fs.job_id
        elif d.kind == "remove":
            fs.change = ("remove", d.sid, d.host, now + self.m.remove_cost)
        elif d.kind == "reclaim":
            v = self.ledger.running[d.donor]
            done = self.ledger.apply([ResizeJob(d.donor, tuple(v.nodes[:-1]))], now, False, self.effect)
            if done.rejected or done.deferred:
                log.debug("t=%g: job %d cannot give %s: %s", now, d.donor, d.host, [*done.rejected, *done.deferred])
                return
            fs.reclaiming, fs.last_change, fs.since = d.host, now, 0
            fs.rep.taken_back += 1
            self._decide(fs, now)        # released at once in the simulator: the server goes there now
            if fs.reclaiming:            # not taken (cannot happen with the checks above): do not wait for it
                log.warning("t=%g: job %d: host %s taken back but not used", now, fs.job_id, d.host)
                fs.reclaiming = ""
