"""Adaptation across hosts: network namespaces as hosts (root only; skipped with the reason elsewhere)."""

from __future__ import annotations

import json
import os
import time

import psutil
import pytest

from malleable.runtime._mpi import backend_named
from tests._procs import run_all_or_kill
from tests.runtime._helpers import MPI_ENV, PROG, run_prog
from tests.runtime._impls import impl_named, selected

pytestmark = pytest.mark.netns


@pytest.fixture(params=[m for m in selected() if backend_named(m).spawn_across_hosts])
def remote_mpi(request):
    """Each selected MPI whose MPI_Comm_spawn reaches other hosts (not Open MPI 5.0's, see docs/runtime.md:
    test_open_mpi_refuses_remote_spawns_and_launches_across_hosts asserts its refusal instead)."""
    return impl_named(request.param)


def test_expand_onto_node2_node3_then_shrink_frees_node3(remote_mpi, netns_cluster):
    mpi = remote_mpi
    plan = [{"at_probe": 2, "procs": 3, "hosts": ["node2", "node3"]}, {"at_probe": 4, "procs": 2}]
    rows, reports, errors, _ = run_prog(
        mpi, 1, plan, iters=5, hosts=["node1"],
        env=dict(netns_cluster.env(), PROG_CHECK_HOSTS="node2,node3"))
    assert not errors and all(r["ok"] for r in rows)
    by_probe = {r["probe"]: r for r in rows}
    assert by_probe[1]["hosts"] == ["node1"]
    assert by_probe[2]["hosts"] == ["node1", "node2", "node3"]  # new ranks really run there
    assert by_probe[4]["hosts"] == ["node1", "node2"]
    shrink = reports[1]
    assert shrink["report"]["freed"] == ["node3"]
    assert shrink["left_alive"] == []
    assert shrink["host_pids"]["node3"] == [], "processes of the job left on node3 after the shrink"
    assert shrink["host_pids"]["node2"], "node2 still runs the job"
    # the spawned rank's network namespace is node3's: its pid was listed there while it ran
    expand = reports[0]
    assert expand["report"]["new"] == 3


HOSTS = ["node1", "node2", "node3", "node4"]


def test_held_out_sequence_over_four_hosts(remote_mpi, netns_cluster):
    # 1 -> 3 -> 1 -> 2 -> 4 -> 2 -> 1, the new processes on the least used of the job's four hosts
    sizes = [3, 1, 2, 4, 2, 1]
    plan = [{"at_probe": 2 + i, "procs": n} for i, n in enumerate(sizes)]
    env = dict(netns_cluster.env(), MALLEABLE_HOSTS=",".join(HOSTS), PROG_CHECK_HOSTS=",".join(HOSTS[1:]))
    rows, reports, errors, proc = run_prog(remote_mpi, 1, plan, iters=9, hosts=HOSTS[:1], env=env)
    assert not errors and all(r["ok"] for r in rows), proc.stdout + proc.stderr
    assert [r["report"]["new"] for r in reports] == sizes
    assert [r["size"] for r in rows] == [1, 3, 1, 2, 4, 2, 1, 1, 1]
    for row in rows:   # one process per host: the job spreads over the least used hosts
        assert row["hosts"][0] == "node1" and len(set(row["hosts"])) == row["size"], row
    for rep in reports:
        if rep["report"]["kind"] == "shrink":
            assert rep["left_alive"] == [], rep      # the leavers' processes ended
            for h in rep["report"]["freed"]:       # and nothing of the program is left where they ran
                assert rep["host_pids"][h] == [], (h, rep)
    assert {h for rep in reports for h in rep["report"]["freed"]} == set(HOSTS[1:])


