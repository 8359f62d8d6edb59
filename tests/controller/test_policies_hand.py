"""Hand-worked schedules of 3-10 jobs for FCFS, EASY and conservative backfilling (times worked out below)."""

from __future__ import annotations

import pytest

from malleable.controller import Workload, simulate


def starts(rows, machine, policy, **kw):
    w = Workload.from_jobs(rows, machine)
    r = simulate(w, policy, **kw)
    return {int(i): float(s) for i, s in zip(w.ids, r.start)}


# (id, submit, run, estimate, procs) on a 10-node machine
SMALL_BACKFILL = [(1, 0, 10, 10, 6), (2, 1, 5, 5, 6), (3, 2, 2, 2, 2)]


def test_fcfs_never_lets_a_small_job_pass_the_head():
    """J1 takes 6 of 10 nodes until 10; J2 (6) waits; J3 (2) fits at 2 but FCFS keeps it behind J2."""
    assert starts(SMALL_BACKFILL, 10, "fcfs") == {1: 0, 2: 10, 3: 10}


def test_easy_backfills_a_short_job_before_the_shadow_time():
    """Shadow time of J2 is 10 (J1's estimated end); J3 ends at 2 + 2 = 4 <= 10, so it starts at 2."""
    assert starts(SMALL_BACKFILL, 10, "easy") == {1: 0, 2: 10, 3: 2}


def test_conservative_backfills_a_short_job_too():
    """Profile at 2: [2,10) 4 free, J2 reserved [10,15); J3 (2 nodes, 2 s) fits at 2 without touching it."""
    assert starts(SMALL_BACKFILL, 10, "conservative") == {1: 0, 2: 10, 3: 2}


def test_easy_refuses_a_backfill_that_would_delay_the_head():
    """J2 needs 8: shadow 10, extra 10 - 8 = 2. J3 (4 nodes, 20 s) would end at 22 > 10 and 4 > extra: it waits
    for J2's end at 15 (J2 leaves only 2 nodes free from 10 to 15)."""
    rows = [(1, 0, 10, 10, 6), (2, 1, 5, 5, 8), (3, 2, 20, 20, 4)]
    assert starts(rows, 10, "easy") == {1: 0, 2: 10, 3: 15}
    assert starts(rows, 10, "fcfs") == {1: 0, 2: 10, 3: 15}


def test_easy_backfills_on_the_extra_nodes():
    """J2 needs 6: shadow 10, extra 4. J3 (4 nodes, 20 s) ends after the shadow but uses only the extra nodes, so
    it starts at 2 and J2 still starts at 10."""
    rows = [(1, 0, 10, 10, 6), (2, 1, 5, 5, 6), (3, 2, 20, 20, 4)]
    assert starts(rows, 10, "easy") == {1: 0, 2: 10, 3: 2}
    assert starts(rows, 10, "fcfs") == {1: 0, 2: 10, 3: 10}


# J1 holds 9 of 10 nodes until 10. J2 (7) is the head: shadow 10, extra 3. J3 (3) does not fit now (1 free).
# J4 (1 node, 100 s) arrives at 2.
EXTRA_STEAL = [(1, 0, 10, 10, 9), (2, 1, 10, 10, 7), (3, 1, 10, 10, 3), (4, 2, 100, 100, 1)]


def test_easy_backfill_on_extra_nodes_delays_the_second_job():
    """EASY protects only the head: J4 takes one of the 3 extra nodes at 2, so at 10 only 9 nodes free up; J2
    takes 7 and J3 (3) must wait for J2's end at 20."""
    assert starts(EXTRA_STEAL, 10, "easy") == {1: 0, 2: 10, 3: 20, 4: 2}


def test_conservative_refuses_the_backfill_easy_takes():
    """Conservative reserves J2 at [10,20) on 7 nodes and J3 at [10,20) on the other 3: no node is free in
    [10,20), so J4 (100 s) cannot start at 2 and is reserved at 20."""
    assert starts(EXTRA_STEAL, 10, "conservative") == {1: 0, 2: 10, 3: 10, 4: 20}
    assert starts(EXTRA_STEAL, 10, "fcfs") == {1: 0, 2: 10, 3: 10, 4: 20}


