"""The I/O experiments' workloads (seed 004's KTH-SP2 with burst buffers, seed 000 §4.2's checkpointing jobs) and
their quick reports."""

from __future__ import annotations

import json

import numpy as np
import pytest

from malleable.controller.experiments import run_experiment
from malleable.controller.experiments._exp000io import FLOPS, LINK, PFS, io_workload
from malleable.controller.experiments._io004 import MACHINE, bb_workload, kth, mean_per_processor, parts
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


def test_quick_reports_of_the_io_experiments(tmp_path):
    rep = run_experiment("004", tmp_path, quick=True)
    body = json.loads((tmp_path / "004.json").read_text())
    assert (tmp_path / "004.png").stat().st_size > 1000 and body["rows"]
    for part in (0, 1):
        r = body["runs"][f"parts:{part}:1.0"]
        assert r["fcfs-easy"]["mean_wait_h"] > r["fcfs-bb"]["mean_wait_h"]      # the barrier of Fig. 1
        assert r["sjf-bb"]["mean_wait_h"] > 0 and r["plan-2"]["plan_evaluations"] > 0
    assert any("plan-2" in row.scenario for row in rep.rows)
    rep = run_experiment("000-io", tmp_path, quick=True)
    assert {row.scenario for row in rep.rows} == {"fcfsm", "io-aware-0.4"}
    runs = json.loads((tmp_path / "000-io.json").read_text())["runs"]
    assert runs["fcfsm"]["avg_checkpoint_s"] > 0 and runs["io-aware-0.4"]["trace"]
