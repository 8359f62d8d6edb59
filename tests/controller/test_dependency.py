"""``submit --dependency`` as sbatch's: a job waits, reason (Dependency), out of the policies' queue until the jobs
it names end; afterok of a job that did not complete cancels it (DependencyNeverSatisfied), down a chain; an
unknown or already unsatisfiable dependency is refused at submit in one line; a waiting job survives a restart of
the controller (the state file) and a state file from before the field existed still loads."""

from __future__ import annotations

import json
import sqlite3

import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._hostpool import HostPool
from malleable.controller.daemon._store import Store
from malleable.controller.sched import get_policy
from malleable.controller.sched._depend import DepStatus, dependency_status, parse_dependency
from tests.controller._cli_util import cli_env
from tests.controller._core_shell import Shell
from tests.controller._daemon_util import cli, daemon_thread, wait_final, wait_for

pytestmark = pytest.mark.timeout(120)
env = pytest.fixture(cli_env, name="env")

WAIT_GO = "while [ ! -e go ]; do sleep 0.05; done; "


def _rows(c) -> dict[int, dict]:
    return {r["id"]: r for r in c.rows(P.History(0))}


def test_a_workflow_waits_for_its_dependencies_as_sbatch_runs_it(env):
    state = str(env / "ctl.sqlite")

    def submit(*argv: str) -> tuple[int, str, str]:
        return cli("submit", "--state", state, "--parsable", *argv)

    with daemon_thread(env / "ctl.sqlite", HostPool.local(2), policy="easy") as (d, c):
        assert submit("--wrap", WAIT_GO + "echo one > a.txt") == (0, "1\n", "")
        assert submit("-d", "afterok:1", "--wrap", "cat a.txt > b.txt") == (0, "2\n", "")
        # a host is free, yet job 2 waits for job 1: pending, reason (Dependency), never started
        wait_for(lambda: _rows(c)[1]["state"] == "RUNNING", 30, "job 1 to run")
        code, out, err = cli("queue", "--state", state)
        assert code == 0 and "(Dependency)" in out, out + err
        assert _rows(c)[2]["state"] == "PENDING" and _rows(c)[2]["reason"] == "Dependency"
        code, out, _ = cli("info", "--state", state, "2")
        assert "Dependency=afterok:1" in out
        # refused in one line, nothing queued
        for dep, msg in (("afterok:99", "--dependency afterok:99: no job 99"),
                         ("after:1", "--dependency 'after:1': unknown type 'after'; known: afterok, afterany "
                                     "(TYPE:ID[:ID...][,TYPE:ID...])"),
                         ("afterok:", "--dependency 'afterok:': afterok needs job ids, as afterok:ID[:ID...]")):
            assert submit("-d", dep, "--", "true") == (1, "", f"malleable submit: error: {msg}\n"), dep
        assert sorted(_rows(c)) == [1, 2]
        (env / "go").touch()
        assert wait_final(c, [1, 2], 60) == {1: "COMPLETED", 2: "COMPLETED"}      # nothing else there yet
        assert (env / "b.txt").read_text() == "one\n"                  # 2 ran after 1 had written
        r = _rows(c)
        assert r[2]["start"] >= r[1]["end"]

        # a failed dependency: afterok never runs (cancelled, and so is a job after that one); afterany runs
        assert submit("--wrap", WAIT_GO.replace("go", "go3") + "exit 3") == (0, "3\n", "")
        assert submit("-d", "afterok:3", "--wrap", "touch never4") == (0, "4\n", "")
        assert submit("-d", "afterok:4", "--wrap", "touch never5") == (0, "5\n", "")
        assert submit("--dependency", "afterany:3,afterok:1", "--wrap", "touch ran6") == (0, "6\n", "")
        assert {j: _rows(c)[j]["reason"] for j in (4, 5, 6)} == {4: "Dependency", 5: "Dependency", 6: "Dependency"}
        (env / "go3").touch()
        ends = wait_final(c, [3, 4, 5, 6], 60)
        assert {j: ends[j] for j in (3, 4, 5, 6)} == {3: "FAILED", 4: "CANCELLED", 5: "CANCELLED", 6: "COMPLETED"}
        r = _rows(c)
        assert r[4]["reason"] == "DependencyNeverSatisfied: job 3 FAILED (afterok:3)"
        assert r[5]["reason"] == "DependencyNeverSatisfied: job 4 CANCELLED (afterok:4)"
        assert (r[4]["start"], r[5]["start"]) == (0.0, 0.0)
        assert (env / "ran6").exists() and not (env / "never4").exists() and not (env / "never5").exists()
        # afterok of a job that already failed can never be satisfied: refused at once
        assert submit("-d", "afterok:2:3", "--", "true") == (
            1, "", "malleable submit: error: --dependency afterok:2:3 can never be satisfied: job 3 FAILED\n")
        assert submit("-d", "afterany:3", "--wrap", "touch ran7") == (0, "7\n", "")   # ended: runs at once
        assert wait_final(c, [7], 60)[7] == "COMPLETED"


def test_a_waiting_job_outlives_a_restart_and_old_records_load(tmp_path):
    path = str(tmp_path / "s.sqlite")
    hosts = ("n1", "n2")

    def msg(dep: str = "") -> P.Submit:
        return P.Submit("j", ["prog"], 1, 1, 1, False, 100.0, "", "", "/work", {}, dependency=dep)

    sh = Shell(path, hosts, get_policy("easy"))
    assert sh.submit(msg(), 1.0) == 1
    assert sh.submit(msg("afterany:1"), 2.0) == 2
    sh.schedule(3.0)
    assert sh.jobs[1].state == "RUNNING" and sh.jobs[2].reason == "Dependency"
    assert [j.id for j in sh.snapshot(3.0).queue] == []                # the policy never sees job 2
    sh.store.close()
    sh = Shell(path, hosts, get_policy("easy"))                        # the controller restarts
    sh.schedule(4.0)
    assert sh.jobs[2].state == "PENDING" and sh.jobs[2].reason == "Dependency" and sh.jobs[2].hosts == []
    sh.exited(1, 7, 5.0)                                               # afterany: any end will do
    assert sh.jobs[2].reason == "Priority" and [j.id for j in sh.snapshot(5.0).queue] == [2]
    sh.store.close()
    # a record stored before the field existed reads back without a dependency, and runs
    db = sqlite3.connect(path)
    rec = json.loads(db.execute("SELECT rec FROM jobs WHERE id=2").fetchone()[0])
    del rec["dependency"]
    db.execute("UPDATE jobs SET rec=? WHERE id=2", (json.dumps(rec),))
    db.commit()
    db.close()
    jobs = {j.id: j for j in Store(path).load_jobs()}
    assert jobs[2].dependency == "" and jobs[2].state == "PENDING"
    sh = Shell(path, hosts, get_policy("easy"))
    assert [j.id for j in sh.snapshot(6.0).queue] == [2]


def test_the_pure_status():
    deps = parse_dependency("afterok:1:2,afterany:3")
    assert dependency_status(deps, {}) == (DepStatus.WAITING, "")
    assert dependency_status(deps, {1: "COMPLETED", 2: "COMPLETED"}) == (DepStatus.WAITING, "")
    assert dependency_status(deps, {1: "COMPLETED", 2: "COMPLETED", 3: "TIMEOUT"}) == (DepStatus.SATISFIED, "")
    assert dependency_status(deps, {2: "CANCELLED"}) == (DepStatus.NEVER, "job 2 CANCELLED")
