"""Storage in the live core: the burst buffer as a scheduled resource and the life of each job's own file system.

A job submitted with ``--bb SIZE`` holds ``SIZE`` bytes of the controller's burst buffer (the sum of what the data
servers of the storage hosts may hold) for its run: the ledger refuses to start it beyond the free buffer, so the
burst-buffer policies run live as they run in the simulator, and a job that does not fit waits with the reason
``BurstBuffer``. When its hosts are granted and clean, the core asks the shell for a file system
(:class:`~._events.StartFs`: a metadata server on the job's first host, data servers on its storage hosts) and
launches the job only once the file system answers with every stage-in file in it (:class:`~._events.FsReady`).
After the job ends (whatever its state) the shell copies the stage-out files back, stops the servers and checks
that none is left (:class:`~._events.StopFs`, answered by :class:`~._events.FsStopped`); until then the job's
buffer stays held (:meth:`Ledger.hold_bb <malleable.controller.sched.Ledger.hold_bb>` ``after_run``). A failed
start or stage-in fails the job (:class:`~._events.FsFailed`).

Staging is *decided* here and *carried out* by the shell (:mod:`._fsshell`): what is copied in, and when, in
:meth:`Storage.ready_to_launch` (the ``stage_in`` of :class:`~._events.StartFs`); what is copied out, and when, in
:meth:`Storage.ended` and :meth:`Storage.forget` (the ``stage_out`` of :class:`~._events.StopFs`, only after a job
ended for good) and, after a restart, in ``_restop`` (the files not copied yet). Each copy the shell makes is
recorded by :meth:`Storage.progress` (``FsProgress``).

The record of a file system is a :class:`~._fsrecord.JobFs` in ``JobRec.fs`` (its phases:
:class:`~._fsrecord.FsPhase`); once it is no longer the job's current one it is listed in
:attr:`CoreState.stopping <._state.CoreState.stopping>` until it stopped. How a running file system grows and
shrinks with its job is :mod:`._fsscale`.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from malleable.controller.sched._stagein import plan_stage_in
from malleable.errors import Refusal

from . import _protocol as P
from ._events import (
    AbortFs,
    AttachFs,
    FsAttached,
    FsFailed,
    FsFault,
    FsHeld,
    FsProgress,
    FsReady,
    FsStopped,
    Reply,
    StartFs,
    StopFs,
)
from ._fsrecord import RESTOP, FsPhase, JobFs, StagedFile
from ._fsrequest import StageOutAgain
from ._records import JobRec, JobState
from ._state import Part, StoppingFs, host_list

__all__ = ["HELD_REASON", "STAGE_REASON", "WAIT_REASON", "Storage", "submitted"]

log = logging.getLogger(__name__)

WAIT_REASON = "BurstBufferResources"
"""The pending reason of a job whose burst buffer does not fit in what is free now (Slurm's)."""

STAGE_REASON = "BurstBufferStageIn"
"""The reason of a job whose files are being staged in (Slurm's): before its start (early) or on its hosts."""

HELD_REASON = "StageOutFailed"
"""The reason of an ended job whose stage-out failed (shown beside its own exit code until a retry succeeds)."""


def _who(j: JobRec, mounts: bool = False, fs: JobFs | None = None) -> dict[str, Any]:
    """The identity and time bound of a job's staging: its submitting user's uid and gid (the daemon's own for a
    record from before jobs had a user), its time limit (0: none), and, when the controller ``mounts`` job file
    systems, its hosts and those where its file system ``fs`` (default: its current one) was mounted."""
    limit = j.time_limit if j.time_limit and math.isfinite(j.time_limit) and j.time_limit > 0 else 0.0
    uid, gid = j.acting_ids
    fs = fs if fs is not None else j.fs
    where = tuple(dict.fromkeys([*j.hosts, *fs.mounted, *fs.mounting])) if mounts else ()
    return {"uid": uid, "gid": gid, "limit": float(limit), "mount_hosts": where}


def submitted(m: P.Submit) -> dict[str, Any]:
    """The storage fields of a new job record from its submit request."""
    servers = m.fs_servers or (1 if m.bb else 0)
    return {"bb": m.bb, "fs_servers": m.fs_servers, "fs_min": m.fs_min or servers, "fs_max": m.fs_max or servers,
            "io_rate": m.io_rate, "stage_in": [list(P.parse_stage(x, "in")) for x in m.stage_in],
            "stage_out": [list(P.parse_stage(x, "out")) for x in m.stage_out], "fs_replicas": m.fs_replicas}


class Storage(Part):
    """The burst buffer and the life of job file systems: what the job life cycle asks of it (a check at submit,
    a file system before the launch, the stop after the run), the shell's answers, and the restart."""

    # -- asked by the job life cycle --------------------------------------------------------------------------
    def check_submit(self, m: P.Submit) -> None:
        """Refuse a request for more burst buffer than the controller has (nothing is changed)."""
        if not m.bb:
            return
        total = self.ledger.bb_total
        if not total:
            raise Refusal("this controller has no burst buffer (start it with --bb-capacity SIZE)")
        if m.bb > total:
            raise Refusal(f"--bb {P.format_size(m.bb)} is more than the controller's whole burst buffer "
                          f"({P.format_size(total)} on {len(self.state.storage)} storage host(s))")
        hosts, per = len(self.state.storage), self.config.fs_per_host
        for option, n in (("--fs-servers", m.fs_servers), ("--fs-max", m.fs_max)):
            if n > hosts * per:
                raise Refusal(f"{option} {n} is more than this controller runs for one job: {hosts} storage "
                              f"host(s) x {per} data server(s) per host (controller start --fs-per-host) = "
                              f"{hosts * per}")

    def fs_hosts(self, j: JobRec) -> tuple[str, tuple[str, ...]]:
        """Where the job's servers go: the metadata server on its first host, the data servers on its hosts that
        are storage hosts (node-local, like GekkoFS), else on the storage hosts, in turn; for a job still waiting
        (an early stage-in), all on the storage hosts."""
        storage = self.state.storage
        mine = [h for h in j.hosts if h in storage] or list(storage)
        n = j.fs_servers or 1
        return (j.hosts[0] if j.hosts else mine[0]), tuple(mine[i % len(mine)] for i in range(n))

    def ready_to_launch(self, j: JobRec, now: float) -> bool:
        """Whether a job with a burst buffer whose hosts are clean can be launched now; asks for its file system
        (and its stage-in) the first time (the launch then waits for :class:`FsReady`)."""
        if j.id in self.state.stopping:             # an earlier file system of this job is still being stopped
            return False
        phase = j.fs.phase
        if phase == FsPhase.READY:
            return True
        if phase != FsPhase.NONE:
            return False
        self._start_fs(j, now)
        return False

    def _start_fs(self, j: JobRec, now: float, early: bool = False) -> None:
        """Ask the shell for the job's file system and its stage-in."""
        meta, data = self.fs_hosts(j)
        stage_in = tuple((s, d) for s, d in j.stage_in)
        j.fs = JobFs(FsPhase.STARTING, meta, list(data))
        j.reason = STAGE_REASON if stage_in else ""
        self.out.save(j)
        self.out.log_event(j.id, "fs-start", f"file system of {P.format_size(j.bb)}: metadata server on {meta}, "
                           f"{len(data)} data server(s) on {host_list(data)}, {len(stage_in)} file(s) to stage in"
                           + (" while the job waits (early stage-in)" if early else ""), now)
        self.out.emit(StartFs(j.id, meta, data, math.ceil(j.bb / len(data)), stage_in, j.fs_replicas or 1,
                              **_who(j, self.config.mounts)))

    def stage_early(self, now: float) -> None:
        """After a pass: queued jobs whose start the policy planned begin their stage-in on the storage hosts while
        they wait, their buffer held early (:func:`~malleable.controller.sched._stagein.plan_stage_in`)."""
        st, led = self.state, self.ledger
        wants = {j.id for j in st.queue() if j.bb and j.stage_in and j.fs.empty and j.id in led.queued
                 and j.id not in st.stopping}
        if not wants:
            return
        plan = plan_stage_in(led.snapshot(now), wants, led.bb_total - led.bb_used)
        for jid in plan.begin:
            j = st.jobs[jid]
            led.hold_bb(jid, j.bb, early=True)
            self._start_fs(j, now, early=True)
        for jid in plan.wait:
            j = st.jobs[jid]
            if j.reason != WAIT_REASON:
                j.reason = WAIT_REASON
                self.out.save(j)

    def forget(self, j: JobRec, now: float) -> None:
        """The job goes back to the queue or ends before it was launched: a file system being started for it is
        stopped once it answers (its buffer stays held until then), and the next start makes a new one."""
        if j.fs.phase == FsPhase.STARTING:
            j.fs.phase = FsPhase.ABANDONED
            self._hold(j, j.fs)
            self.out.emit(AbortFs(j.id))             # its stage-in stops; the start then fails and is stopped
        elif j.fs.phase == FsPhase.READY:
            self._stop(j, now, stage_out=False)
        if not JobState(j.state).final:
            self._keep_old(j)

    def ended(self, j: JobRec, now: float) -> None:
        """The job's processes ended (or could not start): stage out (only when it ended for good), stop the
        servers."""
        if j.bb and j.fs.phase == FsPhase.READY:
            self._stop(j, now, stage_out=JobState(j.state).final)
            self.out.save(j)
        if not JobState(j.state).final:
            self._keep_old(j)

    def reasons(self) -> None:
        """After a pass: a pending job whose buffer does not fit in what is free waits for the burst buffer; one
        whose early stage-in runs says so, and once its data is in place it waits for its hosts."""
        free = self.ledger.bb_total - self.ledger.bb_used
        for j in self.state.queue():
            if self.ledger.early_bb(j.id):
                why = STAGE_REASON if j.fs.phase == FsPhase.STARTING else "Resources"
                if j.reason != why:
                    j.reason = why
                    self.out.save(j)
            elif j.bb > free + 1e-9 and j.reason in ("Priority", "Resources"):
                j.reason = WAIT_REASON
                self.out.save(j)
            elif j.reason == WAIT_REASON and j.bb <= free + 1e-9:
                j.reason = "Priority"
                self.out.save(j)

    def _hold(self, j: JobRec, fs: JobFs) -> None:
        """``fs`` is no longer the job's to use: listed as being stopped, its buffer held until it stopped."""
        self.state.stopping[j.id] = StoppingFs(j, fs)
        self.ledger.hold_bb(j.id, j.bb, after_run=True)

    def _stop(self, j: JobRec, now: float, stage_out: bool) -> None:
        """Ask the shell to stop the job's file system (after its stage-out) and keep its buffer held until
        then."""
        fs = j.fs
        out = tuple((s, d) for s, d in j.stage_out) if stage_out else ()
        fs.phase = FsPhase.STAGING_OUT if out else FsPhase.STOPPING
        self._hold(j, fs)
        self.out.log_event(j.id, "fs-stop", f"{len(out)} file(s) to stage out, then the servers stop", now)
        self.out.emit(StopFs(j.id, fs.address, fs.hosts(), out, **_who(j, self.config.mounts, fs)))

    def _keep_old(self, j: JobRec) -> None:
        """A job back in the queue keeps the file system being stopped for it in its record (``fs.old``, until
        :class:`FsStopped`), so that a restart in between stops it again; its next start makes a new one."""
        old = self.state.stopping.get(j.id)
        j.fs = JobFs(old=j.fs) if old is not None and old.fs is j.fs else JobFs()
        self.out.save(j)

    # -- the shell's answers ----------------------------------------------------------------------------------
    def ready(self, e: FsReady) -> bool:
        """The file system answers: its job may be launched (True), or nobody waits for it any more: stopped."""
        j = self.state.jobs.get(e.job_id)
        if j is not None and j.state == JobState.PENDING and j.fs.phase == FsPhase.STARTING \
                and self.ledger.early_bb(j.id):                     # an early stage-in is done: the job may start
            j.fs.phase, j.fs.address, j.reason = FsPhase.READY, e.address, "Resources"
            self.out.save(j)
            self.out.log_event(j.id, "fs-ready", f"file system at {e.address}; staged in before the start", e.now)
            return False
        if j is None or j.state != JobState.STARTING or j.fs.phase != FsPhase.STARTING:
            old = self.state.stopping.get(e.job_id)
            fs = old.fs if old else JobFs()
            self.out.log_event(e.job_id, "fs-stop", "file system ready for a job that no longer waits for it: "
                               "stopping it", e.now)
            self.out.emit(StopFs(e.job_id, e.address, fs.hosts(), ()))
            return False
        j.fs.phase, j.fs.address = FsPhase.READY, e.address
        j.reason = ""
        self.out.save(j)
        self.out.log_event(j.id, "fs-ready", f"file system at {e.address}", e.now)
        return True

    def progress(self, e: FsProgress) -> None:
        """One file staged in or out (or not): recorded in its file system's record."""
        j, fs = self._record(e.job_id)
        if j is None or fs.empty:
            return
        (fs.stage_in if e.direction == "in" else fs.stage_out).append(StagedFile(e.src, e.dst, e.size, e.error))
        if j.fs is fs:
            self.out.save(j)
        what = f"failed: {e.error}" if e.error else f"{e.size} bytes"
        self.out.log_event(j.id, f"stage-{e.direction}", f"{e.src} -> {e.dst}: {what}"[:300], e.now)

    def failed(self, e: FsFailed) -> JobRec | None:
        """The file system could not start: the job it was starting for, whose end is the caller's (None: nobody
        waited for it; its buffer is free again)."""
        j = self.state.jobs.get(e.job_id)
        if j is None or j.fs.phase != FsPhase.STARTING:
            self._release(e.job_id)
            return None
        j.fs.phase, j.fs.error = FsPhase.FAILED, e.reason[:500]
        return j

    def stopped(self, e: FsStopped) -> None:
        """The servers are gone: the buffer is free, hosts lent to the file system go back to compute."""
        old = self._release(e.job_id)
        if old is not None:
            j, fs = old
            self.give_back(j, fs.lent, e.now, fs)
            if fs.phase == FsPhase.STAGING_OUT and j.reason.startswith(HELD_REASON):    # a retry succeeded
                j.reason = j.reason[len(HELD_REASON):].lstrip("; ")
                fs.error = ""
            fs.phase, fs.left, fs.error = FsPhase.STOPPED, list(e.left), e.errors[:500] or fs.error
            if j.fs.old is fs:                   # an ended job keeps it for ``info``; a queued one starts anew
                j.fs = fs if JobState(j.state).final else JobFs()
                self.out.save(j)
            elif j.fs is fs:
                self.out.save(j)
        text = "servers stopped; no server process left" if not e.left else \
            f"servers stopped; processes left on {host_list(e.left)} were killed"
        self.out.log_event(e.job_id, "fs-stopped", text + (f" ({e.errors})" if e.errors else ""), e.now)

    def held(self, e: FsHeld) -> None:
        """A stage-out failed: the job shows ``StageOutFailed`` beside its own exit code, its file system (servers
        and data) is kept and its buffer stays held until :meth:`stage_out_again` succeeds or :meth:`release`."""
        old = self.state.stopping.get(e.job_id)
        if old is None:
            return
        j, fs = old
        fs.phase, fs.error = FsPhase.HELD, e.errors[:500]
        if not j.reason.startswith(HELD_REASON):
            j.reason = f"{HELD_REASON}; {j.reason}" if j.reason else HELD_REASON
        self.out.save(j)
        self.out.log_event(j.id, "fs-held", f"stage-out failed: {e.errors}; the file system and its data are kept "
                           f"(malleable fs stage-out --job {j.id} to try again, fs release --job {j.id} to drop it)"
                           [:300], e.now)

    def _held(self, job_id: int, verb: str) -> tuple[JobRec, JobFs]:
        old = self.state.stopping.get(job_id)
        if old is None or old.fs.phase != FsPhase.HELD:
            j = old.job if old is not None else self.state.jobs.get(job_id)
            what = f"its file system is {old.fs.phase}" if old is not None else "it holds no file system" \
                if j is not None or job_id in self.state.ended else "there is no such job"
            raise Refusal(f"fs {verb}: job {job_id} has no failed stage-out to {verb.replace('-', ' ')} ({what})")
        return old.job, old.fs

    def stage_out_again(self, m: StageOutAgain, now: float) -> None:
        """``malleable fs stage-out --job ID``: copy again the files whose stage-out failed; on success the servers
        stop and the buffer is free, else the file system stays held. With ``release``: :meth:`release`."""
        if m.release:
            self.release(m, now)
            return
        j, fs = self._held(m.job_id, "stage-out")
        done = {(x.src, x.dst) for x in fs.stage_out if not x.error}
        out = tuple((s, d) for s, d in j.stage_out if (s, d) not in done)
        fs.stage_out = [x for x in fs.stage_out if not x.error]
        fs.phase = FsPhase.STAGING_OUT
        self.out.save(j)
        self.out.log_event(j.id, "fs-stop", f"stage-out tried again: {len(out)} file(s), then the servers stop", now)
        self.out.emit(StopFs(j.id, fs.address, fs.hosts(), out, **_who(j, self.config.mounts, fs)))
        self.out.emit(Reply(P.Ok()))

    def release(self, m: StageOutAgain, now: float) -> None:
        """``malleable fs release --job ID``: the owner gives up a failed stage-out; the servers stop, the data
        left in the file system is dropped, the buffer is free (the job keeps its ``StageOutFailed`` reason)."""
        j, fs = self._held(m.job_id, "release")
        fs.phase = FsPhase.STOPPING
        self.out.save(j)
        self.out.log_event(j.id, "fs-stop", "released by its owner: the files not staged out are dropped, the "
                           "servers stop", now)
        self.out.emit(StopFs(j.id, fs.address, fs.hosts(), (), **_who(j, self.config.mounts, fs)))
        self.out.emit(Reply(P.Ok()))

    def attached(self, e: FsAttached) -> None:
        """The shell checked a file system taken over at a restart: it answers (the job goes on with it) or not
        (a fault the job's own I/O will meet; it is still staged out and stopped when the job ends)."""
        j = self.state.jobs.get(e.job_id)
        if j is None or j.fs.empty:
            return
        address = j.fs.address
        if e.error:
            j.fs.error = f"not answering after a restart: {e.error}"[:500]
            self.out.log_event(j.id, "fs-fault", f"file system at {address} does not answer after the restart: "
                               f"{e.error}"[:300], e.now)
        else:
            j.fs.taken_over = False        # the shell can change it again: it grows and shrinks as before
            self.out.log_event(j.id, "fs-attach", f"file system at {address} re-attached after a restart", e.now)
        self.out.save(j)

    def fault(self, e: FsFault) -> None:
        """Data servers of a running job's file system stopped answering: recorded and shown (``malleable info``);
        the job's reads and writes of their blocks fail with the file system's error, and the stop after the job
        still looks for every server's process."""
        j = self.state.jobs.get(e.job_id)
        if j is None or j.fs.empty:
            return
        fs = j.fs
        fs.lost = sorted({*fs.lost, *e.sids})
        fs.error = e.text[:500]
        fs.used = list(dict.fromkeys([*fs.used, *e.hosts]))          # searched for leftovers at the stop
        self.out.log_event(j.id, "fs-fault", e.text[:300], e.now)
        self.out.save(j)

    def give_back(self, j: JobRec, hosts: list[str], now: float, fs: JobFs | None = None) -> None:
        """Hosts lent to a file system go back to the policies' free hosts."""
        fs = j.fs if fs is None else fs
        back = [h for h in hosts if h in fs.lent]
        if not back:
            return
        fs.lent = [h for h in fs.lent if h not in back]
        self.ledger.unwithhold(back)
        self.out.log_event(j.id, "fs-lent", f"{host_list(back)} no longer serve this file system; free for compute "
                           "jobs", now)

    def _record(self, job_id: int) -> tuple[JobRec | None, JobFs]:
        """The job's record and the file system an event is about (an ended job's, or the current one)."""
        old = self.state.stopping.get(job_id)
        if old is not None:
            return old.job, old.fs
        j = self.state.jobs.get(job_id)
        return j, (j.fs if j is not None else JobFs())

    def _release(self, job_id: int) -> StoppingFs | None:
        """The buffer an ended file system held is free again."""
        old = self.state.stopping.pop(job_id, None)
        if old is not None:
            self.ledger.release_bb(job_id, after_run=True)
        return old

    # -- restarts ---------------------------------------------------------------------------------------------
    def reload(self, j: JobRec) -> JobRec:
        """A job record read back at a restart (see :meth:`_restop` for the file systems that were being started
        or stopped). The ready file system of a launched job is taken over: the shell is asked to check that it
        still answers (:class:`AttachFs`), and it is staged out and stopped when the job ends, as if there had been
        no restart (its address and hosts are in the record, its secret and its servers' tag are derived again)."""
        fs = j.fs
        if fs.phase == FsPhase.HELD and j.bb:   # a failed stage-out: kept, its buffer held, until retried/released
            self._hold(j, fs)
            return j
        if fs.old is not None:                  # back in the queue while its last file system was being stopped
            self._restop(j, fs.old)
        elif JobState(j.state).final or (not j.launched and fs.phase in (FsPhase.STARTING, FsPhase.READY)):
            self._restop(j, fs)
        elif j.launched and fs.phase == FsPhase.READY:
            fs.scaling, fs.taken_over = "", True    # a change in flight was lost; none until it answers
            fs.mounting = []                        # a mount in flight too: asked again at the job's next poll
            self.ledger.withhold(h for h in fs.lent if h in self.ledger.free_set)
            self.out.emit(AttachFs(j.id, fs.address, tuple(fs.servers)))
        return j

    def _restop(self, j: JobRec, fs: JobFs) -> None:
        """At a restart, a file system the lost shell was starting for a job not launched yet, or staging out and
        stopping after the job ended, is stopped again: :class:`StopFs` to every host recorded (the shell kills the
        servers by their tag there even when the metadata server does not answer, or its address was not known
        yet), after the stage-out files not copied yet (a copy is written to a temporary name and renamed, so
        redoing one is safe). Its buffer stays held until :class:`FsStopped`; a job not launched yet gets a new
        file system."""
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
        fs.restarted = phase                    # shown by ``malleable info --json``; the stop is logged as usual
        self._hold(j, fs)
        log.info("job %d: the controller restarted while its file system was %s: %d file(s) left to stage out, "
                 "then its servers are stopped", j.id, phase, len(out))
        self.out.emit(StopFs(j.id, fs.address, fs.hosts(), out, **_who(j, self.config.mounts, fs)))
