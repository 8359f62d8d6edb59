"""Many small files written at once (``FileSystem.write_files``: the ``create_files`` and ``publish`` requests), read
at once (``FileSystem.read_files``: ``open_files`` and ``get_files``) and folders listed with their entries' kinds and
sizes (``scandir``), on live servers with two copies of each block: the bytes read back are the ones written (holes
as zeros, a copy gone read from the other), and a file written again is replaced (bad bulk requests:
test_hostile.py)."""

from __future__ import annotations

import random

import pytest
from conftest import close_checked

from malleable.adhocfs import _protocol as P

BS = 64 * 1024


@pytest.fixture(scope="module")
def dep(tmp_path_factory):
    from malleable.adhocfs import start_fs

    root = tmp_path_factory.mktemp("bulk")
    d = start_fs("127.0.0.1", ["127.0.0.1"] * 3, state=str(root / "st"), block_size=BS, replicas=2)
    yield d
    d.stop()


@pytest.fixture
def fs(dep):
    from malleable.adhocfs import connect

    c = connect(dep.address, timeout=5.0)
    yield c
    close_checked(c)


def _read(fs, path):
    with fs.open(path, "rb") as f:
        return f.read()


@pytest.mark.timeout(60)
def test_written_files_read_back_on_every_copy_and_a_second_write_replaces_them(fs):
    rng = random.Random(7)
    fs.makedirs("/many/sub")
    sizes = [0, 1, BS - 1, BS, BS + 1, 5 * BS + 17] + [rng.randrange(1, 3 * BS) for _ in range(200)]
    files = [(f"/many/{'sub/' if i % 2 else ''}f{i:03d}", rng.randbytes(n)) for i, n in enumerate(sizes)]
    assert fs.write_files(files) == sum(sizes)
    for path, data in files:
        assert _read(fs, path) == data, path
        st = fs.stat(path)
        assert (st.size, st.nblocks) == (len(data), -(-len(data) // BS))
    first = {p: fs.stat(p).fid for p, _ in files}
    again = [(p, d[::-1] + b"!") for p, d in files[:50]]
    fs.write_files(again)
    for path, data in again:
        assert _read(fs, path) == data and fs.stat(path).fid != first[path]
    assert sorted(fs.scandir("/many")) == sorted(
        [("sub", True, 0)] + [(p.rsplit("/", 1)[1], False, len(d)) for p, d in [*again, *files[50:]]
                              if p.count("/") == 2])
    by_sid = {s["sid"]: s["blocks"] for s in fs.status().servers}
    assert sum(by_sid.values()) >= 2 * sum(-(-n // BS) for n in sizes[50:]), by_sid  # two copies of each block


def test_bulk_messages_round_trip():
    for msg in (P.CreateFiles(["/a", "/b"], [0, 7]), P.Publish([3, 4], [5, 6]),
                P.Created([3], [1], BS, 0, [1, 2], {"1": "tcp://x:1"}, 2), P.ScanDir("/"),
                P.Entries(["a", "b"], [0, 1], [3, 0]), P.OpenFiles(["/a", "/b"]),
                P.Opened([3, 4], [1, 2], [5, 0], [BS, BS], [0, 1], [[0, 0, 1], [1, 0, 2]], {"1": [1]}, {"1": "x"}, 2),
                P.GetFiles([3, 4], [0, 1], [1, 2], [BS, 7])):
        assert P.decode(P.encode(msg, b"k", 5), b"k") == (msg, 5)


def _primary(fs, path):
    """The data server (sid, address) that a bulk read asks first for block 0 of ``path``."""
    with fs.open(path, "rb") as f:
        sid = f._replicas(0)[0]
        return sid, f._addrs[sid], f.fid


@pytest.mark.timeout(60)
def test_read_files_gives_every_file_exactly_holes_included_and_falls_back_for_a_missing_copy(fs, shared_secret):
    rng = random.Random(8)
    fs.makedirs("/rd/sub")
    sizes = [0, 1, BS - 1, BS, BS + 1, 5 * BS + 17] + [rng.randrange(1, 3 * BS) for _ in range(150)]
    files = [(f"/rd/{'sub/' if i % 2 else ''}f{i:03d}", rng.randbytes(n)) for i, n in enumerate(sizes)]
    fs.write_files(files)
    with fs.open("/rd/sparse", "wb") as f:                       # blocks 0 and 1 never written: holes
        f.seek(2 * BS + 10)
        f.write(b"end")
    files.append(("/rd/sparse", bytes(2 * BS + 10) + b"end"))
    with fs.open("/rd/cut", "wb") as f:                          # a short last block inside a longer file
        f.write(b"x" * (BS + 5))
        f.truncate(3 * BS)
    files.append(("/rd/cut", b"x" * (BS + 5) + bytes(2 * BS - 5)))
    fs.rename("/rd/f000", "/rd/moved")
    files[0] = ("/rd/moved", files[0][1])
    sid, addr, fid = _primary(fs, files[5][0])                    # the copy a bulk read asks for is gone
    from malleable.adhocfs._rpc import Peer

    peer = Peer(fs.ctx, addr, shared_secret, f"data server {sid}")
    try:
        assert isinstance(peer.call(P.DropFile(fid)), P.Ok)
    finally:
        peer.close()
    got = fs.read_files([p for p, _ in files])
    assert [bytes(g) for g in got] == [d for _, d in files]
    assert fs.read_files([]) == []
    with pytest.raises(FileNotFoundError):
        fs.read_files(["/rd/moved", "/rd/f000"])
