"""End to end on 4 namespace hosts: a malleable Jacobi job grows into idle hosts, shrinks to admit a rigid job
on hosts checked empty, grows back, and its result is bit-exact; a job killed inside a resize gives its hosts
back while the others go on."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._hostpool import HostPool, scan_tagged
from tests.controller._daemon_util import HEAT, TOKEN, daemon_thread, states, wait_final, wait_for

pytestmark = [pytest.mark.netns, pytest.mark.timeout(240)]

WHERE = str(Path(__file__).parent / "progs" / "where_prog.py")
N, ITERS = 512, 2500


@pytest.fixture
def env(monkeypatch, tmp_path, netns_cluster):
    monkeypatch.setenv("MALLEABLE_TOKEN", TOKEN)
    monkeypatch.delenv("MALLEABLE_CONTROLLER", raising=False)
    monkeypatch.chdir(tmp_path)
    return dict(os.environ, MALLEABLE_ADAPT_TIMEOUT="40")


def steps(c, jid):
    return [(s["kind"], s["hosts"]) for s in c.info(jid).steps]


def test_grow_shrink_for_rigid_grow_back_exact(env, tmp_path, netns_cluster):
    from malleable.apps.jacobi import reference

    hosts = netns_cluster.hosts[:4]
    pool = HostPool.from_hosts([",".join(hosts)], netns_cluster.launcher)
    out = tmp_path / "u.npy"
    with daemon_thread(tmp_path / "ctl.sqlite", pool, "malleable-fill") as (d, c):
        m = c.submit([sys.executable, "-m", "malleable.apps.jacobi", "--n", str(N), "--iters", str(ITERS),
                      "--probe-every", "10", "--out", str(out)], 1, 1, 4, True, name="jacobi",
                     out=str(tmp_path / "m.out"), env=env)
        wait_for(lambda: ("expand", hosts) in steps(c, m), 60, "the Jacobi job to grow to 4 hosts")
        assert steps(c, m)[0] == ("start", hosts[:1])
        q = c.rows(P.Queue())
        assert [(r["id"], r["state"], r["size"]) for r in q] == [(m, "RUNNING", 4)]
        r = c.submit([sys.executable, WHERE, f"{d.cid}.{m}", "1"], 2, name="rigid", out=str(tmp_path / "r.out"),
                     env=env)
        final = wait_final(c, [m, r], 150)
        assert final == {m: "COMPLETED", r: "COMPLETED"}, (tmp_path / "m.out").read_text()[-3000:]
        st = steps(c, m)
        kinds = [k for k, _ in st]
        assert kinds[:3] == ["start", "expand", "shrink"] and st[2][1] == hosts[:2], st
        rigid = c.info(r)
        assert sorted(rigid.job["hosts"]) == sorted(hosts[2:])       # the hosts the shrink gave back
        shrink_t = c.info(m).steps[2]["t"]
        assert rigid.job["start"] >= shrink_t                         # not before the shrink was acknowledged
        seen = [json.loads(x) for x in (tmp_path / "r.out").read_text().splitlines()]
        assert sorted(x["host"] for x in seen) == sorted(hosts[2:])
        assert all(x["left"] == [] for x in seen), seen                 # verified empty before reuse
        if "expand" in kinds[3:]:
            assert st[kinds.index("expand", 3)][1] == hosts            # grew back once the rigid job ended
        u = np.load(out)
        assert np.array_equal(u, reference(N, ITERS)), "result differs from the serial reference"
        hist = {x["id"]: x for x in c.rows(P.History(0))}
        assert hist[m]["exit_code"] == 0 and hist[r]["exit_code"] == 0
        events = [e["kind"] for e in c.info(m).events]
        # 2 hosts freed by the shrink, then at the end the hosts the job held: 4 if it grew back, else 2
        held_at_end = 4 if "expand" in kinds[3:] else 2
        assert events.count("host-free") >= 2 + held_at_end and "register" in events
        wait_for(lambda: all(x["state"] == "idle" for x in c.rows(P.Nodes())), 20, "every host idle")
        assert not scan_tagged(d.cid + "."), "processes of the jobs left behind"


def test_job_killed_inside_a_resize(env, tmp_path, netns_cluster):
    hosts = netns_cluster.hosts[:3]
    pool = HostPool.from_hosts([",".join(hosts)], netns_cluster.launcher)
    with daemon_thread(tmp_path / "ctl.sqlite", pool, "malleable-fill") as (d, c):
        r = c.submit(["sleep", "6"], 1, name="other", out=str(tmp_path / "r.out"), env=env)
        wait_for(lambda: states(c).get(r) == "RUNNING", 20, "the rigid job to start")
        m = c.submit([sys.executable, HEAT], 1, 1, 2, True, out=str(tmp_path / "m.out"),
                     env=dict(env, PROG_ITERS="400", PROG_SLEEP="0.02", PROG_CRASH_IN_RESIZE="1"))
        assert wait_final(c, [m], 60)[m] == "FAILED"
        assert states(c)[r] == "RUNNING"                                # the other job goes on
        wait_for(lambda: [x["state"] for x in c.rows(P.Nodes())] == ["alloc", "idle", "idle"], 30,
                 "the killed job's hosts to come back")
        assert not scan_tagged(f"{d.cid}.{m}"), "processes of the killed job left"
        kinds = [e["kind"] for e in c.info(m).events]
        assert "order" in kinds and "end" in kinds and kinds.count("host-free") == 2
        assert wait_final(c, [r], 30)[r] == "COMPLETED"
