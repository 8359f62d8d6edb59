"""The simulator at scale: the same schedules as the engine it replaced (a frozen copy in ``_ref_engine``) at 64,
1,024 and 16,384 nodes, for every rigid policy, malleable ones and failures; conservative's reservations never
overlap on a 16,384-node machine; runs through the compiled and the plain-Python kernels agree."""

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
    mtct_amdahl,
    read_swf,
    simulate,
    synthetic,
)
from malleable.controller.experiments import failure_plan
from malleable.controller.sched import _kernels
from malleable.controller.sched._nodes import NodeRun
from malleable.errors import PolicyError
from tests._data import HPC2N

from ._ref_engine import ref_simulate

FIELDS = ("start", "end", "size", "area", "resizes")


def same(w: Workload, policy: str, **kw) -> None:
    ref = ref_simulate(w, policy, **kw)
    new = simulate(w, policy, **kw)
    for f in FIELDS:
        assert np.array_equal(getattr(ref, f), getattr(new, f)), (policy, f)
    assert ref.passes == new.passes and ref.decisions == new.decisions
    if ref.restarts is not None:
        assert np.array_equal(ref.restarts, new.restarts) and np.array_equal(ref.lost, new.lost)


@pytest.mark.parametrize("machine", [64, 1024, 16384])
@pytest.mark.parametrize("policy", ["fcfs", "easy", "conservative"])
def test_rigid_schedules_identical_to_the_old_engine(machine, policy):
    same(synthetic(2500, machine=machine, load=0.9, seed=machine), policy)


@pytest.mark.parametrize("machine", [64, 1024, 16384])
@pytest.mark.parametrize("policy", ["mebf-spare", "fpsma-pwma", "egs-prma", "mebf0", "malleable-fill"])
def test_malleable_schedules_identical_to_the_old_engine(machine, policy):
    w = synthetic(600 if policy == "malleable-fill" else 1500, machine=machine, load=0.9, seed=7).with_malleable(
        0.5, seed=3)
    same(w, policy, mtct=mtct_amdahl)


@pytest.mark.parametrize("machine", [64, 16384])
@pytest.mark.parametrize("policy", ["baseline", "sfsj"])
def test_failures_and_node_stealing_identical_to_the_old_engine(machine, policy):
    w = synthetic(1200, machine=machine, load=0.9, seed=5)
    plan = failure_plan(machine, 0.0, float(w.submit[-1]), 20000.0, 3600.0, seed=5)
    assert plan
    same(w, policy, failures=plan)


def test_pool_order_and_named_nodes_identical_to_the_old_engine():
    w = synthetic(1500, machine=96, load=0.95, seed=2).with_malleable(0.5, seed=2)
    names = [f"n{i:03d}" for i in range(96)]
    for policy in ("easy", "fpsma-pwma"):
        same(w, policy, node_ids=names)
        same(w, policy, order="pool")


def test_snapshot_free_nodes_are_runs_that_behave_as_tuples():
    """In release order the snapshot's free nodes are a NodeRun: a tuple in every observable way."""
    seen = []

    def policy(s, now):
        seen.append(s.free)
        q = s.queue
        return [StartJob(q[0].id, s.free[:q[0].procs])] if q and q[0].procs <= s.n_free else []
    simulate(Workload.from_jobs([(1, 0, 5, 5, 3), (2, 1, 5, 5, 2)], 6), policy)
    f = seen[0]
    assert type(f) is NodeRun and f == (0, 1, 2, 3, 4, 5) and (0, 1, 2, 3, 4, 5) == f
    assert hash(f) == hash((0, 1, 2, 3, 4, 5)) and repr(f) == "(0, 1, 2, 3, 4, 5)"
    assert f[1:4] == (1, 2, 3) and f[-1] == 5 and f[::2] == (0, 2, 4) and 3 in f and 9 not in f
    assert f[:2] + (7,) == (0, 1, 7) and (7,) + f[:2] == (7, 0, 1) and f[:2] + f[4:] == (0, 1, 4, 5)
    assert list(f) == [0, 1, 2, 3, 4, 5] and len(f) == 6
    import pickle
    assert pickle.loads(pickle.dumps(f)) == (0, 1, 2, 3, 4, 5)  # noqa: S301 - our own bytes
    with pytest.raises(IndexError):
        f[6]