def test_conservative_compresses_when_a_job_ends_early():
    """J1 estimates 20 s but runs 5. At 1, J2 (10 nodes) is reserved at 20; J3 (5 nodes, 10 s) fits beside J1
    in [1, 11), before J2's reservation, and starts at 1. J1 ends at 5, J3 at 11: J2 is pulled in from 20 to
    11. FCFS keeps J3 behind J2 (5 and 15)."""
    rows = [(1, 0, 5, 20, 5), (2, 1, 10, 10, 10), (3, 1, 10, 10, 5)]
    assert starts(rows, 10, "conservative") == {1: 0, 2: 11, 3: 1}
    assert starts(rows, 10, "easy") == {1: 0, 2: 11, 3: 1}
    assert starts(rows, 10, "fcfs") == {1: 0, 2: 5, 3: 15}


def test_equal_times_process_ends_before_submissions():
    """J1 ends at 10 exactly when J2 (all 10 nodes) arrives: J2 starts at 10, in the same single pass."""
    w = Workload.from_jobs([(1, 0, 10, 10, 10), (2, 10, 5, 5, 10)], 10)
    r = simulate(w, "fcfs")
    assert list(r.start) == [0, 10]
    assert list(r.end) == [10, 15]
    assert r.passes == 3     # t=0, t=10 (end + submit together), t=15


def test_ten_job_trace_all_policies():
    """A 10-job trace on 8 nodes worked out by hand for each policy (estimates = run times except J4)."""
    rows = [
        (1, 0, 100, 100, 4),   # starts 0 everywhere
        (2, 0, 50, 50, 4),     # starts 0 everywhere (4 + 4 = 8)
        (3, 10, 30, 30, 8),    # needs the machine: after J1 (100) -> 100
        (4, 20, 20, 40, 2),    # EASY: at 20 no node free; at 50 (J2 ends) 4 free: 50+40=90 <= 100 -> 50
        (5, 30, 10, 10, 2),    # EASY: at 50, after J4 2 free: 50+10 <= 100 -> 50
        (6, 60, 20, 20, 4),    # EASY: at 60 no node free (J1 4, J4 2, J5 2... J5 ended at 60) -> see below
        (7, 70, 5, 5, 1),
        (8, 200, 10, 10, 8),
        (9, 200, 10, 10, 1),
        (10, 205, 1, 1, 1),
    ]
    # FCFS: J3 waits for J1 (100): 100..130; at 130 J4 (2), J5 (2) and J6 (4) fill the 8 nodes; J7 waits for
    # J5's end at 140; J8 200..210; J9 and J10 (arrived 205, behind J9) at 210.
    assert starts(rows, 8, "fcfs") == {1: 0, 2: 0, 3: 100, 4: 130, 5: 130, 6: 130, 7: 140, 8: 200, 9: 210,
                                       10: 210}
    # EASY: at 50 (J2 ends, 4 free): head J3 shadow 100, extra 0: J4 (50+40=90) and J5 (60) backfill.
    # At 60 J5 ends (2 free): J6 needs 4, no. At 70 J7 (1): 70+5 <= 100 -> starts, ends 75. At 70 J4 ends
    # (it ran 20 from 50): frees 2 -> at 70, ends first: 4 free; J6 (4): 70+20=90 <= 100 -> J6 starts at 70,
    # J7 no longer fits (0 free) and starts when J6/J? free a node: J6 ends 90 -> J7 at 90 (90+5 <= 100).
    # J1 ends 100: J3 100..130. J8 200, J9 210, J10 210.
    assert starts(rows, 8, "easy") == {1: 0, 2: 0, 3: 100, 4: 50, 5: 50, 6: 70, 7: 90, 8: 200, 9: 210, 10: 210}
    # Conservative: at 60 (J5 ends) J6 is reserved at 130, behind J3, because J4's estimate runs to 90; at 70
    # J4 ends early, the profile is rebuilt, and J6 fits [70, 90) before J3's reservation: same as EASY.
    assert starts(rows, 8, "conservative") == starts(rows, 8, "easy")


@pytest.mark.parametrize("policy", ["fcfs", "easy", "conservative"])
def test_hints_do_not_change_schedules(policy):
    rows = [(1, 0, 10, 10, 9), (2, 1, 10, 10, 7), (3, 1, 10, 10, 3), (4, 2, 100, 100, 1), (5, 3, 1, 50, 1),
            (6, 3, 4, 4, 1)]
    assert starts(rows, 10, policy, hints=True) == starts(rows, 10, policy, hints=False)
