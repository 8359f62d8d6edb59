"""The I/O experiments' workloads (seed 004's KTH-SP2 with burst buffers, seed 000 §4.2's checkpointing jobs) and
quick runs of them."""

from __future__ import annotations

import numpy as np
import pytest

from malleable.controller.experiments import Run
from malleable.controller.experiments._exp000io import FLOPS, LINK, PFS, io_workload
from malleable.controller.experiments._io004 import MACHINE, bb_workload, kth, mean_per_processor, parts
from malleable.controller.experiments._runner import run_task
from malleable.controller.sched import PhaseKind
from malleable.errors import TraceError


def test_kth_log_with_burst_buffers_and_the_application_model():
    w = kth()
    assert len(w) == 27979 and int(w.procs.max()) <= MACHINE and w.machine == MACHINE
    ps = parts(w)
    assert len(ps) == 16 and all(float(p.submit[0]) == 0.0 for p in ps)
    assert all(float(p.submit[-1]) < 21 * 86400 for p in ps) and sum(len(p) for p in ps) <= len(w)
    b = bb_workload(ps[0], seed=1)
    assert b.bb_total == pytest.approx(96 * mean_per_processor())
    assert np.all(b.bb <= b.bb_total) and np.all(b.bb[b.estimate <= 120] == 10e6)
    assert np.all(b.bb[b.estimate > 120] >= 100e6 * b.procs[b.estimate > 120] - 1)
    for ph, bb in zip(b.phases, b.bb, strict=True):
        kinds = [p.kind for p in ph]
        assert kinds[0] is PhaseKind.STAGE_IN and kinds[-1] is PhaseKind.STAGE_OUT
        k = kinds.count(PhaseKind.COMPUTE)
        assert 1 <= k <= 10 and kinds.count(PhaseKind.CHECKPOINT) == k - 1
        assert ph[0].amount == bb
    again = bb_workload(ps[0], seed=1)
    assert np.array_equal(again.bb, b.bb)                         # seeded


def test_a_missing_log_is_one_clear_error(tmp_path):
    with pytest.raises(TraceError, match="MALLEABLE_KTH"):
        kth(tmp_path / "nope.swf")


def test_checkpointing_workload_and_its_intensities():
    w = io_workload(60)
    assert len(w) == 60 and w.machine == 500
    for i in range(60):
        ph = w.phases[i]
        reps = len(ph) // 2
        assert 10 <= reps <= 25 and all(p.kind is PhaseKind.WRITE for p in ph[1::2])
        mall = int(w.kind[i]) == 2
        assert all(p.point == mall for p in ph[1::2])
        sizes = [n for n, _ in w.intensity[i]]
        assert sizes == (list(range(2, 21)) if mall else [int(w.procs[i])])
        # i(n) = checkpoint time / (compute + checkpoint time) at n nodes, without contention
        n = sizes[-1]
        comp = sum(p.amount for p in ph[0::2]) * int(w.procs[i]) / n
        io = sum(p.amount for p in ph[1::2]) / min(n * LINK, PFS)
        assert w.intensity[i][-1][1] == pytest.approx(io / (comp + io))
    assert FLOPS == 100e9


def test_quick_runs_of_the_io_experiments():
    # seed 004: the barrier of Fig. 1 on a three-week part; checkpoints are the whole request
    p = {"part": 0, "sigma": 1.0}
    easy = run_task(Run("004", "part 1", "fcfs-easy", 0, True, p, detail=True).task())
    bb = run_task(Run("004", "part 1", "fcfs-bb", 0, True, p).task())
    plan = run_task(Run("004", "part 1", "plan-2", 0, True, p).task())
    assert easy["metrics"]["mean_wait_h"] > bb["metrics"]["mean_wait_h"] > 0
    assert plan["metrics"]["plan_evaluations"] > 0 and plan["metrics"]["plan_passes"] > 0
    rec = easy["record"]
    assert {"utilisation", "pfs", "bb"} <= set(rec["curves"]) and max(rec["curves"]["bb"]["y"]) <= 1.0 + 1e-9
    w = bb_workload(parts(kth())[0], seed=0)
    for ph, req in zip(w.phases, w.bb, strict=True):
        assert all(x.amount == req for x in ph if x.kind is PhaseKind.CHECKPOINT)
    # seed 000 §4.2: FCFSm against alpha 0.4 on the first 600 jobs, with the intensity curves of the report
    q = {"n": 600, "load": 0.9}
    base = run_task(Run("000-io", "load 0.9", "fcfsm", 0, True, q).task())["metrics"]
    io = run_task(Run("000-io", "load 0.9", "io-aware-0.4", 0, True, q, detail=True).task())
    assert base["avg_checkpoint_s"] > 0 and io["metrics"]["avg_checkpoint_s"] > 0
    assert io["metrics"]["malleable_mean_size"] < base["malleable_mean_size"]
    assert io["record"]["curves"]["intensity_s"]["y"] and io["record"]["curves"]["intensity_w"]["y"]
    still = run_task(Run("000-io", "load 0.9", "io-aware-0.4, no points", 0, True, q).task())["metrics"]
    assert still["resizes"] == 0 and io["metrics"]["resizes"] > 0
