"""Jacobi app: bit-for-bit equal to serial NumPy for fixed sizes and across expand/shrink plans."""

from __future__ import annotations

import numpy as np
import pytest

from malleable.apps import jacobi
from tests.apps._helpers import MPI_ENV, app_cmd, load_stats, malleable_run, sizes


def naive(n: int, iters: int) -> np.ndarray:
    """An independent serial reference: the textbook loop, written here again."""
    u = np.zeros((n, n))
    u[0, :] = 1.0
    for _ in range(iters):
        v = u.copy()
        v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        u = v
    return u


def test_reference_and_chunked_sweep_agree_bitwise():
    n = 41
    ref = jacobi.reference(n, 30)
    assert np.array_equal(ref, naive(n, 30))
    u = jacobi.initial_grid(n)
    unew, tmp = u.copy(), np.empty((4, n - 2))  # chunks of 4 rows, the last one partial
    for _ in range(30):
        jacobi.sweep(u, unew, tmp)
        u, unew = unew, u
    assert np.array_equal(u, ref)
    assert ref[0].tolist() == [1.0] * n and not ref[-1].any()
    assert not ref[1:, 0].any() and not ref[1:, -1].any()


def test_reference_tolerance_stops_early():
    a = jacobi.reference(20, 5000, tol=1e-3, check_every=10)
    b = jacobi.reference(20, 5000)
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("procs", [1, 2, 3])
def test_fixed_process_counts_match_serial_exactly(mpi, tmp_path, procs):
    out = tmp_path / "u.npy"
    cmd = app_cmd("jacobi", "--n", "37", "--iters", "60", "--check-every", "7", "--out", str(out), python=mpi.python)
    proc = mpi.run(procs, *cmd, env=MPI_ENV, timeout=120)
    assert np.array_equal(np.load(out), jacobi.reference(37, 60))
    assert f"procs={procs}" in proc.stdout and "iterations=60" in proc.stdout


@pytest.mark.parametrize("flags", [[], ["--registered"]])
def test_uneven_3_to_5_to_2(mpi, tmp_path, flags):
    out, stats = tmp_path / "u.npy", tmp_path / "s.json"
    plan = [{"at_probe": 10, "procs": 5}, {"at_probe": 30, "procs": 2}]
    malleable_run(3, app_cmd("jacobi", "--n", "37", "--iters", "50", "--check-every", "9",
                             "--out", str(out), "--stats", str(stats), *flags, python=mpi.python), plan, mpi=mpi)
    assert np.array_equal(np.load(out), jacobi.reference(37, 50))
    s = load_stats(stats)
    assert sizes(s, "solve") == [3, 5, 2]
    got = [(a["old_size"], a["new_size"], a["iteration"]) for a in s["adaptations"]]
    assert got == [(3, 5, 9), (5, 2, 29)]


@pytest.mark.parametrize("flags", [[], ["--registered"]])
def test_anchor_grows_1_2_4_and_shrinks_to_2(mpi, tmp_path, flags):
    out, stats = tmp_path / "u.npy", tmp_path / "s.json"
    plan = [{"at_probe": 5, "procs": 2}, {"at_probe": 15, "procs": 4}, {"at_probe": 30, "procs": 2}]
    cmd = app_cmd("jacobi", "--n", "45", "--iters", "40", "--out", str(out), "--stats", str(stats), *flags,
                  python=mpi.python)
    malleable_run(1, cmd, plan, mpi=mpi)
    assert np.array_equal(np.load(out), jacobi.reference(45, 40))
    s = load_stats(stats)
    assert sizes(s, "solve") == [1, 2, 4, 2]
    assert [s_["iterations"] for s_ in s["stats"] if s_["phase"] == "solve"] == [4, 10, 15, 11]
    assert all(0.0 <= x["mtct"] <= 1.0 for x in s["stats"])


@pytest.mark.parametrize("flags", [[], ["--registered"]])
def test_more_processes_than_rows_under_mpiexec_plan(mpi, tmp_path, flags):
    # n=5 has 3 interior rows: at 5 processes two ranks own nothing; mpiexec -n 2 is the job's base
    out = tmp_path / "u.npy"
    env = dict(MPI_ENV, MALLEABLE_PLAN='[{"at_probe": 3, "procs": 5}, {"at_probe": 8, "procs": 2}]')
    mpi.run(2, *app_cmd("jacobi", "--n", "5", "--iters", "12", "--check-every", "5", "--out", str(out), *flags,
                        python=mpi.python), env=env, timeout=120)
    assert np.array_equal(np.load(out), jacobi.reference(5, 12))


@pytest.mark.parametrize("args, message", [
    (["--n", "2"], "argument --n: must be >= 3"),
    (["--n", "x"], "argument --n: not an integer"),
    (["--iters", "-1"], "argument --iters: must be >= 0"),
    (["--check-every", "0"], "argument --check-every: must be >= 1"),
    (["--tol", "0"], "argument --tol: must be > 0"),
    (["--probe-every", "0"], "argument --probe-every: must be >= 1"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_options_are_usage_errors(capsys, args, message):
    with pytest.raises(SystemExit) as e:
        jacobi.parse_args(args)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("usage:")


@pytest.mark.parametrize("app", ["jacobi", "matmul"])
def test_a_plan_over_the_core_limit_under_plain_mpiexec_is_one_line_naming_the_variable(app):
    """mpiexec has no option for the limit: the refusal names the environment variable, once, without a traceback."""
    import json
    import os
    import subprocess

    from malleable.launch import mpiexec_argv

    over = (os.cpu_count() or 1) + 1
    env = {k: v for k, v in os.environ.items() if k != "MALLEABLE_MAX_PROCS_PER_HOST"}
    env["MALLEABLE_PLAN"] = json.dumps([{"at_probe": 2, "procs": over}])
    args = ["--n", "32", "--iters", "10"] if app == "jacobi" else ["--n", "32", "--reps", "4"]
    p = subprocess.run(mpiexec_argv(2, app_cmd(app, *args)), capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.splitlines() == [
        f"{app}: error: MALLEABLE_PLAN step 1 (at_probe 2): expanding to {over} process(es) needs {over} on host "
        f"{os.uname().nodename}, which may run {over - 1} (cores); to allow it: MALLEABLE_MAX_PROCS_PER_HOST={over}"]
