"""MEBF of seed 002 and of seed 000 (Algorithm 1): the digests' "How to test it" cases on the pure functions,
and small end-to-end runs in the engine."""

from __future__ import annotations

import math

import numpy as np
import pytest

from malleable.controller import (
    MEBF,
    MEBF0,
    JobKind,
    MEBF0Config,
    MEBFConfig,
    ResizeJob,
    StartJob,
    Wake,
    fixed_reconfig_cost,
    get_policy,
    linear,
    per_job_reconfig_cost,
    rho_power,
    simulate,
)
from malleable.controller.sched._mebf000 import expand_allowed, shrink_allowed
from malleable.controller.sched._mebf002 import expand_amount, feasible, shrink_amount
from malleable.errors import PolicyError

from ._snap import mjob, running, snap, workload

# -- the job model ------------------------------------------------------------------------------------------


def test_rho_power_shape():
    """rho = 0 is linear; larger rho gives less speedup at every size, monotone in n (002's Fig. 3a)."""
    j0, j2 = mjob(1, 8, 100, rho=0.0), mjob(2, 8, 100, rho=0.25)
    assert rho_power(j0, 16) == pytest.approx(0.5) == linear(j0, 16)
    assert rho_power(j2, 16) == pytest.approx(0.5 ** 0.75)
    times = [rho_power(j2, n) for n in (1, 2, 4, 8, 16, 32)]
    assert all(a > b for a, b in zip(times, times[1:]))
    assert all(rho_power(j2, n) > linear(j2, n) for n in (16, 32))


def test_reconfiguration_cost_models():
    j = mjob(3, 8, 100)
    assert fixed_reconfig_cost(120.0)(j, 10, 8) == 120.0 and fixed_reconfig_cost(120.0)(j, 8, 8) == 0.0
    c = per_job_reconfig_cost(scale=1.0, b=0.0)
    x = c(j, 5, 10)
    assert 0.005 * 5 + 0.005 / 15 <= x <= 0.05 * 5 + 0.05 / 15
    assert c(j, 5, 10) == x                                   # same job, same coefficients
    assert c(j, 5, 20) > x                                    # 5 -> 20 costs more than 5 -> 10 (002, L69)
    with pytest.raises(ValueError):
        fixed_reconfig_cost(-1)


def test_engine_refuses_start_below_min_and_resize_above_max():
    w = workload([(1, 0, 100, 100, 4, 2, 2, 6, 0.0, 0.0)], 10)

    def below(s, now):
        return [StartJob(1, s.free[:1])] if s.queue else []

    def above(s, now):
        if s.queue:
            return [StartJob(1, s.free[:4]), Wake(10.0)]
        return [ResizeJob(1, s.running[0].nodes + s.free[:3])] if s.running else []
    for pol in (below, above):
        with pytest.raises(PolicyError, match="2..6"):
            simulate(w, pol)


# -- seed 000, Algorithm 1 ----------------------------------------------------------------------------------

CFG0 = MEBF0Config(alpha=2.0)          # the digest's test uses alpha = 2 min with times in minutes


@pytest.mark.parametrize(("rem", "ok"), [(100, True), (40, False), (50, True)])
def test_mebf0_shrink_cutoff(rem, ok):
    """10 nodes lose 2: rem 100 -> 122 (1.22, yes); rem 40 -> 50 (1.25, no); rem 50 -> 62 (1.24, boundary)."""
    granted, allowed = shrink_allowed(CFG0, 10, rem)
    assert granted == 2 and allowed is ok


def test_mebf0_shrink_skips_small_jobs():
    assert shrink_allowed(CFG0, 4, 1000) == (0, False)        # floor(4 x 0.2) = 0


@pytest.mark.parametrize(("rem", "ok"), [(60, True), (50, False)])
def test_mebf0_expand_guard(rem, ok):
    assert expand_allowed(CFG0, rem, 200) is ok


@pytest.mark.parametrize(("free", "size"), [(6, 6), (3, None), (8, 8), (10, 8)])
def test_mebf0_moldable_assignment(free, size):
    """pref 8, min 4: 6 free -> 6 nodes; 3 free -> not started."""
    job = mjob(1, 8, 100, lo=4, hi=16)
    out = MEBF0(CFG0)(snap(0.0, free, queue=[job]), 0.0)
    starts = [d for d in out if isinstance(d, StartJob)]
    assert (len(starts[0].nodes) if starts else None) == size


