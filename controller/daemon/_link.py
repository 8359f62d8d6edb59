"""The live core's handlers of a malleable job's runtime link: register, poll for an order, acknowledge (commit
or refuse) it, report progress. Plain functions over the :class:`~._core.Core` they are given."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import TYPE_CHECKING, Any

from malleable.controller.sched._model import RunningJob, SizeRequest
from malleable.errors import PolicyError, Refusal, UnknownJob

from . import _protocol as P
from ._events import AddStep, Reply
from ._records import JobRec, JobState

if TYPE_CHECKING:
    from ._core import Core

__all__ = ["IO_PHASE", "committed", "declined", "fraction", "intensity_of", "job_intensity", "mtct_of", "poll",
           "progress", "refused", "register", "request", "serial_of", "suspend"]

IO_PHASE = "io"
"""The progress phase of the I/O a job measured (``malleable.runtime.io_phase``): its I/O intensity."""


def linked(core: Core, job_id: int) -> JobRec:
    j = core.jobs.get(job_id)
    if j is None or j.state != JobState.RUNNING or not j.malleable:
        raise UnknownJob(f"no running malleable job {job_id}")
    return j


def register(core: Core, m: P.Register, now: float) -> None:
    j = linked(core, m.job_id)
    j.registered, j.link_pid = True, m.pid
    core.save(j)
    core.log_event(j.id, "register", f"rank 0 pid {m.pid} on {m.host}, {m.size} processes on "
                f"{','.join(sorted(set(m.hosts)))}", now)
    core.emit(Reply(P.Ok()))


def poll(core: Core, m: P.Poll, now: float) -> None:
    j = linked(core, m.job_id)
    if not j.registered:
        j.registered = True
        core.save(j)
    if j.paused in ("pause", "resume"):          # a suspend or resume asked since the last poll
        reply: P.Message = P.Pause() if j.paused == "pause" else P.Resume()
        j.paused = "paused" if j.paused == "pause" else ""
        core.save(j)
        core.log_event(j.id, "suspend" if j.paused else "resume", "told the job at its safe point", now)
        core.emit(Reply(reply))
        return
    why = core.declined.pop(j.id, None)
    if why is not None:
        core.emit(Reply(P.Declined(why)))
        return
    o = j.order
    if not o or (o.kind == "expand" and not core.hosts_clean(o.added)):
        core.emit(Reply(P.Ok()))
        return
    if not o.sent:
        j.order = dataclasses.replace(o, sent=now)
        core.save(j)
    core.emit(Reply(P.Order(o.seq, o.procs, list(o.added))))


def committed(core: Core, m: P.Committed, now: float) -> None:
    j = linked(core, m.job_id)
    o = j.order
    if o is None or o.seq != m.seq:
        if m.seq <= j.seq and (o is None or m.seq < o.seq):
            core.emit(Reply(P.Ok()))     # a retransmission of an acknowledged order
            return
        raise Refusal(f"job {j.id} has no order {m.seq}")
    j.hosts = list(o.target)
    j.order, j.unresponsive, j.since = None, False, now
    core.save(j)
    if o.kind == "shrink":
        for name in o.removed:
            if core.hosts[name].drain == j.id:
                core.set_host(name, drain_since=now)
    core.emit(AddStep(j.id, now, o.kind, tuple(j.hosts), o.decided, m.seconds))
    unfreed = sorted(set(o.removed) - set(m.freed))
    note = f"; runtime did not report {','.join(unfreed)} freed" if unfreed else ""
    core.log_event(j.id, o.kind, f"{m.old_size} -> {m.new_size} processes on {len(j.hosts)} hosts in "
                f"{m.seconds:.3f} s (decided {now - o.decided:.3f} s ago){note}", now)
    core.emit(Reply(P.Ok()))
    core.launch_ready(now)


def refused(core: Core, m: P.Refused, now: float) -> None:
    j = linked(core, m.job_id)
    o = j.order
    if o is None or o.seq != m.seq:
        raise Refusal(f"job {j.id} has no order {m.seq}")
    if o.kind == "expand":
        for name in o.added:    # a failed spawn may have left something behind: check before reuse
            core.set_host(name, owner=None, drain=j.id, drain_since=now)
    else:
        for name in o.removed:
            other = core.hosts[name].owner
            if other is not None and other != j.id:
                unstart(core, core.jobs[other], now)
            core.set_host(name, owner=j.id, drain=None, drain_since=0.0)
    v = core.ledger.view(j.id)
    if v is not None:
        since, done, end, resizes = o.prev
        core.ledger.revert(j.id, RunningJob(v.job, tuple(j.hosts), len(j.hosts), v.start, since, done, end,
                                            resizes, v.mtct))
    j.order, j.unresponsive = None, False
    core.keep_view(j)
    core.save(j)
    core.backoff[j.id] = now + core.config.refuse_backoff
    core.log_event(j.id, "refused", f"order {m.seq} ({o.kind} to {o.procs}): {m.reason[:300]}", now)
    core.emit(Reply(P.Ok()))
    core.launch_ready(now)


def unstart(core: Core, j: JobRec, now: float) -> None:
    """Put a job that was waiting for hosts back in the queue (its hosts are not coming)."""
    for name in j.hosts:
        if core.hosts[name].owner == j.id:
            core.set_host(name, owner=None)
    core.ledger.unstart(j.id)
    j.state, j.hosts, j.reason, j.view = JobState.PENDING, [], "Resources", None
    core.save(j)
    core.log_event(j.id, "unstart", "a host it was waiting for stays with its job; back in the queue", now)


def progress(core: Core, m: P.Progress, now: float) -> None:
    """Keep the job's last report of the phase; the policy's view takes its progress, MTCT, measured Amdahl
    fraction and I/O intensity from them. A rigid job under the controller may report too (its I/O)."""
    j = core.jobs.get(m.job_id)
    if j is None or j.state != JobState.RUNNING:
        raise UnknownJob(f"no running job {m.job_id}")
    if len(json.dumps(m.data)) > 4096:
        raise Refusal("progress data larger than 4096 bytes")
    if m.phase == IO_PHASE:
        _check_io(m.data)
    j.progress[m.phase[:64]] = m.data
    frac = fraction(m.data)
    if frac is not None:
        core.reported[j.id] = frac
    core.ledger.annotate(j.id, mtct_of(j.progress), serial_of(j.progress), intensity_of(j.progress))
    core.save(j)
    core.emit(Reply(P.Ok()))


def request(core: Core, m: P.ResizeRequest, now: float) -> None:
    """The application asks for a size (``request_adapt``): kept for the policy (``Snapshot.requests``), or
    declined at once when no allowed size answers it; the answer reaches the job at a later poll."""
    j = linked(core, m.job_id)
    if min(m.procs, m.min_procs, m.max_procs) < 0 or not (m.procs or m.min_procs or m.max_procs) or \
            (m.min_procs and m.max_procs and m.min_procs > m.max_procs) or (m.procs and (m.min_procs or m.max_procs)):
        raise Refusal("a size request is procs, or min and/or max with min <= max (all >= 0)")
    text = f"{m.procs}" if m.procs else f"{m.min_procs or 1}..{m.max_procs or 'any'}"
    try:
        core.ledger.ask(j.id, SizeRequest(m.procs, m.min_procs, m.max_procs, now))
    except PolicyError as e:
        core.declined[j.id] = str(e)
        core.log_event(j.id, "request", f"asks for {text} nodes: declined: {e}", now)
    else:
        core.declined.pop(j.id, None)
        core.log_event(j.id, "request", f"asks for {text} nodes", now)
    core.emit(Reply(P.Ok()))


def declined(core: Core, job_id: int, reason: str, now: float) -> None:
    """The policy declined the job's request (the ``decline`` effect): told at its next poll."""
    if job_id in core.jobs:
        core.declined[job_id] = reason
        core.log_event(job_id, "request", f"declined by the policy: {reason}", now)


