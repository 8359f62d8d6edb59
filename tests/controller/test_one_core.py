"""The scheduling core is one: every registered policy, run by the simulator and by the live controller's core
fed with the simulator's own events, makes the same decisions at every pass.

The simulator records what happened (submissions, job ends, node failures and repairs, passes with the decisions
it applied). The live core gets the same events at the same times, plus what the daemon and the jobs' runtimes
would send in between (launch acknowledgements, registrations, resize orders fetched and committed, interrupted
jobs exiting, hosts checked clean, progress and MTCT reports), and its policy calls are recorded. The two
decision sequences must be equal.
"""

from __future__ import annotations

import numpy as np
import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._core import Core, CoreConfig
from malleable.controller.daemon._events import (
    HostClean,
    HostDown,
    HostUp,
    JobExited,
    JobLaunched,
    Launch,
    Reply,
    Request,
    Schedule,
    Stop,
)
from malleable.controller.experiments import failure_plan
from malleable.controller.sched import POLICIES, JobKind, declared, get_policy, mtct_amdahl
from malleable.controller.sim import Simulator, Workload, synthetic

HOSTS = tuple(f"h{i}" for i in range(1, 9))
FAILING = ("baseline", "sfsj")


def workload(seed: int = 25) -> Workload:
    """36 jobs on 8 nodes, half malleable; each job declares either an Amdahl fraction or a rho, as live."""
    w = synthetic(36, machine=len(HOSTS), load=0.95, seed=seed).with_malleable(0.5, seed=seed, serial=(0.0, 0.1))
    rng = np.random.default_rng(seed)
    rho = np.where(rng.random(len(w)) < 0.5, rng.uniform(0.0, 0.3, len(w)), 0.0)
    assert w.serial is not None
    w.serial = np.where(rho > 0, 0.0, w.serial)
    w.rho = rho
    return w


def seen(snap) -> tuple:
    """What a policy reads in a snapshot (MTCT only of malleable jobs: rigid ones report none live)."""
    run = tuple((r.id, r.nodes, r.start, r.since, r.progress, r.end_estimate, r.resizes,
                 r.mtct if r.job.kind is JobKind.MALLEABLE else None) for r in snap.running)
    return (snap.free, tuple(j.id for j in snap.queue), tuple(j.priority for j in snap.queue), run, snap.down,
            dict(snap.reservations or {}))


def speedup_of(job) -> str:
    return f"rho:{job.rho!r}" if job.rho > 0 else f"amdahl:{job.serial!r}"


class Live:
    """The live core with a stand-in for the daemon and the runtimes: every acknowledgement arrives at once."""

    def __init__(self, name: str) -> None:
        pol = get_policy(name)
        self.decisions: list[tuple[float, list]] = []

        def recording(snap, now):
            out = pol(snap, now)
            self.decisions.append((now, list(out)))
            self.seen.append(seen(snap))
            return out

        self.seen: list[tuple] = []
        self.core = Core(HOSTS, recording, CoreConfig(ack_timeout=1e12, drain_grace=1e12), policy_name=name)
        self.core.take_actions()
        self.todo: list = []

    def do(self, event) -> list:
        out = self.core.handle(event)
        self.todo += [a for a in out if type(a) in (Launch, Stop)]
        return out

    def req(self, msg, now: float):
        return [a.msg for a in self.do(Request(now, msg)) if type(a) is Reply][0]

    def submit(self, job, now: float) -> None:
        mall = job.kind is JobKind.MALLEABLE
        reply = self.req(P.Submit(f"j{job.id}", ["prog"], job.procs, job.min_procs, job.max_procs, mall,
                                  job.estimate, "", "", "/", {}, speedup_of(job)), now)
        assert reply.job_id == job.id, "live and simulated job ids must match"

    def settle(self, now: float) -> None:
        """Carry everything the daemon and the runtimes would do right away, until nothing is left."""
        core = self.core
        for _ in range(1000):
            progressed = False
            while self.todo:
                a = self.todo.pop(0)
                progressed = True
                if type(a) is Launch:
                    j = a.job
                    self.do(JobLaunched(now, j.id, 10000 + j.id, 0.0))
                    if j.malleable:
                        self.req(P.Register(j.id, 10000 + j.id, j.hosts[0], len(j.hosts), list(j.hosts)), now)
                else:
                    self.do(JobExited(now, a.job_id, 143))
            for j in sorted(core.jobs.values(), key=lambda j: (j.order is None or j.order.kind != "shrink", j.id)):
                o = j.order
                if o is None or j.state != "RUNNING":
                    continue
                order = self.req(P.Poll(j.id, 1), now)
                if type(order) is P.Order:
                    self.req(P.Committed(j.id, o.seq, o.kind, len(j.hosts), len(o.target), 0.0, list(o.removed),
                                         list(o.target), 0), now)
                    progressed = True
            for h in core.draining():
                self.do(HostClean(now, h.name))
                progressed = True
            if not progressed:
                return
        raise AssertionError("the live core did not settle")

    def report(self, jid: int, now: float, **data) -> None:
        j = self.core.jobs.get(jid)
        if j is not None and j.state == "RUNNING" and j.malleable:
            self.req(P.Progress(jid, "main", {"kind": "elastic", **data}), now)