def test_mebf0_shrinks_only_lower_priority_jobs():
    """Full machine; W (submitted at 5) waits for 2 nodes. A (submitted 0, higher priority) is never shrunk;
    B (submitted 9, lower priority) gives floor(10 x 0.2) = 2 nodes and W starts on them."""
    a = running(mjob(1, 10, 1000, lo=2, hi=20, submit=0.0), 10, end=1000)
    b = running(mjob(2, 10, 1000, lo=2, hi=20, submit=9.0), 10, end=1000)
    w = mjob(3, 2, 100, submit=5.0, kind=JobKind.RIGID)
    out = MEBF0(CFG0)(snap(10.0, 0, run=[a, b], queue=[w]), 10.0)
    assert [type(d).__name__ for d in out] == ["ResizeJob", "StartJob"]
    assert out[0].job_id == 2 and len(out[0].nodes) == 8
    assert out[1].job_id == 3 and set(out[1].nodes) == set(b.nodes[8:])
    only_a = MEBF0(CFG0)(snap(10.0, 0, run=[a], queue=[w]), 10.0)
    assert only_a == []


def test_mebf0_expands_longest_higher_priority_job():
    a = running(mjob(1, 4, 1000, lo=2, hi=8, submit=0.0), 4, end=900)
    b = running(mjob(2, 4, 1000, lo=2, hi=8, submit=1.0), 4, end=500)
    out = MEBF0(CFG0)(snap(100.0, 3, run=[a, b]), 100.0)
    assert out == [ResizeJob(1, a.nodes + (0, 1, 2))]          # the longest (900) gets all 3 free nodes
    late = running(mjob(1, 4, 1000, lo=2, hi=8), 4, end=300)   # 200 left <= 1000 / 4: guard refuses
    assert MEBF0(CFG0)(snap(100.0, 3, run=[late]), 100.0) == []


def test_mebf0_end_to_end_all_at_zero():
    """Six malleable jobs at t=0 on 16 nodes: every job completes, all work done, sizes within bounds."""
    rows = [(i, 0.0, 100.0 * i, 100.0 * i, 6, 2, 3, 12, 0.05, 0.0) for i in range(1, 7)]
    r = simulate(workload(rows, 16), MEBF0(MEBF0Config(alpha=0.0)))
    assert not math.isnan(r.end.max()) and r.decisions["ResizeJob"] > 0


# -- seed 002 -----------------------------------------------------------------------------------------------

CFG2 = MEBFConfig(expand="intensive")


def test_mebf_feasibility_theta_and_gamma():
    j = mjob(1, 10, 1000, lo=5, hi=50, rho=0.0)
    fresh = running(j, 10, start=0.0, end=1000.0)
    assert feasible(CFG2, fresh, 6, 0.0)                        # 10 -> 6 linear: 1.67 <= 2
    assert not feasible(CFG2, fresh, 4, 0.0)                    # 10 -> 4: 2.5 > 2
    assert not feasible(CFG2, running(j, 10, start=0.0, end=1000.0), 6, 600.0)   # 40 % left < theta 0.5
    cost = MEBFConfig(cost=lambda job, a, b: 400.0)
    assert not feasible(cost, fresh, 6, 0.0)                    # (1667 + 400) / 1000 > 2


def test_mebf_shrink_and_expand_amounts():
    r = running(mjob(1, 10, 1000, lo=5, hi=50), 10)
    assert shrink_amount(CFG2, r) == 4                          # floor(0.4 x 10)
    assert shrink_amount(CFG2, running(mjob(2, 10, 1000, lo=8, hi=50), 10)) == 2   # never below min
    small = running(mjob(3, 4, 1000, lo=2, hi=20), 4)
    assert expand_amount(MEBFConfig(expand="handoff"), small, 10) == 10          # 10 > 4: more than doubles
    assert expand_amount(MEBFConfig(expand="handoff"), small, 3) == 0
    assert expand_amount(MEBFConfig(expand="spare"), small, 10) == 2             # ceil(0.5 x 4), rest spare
    assert expand_amount(MEBFConfig(expand="spare"), small, 2) == 0              # 2 is not > 0.5 x 4
    assert expand_amount(MEBFConfig(expand="intensive"), small, 30) == 16        # up to max


