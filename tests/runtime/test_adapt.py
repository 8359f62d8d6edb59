"""Real MPI adaptations: expand, shrink, cycles, killed joiner (mpiexec subprocesses, every wait bounded)."""

from __future__ import annotations

import psutil
import pytest

from tests._procs import running
from tests.runtime._helpers import after_failed_spawn, run_prog


def sizes(rows):
    return [(r["probe"], r["size"]) for r in rows]


def test_expand_1_to_4_and_shrink_to_1(mpi):
    plan = [{"at_probe": 2, "procs": 4}, {"at_probe": 4, "procs": 1}]
    rows, reports, errors, _ = run_prog(mpi, 1, plan, iters=5)
    assert not errors
    assert sizes(rows) == [(1, 1), (2, 4), (3, 4), (4, 1), (5, 1)]
    assert all(r["ok"] for r in rows), "distributed array differs from the reference"
    assert [(r["report"]["kind"], r["report"]["old"], r["report"]["new"]) for r in reports] == [
        ("expand", 1, 4), ("shrink", 4, 1)]
    shrink = reports[1]
    assert len(shrink["left_pids"]) == 3 and shrink["left_alive"] == []
    assert not any(psutil.pid_exists(p) for p in shrink["left_pids"])
    assert rows[1]["pids"][0] == rows[0]["pids"][0]  # old ranks first
    assert len(set(rows[1]["pids"])) == 4


def test_uneven_2_3_5_2(mpi):
    plan = [{"at_probe": 2, "procs": 3}, {"at_probe": 3, "procs": 5}, {"at_probe": 5, "procs": 2}]
    rows, reports, errors, _ = run_prog(mpi, 2, plan, iters=6)
    assert not errors
    assert sizes(rows) == [(1, 2), (2, 3), (3, 5), (4, 5), (5, 2), (6, 2)]
    assert all(r["ok"] for r in rows)
    # ranks keep their order: the two launcher ranks stay ranks 0 and 1 throughout
    assert all(r["pids"][:2] == rows[0]["pids"] for r in rows)
    last = reports[-1]
    assert last["report"]["new"] == 2 and last["left_alive"] == []


def test_split_group_leaves_idle_then_exits(mpi):
    # +3 in one group, then 4 -> 2 splits it: one member of the group stays, two wait idle
    plan = [{"at_probe": 2, "procs": 4}, {"at_probe": 3, "procs": 2}, {"at_probe": 5, "procs": 1}]
    rows, reports, errors, _ = run_prog(mpi, 1, plan, iters=6)
    assert not errors and all(r["ok"] for r in rows)
    split, whole = reports[1]["report"], reports[2]["report"]
    assert (split["old"], split["new"], split["idle"]) == (4, 2, 2)
    assert reports[1]["left_alive"] == reports[1]["left_pids"] and len(reports[1]["left_pids"]) == 2
    idle_cpu = [psutil.Process(p).cpu_percent(0.3) for p in reports[1]["left_alive"] if running(p)]
    assert whole["idle"] == 0
    # after the last member of the group left, every process of the group is gone
    gone = reports[1]["left_pids"] + reports[2]["left_pids"]
    assert reports[2]["left_alive"] == []
    assert not any(psutil.pid_exists(p) for p in gone)
    assert all(c < 50 for c in idle_cpu)


def test_below_base_is_refused_at_init(mpi):
    plan = [{"at_probe": 2, "procs": 1}]
    rows, reports, errors, proc = run_prog(mpi, 2, plan, iters=3, check=False)
    assert proc.returncode != 0
    assert "below the job's base of 2" in proc.stderr


@pytest.mark.slow
def test_twenty_cycles_leak_nothing(mpi):
    plan = []
    for c in range(20):
        plan.append({"at_probe": 2 * c + 2, "procs": 3})
        plan.append({"at_probe": 2 * c + 3, "procs": 1})
    rows, reports, errors, _ = run_prog(mpi, 1, plan, iters=42, timeout=280)
    assert not errors
    assert len(reports) == 40 and all(r["ok"] for r in rows)
    assert all(r["left_alive"] == [] for r in reports if r["report"]["kind"] == "shrink")
    fds = [r["fds"] for r in rows if r["size"] == 1]
    assert fds[-1] <= fds[1] + 2, f"file descriptors grow over cycles: {fds}"
    every_left = [p for r in reports for p in r["left_pids"]]
    assert len(every_left) == 40 and not any(psutil.pid_exists(p) for p in every_left)


def test_killed_joiner_raises_and_world_survives(mpi, tmp_path):
    plan = [{"at_probe": 2, "procs": 3}, {"at_probe": 4, "procs": 2}]
    rows, reports, errors, proc = run_prog(
        mpi, 1, plan, iters=5, env={"PROG_DIE_JOINER": str(tmp_path / "died"), "MALLEABLE_ADAPT_TIMEOUT": "4"},
        check=False, keep_going=True)
    assert errors and errors[0]["type"] in ("AdaptError", "AdaptTimeout"), proc.stdout + proc.stderr
    # the failed expansion left the old world: the job goes on at size 1, then the 2-process step works
    assert sizes(rows) == after_failed_spawn(mpi, proc, errors)
    assert all(r["ok"] for r in rows)
