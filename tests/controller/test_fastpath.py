"""The compiled twin of the simulator (rigid jobs under fcfs, easy or conservative) gives exactly the Python
engine's schedule and decision counts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from malleable.controller.sched import get_policy
from malleable.controller.sim import Simulator, Workload, read_swf, synthetic
from malleable.controller.sim._fastpath import run_rigid
from tests._data import HPC2N


def both(w: Workload, policy: str):
    slow = Simulator(w, get_policy(policy), fast=False).run()
    sim = Simulator(w, get_policy(policy))
    assert sim._fast_ok()
    return slow, sim.run()


def same(a, b) -> None:
    assert np.array_equal(a.start, b.start) and np.array_equal(a.end, b.end)
    assert a.passes == b.passes and a.decisions == b.decisions
    assert np.array_equal(a.size, b.size) and np.allclose(a.area, b.area)


@pytest.mark.parametrize("machine", [64, 1024, 16384])
@pytest.mark.parametrize("policy", ["fcfs", "easy", "conservative"])
def test_same_schedule_on_synthetic_workloads(machine, policy):
    same(*both(synthetic(2000, machine=machine, load=0.9, seed=machine), policy))


@pytest.mark.parametrize("policy", ["fcfs", "easy", "conservative"])
def test_same_schedule_on_a_real_trace(policy):
    same(*both(read_swf(HPC2N, limit=10000), policy))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 8), st.integers(0, 40), st.integers(0, 30)),
                min_size=1, max_size=40),
       st.integers(8, 12), st.sampled_from(["fcfs", "easy", "conservative"]))
def test_same_schedule_on_random_workloads_with_ties(rows, machine, policy):
    # small integer times: many equal submits, ends and estimated ends, the cases where orders matter
    w = Workload.from_jobs([(i, float(s), float(r), float(r + x), p) for i, (s, p, r, x) in enumerate(rows, 1)],
                           machine)
    same(*both(w, policy))


def test_the_plain_python_twin_matches_the_compiled_one():
    w = synthetic(500, machine=32, load=0.95, seed=5)
    args = (w.submit.astype(float), w.run.astype(float), w.estimate.astype(float), w.procs.astype(np.int64), 32)
    fast = Simulator(w, get_policy("easy")).run()
    start, end = np.full(500, np.nan), np.full(500, np.nan)
    assert run_rigid(*args, True, start, end) == fast.passes
    assert np.array_equal(start, fast.start) and np.array_equal(end, fast.end)


def test_runs_the_twin_cannot_take_go_through_the_engine():
    w = synthetic(50, machine=16, seed=1)
    easy = get_policy("easy")
    assert not Simulator(w.with_malleable(0.5), easy)._fast_ok()
    assert not Simulator(w, easy, failures=[(10.0, 0, 5.0)])._fast_ok()
    assert not Simulator(w, easy, tick=60.0)._fast_ok()
    assert not Simulator(w, easy, record=[])._fast_ok()
    assert not Simulator(w, easy, nodes=True)._fast_ok()
    assert not Simulator(w, get_policy("mebf0"))._fast_ok()
    assert not Simulator(w, easy, fast=False)._fast_ok()
    assert Simulator(w, get_policy("fcfs"))._fast_ok() and Simulator(w, get_policy("conservative"))._fast_ok()


def test_the_plain_python_conservative_twin_matches():
    from malleable.controller.sim._fastpath import run_conservative

    w = synthetic(400, machine=32, load=0.95, seed=6)
    fast = Simulator(w, get_policy("conservative")).run()
    start, end, res = np.full(400, np.nan), np.full(400, np.nan), np.zeros(1, dtype=np.int64)
    passes = run_conservative(w.submit.astype(float), w.run.astype(float), w.estimate.astype(float),
                              w.procs.astype(np.int64), 32, start, end, res)
    assert passes == fast.passes and int(res[0]) == fast.decisions["Reserve"]
    assert np.array_equal(start, fast.start) and np.array_equal(end, fast.end)
