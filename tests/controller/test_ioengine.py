"""The I/O-aware simulator: file-system sharing, the burst-buffer job model, scheduling points, and invariants
(bandwidth and buffer never over-allocated, every byte moved, every job done) on random workloads."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from malleable.controller.sched import Ledger, Phase, PhaseKind, ResizeJob, StartJob
from malleable.controller.sched._model import Job, JobKind
from malleable.controller.sim import Workload, simulate_io
from malleable.errors import ConfigError, PolicyError

C, W, SI, CK, SO = (PhaseKind.COMPUTE, PhaseKind.WRITE, PhaseKind.STAGE_IN, PhaseKind.CHECKPOINT,
                    PhaseKind.STAGE_OUT)
GB = 1e9


def workload(rows, machine, phases, bb=None, bb_total=0.0) -> Workload:
    """rows: (id, submit, procs); run and estimate are the compute work (the engine runs the phases)."""
    est = [sum(p.amount for p in ph if p.kind is C) or 1.0 for ph in phases]
    w = Workload.from_jobs([(i, s, e, e * 100, p) for (i, s, p), e in zip(rows, est, strict=True)], machine, "t")
    w.phases = list(phases)
    if bb is not None:
        w.bb, w.bb_total = np.array(bb, dtype=float), bb_total
    return w


def ends(res) -> dict[int, float]:
    return {int(j): float(e) for j, e in zip(res.result.workload.ids, res.result.end, strict=True)}


def test_the_file_system_is_shared_equally_per_participating_node():
    # 48 GB/s file system, 12.5 GB/s per node: 2- and 6-node jobs writing together get 12 and 36 GB/s
    w = workload([(1, 0, 2), (2, 0, 6)], 8, [(Phase(W, 120 * GB),), (Phase(W, 360 * GB),)])
    res = simulate_io(w, "fcfs", pfs_bw=48 * GB, link_bw=12.5 * GB)
    assert ends(res) == pytest.approx({1: 10.0, 2: 10.0})
    assert res.pfs[1].max() == pytest.approx(48 * GB)
    alone = simulate_io(workload([(1, 0, 2)], 8, [(Phase(W, 120 * GB),)]), "fcfs", pfs_bw=48 * GB,
                        link_bw=12.5 * GB)
    assert ends(alone)[1] == pytest.approx(120 / 25)             # alone: its link's 25 GB/s


def test_pairing_io_heavy_with_compute_heavy_jobs_shortens_the_makespan():
    d = (Phase(C, 1.0), Phase(W, 4.0))
    c = (Phase(C, 4.0), Phase(W, 1.0))
    rows = [(i, 0, 1) for i in range(1, 5)]
    same = simulate_io(workload(rows, 2, [d, d, c, c]), "fcfs", pfs_bw=1.0, link_bw=1.0)
    mixed = simulate_io(workload(rows, 2, [d, c, d, c]), "fcfs", pfs_bw=1.0, link_bw=1.0)
    assert max(ends(same).values()) == pytest.approx(15.0)
    assert max(ends(mixed).values()) == pytest.approx(12.0)


def test_the_burst_buffer_job_model_drains_checkpoints_while_computing():
    ph = (Phase(SI, 4.0), Phase(C, 3.0), Phase(CK, 4.0), Phase(C, 3.0), Phase(SO, 4.0))
    w = workload([(1, 0, 1)], 2, [ph], bb=[4.0], bb_total=8.0)
    res = simulate_io(w, "fcfs-bb", pfs_bw=10.0, link_bw=1.0, bb_bw=2.0)
    # stage-in 4 s, compute 3, checkpoint 2 (at 2/s), compute 3 while the drain runs (12..), stage-out shares
    # the file system with the drain's last second: each gets its link's 1/s; the job ends at 16
    assert ends(res)[1] == pytest.approx(16.0)
    assert res.io_time[0] == pytest.approx(4 + 2 + 4)
    assert res.moved == pytest.approx({"stage-in": 4.0, "checkpoint": 4.0, "drain": 4.0, "stage-out": 4.0})
    assert res.bb[1].max() == pytest.approx(4.0) and res.bb[1][-1] == 0.0


def test_malleable_jobs_are_resized_only_at_their_scheduling_points():
    seen: list[tuple[float, frozenset]] = []

    def grow_at_points(snap, now):
        seen.append((now, snap.points))
        out = [StartJob(j.id, snap.free[:j.procs]) for j in snap.queue[:1] if j.procs <= snap.n_free]
        for r in snap.running:
            if r.id in snap.points and snap.n_free and r.size < r.job.max_procs:
                out.append(ResizeJob(r.id, (*r.nodes, snap.free[0])))
        return out

    ph = (Phase(C, 4.0, point=True), Phase(C, 4.0))
    w = workload([(1, 0, 1)], 2, [ph])
    w.kind, w.min_procs, w.max_procs, w.serial = (np.array([2], dtype=np.int8), np.array([1]), np.array([2]),
                                                  np.array([0.0]))
    res = simulate_io(w, grow_at_points, pfs_bw=1.0, link_bw=1.0)      # linear speedup (serial fraction 0)
    assert seen[1] == (4.0, frozenset({1}))                     # the pass at the point lists the job
    assert ends(res)[1] == pytest.approx(4.0 + 4.0 / 2)          # the second phase ran on 2 nodes
    assert int(res.result.resizes[0]) == 1
    led = Ledger(range(2))
    led.submit(Job(1, 0.0, 1, 10.0, JobKind.MALLEABLE, 1, 2, phases=ph))
    led.apply([StartJob(1, (0,))], 0.0)
    with pytest.raises(PolicyError, match="between scheduling points"):
        led.apply([ResizeJob(1, (0, 1))], 1.0)


def test_bad_bandwidths_are_refused():
    w = workload([(1, 0, 1)], 1, [(Phase(C, 1.0),)])
    with pytest.raises(ConfigError, match="bandwidths"):
        simulate_io(w, "fcfs", pfs_bw=0.0, link_bw=1.0)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 4), st.integers(0, 3), st.integers(1, 20),
                          st.integers(1, 30), st.integers(0, 6)), min_size=1, max_size=12),
       st.sampled_from(["fcfs", "fcfs-bb", "sjf-bb", "filler", "plan-2"]))
def test_random_io_workloads_keep_every_invariant(rows, name):
    rows = sorted(rows, key=lambda r: r[0])
    phases, bbs, vol = [], [], 0.0
    for _, _, ck, comp, size, bb in rows:
        ph = [Phase(SI, float(size))]
        for _ in range(ck):
            ph += [Phase(C, float(comp)), Phase(CK, float(size))]
        ph += [Phase(C, float(comp)), Phase(SO, float(size))]
        phases.append(tuple(ph))
        bbs.append(float(bb))
        vol += size * (2 + 2 * ck)
    w = workload([(i, r[0], r[1]) for i, r in enumerate(rows, 1)], 4, phases, bb=bbs, bb_total=8.0)
    res = simulate_io(w, name, pfs_bw=3.0, link_bw=1.0, bb_bw=2.0)
    r = res.result
    assert not np.isnan(r.end).any() and np.all(r.end >= r.start)            # no job lost
    assert res.pfs[1].max() <= 3.0 + 1e-9                                      # bandwidth never over-allocated
    assert res.bb[1].max() <= 8.0 + 1e-9                                       # buffer never over-allocated
    assert sum(res.moved.values()) == pytest.approx(vol)                       # every byte moved
    comp = np.array([sum(p.amount for p in ph if p.kind is C) for ph in w.phases])
    assert np.all(r.end - r.start >= comp + res.io_time - 1e-6)                # all work done, never faster


IO_FILE = """{"format": "malleable-jobs", "version": 1, "machine": 4, "bb_total": 10}
{"id": 1, "submit": 0, "run": 600, "procs": 1, "bb": 4}
{"id": 2, "submit": 0, "run": 240, "procs": 1, "bb": 2, "phases": [["stage-in", 2], ["compute", 200], \
["checkpoint", 1], ["compute", 40], ["stage-out", 2]]}
{"id": 3, "submit": 60, "run": 60, "procs": 3, "bb": 8}
"""


def test_an_io_workload_file_runs_from_the_command_line(tmp_path):
    import json
    import subprocess
    import sys

    f = tmp_path / "io.jsonl"
    f.write_text(IO_FILE)
    run = [sys.executable, "-m", "malleable", "simulate", "--workload", str(f), "--policy", "fcfs-bb"]
    p = subprocess.run([*run, "--pfs-bw", "1", "--link-bw", "1", "--json", str(tmp_path / "s.json")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    s = json.loads((tmp_path / "s.json").read_text())
    # job 3 needs 8 of the 10 buffer units: it waits for job 1's 4 (t=600); job 2's transfers take 2+1+2 s
    assert s["mean_wait"] == pytest.approx(180.0) and s["makespan"] == pytest.approx(660.0)
    assert s["io_seconds"] == pytest.approx(5.0) and s["bytes_moved"] == pytest.approx(2 + 1 + 1 + 2)
    p = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "--pfs-bw" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("line, why", [
    ('{"id": 1, "submit": 0, "run": 6, "procs": 1, "phases": [["compute"]]}', "phase 0 must be"),
    ('{"id": 1, "submit": 0, "run": 6, "procs": 1, "phases": [["sleep", 3]]}', "phase 0 must be"),
    ('{"id": 1, "submit": 0, "run": 6, "procs": 1, "bb": -1}', "'bb' must be"),
    ('{"id": 1, "submit": 0, "run": 6, "procs": 1, "bb": 20}', "burst buffer"),
    ('{"id": 1, "submit": 0, "run": 6, "procs": 1, "intensity": [[2, 1.5]]}', r"in \[0, 1\]"),
])
def test_bad_io_fields_are_one_line_errors(tmp_path, line, why):
    from malleable.controller.sim._jobfile import read_jobs
    from malleable.errors import TraceError

    f = tmp_path / "w.jsonl"
    f.write_text('{"format": "malleable-jobs", "version": 1, "machine": 4, "bb_total": 10}\n' + line + "\n")
    with pytest.raises(TraceError, match=why):
        read_jobs(f)
