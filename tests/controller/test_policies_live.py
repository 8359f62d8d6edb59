"""One policy of each family run live by the controller on namespace hosts, with real MPI jobs: seed 002's MEBF
(shrink to admit a job, shrink-once), seed 000's MEBF (moldable start, expansion when the queue drains), an EBS
strategy of seed 003 (grow, shrink for a waiting job, grow back) and SFSJ node stealing with a host taken off the
network mid-run; a job whose launcher sees its host lost before the controller does is re-queued all the same.
Malleable-fill has its own test (test_daemon_netns.py)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._hostpool import HostPool, scan_tagged
from malleable.launch import _testbed
from tests.controller._daemon_util import HEAT, TOKEN, daemon_thread, states, wait_final, wait_for

pytestmark = [pytest.mark.netns, pytest.mark.timeout(240)]

WHERE = str(Path(__file__).parent / "progs" / "where_prog.py")
LIMIT = 600.0      # the jobs' time limit (their estimate): far above what they run, so resizes look worthwhile


@pytest.fixture
def env(monkeypatch, tmp_path, netns_cluster):
    monkeypatch.setenv("MALLEABLE_TOKEN", TOKEN)
    monkeypatch.delenv("MALLEABLE_CONTROLLER", raising=False)
    monkeypatch.chdir(tmp_path)
    return dict(os.environ, MALLEABLE_ADAPT_TIMEOUT="40")


def steps(c, jid):
    return [(s["kind"], s["hosts"]) for s in c.info(jid).steps]


def heat(c, tmp_path, env, name, pref, lo, hi, iters, speedup="linear", sleep="0.05"):
    out = tmp_path / f"{name}.out"
    jid = c.submit([sys.executable, HEAT], pref, lo, hi, True, LIMIT, name=name, out=str(out),
                   env=dict(env, PROG_ITERS=str(iters), PROG_SLEEP=sleep), speedup=speedup)
    return jid, out


def exact(out: Path) -> dict:
    done = [json.loads(x) for x in out.read_text().splitlines() if '"done"' in x]
    assert done and done[-1]["ok"], out.read_text()[-2000:]
    return done[-1]


def ranks_up(out: Path) -> int:
    """How many ranks of a where_prog job have started (each prints one line first)."""
    return len(out.read_text().splitlines()) if out.exists() else 0


def test_mebf002_shrinks_once_to_admit_jobs(env, tmp_path, netns_cluster):
    """mebf-intensive: a malleable job on 4 hosts gives one host (floor(0.4 x 4)) to a waiting rigid job; a second
    waiting job is not served by shrinking it again (shrink-once), it waits for the first to end."""
    hosts = netns_cluster.hosts[:4]
    pool = HostPool.from_hosts([",".join(hosts)], netns_cluster.launcher)
    with daemon_thread(tmp_path / "ctl.sqlite", pool, "mebf-intensive") as (d, c):
        m, out = heat(c, tmp_path, env, "m", 4, 2, 4, 300, speedup="rho:0.2")
        wait_for(lambda: states(c).get(m) == "RUNNING" and c.info(m).job["registered"], 60, "the job to start")
        r1 = c.submit([sys.executable, WHERE, f"{d.cid}.{m}", "4"], 1, time_limit=60, name="r1",
                      out=str(tmp_path / "r1.out"), env=env)
        wait_for(lambda: states(c).get(r1) == "RUNNING", 60, "r1 to start on the host the shrink frees")
        r2 = c.submit(["sleep", "1"], 1, time_limit=60, name="r2", out=str(tmp_path / "r2.out"), env=env)
        final = wait_final(c, [m, r1, r2], 180)
        assert final == {m: "COMPLETED", r1: "COMPLETED", r2: "COMPLETED"}
        assert steps(c, m)[:2] == [("start", hosts), ("shrink", hosts[:3])]
        assert [k for k, _ in steps(c, m)].count("shrink") == 1          # never shrunk a second time
        assert c.info(r1).job["hosts"] == [hosts[3]]
        seen = json.loads((tmp_path / "r1.out").read_text().splitlines()[0])
        assert seen == {"host": hosts[3], "left": []}                     # checked empty before reuse
        assert c.info(r2).job["start"] >= c.info(r1).job["end"]          # waited for r1, not for another shrink
        exact(out)
        assert not scan_tagged(d.cid + "."), "processes of the jobs left behind"


def test_mebf000_moldable_start_then_expands(env, tmp_path, netns_cluster):
    """mebf0: a malleable job preferring 4 hosts starts on the 1 that is free (moldable start) and is expanded by
    the 3 a rigid job gives back when it ends (the queue is empty then)."""
    hosts = netns_cluster.hosts[:4]
    pool = HostPool.from_hosts([",".join(hosts)], netns_cluster.launcher)
    with daemon_thread(tmp_path / "ctl.sqlite", pool, "mebf0") as (d, c):
        r = c.submit(["sleep", "4"], 3, time_limit=60, name="r", out=str(tmp_path / "r.out"), env=env)
        wait_for(lambda: states(c).get(r) == "RUNNING", 30, "the rigid job to start")
        m, out = heat(c, tmp_path, env, "m", 4, 1, 4, 200)
        assert wait_final(c, [r, m], 180) == {r: "COMPLETED", m: "COMPLETED"}
        st = steps(c, m)
        assert st[0] == ("start", [hosts[3]])
        assert st[1] == ("expand", [hosts[3], *hosts[:3]])
        assert c.info(m).steps[1]["t"] >= c.info(r).job["end"]
        assert exact(out)["size"] == 4
        assert not scan_tagged(d.cid + "."), "processes of the jobs left behind"


def test_ebs_fpsma_pwma_grows_shrinks_for_a_waiting_job_grows_back(env, tmp_path, netns_cluster):
    """fpsma-pwma: grow into idle hosts, shrink (newest hosts first) so the waiting rigid job starts, grow back."""
    hosts = netns_cluster.hosts[:4]
    pool = HostPool.from_hosts([",".join(hosts)], netns_cluster.launcher)
    with daemon_thread(tmp_path / "ctl.sqlite", pool, "fpsma-pwma") as (d, c):
        m, out = heat(c, tmp_path, env, "m", 1, 1, 4, 400)
        wait_for(lambda: ("expand", hosts) in steps(c, m), 60, "the job to grow to 4 hosts")
        r = c.submit([sys.executable, WHERE, f"{d.cid}.{m}", "2"], 2, time_limit=60, name="r",
                     out=str(tmp_path / "r.out"), env=env)
        assert wait_final(c, [r, m], 180) == {r: "COMPLETED", m: "COMPLETED"}
        st = steps(c, m)
        assert st[:3] == [("start", hosts[:1]), ("expand", hosts), ("shrink", hosts[:2])], st
        assert sorted(c.info(r).job["hosts"]) == sorted(hosts[2:])
        assert all(json.loads(x)["left"] == [] for x in (tmp_path / "r.out").read_text().splitlines())
        assert ("expand", hosts) in st[3:], st                               # grew back after r ended
        exact(out)


def test_sfsj_steals_for_a_job_hit_by_a_host_failure(env, tmp_path, netns_cluster):
    """sfsj: a host of a 2-host job goes off the network; the controller marks it down, interrupts and re-queues
    the job first in line; it cannot restart on the one free host, so SFSJ interrupts the smaller job and gives
    its host to it; the victim restarts once the failed host is back."""
    with fifth_host() as (bad, link):
        hosts = [netns_cluster.hosts[0], netns_cluster.hosts[1], bad]
        pool = HostPool.from_hosts([",".join(hosts)], netns_cluster.launcher)
        with daemon_thread(tmp_path / "ctl.sqlite", pool, "sfsj", host_check=0.3) as (d, c):
            release = tmp_path / "release"       # b runs until the steal was seen (a loaded machine is slow)
            b = c.submit([sys.executable, WHERE, "none", "90", str(release)], 1, time_limit=120, name="b",
                         out=str(tmp_path / "b.out"), env=env)
            wait_for(lambda: states(c).get(b) == "RUNNING", 30, "the small job to start")
            # a runs until released too: it holds the other hosts until the victim has restarted on the failed one
            release_a = tmp_path / "release-a"
            a = c.submit([sys.executable, WHERE, "none", "90", str(release_a)], 2, time_limit=120, name="a",
                         out=str(tmp_path / "a.out"), env=env)
            wait_for(lambda: states(c).get(a) == "RUNNING" and ranks_up(tmp_path / "a.out") == 2, 30, "a's ranks")
            assert c.info(a).job["hosts"] == hosts[1:]
            subprocess.run([*link, "down"], check=True)
            wait_for(lambda: bad in c.call(P.Status()).info["down"], 20, "the host to be marked down")
            wait_for(lambda: len(c.info(a).steps) == 2, 60, "a to restart")
            assert sorted(c.info(a).steps[1]["hosts"]) == hosts[:2]          # the free host + the victim's
            assert "interrupt" in [e["kind"] for e in c.info(b).events]
            assert states(c)[b] == "PENDING"                                  # waits: the failed host is gone
            release.touch()                                                   # its restart may end at once
            t_up = time.time()
            subprocess.run([*link, "up"], check=True)
            # the victim restarts only once the failed host is back and checked clean (a still holds the others)
            wait_for(lambda: len(c.info(b).steps) == 2, 60, "the victim to restart")
            release_a.touch()
            final = wait_final(c, [a, b], 120)
            assert final == {a: "COMPLETED", b: "COMPLETED"}
            steps = c.info(b).steps
            assert len(steps) == 2 and steps[0]["hosts"] == [hosts[0]] and steps[1]["hosts"] == [bad]
            assert steps[1]["t"] >= t_up
            kinds = [e["kind"] for e in c.info(a).events]
            assert kinds.count("start") == 2 and "requeue" in kinds and kinds.count("end") == 1
            nodes = {x["name"]: x["state"] for x in c.rows(P.Nodes())}
            assert nodes[bad] != "down"
            wait_for(lambda: all(x["state"] == "idle" for x in c.rows(P.Nodes())), 30, "every host idle")
            assert not scan_tagged(d.cid + "."), "processes of the jobs left behind"


def test_a_job_whose_launcher_sees_its_host_lost_first_is_requeued(env, tmp_path, netns_cluster):
    """mpiexec notices a host taken off the network long before the periodic host check (once a minute here) when
    it is still starting the job's processes there (as here: the host goes down as soon as the job runs): the job's
    exit waits for a check of the hosts, begun at once, which finds the host down; so the job is re-queued as
    interrupted and restarts on the other hosts instead of failing."""
    with fifth_host() as (bad, link):
        hosts = [netns_cluster.hosts[0], bad, netns_cluster.hosts[1]]
        pool = HostPool.from_hosts([",".join(hosts)], netns_cluster.launcher)
        with daemon_thread(tmp_path / "ctl.sqlite", pool, "easy", host_check=60) as (d, c):
            release = tmp_path / "release"
            a = c.submit([sys.executable, WHERE, "none", "90", str(release)], 2, time_limit=120, name="a",
                         out=str(tmp_path / "a.out"), env=env)
            wait_for(lambda: states(c).get(a) == "RUNNING" and (tmp_path / "a.out").exists(), 30, "a to start")
            assert c.info(a).job["hosts"] == hosts[:2]
            t_down = time.monotonic()
            subprocess.run([*link, "down"], check=True)
            wait_for(lambda: len(c.info(a).steps) == 2, 40, "a to restart")
            assert time.monotonic() - t_down < 60                      # not found by the periodic check
            assert sorted(c.info(a).steps[1]["hosts"]) == sorted([hosts[0], hosts[2]])
            assert bad in c.call(P.Status()).info["down"]
            release.touch()
            assert wait_final(c, [a], 60) == {a: "COMPLETED"}
            kinds = [e["kind"] for e in c.info(a).events]
            assert kinds.count("host-down") == 1 and kinds.count("requeue") == 1 and kinds.count("end") == 1
            wait_for(lambda: not scan_tagged(d.cid + "."), 30, "no process of the job left")


@contextlib.contextmanager
def fifth_host() -> Iterator[tuple[str, list[str]]]:
    """node5 and the command (append ``down`` or ``up``) that takes it off the network and back: one test at a time
    (a lock); it is up again afterwards."""
    with open("/run/malleable-test-node5.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _testbed.up(5)
        link = ["ip", "link", "set", "nc-node5"]
        try:
            yield "node5", link
        finally:
            subprocess.run([*link, "up"], capture_output=True)
