"""adhocfs never returns wrong data: a block no live server holds is an EIO naming file and bytes (never zeros),
`lose` declares a dead server lost (damaged files listed, everything else works), replicas survive any one
server, a full file system answers ENOSPC, and a shrink leaves nothing in the leaving server's --dir."""

from __future__ import annotations

import errno
import os
import random
import signal
import time

import pytest
from conftest import close_checked
from elastic_util import blocks_on_servers

BS = 64 * 1024


def _start(tmp_path, n, **kw):
    from malleable.adhocfs import start_fs

    return start_fs("127.0.0.1", ["127.0.0.1"] * n, state=str(tmp_path / "st"), **kw)


def _files(n=6, seed=0):
    rng = random.Random(seed)
    return {f"/f{i}": rng.randbytes(rng.randrange(BS, 20 * BS)) for i in range(n)}


def _write_all(fs, files):
    for path, data in files.items():
        with fs.open(path, "wb", block_size=BS) as f:
            f.write(data)


def _kill(fs, sid):
    pid = next(s["pid"] for s in fs.status().servers if s["sid"] == sid)
    os.kill(pid, signal.SIGKILL)
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def _on(fs, path, sid):
    """Blocks of ``path`` held by ``sid`` (asked before it dies)."""
    return blocks_on_servers(fs, path).get(sid, [])


@pytest.fixture
def stopper():
    deps = []
    yield deps.append
    for d in deps:
        try:
            d.stop()
        except Exception:  # noqa: BLE001 - a killed server: stop what is left
            for p in d.procs.values():
                if p.poll() is None:
                    p.kill()
            d.wait(2.0)


