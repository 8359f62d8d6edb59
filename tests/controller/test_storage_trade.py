"""Hosts traded between compute and storage, live: a job's file system that cannot keep up with its writer takes
a host back from a running malleable Jacobi job (shrunk by one host through the policy's decision path), runs a
data server there while the writer goes on, and the Jacobi job's result is still exactly the serial one; every
byte the writer wrote reads back equal, the host is kept for storage while its server runs, and nothing is left
afterwards."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._hostpool import HostPool, scan_tagged
from tests.controller._daemon_util import daemon_thread, isolate, wait_final, wait_for
from tests.controller.test_storage_live import WRITER, fs_done

M = 1 << 20
G = 1 << 30
PY = sys.executable
N, ITERS = 64, 300_000        # a small grid: many cheap iterations, so the job runs for tens of seconds


@pytest.fixture
def env(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)
    return dict(os.environ)


def steps(c, jid):
    return [(s["kind"], s["hosts"]) for s in c.info(jid).steps]


@pytest.mark.netns
@pytest.mark.timeout(900)
def test_a_file_system_grows_onto_a_host_taken_back_from_a_malleable_jacobi(env, tmp_path, netns_cluster):
    from malleable.apps.jacobi import reference

    hosts = netns_cluster.hosts[:3]
    pool = HostPool.from_hosts([",".join(hosts)], netns_cluster.launcher)
    (tmp_path / "writer.py").write_text(WRITER)
    out = tmp_path / "u.npy"
    # every host may run data servers; malleable-fill grows the Jacobi job onto any free host
    with daemon_thread(tmp_path / "ctl.sqlite", pool, "malleable-fill", bb_capacity=256 * M) as (d, c):
        m = c.submit([PY, "-m", "malleable.apps.jacobi", "--n", str(N), "--iters", str(ITERS), "--probe-every", "200",
                      "--out", str(out)], 1, 1, 2, True, name="jacobi", out=str(tmp_path / "m.out"), env=env)
        wait_for(lambda: ("expand", hosts[:2]) in steps(c, m), 60, "the Jacobi job to grow to 2 hosts")
        w = c.submit([PY, str(tmp_path / "writer.py"), str(tmp_path), "150"], 1, out=str(tmp_path / "w.out"),
                     env=env, bb=400 * M, fs_min=1, fs_max=2, io_rate=float(10 * G))

        def grown():
            job = c.info(w).job
            return len((job["fs"] or {}).get("servers") or []) == 2 or job["state"] in ("COMPLETED", "FAILED")

        wait_for(grown, 120, "a second data server for the writer")
        job = c.info(w).job
        assert job["state"] == "RUNNING", (tmp_path / "w.out").read_text()[-2000:] + str(c.info(w).events)
        # the first server node-local on the writer's host, the second on the host the Jacobi job gave back
        assert job["hosts"] == [hosts[2]] and [h for _, h in job["fs"]["servers"]] == [hosts[2], hosts[1]]
        assert job["fs"]["lent"] == [hosts[1]]
        assert ("shrink", hosts[:1]) in steps(c, m), (steps(c, m), c.info(w).events)
        assert c.info(m).job["state"] == "RUNNING", "the Jacobi job ended before it gave a host back"
        nodes = {r["name"]: (r["state"], r["job"]) for r in c.rows(P.Nodes())}
        assert nodes[hosts[1]] == ("storage", w) and nodes[hosts[0]] == ("alloc", m)
        (tmp_path / "grown").touch()                                  # the writer writes a few files more, ends
        final = wait_final(c, [m, w], 600)                            # minutes of compute on a loaded machine
        assert final == {m: "COMPLETED", w: "COMPLETED"}, (tmp_path / "m.out").read_text()[-2000:] + \
            (tmp_path / "w.out").read_text()[-2000:]
        files, size, after, bad = map(int, (tmp_path / "result.txt").read_text().split())
        assert bad == 0 and files >= after + 6 and size > 12 * M       # every byte read back equal
        assert np.array_equal(np.load(out), reference(N, ITERS)), "the Jacobi result differs from the serial one"
        kinds = [e["kind"] for e in c.info(w).events]
        assert "fs-reclaim" in kinds and "fs-grown" in kinds
        fs = wait_for(lambda: fs_done(c, w), 60, "the writer's file system to be stopped")
        assert fs["phase"] == "stopped" and fs["left"] == [] and fs["error"] == "" and fs["lent"] == []
        assert not scan_tagged(d.fs.tag(w)), "a data server of the writer was left"
        wait_for(lambda: all(r["state"] == "idle" for r in c.rows(P.Nodes())), 30, "every host idle")
        assert not scan_tagged(d.cid + "."), "processes of the jobs left behind"
