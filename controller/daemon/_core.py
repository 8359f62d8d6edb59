"""The controller's core: jobs, hosts and resize orders, and the scheduling pass over the simulator's policies.

The core never touches sockets, processes or the clock: the daemon (:mod:`._daemon`) hands it events with the
current time (a submission, a job's end, a runtime acknowledgement, a host found empty) and carries out the
actions it returns (:class:`Launch`, :class:`Stop`, :class:`Kill`). Every change is written to the
:class:`~._store.Store` in one transaction *before* the actions are returned, so a crash between the two
loses nothing: the next start re-attaches or replays from the store.

Host life cycle: free → held by a job (``owner``) → after the job ends or a shrink gives the host back,
*draining* (``drain`` = the job whose processes may still be there) until the daemon has checked that no
process of that job is left on it → free. A host may already be promised to a new job while it drains
(a shrink to admit a queued job): that job is launched only when all its hosts are clean.

Resize orders: a pass's ``ResizeJob`` becomes an order (seq, target hosts, process count) stored on the job.
The runtime link fetches it with ``poll`` (an expansion's order only once its new hosts are clean), carries it
out, and acknowledges with ``committed`` or ``refused``. Invariants: one order per job at a time; a shrink
releases the job's newest hosts (the runtime frees its newest spawn groups), so the hosts a policy named are
swapped for those, consistently for the rest of the pass.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from malleable.controller.sched import _model
from malleable.controller.sched._model import (
    Job,
    JobKind,
    QueueView,
    Remember,
    Reserve,
    ResizeJob,
    RunningJob,
    Snapshot,
    StartJob,
    Wake,
)
from malleable.errors import PolicyError, Refusal, UnknownJob

from ._protocol import Committed, Order, Poll, Progress, Refused, Register, Submit
from ._store import HostRec, JobRec, Store

__all__ = ["Core", "CoreConfig", "Kill", "Launch", "Refusal", "Stop", "UnknownJob"]

log = logging.getLogger(__name__)

_Interrupt = getattr(_model, "Interrupt", None)  # added by the malleable policies (issue 8); optional here
_HAS_MTCT = "mtct" in getattr(RunningJob, "__dataclass_fields__", {})

FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")


@dataclass(frozen=True, slots=True)
class Launch:
    """Start the job's processes on its hosts (``job`` is a copy of the record at that time)."""

    job: JobRec


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop a running job's processes (cancel, time limit, interruption)."""

    job_id: int
    pid: int
    reason: str


@dataclass(frozen=True, slots=True)
class Kill:
    """Kill processes of an ended job still found on a host after the grace period."""

    job_id: int
    host: str


Action = Launch | Stop | Kill


@dataclass(frozen=True, slots=True)
class CoreConfig:
    """Settings of the core (the daemon's command line).

    Attributes:
        slots: processes per host.
        ack_timeout: seconds a sent resize order may stay unacknowledged before the job is marked unresponsive
            (its hosts stay reserved until it answers or ends).
        refuse_backoff: seconds without new orders for a job after it refused one.
        drain_grace: seconds after a job's end before its processes still found on a host are killed.
        default_time: time limit of jobs submitted without one (s).
    """

    slots: int = 1
    ack_timeout: float = 120.0
    refuse_backoff: float = 30.0
    drain_grace: float = 5.0
    default_time: float = 3600.0


