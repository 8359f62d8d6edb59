"""The live core's scheduling pass: the policy on the ledger's snapshot, its decisions through the ledger's
decision path, and what each applied decision means live (hosts granted, resize orders, interruptions). Plain
functions over the :class:`~._core.Core` they are given."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from malleable.controller.sched._ledger import Effect
from malleable.controller.sched._model import NodeId, ResizeJob, RunningJob, Snapshot, StartJob

from . import _link, _storage
from ._events import Schedule
from ._records import JobRec, JobState, ResizeOrder

if TYPE_CHECKING:
    from ._core import Core

__all__ = ["interrupted", "refresh_busy", "schedule"]

log = logging.getLogger(__name__)


def refresh_busy(core: Core, now: float) -> None:
    busy = core.ledger.busy
    busy.clear()
    for j in core.jobs.values():
        if j.reason == "INTERRUPTED" and j.state == JobState.RUNNING:
            busy[j.id] = "its processes are being stopped"
            continue
        if not j.malleable or j.state not in (JobState.STARTING, JobState.RUNNING):
            continue
        if j.order:
            busy[j.id] = f"order {j.order.seq} in flight"
        elif j.state == JobState.STARTING or not j.registered:
            busy[j.id] = "its runtime has not registered yet"
        elif j.cancel:
            busy[j.id] = "it is being stopped"
        elif core.backoff.get(j.id, 0.0) > now:
            busy[j.id] = "backing off after a refused order"


def schedule(core: Core, e: Schedule) -> None:
    now = e.now
    core.passes += 1
    core.wakes = [w for w in core.wakes if w > now]
    snap = core.snapshot(now)
    try:
        decisions = list(core.policy(snap, now))
    except Exception as exc:  # noqa: BLE001 - a failing policy must not stop the daemon
        reject(core, f"the policy raised {type(exc).__name__}: {exc}", now)
        return
    decisions = _newest_first(decisions, snap)
    done = core.ledger.apply(decisions, now, strict=False, sink=lambda ef: effect(core, ef, now))
    for d, why in done.rejected:
        reject(core, f"{d!r}: {why}", now)
    for d, why in done.deferred:
        log.debug("pass at %.3f: deferred %r: %s", now, d, why)
    for jid in core.holding:                  # interrupted in this pass: out of sight until their processes end
        if jid in core.ledger.queued and jid in core.held:
            core.ledger.dequeue(jid, keep_reservation=True)
    core.holding.clear()
    core.launch_ready(now)
    _storage.reasons(core)


def reject(core: Core, text: str, now: float) -> None:
    core.policy_errors += 1
    core.last_error = f"t={now:.3f}: {text}"[:500]
    log.error("policy %s: decision rejected at %.3f: %s", core.policy_name, now, text)


def effect(core: Core, ef: Effect, now: float) -> None:
    kind = ef[0]
    if kind == "start":
        started(core, ef[1], now)
    elif kind == "resize":
        ordered(core, ef[1], ef[2], now)
    elif kind == "interrupt":
        j = core.jobs[ef[1].job.id]
        interrupted(core, j, ef[2], now, "interrupted by the policy")
    elif kind == "decline":
        _link.declined(core, ef[1], ef[2], now)
    else:
        core.wakes.append(ef[1])


def _hosts(nodes: Sequence[NodeId]) -> tuple[str, ...]:
    """Node ids of the live ledger are host names."""
    return cast("tuple[str, ...]", tuple(nodes))


def started(core: Core, v: RunningJob, now: float) -> None:
    j = core.jobs[v.job.id]
    for n in _hosts(v.nodes):
        core.set_host(n, owner=j.id)
    j.state, j.hosts, j.launched, j.reason = JobState.STARTING, list(_hosts(v.nodes)), False, ""
    core.keep_view(j)
    core.save(j)


def ordered(core: Core, old: RunningJob, new: RunningJob, now: float) -> None:
    j = core.jobs[new.job.id]
    cur = list(j.hosts)
    old_nodes, new_nodes = _hosts(old.nodes), _hosts(new.nodes)
    if new.size < old.size:
        gone = tuple(n for n in old_nodes if n not in set(new_nodes))
        for n in gone:
            core.set_host(n, owner=None, drain=j.id, drain_since=0.0)
        added: tuple[str, ...] = ()
        kind = "shrink"
    else:
        gone = ()
        added = tuple(n for n in new_nodes if n not in set(old_nodes))
        for n in added:
            core.set_host(n, owner=j.id)
        kind = "expand"
    j.seq += 1
    j.order = ResizeOrder(j.seq, kind, new_nodes, added, gone, new.size * core.config.slots, now,
                          0.0, (old.since, old.progress, old.end_estimate, old.resizes))
    core.keep_view(j)
    core.save(j)
    core.log_event(j.id, "order", f"order {j.seq}: {kind} {len(cur)} -> {new.size} nodes "
                f"({'+' + ','.join(added) if added else '-' + ','.join(gone)})", now)


def interrupted(core: Core, j: JobRec, priority: int, now: float, why: str, in_pass: bool = True) -> None:
    """The ledger stopped and re-queued job ``j``: stop its processes. Until they are gone and its hosts checked
    clean it is *held*: out of the queue the policies see, from the end of the pass that interrupted it (or at
    once, after a host failure), so a policy first sees it again when it could really restart (SFSJ considers a
    failed job once). A job that never ran is simply queued again."""
    j.priority = priority
    if not j.launched:
        hosts = core.all_hosts(j)
        core.forget_unlaunched(j, now)
        for name in hosts:                 # it never ran there: hosts without an older job's leftovers
            if core.hosts[name].drain is None:
                core.ledger.clean(name)
        j.state, j.reason, j.view = JobState.PENDING, "Requeued", None
        core.ledger.enqueue(core.to_job(j))
        core.save(j)
        core.log_event(j.id, "requeue", f"{why}; back in the queue with priority {j.priority}", now)
        return
    core.ledger.busy[j.id] = "its processes are being stopped"      # queued, but not started before they end
    core.held.add(j.id)
    if in_pass:
        core.holding.append(j.id)
    else:
        core.ledger.dequeue(j.id, keep_reservation=True)
    for name in core.all_hosts(j):
        h = core.hosts[name]
        if h.owner == j.id:
            core.set_host(name, owner=None, drain=j.id, drain_since=0.0)
    j.cancel, j.reason, j.view = False, "INTERRUPTED", None
    core.log_event(j.id, "interrupt", f"{why}; stopping it", now)
    core.stop(j, now, "interrupted")


def _newest_first(decisions: list, snap: Snapshot) -> list:
    """Rewrite a pass's shrinks to release each job's newest nodes (what the runtime frees), renaming the nodes
    consistently in the other decisions of the pass."""
    rename: dict[Any, Any] = {}
    views = None
    for d in decisions:
        if type(d) is not ResizeJob:
            continue
        if views is None:
            views = {r.id: r for r in snap.running}
        v = views.get(d.job_id)
        if v is None or len(d.nodes) >= v.size or not set(d.nodes) <= set(v.nodes):
            continue
        k = len(d.nodes)
        gone = v.nodes[k:]
        wanted_gone = [n for n in v.nodes if n not in set(d.nodes)]
        rename.update(zip([n for n in wanted_gone if n not in gone], [n for n in gone if n not in wanted_gone],
                          strict=True))
    if not rename:
        return decisions
    out = []
    for d in decisions:
        if type(d) is ResizeJob and d.job_id in (views or {}) and len(d.nodes) < views[d.job_id].size:  # type: ignore[index]
            v = views[d.job_id]  # type: ignore[index]
            out.append(ResizeJob(d.job_id, v.nodes[:len(d.nodes)]) if set(d.nodes) <= set(v.nodes) else d)
        elif type(d) in (StartJob, ResizeJob):
            out.append(type(d)(d.job_id, tuple(rename.get(n, n) for n in d.nodes)))
        else:
            out.append(d)
    return out
