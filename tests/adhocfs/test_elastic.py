"""Expand and shrink on a live file system: no migration on expand, partial/total shrink, writes waiting,
unaffected files untouched, several writer processes checked against local copies, h5py across changes."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time

import pytest
from conftest import close_checked
from elastic_util import MIRROR_WRITER, blocks_on_servers, expected_owners, layout_of

from malleable.adhocfs._placement import UNALLOCATED
from tests._procs import wait_for

BS = 64 * 1024


@pytest.fixture
def dep(tmp_path):
    from malleable.adhocfs import start_fs

    d = start_fs("127.0.0.1", ["127.0.0.1"] * 3, dir=str(tmp_path / "data"), state=str(tmp_path / "st"))
    yield d
    d.stop()


@pytest.fixture
def fs(dep):
    from malleable.adhocfs import connect

    c = connect(dep.address, timeout=3.0, reserve=0)
    yield c
    close_checked(c)


def _write(fs, path, data):
    with fs.open(path, "wb", block_size=BS) as f:
        f.write(data)


def _read(fs, path):
    with fs.open(path, "rb") as f:
        return f.read()


def _expand(dep, n, **kw):
    from malleable.adhocfs._admin import expand_fs

    servers, procs, info = expand_fs(dep.address, ["127.0.0.1"] * n, dir=dep.dir, state=dep.state, **kw)
    dep.procs.update({f"expanded {k}": p for k, p in procs.items()})
    return sorted(servers), info


def test_expand_without_migration(dep, fs):
    old = random.Random(1).randbytes(8 * BS)
    _write(fs, "/old", old)
    before = blocks_on_servers(fs, "/old")
    new_sids, info = _expand(dep, 2)
    assert info["state"] == "done" and len(info["servers"]) == 5
    assert blocks_on_servers(fs, "/old") == {**before, **{s: [] for s in new_sids}}  # nothing moved
    with fs.open("/old", "ab") as f:  # blocks 8.. after expand
        f.write(random.Random(2).randbytes(600 * BS))
    lay = [iv for iv in layout_of(fs, "/old").layout if iv[1] != UNALLOCATED]
    assert len(lay) == 2 and lay[1][0] == 8  # two intervals
    owners = expected_owners(fs, "/old")
    held = blocks_on_servers(fs, "/old")
    assert all(b in held[s] for b, s in owners.items())
    later = {owners[b] for b in range(8, 608)}
    assert set(new_sids) <= later and len(later) == 5  # spread over the enlarged list
    assert all(owners[b] in before and b in before[owners[b]] for b in range(8))
    _write(fs, "/created-later", b"x" * BS)
    info2 = layout_of(fs, "/created-later")
    assert len(info2.epochs[str(info2.layout[0][1])]) == 5  # records the new count
    assert _read(fs, "/old")[: 8 * BS] == old


def test_io_goes_on_while_commissioning(dep, fs):
    """A writer keeps writing while servers are started and commissioned; nothing is refused."""
    errors, writes = [], [0]
    stop = threading.Event()

    def writer():
        from malleable.adhocfs import connect

        try:
            with connect(dep.address) as c, c.open("/busy", "wb", block_size=BS) as f:
                while not stop.is_set():
                    f.write(b"w" * 10_000)
                    writes[0] += 1
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=writer)
    t.start()
    n0 = wait_for(lambda: writes[0], 30, "the writer's first write")
    from malleable.adhocfs import MetaClient
    from malleable.adhocfs._protocol import AddServers

    with MetaClient(dep.address) as mc:  # what expand does first: reserve ids (files show commissioning)
        mc.call(AddServers(["127.0.0.1"]))
        st = mc.status()
    assert st.change["state"] == "commissioning" and fs.stat("/busy").status == "commissioning"
    wait_for(lambda: writes[0] > n0 or errors, 30, "writes while commissioning")
    assert not errors and fs.stat("/busy").status == "commissioning"  # I/O went on while commissioning
    n1 = writes[0]
    _expand(dep, 1)
    wait_for(lambda: writes[0] > n1 or errors, 30, "writes after the expansion")
    stop.set()
    t.join(10)
    assert not errors and writes[0] > n0
    assert _read(fs, "/busy") == b"w" * (10_000 * writes[0])


@pytest.mark.parametrize("mode", ["partial", "total"])
def test_shrink_moves_expected_blocks_and_loses_nothing(dep, fs, mode):
    from malleable.adhocfs._admin import shrink_fs

    files = {f"/s{i}": random.Random(i).randbytes(random.Random(i).randrange(BS, 40 * BS)) for i in range(8)}
    for p, d in files.items():  # half written before an expansion, half after: two intervals per file
        _write(fs, p, d[: len(d) // 2])
    _expand(dep, 1)
    for p, d in files.items():
        with fs.open(p, "ab") as f:
            f.write(d[len(d) // 2 :])
    victim = 2
    on_victim = sum(len(blocks_on_servers(fs, p).get(victim, [])) for p in files)
    info = shrink_fs(dep.address, [victim], mode)
    assert info["state"] == "done" and info["on_leaving"] == on_victim
    if mode == "partial":
        assert on_victim <= info["moved"] <= 1.1 * on_victim
    else:  # old-interval blocks are re-placed over the enlarged list too
        assert info["moved"] > 1.2 * on_victim
    st = fs.status()
    assert victim not in [s["sid"] for s in st.servers]  # it left
    for p, d in files.items():
        assert victim not in set(expected_owners(fs, p).values())  # no block maps to it
        assert _read(fs, p) == d
    held = {}
    for p in files:
        for sid, bl in blocks_on_servers(fs, p).items():
            held[sid] = held.get(sid, 0) + len(bl)
    assert sum(held.values()) == sum(-(-len(d) // BS) for d in files.values())  # sources dropped, no dups


def test_shrink_blocks_writers_of_affected_files_only(dep, fs):
    """Writes to an affected file wait until the shrink is done; an unaffected file keeps working."""
    from malleable.adhocfs import connect
    from malleable.adhocfs._admin import shrink_fs

    _write(fs, "/big", random.Random(5).randbytes(120 * BS))
    held = blocks_on_servers(fs, "/big")
    victim = max(held, key=lambda s: len(held[s]))
    others = [s for s in held if s != victim]
    # an unaffected file: one block, on a staying server
    for i in range(200):
        path = f"/small{i}"
        _write(fs, path, b"s" * 100)
        if set(expected_owners(fs, path).values()) <= set(others):
            break
    result = {}

    def shrink():
        result["info"] = shrink_fs(dep.address, [victim], "partial", rate=1.5)  # ~1.7 s of moving

    t = threading.Thread(target=shrink)
    t.start()
    with connect(dep.address) as c:
        wait_for(lambda: c.stat("/big").status == "decommissioning" or "info" in result, 30, "decommissioning")
        assert c.stat("/big").status == "decommissioning"
        with c.open(path, "r+b") as f:  # unaffected: no wait
            f.seek(100)
            f.write(b"more")
        assert c.stat(path).status == "ready"
        with c.open("/big", "rb") as f:  # reads go on
            assert len(f.read(10 * BS)) == 10 * BS
        assert c.stat("/big").status == "decommissioning"  # the write and the read were done while /big moved
        with c.open("/big", "r+b") as f:  # writes wait
            f.write(b"after")
            f.flush()
        assert c.stat("/big").status == "ready"  # it waited until the move was over
    t.join(30)
    info = result["info"]
    assert info["state"] == "done"
    data = _read(fs, "/big")
    assert data[:5] == b"after" and data[5:] == random.Random(5).randbytes(120 * BS)[5:]
    assert _read(fs, path) == b"s" * 100 + b"more"


def test_clients_with_old_layouts_refresh(dep, fs):
    """A reader holding the layout from before a total shrink gets the right bytes afterwards."""
    from malleable.adhocfs._admin import shrink_fs

    data = random.Random(9).randbytes(30 * BS)
    _write(fs, "/stale", data)
    f = fs.open("/stale", "rb")
    try:
        assert f.read(BS) == data[:BS]
        shrink_fs(dep.address, [1], "total")
        f.seek(0)
        assert f.read() == data
    finally:
        f.close()


def test_rebalance_moves_old_blocks_onto_new_servers(dep, fs):
    data = {f"/r{i}": random.Random(i).randbytes(50 * BS) for i in range(4)}
    for p, d in data.items():
        _write(fs, p, d)
    new_sids, info = _expand(dep, 1, rebalance=True)
    total = sum(-(-len(d) // BS) for d in data.values())
    assert info["kind"] == "rebalance" and info["state"] == "done"
    assert 0.15 * total < info["moved"] < 0.35 * total  # about 1/4, only onto the new one
    on_new = sum(len(blocks_on_servers(fs, p).get(new_sids[0], [])) for p in data)
    assert on_new == info["moved"]
    for p, d in data.items():
        assert _read(fs, p) == d
        assert len([iv for iv in layout_of(fs, p).layout if iv[1] != UNALLOCATED]) == 1


def test_writers_and_readers_across_expand_and_shrink(dep, fs, tmp_path):
    """Several client processes write and read continuously (checked against local mirrors) while the file
    system grows by two servers and then loses two."""
    from malleable.adhocfs._admin import shrink_fs

    fs.mkdir("/live")
    n = 3
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", MIRROR_WRITER, dep.address, str(i), "4.0", str(tmp_path / f"m{i}")],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    try:
        time.sleep(0.8)
        new_sids, _ = _expand(dep, 2)
        time.sleep(0.8)
        shrink_fs(dep.address, [1, new_sids[0]], "partial")
        time.sleep(0.3)
    finally:
        outs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * n, outs
    assert all(int(o) > 10 for o in outs)
    for i in range(n):
        assert _read(fs, f"/live/w{i}") == (tmp_path / f"m{i}").read_bytes()


def test_h5py_survives_changes(dep, fs):
    h5py = pytest.importorskip("h5py")
    import numpy as np

    from malleable.adhocfs._admin import shrink_fs

    arr = np.random.default_rng(1).random((400, 300))
    with fs.open("/e.h5", "w+b", block_size=BS) as f, h5py.File(f, "w") as h:
        h.create_dataset("a", data=arr)
    _expand(dep, 1)
    with fs.open("/e.h5", "r+b") as f, h5py.File(f, "r+") as h:
        h.create_dataset("b", data=arr * 2)
    shrink_fs(dep.address, [2], "total")
    with fs.open("/e.h5", "rb") as f, h5py.File(f, "r") as h:
        assert np.array_equal(h["a"][...], arr) and np.array_equal(h["b"][...], arr * 2)


def test_expand_refused_during_shrink_cleans_up(dep, fs):
    """An expansion refused because a shrink runs stops the servers it started and ends commissioning."""
    from malleable.adhocfs._admin import expand_fs, shrink_fs, wait_change
    from malleable.errors import FsError

    _write(fs, "/x", random.Random(3).randbytes(60 * BS))
    info = shrink_fs(dep.address, [3], "partial", rate=1.0, wait=False)
    with pytest.raises(FsError, match="another change"):
        expand_fs(dep.address, ["127.0.0.1"], state=dep.state)
    states = {s["sid"]: s["state"] for s in fs.status().servers}
    assert "up" not in states.values() and "reserved" not in states.values()
    assert wait_change(dep.address, info["id"])["state"] == "done"
    assert fs.stat("/x").status == "ready"
    assert _read(fs, "/x") == random.Random(3).randbytes(60 * BS)
