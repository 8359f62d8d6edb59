"""A controller started from each MPI's environment (``.venv-impi/bin/python -m malleable controller start ...``) runs
its jobs in that MPI's own launcher dialect. On 4 namespace hosts the malleable Jacobi job grows across the hosts,
shrinks for a rigid job that then runs on the hosts it gave back, and its result is bit-exact; under Open MPI, which
cannot grow a job its launcher started on another host than mpirun's (docs/runtime.md), the runtime refuses each
growth: the refusal is in the job's events, the job keeps its one host, runs the rigid job beside it, and completes
bit-exact. On a local pool (slots of
this machine) the job grows and shrinks under every MPI."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._client import Client
from malleable.controller.daemon._hostpool import scan_tagged
from malleable.runtime._mpi import backend_named
from tests.controller._daemon_util import TOKEN, isolate, kill_leftovers, wait_final, wait_for
from tests.runtime._impls import impl_named, selected

pytestmark = pytest.mark.timeout(300)

WHERE = str(Path(__file__).parent / "progs" / "where_prog.py")
N, ITERS = 512, 2500


@pytest.fixture(params=selected())
def mpi(request):
    """Each selected MPI's venv (skipped with the reason where it cannot be made)."""
    return impl_named(request.param)


def steps(c: Client, jid: int) -> list[tuple[str, list[str]]]:
    return [(s["kind"], s["hosts"]) for s in c.info(jid).steps]


def events(c: Client, jid: int) -> list[dict]:
    return list(c.info(jid).events)