def test_mebf_moldable_start_between_pref_and_min():
    job = mjob(1, 8, 100, lo=4, hi=40)
    assert [len(d.nodes) for d in MEBF()(snap(0.0, 6, queue=[job]), 0.0)] == [6]
    assert MEBF()(snap(0.0, 3, queue=[job]), 0.0) == []
    rigid = mjob(2, 8, 100, kind=JobKind.RIGID)
    assert MEBF()(snap(0.0, 6, queue=[rigid]), 0.0) == []


def test_mebf_shrinks_least_scalable_first_then_starts_head():
    lo = running(mjob(1, 10, 1000, lo=5, hi=50, rho=0.05), 10, end=1000)
    hi = running(mjob(2, 10, 1000, lo=5, hi=50, rho=0.25), 10, end=1000)
    head = mjob(3, 4, 100, kind=JobKind.RIGID, submit=1.0)
    out = MEBF()(snap(10.0, 0, run=[lo, hi], queue=[head]), 10.0)
    assert out[0] == ResizeJob(2, hi.nodes[:6]) and out[1] == StartJob(3, hi.nodes[6:])


def test_mebf_shrink_all_or_nothing_and_once():
    r = running(mjob(1, 10, 1000, lo=5, hi=50), 10, end=1000)
    big = mjob(2, 8, 100, kind=JobKind.RIGID)
    assert MEBF()(snap(10.0, 0, run=[r], queue=[big]), 10.0) == []         # 4 of 8: nothing applied
    again = running(mjob(1, 10, 1000, lo=5, hi=50), 10, end=1000, resizes=1)
    assert MEBF()(snap(10.0, 0, run=[again], queue=[mjob(3, 4, 10, kind=JobKind.RIGID)]), 10.0) == []


def test_mebf_variants_when_backfill_finds_nothing():
    """2 free, head needs 8, nothing else queued: basic leaves the gap; expand+ expands; shrink+ shrinks."""
    r = running(mjob(1, 10, 1000, lo=5, hi=50), 10, end=1000)
    head = mjob(2, 8, 100, kind=JobKind.RIGID)
    s = snap(0.0, 2, run=[r], queue=[head])
    assert MEBF(MEBFConfig(variant="basic"))(s, 0.0) == []
    plus = MEBF(MEBFConfig(variant="expand+", expand="intensive"))(s, 0.0)
    assert plus == [ResizeJob(1, r.nodes + (0, 1))]
    out = MEBF(MEBFConfig(variant="shrink+"))(snap(0.0, 4, run=[r], queue=[head]), 0.0)
    assert [type(d).__name__ for d in out] == ["ResizeJob", "StartJob"]


def test_mebf_expands_most_scalable_first_when_queue_empty():
    a = running(mjob(1, 4, 1000, lo=2, hi=40, rho=0.2), 4, end=1000)
    b = running(mjob(2, 4, 1000, lo=2, hi=40, rho=0.02), 4, end=1000)
    out = MEBF(MEBFConfig(expand="handoff"))(snap(0.0, 6, run=[a, b]), 0.0)
    assert out == [ResizeJob(2, b.nodes + tuple(range(6)))]


@pytest.mark.parametrize("name", ["mebf-handoff", "mebf-spare-expand+", "mebf-intensive-shrink+", "mebf0"])
def test_registered_mebf_end_to_end(name):
    rows = [(i, 30.0 * i, 200.0 + 37 * (i % 5), 300.0, 2 + i % 5, 2 if i % 3 else 0, 1, 12, 0.0, 0.03 * (i % 4))
            for i in range(1, 25)]
    rows = [(a, b, c, d, p, k, (lo if k else p), (hi if k else p), s, rho) for a, b, c, d, p, k, lo, hi, s, rho
            in rows]
    r = simulate(workload(rows, 12), get_policy(name), speedup=rho_power)
    assert not np.isnan(r.end).any() and r.decisions["ResizeJob"] > 0


@pytest.mark.parametrize("name", ["mebf-handoff", "mebf-spare", "mebf-intensive-expand+", "mebf0"])
def test_mebf_on_a_trace_prefix_with_half_malleable(name):
    """Same schedule with and without incremental hints (the policies ignore them), every job done."""
    from malleable.controller import synthetic
    w = synthetic(400, machine=64, load=0.9, seed=4).with_malleable(0.5, seed=1, rho=(0.0, 0.3))
    a = simulate(w, name, speedup=rho_power)
    b = simulate(w, name, speedup=rho_power, hints=False)
    assert np.array_equal(a.end, b.end) and not np.isnan(a.end).any()
