"""Invariants of every malleable policy on random malleable workloads (hypothesis): sizes within [min, max],
never more nodes than exist, nodes held by one job at a time, all work completed, no job lost across resizes
and failures."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from malleable.controller import get_policy, linear, mtct_amdahl, simulate

from ._snap import workload

POLICIES = ["mebf-handoff", "mebf-spare-expand+", "mebf-intensive-shrink+", "mebf0", "fpsma-pwma", "fpsma-prma",
            "egs-pwma", "egs-prma", "fpsma-mtct-pwma", "baseline", "sfsj"]


@st.composite
def malleable_workloads(draw):
    machine = draw(st.integers(4, 16))
    n = draw(st.integers(1, 14))
    rows, t = [], 0.0
    for i in range(n):
        t += draw(st.sampled_from([0, 0, 5, 20, 60]))
        run = float(draw(st.sampled_from([1, 30, 90, 200, 500])))
        est = run + draw(st.sampled_from([0, 0, 50, 400]))
        procs = draw(st.integers(1, machine))
        kind = draw(st.sampled_from([0, 1, 2, 2]))
        lo = draw(st.integers(1, procs)) if kind else procs
        hi = draw(st.integers(procs, machine)) if kind else procs
        rows.append((i + 1, t, run, est, procs, kind, lo, hi, draw(st.sampled_from([0.0, 0.1, 0.5])),
                     draw(st.sampled_from([0.0, 0.1, 0.25]))))
    fails = []
    for _ in range(draw(st.integers(0, 3))):
        fails.append((float(draw(st.integers(0, 400))), draw(st.integers(0, machine - 1)),
                      float(draw(st.sampled_from([10, 100])))))
    return workload(rows, machine, "random"), fails


def checked(policy, machine, seen):
    def wrapped(s, now):
        held = [x for r in s.running for x in r.nodes]
        assert len(held) == len(set(held)), "a node held twice"
        down = [x for x, _ in s.down]
        assert not set(held) & set(s.free) and not set(down) & (set(held) | set(s.free))
        assert len(held) + len(s.free) + len(down) == machine
        for r in s.running:
            assert r.job.min_procs <= r.size <= r.job.max_procs and r.size == len(r.nodes)
        out = policy(s, now)
        seen.append(len(out))
        return out
    return wrapped


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(malleable_workloads(), st.sampled_from(POLICIES))
def test_malleable_policy_invariants(wf, name):
    w, fails = wf
    seen: list[int] = []
    r = simulate(w, checked(get_policy(name), w.machine, seen), speedup=linear, mtct=mtct_amdahl,
                 failures=fails)
    assert not np.isnan(r.end).any() and np.all(r.end >= r.start) and np.all(r.start >= w.submit)
    lost = r.lost if r.lost is not None else 0.0
    assert np.allclose(r.area - lost, w.run * w.procs)          # linear speedup: the work is done exactly once
    assert np.all((r.size >= w.min_procs) & (r.size <= w.max_procs))
