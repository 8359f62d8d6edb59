"""A running job's file system grows and shrinks with it.

The shell measures the achieved I/O rate every few seconds (:class:`~._events.FsSample`); the pure storage policy
(:mod:`~malleable.controller.sched._fspolicy`, in the scheduling core beside the other policies, so the simulator
runs it too) compares it with the rate the job asked for (``--io-rate``) within ``--fs-min``/``--fs-max`` and picks
the host; the core asks the shell to add or remove one data server (:class:`~._events.ScaleFs`, answered by
:class:`~._events.FsScaled`), or orders a malleable job to give back a host for a later server, through the
scheduling pass's decision path. The file system's servers and its last decisions are kept in its record
(``servers``, ``samples``, ``decisions`` of :class:`~._fsrecord.JobFs`), which ``malleable info`` shows.
"""

from __future__ import annotations

import math

from malleable.controller.sched._fspolicy import Donor, FsDecision, FsState, StorageRule, decide_storage, host_loss
from malleable.controller.sched._ledger import Ledger
from malleable.controller.sched._model import ResizeJob
from malleable.controller.sched._speedup import declared

from ._events import FsSample, FsScaled, ScaleFs
from ._fsrecord import FsNote, FsPhase
from ._pass import Pass
from ._records import JobRec, JobState
from ._reports import intensity_of
from ._state import CoreConfig, CoreState, Outbox, Part, to_job
from ._storage import Storage

__all__ = ["RULE", "FsScaling"]

RULE = StorageRule()
"""The storage policy's parameters (tolerance, window, cool-down)."""
KEEP_SAMPLES = 12           # AIO samples kept per file system (the window is the last RULE.k of them)
KEEP_DECISIONS = 8          # decisions kept per file system for ``malleable info``
RECLAIM_WAIT = 120.0        # seconds a host being taken back is waited for before the policy decides afresh


