"""Many small files written at once (``FileSystem.write_files``: the ``create_files`` and ``publish`` requests) and
folders listed with their entries' kinds and sizes (``scandir``), on live servers with two copies of each block: the
bytes read back are the ones written, a file written again is replaced, and bad bulk requests get one clear error
each and change nothing."""

from __future__ import annotations

import json
import random

import pytest
import zmq
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


class Raw:
    """A bare DEALER to one server: sends frames as given, returns the decoded reply (or None)."""

    def __init__(self, addr):
        self.ctx = zmq.Context()
        self.s = self.ctx.socket(zmq.DEALER)
        self.s.setsockopt(zmq.LINGER, 0)
        self.s.connect(addr)

    def ask(self, frames, token, wait=5000):
        self.s.send_multipart([b"", *frames])
        if not self.s.poll(wait):
            return None
        return P.decode(self.s.recv_multipart()[1:], token)[0]

    def close(self):
        self.s.close(0)
        self.ctx.term()


@pytest.mark.timeout(60)
def test_bad_bulk_requests_get_one_clear_error_each_and_change_nothing(dep, fs, shared_secret):
    from malleable import _wire as W

    fs.makedirs("/bad")
    fs.write_files([("/bad/kept", b"kept")])
    fs.mkdir("/bad/folder")
    kept = fs.stat("/bad/kept").fid
    before = sorted(fs.scandir("/bad"))
    raw = Raw(dep.address)

    def raw_header(header):
        return W.pack_raw(json.dumps(dict(header, v=1, id=9, sizes=[])).encode(), shared_secret, [])

    cases = [
        (raw_header({"type": "create_files", "paths": ["/bad/a", "/bad/b"], "lengths": [1]}),
         "ProtocolError", "fields paths and lengths must have one entry per file each"),
        (raw_header({"type": "create_files", "paths": ["/bad/a"] * 1025, "lengths": [1] * 1025}),
         "ProtocolError", "more than 1024 files"),
        (raw_header({"type": "create_files", "paths": ["/bad/a"], "lengths": [-1]}),
         "ProtocolError", "must be list[int] of non-negative values"),
        (raw_header({"type": "publish", "fids": [kept], "lengths": "1"}), "ProtocolError", "'lengths'"),
        (P.encode(P.CreateFiles(["/bad/a", "/bad/kept", "/bad/./a"], [1, 2, 3]), shared_secret, 3),
         "ValueError", "a path is given twice"),
        (P.encode(P.CreateFiles(["/bad/a", "/bad/folder"], [1, 2]), shared_secret, 4),
         "IsADirectoryError", "is a directory: /bad/folder"),
        (P.encode(P.CreateFiles(["/bad/a", "/nowhere/x"], [1, 2]), shared_secret, 5),
         "FileNotFoundError", "no such directory: /nowhere"),
        (P.encode(P.CreateFiles(["/bad/a"], [1 << 61]), shared_secret, 6), "ValueError", "a size beyond"),
        (P.encode(P.Publish([kept, 10**9], [4, 4]), shared_secret, 7), "FileNotFoundError", "no longer exists"),
        (P.encode(P.Publish([kept], [BS * 3]), shared_secret, 8), "ValueError",
         "/bad/kept has no blocks allocated for 196608 bytes"),
    ]
    try:
        for frames, kind, words in cases:
            reply = raw.ask(frames, shared_secret)
            assert isinstance(reply, P.Error) and reply.kind == kind and words in reply.msg, (kind, reply)
    finally:
        raw.close()
    assert sorted(fs.scandir("/bad")) == before                      # no file made by a refused request
    assert fs.stat("/bad/kept").fid == kept and _read(fs, "/bad/kept") == b"kept"


def test_bulk_messages_round_trip():
    for msg in (P.CreateFiles(["/a", "/b"], [0, 7]), P.Publish([3, 4], [5, 6]),
                P.Created([3], [1], BS, 0, [1, 2], {"1": "tcp://x:1"}, 2), P.ScanDir("/"),
                P.Entries(["a", "b"], [0, 1], [3, 0])):
        assert P.decode(P.encode(msg, b"k", 5), b"k") == (msg, 5)
