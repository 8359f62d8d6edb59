"""End-to-end over real server processes on 127.0.0.1: round trips against a local file, seeks and
overwrites, truncation, namespace operations and their errors, several writer processes, h5py."""

from __future__ import annotations

import io
import random
import subprocess
import sys

import pytest
from conftest import close_checked

BS = 512 * 1024


def _roundtrip(fs, path, data, tmp_path, block_size=0):
    with fs.open(path, "wb", block_size=block_size) as f:
        assert f.write(data) == len(data)
    ref = tmp_path / "ref"
    ref.write_bytes(data)
    with fs.open(path, "rb") as f:
        got = f.read()
    assert got == ref.read_bytes()
    assert fs.stat(path).size == len(data)


@pytest.mark.parametrize("size", [0, 1, BS - 1, BS, BS + 1, 5 * BS + 12345])
def test_roundtrip_sizes(fs, tmp_path, size):
    data = random.Random(size).randbytes(size)
    _roundtrip(fs, f"/rt{size}", data, tmp_path)


def test_small_blocks_many_servers_hit(fs, tmp_path):
    data = random.Random(1).randbytes(3 << 20)
    _roundtrip(fs, "/small", data, tmp_path, block_size=64 * 1024)
    assert fs.stat("/small").nblocks == 48
    loads = [s["blocks"] for s in fs.status().servers]
    assert all(b > 0 for b in loads)


def test_random_seeks_and_overwrites_match_local_file(fs, tmp_path):
    """Same operations on an adhocfs file and a local file give the same bytes at every step."""
    rng = random.Random(42)
    local = open(tmp_path / "local", "w+b")
    remote = fs.open("/seeky", "w+b", block_size=16 * 1024)
    try:
        for step in range(150):
            op = rng.random()
            pos = rng.randrange(0, 200_000)
            if op < 0.5:
                data = rng.randbytes(rng.randrange(1, 40_000))
                for f in (local, remote):
                    f.seek(pos)
                    assert f.write(data) == len(data)
            elif op < 0.85:
                n = rng.randrange(0, 50_000)
                got = []
                for f in (local, remote):
                    f.seek(pos)
                    got.append(f.read(n))
                assert got[0] == got[1], f"step {step}"
            elif op < 0.93:
                for f in (local, remote):
                    f.truncate(pos)
            else:
                whence = rng.choice([io.SEEK_CUR, io.SEEK_END])
                off = rng.randrange(0, 1000)
                assert local.seek(off, whence) == remote.seek(off, whence)
            assert local.tell() == remote.tell()
        remote.flush()
        local.seek(0)
        remote.seek(0)
        assert remote.read() == local.read()
    finally:
        remote.close()
        local.close()
    with fs.open("/seeky", "rb") as f:
        assert f.read() == (tmp_path / "local").read_bytes()


def test_append_and_readinto(fs):
    with fs.open("/app", "wb") as f:
        f.write(b"hello ")
    with fs.open("/app", "ab") as f:
        f.seek(0)
        f.write(b"world")
    with fs.open("/app", "rb") as f:
        buf = bytearray(20)
        assert f.readinto(buf) == 11 and bytes(buf[:11]) == b"hello world"
        assert f.read() == b"" and f.readable() and not f.writable() and f.seekable()