def test_restart_without_dir_reads_eio_naming_range_never_zeros(tmp_path, stopper):
    """The reported failure: write, kill -9 a data server that has no --dir, restart it with the same id."""
    from malleable.adhocfs import connect, start_data_servers

    dep = _start(tmp_path, 2)
    stopper(dep)
    files = _files()
    fs = connect(dep.address, timeout=2.0)
    try:
        _write_all(fs, files)
        held = {p: _on(fs, p, 1) for p in files}
        _kill(fs, 1)
        servers, procs = start_data_servers(dep.address, ["127.0.0.1"], dep.state, sids=[1])
        dep.procs.update({f"restarted {k}": p for k, p in procs.items()})
        hit = 0
        for path, data in files.items():
            if not held[path]:
                with fs.open(path, "rb") as f:
                    assert f.read() == data
                continue
            hit += 1
            with fs.open(path, "rb") as f, pytest.raises(OSError) as err:
                f.read()
            b = held[path][0]
            assert err.value.errno == errno.EIO
            assert path in str(err.value) and f"bytes {b * BS}-" in str(err.value)
            with fs.open(path, "rb") as f:  # the bytes on the surviving server still read back
                good = next((x for x in range(len(data) // BS) if x not in held[path]), None)
                if good is not None:
                    f.seek(good * BS)
                    assert f.read(BS) == data[good * BS : (good + 1) * BS]
        assert hit >= 2
        from malleable.adhocfs._admin import check_fs

        report = {f["path"]: f for f in check_fs(dep.address).files}
        assert {p for p in files if held[p]} == set(report)
        assert all(report[p]["missing"] for p in report)
    finally:
        close_checked(fs)


def test_lose_marks_damaged_files_and_everything_else_works(tmp_path, stopper):
    from malleable.adhocfs import connect
    from malleable.adhocfs._admin import check_fs, lose_fs

    dep = _start(tmp_path, 3)
    stopper(dep)
    files = _files(8, seed=1)
    fs = connect(dep.address, timeout=2.0)
    try:
        _write_all(fs, files)
        victim = 2
        held = {p: _on(fs, p, victim) for p in files}
        _kill(fs, victim)
        with pytest.raises(OSError):  # before lose: new blocks on the dead server fail (after a timeout)
            with fs.open("/before", "wb", block_size=BS) as f:
                f.write(os.urandom(30 * BS))
        info = lose_fs(dep.address, [victim], wait=True)
        assert info["state"] in ("done", "running") or info.get("kind") == "lose"
        st = fs.status()
        assert next(s for s in st.servers if s["sid"] == victim)["state"] == "lost"
        damaged = {p for p in files if held[p]}
        assert damaged and set(st.damaged) == damaged | {"/before"}  # the failed write lost its blocks too
        assert victim not in st.epochs[str(st.epoch)]
        for path, data in files.items():
            t0 = time.monotonic()
            if path in damaged:
                with fs.open(path, "rb") as f, pytest.raises(OSError, match="lost") as err:
                    f.read()
                assert err.value.errno == errno.EIO and path in str(err.value)
                assert time.monotonic() - t0 < 1.5  # known lost: no waiting for the dead server
                assert fs.stat(path).status == "damaged"
            else:
                with fs.open(path, "rb") as f:
                    assert f.read() == data
        new = os.urandom(40 * BS)  # new writes go to the others, no timeout
        t0 = time.monotonic()
        with fs.open("/after", "wb", block_size=BS) as f:
            f.write(new)
        with fs.open("/after", "rb") as f:
            assert f.read() == new
        assert time.monotonic() - t0 < 5
        assert victim not in blocks_on_servers(fs, "/after")
        report = {f["path"]: f for f in check_fs(dep.address).files}
        assert set(report) == damaged | {"/before"} and all(report[p]["damaged"] for p in damaged)
        from malleable.adhocfs import start_data_servers
        from malleable.errors import FsError

        with pytest.raises(FsError, match="declared lost"):  # a lost id never serves again
            start_data_servers(dep.address, ["127.0.0.1"], dep.state, sids=[victim])
    finally:
        close_checked(fs)


def test_two_replicas_survive_any_one_server_and_lose_rereplicates(tmp_path, stopper):
    from malleable.adhocfs import connect
    from malleable.adhocfs._admin import check_fs, lose_fs

    dep = _start(tmp_path, 3, replicas=2)
    stopper(dep)
    files = _files(6, seed=2)
    fs = connect(dep.address, timeout=1.5)
    try:
        _write_all(fs, files)
        for path in files:  # every block on exactly two servers
            held = blocks_on_servers(fs, path)
            counts = {}
            for blocks in held.values():
                for b in blocks:
                    counts[b] = counts.get(b, 0) + 1
            assert set(counts.values()) == {2}, path
        victim = random.Random(7).choice([1, 2, 3])
        _kill(fs, victim)
        for path, data in files.items():  # every byte back, the dead server still in the layout
            with fs.open(path, "rb") as f:
                assert f.read() == data, path
        lose_fs(dep.address, [victim], wait=True)
        assert fs.status().damaged == []
        assert check_fs(dep.address).files == []  # re-replicated: two live copies of every block again
        second = next(s for s in (1, 2, 3) if s != victim)
        _kill(fs, second)  # a second failure after re-replication still loses nothing
        for path, data in files.items():
            with fs.open(path, "rb") as f:
                assert f.read() == data, path
    finally:
        close_checked(fs)


def test_restarted_empty_replica_is_refilled_by_check_repair(tmp_path, stopper):
    from malleable.adhocfs import connect, start_data_servers
    from malleable.adhocfs._admin import check_fs, wait_change

    dep = _start(tmp_path, 2, replicas=2)
    stopper(dep)
    files = _files(3, seed=3)
    fs = connect(dep.address, timeout=2.0)
    try:
        _write_all(fs, files)
        _kill(fs, 1)
        _, procs = start_data_servers(dep.address, ["127.0.0.1"], dep.state, sids=[1])
        dep.procs.update({f"restarted {k}": p for k, p in procs.items()})
        for path, data in files.items():  # server 1 answers "absent": the other copy is read
            with fs.open(path, "rb") as f:
                assert f.read() == data
        rep = check_fs(dep.address, repair=True)
        assert {f["path"] for f in rep.files} == set(files) and all(f["under_replicated"] for f in rep.files)
        wait_change(dep.address, rep.change["id"], 60)
        assert check_fs(dep.address).files == []
        assert sorted(blocks_on_servers(fs, "/f0")[1]) == sorted(blocks_on_servers(fs, "/f0")[2])
    finally:
        close_checked(fs)


def test_full_file_system_answers_enospc_and_keeps_earlier_files(tmp_path, stopper):
    from malleable.adhocfs import connect

    dep = _start(tmp_path, 2, capacity=1 << 20)
    stopper(dep)
    fs = connect(dep.address, timeout=3.0)
    try:
        small = os.urandom(600_000)
        with fs.open("/small", "wb", block_size=BS) as f:
            f.write(small)
        with pytest.raises(OSError) as err:
            with fs.open("/big", "wb", block_size=BS) as f:
                f.write(os.urandom(3 << 20))
        assert err.value.errno == errno.ENOSPC and "no space left" in str(err.value)
        with fs.open("/small", "rb") as f:
            assert f.read() == small
        st = fs.status()
        assert all(s["capacity"] == 1 << 20 and s["bytes"] <= 1 << 20 for s in st.servers)
        fs.remove("/big")
        with fs.open("/again", "wb", block_size=BS) as f:  # space freed: writes work again
            f.write(b"y" * 200_000)
    finally:
        close_checked(fs)


def test_partial_shrink_drops_the_leaving_servers_blocks_from_its_dir(tmp_path, stopper):
    from malleable.adhocfs import connect, shrink_fs

    dep = _start(tmp_path, 3, dir=str(tmp_path / "data"))
    stopper(dep)
    files = _files(4, seed=4)
    fs = connect(dep.address, timeout=3.0)
    try:
        _write_all(fs, files)
        leaving = tmp_path / "data" / "ds2"
        assert any(p.is_file() for p in leaving.rglob("*"))
        shrink_fs(dep.address, [2], "partial")
        assert [p for p in leaving.rglob("*") if p.is_file()] == []
        for path, data in files.items():
            with fs.open(path, "rb") as f:
                assert f.read() == data
    finally:
        close_checked(fs)
