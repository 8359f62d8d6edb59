"""Jobs' own size requests in the one decision path: the ledger keeps them for the policies (validated), a
``Decline`` drops one, and ``malleable-fill`` grants, defers and keeps them as the rule in
``sched/_requests.py`` says."""

from __future__ import annotations

import pytest

from malleable.controller.sched import Decline, Job, JobKind, Ledger, ResizeJob, SizeRequest, StartJob
from malleable.controller.sched._fill import malleable_fill
from malleable.controller.sched._requests import answer_requests
from malleable.errors import PolicyError


def ledger_with(*jobs: tuple[int, int, JobKind, int, int], nodes: int = 6) -> Ledger:
    """A ledger of ``nodes`` nodes running ``(id, size, kind, min, max)`` jobs on the first free nodes."""
    led = Ledger(tuple(range(nodes)))
    for jid, size, kind, lo, hi in jobs:
        led.submit(Job(jid, 0.0, size, 100.0, kind, lo, hi))
        led.apply([StartJob(jid, tuple(led.free[:size]))], 0.0)
    return led


def test_requests_are_validated_where_they_enter():
    led = ledger_with((1, 2, JobKind.MALLEABLE, 1, 4), (2, 1, JobKind.RIGID, 1, 1))
    for jid, req, why in [(2, SizeRequest(2), "not a running malleable job"),
                          (9, SizeRequest(2), "not a running malleable job"),
                          (1, SizeRequest(5), "within the job's 1..4 nodes"),
                          (1, SizeRequest(2), "already runs on 2 nodes"),
                          (1, SizeRequest(0, 5, 9), "within the job's 1..4 nodes")]:
        with pytest.raises(PolicyError, match=why):
            led.ask(jid, req)
    assert led.snapshot(1.0).requests == {}
    led.ask(1, SizeRequest(3, at=1.0))
    led.ask(1, SizeRequest(4, at=2.0))                       # a newer request replaces the older one
    assert dict(led.snapshot(2.0).requests) == {1: SizeRequest(4, at=2.0)}


def test_decline_drops_the_request_and_is_told():
    led = ledger_with((1, 2, JobKind.MALLEABLE, 1, 4))
    led.ask(1, SizeRequest(4))
    applied = led.apply([Decline(1, "no")], 1.0)
    assert applied.effects == [("decline", 1, "no")] and led.requests == {}
    with pytest.raises(PolicyError, match="no outstanding request"):
        led.apply([Decline(1)], 2.0)
    assert led.counts["Decline"] == 1


def test_fill_grants_shrinks_at_once_and_grows_only_into_idle_nodes():
    led = ledger_with((1, 3, JobKind.MALLEABLE, 1, 6), (2, 2, JobKind.RIGID, 2, 2))
    led.ask(1, SizeRequest(1))
    d = malleable_fill(led.snapshot(1.0), 1.0)
    assert d == [ResizeJob(1, (0, 1, 2)[:1])]
    led.apply(d, 1.0)
    # granted: the request stands, so the policy does not grow the job into the idle nodes
    snap = led.snapshot(2.0)
    assert snap.requests[1] == SizeRequest(1) and malleable_fill(snap, 2.0) == []
    led.ask(1, SizeRequest(5, at=3.0))
    led.submit(Job(3, 3.0, 6, 50.0))                         # waits for the whole machine
    assert answer_requests(led.snapshot(3.0)) == []           # deferred: a queued job comes first
    led.dequeue(3)
    d = malleable_fill(led.snapshot(4.0), 4.0)                # 3 nodes idle now, 4 asked for: still deferred
    assert [x for x in d if isinstance(x, ResizeJob) and x.job_id == 1] == []
    led.finish(2)                                             # 2 more nodes free: 1 + 5 idle
    d = malleable_fill(led.snapshot(5.0), 5.0)
    assert len(d) == 1 and d[0].job_id == 1 and len(d[0].nodes) == 5 and d[0].nodes[0] == 0
    led.apply(d, 5.0)
    assert led.running[1].size == 5 and led.requests[1].wants(5)


def test_a_range_asks_for_as_many_nodes_as_are_idle_within_it():
    led = ledger_with((1, 1, JobKind.MALLEABLE, 1, 8), nodes=6)
    led.ask(1, SizeRequest(0, 2, 4))
    assert answer_requests(led.snapshot(1.0)) == [ResizeJob(1, (0, 1, 2, 3))]
    led2 = ledger_with((1, 1, JobKind.MALLEABLE, 1, 8), (2, 4, JobKind.RIGID, 4, 4), nodes=6)
    led2.ask(1, SizeRequest(0, 3, 0))                         # at least 3: only 1 idle node, so it waits
    assert answer_requests(led2.snapshot(1.0)) == []


def test_requests_end_with_the_job():
    led = ledger_with((1, 2, JobKind.MALLEABLE, 1, 4))
    led.ask(1, SizeRequest(4))
    led.finish(1)
    assert led.snapshot(1.0).requests == {}