class FsScaling(Part):
    """The storage policy on each sample of a running file system, and what its decisions do.

    Args:
        storage: gives back hosts lent to a file system.
        decisions: the scheduling pass's decision path (a host is taken back as a pass's shrink).
    """

    def __init__(self, state: CoreState, ledger: Ledger, out: Outbox, config: CoreConfig, storage: Storage,
                 decisions: Pass) -> None:
        super().__init__(state, ledger, out, config)
        self.storage = storage
        self.decisions = decisions

    def sampled(self, e: FsSample) -> None:
        """A new measurement of a running job's file system: record it, run the storage policy, act on its
        decision."""
        j = self.state.jobs.get(e.job_id)
        if j is None or j.state != JobState.RUNNING or j.fs.phase != FsPhase.READY:
            return
        fs = j.fs
        fs.servers = [(sid, h) for sid, h in e.servers]
        fs.data = [h for _, h in e.servers]
        fs.aio = e.aio
        if e.aio is not None:
            fs.samples = [*fs.samples, e.aio][-KEEP_SAMPLES:]
            fs.since = (fs.since or 0) + 1
        if not (fs.scaling or fs.taken_over):   # a file system taken over at a restart keeps its servers
            self._decide(j, e.now)
        self.out.save(j)

    def scaled(self, e: FsScaled) -> None:
        """A server was added or removed (or not): the file system's hosts follow, the rule's cool-down starts."""
        j = self.state.jobs.get(e.job_id)
        if j is None or j.fs.empty:
            return
        fs = j.fs
        fs.scaling = ""
        if e.error:
            self.out.log_event(j.id, f"fs-{'grow' if e.kind == 'add' else 'shrink'}", f"failed: {e.error}"[:300],
                               e.now)
        elif e.kind == "add":
            fs.servers = [*fs.servers, (e.sid, e.host)]
            fs.data = [*fs.data, e.host]
            self.out.log_event(j.id, "fs-grown", f"data server {e.sid} on {e.host} serves new blocks", e.now)
        else:
            fs.servers = [s for s in fs.servers if s[0] != e.sid]
            fs.data = [h for _, h in fs.servers]
            self.out.log_event(j.id, "fs-shrunk", f"data server {e.sid} on {e.host} left; its blocks moved to the "
                               "others", e.now)
        if not e.error:
            fs.used = list(dict.fromkeys([*fs.used, e.host]))
        if e.host in fs.lent and (e.kind == "remove") != bool(e.error):
            self.storage.give_back(j, [e.host], e.now)
        fs.last_change, fs.since = e.now, 0
        self.out.save(j)

    def host_checked(self, host: str, now: float) -> None:
        """A host was checked empty after its job left it: free for every policy, unless a file system took it
        back from that job for a data server; then it stays out of the policies' free hosts (withheld in the
        ledger) and is lent to that file system until its server there leaves or the file system stops."""
        self.ledger.clean(host)
        for j in self.state.jobs.values():
            if j.state == JobState.RUNNING and j.fs.phase == FsPhase.READY and j.fs.reclaiming == host:
                self.ledger.withhold([host])
                j.fs.lent = sorted({*j.fs.lent, host})
                self.out.log_event(j.id, "fs-reclaim", f"{host} was released; kept for a data server of this file "
                                   "system", now)
                if not j.fs.scaling:
                    self._decide(j, now)                  # its server is started now, not at the next sample
                self.out.save(j)
                return

    # -- the policy and its decisions -------------------------------------------------------------------------
    def fs_state(self, j: JobRec, now: float) -> FsState:
        """The job's file system as the storage policy sees it (a host taken back too long ago is given up)."""
        fs = j.fs
        since = now if fs.reclaim_since is None else fs.reclaim_since
        if fs.reclaiming and now - since > RECLAIM_WAIT:
            self.out.log_event(j.id, "fs-reclaim", f"{fs.reclaiming} was not released in {RECLAIM_WAIT:g} s; "
                               "deciding afresh", now)
            fs.reclaiming = ""
            serving = {h for _, h in fs.servers}
            self.storage.give_back(j, [h for h in fs.lent if h not in serving], now)
        return FsState(j.id, tuple(fs.servers), j.fs_min or 1, j.fs_max or 1, j.io_rate, tuple(fs.samples),
                       fs.since, fs.last_change, tuple(j.hosts), fs.reclaiming, max(1, len(j.hosts)),
                       _intensity(j))

    def _decide(self, j: JobRec, now: float) -> None:
        """Run the storage policy on the job's file system as it is now and carry out its decision."""
        st = self.state
        lent = st.lent_hosts()
        free = [h for h in st.storage if st.hosts[h].free and lent.get(h, j.id) == j.id]
        taken = {h: o for h in st.storage if (o := st.hosts[h].owner) is not None}
        for d in decide_storage(self.fs_state(j, now), st.storage, free, taken, self._donors(j), now, RULE):
            self._carry_out(j, d, now)

    def _donors(self, j: JobRec) -> list[Donor]:
        """Running malleable jobs (not ``j``) whose newest host is a storage host, with no order in flight, and
        what each would lose by giving it (its declared or measured speedup model)."""
        out = []
        for o in self.state.jobs.values():
            if (o.id != j.id and o.malleable and o.state == JobState.RUNNING and o.registered and not o.order
                    and not o.cancel and o.hosts and o.hosts[-1] in self.state.storage):
                n = len(o.hosts)
                out.append(Donor(o.id, o.hosts[-1], n, o.min_nodes, host_loss(declared, to_job(o), n)))
        return out

    def _carry_out(self, j: JobRec, d: FsDecision, now: float) -> None:
        fs = j.fs
        _note(j, d, now)
        if d.kind == "add":
            fs.scaling, fs.reclaiming, fs.used = "add", "", list(dict.fromkeys([*fs.used, d.host]))
            self.out.log_event(j.id, "fs-grow", f"one data server more on {d.host}: {d.reason}"[:300], now)
            self.out.emit(ScaleFs(j.id, fs.address, "add", d.host, 0, math.ceil(j.bb / (j.fs_servers or 1))))
        elif d.kind == "remove":
            fs.scaling = "remove"
            self.out.log_event(j.id, "fs-shrink", f"data server {d.sid} on {d.host} leaves: {d.reason}"[:300], now)
            self.out.emit(ScaleFs(j.id, fs.address, "remove", d.host, d.sid))
        elif d.kind == "reclaim":
            self._reclaim(j, d, now)

    def _reclaim(self, j: JobRec, d: FsDecision, now: float) -> None:
        """Order the donor to give its newest host, through the ledger's decision path (as a pass's shrink)."""
        donor = self.state.jobs[d.donor]
        self.decisions.refresh_busy(now)
        done = self.decisions.apply([ResizeJob(donor.id, tuple(donor.hosts[:-1]))], now)
        if done.rejected or done.deferred:
            why = "; ".join(w for _, w in [*done.rejected, *done.deferred])
            self.out.log_event(j.id, "fs-reclaim", f"job {donor.id} cannot give {d.host} now: {why}"[:300], now)
            return
        fs = j.fs
        fs.reclaiming, fs.reclaim_since, fs.last_change, fs.since = d.host, now, now, 0
        self.out.log_event(j.id, "fs-reclaim", f"job {donor.id} gives {d.host} for a data server: {d.reason}"[:300],
                           now)


def _note(j: JobRec, d: FsDecision, now: float) -> None:
    """Keep the decision for ``malleable info`` (a keep replaces an earlier keep: only changes pile up)."""
    rec = FsNote(now, d.kind, d.host, d.sid, d.reason[:300])
    out = j.fs.decisions
    if d.kind == "keep" and out and out[-1].kind == "keep":
        out[-1] = rec
    else:
        out.append(rec)
    del out[:-KEEP_DECISIONS]


def _intensity(j: JobRec) -> float:
    """The share of its time the job spends in I/O, for the price of a host taken back: measured by its runtime,
    else declared (``--io-intensity``), else 1 (a job that asks for an I/O rate is taken to wait for its I/O)."""
    measured = intensity_of(j.progress)
    if measured is not None:
        return measured
    return j.io_intensity if j.io_intensity > 0 else 1.0
