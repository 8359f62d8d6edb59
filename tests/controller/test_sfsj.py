"""Node stealing (seed 000 §3.1): the toy example of Table 3.1 replayed with a node failure, and the victim
choice cases (b)-(d) of the digest."""

from __future__ import annotations

import numpy as np
import pytest

from malleable.controller import (
    FAILED_PRIORITY,
    Interrupt,
    StartJob,
    Workload,
    get_policy,
    pick_victim,
    sfsj,
    simulate,
)
from malleable.errors import SimulationError

from ._snap import mjob, running, snap

TOY = [(1, 0, 8, 8, 1), (2, 0, 5, 5, 1), (3, 0, 10, 10, 6), (4, 0, 10, 10, 6), (5, 0, 2, 2, 1)]
FAIL = [(1.0, 2, 5.0)]              # P3 (node id 2) fails at t=1 for D=5


def replay(name):
    """Run the toy example with the failure; returns the result, every StartJob as (time, job, nodes), the
    flows and the node-weighted mean flow."""
    pol = get_policy(name)
    starts = []

    def rec(s, now):
        out = pol(s, now)
        starts.extend((now, d.job_id, d.nodes) for d in out if isinstance(d, StartJob))
        return out
    w = Workload.from_jobs(TOY, 8, "toy")
    r = simulate(w, rec, failures=FAIL)
    flow = r.end - w.submit
    return r, starts, flow, float((flow * w.procs).sum() / w.procs.sum())


def test_toy_fault_free_plan():
    r = simulate(Workload.from_jobs(TOY, 8), "baseline")
    assert list(r.start) == [0, 0, 0, 10, 5]                # J4 reserved at 10, J5 backfilled on P2 at 5


def test_toy_baseline():
    """Only 5 nodes free: J3 restarts at t=5 on P2 and P4-P8, ends 15; J4 15-25; J5 backfilled at 1."""
    r, starts, flow, weighted = replay("baseline")
    assert (5.0, 3, {1, 3, 4, 5, 6, 7}) in [(t, j, set(n)) for t, j, n in starts]
    assert list(r.end) == [8, 5, 15, 25, 3] and r.start[4] == 1.0
    assert list(flow) == [8, 5, 15, 25, 3]
    assert flow.mean() == pytest.approx(11.2) and flow.max() == 25 and weighted == pytest.approx(17.0667, abs=1e-4)


def test_toy_sfsj():
    """J2 is the victim: J3 restarts at 1 on P2 and P4-P8 (ends 11); J2 reruns on P3 from 6 (its repair) to
    11; J4 runs 11-21; J5 on P1 from 8 to 10."""
    r, starts, flow, weighted = replay("sfsj")
    assert (1.0, 3, {1, 3, 4, 5, 6, 7}) in [(t, j, set(n)) for t, j, n in starts]
    assert (6.0, 2, (2,)) in starts and (8.0, 5, (0,)) in starts and (11.0, 4, tuple(starts[-1][2])) in starts
    assert list(flow) == [8, 11, 11, 21, 10]
    assert flow.mean() == pytest.approx(12.2) and flow.max() == 21 and weighted == pytest.approx(14.7333, abs=1e-4)
    assert list(r.restarts) == [0, 1, 1, 0, 0]
    assert r.lost[2] == pytest.approx(6.0) and r.lost[1] == pytest.approx(1.0)   # work thrown away at t=1


def test_victim_choice_b():
    """No free node (other than the 3 surviving nodes of F, which needs 4). A (2 nodes, released 10), B (2,
    released 20), C (8, released 5): B is interrupted and F restarts at once on its nodes and B's."""
    a = running(mjob(1, 2, 100, submit=10.0), 2, start=10.0)
    b = running(mjob(2, 2, 100, submit=20.0), 2, start=20.0)
    c = running(mjob(3, 8, 100, submit=5.0), 8, start=5.0)
    f = mjob(4, 4, 100, priority=FAILED_PRIORITY)
    assert pick_victim(f, [a, b, c], 30.0).id == 2
    out = sfsj(snap(30.0, (50, 51, 52), run=[a, b, c], queue=[f]), 30.0)
    assert out[0] == Interrupt(2, 1)
    assert out[1] == StartJob(4, (50, 51, 52) + b.nodes[:1])


def test_victim_choice_c_no_steal_when_not_smaller():
    a = running(mjob(1, 2, 100, submit=10.0), 2, start=10.0)
    b = running(mjob(2, 2, 100, submit=20.0), 2, start=20.0)
    f = mjob(4, 2, 100, priority=FAILED_PRIORITY)
    assert pick_victim(f, [a, b], 30.0) is None
    assert not [d for d in sfsj(snap(30.0, (50,), run=[a, b], queue=[f]), 30.0) if isinstance(d, Interrupt)]


def test_victim_choice_d_free_node_no_steal():
    a = running(mjob(1, 2, 100, submit=10.0), 2, start=10.0)
    f = mjob(4, 4, 100, priority=FAILED_PRIORITY)
    out = sfsj(snap(30.0, (50, 51, 52, 7), run=[a], queue=[f]), 30.0)
    assert not [d for d in out if isinstance(d, Interrupt)] and StartJob(4, (50, 51, 52, 7)) in out


def test_bad_failure_spec():
    with pytest.raises(SimulationError):
        simulate(Workload.from_jobs(TOY, 8), "baseline", failures=[(1.0, 99, 5.0)])


def test_failures_on_a_random_trace_lose_no_job():
    rng = np.random.default_rng(3)
    rows = [(i, float(i * 7), float(rng.integers(5, 80)), 90.0, int(rng.integers(1, 9))) for i in range(1, 60)]
    w = Workload.from_jobs(rows, 16)
    fails = [(float(t), int(x), 30.0) for t, x in zip(rng.uniform(0, 400, 12), rng.integers(0, 16, 12))]
    for pol in ("baseline", "sfsj"):
        r = simulate(w, pol, failures=fails)
        assert not np.isnan(r.end).any()
        assert np.allclose(r.area - r.lost, w.run * w.procs)    # every job's work done exactly once


def test_incremental_hints_give_the_same_schedule_with_failures():
    """On the HPC2N prefix (10^4 jobs, ~600 failures): the conservative profile kept across passes while nodes
    are down gives the schedule of a full rebuild at every pass (this prefix caught a stale-profile bug)."""
    from malleable.controller import read_swf
    from malleable.controller.experiments import failure_plan
    from tests._data import HPC2N
    w = read_swf(HPC2N, limit=10000)
    fails = failure_plan(w.machine, float(w.submit[0]), float(w.submit[-1]), 6 * 3600.0, 3600.0, seed=5)
    for pol in ("baseline", "sfsj"):
        a = simulate(w, pol, failures=fails)
        b = simulate(w, pol, failures=fails, hints=False)
        assert np.array_equal(a.end, b.end) and np.array_equal(a.start, b.start)
