"""Invariants of the three policies on generated workloads (hypothesis) and on a seeded synthetic one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from malleable.controller import (
    Reserve,
    StartJob,
    Workload,
    conservative,
    easy,
    easy_shadow,
    fcfs,
    simulate,
    synthetic,
)


@st.composite
def workloads(draw, min_estimate=0):
    machine = draw(st.integers(2, 12))
    n = draw(st.integers(1, 25))
    rows, t = [], 0
    for i in range(n):
        t += draw(st.sampled_from([0, 0, 1, 3, 7, 20]))
        run = draw(st.sampled_from([0, 1, 2, 5, 9, 30]))
        est = max(min_estimate, run + draw(st.sampled_from([0, 0, 1, 10, 40])))
        rows.append((i + 1, t, run, est, draw(st.integers(1, machine))))
    return Workload.from_jobs(rows, machine)


def check_common(w: Workload, r) -> None:
    """Never more nodes in use than exist; no start before submit; rigid jobs run exactly their run time."""
    assert np.all(r.start >= w.submit)
    assert np.allclose(r.end - r.start, w.run)
    assert np.array_equal(r.size, w.procs)
    ev = sorted([(e, 0, int(p)) for e, p in zip(r.end, r.size)] + [(s, 1, int(p)) for s, p in zip(r.start, r.size)])
    used = 0
    for _, kind, p in ev:
        used += p if kind else -p
        assert used <= w.machine


def recording(policy, log):
    def wrapped(snapshot, now):
        out = policy(snapshot, now)
        log.append((snapshot, out))
        return out
    return wrapped


def easy_reservations(log):
    """(head id, shadow time) at every EASY pass where the head could not start."""
    res = []
    for s, out in log:
        started = {d.job_id for d in out if isinstance(d, StartJob)}
        prefix = []
        avail = s.n_free
        i = 0
        while i < len(s.queue) and s.queue[i].id in started:
            prefix.append((s.now + s.queue[i].estimate, s.queue[i].procs))
            avail -= s.queue[i].procs
            i += 1
        if i < len(s.queue):
            head = s.queue[i]
            shadow, _ = easy_shadow(s.running, sorted(prefix), avail, head.procs)
            res.append((head.id, shadow))
    return res


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_fcfs_invariants(w):
    r = simulate(w, fcfs)
    check_common(w, r)
    assert np.all(np.diff(r.start) >= 0)          # FCFS never reorders: starts follow submission order
    assert np.array_equal(r.start, simulate(w, fcfs, hints=False).start)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_easy_invariants(w):
    log: list = []
    r = simulate(w, recording(easy, log), hints=False)
    check_common(w, r)
    start = dict(zip(w.ids.tolist(), r.start.tolist()))
    for jid, shadow in easy_reservations(log):
        assert start[jid] <= shadow + 1e-9        # EASY never delays the head's reservation
    assert np.array_equal(r.start, simulate(w, easy).start)
    f = simulate(w, fcfs)
    assert r.start[0] == f.start[0]


def usage(items, t):
    return sum(size for a, b, size in items if a <= t < b)


def fits(items, machine, c, est, size):
    points = {c} | {x for a, b, _ in items for x in (a, b) if c < x < c + est}
    return all(usage(items, t) + size <= machine for t in points)


def check_conservative_pass(s, out, reserved):
    """After one pass: nothing (running, started, reserved) overlaps beyond the machine, so no start delays an
    earlier job's reservation; and every reservation is the earliest slot given the earlier jobs."""
    started = {d.job_id for d in out if isinstance(d, StartJob)}
    items = [(s.now, r.end_estimate, r.size) for r in s.running]
    items += [(s.now, s.now + j.estimate, j.procs) for j in s.queue if j.id in started]
    for j in s.queue:
        if j.id in started:
            continue
        r = reserved[j.id]
        times = sorted({s.now} | {b for _, b, _ in items if s.now <= b < r})
        assert all(not fits(items, s.n_nodes, c, j.estimate, j.procs) for c in times if c < r), (j, r)
        assert fits(items, s.n_nodes, r, j.estimate, j.procs)
        items.append((r, r + j.estimate, j.procs))
    points = {a for a, _, _ in items}
    assert all(usage(items, t) <= s.n_nodes for t in points)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(min_estimate=1))
def test_conservative_invariants(w):
    log: list = []
    r = simulate(w, recording(conservative, log))
    check_common(w, r)
    reserved: dict[int, float] = {}
    for s, out in log:
        reserved.update({d.job_id: d.start for d in out if isinstance(d, Reserve)})
        check_conservative_pass(s, out, reserved)
    start = dict(zip(w.ids.tolist(), r.start.tolist()))
    for jid, t in reserved.items():
        assert start[jid] <= t + 1e-9                     # no job starts after its latest reservation
    assert np.array_equal(r.start, simulate(w, conservative, hints=False).start)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_conservative_zero_length_jobs(w):
    """Jobs of zero run time and estimate hold their nodes for an instant; the schedule stays valid."""
    r = simulate(w, conservative)
    check_common(w, r)
    assert np.array_equal(r.start, simulate(w, conservative, hints=False).start)


@pytest.mark.parametrize("policy", ["fcfs", "easy", "conservative"])
def test_synthetic_invariants_and_hint_equivalence(policy):
    w = synthetic(3000, machine=64, load=0.95, seed=11)
    r = simulate(w, policy)
    check_common(w, r)
    assert np.array_equal(r.start, simulate(w, policy, hints=False).start)


def test_backfilling_helps_on_a_loaded_machine():
    """On a loaded synthetic workload the backfilling policies wait less than FCFS; same jobs, same work."""
    w = synthetic(3000, machine=64, load=0.95, seed=5)
    wait = {p: float(simulate(w, p).wait.mean()) for p in ("fcfs", "easy", "conservative")}
    assert wait["easy"] < wait["fcfs"] and wait["conservative"] < wait["fcfs"]