def test_reads_a_little_out_of_order_keep_the_read_ahead(fs):
    """Reads that are sequential overall but arrive out of order (a mount's concurrent kernel read-ahead) get the
    right bytes from blocks fetched ahead: every block is asked of the servers once."""
    bs, n = 64 * 1024, 48
    data = random.Random(7).randbytes(bs * n)
    with fs.open("/ooo", "wb", block_size=bs) as f:
        f.write(data)

    def read_bytes() -> int:
        return sum(s["read_bytes"] for s in fs.status().servers)

    before = read_bytes()
    order = [k ^ 1 for k in range(n // 2)]  # 2-block chunks in pairs swapped: 1, 0, 3, 2, ...
    got = {}
    with fs.open("/ooo", "rb") as f:
        for k in order:
            f.seek(2 * bs * k)
            got[k] = f.read(2 * bs)
    assert b"".join(got[k] for k in range(n // 2)) == data
    assert read_bytes() - before == len(data)


def test_sequential_read_ahead_starts_with_one_block_then_doubles(fs, monkeypatch):
    """A sequential reader's first read-ahead request asks a single block, each further request twice as many,
    up to GET_BYTES: the first block arrives without waiting for a whole large reply. Every block is asked once
    and the bytes read back are the file's."""
    from malleable.adhocfs import _rpc
    from malleable.adhocfs._protocol import GetBlocks
    from malleable.adhocfs._reader import GET_BYTES

    bs, n = 64 * 1024, 200
    data = random.Random(8).randbytes(bs * n)
    with fs.open("/ramp", "wb", block_size=bs) as f:
        f.write(data)
    asked: list[list[int]] = []
    real_send = _rpc.Peer.send

    def recording_send(self, msg):
        if isinstance(msg, GetBlocks):
            asked.append(list(msg.blocks))
        return real_send(self, msg)

    monkeypatch.setattr(_rpc.Peer, "send", recording_send)
    with fs.open("/ramp", "rb") as f:
        got = b"".join(iter(lambda: f.read(bs), b""))
    assert got == data
    sizes = [len(b) for b in asked]
    assert sizes[:5] == [1, 2, 4, 8, 16]
    assert max(sizes) <= GET_BYTES // bs
    assert sorted(b for blocks in asked for b in blocks) == list(range(n))


def test_a_written_buffer_is_copied_unless_the_caller_says_it_stays_unchanged(fs):
    """Writes go behind: a buffer changed after ``write`` returns still lands as it was when written (its pieces
    were copied), while ``copy=False`` sends the caller's own memory, which the file keeps until acknowledged."""
    original = random.Random(9).randbytes(3 * BS + 5)
    first = bytearray(original)
    with fs.open("/copied", "wb") as f:
        f.write(first)
        first[:] = bytes(len(first))                       # before the flush at close
    with fs.open("/copied", "rb") as f:
        assert f.read() == original
    kept = random.Random(10).randbytes(3 * BS + 5)
    with fs.open("/kept", "wb") as f:
        assert f.write(memoryview(kept)[BS:], copy=False) == 2 * BS + 5
        assert f.write(memoryview(kept)[:BS], copy=False) == BS
    with fs.open("/kept", "rb") as f:
        assert f.read() == kept[BS:] + kept[:BS]


def test_holes_read_as_zeros(fs):
    with fs.open("/holes", "wb", block_size=4096) as f:
        f.seek(3 * 4096 + 10)
        f.write(b"end")
        f.truncate(5 * 4096)
    with fs.open("/holes", "rb") as f:
        data = f.read()
    assert data == bytes(3 * 4096 + 10) + b"end" + bytes(2 * 4096 - 13)


def test_bad_modes_offsets_and_paths(fs):
    with pytest.raises(ValueError):
        fs.open("/x", "rt")  # files are binary ('w' means 'wb'); text modes are refused
    with pytest.raises(ValueError):
        fs.open("/x", "zb")
    with pytest.raises(FileNotFoundError):
        fs.open("/missing", "rb")
    with pytest.raises(FileNotFoundError):
        fs.open("/no/such/dir/f", "wb")
    fs.mkdir("/dir1", exist_ok=True)
    with pytest.raises(IsADirectoryError):
        fs.open("/dir1", "rb")
    with fs.open("/off", "w+b") as f:
        with pytest.raises(ValueError):
            f.seek(-1)
        with pytest.raises(ValueError):
            f.seek(0, 7)
        with pytest.raises(ValueError):
            f.truncate(-5)
    with fs.open("/off", "rb") as f:
        with pytest.raises(io.UnsupportedOperation):
            f.write(b"x")
    with pytest.raises(ValueError):
        f.read()
    with pytest.raises(ValueError):
        fs.stat("")


def test_namespace_operations(fs):
    fs.makedirs("/ns/a/b")
    with fs.open("/ns/a/f", "wb") as f:
        f.write(b"123")
    assert sorted(fs.listdir("/ns/a")) == ["b", "f"]
    fs.rename("/ns/a", "/ns/c")
    assert fs.listdir("/ns") == ["c"]
    with fs.open("/ns/c/f", "rb") as f:
        assert f.read() == b"123"
    assert fs.stat("/ns/c").is_dir and fs.stat("/ns/c/f").size == 3
    with pytest.raises(OSError):
        fs.remove("/ns/c")
    fs.remove("/ns/c/f")
    assert not fs.exists("/ns/c/f")
    with pytest.raises(FileNotFoundError):
        fs.remove("/ns/c/f")
    with pytest.raises(NotADirectoryError):
        with fs.open("/ns/file", "wb"):
            pass
        fs.listdir("/ns/file")
    with pytest.raises(FileExistsError):
        fs.open("/ns/file", "xb")


def test_rewrite_gives_fresh_content(fs):
    with fs.open("/rw", "wb") as f:
        f.write(b"x" * 100_000)
    with fs.open("/rw", "wb") as f:
        f.write(b"short")
    with fs.open("/rw", "rb") as f:
        assert f.read() == b"short"


WRITER = r"""
import random, sys
from malleable.adhocfs import connect
addr, idx = sys.argv[1], int(sys.argv[2])
data = random.Random(idx).randbytes(3 * 1024 * 1024 + idx)
with connect(addr) as fs, fs.open(f"/conc/w{idx}", "wb", block_size=128 * 1024) as f:
    for i in range(0, len(data), 100_000):
        f.write(data[i:i + 100_000])
"""


def test_concurrent_writers_from_processes(fs, dep2):
    fs.makedirs("/conc")
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, dep2.address, str(i)]) for i in range(4)]
    for p in procs:
        assert p.wait(60) == 0
    for i in range(4):
        with fs.open(f"/conc/w{i}", "rb") as f:
            assert f.read() == random.Random(i).randbytes(3 * 1024 * 1024 + i)


def test_h5py_datasets_and_groups(fs):
    h5py = pytest.importorskip("h5py")
    import numpy as np

    rng = np.random.default_rng(3)
    a = rng.random((300, 200))
    b = rng.integers(0, 1000, size=50_000, dtype=np.int64)
    with fs.open("/data.h5", "w+b") as f, h5py.File(f, "w") as h:
        h.create_dataset("a", data=a)
        g = h.create_group("grp/sub")
        g.create_dataset("b", data=b, chunks=(4096,), compression="gzip")
        g.attrs["note"] = "adhocfs"
    with fs.open("/data.h5", "rb") as f, h5py.File(f, "r") as h:
        assert np.array_equal(h["a"][...], a)
        assert np.array_equal(h["grp/sub/b"][...], b)
        assert h["grp/sub"].attrs["note"] == "adhocfs"
    with fs.open("/data.h5", "r+b") as f, h5py.File(f, "r+") as h:
        h["a"][0, :] = 0
    with fs.open("/data.h5", "rb") as f, h5py.File(f, "r") as h:
        assert not h["a"][0, :].any() and np.array_equal(h["a"][1:], a[1:])


def test_wrong_secret_is_refused(dep2):
    from malleable.adhocfs import connect
    from malleable.errors import AuthError

    bad = connect(dep2.address, token=b"not-the-secret", timeout=3.0)
    try:
        with pytest.raises(AuthError, match="shared secret"):
            bad.listdir("/")
    finally:
        close_checked(bad)


def test_unauthenticated_and_malformed_messages_change_nothing(fs, dep2, shared_secret):
    import zmq

    from malleable.adhocfs import _protocol as P
    from malleable.adhocfs._rpc import Peer
    from malleable.errors import AuthError

    with fs.open("/guarded", "wb") as f:
        f.write(b"A" * 1000)
    fid = fs.stat("/guarded").fid
    ctx = zmq.Context()
    try:
        for sid, (_, addr) in dep2.data.items():
            evil = Peer(ctx, addr, b"wrong", f"data server {sid}", 3.0)
            sock = evil.sock
            sock.send_multipart([b"", *P.encode(P.Put(fid, 0, 0, 1, b"B" * 1000), b"wrong", 1)])
            sock.send_multipart([b"", *P.encode(P.DropFile(fid), b"wrong", 2)])
            sock.send_multipart([b"", b"garbage"])
            honest = P.encode(P.Put(fid, 0, 0, 1, b"C"), shared_secret, 3)
            honest[1] = honest[1].replace(b'"offset":0', b'"offset":9')
            sock.send_multipart([b"", *honest])  # a tampered header: the MAC no longer matches
            for _ in range(4):
                assert sock.poll(3000)
                frames = sock.recv_multipart()
                with pytest.raises(AuthError):
                    P.decode(frames[1:], b"wrong")  # replies are MACed with the real secret
            evil.close()
        meta = Peer(ctx, dep2.address, b"wrong", "meta", 3.0)
        meta.sock.send_multipart([b"", *P.encode(P.Remove("/guarded"), b"wrong", 1)])
        assert meta.sock.poll(3000)
        meta.sock.recv_multipart()
        valid = Peer(ctx, dep2.address, shared_secret, "meta", 3.0)
        with pytest.raises(ValueError):
            valid.call(P.Open("/guarded", "bogus"))
        valid.close()
        meta.close()
    finally:
        ctx.term()
    with fs.open("/guarded", "rb") as f:
        assert f.read() == b"A" * 1000
