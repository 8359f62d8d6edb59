"""The live core's handlers of what the daemon finds out about hosts: checked empty after a job, down, back up.
A host found down interrupts the job on it (re-queued with the failed jobs' priority); a host back up is checked
empty before reuse."""

from __future__ import annotations

from malleable.controller.sched._ledger import Ledger
from malleable.controller.sched._model import FAILED_PRIORITY

from ._events import DeleteHost, HostClean, HostDown, HostUp
from ._fsscale import FsScaling
from ._jobs import Jobs
from ._mountplan import MountPlan
from ._state import CoreConfig, CoreState, Outbox, Part

__all__ = ["Hosts"]


class Hosts(Part):
    """Host checks and failures.

    Args:
        jobs: the job life cycle (an interrupted job; jobs waiting for clean hosts).
        scaling: a host checked empty may be kept for a file system that took it back.
        mounts: a host checked empty after its job left it loses that job's mount.
    """

    def __init__(self, state: CoreState, ledger: Ledger, out: Outbox, config: CoreConfig, jobs: Jobs,
                 scaling: FsScaling, mounts: MountPlan) -> None:
        super().__init__(state, ledger, out, config)
        self.jobs = jobs
        self.scaling = scaling
        self.mounts = mounts

    def clean(self, e: HostClean) -> None:
        st = self.state
        h = st.hosts.get(e.host)
        if h is None or h.drain is None:
            return
        job = h.drain
        if e.host not in st.pool:
            self.out.emit(DeleteHost(e.host))
            del st.hosts[e.host]
        else:
            self.out.set_host(e.host, drain=None, drain_since=0.0)
            self.scaling.host_checked(e.host, e.now)   # free for every policy, or kept for a data server
        self.jobs.release_held()
        self.out.log_event(job, "host-free", f"{e.host}: no process of job {job} left; host reusable", e.now)
        self.mounts.host_free(job, e.host)
        self.jobs.launch_ready(e.now)

    def down(self, e: HostDown) -> None:
        h = self.state.hosts.get(e.host)
        if h is None:
            return
        if h.down:                              # already down: the later expected repair wins
            self.ledger.node_down(e.host, e.until)
            return
        self.out.set_host(e.host, down=e.reason[:200] or "down")
        self.out.log_event(h.owner, "host-down", f"{e.host}: {e.reason[:200]}", e.now)
        jid = self.ledger.node_down(e.host, e.until)
        if jid is not None and jid in self.state.jobs:
            v = self.ledger.view(jid)
            assert v is not None
            self.ledger.requeue(v, FAILED_PRIORITY)
            self.jobs.interrupted(self.state.jobs[jid], FAILED_PRIORITY, e.now, f"host {e.host} is down",
                                  in_pass=False)
        self.jobs.release_held()

    def up(self, e: HostUp) -> None:
        h = self.state.hosts.get(e.host)
        if h is None or not h.down:
            return
        self.out.set_host(e.host, down="")
        self.ledger.node_up(e.host)
        if h.drain is not None:
            self.ledger.dirty.add(e.host)
        self.out.log_event(None, "host-up", f"{e.host} answers again", e.now)
        self.jobs.launch_ready(e.now)