def replay(name: str, record: list) -> Live:
    live = Live(name)
    for entry in record:
        kind, now = entry[0], entry[1]
        if kind == "submit":
            live.submit(entry[2], now)
        elif kind == "end":
            live.do(JobExited(now, entry[2], 0))
        elif kind == "down":
            live.do(HostDown(now, entry[2], "failure", entry[3]))
        elif kind == "up":
            live.do(HostUp(now, entry[2]))
        elif kind == "pass":
            live.settle(now)
            effects = entry[3]
            for e in effects:          # the runtime reports how far it got before the pass resizes it
                if e[0] == "resize":
                    live.report(e[1].job.id, now, fraction=e[2].progress, mtct=e[1].mtct)
            live.do(Schedule(now))
            live.settle(now)
            for e in effects:          # and its MTCT at the size it now runs on
                v = e[1] if e[0] == "start" else e[2] if e[0] == "resize" else None
                if v is not None and v.mtct is not None:
                    live.report(v.job.id, now, mtct=v.mtct)
    return live


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_decides_the_same_live_and_simulated(name):
    w = workload()
    failures = ()
    if name in FAILING:
        plan = failure_plan(len(HOSTS), float(w.submit[0]), float(w.submit[-1]), 2000.0, 900.0, seed=5)
        failures = [(t, HOSTS[x], d) for t, x, d in plan]
        assert failures
    sim_decisions: list[tuple[float, list]] = []
    sim_seen: list[tuple] = []
    pol = get_policy(name)

    def recording(snap, now):
        out = pol(snap, now)
        sim_decisions.append((now, list(out)))
        sim_seen.append(seen(snap))
        return out

    record: list = []
    Simulator(w, recording, name=name, speedup=declared, node_ids=HOSTS, hints=False, failures=failures,
              mtct=mtct_amdahl, record=record, order="pool").run()
    live = replay(name, record)
    assert len(live.decisions) == len(sim_decisions)
    for (t_live, live_d), (t_sim, sim_d), live_s, sim_s in zip(live.decisions, sim_decisions, live.seen, sim_seen,
                                                                strict=True):
        assert t_live == t_sim
        assert live_s == sim_s, f"snapshot at t={t_sim}"
        assert live_d == sim_d, f"pass at t={t_sim}"
    acted = [d for _, ds in sim_decisions for d in ds if type(d).__name__ in ("StartJob", "ResizeJob", "Interrupt")]
    assert len({d.job_id for d in acted if type(d).__name__ == "StartJob"}) == len(w)   # every job started
    rigid_only = ("fcfs", "easy", "conservative", "baseline", "fcfs-easy", "fcfs-bb", "sjf-bb", "filler", "plan-1",
                  "plan-2")
    at_points_only = ("fcfsm", "io-aware") + tuple(f"io-aware-0.{k}" for k in range(2, 7))   # no phases here
    if name not in rigid_only + at_points_only:
        kinds = {type(d).__name__ for d in acted}
        assert kinds & {"ResizeJob", "Interrupt"}, f"{name} made no resize or interruption on this workload"
    assert live.core.jobs == {}                 # every job ended live too
