"""A shrink interrupted by a crash completes or rolls back on restart, and no byte is lost either way."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest
from conftest import close_checked
from elastic_util import expected_owners

BS = 64 * 1024


@pytest.fixture
def dep(tmp_path):
    from malleable.adhocfs import start_fs

    d = start_fs("127.0.0.1", ["127.0.0.1"] * 3, dir=str(tmp_path / "data"), state=str(tmp_path / "st"))
    yield d
    d.stop()


def _fill(fs, n=6):
    files = {f"/c{i}": random.Random(i).randbytes(40 * BS + i) for i in range(n)}
    for p, d in files.items():
        with fs.open(p, "wb", block_size=BS) as f:
            f.write(d)
    return files


def _check(fs, files):
    for p, d in files.items():
        with fs.open(p, "rb") as f:
            assert f.read() == d, p


def _wait_moving(addr):
    from malleable.adhocfs import MetaClient

    with MetaClient(addr) as mc:
        for _ in range(200):
            ch = mc.status().change
            if ch and ch.get("state") == "running" and ch.get("moved", 0) > 0:
                return ch
            time.sleep(0.02)
    pytest.fail("shrink never started moving")


def test_leaving_server_killed_mid_shrink_rolls_back_then_succeeds(dep):
    from malleable.adhocfs import connect, start_data_servers
    from malleable.adhocfs._admin import shrink_fs, wait_change

    fs = connect(dep.address, timeout=3.0)
    try:
        files = _fill(fs)
        victim = 2
        info = shrink_fs(dep.address, [victim], "partial", rate=1.0, wait=False)
        _wait_moving(dep.address)
        pid = next(s["pid"] for s in fs.status().servers if s["sid"] == victim)
        os.kill(pid, signal.SIGKILL)
        final = wait_change(dep.address, info["id"], timeout=30)
        assert final["state"] == "rolled_back" and "data server 2" in final["error"]
        st = {s["sid"]: s for s in fs.status().servers}
        assert st[victim]["state"] == "active" and all(fs.stat(p).status == "ready" for p in files)
        servers, procs = start_data_servers(dep.address, ["127.0.0.1"], dep.state, dep.dir, sids=[victim])
        dep.procs.update({f"restarted {k}": p for k, p in procs.items()})
        _check(fs, files)  # nothing lost
        done = shrink_fs(dep.address, [victim], "partial")
        assert done["state"] == "done"
        _check(fs, files)
        assert all(victim not in set(expected_owners(fs, p).values()) for p in files)
    finally:
        close_checked(fs)


def test_metadata_server_killed_mid_shrink_rolls_back_on_restart(dep):
    from malleable.adhocfs import MetaClient, connect
    from malleable.adhocfs._admin import shrink_fs
    from malleable.adhocfs._deploy import start_meta

    with connect(dep.address) as fs:
        files = _fill(fs)
    shrink_fs(dep.address, [3], "total", rate=1.0, wait=False)
    _wait_moving(dep.address)
    meta = dep.procs.pop("metadata server")
    meta.send_signal(signal.SIGKILL)
    meta.wait()
    host_port = dep.address.removeprefix("tcp://")
    addr, proc = start_meta(host_port, dep.state)
    dep.procs["metadata server (restarted)"] = proc
    assert addr == dep.address
    with MetaClient(addr) as mc:
        st = mc.status()
    assert st.change["state"] == "rolled_back" and "restarted" in st.change["error"]
    assert {s["sid"]: s["state"] for s in st.servers}[3] == "active"
    fs = connect(dep.address, timeout=3.0)
    try:
        _check(fs, files)
        assert all(fs.stat(p).status == "ready" for p in files)
        with fs.open("/c0", "r+b") as f:  # writes work again
            f.write(b"new")
        files["/c0"] = b"new" + files["/c0"][3:]
        assert shrink_fs(dep.address, [3], "total")["state"] == "done"
        _check(fs, files)
    finally:
        close_checked(fs)


def test_crash_after_commit_finishes_cleanup(dep, tmp_path):
    """A journal left in 'cleanup' (crash right after the switch) is finished by the restarted server."""
    from malleable.adhocfs import MetaClient, connect
    from malleable.adhocfs._admin import shrink_fs
    from malleable.adhocfs._deploy import start_meta
    from malleable.adhocfs._namespace import Namespace

    with connect(dep.address) as fs:
        files = _fill(fs, 3)
    shrink_fs(dep.address, [1], "partial")
    # forge the state of a crash between the commit and the cleanup: journal 'cleanup' still recorded
    meta = dep.procs.pop("metadata server")
    with MetaClient(dep.address) as mc:
        from malleable.adhocfs._protocol import Shutdown

        mc.call(Shutdown())
    meta.wait()
    ns = Namespace(os.path.join(dep.state, "meta.sqlite"))
    ns.kv_set(
        "change",
        {
            "id": 99,
            "kind": "shrink",
            "mode": "partial",
            "sids": [1],
            "state": "cleanup",
            "moves": [],
            "affected": {},
            "drops": [],
        },
    )
    ns.close()
    addr, proc = start_meta(dep.address.removeprefix("tcp://"), dep.state)
    dep.procs["metadata server (restarted)"] = proc
    with MetaClient(addr) as mc:
        st = mc.status()
    assert st.change["id"] == 99 and st.change["state"] == "done"
    with connect(addr) as fs:
        _check(fs, files)
