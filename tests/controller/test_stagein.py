"""Early stage-in in the pure core: the rule that picks which queued jobs stage in before their start
(:func:`plan_stage_in`) and the ledger's early buffer holds, counted once when the job starts."""

from __future__ import annotations

import pytest

from malleable.controller.sched import POLICIES, Ledger, StartJob
from malleable.controller.sched._model import Job, Reserve
from malleable.controller.sched._stagein import StagePlan, plan_stage_in
from malleable.errors import PolicyError

G = float(1 << 30)


def job(i, bb, procs=1, submit=0.0):
    return Job(i, submit, procs, 60.0, min_procs=procs, max_procs=procs, bb=bb)


def test_an_early_hold_is_its_jobs_alone_and_becomes_the_runs_hold_at_its_start():
    led = Ledger(range(3), bb_total=10 * G)
    led.submit(job(1, 0.0, procs=2))
    led.submit(job(2, 6 * G))
    led.submit(job(3, 6 * G))
    led.apply([StartJob(1, (0, 1))], 0.0)
    led.hold_bb(2, 6 * G, early=True)
    assert led.bb_used == 6 * G and led.early_bb(2) == 6 * G
    assert led.snapshot(1.0).bb_free == 10 * G               # policies plan as without early stage-in
    done = led.apply([StartJob(3, (2,))], 1.0)                # 3 would need 2's buffer: deferred, not started
    assert [d.job_id for d, _ in done.deferred] == [3] and not done.effects and 3 in led.queued
    led.finish(1)
    led.apply([StartJob(2, (0,))], 2.0)
    assert led.bb_used == 6 * G and led.early_bb(2) == 0.0      # counted once
    led.finish(2)
    assert led.bb_used == 0.0


def test_a_refused_start_keeps_the_early_hold_and_a_dequeue_releases_it():
    led = Ledger(range(2), bb_total=10 * G)
    led.submit(job(1, 0.0))
    led.submit(job(2, 6 * G))
    led.apply([StartJob(1, (0,))], 0.0)
    led.hold_bb(2, 6 * G, early=True)
    with pytest.raises(PolicyError, match="not free"):
        led.apply([StartJob(2, (0,))], 1.0)                            # host 0 is job 1's
    assert led.early_bb(2) == 6 * G and led.bb_used == 6 * G
    led.dequeue(2)                                                     # cancelled
    assert led.bb_used == 0.0 and led.early_bb(2) == 0.0 and 2 not in led.queued


def test_the_head_and_reserved_jobs_are_planned_in_queue_order_and_the_first_short_one_blocks_the_rest():
    led = Ledger(range(2), bb_total=10 * G)
    for i, bb in ((1, 4 * G), (2, 5 * G), (3, 2 * G), (4, 1 * G)):
        led.submit(job(i, bb, submit=float(i)))
    assert plan_stage_in(led.snapshot(0.0), {1, 2, 3, 4}, 10 * G) == StagePlan((1,), ())     # only the head is planned
    led.apply([Reserve(2, 50.0, 1), Reserve(3, 60.0, 1), Reserve(4, 70.0, 1)], 0.0)
    # 9G for 1 and 2; 3 (2G) waits for buffer, and 4 (1G, would fit) waits behind it rather than overtake it
    assert plan_stage_in(led.snapshot(0.0), {1, 2, 3, 4}, 10 * G) == StagePlan((1, 2), (3, 4))
    led.hold_bb(1, 4 * G, early=True)
    led.hold_bb(2, 5 * G, early=True)
    assert plan_stage_in(led.snapshot(0.0), {3, 4}, 10 * G - led.bb_used) == StagePlan((), (3, 4))
    assert plan_stage_in(led.snapshot(0.0), {4}, 10 * G - led.bb_used) == StagePlan((4,), ())             # 3 not asking: 4 goes
    assert plan_stage_in(led.snapshot(0.0), set(), 10 * G) == StagePlan((), ())


def test_the_bb_policies_start_a_job_on_its_early_hold_and_no_other_job_on_it():
    for name in ("fcfs-bb", "fcfs-easy", "sjf-bb", "filler", "plan-2"):
        led = Ledger(range(2), bb_total=8 * G)
        led.submit(job(1, 6 * G))
        led.submit(job(2, 4 * G))
        led.hold_bb(1, 6 * G, early=True)
        done = led.apply(POLICIES[name](led.snapshot(0.0), 0.0), 0.0, strict=False)
        assert sorted(led.running) == [1] and led.bb_used == 6 * G, name
        assert not done.rejected, name


def test_early_holds_leave_every_bb_policys_plan_unchanged():
    """The policies plan as if there were no early stage-in: the decisions of a pass over a queue with early holds
    equal those without (what the simulator, which has none, would decide)."""
    def ledger(early):
        led = Ledger(range(4), bb_total=10 * G)
        for i, (procs, bb) in enumerate(((4, 2 * G), (2, 6 * G), (1, 3 * G), (2, 1 * G), (1, 4 * G)), 1):
            led.submit(job(i, bb, procs=procs, submit=float(i)))
        led.apply([StartJob(1, (0, 1, 2, 3))], 0.0)
        if early:
            led.hold_bb(2, 6 * G, early=True)
        return led
    for name in ("fcfs-bb", "fcfs-easy", "sjf-bb", "filler", "plan-1", "plan-2"):
        plain, held = ledger(False), ledger(True)
        assert POLICIES[name](held.snapshot(1.0), 1.0) == POLICIES[name](plain.snapshot(1.0), 1.0), name