class Core:
    """Jobs, hosts and orders; mutated only through its methods, which persist before returning actions.

    Args:
        store: the state database (already holding the hosts of earlier runs, or empty).
        nodes: the host pool (node ids are host names), in allocation order.
        policy: ``decide(snapshot, now) -> list[Decision]``, a simulator policy, used unchanged.
        config: settings.
    """

    def __init__(self, store: Store, nodes: Sequence[str], policy: Callable[[Snapshot, float], list],
                 config: CoreConfig | None = None) -> None:
        self.store = store
        self.policy = policy
        self.config = config or CoreConfig()
        self.jobs: dict[int, JobRec] = {}
        self.hosts: dict[str, HostRec] = {}
        self.memo: Any = None
        self.reservations: dict[int, Reserve] = {}
        self.wakes: list[float] = []
        self.backoff: dict[int, float] = {}
        self.passes = 0
        self.policy_errors = 0
        self.pending_stops: list[Stop] = []
        self.pool: tuple[str, ...] = tuple(nodes)
        self._load(list(nodes))

    # -- loading ---------------------------------------------------------------------------------------------
    def _load(self, nodes: list[str]) -> None:
        if len(set(nodes)) != len(nodes) or not nodes:
            raise ValueError("the host pool must name distinct hosts")
        old = {h.name: h for h in self.store.load_hosts()}
        with self.store.tx():
            for i, name in enumerate(nodes):
                h = old.pop(name, None) or HostRec(name, i)
                h.idx = i
                self.hosts[name] = h
                self.store.save_host(h)
            for name, h in old.items():  # left the pool: keep only while a job still uses it
                if h.owner is None and h.drain is None:
                    self.store.delete_host(name)
                else:
                    h.idx = len(self.hosts)
                    self.hosts[name] = h
            for j in self.store.load_jobs():
                self.jobs[j.id] = j

    # -- views -----------------------------------------------------------------------------------------------
    @property
    def nodes(self) -> tuple[str, ...]:
        """Host names of the pool, in pool order."""
        return self.pool

    def queue(self) -> list[JobRec]:
        """Pending jobs in priority order (priority, then submission)."""
        return sorted((j for j in self.jobs.values() if j.state == "PENDING"), key=lambda j: (-j.priority, j.id))

    def job(self, job_id: int) -> JobRec:
        """An active job (pending or running).

        Raises:
            UnknownJob: no active job has this id.
        """
        j = self.jobs.get(job_id)
        if j is None:
            raise UnknownJob(f"no active job {job_id}")
        return j

    def draining(self) -> list[HostRec]:
        """Hosts to check (their job ended or released them), oldest first."""
        return sorted((h for h in self.hosts.values() if h.drain is not None and h.drain_since > 0),
                      key=lambda h: h.drain_since)

    # -- persistence helpers ---------------------------------------------------------------------------------
    def _save(self, j: JobRec) -> None:
        self.store.save_job(j)
        if j.state in FINAL:
            self.jobs.pop(j.id, None)
        else:
            self.jobs[j.id] = j

    def _set_host(self, name: str, **kw: Any) -> None:
        h = self.hosts[name]
        for k, v in kw.items():
            setattr(h, k, v)
        self.store.save_host(h)

    def _event(self, job_id: int | None, kind: str, text: str, now: float) -> None:
        log.info("job %s %s: %s", job_id if job_id is not None else "-", kind, text)
        self.store.add_event(job_id, kind, text, now)

    # -- commands --------------------------------------------------------------------------------------------
    def submit(self, m: Submit, now: float) -> int:
        """Queue a job; returns its id.

        Raises:
            Refusal: sizes inconsistent or larger than the pool, or a bad time limit.
        """
        n_hosts = len(self.nodes)
        lo, hi, pref = (m.min_nodes, m.max_nodes, m.nodes) if m.malleable else (m.nodes, m.nodes, m.nodes)
        if pref < 1 or lo < 1:
            raise Refusal("a job needs at least 1 node")
        if not lo <= pref <= hi:
            raise Refusal(f"node counts must satisfy min <= preferred <= max, got {lo} <= {pref} <= {hi}")
        if lo > n_hosts or (not m.malleable and pref > n_hosts):
            raise Refusal(f"job asks for {lo if m.malleable else pref} node(s) but the controller has only "
                          f"{n_hosts}")
        hi = min(hi, n_hosts)
        pref = min(pref, hi)
        limit = m.time_limit or self.config.default_time
        with self.store.tx():
            jid = self.store.next_job_id()
            j = JobRec(jid, m.name or m.cmd[0].rsplit("/", 1)[-1], list(m.cmd), pref, lo, hi, m.malleable, limit,
                       m.out.replace("%j", str(jid)), m.err.replace("%j", str(jid)), m.cwd, dict(m.env), now,
                       reason="Priority", speedup=m.speedup, constraint=m.constraint, user=m.user)
            self._save(j)
            self._event(jid, "submit", f"{'malleable' if m.malleable else 'rigid'} {lo}..{hi} pref {pref} nodes, "
                        f"limit {limit:g} s: {' '.join(m.cmd)[:200]}", now)
        return jid

    def cancel(self, job_id: int, now: float) -> list[Action]:
        """Cancel a job: a pending one at once, a running one by stopping its processes.

        Raises:
            UnknownJob: no such job; Refusal: it already ended.
        """
        j = self.jobs.get(job_id)
        if j is None:
            old = self.store.load_job(job_id)
            if old is None:
                raise UnknownJob(f"no job {job_id}")
            raise Refusal(f"job {job_id} already ended ({old.state})")
        with self.store.tx():
            self._event(job_id, "cancel", "cancel requested", now)
            if j.state == "PENDING" or (j.state == "STARTING" and not j.launched):
                self._release_unlaunched(j)
                self._finish(j, "CANCELLED", None, now, "cancelled before it started")
                return []
            j.cancel = True
            self._save(j)
        return [Stop(j.id, j.pid, "cancelled")]

    def _release_unlaunched(self, j: JobRec) -> None:
        for name in self._all_hosts(j):
            h = self.hosts[name]
            if h.owner == j.id:
                self._set_host(name, owner=None)
        j.hosts = []

    def _all_hosts(self, j: JobRec) -> list[str]:
        out = list(j.hosts)
        if j.order and j.order["kind"] == "expand":
            out += [h for h in j.order["added"] if h not in out]
        return out

    def _finish(self, j: JobRec, state: str, code: int | None, now: float, reason: str) -> None:
        j.state, j.exit_code, j.end, j.reason, j.order = state, code, now, reason, None
        self.reservations.pop(j.id, None)
        self.backoff.pop(j.id, None)
        self._save(j)
        self._event(j.id, "end", f"{state} ({reason})", now)

    # -- process events --------------------------------------------------------------------------------------
    def launched(self, job_id: int, pid: int, ctime: float, now: float) -> None:
        """The job's shepherd process started."""
        j = self.job(job_id)
        with self.store.tx():
            j.pid, j.pid_ctime = pid, ctime
            self._save(j)

    def launch_failed(self, job_id: int, reason: str, now: float) -> None:
        """The job could not be started at all (missing program, bad working directory)."""
        j = self.job(job_id)
        with self.store.tx():
            self._drain_all(j, now)
            self._finish(j, "FAILED", None, now, f"launch failed: {reason}")

    def relaunch(self, job_id: int, now: float) -> list[Action]:
        """A launched job left no trace at all (the daemon died between recording and starting it): start it."""
        j = self.job(job_id)
        with self.store.tx():
            j.launched, j.state = False, "STARTING"
            self._save(j)
            self._event(j.id, "recover", "never started before the controller stopped; starting it now", now)
        return self._launchable(now)

    def exited(self, job_id: int, code: int | None, now: float, reason: str = "") -> list[Action]:
        """The job's processes ended (``code`` None: unknown, e.g. lost while the daemon was down)."""
        j = self.jobs.get(job_id)
        if j is None:
            return []
        with self.store.tx():
            self._drain_all(j, now)
            if j.cancel and j.reason == "TIMEOUT":
                state, why = "TIMEOUT", "time limit reached"
            elif j.cancel:
                state, why = "CANCELLED", "cancelled"
            elif j.reason == "INTERRUPTED":
                self._requeue(j, now)
                return self._launchable(now)
            elif code == 0:
                state, why = "COMPLETED", "exit code 0"
            else:
                state, why = "FAILED", reason or (f"exit code {code}" if code is not None else "exit code unknown")
            self._finish(j, state, code, now, why)
        return self._launchable(now)

    def _drain_all(self, j: JobRec, now: float) -> None:
        for name, h in self.hosts.items():
            if h.owner == j.id:
                self._set_host(name, owner=None, drain=j.id, drain_since=now)
            elif h.drain == j.id and h.drain_since == 0:
                self._set_host(name, drain_since=now)

    def _requeue(self, j: JobRec, now: float) -> None:
        j.state, j.hosts, j.order, j.launched, j.pid, j.registered = "PENDING", [], None, False, 0, False
        j.cancel, j.reason, j.start, j.since = False, "Requeued", 0.0, 0.0
        self._save(j)
        self._event(j.id, "requeue", f"interrupted; back in the queue with priority {j.priority}", now)

    def host_clean(self, name: str, now: float) -> list[Action]:
        """The daemon found no process of the draining job on host ``name``."""
        h = self.hosts.get(name)
        if h is None or h.drain is None:
            return []
        with self.store.tx():
            job = h.drain
            if name not in self.pool:
                self.store.delete_host(name)
                del self.hosts[name]
            else:
                self._set_host(name, drain=None, drain_since=0.0)
            self._event(job, "host-free", f"{name}: no process of job {job} left; host reusable", now)
        return self._launchable(now)

    def _clean(self, names: Sequence[str]) -> bool:
        return all(self.hosts[n].drain is None for n in names)

    def _launchable(self, now: float) -> list[Action]:
        out: list[Action] = []
        for j in list(self.jobs.values()):
            if j.state == "STARTING" and not j.launched and self._clean(j.hosts):
                j.launched, j.state, j.start, j.since, j.reason = True, "RUNNING", now, now, ""
                self._save(j)
                self.store.add_step(j.id, now, "start", list(j.hosts))
                self._event(j.id, "start", f"on {','.join(j.hosts)}", now)
                out.append(Launch(dataclasses.replace(j, hosts=list(j.hosts), env=dict(j.env))))
        return out

    def tick(self, now: float) -> list[Action]:
        """Time limits, unacknowledged orders, processes left behind on hosts of ended jobs."""
        out: list[Action] = []
        with self.store.tx():
            for j in list(self.jobs.values()):
                if j.state == "RUNNING" and not j.cancel and now > j.start + j.time_limit:
                    j.cancel, j.reason = True, "TIMEOUT"
                    self._save(j)
                    self._event(j.id, "timeout", f"time limit of {j.time_limit:g} s reached", now)
                    out.append(Stop(j.id, j.pid, "time limit"))
                o = j.order
                if o and o.get("sent") and not j.unresponsive and now - o["sent"] > self.config.ack_timeout:
                    j.unresponsive = True
                    self._save(j)
                    self._event(j.id, "unresponsive", f"order {o['seq']} ({o['kind']} to {o['procs']}) not "
                                f"acknowledged within {self.config.ack_timeout:g} s; its hosts stay reserved", now)
        for h in self.draining():
            if h.drain not in self.jobs and now - h.drain_since > self.config.drain_grace:
                out.append(Kill(h.drain, h.name))  # type: ignore[arg-type]
        return out

    # -- the runtime link ------------------------------------------------------------------------------------
    def _linked(self, job_id: int) -> JobRec:
        j = self.jobs.get(job_id)
        if j is None or j.state != "RUNNING" or not j.malleable:
            raise UnknownJob(f"no running malleable job {job_id}")
        return j

    def register(self, m: Register, now: float) -> None:
        """Rank 0 of a malleable job is up."""
        j = self._linked(m.job_id)
        with self.store.tx():
            j.registered, j.link_pid = True, m.pid
            self._save(j)
            self._event(j.id, "register", f"rank 0 pid {m.pid} on {m.host}, {m.size} processes on "
                        f"{','.join(sorted(set(m.hosts)))}", now)

    def poll(self, m: Poll, now: float) -> Order | None:
        """The job's deliverable order, if any (an expansion's only once its new hosts are clean)."""
        j = self._linked(m.job_id)
        if not j.registered:
            with self.store.tx():
                j.registered = True
                self._save(j)
        o = j.order
        if not o:
            return None
        if o["kind"] == "expand" and not self._clean(o["added"]):
            return None
        if not o.get("sent"):
            with self.store.tx():
                o["sent"] = now
                self._save(j)
        return Order(o["seq"], o["procs"], list(o["hosts"]))

    def committed(self, m: Committed, now: float) -> list[Action]:
        """The job carried out an order.

        Raises:
            Refusal: not the job's current order (a duplicate of an acknowledged order is accepted silently).
        """
        j = self._linked(m.job_id)
        o = j.order
        if o is None or o["seq"] != m.seq:
            if m.seq <= j.seq and (o is None or m.seq < o["seq"]):
                return []   # a retransmission of an acknowledged order
            raise Refusal(f"job {j.id} has no order {m.seq}")
        with self.store.tx():
            j.hosts = list(o["target"])
            j.order, j.unresponsive, j.since = None, False, now
            self._save(j)
            if o["kind"] == "shrink":
                for name in o["removed"]:
                    if self.hosts[name].drain == j.id:
                        self._set_host(name, drain_since=now)
            self.store.add_step(j.id, now, o["kind"], list(j.hosts), o["decided"], m.seconds)
            unfreed = sorted(set(o.get("removed", ())) - set(m.freed))
            note = f"; runtime did not report {','.join(unfreed)} freed" if unfreed else ""
            self._event(j.id, o["kind"], f"{m.old_size} -> {m.new_size} processes on {len(j.hosts)} hosts in "
                        f"{m.seconds:.3f} s (decided {now - o['decided']:.3f} s ago){note}", now)
        return self._launchable(now)

    def refused(self, m: Refused, now: float) -> list[Action]:
        """The job could not carry out its order: undo it (hosts promised to others go back)."""
        j = self._linked(m.job_id)
        o = j.order
        if o is None or o["seq"] != m.seq:
            raise Refusal(f"job {j.id} has no order {m.seq}")
        with self.store.tx():
            if o["kind"] == "expand":
                for name in o["added"]:  # a failed spawn may have left something behind: check before reuse
                    self._set_host(name, owner=None, drain=j.id, drain_since=now)
            else:
                for name in o["removed"]:
                    other = self.hosts[name].owner
                    if other is not None and other != j.id:
                        self._unstart(self.jobs[other], now)
                    self._set_host(name, owner=j.id, drain=None, drain_since=0.0)
            j.order, j.unresponsive = None, False
            self._save(j)
            self.backoff[j.id] = now + self.config.refuse_backoff
            self._event(j.id, "refused", f"order {m.seq} ({o['kind']} to {o['procs']}): {m.reason[:300]}", now)
        return self._launchable(now)

    def _unstart(self, j: JobRec, now: float) -> None:
        """Put a job that was waiting for hosts back in the queue (its hosts are not coming)."""
        for name in j.hosts:
            if self.hosts[name].owner == j.id:
                self._set_host(name, owner=None)
        j.state, j.hosts, j.reason = "PENDING", [], "Resources"
        self._save(j)
        self._event(j.id, "unstart", "a host it was waiting for stays with its job; back in the queue", now)

    def progress(self, m: Progress, now: float) -> None:
        """Keep the job's last per-phase data (shown by ``info``; MTCT goes to the policy)."""
        j = self._linked(m.job_id)
        text = json.dumps(m.data)
        if len(text) > 4096:
            raise Refusal("progress data larger than 4096 bytes")
        with self.store.tx():
            j.progress[m.phase[:64]] = m.data
            self._save(j)

    # -- the scheduling pass ---------------------------------------------------------------------------------
    def snapshot(self, now: float) -> Snapshot:
        """The machine as the policy sees it: target sizes of jobs with an order in flight."""
        free = tuple(n for n in self.nodes if self.hosts[n].free)
        running = []
        for j in self.jobs.values():
            if j.state not in ("STARTING", "RUNNING"):
                continue
            nodes = tuple(j.order["target"]) if j.order else tuple(j.hosts)
            start = j.start or now
            kw = {}
            if _HAS_MTCT:
                kw["mtct"] = _mtct(j.progress)
            running.append(RunningJob(self._job(j), nodes, len(nodes), start, j.since or start, 0.0,
                                      start + j.time_limit, 0, **kw))
        running.sort(key=lambda r: (r.end_estimate, r.start, r.id))
        queue = [self._job(j) for j in self.queue()]
        return Snapshot(now, self.nodes, free, tuple(running), QueueView(queue), True, len(queue),
                        dict(self.reservations), self.memo)

    def _job(self, j: JobRec) -> Job:
        kind = JobKind.MALLEABLE if j.malleable else JobKind.RIGID
        kw = {"priority": j.priority} if "priority" in Job.__dataclass_fields__ else {}
        return Job(j.id, j.submit, j.nodes, j.time_limit, kind, j.min_nodes, j.max_nodes, 0.0, **kw)

    def schedule(self, now: float) -> list[Action]:
        """One scheduling pass: call the policy on a snapshot and carry out its decisions, shrinks first.

        A decision that breaks an invariant (or cannot be carried out now, such as a second resize of a job
        whose order is in flight) is logged and skipped; the rest of the pass goes on.
        """
        self.passes += 1
        snap = self.snapshot(now)
        decisions = list(self.policy(snap, now))
        sizes = {r.id: r.size for r in snap.running}
        shrinks = [d for d in decisions if type(d) is ResizeJob and len(d.nodes) < sizes.get(d.job_id, 0)]
        rest = [d for d in decisions if not any(d is s for s in shrinks)]
        self.wakes = [w for w in self.wakes if w > now]
        rename: dict[str, str] = {}
        released: set[str] = set()
        with self.store.tx():
            for d in shrinks + rest:
                try:
                    self._apply(d, now, rename, released)
                except PolicyError as e:
                    self.policy_errors += 1
                    log.debug("pass at %.3f: decision skipped: %s", now, e)
            return self._launchable(now) + self.take_stops()

    def _apply(self, d: Any, now: float, rename: dict[str, str], released: set[str]) -> None:
        t = type(d)
        if t is StartJob:
            self._start(d, now, rename, released)
        elif t is ResizeJob:
            self._resize(d, now, rename, released)
        elif t is Reserve:
            self.reservations[d.job_id] = d
        elif t is Remember:
            self.memo = d.value
        elif t is Wake:
            if d.at > now:
                self.wakes.append(float(d.at))
        elif _Interrupt is not None and t is _Interrupt:
            self._interrupt(d, now)
        else:
            raise PolicyError(f"not a decision: {d!r}")

    def _take(self, d: Any, nodes: Sequence[str], rename: dict[str, str], released: set[str]) -> list[str]:
        """Rename and check nodes a decision takes: distinct, in the pool, free or released in this pass."""
        out = [rename.get(n, n) for n in nodes]
        if len(set(out)) != len(out):
            raise PolicyError(f"{d!r}: a node is named twice")
        for n in out:
            h = self.hosts.get(n) if isinstance(n, str) else None
            if h is None:
                raise PolicyError(f"{d!r}: unknown node {n!r}")
            if not (h.free or (n in released and h.owner is None)):
                raise PolicyError(f"{d!r}: node {n} is not free")
        return out

    def _start(self, d: StartJob, now: float, rename: dict[str, str], released: set[str]) -> None:
        j = self.jobs.get(d.job_id)
        if j is None or j.state != "PENDING":
            raise PolicyError(f"{d!r}: job is not queued")
        if not isinstance(d.nodes, tuple) or not j.min_nodes <= len(d.nodes) <= j.max_nodes:
            raise PolicyError(f"{d!r}: size outside {j.min_nodes}..{j.max_nodes}")
        nodes = self._take(d, d.nodes, rename, released)
        for n in nodes:
            self._set_host(n, owner=j.id)
        j.state, j.hosts, j.launched, j.reason = "STARTING", nodes, False, ""
        self.reservations.pop(j.id, None)
        self._save(j)

    def _resize(self, d: ResizeJob, now: float, rename: dict[str, str], released: set[str]) -> None:
        j = self.jobs.get(d.job_id)
        if j is None or j.state != "RUNNING":
            raise PolicyError(f"{d!r}: job is not running")
        if not j.malleable:
            raise PolicyError(f"{d!r}: job {j.id} is rigid")
        if j.order or not j.registered or j.cancel or self.backoff.get(j.id, 0) > now:
            raise PolicyError(f"{d!r}: job {j.id} cannot take an order now (one in flight, not registered yet, "
                              "stopping, or backing off after a refusal)")
        k = len(d.nodes)
        if not isinstance(d.nodes, tuple) or not j.min_nodes <= k <= j.max_nodes:
            raise PolicyError(f"{d!r}: size outside {j.min_nodes}..{j.max_nodes}")
        cur = list(j.hosts)
        slots = self.config.slots
        if k < len(cur):
            named = [rename.get(n, n) for n in d.nodes]
            if len(set(named)) != k or not set(named) <= set(cur):
                raise PolicyError(f"{d!r}: a shrink must keep a subset of the job's nodes (no mixed resize)")
            keep, gone = cur[:k], cur[k:]
            wanted_gone = sorted(set(cur) - set(named), key=cur.index)
            swap_from = [n for n in wanted_gone if n not in gone]
            swap_to = [n for n in gone if n not in wanted_gone]
            rename.update(zip(swap_from, swap_to, strict=True))
            for n in gone:
                self._set_host(n, owner=None, drain=j.id, drain_since=0.0)
                released.add(n)
            order = {"kind": "shrink", "target": keep, "removed": gone, "added": [], "hosts": []}
        elif k > len(cur):
            if set(cur) - {rename.get(n, n) for n in d.nodes}:
                raise PolicyError(f"{d!r}: an expansion must keep all the job's nodes (no mixed resize)")
            added = self._take(d, [n for n in d.nodes if rename.get(n, n) not in cur], rename, released)
            for n in added:
                self._set_host(n, owner=j.id)
            order = {"kind": "expand", "target": cur + added, "removed": [], "added": added, "hosts": added}
        else:
            raise PolicyError(f"{d!r}: same size; moving a job between nodes is not supported")
        j.seq += 1
        order.update(seq=j.seq, procs=k * slots, decided=now, sent=0.0)
        j.order = order
        self._save(j)
        self._event(j.id, "order", f"order {j.seq}: {order['kind']} {len(cur)} -> {k} nodes "
                    f"({'+' + ','.join(order['added']) if order['added'] else '-' + ','.join(order['removed'])})",
                    now)

    def _interrupt(self, d: Any, now: float) -> None:
        j = self.jobs.get(d.job_id)
        if j is None or j.state not in ("STARTING", "RUNNING"):
            raise PolicyError(f"{d!r}: job is not running")
        j.priority = max(j.priority, int(getattr(d, "priority", 1)))
        if not j.launched:
            self._release_unlaunched(j)
            self._requeue(j, now)
            return
        j.cancel, j.reason = False, "INTERRUPTED"
        self._save(j)
        self._event(j.id, "interrupt", "interrupted by the policy; stopping it", now)
        self.pending_stops.append(Stop(j.id, j.pid, "interrupted"))

    def take_stops(self) -> list[Stop]:
        """Stops decided inside a pass (interruptions), handed to the daemon once."""
        out, self.pending_stops = self.pending_stops, []
        return out

    # -- read-only views for the command line ----------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Counters for ``controller status``."""
        states: dict[str, int] = {}
        for j in self.jobs.values():
            states[j.state] = states.get(j.state, 0) + 1
        return {"hosts": len(self.nodes), "free": sum(self.hosts[n].free for n in self.nodes),
                "jobs": states, "passes": self.passes, "policy_errors": self.policy_errors}


def _mtct(progress: dict[str, Any]) -> float | None:
    vals = [v.get("mtct") for v in progress.values() if isinstance(v, dict)]
    vals = [float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return vals[-1] if vals else None
