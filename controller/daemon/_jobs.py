"""A job's life in the live core: submitted (or refused), started once its hosts are clean (and its file system
is ready), stopped (cancel, time limit, interruption: SIGTERM, then SIGKILL after the kill wait), ended, or put
back in the queue; and what its hosts go through meanwhile.

Host life cycle: free -> held by a job (``owner``) -> when the job ends, is interrupted or releases the host,
*draining* (``drain`` = the job whose processes may still be there) until the daemon has checked that no process
of that job is left -> free. A host released in a pass may be granted in the same pass; the new job is launched
once all its hosts are clean. An interrupted job is *held* out of the queue the policies see until its processes
are gone and its hosts checked.
"""

from __future__ import annotations

import dataclasses

from malleable.controller.sched._ledger import Ledger
from malleable.controller.sched._speedup import speedup_params
from malleable.errors import Refusal, UnknownJob

from . import _protocol as P
from ._access import secret_looking
from ._events import AddStep, JobExited, JobLaunched, Kill, Launch, LaunchFailed, Relaunch, Reply, Stop, Tick
from ._records import JobRec, JobState
from ._state import CoreConfig, CoreState, Outbox, Part, to_job
from ._storage import Storage, submitted

__all__ = ["CONSTRAINTS", "Jobs"]

CONSTRAINTS = ("", "pof2", "even", "odd")
SIGTERM, SIGKILL = 15, 9    # the signals that stop a job (numbers as exit codes report them; Linux values)
KILL_REPEAT = 5.0
"""Seconds between SIGKILLs of a job whose processes are still there after the first one."""


