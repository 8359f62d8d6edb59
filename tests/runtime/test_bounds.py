"""Bounded adaptations: slots checked before spawning, every step within the timeout, failures the job survives,
exit codes of spawned ranks reaching ``malleable run`` (real MPI jobs on each implementation)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from malleable.errors import AdaptError, PlanError
from malleable.runtime._bounds import Slots, check_expand, check_plan, initial_layout, parse_slots
from malleable.runtime._layout import Group, GroupLayout, plan_expand
from malleable.runtime._mpi import backend_named
from malleable.runtime._plan import parse_plan
from tests._procs import run_all_or_kill, running
from tests.runtime._helpers import MPI_ENV, PROG, after_failed_spawn, run_prog

BASE = GroupLayout((Group(0, ("h0",), 1, base=True),))


def sizes(rows):
    return [(r["probe"], r["size"]) for r in rows]


def test_slot_precedence_and_messages():
    s = Slots(cores=2, hostfile=parse_slots("h0:3,h1:1"))
    assert (s.limit("h0"), s.limit("h1"), s.limit("h9")) == (3, 1, 2)
    assert Slots(2, per_host=5, hostfile=(("h0", 1),)).limit("h0") == 5
    check_expand(BASE, plan_expand(BASE, 3), s, "h0")  # 3 on h0: its hostfile slots
    with pytest.raises(AdaptError, match=r"needs 4 on host h0, which may run 3 \(hostfile slots\)"):
        check_expand(BASE, plan_expand(BASE, 4), s, "h0")
    with pytest.raises(AdaptError, match=r"needs 2 on host h1, which may run 1"):
        check_expand(BASE, plan_expand(BASE, 3, ["h1", "h1"]), s, "h0")


def test_an_mpi_that_cannot_reach_other_hosts_grows_only_a_one_host_job_on_its_host():
    s, why = Slots(cores=8), "this MPI cannot"
    check_expand(BASE, plan_expand(BASE, 3), s, "h0", why)                 # on rank 0's host
    with pytest.raises(AdaptError, match=r"cannot spawn onto h1: this MPI cannot"):
        check_expand(BASE, plan_expand(BASE, 3, ["h0", "h1"]), s, "h0", why)
    two = GroupLayout((Group(0, ("h0", "h1"), 2, base=True),))            # launched over two hosts
    with pytest.raises(AdaptError, match=r"span 2 hosts \(h0, h1\): this MPI cannot"):
        check_expand(two, plan_expand(two, 3, ["h0"]), s, "h0", why)
    check_expand(two, plan_expand(two, 3, ["h0"]), s, "h0")               # an MPI that can


def test_plan_walk_counts_idle_leavers_and_names_the_step():
    slots = Slots(cores=4)
    start = initial_layout(BASE, 3, ["h0", "h1"], "h0")
    assert [g.hosts for g in start.groups] == [("h0",), ("h1",), ("h0",)]
    ok = parse_plan('[{"at_probe": 2, "procs": 6, "hosts": ["h1"]}, {"at_probe": 3, "procs": 2}]')
    check_plan(ok, start, slots, "h0", lambda lay, n: ())
    # 3 -> 6 on h1 in one group, 6 -> 4 keeps that group split (its idle members still run on h1): +2 more is 6
    bad = parse_plan('[{"at_probe": 2, "procs": 6, "hosts": ["h1"]}, {"at_probe": 3, "procs": 4},'
                     ' {"at_probe": 4, "procs": 6, "hosts": ["h1"]}]')
    with pytest.raises(PlanError, match=r"step 3 \(at_probe 4\): .* needs 6 on host h1, which may run 4"):
        check_plan(bad, start, slots, "h0", lambda lay, n: ())


def _pids_root() -> Path | None:
    v2 = Path("/sys/fs/cgroup")
    if (v2 / "cgroup.subtree_control").exists() and "pids" in (v2 / "cgroup.subtree_control").read_text():
        return v2
    v1 = Path("/sys/fs/cgroup/pids")
    return v1 if (v1 / "cgroup.procs").exists() else None


def _pids_cgroup(limit: int) -> Path | None:
    root = _pids_root()
    if root is None:
        return None
    cg = root / f"malleable-test-{uuid.uuid4().hex[:8]}"
    try:
        cg.mkdir()
        (cg / "pids.max").write_text(str(limit))
    except OSError:
        return None
    return cg


def _forks_refused(cg: Path) -> int:
    """How often the cap refused a fork (``max N`` in pids.events, cgroup v1 and v2)."""
    for line in (cg / "pids.events").read_text().splitlines():
        if line.startswith("max "):
            return int(line.split()[1])
    return 0


@pytest.fixture
def pids_cap():
    """A pids cgroup allowing 64 tasks: a regression that forks a thousand processes hits the cap, not the machine."""
    cg = _pids_cgroup(64)
    if cg is None:
        pytest.skip("needs a pids cgroup controller (v1 or v2) and root")
    yield cg
    for _ in range(50):
        try:
            cg.rmdir()
            break
        except OSError:
            time.sleep(0.1)


def _in_cgroup(cg: Path):
    def move() -> None:
        (cg / "cgroup.procs").write_text(str(os.getpid()))
    return move


def test_thousand_process_plan_is_refused_before_anything_starts(pids_cap):
    plan = json.dumps([{"at_probe": 2, "procs": 1000}])
    proc = run_all_or_kill([sys.executable, "-m", "malleable", "run", "-n", "1", "--plan", plan, "--",
                            sys.executable, str(PROG)], timeout=60,
                           preexec_fn=_in_cgroup(pids_cap), env=dict(os.environ, PROG_ITERS="3"))
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "step 1 (at_probe 2): expanding to 1000 process(es) needs 1000 on host" in lines[0]
    assert _forks_refused(pids_cap) == 0


def test_thousand_process_plan_refused_at_init_under_plain_mpiexec(pids_cap, mpi):
    env = dict(MPI_ENV, MALLEABLE_PLAN=json.dumps([{"at_probe": 2, "procs": 1000}]), PROG_ITERS="3")
    argv = mpi.argv(1, mpi.python, str(PROG), env=env)
    proc = run_all_or_kill(argv, timeout=120, preexec_fn=_in_cgroup(pids_cap),
                           env=dict(os.environ, **env), restore_signals=False)
    assert proc.returncode != 0
    assert "needs 1000 on host" in proc.stderr and '"probe"' not in proc.stdout
    assert _forks_refused(pids_cap) == 0


def test_decision_over_the_slots_is_refused_and_the_job_goes_on(mpi):
    decisions = [{"at_probe": 2, "procs": 1000}, {"at_probe": 3, "procs": 2}]
    rows, reports, errors, proc = run_prog(mpi, 1, [], iters=4, env={"PROG_DECISIONS": json.dumps(decisions)})
    refused = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith('{"refused"')]
    assert len(refused) == 1 and refused[0]["procs"] == 1000 and "needs 1000 on host" in refused[0]["refused"]
    assert sizes(rows) == [(1, 1), (2, 1), (3, 2), (4, 2)] and all(r["ok"] for r in rows)
    assert not errors and [r["report"]["new"] for r in reports] == [2]


def test_stopped_joiner_fails_the_expansion_within_the_timeout(mpi, tmp_path):
    # the joiner stops after its handshake: the parents give the expansion up within the timeout and go on
    # (and expand again later); the stopped process is continued once the job's work is done, and then exits
    pidfile = tmp_path / "stopped"
    plan = [{"at_probe": 2, "procs": 2}, {"at_probe": 5, "procs": 3}]
    e = dict(MPI_ENV, MALLEABLE_PLAN=json.dumps(plan), PROG_ITERS="6", PROG_STOP_JOINER=str(pidfile),
             MALLEABLE_ADAPT_TIMEOUT="4", PROG_SLEEP="0.2")
    p = subprocess.Popen(mpi.argv(1, mpi.python, str(PROG), env=e, keep_going=False), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=dict(os.environ, **e), restore_signals=False)
    stopped = None
    try:
        lines = []
        while not (lines and lines[-1].startswith('{"probe": 6,')):  # each line comes within the job's timeouts
            line = p.stdout.readline()
            assert line, f"job ended early: {lines}\n{p.stderr.read()}"
            lines.append(line)
        stopped = int(pidfile.read_text())
        assert psutil.Process(stopped).status() == psutil.STATUS_STOPPED
        os.kill(stopped, signal.SIGCONT)  # it learns that the expansion was given up and exits by itself
        out, errout = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    err = next(json.loads(x) for x in lines if x.startswith('{"adapt_error"'))
    # the spawn and the joiners' ready barrier each have the 4 s deadline (a loaded machine spawns slowly)
    assert err["type"] in ("AdaptError", "AdaptTimeout") and err["seconds"] < 4 + 4 + 2, err
    rows = [json.loads(x) for x in (*lines, *out.splitlines()) if x.startswith('{"probe"')]
    assert sizes(rows) == [(1, 1), (2, 1), (3, 1), (4, 1), (5, 3), (6, 3)] and all(r["ok"] for r in rows), errout
    assert not running(stopped)
    assert "Segmentation" not in errout and "Assertion" not in errout, errout


def test_spawn_slower_than_the_timeout_is_abandoned_and_finalize_is_clean(mpi, tmp_path):
    # joiners sleep 6 s before MPI_Init: MPI_Comm_spawn is still running at the 3 s deadline
    plan = [{"at_probe": 2, "procs": 2}]
    rows, reports, errors, proc = run_prog(
        mpi, 1, plan, iters=16, check=False, keep_going=False,
        env={"PROG_SLOW_JOINER": f"{tmp_path / 'anchor'}:6", "MALLEABLE_ADAPT_TIMEOUT": "3", "PROG_SLEEP": "0.5"})
    # where a spawn holds the MPI library's lock (Intel MPI) the failure comes once the spawn returns (~6 s)
    bound = 3 + 2 if backend_named(mpi.name).concurrent_spawn else 6 + 3 + 2
    assert errors and errors[0]["seconds"] < bound, proc.stdout
    assert sizes(rows) == [(i, 1) for i in range(1, 17)] and all(r["ok"] for r in rows)
    assert "Segmentation" not in proc.stderr and "Assertion" not in proc.stderr, proc.stderr
    if backend_named(mpi.name).finalize_after_failed_spawn:
        assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("rank, code", [(1, 3), (2, 7), (0, 5)])
def test_exit_code_of_any_rank_reaches_malleable_run(mpi, rank, code):
    env = dict(os.environ, **MPI_ENV, PROG_ITERS="2", PROG_EXIT_RANK=str(rank), PROG_EXIT_CODE=str(code))
    proc = run_all_or_kill([mpi.python, "-m", "malleable", "run", "-n", "3", "--", mpi.python, str(PROG)],
                           timeout=120, env=env)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert [json.loads(x)["size"] for x in proc.stdout.splitlines() if x.startswith('{"probe"')] == [3, 3]


def test_joiner_killed_by_a_signal(mpi, tmp_path):
    plan = [{"at_probe": 2, "procs": 3}, {"at_probe": 4, "procs": 2}]
    rows, reports, errors, proc = run_prog(
        mpi, 1, plan, iters=5, check=False, keep_going=True,
        env={"PROG_KILL_JOINER": str(tmp_path / "killed"), "MALLEABLE_ADAPT_TIMEOUT": "4"})
    if backend_named(mpi.name).survives_joiner_signal:
        assert errors and errors[0]["type"] in ("AdaptError", "AdaptTimeout")
        # the launcher, which saw a process die of a signal, may end the job any time after the next step: the
        # rows are the expected ones up to there, the step after the failed one included
        want = after_failed_spawn(mpi, proc, errors)
        got = sizes(rows)
        assert len(got) >= 4 and got == want[:len(got)] and all(r["ok"] for r in rows), (got, want)
        assert proc.returncode != 0  # the launcher still reports the killed process
    else:  # the documented limit: the launcher ends the whole job, with this error
        assert proc.returncode != 0 and sizes(rows) == [(1, 1)]
        out = proc.stdout + proc.stderr
        assert "signal 9" in out or "process manager error" in out, out
