"""The live controller's core: a state machine over jobs, hosts and resize orders, scheduling with the
simulator's policies through the simulator's decision path.

:meth:`Core.handle` takes one event (:mod:`._events`: a wire request, a process starting or ending, a host
checked, failing or coming back, a tick, a scheduling pass) and returns actions: persistence first (job and host
records, size steps, log events), then processes to launch, stop or kill, and the reply to a request. The core
touches no socket, process, file or clock; the daemon carries the actions out, the persistence ones in one
transaction before the others, so a crash between the two loses nothing.

What a policy sees lives in a :class:`~malleable.controller.sched.Ledger`, the same one the simulator keeps:
the snapshot carries each job's declared speedup, progress (from the runtime's reports, else the elapsed share
of its estimate), resizes, estimated end and MTCT, and the hosts that are down; every decision is validated and
applied there, and a bad one is rejected, logged at ERROR with the policy's name and counted (``controller
status``) while the daemon keeps serving.

Host life cycle: free -> held by a job (``owner``) -> when the job ends, is interrupted or releases the host,
*draining* (``drain`` = the job whose processes may still be there) until the daemon has checked that no process
of that job is left -> free. A host released in a pass may be granted in the same pass; the new job is launched
once all its hosts are clean. A shrink always releases the job's newest hosts (the runtime frees its newest
spawn groups), so when a policy names others the core swaps the names for the rest of the pass.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from malleable.controller.sched._ledger import Ledger
from malleable.controller.sched._model import (
    FAILED_PRIORITY,
    Job,
    JobKind,
    RunningJob,
    Snapshot,
)
from malleable.controller.sched._speedup import declared, speedup_params
from malleable.errors import Refusal, UnknownJob

from . import _link, _pass, _storage
from . import _protocol as P
from ._access import authorize, secret_looking, submitter
from ._events import (
    AddEvent,
    AddStep,
    DeleteHost,
    Event,
    HostClean,
    HostDown,
    HostUp,
    JobExited,
    JobLaunched,
    Kill,
    Launch,
    LaunchFailed,
    Relaunch,
    Reply,
    Request,
    SaveHost,
    SaveJob,
    Schedule,
    Stop,
    Tick,
)
from ._link import job_intensity, mtct_of, serial_of
from ._records import HostRec, JobRec, JobState

__all__ = ["Core", "CoreConfig"]

log = logging.getLogger(__name__)

CONSTRAINTS = ("", "pof2", "even", "odd")
UNLIMITED_ESTIMATE = 365 * 86400.0
"""What the policies read as the run time of a job without a time limit (a year: it never ends for planning)."""
SIGTERM, SIGKILL = 15, 9    # the signals that stop a job (numbers as exit codes report them; Linux values)
KILL_REPEAT = 5.0
"""Seconds between SIGKILLs of a job whose processes are still there after the first one."""


@dataclass(frozen=True, slots=True)
class CoreConfig:
    """Settings of the core (the daemon's command line).

    Attributes:
        slots: processes per host.
        ack_timeout: seconds a sent resize order may stay unacknowledged before the job is marked unresponsive
            (its hosts stay reserved until it answers or ends).
        refuse_backoff: seconds without new orders for a job after it refused one.
        drain_grace: seconds after a job's end (or the end of a run that put it back in the queue) before its
            processes still found on a host are killed.
        default_time: time limit of jobs submitted without one (s; 0: unlimited).
        kill_wait: seconds between the SIGTERM that stops a job (cancel, time limit, interruption) and the SIGKILL
            of whatever is left of it (Slurm's KillWait).
        bb_capacity: bytes each storage host's data servers may hold; the burst buffer is their sum.
        storage_hosts: the hosts that may run data servers (empty: every host of the pool).
    """

    slots: int = 1
    ack_timeout: float = 120.0
    refuse_backoff: float = 30.0
    drain_grace: float = 5.0
    default_time: float = 3600.0
    kill_wait: float = 30.0
    bb_capacity: float = 0.0
    storage_hosts: tuple[str, ...] = ()


class Core:
    """Jobs, hosts and orders; mutated only by :meth:`handle`, which returns what the shell must do.

    Args:
        nodes: the host pool (node ids are host names), in allocation order.
        policy: ``decide(snapshot, now) -> list[Decision]``, a simulator policy, used unchanged.
        config: settings.
        hosts, jobs: the records of an earlier run (from the store), re-attached.
        ended: ids and final states of jobs that already ended (to answer a cancel of one).
        policy_name: shown in logs and status.
    """

    def __init__(self, nodes: Sequence[str], policy: Callable[[Snapshot, float], list], config: CoreConfig | None
                 = None, *, hosts: Sequence[HostRec] = (), jobs: Sequence[JobRec] = (),
                 ended: dict[int, str] | None = None, policy_name: str = "") -> None:
        if len(set(nodes)) != len(nodes) or not nodes:
            raise ValueError("the host pool must name distinct hosts")
        self.policy = policy
        self.policy_name = policy_name or getattr(policy, "__name__", type(policy).__name__)
        self.config = config or CoreConfig()
        self.pool: tuple[str, ...] = tuple(nodes)
        self.storage: tuple[str, ...] = tuple(self.config.storage_hosts) or self.pool
        if not set(self.storage) <= set(self.pool) or self.config.bb_capacity < 0:
            raise ValueError("storage hosts must be hosts of the pool and the capacity >= 0")
        self.fs_old: dict[int, _storage.StoppingFs] = {}   # file systems being stopped, by job id
        self.jobs: dict[int, JobRec] = {}
        self.hosts: dict[str, HostRec] = {}
        self.ended: dict[int, str] = dict(ended or {})
        self.wakes: list[float] = []
        self.backoff: dict[int, float] = {}
        self.reported: dict[int, float] = {}      # job id -> progress fraction last reported by its runtime
        self.holding: list[int] = []              # jobs interrupted in the current pass (see _pass.interrupted)
        self.declined: dict[int, str] = {}        # job id -> why its size request was declined (told at its poll)
        self.held: set[int] = set()               # interrupted jobs kept out of the queue until their hosts are clean
        self.passes = 0
        self.policy_errors = 0
        self.last_error = ""
        self._out: list[Any] = []
        self.next_id = max([j.id for j in jobs] + list(self.ended) + [0]) + 1
        self._load(list(nodes), list(hosts), list(jobs))

    # -- the one entry point ---------------------------------------------------------------------------------
    def handle(self, event: Event) -> list[Any]:
        """Apply one event; returns the actions to carry out (persistence first, in order, then the others).

        Raises:
            Refusal: a request the controller will not carry out (nothing changed).
        """
        self._out = []
        _HANDLERS[type(event)](self, event)
        out, self._out = self._out, []
        return out

    def take_actions(self) -> list[Any]:
        """Actions produced outside :meth:`handle` (re-attaching state at construction)."""
        out, self._out = self._out, []
        return out

    # -- loading ---------------------------------------------------------------------------------------------
    def _load(self, nodes: list[str], hosts: list[HostRec], jobs: list[JobRec]) -> None:
        old = {h.name: h for h in hosts}
        for i, name in enumerate(nodes):
            h = old.pop(name, None) or HostRec(name, i)
            h.idx = i
            self.hosts[name] = h
            self.save_host(h)
        for name, h in old.items():             # left the pool: kept only while a job still uses it
            if h.owner is None and h.drain is None:
                self.emit(DeleteHost(name))
            else:
                h.idx = len(self.hosts)
                self.hosts[name] = h
        led = self.ledger = Ledger(tuple(self.hosts), speedup=declared, progress=self._progress_of, order="pool",
                                   bb_total=self.config.bb_capacity * len(self.storage))
        led.track_owner = led.dirty_release = True
        led.withhold(n for n in self.hosts if n not in self.pool)
        for j in jobs:                          # an ended job is read back only to stop its file system again
            if not JobState((j := _storage.reload(self, j)).state).final:
                self.jobs[j.id] = j
        for j in sorted(self.jobs.values(), key=lambda j: j.id):
            if j.state in (JobState.STARTING, JobState.RUNNING) and j.reason != "INTERRUPTED":
                led.restore(None, self._view(j))
        for h in self.hosts.values():
            if h.drain is not None and h.owner is None:
                led.dirty.add(h.name)
            if h.down:
                led.node_down(h.name, math.inf)
        for j in sorted(self.jobs.values(), key=lambda j: (-j.priority, j.id)):
            if j.state == JobState.PENDING:
                if any(h.drain == j.id and not h.down for h in self.hosts.values()):
                    self.held.add(j.id)           # re-queued, its hosts not checked yet
                else:
                    led.submit(self.to_job(j))

    def _view(self, j: JobRec) -> RunningJob:
        start, since, done, end, resizes = (j.view or [j.start, j.since, 0.0, 0.0, 0])
        nodes = tuple(j.order.target if j.order else j.hosts)
        end = end or (start or 0.0) + (j.time_limit or UNLIMITED_ESTIMATE)
        return RunningJob(self.to_job(j), nodes, len(nodes), start, since, done, end, resizes, mtct_of(j.progress))

    def to_job(self, j: JobRec) -> Job:
        serial, rho = speedup_params(j.speedup or "linear")
        measured = serial_of(j.progress)               # the runtime's fit replaces a declared Amdahl fraction
        if measured is not None and not rho:
            serial = measured
        kind = JobKind.MALLEABLE if j.malleable else JobKind.RIGID
        return Job(j.id, j.submit, j.nodes, j.time_limit or UNLIMITED_ESTIMATE, kind, j.min_nodes, j.max_nodes,
                   serial, rho, j.priority, j.constraint, bb=j.bb, intensity=job_intensity(j))  # measured or declared

    def _progress_of(self, v: RunningJob, now: float) -> float:
        rep = self.reported.get(v.job.id)
        if rep is not None:
            return rep
        full = v.job.estimate * declared(v.job, v.size)
        return min(1.0, v.progress + (max(0.0, now - v.since) / full if full > 0 else 1.0))

    # -- views -----------------------------------------------------------------------------------------------
    @property
    def nodes(self) -> tuple[str, ...]:
        """Host names of the pool, in pool order."""
        return self.pool

    def queue(self) -> list[JobRec]:
        """Pending jobs in priority order (priority, then submission)."""
        return sorted((j for j in self.jobs.values() if j.state == JobState.PENDING),
                      key=lambda j: (-j.priority, j.id))

    def draining(self) -> list[HostRec]:
        """Hosts to check (their job ended or released them), oldest first (down hosts cannot be checked)."""
        return sorted((h for h in self.hosts.values() if h.drain is not None and h.drain_since > 0 and not h.down),
                      key=lambda h: h.drain_since)

    def snapshot(self, now: float) -> Snapshot:
        """The machine as the policy sees it (jobs with an order in flight at their target size)."""
        _pass.refresh_busy(self, now)
        return self.ledger.snapshot(now)

    def reservation(self, job_id: int) -> float | None:
        """The expected start the policy reserved for a queued job, or None."""
        r = self.ledger.reservations.get(job_id)
        return r.start if r is not None else None

    def status(self) -> dict[str, Any]:
        """Counters for ``controller status``."""
        states: dict[str, int] = {}
        for j in self.jobs.values():
            states[str(j.state)] = states.get(str(j.state), 0) + 1
        return {"hosts": len(self.nodes), "free": sum(self.hosts[n].free for n in self.nodes),
                "storage_hosts": list(self.storage), "bb_total": self.ledger.bb_total,
                "bb_free": self.ledger.bb_total - self.ledger.bb_used,
                "down": sorted(n for n, h in self.hosts.items() if h.down), "jobs": states, "passes": self.passes,
                "policy_errors": self.policy_errors, "last_policy_error": self.last_error,
                "decisions": dict(self.ledger.counts)}

    # -- output helpers --------------------------------------------------------------------------------------
    def emit(self, action: Any) -> None:
        self._out.append(action)

    def save(self, j: JobRec) -> None:
        self.emit(SaveJob(j.id, str(j.state), j.to_json()))
        if JobState(j.state).final:
            self.jobs.pop(j.id, None)
            self.ended[j.id] = str(j.state)
        else:
            self.jobs[j.id] = j

    def save_host(self, h: HostRec) -> None:
        self.emit(SaveHost(h.name, h.idx, h.owner, h.drain, h.drain_since, h.down))

    def set_host(self, name: str, **kw: Any) -> None:
        h = self.hosts[name]
        for k, v in kw.items():
            setattr(h, k, v)
        self.save_host(h)

    def log_event(self, job_id: int | None, kind: str, text: str, now: float) -> None:
        log.info("job %s %s: %s", job_id if job_id is not None else "-", kind, text)
        self.emit(AddEvent(job_id, kind, text, now))

    def keep_view(self, j: JobRec) -> None:
        v = self.ledger.view(j.id)
        if v is not None:
            j.view = [v.start, v.since, v.progress, v.end_estimate, v.resizes]

    # -- requests --------------------------------------------------------------------------------------------
    def _request(self, e: Request) -> None:
        msg = e.msg
        fn = _REQUESTS.get(type(msg))
        if fn is None:
            raise Refusal(f"{getattr(msg, 'TYPE', type(msg).__name__)} is not a request the core handles")
        owner = None
        if isinstance(msg, P.Cancel | P.Suspend):
            j = self.jobs.get(msg.job_id)
            owner = j.user if j is not None else None
        authorize(e.who, msg, owner)
        if type(msg) is P.Submit:
            msg = dataclasses.replace(msg, user=submitter(e.who, msg.user))
        fn(self, msg, e.now)

    def _submit(self, m: P.Submit, now: float) -> None:
        n_hosts = len(self.nodes)
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
        _storage.check_submit(self, m)
        hi = min(hi, n_hosts)
        pref = min(pref, hi)
        limit = 0.0 if m.unlimited else (m.time_limit or self.config.default_time)    # 0: no limit
        env = {k: v for k, v in m.env.items() if not secret_looking(k)}
        dropped = sorted(set(m.env) - set(env))
        jid = self.next_id
        self.next_id += 1
        j = JobRec(jid, m.name or m.cmd[0].rsplit("/", 1)[-1], list(m.cmd), pref, lo, hi, m.malleable, limit,
                   m.out.replace("%j", str(jid)), m.err.replace("%j", str(jid)), m.cwd, env, now,
                   reason="Priority", speedup=speedup, constraint=constraint, user=m.user,
                   io_intensity=m.io_intensity, **_storage.submitted(m))
        self.ledger.submit(self.to_job(j))
        self.save(j)
        self.log_event(jid, "submit", f"{'malleable' if m.malleable else 'rigid'} {lo}..{hi} pref {pref} nodes, "
                    f"limit {f'{limit:g} s' if limit else 'UNLIMITED'}, speedup {speedup or 'linear'}, user "
                    f"{m.user or '-'}{f', burst buffer {P.format_size(m.bb)}' if m.bb else ''}: "
                    f"{' '.join(m.cmd)[:200]}", now)
        if dropped:
            self.log_event(jid, "env", f"not stored or passed on (secret-looking names): {', '.join(dropped)[:300]}",
                           now)
        self.emit(Reply(P.Submitted(jid)))

    def _cancel(self, m: P.Cancel, now: float) -> None:
        j = self.jobs.get(m.job_id)
        if j is None:
            if m.job_id in self.ended:
                raise Refusal(f"job {m.job_id} already ended ({self.ended[m.job_id]})")
            raise UnknownJob(f"no job {m.job_id}")
        self.log_event(j.id, "cancel", "cancel requested", now)
        if j.state == JobState.PENDING or (j.state == JobState.STARTING and not j.launched):
            self.forget_unlaunched(j, now)
            self.finish(j, JobState.CANCELLED, None, now, "cancelled before it started")
        else:
            j.cancel = True
            self.stop(j, now, "cancelled")
        self.emit(Reply(P.Ok()))

    def stop(self, j: JobRec, now: float, reason: str) -> None:
        """SIGTERM the job's processes now; the tick sends SIGKILL once ``kill_wait`` is over (Slurm's KillWait).
        A job already being stopped keeps its first SIGTERM's time."""
        if not j.stop_at:
            j.stop_at, j.killed_at = now, 0.0
        self.save(j)
        self.emit(Stop(j.id, j.pid, reason))

    def forget_unlaunched(self, j: JobRec, now: float) -> None:
        """Take a job that never ran out of the ledger (queue or granted hosts) and drop its file system."""
        _storage.forget(self, j, now)
        led = self.ledger
        if j.id in led.running:
            led.unstart(j.id)
        if j.id in led.queued:
            led.dequeue(j.id)
        for name in self.all_hosts(j):
            if self.hosts[name].owner == j.id:
                self.set_host(name, owner=None)
        j.hosts = []

    def all_hosts(self, j: JobRec) -> list[str]:
        out = list(j.hosts)
        if j.order and j.order.kind == "expand":
            out += [h for h in j.order.added if h not in out]
        return out

    def finish(self, j: JobRec, state: JobState, code: int | None, now: float, reason: str) -> None:
        self.held.discard(j.id)
        j.state, j.exit_code, j.end, j.reason, j.order = state, code, now, reason, None
        self.ledger.reservations.pop(j.id, None)
        self.ledger.busy.pop(j.id, None)
        self.backoff.pop(j.id, None)
        self.reported.pop(j.id, None)
        self.save(j)
        self.log_event(j.id, "end", f"{state} ({reason})", now)

    # -- process and host events -----------------------------------------------------------------------------
    def _launched(self, e: JobLaunched) -> None:
        j = self.active(e.job_id)
        j.pid, j.pid_ctime = e.pid, e.ctime
        self.save(j)

    def _launch_failed(self, e: LaunchFailed) -> None:
        j = self.active(e.job_id)
        self.drain_all(j, e.now)
        self.finish(j, JobState.FAILED, None, e.now, f"launch failed: {e.reason}")
        _storage.ended(self, j, e.now)

    def _relaunch(self, e: Relaunch) -> None:
        j = self.active(e.job_id)
        j.launched, j.state = False, JobState.STARTING
        self.save(j)
        self.log_event(j.id, "recover", "never started before the controller stopped; starting it now", e.now)
        self.launch_ready(e.now)

    def active(self, job_id: int) -> JobRec:
        j = self.jobs.get(job_id)
        if j is None:
            raise UnknownJob(f"no active job {job_id}")
        return j

    def _exited(self, e: JobExited) -> None:
        j = self.jobs.get(e.job_id)
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
        _storage.ended(self, j, now)
        self.launch_ready(now)

    def drain_all(self, j: JobRec, now: float) -> None:
        if j.id in self.ledger.running:
            self.ledger.finish(j.id)
        for name, h in self.hosts.items():
            if h.owner == j.id:
                self.set_host(name, owner=None, drain=j.id, drain_since=now)
            elif h.drain == j.id and h.drain_since == 0:
                self.set_host(name, drain_since=now)

    def requeue(self, j: JobRec, now: float) -> None:
        j.state, j.hosts, j.order, j.launched, j.pid, j.registered = JobState.PENDING, [], None, False, 0, False
        j.cancel, j.reason, j.start, j.since, j.view = False, "Requeued", 0.0, 0.0, None
        j.stop_at = j.killed_at = 0.0
        self.reported.pop(j.id, None)
        self.held.add(j.id)
        self.save(j)
        self.log_event(j.id, "requeue", f"interrupted; back in the queue with priority {j.priority}", now)
        self.release_held()

    def release_held(self) -> None:
        """Queue again the held jobs whose processes are gone and whose hosts are all checked (or down)."""
        for jid in sorted(self.held):
            j = self.jobs.get(jid)
            if j is None or j.state != JobState.PENDING:
                continue
            if any(h.drain == jid and not h.down for h in self.hosts.values()):
                continue
            self.held.discard(jid)
            if jid not in self.ledger.queued:
                self.ledger.enqueue(self.to_job(j))

    def _host_clean(self, e: HostClean) -> None:
        h = self.hosts.get(e.host)
        if h is None or h.drain is None:
            return
        job = h.drain
        if e.host not in self.pool:
            self.emit(DeleteHost(e.host))
            del self.hosts[e.host]
        else:
            self.set_host(e.host, drain=None, drain_since=0.0)
            _storage.host_checked(self, e.host, e.now)      # free for every policy, or kept for a data server
        self.release_held()
        self.log_event(job, "host-free", f"{e.host}: no process of job {job} left; host reusable", e.now)
        self.launch_ready(e.now)

    def _host_down(self, e: HostDown) -> None:
        h = self.hosts.get(e.host)
        if h is None:
            return
        if h.down:                              # already down: the later expected repair wins
            self.ledger.node_down(e.host, e.until)
            return
        self.set_host(e.host, down=e.reason[:200] or "down")
        self.log_event(h.owner, "host-down", f"{e.host}: {e.reason[:200]}", e.now)
        jid = self.ledger.node_down(e.host, e.until)
        if jid is not None and jid in self.jobs:
            v = self.ledger.view(jid)
            assert v is not None
            self.ledger.requeue(v, FAILED_PRIORITY)
            _pass.interrupted(self, self.jobs[jid], FAILED_PRIORITY, e.now, f"host {e.host} is down", in_pass=False)
        self.release_held()

    def _host_up(self, e: HostUp) -> None:
        h = self.hosts.get(e.host)
        if h is None or not h.down:
            return
        self.set_host(e.host, down="")
        self.ledger.node_up(e.host)
        if h.drain is not None:
            self.ledger.dirty.add(e.host)
        self.log_event(None, "host-up", f"{e.host} answers again", e.now)
        self.launch_ready(e.now)

    def _tick(self, e: Tick) -> None:
        now = e.now
        for j in list(self.jobs.values()):
            if j.state == JobState.RUNNING and not j.cancel and j.time_limit and now > j.start + j.time_limit:
                j.cancel, j.reason = True, "TIMEOUT"
                self.log_event(j.id, "timeout", f"time limit of {j.time_limit:g} s reached", now)
                self.stop(j, now, "time limit")
            if (j.stop_at and j.state == JobState.RUNNING and now >= j.stop_at + self.config.kill_wait
                    and now >= j.killed_at + KILL_REPEAT):
                first = not j.killed_at
                j.killed_at = now
                self.save(j)
                if first:
                    self.log_event(j.id, "kill", f"still running {now - j.stop_at:.0f} s after SIGTERM "
                                   f"(kill wait {self.config.kill_wait:g} s): SIGKILL", now)
                self.emit(Stop(j.id, j.pid, "kill wait over", hard=True))
            o = j.order
            if o and o.sent and not j.unresponsive and now - o.sent > self.config.ack_timeout:
                j.unresponsive = True
                self.save(j)
                self.log_event(j.id, "unresponsive", f"order {o.seq} ({o.kind} to {o.procs}) not acknowledged "
                            f"within {self.config.ack_timeout:g} s; its hosts stay reserved", now)
        for h in self.draining():
            d = self.jobs.get(h.drain)  # type: ignore[arg-type]
            if (d is None or not d.launched) and now - h.drain_since > self.config.drain_grace:
                self.emit(Kill(h.drain, h.name))  # type: ignore[arg-type]

    def hosts_clean(self, names: Sequence[str]) -> bool:
        return all(self.hosts[n].drain is None and not self.hosts[n].down for n in names)

    def launch_ready(self, now: float) -> None:
        for j in list(self.jobs.values()):
            if j.state == JobState.STARTING and not j.launched and self.hosts_clean(j.hosts):
                if j.bb and not _storage.ready_to_launch(self, j, now):
                    continue
                j.launched, j.state, j.start, j.since, j.reason = True, JobState.RUNNING, now, now, ""
                self.save(j)
                self.emit(AddStep(j.id, now, "start", tuple(j.hosts)))
                self.log_event(j.id, "start", f"on {','.join(j.hosts)}", now)
                self.emit(Launch(dataclasses.replace(j, hosts=list(j.hosts))))

_HANDLERS: dict[type, Callable[[Core, Any], None]] = {
    Request: Core._request,
    JobLaunched: Core._launched,
    LaunchFailed: Core._launch_failed,
    Relaunch: Core._relaunch,
    JobExited: Core._exited,
    HostClean: Core._host_clean,
    HostDown: Core._host_down,
    HostUp: Core._host_up,
    Tick: Core._tick,
    Schedule: _pass.schedule,
    **_storage.HANDLERS,
}
"""One handler per event type."""

_REQUESTS: dict[type, Callable[[Core, Any, float], None]] = {
    P.Submit: Core._submit,
    P.Cancel: Core._cancel,
    P.Register: _link.register,
    P.Poll: _link.poll,
    P.Committed: _link.committed,
    P.Refused: _link.refused,
    P.Progress: _link.progress,
    P.ResizeRequest: _link.request,
    P.Suspend: _link.suspend,
}
"""One handler per state-changing wire request (read-only ones are answered by the daemon from the views)."""
