"""The requests the daemon answers itself, without the core: read-only views of its state (queue, nodes, history,
one job, status) and the operator's commands (shutdown, users). One method per request type of
:class:`DaemonViews` (a mixin of the daemon, which holds the state), found through :data:`VIEWS`; the caller has
already checked that the requester may send it (:func:`~._access.authorize`)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from malleable.errors import Refusal, UnknownJob

from . import _protocol as P
from ._backlog import Backlog
from ._cgroup import JobCgroups
from ._core import Core
from ._events import Request
from ._hostpool import HostPool
from ._identity import refuse_name
from ._records import PUBLIC_COLS, JobRec
from ._store import Store

__all__ = ["VIEWS", "DaemonViews"]


class DaemonViews:
    """The daemon's answers that need no core event (mixed into :class:`~._daemon.Daemon`, which sets the state
    below)."""

    config: Any
    pool: HostPool
    core: Core
    store: Store
    cgroups: JobCgroups
    users: dict[str, str]
    address: str
    job_address: str
    cid: str
    curve_public: str
    started: float
    handled: int
    rejected: int
    shutdown: bool
    cancel_on_exit: bool
    backlog: Backlog

    def handle(self, event: Any) -> Any:
        """Hand an event to the core and carry out its actions (the daemon's)."""
        raise NotImplementedError

    def queue(self, m: P.Queue) -> P.Message:
        """Running jobs by id, then the queue in its order, then ended jobs whose failed stage-out holds their file
        system (Slurm lists a job in stage-out too)."""
        running = sorted((j for j in self.core.jobs.values() if j.state != "PENDING"), key=lambda j: j.id)
        held = sorted((s.job for s in self.core.state.stopping.values() if s.fs.phase == "held"), key=lambda j: j.id)
        reservation = self.core.reservation
        vals = []
        for j in running + self.core.queue() + held:
            v = j.public_values()
            v.append(reservation(j.id))
            vals.append(v)
        return P.Table([], cols=QUEUE_COLS, vals=vals)

    def nodes(self, m: P.Nodes) -> P.Message:
        """Every host: idle, alloc, draining, alloc+drain, storage (lent to a job's file system: ``job`` is that
        job) or down (with the reason)."""
        rows = []
        lent = self.core.lent_hosts()
        for name in self.core.nodes:
            h = self.core.hosts[name]
            if h.down:
                state = "down"
            elif h.owner is not None and h.drain is not None:
                state = "alloc+drain"
            elif h.owner is not None:
                state = "alloc"
            elif h.drain is not None:
                state = "draining"
            else:
                state = "storage" if name in lent else "idle"
            rows.append({"name": name, "state": state, "job": h.owner if h.owner is not None else lent.get(name),
                         "drain": h.drain, "reason": h.down})
        return P.Table(rows)

    def history(self, m: P.History) -> P.Message:
        """Jobs of every state, newest first, selected as the request says."""
        return P.Table([self.row(j) for j in self.store.history(m)])

    def info(self, m: P.Info) -> P.Message:
        """One job's record, size history and events."""
        j = self.core.jobs.get(m.job_id) or self.store.load_job(m.job_id)
        if j is None:
            raise UnknownJob(f"no job {m.job_id}")
        return P.JobInfo(self.row(j), self.store.steps(m.job_id), self.store.events(m.job_id))

    def status(self, m: P.Status) -> P.Message:
        """The daemon's identity, settings and counters."""
        return P.StatusReply({
            "address": self.address, "jobs_address": self.job_address, "pid": os.getpid(),
            "controller_id": self.cid, "state": self.config.state, "pool": self.pool.kind, "mpi": self.mpi,
            "nodes": list(self.pool.nodes), "policy": self.config.policy, "slots": self.config.core.slots,
            "kill_wait": self.config.core.kill_wait, "cgroups": self.cgroups.root is not None,
            "curve": self.curve_public, "users": len(self.users), "uptime": time.time() - self.started,
            "handled": self.handled, "rejected": self.rejected, "state_error": self.backlog.error,
            **self.core.status()})

    def shut_down(self, m: P.Shutdown) -> P.Message:
        """Stop serving (after cancelling every job, if asked)."""
        self.shutdown = True
        if m.cancel_jobs:
            self.cancel_on_exit = True
            now = time.time()
            for jid in list(self.core.jobs):
                self.handle(Request(now, P.Cancel(jid)))
        return P.Ok()

    def add_user(self, m: P.AddUser) -> P.Message:
        """Accept user ``m.name``'s key (made from ``m.nonce``); a key they had before stops working. Root and the
        daemon's own account are refused: their key would speak for the operator's jobs."""
        why = refuse_name(m.name)
        if why:
            raise Refusal(f"add_user: {why}")
        now = time.time()
        again = m.name in self.users
        with self.store.tx():
            self.store.save_user(m.name, m.nonce, now)
            self.store.add_event(None, "user", f"{'new key for' if again else 'added'} user {m.name}", now)
        self.users[m.name] = m.nonce
        return P.Ok()

    def remove_user(self, m: P.RemoveUser) -> P.Message:
        """Revoke user ``m.name``'s key."""
        if m.name not in self.users:
            raise Refusal(f"no user {m.name}")
        now = time.time()
        with self.store.tx():
            self.store.delete_user(m.name)
            self.store.add_event(None, "user", f"removed user {m.name}", now)
        del self.users[m.name]
        return P.Ok()

    def users(self, m: P.Users) -> P.Message:
        """Every user and when they got their key."""
        return P.Table([{"name": n, "added": t} for n, (_, t) in sorted(self.store.load_users().items())])

    def row(self, j: JobRec) -> dict[str, Any]:
        """A job's public record, with the start the policy expects for it."""
        r = j.public()
        r["expected_start"] = self.core.reservation(j.id)
        return r


QUEUE_COLS = [*PUBLIC_COLS, "expected_start"]
"""A ``queue`` row's fields: a job's public record and the start the policy expects for it."""

VIEWS: dict[type, Callable[[Any, Any], P.Message]] = {
    P.Queue: DaemonViews.queue,
    P.Nodes: DaemonViews.nodes,
    P.History: DaemonViews.history,
    P.Info: DaemonViews.info,
    P.Status: DaemonViews.status,
    P.Shutdown: DaemonViews.shut_down,
    P.AddUser: DaemonViews.add_user,
    P.RemoveUser: DaemonViews.remove_user,
    P.Users: DaemonViews.users,
}
"""Requests the daemon answers itself (read-only views, and the operator's commands)."""
