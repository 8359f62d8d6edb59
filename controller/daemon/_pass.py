"""The live core's scheduling pass: the policy on the ledger's snapshot, its decisions through the ledger's
decision path, and what each applied decision means live (hosts granted, resize orders, interruptions).

A shrink always releases the job's newest hosts (the runtime frees its newest spawn groups), so when a policy
names others the pass swaps the names for the rest of the pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, cast

from malleable.controller.sched._ledger import Applied, Effect, Ledger
from malleable.controller.sched._model import NodeId, ResizeJob, RunningJob, Snapshot, StartJob

from ._events import Schedule
from ._fsrecord import FsPhase
from ._jobs import Jobs
from ._link import Link
from ._records import JobState, ResizeOrder
from ._state import CoreConfig, CoreState, Outbox, Part, host_list
from ._storage import Storage

__all__ = ["Pass", "Policy"]

log = logging.getLogger(__name__)

Policy = Callable[[Snapshot, float], list[Any]]
"""``decide(snapshot, now) -> list[Decision]``: a simulator policy, used unchanged."""


class Pass(Part):
    """Scheduling passes and the decision path with its live effects.

    Args:
        policy: the policy; ``policy_name`` is shown in logs and status.
        jobs: starts, stops and interrupts jobs; ``link`` tells a job its request was declined; ``storage`` gives
            the pending reasons of jobs waiting for the burst buffer.
    """

    def __init__(self, state: CoreState, ledger: Ledger, out: Outbox, config: CoreConfig, policy: Policy,
                 policy_name: str, jobs: Jobs, link: Link, storage: Storage) -> None:
        super().__init__(state, ledger, out, config)
        self.policy = policy
        self.policy_name = policy_name
        self.jobs = jobs
        self.link = link
        self.storage = storage

    def schedule(self, e: Schedule) -> None:
        now, st = e.now, self.state
        st.passes += 1
        st.wakes = [w for w in st.wakes if w > now]
        snap = self.snapshot(now)
        try:
            decisions = list(self.policy(snap, now))
        except Exception as exc:  # noqa: BLE001 - a failing policy must not stop the daemon
            self.reject(f"the policy raised {type(exc).__name__}: {exc}", now)
            return
        decisions = _newest_first(decisions, snap)
        done = self.apply(decisions, now)
        for d, why in done.rejected:
            self.reject(f"{d!r}: {why}", now)
        for d, why in done.deferred:
            log.debug("pass at %.3f: deferred %r: %s", now, d, why)
        for jid in st.holding:                  # interrupted in this pass: out of sight until their processes end
            if jid in self.ledger.queued and jid in st.held:
                self.ledger.dequeue(jid, keep_reservation=True)
        st.holding.clear()
        self.jobs.launch_ready(now)
        self.storage.stage_early(now)
        self.storage.reasons()

    def snapshot(self, now: float) -> Snapshot:
        """The machine as the policy sees it (jobs with an order in flight at their target size)."""
        self.refresh_busy(now)
        return self.ledger.snapshot(now)

    def refresh_busy(self, now: float) -> None:
        """Tell the ledger which jobs cannot take a decision now, and why."""
        busy = self.ledger.busy
        busy.clear()
        for j in self.state.jobs.values():
            if j.state == JobState.PENDING and j.fs.phase == FsPhase.STARTING:
                busy[j.id] = "its stage-in runs"          # an early stage-in: started once its data is in place
                continue
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
            elif self.state.backoff.get(j.id, 0.0) > now:
                busy[j.id] = "backing off after a refused order"

    def apply(self, decisions: list[Any], now: float) -> Applied:
        """Decisions through the ledger's decision path (bad ones rejected, not raised), each applied one carried
        out live at once."""
        return self.ledger.apply(decisions, now, strict=False, sink=lambda ef: self.effect(ef, now))

    def reject(self, text: str, now: float) -> None:
        st = self.state
        st.policy_errors += 1
        st.last_error = f"t={now:.3f}: {text}"[:500]
        log.error("policy %s: decision rejected at %.3f: %s", self.policy_name, now, text)

    def effect(self, ef: Effect, now: float) -> None:
        kind = ef[0]
        if kind == "start":
            self.started(ef[1], now)
        elif kind == "resize":
            self.ordered(ef[1], ef[2], now)
        elif kind == "interrupt":
            j = self.state.jobs[ef[1].job.id]
            self.jobs.interrupted(j, ef[2], now, "interrupted by the policy")
        elif kind == "decline":
            self.link.declined(ef[1], ef[2], now)
        else:
            self.state.wakes.append(ef[1])

    def started(self, v: RunningJob, now: float) -> None:
        j = self.state.jobs[v.job.id]
        for n in _hosts(v.nodes):
            self.out.set_host(n, owner=j.id)
        j.state, j.hosts, j.launched, j.reason = JobState.STARTING, list(_hosts(v.nodes)), False, ""
        self.keep_view(j)
        self.out.save(j)

    def ordered(self, old: RunningJob, new: RunningJob, now: float) -> None:
        j = self.state.jobs[new.job.id]
        cur = list(j.hosts)
        old_nodes, new_nodes = _hosts(old.nodes), _hosts(new.nodes)
        if new.size < old.size:
            gone = tuple(n for n in old_nodes if n not in set(new_nodes))
            for n in gone:
                self.out.set_host(n, owner=None, drain=j.id, drain_since=0.0)
            added: tuple[str, ...] = ()
            kind = "shrink"
        else:
            gone = ()
            added = tuple(n for n in new_nodes if n not in set(old_nodes))
            for n in added:
                self.out.set_host(n, owner=j.id)
            kind = "expand"
        j.seq += 1
        j.order = ResizeOrder(j.seq, kind, new_nodes, added, gone, new.size * self.config.slots, now,
                              0.0, (old.since, old.progress, old.end_estimate, old.resizes))
        self.keep_view(j)
        self.out.save(j)
        self.out.log_event(j.id, "order", f"order {j.seq}: {kind} {len(cur)} -> {new.size} nodes "
                           f"({'+' + host_list(added) if added else '-' + host_list(gone)})", now)


def _hosts(nodes: Sequence[NodeId]) -> tuple[str, ...]:
    """Node ids of the live ledger are host names."""
    return cast("tuple[str, ...]", tuple(nodes))


def _newest_first(decisions: list[Any], snap: Snapshot) -> list[Any]:
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
