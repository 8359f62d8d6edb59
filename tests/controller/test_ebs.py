"""EBS strategies of seed 003 (FPSMA / EGS x PRMA / PWMA, MTCT-aware FPSMA) and workload W1 end to end."""

from __future__ import annotations

import pytest

from malleable.controller import (
    EBS,
    EBSConfig,
    JobKind,
    ResizeJob,
    StartJob,
    Wake,
    amdahl,
    get_policy,
    simulate,
    summary,
)
from malleable.controller.sched._ebs import egs_grow, egs_shrink, fpsma_grow, fpsma_shrink, grow_target, shrink_target

from ._snap import mjob, running, snap, workload

FP = EBSConfig(strategy="fpsma")
EGS = EBSConfig(strategy="egs")


def test_pof2_examples_of_the_thesis():
    """pof2: 2 nodes and 10 idle grow to 8 (L757); 4 nodes shrink to 2 (L765)."""
    assert grow_target(2, 10, 16, "pof2") == 8
    assert shrink_target(4, 1, 3, "pof2") == 2
    assert grow_target(8, 7, 16, "pof2") == 8                  # 16 is not reachable: not expanded
    assert grow_target(3, 4, 16, "even") == 6 and grow_target(3, 4, 16, "odd") == 7
    assert grow_target(1, 30, 64, "ncube") == 27
    assert grow_target(4, 3, 16) == 7 and shrink_target(10, 4, 3) == 7 and shrink_target(10, 4, 9) == 4


def test_fpsma_grow_oldest_first_with_constraint():
    a = running(mjob(1, 2, 1000, lo=1, hi=16), 2, start=0.0)
    b = running(mjob(2, 2, 1000, lo=1, hi=16), 2, start=10.0)
    cfg = EBSConfig(strategy="fpsma", constraint="pof2")
    assert fpsma_grow(cfg, [b, a], 10, 20.0) == {1: 8, 2: 4}    # a: 2 -> 8 (6 used), b: 2 -> 4 (4 left)


def test_fpsma_shrink_newest_first_all_or_nothing():
    old = running(mjob(1, 8, 1000, lo=4, hi=16), 8, start=0.0)
    new = running(mjob(2, 6, 1000, lo=4, hi=16), 6, start=50.0)
    assert fpsma_shrink(FP, [old, new], 4, 100.0) == {2: 4, 1: 6}
    assert fpsma_shrink(FP, [old, new], 7, 100.0) is None       # only 6 can be freed: nothing shrinks


def test_sixty_second_rule():
    near = running(mjob(1, 8, 100, lo=4, hi=16), 8, start=0.0, end=100.0)
    assert fpsma_shrink(FP, [near], 2, 40.0) is None             # exactly 60 s left: not adapted
    assert fpsma_shrink(FP, [near], 2, 39.0) == {1: 6}
    assert fpsma_grow(FP, [near], 4, 40.0) == {}


def test_egs_equal_shares():
    a = running(mjob(1, 4, 1000, lo=2, hi=16), 4, start=0.0)
    b = running(mjob(2, 4, 1000, lo=2, hi=16), 4, start=5.0)
    assert egs_grow(EGS, [a, b], 5, 10.0) == {1: 7, 2: 6}       # 2 each, the remainder to the oldest
    assert egs_shrink(EGS, [a, b], 3, 10.0) == {2: 2, 1: 3}     # 1 each, the remainder from the newest
    c = running(mjob(3, 6, 1000, lo=4, hi=16), 6, start=5.0)
    d = running(mjob(4, 10, 1000, lo=4, hi=16), 10, start=6.0)
    assert egs_shrink(EGS, [c, d], 8, 10.0) is None              # W1: jobs 3/4 cannot give 4 each


def test_pwma_shrinks_before_start_then_prma_never_shrinks():
    r = running(mjob(1, 16, 1000, lo=4, hi=16), 16, start=0.0)
    head = mjob(2, 6, 100, kind=JobKind.RIGID, submit=1.0)
    out = EBS(EBSConfig())(snap(10.0, 0, run=[r], queue=[head]), 10.0)
    assert out == [ResizeJob(1, r.nodes[:10]), StartJob(2, r.nodes[10:])]
    assert EBS(EBSConfig(management="prma"))(snap(10.0, 0, run=[r], queue=[head]), 10.0) == []


def test_no_decision_while_adapting():
    a = running(mjob(1, 4, 1000, lo=2, hi=16), 4, start=0.0, since=12.0)
    out = EBS(EBSConfig())(snap(10.0, 6, run=[a]), 10.0)
    assert out == [Wake(12.0)]


