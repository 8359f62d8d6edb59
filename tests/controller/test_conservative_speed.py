"""The fast conservative backfilling (bytearray profile) against the straightforward reference implementation:
identical decisions at every pass (start times, reservations) on generated, synthetic and HPC2N workloads."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from malleable.controller import Remember, Workload, read_swf, simulate, synthetic
from malleable.controller.sched._conservative import conservative, conservative_reference
from tests._data import HPC2N


def recording(policy, log):
    def wrapped(snapshot, now):
        out = policy(snapshot, now)
        log.append((now, [d for d in out if not isinstance(d, Remember)]))
        return out
    return wrapped


def assert_same(w: Workload, hints: bool = True) -> None:
    """Both implementations make exactly the same decisions at every pass (so the same schedule)."""
    fast_log: list = []
    ref_log: list = []
    fast = simulate(w, recording(conservative, fast_log), hints=hints)
    ref = simulate(w, recording(conservative_reference, ref_log), hints=hints)
    assert np.array_equal(fast.start, ref.start)
    assert fast.passes == ref.passes
    assert fast_log == ref_log
    assert fast.decisions == ref.decisions


@st.composite
def workloads(draw, max_machine=12):
    machine = draw(st.integers(2, max_machine))
    n = draw(st.integers(1, 40))
    rows, t = [], 0
    for i in range(n):
        t += draw(st.sampled_from([0, 0, 1, 3, 7, 20]))
        run = draw(st.sampled_from([0, 1, 2, 5, 9, 30]))
        est = run + draw(st.sampled_from([0, 0, 1, 10, 40, 0.5]))
        rows.append((i + 1, t, run, est, draw(st.integers(1, machine))))
    return Workload.from_jobs(rows, machine)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.booleans())
def test_same_decisions_on_generated_workloads(w, hints):
    """Small machines, ties in times, zero-length jobs and estimates, with and without the incremental hints."""
    assert_same(w, hints)


@pytest.mark.parametrize(("n", "machine", "load", "seed"), [
    (2000, 64, 0.7, 1), (2000, 64, 0.95, 2), (3000, 128, 0.95, 3), (3000, 255, 0.95, 4), (1500, 16, 1.2, 5)])
def test_same_decisions_on_synthetic_workloads(n, machine, load, seed):
    assert_same(synthetic(n, machine=machine, load=load, seed=seed))


def test_large_machines_use_the_reference():
    """Above 255 nodes (free counts no longer fit a byte) the fast policy delegates to the reference."""
    assert_same(synthetic(1500, machine=300, load=0.95, seed=6))


def test_same_schedule_on_hpc2n_first_20000():
    w = read_swf(HPC2N, limit=20000)
    assert_same(w)
