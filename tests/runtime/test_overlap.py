"""Expansion that overlaps computation: the job keeps iterating while the new processes start, results stay exact."""

from __future__ import annotations

import json
import os
import time

import numpy as np

from malleable.apps import jacobi
from malleable.runtime._mpi import backend_named
from tests._procs import run_all_or_kill, running
from tests.runtime._helpers import MPI_ENV, run_prog

OVERLAP = {"MALLEABLE_OVERLAP": "1", "PROG_SLEEP": "0.05"}


def test_job_computes_while_the_expansion_is_prepared(mpi):
    plan = [{"at_probe": 2, "procs": 3}, {"at_probe": 80, "procs": 1}]
    rows, reports, errors, _ = run_prog(mpi, 1, plan, iters=84, env=OVERLAP)
    assert not errors and all(r["ok"] for r in rows)  # the distributed array equals the reference throughout
    assert len(reports) == 2, reports
    expand, shrink = (r["report"] for r in reports)
    assert (expand["kind"], expand["old"], expand["new"]) == ("expand", 1, 3)
    if backend_named(mpi.name).concurrent_spawn:
        # the decision came at probe 2; the processes joined later, after iterations done in the meantime
        assert expand["probe"] > 3, expand
        assert expand["background"] > 0 and expand["seconds"] < expand["background"], expand
        assert [r["size"] for r in rows if r["probe"] < expand["probe"]] == [1] * (expand["probe"] - 1)
    else:  # a spawn holds the MPI library's lock (Intel MPI): the expansion is synchronous
        assert expand["probe"] == 2 and expand["background"] == 0
    assert [r["size"] for r in rows if expand["probe"] <= r["probe"] < 80] == [3] * (80 - expand["probe"])
    assert shrink["new"] == 1 and reports[1]["left_alive"] == [] and len(reports[1]["left_pids"]) == 2


def test_failed_background_expansion_leaves_the_job_going(mpi, tmp_path):
    plan = [{"at_probe": 2, "procs": 3}]
    env = dict(OVERLAP, PROG_DIE_JOINER=str(tmp_path / "died"), MALLEABLE_ADAPT_TIMEOUT="4")
    rows, reports, errors, proc = run_prog(mpi, 1, plan, iters=120, env=env, check=False, keep_going=True)
    assert [r["size"] for r in rows] == [1] * 120 and all(r["ok"] for r in rows)
    assert reports == [] and (errors or backend_named(mpi.name).concurrent_spawn)


def test_jacobi_overlapped_is_bit_exact(mpi, tmp_path):
    out, stats = tmp_path / "u.npy", tmp_path / "s.json"
    # long enough for the spawn to finish while the job computes (Open MPI's takes seconds under load)
    iters = 20000 if mpi.name == "openmpi" else 5000
    plan = [{"at_probe": 3, "procs": 3}, {"at_probe": iters - 100, "procs": 2}]
    env = dict(os.environ, **MPI_ENV, MALLEABLE_OVERLAP="1")
    proc = run_all_or_kill([mpi.python, "-m", "malleable", "run", "-n", "1", "--plan", json.dumps(plan), "--",
                            mpi.python, "-m", "malleable.apps.jacobi", "--n", "256", "--iters", str(iters),
                            "--out", str(out), "--stats", str(stats)],
                           timeout=180, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert np.array_equal(np.load(out), jacobi.reference(256, iters))
    s = json.loads(stats.read_text())
    kinds = [(a["kind"], a["old_size"], a["new_size"]) for a in s["adaptations"]]
    assert kinds == [("expand", 1, 3), ("shrink", 3, 2)]
    if backend_named(mpi.name).concurrent_spawn:
        assert s["adaptations"][0]["iteration"] > 2  # iterations went on while the processes started


# An expansion prepared in the background and then not wanted any more is cancelled: its processes are told to exit
# and do, the job carries out what came instead, and it ends with 0. Joiners sleep before MPI_Init (a slow spawn), so
# the preparation is surely still going on when the job ends or the next decision comes.
SLOW = {"MALLEABLE_OVERLAP": "1", "PROG_SLEEP": "0.02", "MALLEABLE_ADAPT_TIMEOUT": "30"}


def _cancel_run(mpi, tmp_path, plan, iters, n=1, extra=None):
    pids = tmp_path / "pids"
    pids.mkdir()
    env = dict(SLOW, PROG_SLOW_JOINER=f"{tmp_path / 'anchor'}:2", PROG_PIDS_DIR=str(pids), **(extra or {}))
    rows, reports, errors, proc = run_prog(mpi, n, plan, iters=iters, env=env, timeout=120)
    started = [int(p.name) for p in pids.iterdir()]
    return rows, reports, errors, proc, started


def _all_gone(pids):
    """Every process the job started has ended (a zombie has too); waits at most 10 s for their last breath."""
    deadline = time.monotonic() + 10
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if running(p)]


def test_job_ending_while_an_expansion_is_prepared_cancels_it(mpi, tmp_path):
    rows, reports, errors, proc, started = _cancel_run(mpi, tmp_path, [{"at_probe": 2, "procs": 3}], iters=10)
    assert proc.returncode == 0 and not errors and all(r["ok"] for r in rows)
    assert len(started) == 3, started              # the anchor and two joiners
    if backend_named(mpi.name).concurrent_spawn:
        assert [r["size"] for r in rows] == [1] * 10 and reports == []   # the joiners were never merged
    else:                                          # a spawn holds the MPI library's lock: the expansion is synchronous
        assert [r["size"] for r in rows] == [1] + [3] * 9
    assert _all_gone(started) == []


def test_shrink_while_an_expansion_is_prepared_cancels_it(mpi, tmp_path):
    # the job starts at 2 (its anchor spawns the second process at init_adapt, as `malleable run -n 2` does); the
    # expansion to 4 is being prepared when the shrink to 1 comes
    plan = [{"at_probe": 2, "procs": 4}, {"at_probe": 4, "procs": 1}]
    # the shrink is carried out once the preparation is given up: the spawn cannot be interrupted (about 4 s here)
    rows, reports, errors, proc, started = _cancel_run(mpi, tmp_path, plan, iters=160,
                                                       extra={"MALLEABLE_INITIAL_PROCS": "2", "PROG_SLEEP": "0.05"})
    sizes = [r["size"] for r in rows]
    assert proc.returncode == 0 and not errors and all(r["ok"] for r in rows)
    if backend_named(mpi.name).concurrent_spawn:
        assert sizes[0] == 2 and 4 not in sizes and sizes[-1] == 1, sizes
        assert [(r["report"]["kind"], r["report"]["new"]) for r in reports] == [("shrink", 1)]
        assert reports[0]["left_alive"] == []
        assert len(started) == 4, started          # the anchor, the initial joiner, two cancelled ones
    assert _all_gone(started) == []


def test_newer_decision_while_an_expansion_is_prepared_replaces_it(mpi, tmp_path):
    plan = [{"at_probe": 2, "procs": 4}, {"at_probe": 4, "procs": 2}]
    rows, reports, errors, proc, started = _cancel_run(mpi, tmp_path, plan, iters=400)
    sizes = [r["size"] for r in rows]
    assert proc.returncode == 0 and not errors and all(r["ok"] for r in rows)
    if backend_named(mpi.name).concurrent_spawn:
        assert 4 not in sizes and sizes[-1] == 2 and sizes == sorted(sizes), sizes
        assert [(r["report"]["kind"], r["report"]["new"]) for r in reports] == [("expand", 2)]
        assert len(started) == 5, started          # the anchor, three cancelled joiners, the one that joined
    assert _all_gone(started) == []
