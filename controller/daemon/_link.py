"""The live core's handlers of a job's runtime link: register, poll for an order, acknowledge (commit or refuse)
it, report progress, ask for a size, suspend and resume."""

from __future__ import annotations

import dataclasses
import json

from malleable.controller.sched._ledger import Ledger
from malleable.controller.sched._model import RunningJob, SizeRequest
from malleable.errors import PolicyError, Refusal, UnknownJob

from . import _protocol as P
from ._events import AddStep, Reply
from ._jobs import Jobs
from ._mountplan import MountPlan
from ._records import JobRec, JobState
from ._reports import IO_PHASE, check_io, fraction, intensity_of, mtct_of, serial_of
from ._state import CoreConfig, CoreState, Outbox, Part, host_list

__all__ = ["Link"]


class Link(Part):
    """The requests of a job's runtime (and the policy's answer to its size requests).

    Args:
        jobs: the job life cycle (a refused order may put a job waiting for its hosts back in the queue; an
            acknowledged one may let another job start).
        mounts: the job mounts (an expansion's order waits for the mount on its added hosts).
    """

    def __init__(self, state: CoreState, ledger: Ledger, out: Outbox, config: CoreConfig, jobs: Jobs,
                 mounts: MountPlan) -> None:
        super().__init__(state, ledger, out, config)
        self.jobs = jobs
        self.mounts = mounts

    def linked(self, job_id: int) -> JobRec:
        j = self.state.jobs.get(job_id)
        if j is None or j.state != JobState.RUNNING or not j.malleable:
            raise UnknownJob(f"no running malleable job {job_id}")
        return j

    def register(self, m: P.Register, now: float) -> None:
        j = self.linked(m.job_id)
        j.registered, j.link_pid = True, m.pid
        self.out.save(j)
        self.out.log_event(j.id, "register", f"rank 0 pid {m.pid} on {m.host}, {m.size} processes on "
                           f"{host_list(m.hosts)}", now)
        self.out.emit(Reply(P.Ok()))

    def poll(self, m: P.Poll, now: float) -> None:
        j = self.linked(m.job_id)
        if not j.registered:
            j.registered = True
            self.out.save(j)
        if j.paused in ("pause", "resume"):          # a suspend or resume asked since the last poll
            reply: P.Message = P.Pause() if j.paused == "pause" else P.Resume()
            j.paused = "paused" if j.paused == "pause" else ""
            self.out.save(j)
            self.out.log_event(j.id, "suspend" if j.paused else "resume", "told the job at its safe point", now)
            self.out.emit(Reply(reply))
            return
        why = self.state.declined.pop(j.id, None)
        if why is not None:
            self.out.emit(Reply(P.Declined(why)))
            return
        o = j.order
        if not o or (o.kind == "expand" and not (self.state.hosts_clean(o.added) and self.mounts.order_ready(j))):
            self.out.emit(Reply(P.Ok()))
            return
        if not o.sent:
            j.order = dataclasses.replace(o, sent=now)
            self.out.save(j)
        self.out.emit(Reply(P.Order(o.seq, o.procs, list(o.added))))

    def committed(self, m: P.Committed, now: float) -> None:
        j = self.linked(m.job_id)
        o = j.order
        if o is None or o.seq != m.seq:
            if m.seq <= j.seq and (o is None or m.seq < o.seq):
                self.out.emit(Reply(P.Ok()))     # a retransmission of an acknowledged order
                return
            raise Refusal(f"job {j.id} has no order {m.seq}")
        j.hosts = list(o.target)
        j.order, j.unresponsive, j.since = None, False, now
        self.out.save(j)
        if o.kind == "shrink":
            for name in o.removed:
                if self.state.hosts[name].drain == j.id:
                    self.out.set_host(name, drain_since=now)
        self.out.emit(AddStep(j.id, now, o.kind, tuple(j.hosts), o.decided, m.seconds))
        unfreed = sorted(set(o.removed) - set(m.freed))
        note = f"; runtime did not report {host_list(unfreed)} freed" if unfreed else ""
        self.out.log_event(j.id, o.kind, f"{m.old_size} -> {m.new_size} processes on {len(j.hosts)} hosts in "
                           f"{m.seconds:.3f} s (decided {now - o.decided:.3f} s ago){note}", now)
        self.out.emit(Reply(P.Ok()))
        self.jobs.launch_ready(now)

    def refused(self, m: P.Refused, now: float) -> None:
        j = self.linked(m.job_id)
        o = j.order
        if o is None or o.seq != m.seq:
            raise Refusal(f"job {j.id} has no order {m.seq}")
        if o.kind == "expand":
            for name in o.added:    # a failed spawn may have left something behind: check before reuse
                self.out.set_host(name, owner=None, drain=j.id, drain_since=now)
        else:
            for name in o.removed:
                other = self.state.hosts[name].owner
                if other is not None and other != j.id:
                    self.jobs.unstart(self.state.jobs[other], now)
                self.out.set_host(name, owner=j.id, drain=None, drain_since=0.0)
        v = self.ledger.view(j.id)
        if v is not None:
            since, done, end, resizes = o.prev
            self.ledger.revert(j.id, RunningJob(v.job, tuple(j.hosts), len(j.hosts), v.start, since, done, end,
                                                resizes, v.mtct))
        j.order, j.unresponsive = None, False
        self.keep_view(j)
        self.out.save(j)
        self.state.backoff[j.id] = now + self.config.refuse_backoff
        self.out.log_event(j.id, "refused", f"order {m.seq} ({o.kind} to {o.procs}): {m.reason[:300]}", now)
        self.out.emit(Reply(P.Ok()))
        self.jobs.launch_ready(now)

    def progress(self, m: P.Progress, now: float) -> None:
        """Keep the job's last report of the phase; the policy's view takes its progress, MTCT, measured Amdahl
        fraction and I/O intensity from them. A rigid job under the controller may report too (its I/O)."""
        j = self.state.jobs.get(m.job_id)
        if j is None or j.state != JobState.RUNNING:
            raise UnknownJob(f"no running job {m.job_id}")
        if len(json.dumps(m.data)) > 4096:
            raise Refusal("progress data larger than 4096 bytes")
        if m.phase == IO_PHASE:
            check_io(m.data)
        j.progress[m.phase[:64]] = m.data
        frac = fraction(m.data)
        if frac is not None:
            self.state.reported[j.id] = frac
        self.ledger.annotate(j.id, mtct_of(j.progress), serial_of(j.progress), intensity_of(j.progress))
        self.out.save(j)
        self.out.emit(Reply(P.Ok()))

    def request(self, m: P.ResizeRequest, now: float) -> None:
        """The application asks for a size (``request_adapt``): kept for the policy (``Snapshot.requests``), or
        declined at once when no allowed size answers it; the answer reaches the job at a later poll."""
        j = self.linked(m.job_id)
        if min(m.procs, m.min_procs, m.max_procs) < 0 or not (m.procs or m.min_procs or m.max_procs) or \
                (m.min_procs and m.max_procs and m.min_procs > m.max_procs) or \
                (m.procs and (m.min_procs or m.max_procs)):
            raise Refusal("a size request is procs, or min and/or max with min <= max (all >= 0)")
        text = f"{m.procs}" if m.procs else f"{m.min_procs or 1}..{m.max_procs or 'any'}"
        try:
            self.ledger.ask(j.id, SizeRequest(m.procs, m.min_procs, m.max_procs, now))
        except PolicyError as e:
            self.state.declined[j.id] = str(e)
            self.out.log_event(j.id, "request", f"asks for {text} nodes: declined: {e}", now)
        else:
            self.state.declined.pop(j.id, None)
            self.out.log_event(j.id, "request", f"asks for {text} nodes", now)
        self.out.emit(Reply(P.Ok()))

    def declined(self, job_id: int, reason: str, now: float) -> None:
        """The policy declined the job's request (the ``decline`` effect): told at its next poll."""
        if job_id in self.state.jobs:
            self.state.declined[job_id] = reason
            self.out.log_event(job_id, "request", f"declined by the policy: {reason}", now)

    def suspend(self, m: P.Suspend, now: float) -> None:
        """Pause a running malleable job at its next safe point (its hosts stay its own), or resume it."""
        j = self.state.jobs.get(m.job_id)
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
        self.out.save(j)
        self.out.log_event(j.id, "resume" if m.resume else "suspend", "requested", now)
        self.out.emit(Reply(P.Ok()))