def suspend(core: Core, m: P.Suspend, now: float) -> None:
    """Pause a running malleable job at its next safe point (its hosts stay its own), or resume it."""
    j = core.jobs.get(m.job_id)
    if j is None or j.state != JobState.RUNNING or not j.malleable or not j.registered:
        raise Refusal(f"job {m.job_id} is not a running malleable job (only those pause at a safe point)")
    if m.resume:
        if j.paused in ("", "resume"):
            raise Refusal(f"job {j.id} is not suspended")
        j.paused = "" if j.paused == "pause" else "resume"
    else:
        if j.paused in ("pause", "paused"):
            raise Refusal(f"job {j.id} is already suspended")
        j.paused = "paused" if j.paused == "resume" else "pause"
    core.save(j)
    core.log_event(j.id, "resume" if m.resume else "suspend", "requested", now)
    core.emit(Reply(P.Ok()))


def mtct_of(progress: dict[str, Any]) -> float | None:
    """The MTCT of the job's last reported elastic phase (other phases do not scale with the size)."""
    vals = [v.get("mtct") for v in progress.values() if isinstance(v, dict) and v.get("kind", "elastic") == "elastic"]
    vals = [float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return vals[-1] if vals else None


def serial_of(progress: dict[str, Any]) -> float | None:
    """The Amdahl serial fraction the runtime fitted to the job's measured iteration times (its last elastic
    phase that reports one), or None."""
    vals = [v.get("serial_fraction") for v in progress.values() if isinstance(v, dict)]
    vals = [float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0]
    return vals[-1] if vals else None


def _check_io(data: dict[str, Any]) -> None:
    """Refuse an I/O report whose ``io_seconds`` and ``seconds`` are not finite numbers >= 0 (``bytes``, if
    there, an integer >= 0)."""
    for key in ("io_seconds", "seconds", "bytes"):
        v = data.get(key)
        if key == "bytes" and v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0 or \
                (key == "bytes" and not isinstance(v, int)):
            raise Refusal(f"progress {IO_PHASE!r}: {key} must be a {'count' if key == 'bytes' else 'number'} >= 0, "
                          f"got {str(v)[:32]!r}")


def intensity_of(progress: dict[str, Any]) -> float | None:
    """The I/O intensity the job measured (``io_seconds / seconds`` of its ``"io"`` report, at most 1), or None
    before a report with time in it."""
    d = progress.get(IO_PHASE)
    if not isinstance(d, dict):
        return None
    io, total = d.get("io_seconds"), d.get("seconds")
    if isinstance(io, bool) or isinstance(total, bool) or not isinstance(io, int | float) or \
            not isinstance(total, int | float) or not total > 0:
        return None
    return min(1.0, max(0.0, io / total))


def job_intensity(j: JobRec) -> tuple[tuple[int, float], ...]:
    """``Job.intensity`` of a job: the measured I/O intensity, else the declared one, at every size."""
    i = intensity_of(j.progress)
    i = j.io_intensity if i is None else i
    return ((max(1, j.nodes), i),) if i > 0 else ()


def fraction(data: dict[str, Any]) -> float | None:
    """The job's progress (fraction of its work done) in a report: ``fraction``, or ``(first + iterations) /
    total`` of an elastic phase."""
    f = data.get("fraction")
    if f is None and data.get("total"):
        f = (data.get("first", 0) + data.get("iterations", 0)) / data["total"]
    if isinstance(f, (int, float)) and not isinstance(f, bool) and 0.0 <= f <= 1.0:
        return float(f)
    return None
