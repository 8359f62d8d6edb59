"""Matmul app: matches serial NumPy to 1e-10 relative for fixed sizes and across expand/shrink plans."""

from __future__ import annotations

import numpy as np
import pytest

from malleable.apps import matmul
from tests.apps._helpers import MPI_ENV, app_cmd, load_stats, malleable_run, sizes


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def test_reference_is_scaled_and_seeded():
    c1, c2 = matmul.reference(16, 3, seed=4), matmul.reference(16, 3, seed=4)
    assert np.array_equal(c1, c2) and not np.array_equal(c1, matmul.reference(16, 3, seed=5))
    a, b = matmul.inputs(16, 4)
    for _ in range(2):
        c = a @ b
        a = c / np.abs(c).max()
    assert rel_err(c1, a @ b) < 1e-12
    assert np.isfinite(matmul.reference(32, 60, seed=1)).all()  # scaling keeps long sequences finite


@pytest.mark.parametrize("procs", [1, 2, 3])
def test_fixed_process_counts_match_numpy(mpi, tmp_path, procs):
    out = tmp_path / "c.npy"
    proc = mpi.run(procs, *app_cmd("matmul", "--n", "61", "--reps", "5", "--seed", "3", "--out", str(out),
                                   python=mpi.python), env=MPI_ENV, timeout=120)
    assert rel_err(np.load(out), matmul.reference(61, 5, 3)) < 1e-10
    assert f"procs={procs}" in proc.stdout


def test_uneven_3_to_5_to_2(mpi, tmp_path):
    out, stats = tmp_path / "c.npy", tmp_path / "s.json"
    plan = [{"at_probe": 3, "procs": 5}, {"at_probe": 6, "procs": 2}]
    cmd = app_cmd("matmul", "--n", "67", "--reps", "8", "--out", str(out), "--stats", str(stats), python=mpi.python)
    malleable_run(3, cmd, plan, mpi=mpi)
    assert rel_err(np.load(out), matmul.reference(67, 8, 0)) < 1e-10
    s = load_stats(stats)
    assert sizes(s, "multiply") == [3, 5, 2] and len(s["adaptations"]) == 2


def test_anchor_1_to_4_to_1(mpi, tmp_path):
    out = tmp_path / "c.npy"
    plan = [{"at_probe": 2, "procs": 4}, {"at_probe": 4, "procs": 1}]
    malleable_run(1, app_cmd("matmul", "--n", "50", "--reps", "5", "--seed", "9", "--out", str(out),
                             python=mpi.python), plan, mpi=mpi)
    assert rel_err(np.load(out), matmul.reference(50, 5, 9)) < 1e-10


@pytest.mark.parametrize("args, message", [
    (["--n", "0"], "argument --n: must be >= 1"),
    (["--reps", "two"], "argument --reps: not an integer"),
    (["--seed", "-3"], "argument --seed: must be >= 0"),
    (["--probe-every", "0"], "argument --probe-every: must be >= 1"),
])
def test_bad_options_are_usage_errors(capsys, args, message):
    with pytest.raises(SystemExit) as e:
        matmul.parse_args(args)
    assert e.value.code == 2 and message in capsys.readouterr().err