def test_malleable_run_spreads_and_frees_every_host_but_the_anchors(remote_mpi, netns_cluster):
    mpi = remote_mpi
    plan = [{"at_probe": 2, "procs": 1}, {"at_probe": 3, "procs": 4, "hosts": ["node4"]}, {"at_probe": 4, "procs": 1}]
    env = dict(os.environ, **MPI_ENV, PROG_ITERS="5", PROG_CHECK_HOSTS="node2,node3,node4")
    argv = [mpi.python, "-m", "malleable", "run", "-n", "3", "--hosts", "node1,node2,node3",
            "--launcher-exec", netns_cluster.launcher, "--plan", json.dumps(plan), "--", mpi.python, str(PROG)]
    proc = run_all_or_kill(argv, timeout=180, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    rows = [x for x in lines if "probe" in x]
    reports = [x for x in lines if "report" in x]
    assert rows[0]["hosts"] == ["node1", "node2", "node3"] and all(r["ok"] for r in rows)
    first = reports[0]
    assert first["report"]["freed"] == ["node2", "node3"]
    assert first["host_pids"]["node2"] == [] and first["host_pids"]["node3"] == []
    grown = [r for r in rows if r["probe"] == 3][0]
    assert grown["hosts"] == ["node1", "node4", "node4", "node4"]
    last = reports[-1]
    assert last["report"]["freed"] == ["node4"] and last["host_pids"]["node4"] == []


def test_base_spanning_two_hosts_expands_onto_a_third(remote_mpi, netns_cluster):
    mpi = remote_mpi
    plan = [{"at_probe": 2, "procs": 4, "hosts": ["node3"]}, {"at_probe": 3, "procs": 2}]
    rows, reports, errors, _ = run_prog(
        mpi, 2, plan, iters=4, hosts=["node1", "node2"], env=dict(netns_cluster.env(), PROG_CHECK_HOSTS="node3"))
    assert not errors and all(r["ok"] for r in rows)
    assert [r["hosts"] for r in rows][:2] == [["node1", "node2"], ["node1", "node2", "node3", "node3"]]
    assert reports[1]["report"]["freed"] == ["node3"] and reports[1]["host_pids"]["node3"] == []


def test_open_mpi_refuses_remote_spawns_and_launches_across_hosts(netns_cluster):
    from tests.runtime._impls import impl_named

    mpi = impl_named("openmpi")
    # launching over the hosts works (PRRTE's ssh agent is the namespace launcher); the job cannot grow, onto
    # another host or its own (PRRTE started it on other hosts than mpirun's: docs/runtime.md), and each
    # expansion is refused before anything is spawned; the job goes on
    plan = [{"at_probe": 2, "procs": 3, "hosts": ["node3"]}]
    decisions = [{"at_probe": 2, "procs": 3, "hosts": ["node3"]}, {"at_probe": 3, "procs": 3}]
    for _ in range(3):
        rows, reports, errors, proc = run_prog(mpi, 2, [], iters=4, hosts=["node1", "node2"], check=False,
                                               env=dict(netns_cluster.env(), PROG_DECISIONS=json.dumps(decisions)))
        # PRRTE's daemon on a namespace host may lose its TCP link to prterun on a busy machine: a launcher fault
        # that ends the job early whatever the runtime does, said in so many words. The launch is tried again once
        # the failed one's daemons and processes have left the hosts (up to three launches in all)
        if "PRTE has lost communication with a remote daemon" not in proc.stdout + proc.stderr:
            break
        _wait_hosts_clear(netns_cluster, ["node1", "node2"], ("prted", "python"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [r["hosts"] for r in rows][0] == ["node1", "node2"]
    refused = [json.loads(x)["refused"] for x in proc.stdout.splitlines() if x.startswith('{"refused"')]
    assert refused == ["cannot grow the job: openmpi cannot spawn processes in a job its launcher started on another "
                       "host than mpirun's (see docs/runtime.md)"] * 2, refused
    assert [r["size"] for r in rows] == [2, 2, 2, 2] and all(r["ok"] for r in rows), proc.stdout + proc.stderr
    bad = run_all_or_kill([mpi.python, "-m", "malleable", "run", "-n", "1", "--hosts", "node1",
                           "--launcher-exec", netns_cluster.launcher, "--plan", json.dumps(plan), "--",
                           mpi.python, str(PROG)], timeout=120,
                          env=dict(os.environ, **MPI_ENV, PROG_ITERS="3"))
    assert bad.returncode != 0 and "cannot spawn onto node3" in bad.stderr


def _wait_hosts_clear(cluster, hosts, names, timeout=60.0):
    """Wait until no process named like ``names`` runs on ``hosts`` (what a failed launch left is ending)."""
    def left():
        out = []
        for h in hosts:
            for pid in cluster.pids_on(h):
                try:
                    if psutil.Process(pid).name().startswith(names):
                        out.append(pid)
                except psutil.NoSuchProcess:
                    pass
        return out

    deadline = time.monotonic() + timeout
    while left():
        assert time.monotonic() < deadline, f"processes of a failed launch still on {hosts}: {left()}"
        time.sleep(0.1)
