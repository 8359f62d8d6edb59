"""Registered data: random arrays, distributions and process counts moved by the runtime, checked against NumPy."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from malleable.runtime._registered import indices
from tests._procs import run_all_or_kill
from tests.runtime._helpers import MPI_ENV

PROG = os.path.join(os.path.dirname(__file__), "progs", "registered_prog.py")


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 60), st.integers(1, 9), st.sampled_from(["block", "block-cyclic"]), st.integers(1, 5))
def test_indices_partition_the_axis(n, parts, dist, block):
    got = [indices(n, parts, p, dist, block) for p in range(parts)]
    assert sorted(np.concatenate(got).tolist()) == list(range(n))
    assert all(np.all(np.diff(g) > 0) for g in got)
    if dist == "block-cyclic":
        assert all((g // block % parts == p).all() for p, g in enumerate(got))


@pytest.mark.parametrize("seed, plan", [
    (1, [{"at_probe": 2, "procs": 5}, {"at_probe": 4, "procs": 2}, {"at_probe": 6, "procs": 3},
         {"at_probe": 7, "procs": 1}]),
    (7, [{"at_probe": 2, "procs": 3}, {"at_probe": 3, "procs": 4}, {"at_probe": 5, "procs": 1}]),
])
def test_random_arrays_follow_every_adaptation(mpi, seed, plan):
    env = dict(os.environ, **MPI_ENV, PROG_SEED=str(seed), PROG_ARRAYS="5", PROG_ITERS="8")
    proc = run_all_or_kill([mpi.python, "-m", "malleable", "run", "-n", "1", "--plan", json.dumps(plan), "--",
                            mpi.python, PROG], timeout=180, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    sizes = {r["probe"]: r["size"] for r in rows}
    want, size = {}, 1
    for p in range(1, 9):
        size = next((s["procs"] for s in plan if s["at_probe"] == p), size)
        want[p] = size
    assert sizes == {p: want[p] for p in range(1, 9)}, rows
    assert rows and all(r["ok"] for r in rows), rows