class Jobs(Part):
    """Submit, cancel, launch, stop, end and re-queue jobs.

    Args:
        storage: the file systems of jobs with a burst buffer (checked at submit, started before the launch,
            stopped after the run).
    """

    def __init__(self, state: CoreState, ledger: Ledger, out: Outbox, config: CoreConfig, storage: Storage) -> None:
        super().__init__(state, ledger, out, config)
        self.storage = storage

    # -- requests --------------------------------------------------------------------------------------------
    def submit(self, m: P.Submit, now: float) -> None:
        st = self.state
        n_hosts = len(st.pool)
        lo, hi, pref = (m.min_nodes, m.max_nodes, m.nodes) if m.malleable else (m.nodes, m.nodes, m.nodes)
        if pref < 1 or lo < 1:
            raise Refusal("a job needs at least 1 node")
        if not lo <= pref <= hi:
            raise Refusal(f"node counts must satisfy min <= preferred <= max, got {lo} <= {pref} <= {hi}")
        if lo > n_hosts or (not m.malleable and pref > n_hosts):
            raise Refusal(f"job asks for {lo if m.malleable else pref} node(s) but the controller has only "
                          f"{n_hosts}")
        speedup, constraint = m.speedup, m.constraint           # "": not declared (linear)
        try:
            speedup_params(speedup)
        except ValueError as e:
            raise Refusal(str(e)) from None
        if constraint not in CONSTRAINTS:
            raise Refusal(f"unknown node constraint {constraint!r}; known: pof2, even, odd")
        if not 0.0 <= m.io_intensity <= 1.0:
            raise Refusal(f"--io-intensity must be between 0 and 1, got {m.io_intensity:g}")
        self.storage.check_submit(m)
        hi = min(hi, n_hosts)
        pref = min(pref, hi)
        limit = 0.0 if m.unlimited else (m.time_limit or self.config.default_time)    # 0: no limit
        env = {k: v for k, v in m.env.items() if not secret_looking(k)}
        dropped = sorted(set(m.env) - set(env))
        jid = st.next_id
        st.next_id += 1
        j = JobRec(jid, m.name or m.cmd[0].rsplit("/", 1)[-1], list(m.cmd), pref, lo, hi, m.malleable, limit,
                   m.out.replace("%j", str(jid)), m.err.replace("%j", str(jid)), m.cwd, env, now,
                   reason="Priority", speedup=speedup, constraint=constraint, user=m.user,
                   io_intensity=m.io_intensity, **submitted(m))
        self.ledger.submit(to_job(j))
        self.out.save(j)
        self.out.log_event(jid, "submit", f"{'malleable' if m.malleable else 'rigid'} {lo}..{hi} pref {pref} nodes, "
                           f"limit {f'{limit:g} s' if limit else 'UNLIMITED'}, speedup {speedup or 'linear'}, user "
                           f"{m.user or '-'}{f', burst buffer {P.format_size(m.bb)}' if m.bb else ''}: "
                           f"{' '.join(m.cmd)[:200]}", now)
        if dropped:
            self.out.log_event(jid, "env", "not stored or passed on (secret-looking names): "
                               f"{', '.join(dropped)[:300]}", now)
        self.out.emit(Reply(P.Submitted(jid)))

    def cancel(self, m: P.Cancel, now: float) -> None:
        st = self.state
        j = st.jobs.get(m.job_id)
        if j is None:
            if m.job_id in st.ended:
                raise Refusal(f"job {m.job_id} already ended ({st.ended[m.job_id]})")
            raise UnknownJob(f"no job {m.job_id}")
        self.out.log_event(j.id, "cancel", "cancel requested", now)
        if j.state == JobState.PENDING or (j.state == JobState.STARTING and not j.launched):
            self.forget_unlaunched(j, now)
            self.finish(j, JobState.CANCELLED, None, now, "cancelled before it started")
        else:
            j.cancel = True
            self.stop(j, now, "cancelled")
        self.out.emit(Reply(P.Ok()))

    # -- the shell's answers -------------------------------------------------------------------------------
    def launched(self, e: JobLaunched) -> None:
        j = self.state.active(e.job_id)
        j.pid, j.pid_ctime = e.pid, e.ctime
        self.out.save(j)

    def launch_failed(self, e: LaunchFailed) -> None:
        j = self.state.active(e.job_id)
        self.drain_all(j, e.now)
        self.finish(j, JobState.FAILED, None, e.now, f"launch failed: {e.reason}")
        self.storage.ended(j, e.now)

    def relaunch(self, e: Relaunch) -> None:
        j = self.state.active(e.job_id)
        j.launched, j.state = False, JobState.STARTING
        self.out.save(j)
        self.out.log_event(j.id, "recover", "never started before the controller stopped; starting it now", e.now)
        self.launch_ready(e.now)

    def exited(self, e: JobExited) -> None:
        j = self.state.jobs.get(e.job_id)
        if j is None:
            return
        now = e.now
        if j.stop_at and e.code in (SIGTERM, SIGKILL):
            # mpiexec reports processes killed by signal S as exit code S: after the controller sent S, read it
            # as "killed by S" (sacct's 0:S), as the shell's 128+S would say
            e = dataclasses.replace(e, code=128 + e.code)
        self.drain_all(j, now)
        if j.cancel and j.reason == "TIMEOUT":
            self.finish(j, JobState.TIMEOUT, e.code, now, "time limit reached")
        elif j.cancel:
            self.finish(j, JobState.CANCELLED, e.code, now, "cancelled")
        elif j.reason == "INTERRUPTED":
            self.requeue(j, now)
        elif e.code == 0:
            self.finish(j, JobState.COMPLETED, e.code, now, "exit code 0")
        else:
            why = e.reason or (f"exit code {e.code}" if e.code is not None else "exit code unknown")
            self.finish(j, JobState.FAILED, e.code, now, why)
        self.storage.ended(j, now)
        self.launch_ready(now)

    def tick(self, e: Tick) -> None:
        """Time limits, the kill wait after a SIGTERM, unacknowledged orders, leftovers of ended jobs."""
        now, cfg, out = e.now, self.config, self.out
        for j in list(self.state.jobs.values()):
            if j.state == JobState.RUNNING and not j.cancel and j.time_limit and now > j.start + j.time_limit:
                j.cancel, j.reason = True, "TIMEOUT"
                out.log_event(j.id, "timeout", f"time limit of {j.time_limit:g} s reached", now)
                self.stop(j, now, "time limit")
            if (j.stop_at and j.state == JobState.RUNNING and now >= j.stop_at + cfg.kill_wait
                    and now >= j.killed_at + KILL_REPEAT):
                first = not j.killed_at
                j.killed_at = now
                out.save(j)
                if first:
                    out.log_event(j.id, "kill", f"still running {now - j.stop_at:.0f} s after SIGTERM "
                                  f"(kill wait {cfg.kill_wait:g} s): SIGKILL", now)
                out.emit(Stop(j.id, j.pid, "kill wait over", hard=True))
            o = j.order
            if o and o.sent and not j.unresponsive and now - o.sent > cfg.ack_timeout:
                j.unresponsive = True
                out.save(j)
                out.log_event(j.id, "unresponsive", f"order {o.seq} ({o.kind} to {o.procs}) not acknowledged "
                              f"within {cfg.ack_timeout:g} s; its hosts stay reserved", now)
        for h in self.state.draining():
            jid = h.drain
            assert jid is not None
            d = self.state.jobs.get(jid)
            if (d is None or not d.launched) and now - h.drain_since > cfg.drain_grace:
                out.emit(Kill(jid, h.name))

    # -- what the other parts ask ----------------------------------------------------------------------------
    def stop(self, j: JobRec, now: float, reason: str) -> None:
        """SIGTERM the job's processes now; the tick sends SIGKILL once ``kill_wait`` is over (Slurm's KillWait).
        A job already being stopped keeps its first SIGTERM's time."""
        if not j.stop_at:
            j.stop_at, j.killed_at = now, 0.0
        self.out.save(j)
        self.out.emit(Stop(j.id, j.pid, reason))

    def forget_unlaunched(self, j: JobRec, now: float) -> None:
        """Take a job that never ran out of the ledger (queue or granted hosts) and drop its file system."""
        self.storage.forget(j, now)
        led = self.ledger
        if j.id in led.running:
            led.unstart(j.id)
        if j.id in led.queued:
            led.dequeue(j.id)
        for name in self.state.all_hosts(j):
            if self.state.hosts[name].owner == j.id:
                self.out.set_host(name, owner=None)
        j.hosts = []

    def finish(self, j: JobRec, state: JobState, code: int | None, now: float, reason: str) -> None:
        self.state.held.discard(j.id)
        j.state, j.exit_code, j.end, j.reason, j.order = state, code, now, reason, None
        self.ledger.reservations.pop(j.id, None)
        self.ledger.busy.pop(j.id, None)
        self.state.backoff.pop(j.id, None)
        self.state.reported.pop(j.id, None)
        self.out.save(j)
        self.out.log_event(j.id, "end", f"{state} ({reason})", now)

    def drain_all(self, j: JobRec, now: float) -> None:
        """The job's processes ended: its hosts drain (checked before reuse)."""
        if j.id in self.ledger.running:
            self.ledger.finish(j.id)
        for name, h in self.state.hosts.items():
            if h.owner == j.id:
                self.out.set_host(name, owner=None, drain=j.id, drain_since=now)
            elif h.drain == j.id and h.drain_since == 0:
                self.out.set_host(name, drain_since=now)

    def requeue(self, j: JobRec, now: float) -> None:
        j.state, j.hosts, j.order, j.launched, j.pid, j.registered = JobState.PENDING, [], None, False, 0, False
        j.cancel, j.reason, j.start, j.since, j.view = False, "Requeued", 0.0, 0.0, None
        j.stop_at = j.killed_at = 0.0
        self.state.reported.pop(j.id, None)
        self.state.held.add(j.id)
        self.out.save(j)
        self.out.log_event(j.id, "requeue", f"interrupted; back in the queue with priority {j.priority}", now)
        self.release_held()

    def release_held(self) -> None:
        """Queue again the held jobs whose processes are gone and whose hosts are all checked (or down)."""
        st = self.state
        for jid in sorted(st.held):
            j = st.jobs.get(jid)
            if j is None or j.state != JobState.PENDING:
                continue
            if any(h.drain == jid and not h.down for h in st.hosts.values()):
                continue
            st.held.discard(jid)
            if jid not in self.ledger.queued:
                self.ledger.enqueue(to_job(j))

    def interrupted(self, j: JobRec, priority: int, now: float, why: str, in_pass: bool = True) -> None:
        """The ledger stopped and re-queued job ``j``: stop its processes. Until they are gone and its hosts
        checked clean it is *held*: out of the queue the policies see, from the end of the pass that interrupted
        it (or at once, after a host failure), so a policy first sees it again when it could really restart (SFSJ
        considers a failed job once). A job that never ran is simply queued again."""
        st = self.state
        j.priority = priority
        if not j.launched:
            hosts = st.all_hosts(j)
            self.forget_unlaunched(j, now)
            for name in hosts:                 # it never ran there: hosts without an older job's leftovers
                if st.hosts[name].drain is None:
                    self.ledger.clean(name)
            j.state, j.reason, j.view = JobState.PENDING, "Requeued", None
            self.ledger.enqueue(to_job(j))
            self.out.save(j)
            self.out.log_event(j.id, "requeue", f"{why}; back in the queue with priority {j.priority}", now)
            return
        self.ledger.busy[j.id] = "its processes are being stopped"      # queued, but not started before they end
        st.held.add(j.id)
        if in_pass:
            st.holding.append(j.id)
        else:
            self.ledger.dequeue(j.id, keep_reservation=True)
        for name in st.all_hosts(j):
            h = st.hosts[name]
            if h.owner == j.id:
                self.out.set_host(name, owner=None, drain=j.id, drain_since=0.0)
        j.cancel, j.reason, j.view = False, "INTERRUPTED", None
        self.out.log_event(j.id, "interrupt", f"{why}; stopping it", now)
        self.stop(j, now, "interrupted")

    def unstart(self, j: JobRec, now: float) -> None:
        """Put a job that was waiting for hosts back in the queue (its hosts are not coming)."""
        for name in j.hosts:
            if self.state.hosts[name].owner == j.id:
                self.out.set_host(name, owner=None)
        self.ledger.unstart(j.id)
        j.state, j.hosts, j.reason, j.view = JobState.PENDING, [], "Resources", None
        self.out.save(j)
        self.out.log_event(j.id, "unstart", "a host it was waiting for stays with its job; back in the queue", now)

    def launch_ready(self, now: float) -> None:
        """Launch every job whose hosts are all clean (and whose file system is ready)."""
        for j in list(self.state.jobs.values()):
            if j.state == JobState.STARTING and not j.launched and self.state.hosts_clean(j.hosts):
                if j.bb and not self.storage.ready_to_launch(j, now):
                    continue
                j.launched, j.state, j.start, j.since, j.reason = True, JobState.RUNNING, now, now, ""
                self.out.save(j)
                self.out.emit(AddStep(j.id, now, "start", tuple(j.hosts)))
                self.out.log_event(j.id, "start", f"on {','.join(j.hosts)}", now)
                self.out.emit(Launch(dataclasses.replace(j, hosts=list(j.hosts))))
