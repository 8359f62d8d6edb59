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

Plain functions over the :class:`~._core.Core` they are given, as :mod:`._pass` and :mod:`._link` are; the
record of the file system lives in ``JobRec.fs`` (``phase``: starting, ready, staging-out, stopped or failed).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from malleable.errors import Refusal

from . import _protocol as P
from ._events import FsFailed, FsProgress, FsReady, FsStopped, JobState, StartFs, StopFs
from ._store import JobRec

if TYPE_CHECKING:
    from ._core import Core

__all__ = ["check_submit", "ended", "failed", "forget", "progress", "ready", "ready_to_launch", "reasons", "reload",
           "stopped"]

WAIT_REASON = "BurstBuffer"
"""The pending reason of a job whose burst buffer does not fit in what is free now."""


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


def reload(j: JobRec) -> JobRec:
    """A job record read back at a restart: a file system that was being started for a job not launched yet is
    not waited for (the shell that started it is gone); the job gets a new one when it is launched."""
    if not j.launched and j.fs.get("phase") in ("starting", "ready"):
        j.fs = {}
    return j


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
    phase = j.fs.get("phase", "")
    if phase == "ready":
        return True
    if phase:
        return False
    meta, data = fs_hosts(core, j)
    stage_in = tuple((s, d) for s, d in j.stage_in)
    j.fs = {"phase": "starting", "meta": meta, "data": list(data), "address": "", "stage_in": [], "stage_out": [],
            "error": ""}
    j.reason = "StageIn" if stage_in else ""
    core.save(j)
    core.log_event(j.id, "fs-start", f"file system of {P.format_size(j.bb)}: metadata server on {meta}, "
                   f"{len(data)} data server(s) on {','.join(data)}, {len(stage_in)} file(s) to stage in", now)
    core.emit(StartFs(j.id, meta, data, math.ceil(j.bb / len(data)), stage_in))
    return False


def _hosts_of(fs: dict) -> tuple[str, ...]:
    return tuple(dict.fromkeys([fs.get("meta", ""), *fs.get("data", [])]))


def _stop(core: Core, j: JobRec, now: float, stage_out: bool) -> None:
    """Ask the shell to stop the job's file system (after its stage-out) and keep its buffer held until then."""
    fs = j.fs
    out = tuple((s, d) for s, d in j.stage_out) if stage_out else ()
    fs["phase"] = "staging-out" if out else "stopping"
    core.fs_old[j.id] = (j, j.bb, fs)
    core.ledger.bb_used += j.bb
    core.log_event(j.id, "fs-stop", f"{len(out)} file(s) to stage out, then the servers stop", now)
    core.emit(StopFs(j.id, fs["address"], _hosts_of(fs), out))


def forget(core: Core, j: JobRec, now: float) -> None:
    """The job goes back to the queue or ends before it was launched: a file system being started for it is
    stopped once it answers (its buffer stays held until then), and the next start makes a new one."""
    if j.fs.get("phase") == "starting":
        j.fs["phase"] = "abandoned"
        core.fs_old[j.id] = (j, j.bb, j.fs)
        core.ledger.bb_used += j.bb
    elif j.fs.get("phase") == "ready":
        _stop(core, j, now, stage_out=False)
    if not JobState(j.state).final:
        j.fs = {}


def ended(core: Core, j: JobRec, now: float) -> None:
    """The job's processes ended (or could not start): stage out (only when it ended for good), stop the servers."""
    if j.bb and j.fs.get("phase") == "ready":
        _stop(core, j, now, stage_out=JobState(j.state).final)
        core.save(j)
    if not JobState(j.state).final:
        j.fs = {}


def ready(core: Core, e: FsReady) -> None:
    j = core.jobs.get(e.job_id)
    if j is None or j.state != JobState.STARTING or j.fs.get("phase") != "starting":
        old = core.fs_old.get(e.job_id)
        fs = old[2] if old else {}
        core.log_event(e.job_id, "fs-stop", "file system ready for a job that no longer waits for it: stopping it",
                       e.now)
        core.emit(StopFs(e.job_id, e.address, _hosts_of(fs), ()))
        return
    j.fs.update(phase="ready", address=e.address)
    j.reason = ""
    core.save(j)
    core.log_event(j.id, "fs-ready", f"file system at {e.address}", e.now)
    core.launch_ready(e.now)


def _record(core: Core, job_id: int) -> tuple[JobRec | None, dict]:
    """The job's record and the file system an event is about (an ended job's, or the current one)."""
    old = core.fs_old.get(job_id)
    if old is not None:
        return old[0], old[2]
    j = core.jobs.get(job_id)
    return j, (j.fs if j is not None else {})


def progress(core: Core, e: FsProgress) -> None:
    j, fs = _record(core, e.job_id)
    if j is None or not fs:
        return
    fs.setdefault(f"stage_{e.direction}", []).append([e.src, e.dst, e.size, e.error])
    if j.fs is fs:
        core.save(j)
    what = f"failed: {e.error}" if e.error else f"{e.size} bytes"
    core.log_event(j.id, f"stage-{e.direction}", f"{e.src} -> {e.dst}: {what}"[:300], e.now)


def failed(core: Core, e: FsFailed) -> None:
    j = core.jobs.get(e.job_id)
    if j is None or j.fs.get("phase") != "starting":
        _release(core, e.job_id)
        return
    j.fs.update(phase="failed", error=e.reason[:500])
    core.drain_all(j, e.now)
    core.finish(j, JobState.FAILED, None, e.now, f"file system: {e.reason}"[:500])
    core.launch_ready(e.now)


def _release(core: Core, job_id: int) -> tuple[JobRec, float, dict] | None:
    """The buffer an ended file system held is free again."""
    old = core.fs_old.pop(job_id, None)
    if old is not None:
        core.ledger.bb_used = max(0.0, core.ledger.bb_used - old[1])
    return old


def stopped(core: Core, e: FsStopped) -> None:
    old = _release(core, e.job_id)
    if old is not None:
        j, _, fs = old
        fs.update(phase="stopped", left=list(e.left), error=e.errors[:500] or fs.get("error", ""))
        if j.fs is fs:
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
