"""Seed 001's I/O mapping and scheduling: the priority orders, Make-Pack, LPT, the pack simulator, the
workload generator and the experiment, against hand-computed cases."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from malleable.controller.experiments import EXPERIMENTS, run_experiments
from malleable.controller.experiments._exp001 import EXP_001
from malleable.controller.sched._iomap import (
    PRIORITIES,
    App,
    Pack,
    first_fit,
    generate_workload,
    io_load,
    lpt,
    make_pack,
    q_distribution,
)
from malleable.controller.sched._iomap_sim import simulate, simulate_pack
from malleable.errors import ConfigError

# -- the eight priority orders ---------------------------------------------------------------------------------
# A blocker (id 0) holds the I/O node from t=1 to t=21; apps 1-4 ask during that time, so at t=21 all four
# compete (b = 1, so I/O time = volume). Their second requests (only app 4 has two iterations) come at
# >= 22 + 12 = 34, after the round ends at 21 + 2 + 4 + 3 + 1 = 31.
#   id  w   v  n  request  remaining  v/(w+v)
#   1   10  2  1  10       2          2/12 = .167
#   2   11  4  1  11       4          4/15 = .267
#   3   13  3  1  13       3          3/16 = .188
#   4   12  1  2  12       1+13 = 14  1/13 = .077
# stretch (now + v)/(w + v), worst first: t=21: 1: 23/12=1.92, 2: 25/15=1.67, 3: 24/16=1.5, 4: 22/13=1.69 -> 1;
# t=23: 2: 27/15=1.8, 3: 26/16=1.63, 4: 24/13=1.85 -> 4; t=24: 2: 28/15=1.87, 3: 27/16=1.69 -> 2; then 3.
ROUND = Pack((App(0, 1, 1, 1.0, 20.0), App(1, 1, 1, 10.0, 2.0), App(2, 1, 1, 11.0, 4.0),
              App(3, 1, 1, 13.0, 3.0), App(4, 1, 2, 12.0, 1.0)))
ORDERS = {
    "lowest-id": (1, 2, 3, 4),
    "longest-io": (2, 3, 1, 4),
    "shortest-io": (4, 1, 3, 2),
    "shortest-remaining": (1, 3, 2, 4),
    "longest-remaining": (4, 2, 3, 1),
    "fifo": (1, 2, 4, 3),
    "bandwidth": (4, 1, 3, 2),
    "stretch": (1, 4, 2, 3),
}


def test_eight_orders_by_name():
    assert list(PRIORITIES) == list(ORDERS)


@pytest.mark.parametrize("policy", list(ORDERS))
def test_priority_order_grants(policy):
    run = simulate_pack(ROUND, policy, record=True)
    assert [s.app for s in run.io] == [0, *ORDERS[policy], 4]
    assert run.io[0].start == 1.0 and run.io[1].start == 21.0 and run.io[4].end == 31.0


def test_fifo_round_by_hand():
    # grants 0: 1-21, 1: 21-23, 2: 23-27, 4: 27-28, 3: 28-31; app 4 asks again at 28 + 12 = 40, ends at 41
    run = simulate_pack(ROUND, "fifo")
    assert run.completion == {0: 21.0, 1: 23.0, 2: 27.0, 3: 31.0, 4: 41.0}
    assert run.end == 41.0
    assert run.stretch[2] == pytest.approx(27 / 15) and run.stretch[4] == pytest.approx(41 / 26)
    assert run.max_stretch() == pytest.approx(31 / 16)


# -- the simulator ----------------------------------------------------------------------------------------------


def test_two_apps_by_hand():
    # A (2 nodes... here 1): w=2, v=2, 2 iterations, T=8; B (2 nodes): w=3, v=1, 2 iterations, T=8. FIFO:
    # A asks at 2, I/O 2-4; B asks at 3, waits, I/O 4-5; A computes 4-6, I/O 6-8 (ends 8); B computes 5-8,
    # I/O 8-9 (ends 9). Stretch A 8/8, B 9/8. Node time on P=4: exec 1*8 + 2*8 = 24, delay 2 * 1 (B waited
    # 3-4), idle 4*9 - (1*8 + 2*9) = 10.
    pk = Pack((App(1, 1, 2, 2.0, 2.0), App(2, 2, 2, 3.0, 1.0)))
    run = simulate_pack(pk, "fifo", p=4, record=True)
    assert [(s.app, s.start, s.end) for s in run.io] == [(1, 2, 4), (2, 4, 5), (1, 6, 8), (2, 8, 9)]
    assert run.end == 9.0 and run.stretch == {1: 1.0, 2: 9 / 8}
    assert (run.exec_time, run.delay_time, run.idle_time) == (24.0, 2.0, 10.0)
    assert run.ideal == 8.0
    # bandwidth 2 halves every I/O phase: A 2-3, B 3-3.5, A 5-6, B 6.5-7 -> no wait at all
    fast = simulate_pack(pk, "fifo", b=2.0)
    assert fast.completion == {1: 6.0, 2: 7.0} and fast.stretch == {1: 1.0, 2: 1.0}


def test_packs_back_to_back_and_release():
    p1 = Pack((App(1, 1, 2, 2.0, 2.0), App(2, 2, 2, 3.0, 1.0)))  # ends at 9 (above)
    p2 = Pack((App(3, 1, 1, 1.0, 1.0),))                         # alone: 2 s
    sc = simulate([p1, p2], 1, "fifo", nodes=[(0, 1)])
    assert sc.makespan == 11.0 and sc.runs[1].start == 9.0 and sc.runs[1].completion == {3: 11.0}
    assert sc.stretch()[3] == 1.0 and sc.mean_pack_max_stretch() == pytest.approx((9 / 8 + 1) / 2)
    assert sc.robustness() == pytest.approx(11 / 10)
    late = simulate([p1, p2], 1, "fifo", nodes=[(0, 1)], release="zero")
    assert late.stretch()[3] == pytest.approx(11 / 2)


# -- Make-Pack and LPT --------------------------------------------------------------------------------------------
# P = 4, b = 1, one iteration each; by decreasing T: 1 (10), 2 (8), 3 (6), 4 (5), 5 (2).
#   id nodes w  v  T   volume
#   1  2     6  4  10  4
#   2  1     4  4  8   4
#   3  1     3  3  6   3
#   4  2     4  1  5   1
#   5  3     1  1  2   1
# S = inf: 1 -> A; 2 -> A (3 nodes); 3 -> A (4 nodes); 4 -> new B; 5 (3 nodes) fits neither -> new C;
#   list by decreasing nodes: A (4), C (3), B (2).
# S = 1: 1 -> A (T = 10); 2 -> A (volume 8 <= 10); 3: A would hold 11 > 10 -> new B (T = 6); 4: A has 3 + 2 > 4
#   nodes, B: volume 4 <= 6, 3 nodes -> B; 5: 3 more nodes fit neither -> new C. Order A (3), B (3), C (3).
MP = [App(1, 2, 1, 6.0, 4.0), App(2, 1, 1, 4.0, 4.0), App(3, 1, 1, 3.0, 3.0), App(4, 2, 1, 4.0, 1.0),
      App(5, 3, 1, 1.0, 1.0)]


def test_make_pack_first_fit_by_hand():
    packs = first_fit(MP[::-1], 4)
    assert [pk.ids() for pk in packs] == [(1, 2, 3), (5,), (4,)]
    assert [pk.nodes() for pk in packs] == [4, 3, 2]


def test_make_pack_s1_by_hand():
    packs = make_pack(MP[::-1], 1.0, 4)
    assert [pk.ids() for pk in packs] == [(1, 2), (3, 4), (5,)]
    assert packs[0].occupation(1.0) == pytest.approx(0.8) and packs[1].occupation(1.0) == pytest.approx(4 / 6)


def test_make_pack_exact_fit_and_lone_overload():
    # 2 + 3 = 0.5 * 10: an exact fit joins; with S = 0.1 each app overloads a pack alone and still gets one
    x, y = App(1, 1, 1, 8.0, 2.0), App(2, 1, 1, 1.0, 3.0)
    assert [pk.ids() for pk in make_pack([x, y], 0.5, 4)] == [(1, 2)]
    assert [pk.ids() for pk in make_pack([x, y], 0.1, 4)] == [(1,), (2,)]


LENGTHS = (6.0, 10.0, 2.0, 8.0, 5.0)
SINGLE = [Pack((App(i, 1, 1, t, 0.0),)) for i, t in enumerate(LENGTHS)]


def test_lpt_by_hand():
    # by decreasing length: 1 (10), 3 (8), 0 (6), 4 (5), 2 (2). R=2: 1 -> n0 (10), 3 -> n1 (8), 0 -> n1 (14),
    # 4 -> n0 (15), 2 -> n1 (16). R=3: 1 -> n0, 3 -> n1, 0 -> n2, 4 -> n2 (11), 2 -> n1 (10 < 10? no: n0 = 10,
    # n1 = 8 -> n1).
    assert lpt(SINGLE, 2) == ((1, 4), (3, 0, 2))
    assert lpt(SINGLE, 3) == ((1,), (3, 2), (0, 4))
    assert lpt(SINGLE, 1) == ((1, 3, 0, 4, 2),)
    assert simulate(SINGLE, 2).makespan == 16.0 and simulate(SINGLE, 3).makespan == 11.0


def test_io_load_by_hand():
    # 4 * (4 + 2) / (2 * 10 + 1 * 4) = 1
    assert io_load([App(1, 2, 1, 6.0, 4.0), App(2, 1, 2, 1.0, 1.0)], 4) == pytest.approx(1.0)


# -- the generator ----------------------------------------------------------------------------------------------


def test_generator_reproducible_and_in_range():
    a = generate_workload(np.random.default_rng(5), 2.0)
    assert a == generate_workload(np.random.default_rng(5), 2.0)
    assert a != generate_workload(np.random.default_rng(6), 2.0)
    assert 25 <= len(a) <= 100
    for x in a:
        assert 250 <= x.iterations <= 1000 and 10 <= x.compute <= 100
        assert 0.01 <= x.volume / x.compute <= 1.0
        assert x.nodes in {2 ** j for j in range(12)}
    b = generate_workload(np.random.default_rng(5), 2.0, beta_mode="bernoulli", sigma_is="variance")
    assert len(b) == len(a)


def test_q_distribution_mean():
    sizes = 2.0 ** np.arange(12)
    for m in (1.5, 40.0, 700.0, 2000.0):
        pr = q_distribution(m)
        assert pr.sum() == pytest.approx(1.0) and float(pr @ sizes) == pytest.approx(m, rel=1e-6)
    assert q_distribution(0.5)[0] == 1.0 and q_distribution(5000.0)[-1] == 1.0


def test_generated_load_tracks_alpha_gen():
    lo = np.mean([io_load(generate_workload(np.random.default_rng(k), 0.5, iterations=(5, 10)), 2048)
                  for k in range(5)])
    hi = np.mean([io_load(generate_workload(np.random.default_rng(k), 8.0, iterations=(5, 10)), 2048)
                  for k in range(5)])
    assert lo < 1.0 < 4.0 < hi


# -- bad parameters -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("call, match", [
    (lambda: make_pack(MP, 0.0, 4), "sensibility S must be > 0"),
    (lambda: make_pack(MP, math.nan, 4), "sensibility S must be > 0"),
    (lambda: make_pack(MP, 1.0, 0), "P must be >= 1"),
    (lambda: make_pack(MP, 1.0, 2), "app 5 needs 3 compute nodes"),
    (lambda: make_pack(MP, 1.0, 4, b=0.0), "bandwidth b must be finite and > 0"),
    (lambda: lpt(SINGLE, 0), "R must be >= 1"),
    (lambda: App(1, 0, 1, 1.0, 1.0), "nodes and iterations must be >= 1"),
    (lambda: App(1, 1, 1, 0.0, 0.0), "not both 0"),
    (lambda: simulate_pack(ROUND, "nope"), "unknown I/O priority order 'nope'"),
    (lambda: simulate_pack(ROUND, release="later"), "release must be"),
    (lambda: simulate_pack(ROUND, p=2), "does not fit P = 2"),
    (lambda: simulate(SINGLE, 2, nodes=[(0, 1)]), "exactly once"),
    (lambda: generate_workload(np.random.default_rng(0), 0.0), "alpha_gen must be > 0"),
    (lambda: generate_workload(np.random.default_rng(0), 1.0, sigma_is="sd"), "sigma_is"),
    (lambda: generate_workload(np.random.default_rng(0), 1.0, apps=(10, 5)), "apps range"),
    (lambda: generate_workload(np.random.default_rng(0), 1.0, bounds=(5.0, 6.0)), "never reached"),
])
def test_bad_parameters(call, match):
    with pytest.raises(ConfigError, match=match):
        call()


# -- invariants -----------------------------------------------------------------------------------------------

apps_st = st.lists(st.tuples(st.integers(1, 8), st.integers(1, 4), st.integers(0, 6), st.integers(0, 6)),
                   min_size=1, max_size=9).map(
    lambda xs: [App(i, q, n, float(w), float(v) if w + v else 1.0) for i, (q, n, w, v) in enumerate(xs)])


@settings(max_examples=60, deadline=None)
@given(apps_st, st.sampled_from([0.3, 0.7, 1.0, 2.5, math.inf]), st.sampled_from(list(PRIORITIES)),
       st.integers(1, 3))
def test_packs_and_exclusive_io(apps, s, policy, r):
    packs = make_pack(apps, s, 8)
    ids = sorted(i for pk in packs for i in pk.ids())
    assert ids == [a.id for a in apps]                                     # every app in exactly one pack
    assert all(pk.nodes() <= 8 for pk in packs)
    assert all(len(pk.apps) == 1 or pk.occupation(1.0) <= s * (1 + 1e-9) for pk in packs)
    sc = simulate(packs, r, policy, p=8, record=True)
    for k, nk in enumerate(sc.nodes):
        spans = sorted((s_ for i in nk for s_ in sc.runs[i].io), key=lambda x: (x.start, x.end))
        for a, b in zip(spans, spans[1:]):
            assert b.start >= a.end - 1e-9                                 # one I/O phase at a time per node
        for i in nk:
            run = sc.runs[i]
            for a in packs[i].apps:
                assert sum(1 for x in run.io if x.app == a.id) == a.iterations
                assert run.stretch[a.id] >= 1 - 1e-9
            assert run.exec_time + run.delay_time + run.idle_time == pytest.approx(8 * (run.end - run.start))
    assert sc.makespan >= max(a.length(1.0) for a in apps) - 1e-9


# -- the experiment ---------------------------------------------------------------------------------------------


def test_exp_001_quick(tmp_path):
    assert EXPERIMENTS["001"] is EXP_001
    doc = run_experiments(["001"], tmp_path, quick=True, workers=1, report=False)[0]
    rows = {(r["scenario"], r["metric"]): r for r in doc["table"]}
    for n, pub in ((1, "1.09"), (3, "0.71"), (5, "0.53")):
        row = rows[(f"{n} I/O node(s), S=1 / First-Fit", "makespan (geometric mean)")]
        assert row["published"] == pub and row["ours"]["n"] == 2 and row["ours"]["mean"] > 0
    assert ("1 I/O node, S=1 / First-Fit", "stretch (geometric mean)") in rows
    body = json.loads((tmp_path / "001.json").read_text())
    assert body["name"] == "001" and len(body["table"]) == len(doc["table"]) and doc["runs"]["count"] == 10