def start_controller(mpi, pool: list[str], state: Path, env: dict[str, str]) -> int:
    """``malleable controller start POOL`` with the MPI's own Python (the daemon runs in that venv); its pid."""
    done = subprocess.run([mpi.python, "-m", "malleable", "controller", "start", *pool, "--policy", "malleable-fill",
                           "--state", str(state), "--tick", "0.2"], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    from malleable.controller.daemon._paths import addr_file

    return int(json.loads(addr_file(str(state)).read_text())["pid"])


def job_env(monkeypatch, tmp_path) -> dict[str, str]:
    isolate(monkeypatch, tmp_path)
    env = dict(os.environ, MALLEABLE_ADAPT_TIMEOUT="40")
    for k in ("MALLEABLE_MPI", "MALLEABLE_MPIEXEC", "MALLEABLE_LAUNCHER_EXEC"):
        env.pop(k, None)
    return env


def all_idle_and_clean(c: Client, cid: str) -> None:
    """Every host idle again and no process of the controller's jobs left on any."""
    wait_for(lambda: all(x["state"] == "idle" for x in c.rows(P.Nodes())), 30, "every host idle")
    assert not scan_tagged(cid + "."), "processes of the jobs left behind"


def stop_controller(mpi, state: Path, env: dict[str, str]) -> None:
    stop = subprocess.run([mpi.python, "-m", "malleable", "controller", "stop", "--state", str(state)],
                          capture_output=True, text=True, timeout=60, env=env)
    assert stop.returncode == 0, stop.stderr


def test_jacobi_grows_and_shrinks_on_local_slots_under_each_mpi(mpi, monkeypatch, tmp_path):
    from malleable.apps.jacobi import reference

    env = job_env(monkeypatch, tmp_path)
    state, out = tmp_path / "ctl.sqlite", tmp_path / "u.npy"
    pid, cid = start_controller(mpi, ["--local", "2"], state, env), ""
    try:
        with Client(state=str(state), token=TOKEN.encode(), timeout=10) as c:
            cid = c.status()["controller_id"]
            assert c.status()["mpi"] == mpi.name
            m = c.submit([mpi.python, "-m", "malleable.apps.jacobi", "--n", str(N), "--iters", str(ITERS),
                          "--probe-every", "10", "--out", str(out)], 1, 1, 2, True, name="jacobi",
                         out=str(tmp_path / "m.out"), env=env)
            wait_for(lambda: ("expand", ["local1", "local2"]) in steps(c, m), 90, f"the job to grow ({mpi.name})")
            r = c.submit(["sh", "-c", "echo rigid-ran"], 1, name="rigid", out=str(tmp_path / "r.out"), env=env)
            final = wait_final(c, [m, r], 200)
            assert final == {m: "COMPLETED", r: "COMPLETED"}, (tmp_path / "m.out").read_text()[-3000:]
            kinds = [k for k, _ in steps(c, m)]
            assert kinds[:3] == ["start", "expand", "shrink"], kinds      # it made room for the rigid job
            assert (tmp_path / "r.out").read_text() == "rigid-ran\n"
            assert np.array_equal(np.load(out), reference(N, ITERS)), "result differs from the serial reference"
            all_idle_and_clean(c, cid)
        stop_controller(mpi, state, env)
        pid = 0
    finally:
        kill_leftovers(pid, cid)


@pytest.mark.netns
def test_jacobi_grows_across_hosts_under_each_mpi(mpi, monkeypatch, tmp_path, netns_cluster):
    from malleable.apps.jacobi import reference

    env = job_env(monkeypatch, tmp_path)
    hosts = netns_cluster.hosts[:4]
    state = tmp_path / "ctl.sqlite"
    grows = backend_named(mpi.name).spawn_across_hosts
    out = tmp_path / "u.npy"
    pool = ["--hosts", ",".join(hosts), "--launcher-exec", netns_cluster.launcher]
    pid, cid = start_controller(mpi, pool, state, env), ""
    try:
        with Client(state=str(state), token=TOKEN.encode(), timeout=10) as c:
            cid = c.status()["controller_id"]
            assert c.status()["mpi"] == mpi.name                # the daemon's launcher is that venv's
            m = c.submit([mpi.python, "-m", "malleable.apps.jacobi", "--n", str(N), "--iters", str(ITERS),
                          "--probe-every", "10", "--out", str(out)], 1, 1, 4, True, name="jacobi",
                         out=str(tmp_path / "m.out"), env=env)
            if grows:
                wait_for(lambda: ("expand", hosts) in steps(c, m), 90, f"the Jacobi job to grow to 4 hosts ({mpi.name})")
            else:
                wait_for(lambda: any(e["kind"] == "refused" for e in events(c, m)), 90,
                         "Open MPI's runtime to refuse the growth")
                wait_for(lambda: [x["state"] for x in c.rows(P.Nodes())].count("idle") >= 2, 30,
                         "the hosts of the refused growth to be checked and idle")
            assert steps(c, m)[0] == ("start", hosts[:1])
            r = c.submit([mpi.python, WHERE, f"{cid}.{m}", "1"], 2, name="rigid", out=str(tmp_path / "r.out"),
                         env=env)
            final = wait_final(c, [m, r], 200)
            assert final == {m: "COMPLETED", r: "COMPLETED"}, (
                (tmp_path / "m.out").read_text()[-3000:] + (tmp_path / "r.out").read_text()[-2000:])
            st = steps(c, m)
            kinds = [k for k, _ in st]
            rigid = c.info(r)
            seen = [json.loads(x) for x in (tmp_path / "r.out").read_text().splitlines() if x.startswith("{")]
            assert sorted(x["host"] for x in seen) == sorted(rigid.job["hosts"])   # ran on the hosts it was given
            assert all(x["left"] == [] for x in seen), seen                         # none of the Jacobi job's there
            if grows:
                assert kinds[:3] == ["start", "expand", "shrink"] and st[2][1] == hosts[:2], st
                assert sorted(rigid.job["hosts"]) == sorted(hosts[2:])             # the hosts the shrink gave back
                assert rigid.job["start"] >= c.info(m).steps[2]["t"]
            else:
                assert kinds == ["start"], st                                        # it kept its one host
                assert hosts[0] not in rigid.job["hosts"]
                why = [e["text"] for e in events(c, m) if e["kind"] == "refused"]
                assert why and all("openmpi cannot spawn processes" in w for w in why), why
            assert np.array_equal(np.load(out), reference(N, ITERS)), "result differs from the serial reference"
            hist = {x["id"]: x for x in c.rows(P.History(0))}
            assert hist[m]["exit_code"] == 0 and hist[r]["exit_code"] == 0
            all_idle_and_clean(c, cid)
        stop_controller(mpi, state, env)
        pid = 0
    finally:
        kill_leftovers(pid, cid)