def test_mtct_aware_fpsma():
    cfg = EBSConfig(mtct=(0.5, 2.0))
    low = running(mjob(1, 4, 1000, lo=2, hi=16), 4, start=0.0, mtct=0.3)
    none = running(mjob(2, 4, 1000, lo=2, hi=16), 4, start=1.0)
    high = running(mjob(3, 4, 1000, lo=2, hi=16), 4, start=2.0, mtct=3.0)
    out = EBS(cfg)(snap(10.0, 4, run=[low, none, high]), 10.0)
    assert out[0] == ResizeJob(3, high.nodes[:3])                # above the upper threshold: one step down
    assert out[1] == ResizeJob(1, low.nodes + (0, 1, 2, 3, high.nodes[3]))
    assert all(d.job_id != 2 for d in out)                       # no report: left alone


# -- W1 (thesis §7.3) -------------------------------------------------------------------------------------

W1_T = (700.0, 200.0, 650.0, 550.0, 550.0)      # static times at the start sizes (ours; the thesis gives none)
W1_S = 3 / 19                                   # Amdahl fraction: job 1 grown 4 -> 16 at t=0 ends at 400 s


def w1(malleable=True):
    sizes = (4, 16, 6, 10, 8)
    rows = [(i + 1, 100.0 * i, W1_T[i], W1_T[i], sizes[i], 2 if malleable else 0, 4 if malleable else sizes[i],
             16 if malleable else sizes[i], W1_S if malleable else 0.0, 0.0) for i in range(5)]
    return workload(rows, 16, "W1")


def replay(policy):
    events = []

    def rec(s, now):
        out = policy(s, now)
        events.extend((now, type(d).__name__[0], d.job_id, len(d.nodes)) for d in out if hasattr(d, "nodes"))
        return out
    r = simulate(w1(), rec, speedup=amdahl)
    return r, events


def test_w1_fcfs_rigid():
    """FCFS: 12 nodes idle until job 1 ends at 700; jobs 2 and 3 start 600 and 700 s after arrival."""
    r = simulate(w1(False), "fcfs")
    assert list(r.start) == [0, 700, 900, 900, 1450]
    assert summary(r)["makespan"] == 2000.0


def test_w1_fpsma_pwma_timeline():
    r, ev = replay(get_policy("fpsma-pwma"))
    t2 = r.end[1]
    assert ev[:2] == [(0.0, "S", 1, 4), (0.0, "R", 1, 16)]         # job 1 grown to 16 at t=0
    assert not [e for e in ev if e[0] == 100.0]                    # not shrunk for job 2 (only 12 free-able)
    assert r.end[0] == pytest.approx(400.0)                        # job 1 ends at 400
    assert ev[2:5] == [(400.0, "S", 2, 16), (400.0, "R", 2, 10), (400.0, "S", 3, 6)]
    assert ev[5:9] == [(t2, "S", 4, 10), (t2, "R", 4, 4), (t2, "R", 3, 4), (t2, "S", 5, 8)]
    assert ev[9] == (r.end[2], "R", 4, 8)                          # job 4 re-grown to 8 when job 3 ends
    assert summary(r)["makespan"] < 1500


def test_w1_fpsma_prma_timeline():
    r, ev = replay(get_policy("fpsma-prma"))
    assert not [e for e in ev if e[1] == "R" and e[3] < 16 and e[2] == 1]
    t4 = r.end[3]
    assert (t4, "S", 5, 8) in ev and (t4, "R", 3, 8) in ev           # job 4 ends, job 5 on 8, job 3 grown to 8
    assert summary(r)["makespan"] == pytest.approx(1600, rel=0.05)


def test_w1_egs_pwma_timeline():
    r, ev = replay(get_policy("egs-pwma"))
    t3 = r.end[2]
    assert (t3, "R", 4, 8) in ev and (t3, "S", 5, 8) in ev           # job 5 starts after job 4 reduced to 8
    assert r.start[4] == t3
    assert summary(r)["makespan"] == pytest.approx(1500, rel=0.05)


def test_a_job_declared_constraint_is_honoured():
    """A job submitted with --constraint pof2 grows only to powers of two under FPSMA, whatever the config."""
    from malleable.controller.sched import EBS, EBSConfig, Job, JobKind, RunningJob, Snapshot

    job = Job(1, 0.0, 2, 1000.0, JobKind.MALLEABLE, 1, 8, constraint="pof2")
    r = RunningJob(job, (0, 1), 2, 0.0, 0.0, 0.0, 1000.0)
    snap = Snapshot(0.0, tuple(range(8)), (2, 3, 4, 5, 6), (r,), ())
    out = EBS(EBSConfig(management="prma", strategy="fpsma"))(snap, 0.0)
    assert [len(d.nodes) for d in out] == [4]                    # 2 + 5 idle = 7 is not a power of two: 4
    free = EBS(EBSConfig(management="prma", strategy="fpsma"))(
        Snapshot(0.0, tuple(range(8)), (2, 3, 4, 5, 6), (RunningJob(Job(1, 0.0, 2, 1000.0, JobKind.MALLEABLE, 1, 8),
                                                                    (0, 1), 2, 0.0, 0.0, 0.0, 1000.0),), ()), 0.0)
    assert [len(d.nodes) for d in free] == [7]                   # without the declaration: all it can get
