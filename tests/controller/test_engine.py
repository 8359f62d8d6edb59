"""Engine: malleable resizes under Amdahl's law, reconfiguration cost, and validation of bad decisions."""

from __future__ import annotations

import numpy as np
import pytest

from malleable.controller import (
    JobKind,
    ResizeJob,
    Simulator,
    Snapshot,
    StartJob,
    Wake,
    Workload,
    amdahl,
    linear_reconfig_cost,
    simulate,
)
from malleable.errors import PolicyError, SimulationError


def malleable_one(run=100.0, est=200.0, procs=4, serial=0.2, machine=16):
    w = Workload.from_jobs([(7, 0, run, est, procs)], machine)
    w = w.with_malleable(1.0, seed=0, min_factor=0.25, max_factor=4.0)
    w.serial = np.array([serial])
    return w


def resize_at(t_resize, size, seen):
    """Start the job on 4 nodes at 0, ask for a pass at ``t_resize`` and grow/shrink it to ``size`` nodes."""
    def policy(s: Snapshot, now: float):
        seen.append(s)
        if s.queue:
            return [StartJob(s.queue[0].id, s.free[:s.queue[0].procs]), Wake(t_resize)]
        if now == t_resize and s.running:
            r = s.running[0]
            extra = tuple(x for x in s.free if x not in r.nodes)
            nodes = r.nodes[:size] if size <= r.size else r.nodes + extra[:size - r.size]
            return [ResizeJob(r.id, nodes)]
        return []
    return policy


def test_amdahl_time_factor_by_hand():
    w = malleable_one()
    job = w.job(0)
    assert job.kind is JobKind.MALLEABLE and job.serial == 0.2
    assert amdahl(job, 8) == pytest.approx((0.2 + 0.8 / 8) / (0.2 + 0.8 / 4))   # 0.3 / 0.4 = 0.75
    assert amdahl(job, 2) == pytest.approx(0.6 / 0.4)


def test_expand_recomputes_end_under_amdahl():
    """100 s of work on 4 nodes, serial 0.2. At 50 half is done; on 8 nodes the job takes 0.75 x 100 = 75 s,
    so the other half takes 37.5 s: end 87.5. The estimate (200 s at 4 nodes) gives 50 + 0.5 x 150 = 125."""
    seen: list[Snapshot] = []
    r = simulate(malleable_one(), resize_at(50.0, 8, seen))
    assert r.end[0] == pytest.approx(87.5)
    assert r.resizes[0] == 1
    assert r.area[0] == pytest.approx(4 * 50 + 8 * 37.5)
    assert [s.now for s in seen] == [0.0, 50.0, 87.5]


def test_shrink_with_reconfiguration_cost():
    """Shrink 4 -> 2 at 40 with cost alpha*dN + beta/N + b*dN = 1*2 + 6/6 + 0.5*2 = 4 s: 0.4 done, 2 nodes take
    1.5 x 100 = 150 s, so the end is 40 + 4 + 0.6 x 150 = 134."""
    cost = linear_reconfig_cost(1.0, 6.0, 0.5)
    r = simulate(malleable_one(), resize_at(40.0, 2, []), reconfig_cost=cost)
    assert r.end[0] == pytest.approx(134.0)
    assert r.area[0] == pytest.approx(4 * 40 + 2 * 94)


def test_running_view_after_resize_has_progress_and_estimate():
    views = []

    def policy(s, now):
        if s.queue:
            return [StartJob(s.queue[0].id, s.free[:4]), Wake(50.0), Wake(60.0)]
        if now == 50.0:
            r = s.running[0]
            return [ResizeJob(r.id, r.nodes + tuple(x for x in s.free[:4]))]
        if now == 60.0:
            views.append(s.running[0])
        return []
    simulate(malleable_one(), policy)
    v = views[0]
    assert v.size == 8 and v.progress == pytest.approx(0.5) and v.since == 50.0 and v.start == 0.0
    assert v.end_estimate == pytest.approx(125.0)
    assert v.resizes == 1


@pytest.mark.parametrize("bad", ["rigid-resize", "busy-nodes", "double-start", "size", "unknown", "wake-past",
                                 "not-tuple"])
def test_invalid_decisions_raise_policy_error(bad):
    w = Workload.from_jobs([(1, 0, 10, 10, 2), (2, 0, 10, 10, 2)], 4)

    def policy(s, now):
        if now > 0 or not s.queue:
            return []
        a, b = s.queue
        if bad == "rigid-resize":
            return [StartJob(1, s.free[:2]), ResizeJob(1, s.free[:3])]
        if bad == "busy-nodes":
            return [StartJob(1, s.free[:2]), StartJob(2, s.free[:2])]
        if bad == "double-start":
            return [StartJob(1, s.free[:2]), StartJob(1, s.free[2:4])]
        if bad == "size":
            return [StartJob(1, s.free[:3])]
        if bad == "unknown":
            return [StartJob(99, s.free[:2])]
        if bad == "wake-past":
            return [Wake(now)]
        return [StartJob(1, list(s.free[:2]))]
    with pytest.raises(PolicyError, match="t=0"):
        simulate(w, policy)


def test_a_policy_that_never_starts_jobs_is_reported():
    w = Workload.from_jobs([(1, 0, 10, 10, 2)], 4)
    with pytest.raises(SimulationError, match="left queued"):
        simulate(w, lambda s, now: [])


def test_string_node_ids_and_determinism():
    w = Workload.from_jobs([(i, i, 5 + i % 3, 10, 1 + i % 4) for i in range(1, 30)], 6)
    names = [f"n{i}" for i in range(6)]
    a = simulate(w, "easy", node_ids=names)
    b = simulate(w, "easy", node_ids=names)
    assert np.array_equal(a.start, b.start) and np.array_equal(a.end, b.end)
    c = simulate(w, "easy")
    assert np.array_equal(a.start, c.start)


def test_unknown_policy_name():
    with pytest.raises(PolicyError, match="known: .*conservative, .*easy, .*fcfs"):
        simulate(Workload.from_jobs([(1, 0, 1, 1, 1)], 1), "sjf")


def test_simulator_runs_once():
    sim = Simulator(Workload.from_jobs([(1, 0, 1, 1, 1)], 1), lambda s, n: [StartJob(1, s.free[:1])] if s.queue
                    else [])
    sim.run()
    with pytest.raises(SimulationError):
        sim.run()


def test_a_kept_snapshot_does_not_change():
    """The engine hands out a view of its queue; a snapshot the policy keeps is frozen before the queue moves."""
    kept = []

    def policy(s, now):
        kept.append(s)
        return [StartJob(j.id, s.free[:j.procs]) for j in list(s.queue)[:1] if j.procs <= s.n_free]
    w = Workload.from_jobs([(1, 0, 10, 10, 4), (2, 0, 10, 10, 4), (3, 1, 5, 5, 4)], 4)
    simulate(w, policy)
    # passes at 0 (start 1), 1 (J3 arrives, nothing fits), 10 (start 2), 20 (start 3), 25 (empty)
    assert [[j.id for j in s.queue] for s in kept] == [[1, 2], [2, 3], [2, 3], [3], []]
    assert [s.now for s in kept] == [0, 1, 10, 20, 25]
