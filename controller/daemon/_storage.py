"""Storage in the live core: the burst buffer as a scheduled resource and each job's own file system.

A job submitted with ``--bb SIZE`` holds ``SIZE`` bytes of the controller's burst buffer (the sum of what the data
servers of the storage hosts may hold) for its run: the ledger refuses to start it beyond the free buffer, so the
burst-buffer policies run live as they run in the simulator, and a job that does not fit waits with the reason
``BurstBuffer``. When its hosts are granted and clean, the core asks the shell for a file system
(:class:`~._events.StartFs`: a metadata server on the job's first host, data servers on its storage hosts) and
launches the job only once the file system answers with every stage-in file in it (:class:`~._events.FsReady`).
After the job ends (whatever its state) the shell copies the stage-out files back, stops the servers and checks
that none is left (:class:`~._events.StopFs`, answered by :class:`~._events.FsStopped`); until then the job's
buffer stays held. A failed start or stage-in fails the job (:class:`~._events.FsFailed`).

While the job runs, its file system grows and shrinks with it: the shell measures the achieved I/O rate every few
seconds (:class:`~._events.FsSample`); the pure storage policy (:mod:`~malleable.controller.sched._fspolicy`, in the
scheduling core beside the other policies, so the simulator runs it too) compares it with the rate the
job asked for (``--io-rate``) within ``--fs-min``/``--fs-max`` and picks the host; the core asks the shell to add
or remove one data server (:class:`~._events.ScaleFs`, answered by :class:`~._events.FsScaled`), or orders a
malleable job to give back a host for a later server. The file system's servers and its last decisions are kept
in ``JobRec.fs`` (``servers``, ``samples``, ``decisions``), which ``malleable info`` shows.

Plain functions over the :class:`~._core.Core` they are given, as :mod:`._pass` and :mod:`._link` are; the
record of the file system is a :class:`~._fsrecord.JobFs` in ``JobRec.fs`` (its phases: :class:`~._fsrecord.FsPhase`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from malleable.controller.sched._fspolicy import Donor, FsDecision, FsState, StorageRule, decide_storage, host_loss
from malleable.controller.sched._speedup import declared
from malleable.errors import Refusal

from . import _protocol as P
from ._link import intensity_of
from ._events import (
    AttachFs,
    FsAttached,
    FsFailed,
    FsFault,
    FsProgress,
    FsReady,
    FsSample,
    FsScaled,
    FsStopped,
    ScaleFs,
    StartFs,
    StopFs,
)
from ._fsrecord import RESTOP, FsNote, FsPhase, JobFs, StagedFile
from ._records import JobRec, JobState

if TYPE_CHECKING:
    from ._core import Core

__all__ = ["HANDLERS", "RULE", "attached", "check_submit", "ended", "failed", "fault", "forget", "host_checked",
           "lent_hosts", "progress", "ready", "ready_to_launch", "reasons", "reload", "sampled", "scaled", "stopped", "submitted"]

log = logging.getLogger(__name__)


class StoppingFs(NamedTuple):
    """A file system being stopped (after its job's run, or started for a job that no longer waits for it), with
    its job's record; its buffer stays held in the ledger until :class:`FsStopped`."""

    job: JobRec
    fs: JobFs

WAIT_REASON = "BurstBuffer"
"""The pending reason of a job whose burst buffer does not fit in what is free now."""


RULE = StorageRule()
"""The storage policy's parameters (tolerance, window, cool-down)."""
KEEP_SAMPLES = 12           # AIO samples kept per file system (the window is the last RULE.k of them)
KEEP_DECISIONS = 8          # decisions kept per file system for ``malleable info``
RECLAIM_WAIT = 120.0        # seconds a host being taken back is waited for before the policy decides afresh


def submitted(m: P.Submit) -> dict:
    """The storage fields of a new job record from its submit request."""
    servers = m.fs_servers or (1 if m.bb else 0)
    return {"bb": m.bb, "fs_servers": m.fs_servers, "fs_min": m.fs_min or servers, "fs_max": m.fs_max or servers,
            "io_rate": m.io_rate, "stage_in": [list(P.parse_stage(x, "in")) for x in m.stage_in],
            "stage_out": [list(P.parse_stage(x, "out")) for x in m.stage_out], "fs_replicas": m.fs_replicas}


def check_submit(core: Core, m: P.Submit) -> None:
    """Refuse a request for more burst buffer than the controller has (nothing is changed)."""
    if not m.bb:
        return
    total = core.ledger.bb_total
    if not total:
        raise Refusal("this controller has no burst buffer (start it with --bb-capacity SIZE)")
    if m.bb > total:
        raise Refusal(f"--bb {P.format_size(m.bb)} is more than the controller's whole burst buffer "
                      f"({P.format_size(total)} on {len(core.storage)} storage host(s))")


def reload(core: Core, j: JobRec) -> JobRec:
    """A job record read back at a restart (see :func:`_restop` for the file systems that were being started or
    stopped). The ready file system of a launched job is taken over: the shell is asked to check that it still
    answers (:class:`AttachFs`), and it is staged out and stopped when the job ends, as if there had been no
    restart (its address and hosts are in the record, its secret and its servers' tag are derived again)."""
    fs = j.fs
    if fs.old is not None:                      # back in the queue while its last file system was being stopped
        _restop(core, j, fs.old)
    elif JobState(j.state).final or (not j.launched and fs.phase in (FsPhase.STARTING, FsPhase.READY)):
        _restop(core, j, fs)
    elif j.launched and fs.phase == FsPhase.READY:
        fs.scaling, fs.taken_over = "", True    # a change in flight was lost; none until it answers (attached)
        core.ledger.withhold(h for h in fs.lent if h in core.ledger.free_set)
        core.emit(AttachFs(j.id, fs.address, tuple(fs.servers)))
    return j


def _restop(core: Core, j: JobRec, fs: JobFs) -> None:
    """At a restart, a file system the lost shell was starting for a job not launched yet, or staging out and
    stopping after the job ended, is stopped again: :class:`StopFs` to every host recorded (the shell kills the
    servers by their tag there even when the metadata server does not answer, or its address was not known yet),
    after the stage-out files not copied yet (a copy is written to a temporary name and renamed, so redoing one
    is safe). Its buffer stays held until :class:`FsStopped`; a job not launched yet gets a new file system."""
    phase = fs.phase
    if not j.bb or phase not in RESTOP:
        return
    out: tuple[tuple[str, str], ...] = ()
    if phase == FsPhase.STAGING_OUT:
        done = {(x.src, x.dst) for x in fs.stage_out if not x.error}
        out = tuple((s, d) for s, d in j.stage_out if (s, d) not in done)
        fs.stage_out = [x for x in fs.stage_out if not x.error]     # failed copies are tried again
    if not JobState(j.state).final:
        fs = fs.copy_as(FsPhase.ABANDONED)
        j.fs = JobFs(old=fs)
    fs.restarted = phase                        # shown by ``malleable info --json``; the stop is logged as usual
    core.fs_old[j.id] = StoppingFs(j, fs)
    core.ledger.hold_bb(j.id, j.bb, after_run=True)
    log.info("job %d: the controller restarted while its file system was %s: %d file(s) left to stage out, then "
             "its servers are stopped", j.id, phase, len(out))
    core.emit(StopFs(j.id, fs.address, fs.hosts(), out))


def fs_hosts(core: Core, j: JobRec) -> tuple[str, tuple[str, ...]]:
    """Where the job's servers go: the metadata server on its first host, the data servers on its hosts that are
    storage hosts (node-local, like GekkoFS), else on the storage hosts, in turn."""
    mine = [h for h in j.hosts if h in core.storage] or list(core.storage)
    n = j.fs_servers or 1
    return j.hosts[0], tuple(mine[i % len(mine)] for i in range(n))


def ready_to_launch(core: Core, j: JobRec, now: float) -> bool:
    """Whether a job with a burst buffer whose hosts are clean can be launched now; asks for its file system the
    first time (the launch then waits for :class:`FsReady`)."""
    if j.id in core.fs_old:                       # an earlier file system of this job is still being stopped
        return False
    phase = j.fs.phase
    if phase == FsPhase.READY:
        return True
    if phase != FsPhase.NONE:
        return False
    meta, data = fs_hosts(core, j)
    stage_in = tuple((s, d) for s, d in j.stage_in)
    j.fs = JobFs(FsPhase.STARTING, meta, list(data))
    j.reason = "StageIn" if stage_in else ""
    core.save(j)
    core.log_event(j.id, "fs-start", f"file system of {P.format_size(j.bb)}: metadata server on {meta}, "
                   f"{len(data)} data server(s) on {','.join(data)}, {len(stage_in)} file(s) to stage in", now)
    core.emit(StartFs(j.id, meta, data, math.ceil(j.bb / len(data)), stage_in, j.fs_replicas or 1))
    return False


def _stop(core: Core, j: JobRec, now: float, stage_out: bool) -> None:
    """Ask the shell to stop the job's file system (after its stage-out) and keep its buffer held until then."""
    fs = j.fs
    out = tuple((s, d) for s, d in j.stage_out) if stage_out else ()
    fs.phase = FsPhase.STAGING_OUT if out else FsPhase.STOPPING
    core.fs_old[j.id] = StoppingFs(j, fs)
    core.ledger.hold_bb(j.id, j.bb, after_run=True)
    core.log_event(j.id, "fs-stop", f"{len(out)} file(s) to stage out, then the servers stop", now)
    core.emit(StopFs(j.id, fs.address, fs.hosts(), out))


def forget(core: Core, j: JobRec, now: float) -> None:
    """The job goes back to the queue or ends before it was launched: a file system being started for it is
    stopped once it answers (its buffer stays held until then), and the next start makes a new one."""
    if j.fs.phase == FsPhase.STARTING:
        j.fs.phase = FsPhase.ABANDONED
        core.fs_old[j.id] = StoppingFs(j, j.fs)
        core.ledger.hold_bb(j.id, j.bb, after_run=True)
    elif j.fs.phase == FsPhase.READY:
        _stop(core, j, now, stage_out=False)
    if not JobState(j.state).final:
        _keep_old(core, j)


def _keep_old(core: Core, j: JobRec) -> None:
    """A job back in the queue keeps the file system being stopped for it in its record (``fs.old``, until
    :class:`FsStopped`), so that a restart in between stops it again; its next start makes a new one."""
    old = core.fs_old.get(j.id)
    j.fs = JobFs(old=j.fs) if old is not None and old.fs is j.fs else JobFs()
    core.save(j)


def ended(core: Core, j: JobRec, now: float) -> None:
    """The job's processes ended (or could not start): stage out (only when it ended for good), stop the servers."""
    if j.bb and j.fs.phase == FsPhase.READY:
        _stop(core, j, now, stage_out=JobState(j.state).final)
        core.save(j)
    if not JobState(j.state).final:
        _keep_old(core, j)


def ready(core: Core, e: FsReady) -> None:
    j = core.jobs.get(e.job_id)
    if j is None or j.state != JobState.STARTING or j.fs.phase != FsPhase.STARTING:
        old = core.fs_old.get(e.job_id)
        fs = old.fs if old else JobFs()
        core.log_event(e.job_id, "fs-stop", "file system ready for a job that no longer waits for it: stopping it",
                       e.now)
        core.emit(StopFs(e.job_id, e.address, fs.hosts(), ()))
        return
    j.fs.phase, j.fs.address = FsPhase.READY, e.address
    j.reason = ""
    core.save(j)
    core.log_event(j.id, "fs-ready", f"file system at {e.address}", e.now)
    core.launch_ready(e.now)


def _record(core: Core, job_id: int) -> tuple[JobRec | None, JobFs]:
    """The job's record and the file system an event is about (an ended job's, or the current one)."""
    old = core.fs_old.get(job_id)
    if old is not None:
        return old.job, old.fs
    j = core.jobs.get(job_id)
    return j, (j.fs if j is not None else JobFs())


def progress(core: Core, e: FsProgress) -> None:
    j, fs = _record(core, e.job_id)
    if j is None or fs.empty:
        return
    (fs.stage_in if e.direction == "in" else fs.stage_out).append(StagedFile(e.src, e.dst, e.size, e.error))
    if j.fs is fs:
        core.save(j)
    what = f"failed: {e.error}" if e.error else f"{e.size} bytes"
    core.log_event(j.id, f"stage-{e.direction}", f"{e.src} -> {e.dst}: {what}"[:300], e.now)


def failed(core: Core, e: FsFailed) -> None:
    j = core.jobs.get(e.job_id)
    if j is None or j.fs.phase != FsPhase.STARTING:
        _release(core, e.job_id)
        return
    j.fs.phase, j.fs.error = FsPhase.FAILED, e.reason[:500]
    core.drain_all(j, e.now)
    core.finish(j, JobState.FAILED, None, e.now, f"file system: {e.reason}"[:500])
    core.launch_ready(e.now)


def _release(core: Core, job_id: int) -> StoppingFs | None:
    """The buffer an ended file system held is free again."""
    old = core.fs_old.pop(job_id, None)
    if old is not None:
        core.ledger.release_bb(job_id, after_run=True)
    return old


def stopped(core: Core, e: FsStopped) -> None:
    old = _release(core, e.job_id)
    if old is not None:
        j, fs = old
        _give_back(core, j, fs.lent, e.now, fs)
        fs.phase, fs.left, fs.error = FsPhase.STOPPED, list(e.left), e.errors[:500] or fs.error
        if j.fs.old is fs:                         # an ended job keeps it for ``info``; a queued one starts anew
            j.fs = fs if JobState(j.state).final else JobFs()
            core.save(j)
        elif j.fs is fs:
            core.save(j)
    text = "servers stopped; no server process left" if not e.left else \
        f"servers stopped; processes left on {','.join(e.left)} were killed"
    core.log_event(e.job_id, "fs-stopped", text + (f" ({e.errors})" if e.errors else ""), e.now)
    core.launch_ready(e.now)


def reasons(core: Core) -> None:
    """After a pass: a pending job whose buffer does not fit in what is free waits for the burst buffer."""
    free = core.ledger.bb_total - core.ledger.bb_used
    for j in core.queue():
        if j.bb > free + 1e-9 and j.reason in ("Priority", "Resources"):
            j.reason = WAIT_REASON
            core.save(j)
        elif j.reason == WAIT_REASON and j.bb <= free + 1e-9:
            j.reason = "Priority"
            core.save(j)


# -- growing and shrinking with the job ------------------------------------------------------------------------
def _donors(core: Core, j: JobRec) -> list[Donor]:
    """Running malleable jobs (not ``j``) whose newest host is a storage host, with no order in flight, and what
    each would lose by giving it (its declared or measured speedup model)."""
    out = []
    for o in core.jobs.values():
        if (o.id != j.id and o.malleable and o.state == JobState.RUNNING and o.registered and not o.order
                and not o.cancel and o.hosts and o.hosts[-1] in core.storage):
            n = len(o.hosts)
            out.append(Donor(o.id, o.hosts[-1], n, o.min_nodes, host_loss(declared, core.to_job(o), n)))
    return out


def _state(core: Core, j: JobRec, now: float) -> FsState:
    fs = j.fs
    since = now if fs.reclaim_since is None else fs.reclaim_since
    if fs.reclaiming and now - since > RECLAIM_WAIT:
        core.log_event(j.id, "fs-reclaim", f"{fs.reclaiming} was not released in {RECLAIM_WAIT:g} s; "
                       "deciding afresh", now)
        fs.reclaiming = ""
        serving = {h for _, h in fs.servers}
        _give_back(core, j, [h for h in fs.lent if h not in serving], now)
    return FsState(j.id, tuple(fs.servers), j.fs_min or 1, j.fs_max or 1, j.io_rate, tuple(fs.samples), fs.since,
                   fs.last_change, tuple(j.hosts), fs.reclaiming, max(1, len(j.hosts)), _intensity(j))


def _intensity(j: JobRec) -> float:
    """The share of its time the job spends in I/O, for the price of a host taken back: measured by its runtime,
    else declared (``--io-intensity``), else 1 (a job that asks for an I/O rate is taken to wait for its I/O)."""
    measured = intensity_of(j.progress)
    if measured is not None:
        return measured
    return j.io_intensity if j.io_intensity > 0 else 1.0


def sampled(core: Core, e: FsSample) -> None:
    """A new measurement of a running job's file system: record it, run the storage policy, act on its decision."""
    j = core.jobs.get(e.job_id)
    if j is None or j.state != JobState.RUNNING or j.fs.phase != FsPhase.READY:
        return
    fs = j.fs
    fs.servers = [(sid, h) for sid, h in e.servers]
    fs.data = [h for _, h in e.servers]
    fs.aio = e.aio
    if e.aio is not None:
        fs.samples = [*fs.samples, e.aio][-KEEP_SAMPLES:]
        fs.since = (fs.since or 0) + 1
    if not (fs.scaling or fs.taken_over):       # a file system taken over at a restart keeps its servers
        _decide(core, j, e.now)
    core.save(j)


def _decide(core: Core, j: JobRec, now: float) -> None:
    """Run the storage policy on the job's file system as it is now and carry out its decision."""
    lent = lent_hosts(core)
    free = [h for h in core.storage if core.hosts[h].free and lent.get(h, j.id) == j.id]
    taken = {h: o for h in core.storage if (o := core.hosts[h].owner) is not None}
    for d in decide_storage(_state(core, j, now), core.storage, free, taken, _donors(core, j), now, RULE):
        _carry_out(core, j, d, now)


def _note(j: JobRec, d: FsDecision, now: float) -> None:
    """Keep the decision for ``malleable info`` (a keep replaces an earlier keep: only changes pile up)."""
    rec = FsNote(now, d.kind, d.host, d.sid, d.reason[:300])
    out = j.fs.decisions
    if d.kind == "keep" and out and out[-1].kind == "keep":
        out[-1] = rec
    else:
        out.append(rec)
    del out[:-KEEP_DECISIONS]


def _carry_out(core: Core, j: JobRec, d: FsDecision, now: float) -> None:
    fs = j.fs
    _note(j, d, now)
    if d.kind == "add":
        fs.scaling, fs.reclaiming, fs.used = "add", "", list(dict.fromkeys([*fs.used, d.host]))
        core.log_event(j.id, "fs-grow", f"one data server more on {d.host}: {d.reason}"[:300], now)
        core.emit(ScaleFs(j.id, fs.address, "add", d.host, 0, math.ceil(j.bb / (j.fs_servers or 1))))
    elif d.kind == "remove":
        fs.scaling = "remove"
        core.log_event(j.id, "fs-shrink", f"data server {d.sid} on {d.host} leaves: {d.reason}"[:300], now)
        core.emit(ScaleFs(j.id, fs.address, "remove", d.host, d.sid))
    elif d.kind == "reclaim":
        _reclaim(core, j, d, now)


def _reclaim(core: Core, j: JobRec, d: FsDecision, now: float) -> None:
    """Order the donor to give its newest host, through the ledger's decision path (as a pass's shrink)."""
    from malleable.controller.sched._model import ResizeJob

    from . import _pass

    donor = core.jobs[d.donor]
    _pass.refresh_busy(core, now)
    done = core.ledger.apply([ResizeJob(donor.id, tuple(donor.hosts[:-1]))], now, strict=False,
                             sink=lambda ef: _pass.effect(core, ef, now))
    if done.rejected or done.deferred:
        why = "; ".join(w for _, w in [*done.rejected, *done.deferred])
        core.log_event(j.id, "fs-reclaim", f"job {donor.id} cannot give {d.host} now: {why}"[:300], now)
        return
    fs = j.fs
    fs.reclaiming, fs.reclaim_since, fs.last_change, fs.since = d.host, now, now, 0
    core.log_event(j.id, "fs-reclaim", f"job {donor.id} gives {d.host} for a data server: {d.reason}"[:300], now)


def host_checked(core: Core, host: str, now: float) -> None:
    """A host was checked empty after its job left it: free for every policy, unless a file system took it back
    from that job for a data server; then it stays out of the policies' free hosts (withheld in the ledger) and is
    lent to that file system until its server there leaves or the file system stops."""
    core.ledger.clean(host)
    for j in core.jobs.values():
        if j.state == JobState.RUNNING and j.fs.phase == FsPhase.READY and j.fs.reclaiming == host:
            core.ledger.withhold([host])
            j.fs.lent = sorted({*j.fs.lent, host})
            core.log_event(j.id, "fs-reclaim", f"{host} was released; kept for a data server of this file system",
                           now)
            if not j.fs.scaling:
                _decide(core, j, now)                  # its server is started now, not at the next sample
            core.save(j)
            return


def lent_hosts(core: Core) -> dict[str, int]:
    """The hosts lent to job file systems, each with the job whose file system holds it."""
    return {h: o.id for o in core.jobs.values() for h in o.fs.lent}


def _give_back(core: Core, j: JobRec, hosts: list[str], now: float, fs: JobFs | None = None) -> None:
    """Hosts lent to a file system go back to the policies' free hosts."""
    fs = j.fs if fs is None else fs
    back = [h for h in hosts if h in fs.lent]
    if not back:
        return
    fs.lent = [h for h in fs.lent if h not in back]
    core.ledger.unwithhold(back)
    core.log_event(j.id, "fs-lent", f"{','.join(back)} no longer serve this file system; free for compute jobs",
                   now)


def scaled(core: Core, e: FsScaled) -> None:
    """A server was added or removed (or not): the file system's hosts follow, the rule's cool-down starts."""
    j = core.jobs.get(e.job_id)
    if j is None or j.fs.empty:
        return
    fs = j.fs
    fs.scaling = ""
    if e.error:
        core.log_event(j.id, f"fs-{'grow' if e.kind == 'add' else 'shrink'}", f"failed: {e.error}"[:300], e.now)
    elif e.kind == "add":
        fs.servers = [*fs.servers, (e.sid, e.host)]
        fs.data = [*fs.data, e.host]
        core.log_event(j.id, "fs-grown", f"data server {e.sid} on {e.host} serves new blocks", e.now)
    else:
        fs.servers = [s for s in fs.servers if s[0] != e.sid]
        fs.data = [h for _, h in fs.servers]
        core.log_event(j.id, "fs-shrunk", f"data server {e.sid} on {e.host} left; its blocks moved to the others",
                       e.now)
    if not e.error:
        fs.used = list(dict.fromkeys([*fs.used, e.host]))
    if e.host in fs.lent and (e.kind == "remove") != bool(e.error):
        _give_back(core, j, [e.host], e.now)
    fs.last_change, fs.since = e.now, 0
    core.save(j)


# -- restarts and faults --------------------------------------------------------------------------------------
def attached(core: Core, e: FsAttached) -> None:
    """The shell checked a file system taken over at a restart: it answers (the job goes on with it) or not (a
    fault the job's own I/O will meet; it is still staged out and stopped when the job ends)."""
    j = core.jobs.get(e.job_id)
    if j is None or j.fs.empty:
        return
    address = j.fs.address
    if e.error:
        j.fs.error = f"not answering after a restart: {e.error}"[:500]
        core.log_event(j.id, "fs-fault", f"file system at {address} does not answer after the restart: "
                       f"{e.error}"[:300], e.now)
    else:
        j.fs.taken_over = False            # the shell can change it again: it grows and shrinks as before
        core.log_event(j.id, "fs-attach", f"file system at {address} re-attached after a restart", e.now)
    core.save(j)


def fault(core: Core, e: FsFault) -> None:
    """Data servers of a running job's file system stopped answering: recorded and shown (``malleable info``); the
    job's reads and writes of their blocks fail with the file system's error, and the stop after the job still
    looks for every server's process."""
    j = core.jobs.get(e.job_id)
    if j is None or j.fs.empty:
        return
    fs = j.fs
    fs.lost = sorted({*fs.lost, *e.sids})
    fs.error = e.text[:500]
    fs.used = list(dict.fromkeys([*fs.used, *e.hosts]))          # searched for leftovers at the stop
    core.log_event(j.id, "fs-fault", e.text[:300], e.now)
    core.save(j)


HANDLERS: dict[type, Callable[[Core, Any], None]] = {
    FsReady: ready, FsProgress: progress, FsFailed: failed, FsStopped: stopped, FsSample: sampled, FsScaled: scaled,
    FsAttached: attached, FsFault: fault}
"""The core's handler of each file-system event (entries of its one table of handlers)."""
