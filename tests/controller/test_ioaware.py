"""The I/O-intensity-aware scheduler of seed 000 (§4.2) and its baseline FCFSm: the digest's "How to test it"
cases (a)-(c) on hand-built snapshots, the config checks, a property test of the decisions, and passes through
the real decision path (the Ledger)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from malleable.controller.sched import (
    POLICIES,
    IOAware,
    IOAwareConfig,
    Job,
    JobKind,
    Ledger,
    Phase,
    PhaseKind,
    ResizeJob,
    Snapshot,
    StartJob,
    StorageView,
    fcfsm,
    get_policy,
)
from malleable.controller.sched._ioaware import (
    Load,
    best_candidate,
    best_configuration,
    configurations,
    system_intensity,
    workload_intensity,
)
from malleable.errors import ConfigError, PolicyError

from ._snap import running

POINT = (Phase(PhaseKind.COMPUTE, 10.0), Phase(PhaseKind.WRITE, 1e9, point=True))


def rigid(id, n, i, submit=0.0, est=100.0):
    """A rigid job of ``n`` nodes and I/O intensity ``i``."""
    return Job(id, submit, n, est, JobKind.RIGID, n, n, intensity=((n, i),))


def malleable(id, pref, lo, hi, intensity, submit=0.0, est=100.0, constraint="", phases=POINT):
    """A phased malleable job (scheduling point after each phase)."""
    return Job(id, submit, pref, est, JobKind.MALLEABLE, lo, hi, constraint=constraint, phases=phases,
               intensity=intensity)


def snapshot(free, run=(), queue=(), points=(), machine=None):
    """A snapshot with the given free node ids, running views, queue and scheduling points."""
    free = tuple(free)
    run = tuple(sorted(run, key=lambda r: r.end_estimate))
    nodes = tuple(range(machine)) if machine else tuple(sorted({*free, *(x for r in run for x in r.nodes)}))
    return Snapshot(0.0, nodes, free, run, tuple(queue), io=StorageView(points=frozenset(points)))


# -- (a) candidate choice ---------------------------------------------------------------------------------------


def case_a():
    r1 = rigid(1, 8, 0.8)
    p1, p2 = rigid(2, 4, 0.9, submit=1.0), rigid(3, 4, 0.1, submit=2.0)
    return snapshot((0, 1, 2, 3), [running(r1, tuple(range(4, 12)))], [p1, p2])


def test_case_a_intensities():
    s = case_a()
    assert round(system_intensity(s.running), 3) == 0.8
    assert round(workload_intensity(s.running, s.queue), 3) == 0.650
    assert round(workload_intensity(s.running, s.queue, "cluster", 12), 3) == 0.867
    load = Load(0.8 * 8, 8)
    assert round(load.plus(s.queue[0], 4).intensity(), 3) == 0.833      # P1: delta 0.183
    assert round(load.plus(s.queue[1], 4).intensity(), 3) == 0.567      # P2: delta 0.083


@pytest.mark.parametrize(("alpha", "denominator", "winner"), [
    (0.6, "nodes", 3), (0.4, "nodes", 2), (0.5, "nodes", 2),    # 0.5: wp(P1) = wp(P2), the lower pos wins
    (0.0, "nodes", 2), (1.0, "nodes", 3),
    (0.4, "cluster", 2), (0.6, "cluster", 2), (1.0, "cluster", 2),
])
def test_case_a_candidate_choice(alpha, denominator, winner):
    """wp(P1) = alpha, wp(P2) = 1 - alpha with the weighted-mean W; with the cluster denominator P1 always."""
    out = IOAware(IOAwareConfig(alpha, denominator))(case_a(), 0.0)
    assert out == [StartJob(winner, (0, 1, 2, 3))]


def test_case_a_best_candidate_function():
    s = case_a()
    assert best_candidate(s.queue, 4, Load(6.4, 8), 0.65, 0.6) == (1, 4)
    assert best_candidate(s.queue, 4, Load(6.4, 8), 0.65, 0.4) == (0, 4)
    assert best_candidate(s.queue, 3, Load(6.4, 8), 0.65, 0.4) is None        # nothing fits


# -- (b) scheduling point ---------------------------------------------------------------------------------------


def case_b():
    b = rigid(1, 4, 0.9)
    a = malleable(2, 4, 2, 6, ((2, 0.5), (4, 0.3), (6, 0.2)), constraint="even")   # Conf {2, 4, 6}
    q = rigid(3, 6, 0.1, submit=5.0)
    run = [running(b, (0, 1, 2, 3)), running(a, (4, 5, 6, 7))]
    return snapshot((8, 9), run, [q], points={2})


def test_case_b_intensities():
    s = case_b()
    a = s.running[1].job if s.running[1].id == 2 else s.running[0].job
    w = workload_intensity(s.running, s.queue)
    assert round(w, 3) == 0.386
    assert round(system_intensity(s.running), 3) == 0.600
    base = Load(0.9 * 4, 4)
    assert round(abs(w - base.plus(a, 2).intensity()), 3) == 0.381
    assert round(abs(w - base.plus(a, 6).intensity()), 3) == 0.094
    assert configurations(a, 100) == [2, 4, 6]


def test_case_b_expands_to_six():
    out = IOAware()(case_b(), 0.0)
    assert out == [ResizeJob(2, (4, 5, 6, 7, 8, 9))]          # grow appends the free nodes; Q (6) does not fit


def test_case_b_without_point_nothing_changes():
    s = case_b()
    s2 = snapshot(s.free, s.running, s.queue, points=())
    assert IOAware()(s2, 0.0) == []


def test_shrink_only_when_a_pending_job_then_fits():
    b = rigid(1, 4, 0.1)
    a = malleable(2, 6, 2, 6, ((2, 0.5), (6, 0.1)))           # i(4) = 0.3, i(2) = 0.5
    run = [running(b, (0, 1, 2, 3)), running(a, (4, 5, 6, 7, 8, 9))]
    q = rigid(3, 2, 0.9, submit=5.0)
    # W = (0.4 + 0.6 + 1.8) / 12 = 0.233, S = 0.1: size 2 gives S = 0.233 (gap 0), and Q fits the freed nodes
    out = IOAware()(snapshot((), run, [q], points={2}), 0.0)
    assert out == [ResizeJob(2, (4, 5)), StartJob(3, (6, 7))]
    assert best_configuration(a, 6, Load(1.0, 10), 2.8 / 12, 0, [q]) == 2
    big = rigid(4, 8, 0.9, submit=5.0)                         # 8 nodes never fit after the shrink: no shrink
    assert IOAware()(snapshot((), run, [big], points={2}), 0.0) == []
    assert best_configuration(a, 6, Load(1.0, 10), 0.5, 0, [big]) is None


# -- (c) alpha = 0 is FCFS among the jobs that fit --------------------------------------------------------------


def test_case_c_alpha_zero_is_fcfs_order():
    r = rigid(1, 4, 0.1)
    queue = [rigid(2, 8, 0.5, submit=1), rigid(3, 2, 0.9, submit=2), rigid(4, 2, 0.0, submit=3),
             rigid(5, 3, 0.1, submit=4), rigid(6, 2, 0.1, submit=5), rigid(7, 2, 0.2, submit=6)]
    s = snapshot(range(6), [running(r, (6, 7, 8, 9))], queue)
    out = IOAware(IOAwareConfig(alpha=0.0))(s, 0.0)
    assert out == [StartJob(3, (0, 1)), StartJob(4, (2, 3)), StartJob(6, (4, 5))]   # 2 and 5 are skipped
    balanced = IOAware(IOAwareConfig(alpha=1.0))(s, 0.0)
    assert [d.job_id for d in balanced] != [3, 4, 6]           # the order is alpha's doing


def test_malleable_candidate_gets_its_best_size():
    r = rigid(1, 4, 0.9)
    m = malleable(2, 4, 1, 6, ((1, 0.0), (6, 0.0)))
    # W = (3.6 + 0) / 8 = 0.45; S with m on n nodes = 3.6 / (4 + n): n = 4 gives exactly W
    assert IOAware(IOAwareConfig(alpha=1.0))(snapshot(range(6), [running(r, (6, 7, 8, 9))], [m]), 0.0) == \
        [StartJob(2, (0, 1, 2, 3))]


# -- config and registry ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kw", [{"alpha": -0.1}, {"alpha": 1.5}, {"alpha": math.nan}, {"alpha": "0.4"},
                                {"alpha": True}, {"w_denominator": "machine"}])
def test_bad_config_raises(kw):
    with pytest.raises(ConfigError, match="io-aware: (alpha|w_denominator)"):
        IOAwareConfig(**kw)


def test_registered_names():
    assert get_policy("io-aware") == IOAware(IOAwareConfig(0.4))
    for a in (0.2, 0.3, 0.4, 0.5, 0.6):
        assert POLICIES[f"io-aware-{a}"].cfg.alpha == pytest.approx(a)
    assert get_policy("fcfsm") is fcfsm


# -- FCFSm ------------------------------------------------------------------------------------------------------


def test_fcfsm_expands_at_points_to_max_and_never_shrinks():
    a = malleable(1, 4, 2, 8, ((2, 0.5), (8, 0.1)))
    c = malleable(2, 4, 2, 8, ((2, 0.5), (8, 0.1)))
    run = [running(a, (0, 1, 2, 3), end=50), running(c, (4, 5, 6, 7), end=60)]
    s = snapshot((8, 9, 10, 11, 12, 13), run, points={1})
    assert fcfsm(s, 0.0) == [ResizeJob(1, (0, 1, 2, 3, 8, 9, 10, 11))]     # to max; c is not at a point
    head = rigid(3, 12, 0.1)                                                # blocked head: still no shrink
    s = snapshot((8, 9), run, [head, rigid(4, 2, 0.1)], points={1, 2})
    out = fcfsm(s, 0.0)
    assert out == [ResizeJob(1, (0, 1, 2, 3, 8, 9))]                       # no backfilling of job 4 either
    assert fcfsm(snapshot((), run, [head], points={1, 2}), 0.0) == []


def test_fcfsm_starts_in_order():
    s = snapshot(range(5), (), [rigid(1, 2, 0.1), malleable(2, 4, 2, 6, ()), rigid(3, 1, 0.1)])
    assert fcfsm(s, 0.0) == [StartJob(1, (0, 1)), StartJob(2, (2, 3, 4))]


# -- property: decisions respect free nodes and bounds ----------------------------------------------------------


@st.composite
def snapshots(draw):
    nid = iter(range(10_000))
    jid = iter(range(1, 10_000))
    run, points = [], set()
    for _ in range(draw(st.integers(0, 4))):
        lo = draw(st.integers(1, 4))
        hi = draw(st.integers(lo, 8))
        size = draw(st.integers(lo, hi))
        ints = tuple(sorted({(draw(st.integers(1, 8)), draw(st.floats(0, 1))) for _ in range(2)}))
        ints = tuple(dict(ints).items())
        if draw(st.booleans()):
            job = malleable(next(jid), size, lo, hi, ints, constraint=draw(st.sampled_from(["", "even", "pof2"])))
            if draw(st.booleans()):
                points.add(job.id)
        else:
            job = rigid(next(jid), size, draw(st.floats(0, 1)))
        run.append(running(job, tuple(next(nid) for _ in range(size)), end=draw(st.floats(1, 100))))
    free = tuple(next(nid) for _ in range(draw(st.integers(0, 12))))
    queue = []
    for k in range(draw(st.integers(0, 6))):
        lo = draw(st.integers(1, 6))
        hi = draw(st.integers(lo, 10))
        if draw(st.booleans()):
            queue.append(malleable(next(jid), draw(st.integers(lo, hi)), lo, hi,
                                   ((lo, draw(st.floats(0, 1))), (hi + 1, draw(st.floats(0, 1)))), submit=k))
        else:
            queue.append(rigid(next(jid), lo, draw(st.floats(0, 1)), submit=k))
    return snapshot(free, run, queue, points)


@settings(max_examples=300, deadline=None)
@given(snapshots(), st.sampled_from([IOAware(IOAwareConfig(0.0)), IOAware(), IOAware(IOAwareConfig(1.0)),
                                     IOAware(IOAwareConfig(0.5, "cluster")), fcfsm]))
def test_decisions_use_free_nodes_and_respect_bounds(s, policy):
    out = policy(s, 0.0)
    views = {r.id: r for r in s.running}
    queued = {j.id: j for j in s.queue}
    free = set(s.free)
    for d in out:                                   # shrinks first (the ledger's order)
        if isinstance(d, ResizeJob) and len(d.nodes) < views[d.job_id].size:
            assert tuple(d.nodes) == tuple(views[d.job_id].nodes[:len(d.nodes)])
            free |= set(views[d.job_id].nodes[len(d.nodes):])
    avail = len(free)
    used = 0
    for d in out:
        if isinstance(d, StartJob):
            job = queued.pop(d.job_id)
            assert job.allows(len(d.nodes)) and (job.kind is not JobKind.RIGID or len(d.nodes) == job.procs)
            new = list(d.nodes)
        else:
            assert isinstance(d, ResizeJob) and d.job_id in s.points
            v = views.pop(d.job_id)
            assert v.job.kind is JobKind.MALLEABLE and v.job.allows(len(d.nodes)) and len(d.nodes) != v.size
            new = list(d.nodes[v.size:]) if len(d.nodes) > v.size else []
            if new:
                assert tuple(d.nodes[:v.size]) == tuple(v.nodes)
        assert set(new) <= free and len(set(new)) == len(new)
        free -= set(new)
        used += len(new)
    assert used <= avail
    if policy is not fcfsm:                         # greedy: nothing left in the queue fits what stays free
        assert all(not configurations(j, len(free)) for j in queued.values())


# -- the real decision path ---------------------------------------------------------------------------------------


def test_passes_through_the_ledger():
    ledger = Ledger(list(range(16)))
    jobs = [rigid(1, 6, 0.9, submit=0), rigid(2, 4, 0.1, submit=1),
            malleable(3, 4, 2, 8, ((2, 0.6), (8, 0.2)), submit=2), rigid(4, 8, 0.8, submit=3),
            malleable(5, 4, 2, 6, ((2, 0.1), (6, 0.3)), submit=4), rigid(6, 2, 0.5, submit=5)]
    for j in jobs:
        ledger.submit(j)
    policy = get_policy("io-aware")
    resized = started = 0
    now = 0.0
    for _ in range(20):
        decisions = policy(ledger.snapshot(now), now)
        applied = ledger.apply(decisions, now, True)
        started += sum(e[0] == "start" for e in applied.effects)
        resized += sum(e[0] == "resize" for e in applied.effects)
        now += 10.0
        ledger.points = set()
        if not ledger.queue and not ledger.running:
            break
        # every other pass, the phased jobs reach a scheduling point; otherwise the earliest job ends
        phased = [jid for jid, v in ledger.running.items() if v.job.phases]
        if phased and int(now) % 20 == 0:
            ledger.points = set(phased)
        elif ledger.running:
            ledger.finish(min(ledger.running, key=lambda k: ledger.running[k].end_estimate))
    assert started == len(jobs) and not ledger.queue and resized >= 1
    ledger.submit(malleable(9, 2, 2, 4, ()))
    ledger.apply([StartJob(9, tuple(ledger.free[:2]))], now, True)
    ledger.points = set()
    v = ledger.view(9)
    with pytest.raises(PolicyError, match="scheduling points"):      # what the policy must never ask for
        ledger.apply([ResizeJob(9, (*v.nodes, ledger.free[0]))], now, True)
    assert policy(ledger.snapshot(now), now) == []                   # and does not: 9 is not at a point


def test_zero_denominators_give_zero():
    assert Load().intensity() == 0.0 and system_intensity(()) == 0.0
    assert workload_intensity((), ()) == 0.0 and workload_intensity((), (), "cluster", 0) == 0.0
    assert IOAware()(snapshot(range(4)), 0.0) == []
    one = rigid(1, 2, 0.0)                      # one candidate, all deltas equal: wp 0, it starts
    assert IOAware(IOAwareConfig(1.0))(snapshot(range(4), queue=[one]), 0.0) == [StartJob(1, (0, 1))]
