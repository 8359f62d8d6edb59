"""The requests the daemon answers itself, without the core: read-only views of its state (queue, nodes, history,
one job, status) and the operator's commands (shutdown, users). One function per request type, found through
:data:`VIEWS`; the caller has already checked that the requester may send it (:func:`~._access.authorize`)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from malleable.errors import Refusal, UnknownJob

from . import _protocol as P
from ._events import Request

if TYPE_CHECKING:
    from ._daemon import Daemon

__all__ = ["VIEWS"]


def queue(d: Daemon, m: P.Queue) -> P.Message:
    """Running jobs by id, then the queue in its order."""
    running = sorted((j for j in d.core.jobs.values() if j.state != "PENDING"), key=lambda j: j.id)
    return P.Table([row(d, j) for j in running + d.core.queue()])


def nodes(d: Daemon, m: P.Nodes) -> P.Message:
    """Every host: idle, alloc, draining, alloc+drain or down (with the reason)."""
    rows = []
    for name in d.core.nodes:
        h = d.core.hosts[name]
        if h.down:
            state = "down"
        elif h.owner is not None and h.drain is not None:
            state = "alloc+drain"
        elif h.owner is not None:
            state = "alloc"
        elif h.drain is not None:
            state = "draining"
        else:
            state = "idle"
        rows.append({"name": name, "state": state, "job": h.owner, "drain": h.drain, "reason": h.down})
    return P.Table(rows)


def history(d: Daemon, m: P.History) -> P.Message:
    """Jobs of every state, newest first, selected as the request says."""
    return P.Table([row(d, j) for j in d.store.history(m)])


def info(d: Daemon, m: P.Info) -> P.Message:
    """One job's record, size history and events."""
    j = d.core.jobs.get(m.job_id) or d.store.load_job(m.job_id)
    if j is None:
        raise UnknownJob(f"no job {m.job_id}")
    return P.JobInfo(row(d, j), d.store.steps(m.job_id), d.store.events(m.job_id))


def status(d: Daemon, m: P.Status) -> P.Message:
    """The daemon's identity, settings and counters."""
    return P.StatusReply({
        "address": d.address, "jobs_address": d.job_address, "pid": os.getpid(),
        "controller_id": d.cid, "state": d.config.state, "pool": d.pool.kind,
        "nodes": list(d.pool.nodes), "policy": d.config.policy, "slots": d.config.core.slots,
        "kill_wait": d.config.core.kill_wait, "cgroups": d.cgroups.root is not None, "curve": d.curve_public,
        "users": len(d.users), "uptime": time.time() - d.started, "handled": d.handled, "rejected": d.rejected,
        **d.core.status()})


def shutdown(d: Daemon, m: P.Shutdown) -> P.Message:
    """Stop serving (after cancelling every job, if asked)."""
    d.shutdown = True
    if m.cancel_jobs:
        d.cancel_on_exit = True
        now = time.time()
        for jid in list(d.core.jobs):
            d.handle(Request(now, P.Cancel(jid)))
    return P.Ok()


def add_user(d: Daemon, m: P.AddUser) -> P.Message:
    """Accept user ``m.name``'s key (made from ``m.nonce``); a key they had before stops working."""
    now = time.time()
    again = m.name in d.users
    with d.store.tx():
        d.store.save_user(m.name, m.nonce, now)
        d.store.add_event(None, "user", f"{'new key for' if again else 'added'} user {m.name}", now)
    d.users[m.name] = m.nonce
    return P.Ok()


def remove_user(d: Daemon, m: P.RemoveUser) -> P.Message:
    """Revoke user ``m.name``'s key."""
    if m.name not in d.users:
        raise Refusal(f"no user {m.name}")
    now = time.time()
    with d.store.tx():
        d.store.delete_user(m.name)
        d.store.add_event(None, "user", f"removed user {m.name}", now)
    del d.users[m.name]
    return P.Ok()


def users(d: Daemon, m: P.Users) -> P.Message:
    """Every user and when they got their key."""
    return P.Table([{"name": n, "added": t} for n, (_, t) in sorted(d.store.load_users().items())])


def row(d: Daemon, j: Any) -> dict[str, Any]:
    """A job's public record, with the start the policy expects for it."""
    r = j.public()
    r["expected_start"] = d.core.reservation(j.id)
    return r


VIEWS: dict[type, Callable[[Daemon, Any], P.Message]] = {
    P.Queue: queue,
    P.Nodes: nodes,
    P.History: history,
    P.Info: info,
    P.Status: status,
    P.Shutdown: shutdown,
    P.AddUser: add_user,
    P.RemoveUser: remove_user,
    P.Users: users,
}
"""Requests the daemon answers itself (read-only views, and the operator's commands)."""