def test_plain_python_kernel_gives_the_same_decisions(monkeypatch):
    """The conservative loop compiled by Numba and the same code run as Python make the same schedule."""
    w = synthetic(1500, machine=300, load=0.95, seed=9)
    jit = simulate(w, "conservative")
    monkeypatch.setenv("MALLEABLE_NO_JIT", "1")
    monkeypatch.setattr(_kernels, "_READY", {})
    plain = simulate(w, "conservative")
    assert np.array_equal(jit.start, plain.start) and jit.decisions == plain.decisions


@st.composite
def big_workloads(draw):
    n = draw(st.integers(1, 30))
    rows, t = [], 0
    for i in range(n):
        t += draw(st.sampled_from([0, 0, 5, 60, 600]))
        run = draw(st.sampled_from([1, 10, 300, 3600]))
        est = run + draw(st.sampled_from([0, 1, 600, 7200]))
        size = draw(st.sampled_from([1, 255, 256, 257, 4096, 8191, 16384, draw(st.integers(1, 16384))]))
        rows.append((i + 1, t, run, est, size))
    return Workload.from_jobs(rows, 16384)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(big_workloads())
def test_conservative_reservations_never_overlap_at_16384_nodes(w):
    """At every pass, running jobs, starts and reservations never need more than 16,384 nodes at once, and no
    job starts after its last reservation."""
    log: list = []

    def recording(s, now):
        out = conservative(s, now)
        log.append((s, out))
        return out
    r = simulate(w, recording)
    reserved: dict[int, float] = {}
    for s, out in log:
        reserved.update({d.job_id: d.start for d in out if isinstance(d, Reserve)})
        started = {d.job_id for d in out if isinstance(d, StartJob)}
        items = [(s.now, v.end_estimate, v.size) for v in s.running]
        items += [(s.now, s.now + j.estimate, j.procs) for j in s.queue if j.id in started]
        items += [(reserved[j.id], reserved[j.id] + j.estimate, j.procs) for j in s.queue if j.id not in started]
        for a, _, _ in items:
            assert sum(p for x, y, p in items if x <= a < y) <= 16384
    start = dict(zip(w.ids.tolist(), r.start.tolist(), strict=True))
    assert all(start[j] <= t + 1e-9 for j, t in reserved.items())


def test_workload_rows_become_jobs_by_chunks(monkeypatch):
    """The engine turns the workload into jobs a chunk at a time: tiny chunks give the same schedule."""
    from malleable.controller.sim import _engine
    w = synthetic(700, machine=64, load=0.95, seed=8).with_malleable(0.3, seed=8)
    whole = simulate(w, "mebf-spare")
    monkeypatch.setattr(_engine, "_CHUNK", 7)
    chunked = simulate(w, "mebf-spare")
    for f in FIELDS:
        assert np.array_equal(getattr(whole, f), getattr(chunked, f))


def test_easy_with_the_queue_index_on_a_long_queue_trace():
    """HPC2N with its inter-arrival times halved (queues of thousands): EASY through the ledger's queue index
    makes the schedule of the plain scan (the old engine's queue has no index)."""
    w = read_swf(HPC2N, limit=12000)
    w.submit = w.submit / 2
    same(w, "easy")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 16), st.lists(st.tuples(st.sampled_from([0, 0, 1, 5]), st.sampled_from([0, 1, 3, 9, 40]),
                                              st.sampled_from([0, 1, 10, 100]), st.integers(1, 16)),
                                    min_size=1, max_size=60), st.booleans())
def test_easy_queue_index_matches_the_plain_scan(machine, rows, fail):
    """With the index used for every queue (threshold 0), ties in times and estimates, zero-length jobs and
    failures (re-queued jobs go ahead: the index is rebuilt), EASY makes the plain scan's schedule."""
    from malleable.controller.sched import _rigid
    t, jobs = 0, []
    for i, (gap, run, extra, p) in enumerate(rows):
        t += gap
        jobs.append((i + 1, t, run, run + extra, min(p, machine)))
    w = Workload.from_jobs(jobs, machine)
    kw = {"failures": [(2.0, 0, 5.0), (7.0, machine - 1, 1.0)]} if fail else {}
    old = _rigid._INDEXED
    _rigid._INDEXED = 0
    try:
        try:
            ref_simulate(w, "easy", **kw)
        except PolicyError as e:       # a job larger than the nodes left up: both engines must say so
            with pytest.raises(PolicyError, match=str(e).split(": ", 1)[1][:30]):
                simulate(w, "easy", **kw)
            return
        same(w, "easy", **kw)
    finally:
        _rigid._INDEXED = old
