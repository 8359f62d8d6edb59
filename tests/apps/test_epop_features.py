"""EPOP completed: pause/resume at a safe point (no CPU while paused, exact result), the per-MPI-call profile of
each phase, and the Amdahl model fitted to the measured iteration times."""

from __future__ import annotations

import json
import os
import subprocess
import time

import numpy as np
import psutil
import pytest

from malleable.apps import jacobi
from malleable.errors import PlanError
from malleable.runtime._model import fit_amdahl
from malleable.runtime._plan import parse_plan
from tests.apps._helpers import MPI_ENV, app_cmd, load_stats, malleable_run


def test_amdahl_fit_recovers_a_known_model():
    t1, s = 2.0, 0.25
    m = fit_amdahl([(p, t1 * (s + (1 - s) / p)) for p in (1, 2, 4, 4, 3)])
    assert m.t1 == pytest.approx(t1) and m.serial == pytest.approx(s)
    assert m.speedup(4) == pytest.approx(1 / (s + (1 - s) / 4))
    assert fit_amdahl([(2, 1.0), (2, 1.1)]) is None  # one size: nothing to fit
    assert fit_amdahl([(1, 1.0), (2, 1.5)]).serial == 1.0  # slower with more: all serial


def test_pause_steps_are_validated():
    assert parse_plan('[{"at_probe": 4, "pause": 2.5}]')[0].pause == 2.5
    for bad in ('[{"at_probe": 4, "pause": 0}]', '[{"at_probe": 4, "pause": "1"}]',
                '[{"at_probe": 4, "pause": 1, "procs": 2}]'):
        with pytest.raises(PlanError, match="a pause step is"):
            parse_plan(bad)


def _job_processes(root: psutil.Process) -> list[psutil.Process]:
    return [p for p in root.children(recursive=True) if "python" in p.name()]


def test_paused_job_uses_no_cpu_and_resumes_to_the_exact_result(mpi, tmp_path):
    out = tmp_path / "u.npy"
    plan = [{"at_probe": 3, "procs": 3}, {"at_probe": 150, "pause": 4}]
    env = dict(os.environ, **MPI_ENV)
    cmd = app_cmd("jacobi", "--n", "200", "--iters", "400", "--out", str(out), "-v", python=mpi.python)
    p = subprocess.Popen([mpi.python, "-m", "malleable", "run", "-n", "1", "--plan", json.dumps(plan), "--", *cmd],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = p.stderr.readline()
            assert line, p.stdout.read()
            if "job paused" in line:
                break
        time.sleep(0.3)
        procs = _job_processes(psutil.Process(p.pid))
        assert len(procs) == 3
        for q in procs:
            q.cpu_percent(None)
        time.sleep(2.0)
        usage = [q.cpu_percent(None) for q in procs]
        out_s, err_s = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 0, err_s
    assert all(u < 5.0 for u in usage), f"CPU % of the paused ranks: {usage}"
    assert "job resumed after 4." in err_s
    assert np.array_equal(np.load(out), jacobi.reference(200, 400))


def test_stats_carry_the_per_call_profile_and_the_model(mpi, tmp_path):
    out, stats = tmp_path / "u.npy", tmp_path / "s.json"
    plan = [{"at_probe": 21, "procs": 2}, {"at_probe": 61, "procs": 3}]
    cmd = app_cmd("jacobi", "--n", "64", "--iters", "100", "--check-every", "10", "--out", str(out),
                  "--stats", str(stats), python=mpi.python)
    malleable_run(1, cmd, plan, mpi=mpi)
    s = load_stats(stats)
    solve = [x for x in s["stats"] if x["phase"] == "solve"]
    assert [(x["procs"], x["iterations"]) for x in solve] == [(1, 20), (2, 40), (3, 40)]
    for seg in solve:
        prof = seg["profile"]
        # every rank owns rows: two halo exchanges per iteration, one residual Allreduce per 10 iterations
        assert prof["Sendrecv"]["calls"] == 2 * seg["iterations"]
        assert prof["Allreduce"]["calls"] == seg["iterations"] // 10
        assert sum(v["seconds"] for v in prof.values()) == pytest.approx(seg["mpi_seconds"], rel=1e-6)
    model = s["models"]["solve"]
    assert model["sizes"] == [1, 2, 3] and 0.0 <= model["serial_fraction"] <= 1.0 and model["t1"] > 0
    assert np.array_equal(np.load(out), jacobi.reference(64, 100))
