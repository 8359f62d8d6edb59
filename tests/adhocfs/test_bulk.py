"""Many small files written at once (``FileSystem.write_files``: the ``create_files`` and ``publish`` requests) and
folders listed with their entries' kinds and sizes (``scandir``), on live servers with two copies of each block: the
bytes read back are the ones written and a file written again is replaced (bad bulk requests: test_hostile.py)."""

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
                P.Entries(["a", "b"], [0, 1], [3, 0])):
        assert P.decode(P.encode(msg, b"k", 5), b"k") == (msg, 5)
