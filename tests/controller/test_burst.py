"""Burst-buffer policies (seed 004): the paper's 8-job example replayed event by event, the plan search, and
invariants of every policy on random workloads with a burst buffer."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from malleable.controller.sched import POLICIES, Ledger, Plan, PlanConfig, PlanStats, Profile2, StartJob
from malleable.controller.sched._model import Job
from malleable.controller.sched._plan import _Base, build_plan, candidate_orders
from malleable.controller.sim import Workload, simulate
from malleable.errors import ConfigError, PolicyError

TB = 1e12
MIN = 60.0
# Table 1: job, submit [min], runtime [min], CPUs, BB [TB]; walltime = runtime
TABLE1 = [(1, 0, 10, 1, 4), (2, 0, 4, 1, 2), (3, 1, 1, 3, 8), (4, 2, 3, 2, 4),
          (5, 3, 1, 3, 4), (6, 3, 1, 2, 2), (7, 4, 5, 1, 2), (8, 4, 3, 2, 4)]


def table1() -> Workload:
    w = Workload.from_jobs([(j, s * MIN, r * MIN, r * MIN, c) for j, s, r, c, _ in TABLE1], 4, "table1")
    w.bb = np.array([b * TB for *_, b in TABLE1])
    w.bb_total = 10 * TB
    return w


def starts(policy: str) -> dict[int, float]:
    res = simulate(table1(), policy, tick=MIN)
    return {int(j): s / MIN for j, s in zip(res.workload.ids, res.start, strict=True)}


def test_fcfs_easy_without_buffer_reservation_makes_job_3_a_barrier():
    s = starts("fcfs-easy")
    assert s[1] == s[2] == 0                          # t=0: jobs 1 and 2 start
    assert s[4] > 2 and s[5] > 3                      # jobs 4 and 5 would delay job 3's processor reservation
    assert s[6] == 3                                  # job 6 is backfilled before job 3
    assert s[3] == 10                                 # at t=4 job 3 lacks buffer (4 + 8 > 10 TB) and is a barrier
    assert all(s[j] >= 10 for j in (4, 5, 7, 8))      # nothing else starts while job 1 runs
    assert s[7] == 10 and s[4] > 10 and s[5] > 10     # at t=10 job 7 is backfilled ahead of jobs 4 and 5


def test_fcfs_bb_reserves_both_and_backfills_everything_before_job_3():
    s = starts("fcfs-bb")
    assert s[1] == s[2] == 0
    assert s[4] == 2                                  # job 4 starts when submitted: job 3 is planned after job 1
    assert all(s[j] < 10 for j in (5, 6, 7, 8))       # jobs 5..8 are backfilled ahead of job 3
    assert s[3] == 10
    easy = starts("fcfs-easy")
    assert sum(s.values()) < sum(easy.values())       # the barrier cost every later job


def test_every_bb_policy_keeps_the_buffer_and_the_processors_within_capacity():
    for name in ("fcfs", "fcfs-easy", "fcfs-bb", "sjf-bb", "filler", "plan-1", "plan-2"):
        res = simulate(table1(), name, tick=MIN)
        _check_capacity(res, table1())


def _check_capacity(res, w: Workload) -> None:
    bb = dict(zip(w.ids.tolist(), w.bb.tolist(), strict=True))
    events = sorted([(float(e), 0, -int(p), -bb[int(j)]) for j, e, p in zip(res.workload.ids, res.end,
                                                                           res.size, strict=True)] +
                    [(float(s), 1, int(p), bb[int(j)]) for j, s, p in zip(res.workload.ids, res.start,
                                                                        res.size, strict=True)])
    cpu = buf = 0.0
    for _, _, c, b in events:
        cpu += c
        buf += b
        assert cpu <= w.machine and buf <= w.bb_total * (1 + 1e-9)
    assert np.all(res.end >= res.start) and not np.isnan(res.start).any()


def test_a_start_beyond_the_free_buffer_is_refused_by_the_decision_path():
    led = Ledger(range(4), bb_total=10 * TB)
    led.submit(Job(1, 0.0, 1, 60.0, min_procs=1, max_procs=1, bb=8 * TB))
    led.submit(Job(2, 0.0, 1, 60.0, min_procs=1, max_procs=1, bb=4 * TB))
    led.apply([StartJob(1, (0,))], 0.0)
    with pytest.raises(PolicyError, match="burst buffer"):
        led.apply([StartJob(2, (1,))], 0.0)
    assert led.snapshot(0.0).bb_free == pytest.approx(2 * TB)
    led.finish(1)
    assert led.snapshot(1.0).bb_free == pytest.approx(10 * TB)
    led.apply([StartJob(2, (1,))], 1.0)
    assert led.snapshot(1.0).bb_free == pytest.approx(6 * TB)


def _jobs(rows):
    return [Job(i, float(s), c, float(e), min_procs=c, max_procs=c, bb=float(b))
            for i, (s, c, e, b) in enumerate(rows, 1)]


def test_a_buffer_held_after_the_run_blocks_starts_until_it_is_released():
    led = Ledger(range(4), bb_total=10 * TB)
    led.submit(Job(1, 0.0, 1, 60.0, min_procs=1, max_procs=1, bb=6 * TB))
    led.submit(Job(2, 0.0, 1, 60.0, min_procs=1, max_procs=1, bb=6 * TB))
    led.apply([StartJob(1, (0,))], 0.0)
    led.finish(1)
    led.hold_bb(1, 6 * TB, after_run=True)          # its file system is being staged out
    assert led.bb_used == 6 * TB and led.snapshot(1.0).bb_free == pytest.approx(4 * TB)
    with pytest.raises(PolicyError, match="burst buffer"):
        led.apply([StartJob(2, (1,))], 1.0)
    assert led.release_bb(1) == 0.0 and led.bb_used == 6 * TB      # the run's hold is gone already
    assert led.release_bb(1, after_run=True) == 6 * TB and led.bb_used == 0.0
    assert led.release_bb(1, after_run=True) == 0.0                # released once
    led.apply([StartJob(2, (1,))], 2.0)
    assert led.bb_used == 6 * TB
    with pytest.raises(AttributeError):
        led.bb_used = 0.0                                          # only holds change it

def test_the_plan_places_each_job_at_the_earliest_time_both_resources_allow():
    prof = Profile2([0.0, 10.0], [2, 4], [4.0, 10.0])        # 2 CPUs and 4 units free now; all at t=10
    jobs = _jobs([(0, 2, 5, 6), (0, 2, 5, 2), (0, 4, 5, 0)])
    score, st_ = build_plan(jobs, prof, 0.0, 1.0)
    assert st_ == [10.0, 0.0, 15.0]                  # job 1 waits for buffer; job 2 fills the hole; job 3 after 1
    assert score == 25.0
    _, st_ = build_plan(jobs, prof, 0.0, 1.0, holes=False)
    assert st_ == [10.0, 10.0, 15.0]                 # without holes job 2 may not start before job 1


def test_the_nine_candidate_orders():
    jobs = _jobs([(0, 1, 30, 8), (1, 4, 10, 4), (2, 2, 20, 1)])
    orders = [[j.id for j in o] for o in candidate_orders(jobs)]
    # buffer per processor 8, 1, 0.5; over processors 8, 0.25, 0.25 (a tie keeps submission order)
    assert orders == [[1, 2, 3], [1, 3, 2], [2, 3, 1], [3, 2, 1], [1, 2, 3], [2, 3, 1], [1, 2, 3],
                      [2, 3, 1], [1, 3, 2]]


def test_plan_is_never_worse_than_its_best_candidate_and_is_reproducible():
    rng = np.random.default_rng(3)
    rows = [(float(rng.integers(0, 50)), int(rng.integers(1, 5)), float(rng.integers(5, 60)),
             float(rng.integers(0, 6))) for _ in range(9)]
    jobs = _jobs(rows)
    prof = Profile2([50.0, 70.0], [1, 4], [2.0, 8.0])
    best = Plan(PlanConfig(alpha=2.0, seed=7)).search(_Base(prof, jobs), len(jobs))
    s_best = build_plan([jobs[i] for i in best], prof, 50.0, 2.0)[0]
    assert s_best <= min(build_plan(o, prof, 50.0, 2.0)[0] for o in candidate_orders(jobs))
    again = Plan(PlanConfig(alpha=2.0, seed=7)).search(_Base(prof, jobs), len(jobs))
    assert again.tolist() == best.tolist()


def test_plan_exhaustive_for_short_queues_finds_the_optimum_and_counts_evaluations():
    jobs = _jobs([(0, 2, 10, 1), (0, 1, 50, 1), (0, 3, 5, 1), (0, 2, 30, 1)])
    prof = Profile2([0.0, 5.0], [1, 4], [10.0, 10.0])
    stats = PlanStats()
    best = Plan(PlanConfig(alpha=2.0), stats).search(_Base(prof, jobs), len(jobs))
    opt = min(build_plan(p, prof, 0.0, 2.0)[0] for p in itertools.permutations(jobs))
    assert build_plan([jobs[i] for i in best], prof, 0.0, 2.0)[0] == opt
    assert stats.evaluations == 24                    # 4! orders, each built once


def test_bad_configurations_say_what_is_wrong():
    with pytest.raises(ConfigError, match="alpha"):
        PlanConfig(alpha=0)
    with pytest.raises(ConfigError, match="cooling"):
        PlanConfig(r=1.5)
    with pytest.raises(PolicyError, match="never start"):
        Profile2([0.0], [4], [10.0]).earliest(2, 11.0, 5.0)
    with pytest.raises(PolicyError, match="never start"):
        build_plan(_jobs([(0, 5, 10, 1)]), Profile2([0.0], [4], [10.0]), 0.0, 1.0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 400), st.integers(1, 8), st.integers(1, 300), st.integers(0, 10)),
                min_size=1, max_size=25),
       st.sampled_from(["fcfs", "fcfs-easy", "fcfs-bb", "sjf-bb", "filler", "plan-1", "plan-2"]))
def test_random_workloads_respect_both_capacities_and_finish(rows, name):
    w = Workload.from_jobs([(i, s, r, r, c) for i, (s, c, r, _) in enumerate(rows, 1)], 8, "random")
    order = np.argsort([s for s, *_ in rows], kind="stable")
    w.bb = np.array([float(rows[int(k)][3]) for k in order])
    w.bb_total = 10.0
    res = simulate(w, POLICIES[name])
    _check_capacity(res, w)
    assert np.allclose(res.end - res.start, w.run)    # every job ran its whole run time once
