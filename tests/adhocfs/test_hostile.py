"""Hostile messages against live adhocfs servers: an altered payload, a replayed write, a nested-bracket header,
a fuzzer mutating headers and payloads, oversized unauthenticated frames, and bad bulk requests (``create_files``,
``publish``, ``open_files``, ``get_files``). Each is refused with an error reply (or the sender dropped), the servers
keep serving, and no stored byte changes."""

from __future__ import annotations

import json
import random
import time

import psutil
import pytest
import zmq
from conftest import close_checked

from malleable import _wire as W
from malleable.adhocfs import _protocol as P

BS = 64 * 1024
NESTED = b'{"v":1,"type":"stats","x":' + b"[" * 100_000 + b"}"


@pytest.fixture(scope="module")
def dep(tmp_path_factory):
    from malleable.adhocfs import start_fs

    root = tmp_path_factory.mktemp("hostile")
    d = start_fs("127.0.0.1", ["127.0.0.1"], state=str(root / "st"))
    yield d
    d.stop()


@pytest.fixture
def fs(dep):
    from malleable.adhocfs import connect

    c = connect(dep.address, timeout=3.0)
    yield c
    close_checked(c)


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
        msg, self.rid = P.decode(self.s.recv_multipart()[1:], token)
        return msg

    def close(self):
        self.s.close(0)
        self.ctx.term()


def _target(fs, path):
    """(data server address, fid, version) of block 0 of ``path``."""
    info = fs.call(P.GetLayout(fs.stat(path).fid))
    from malleable.adhocfs._placement import FileLayout

    lay = FileLayout.from_pairs(info.layout)
    sid = lay.server({int(k): tuple(v) for k, v in info.epochs.items()}, info.fid, 0)
    return info.servers[str(sid)], info.fid, info.version


def _read(fs, path):
    with fs.open(path, "rb") as f:
        return f.read()


def test_altered_payload_and_replayed_write_are_refused(fs, shared_secret):
    original = random.Random(1).randbytes(BS)
    with fs.open("/victim", "wb", block_size=BS) as f:
        f.write(original)
    addr, fid, version = _target(fs, "/victim")
    raw = Raw(addr)
    try:
        old = b"A" * BS
        captured = P.encode(P.PutBlocks(fid, [0], [0], version, [old]), shared_secret, 1)
        assert isinstance(raw.ask(captured, shared_secret), P.Ok)  # an authorised write (captured on the wire)
        assert _read(fs, "/victim") == old
        with fs.open("/victim", "r+b") as f:  # the owner writes newer data
            f.write(original)
        altered = list(captured)
        altered[-1] = b"B" * BS  # the attacker's bytes, same size
        reply = raw.ask(altered, shared_secret)
        assert isinstance(reply, P.Error) and reply.kind == "AuthError" and "altered" in reply.msg
        reply = raw.ask(captured, shared_secret)  # rolling the block back by replaying
        assert isinstance(reply, P.Error) and reply.kind == "AuthError" and "replayed" in reply.msg
        assert _read(fs, "/victim") == original
    finally:
        raw.close()


def test_nested_brackets_and_fuzzed_messages_keep_servers_serving(dep, fs, shared_secret):
    original = random.Random(2).randbytes(3 * BS)
    with fs.open("/fuzzed", "wb", block_size=BS) as f:
        f.write(original)
    addr, fid, version = _target(fs, "/fuzzed")
    rng = random.Random(20261123)
    for server in (dep.address, addr):
        raw = Raw(server)
        try:
            reply = raw.ask(W.pack_raw(NESTED, shared_secret), shared_secret)
            assert isinstance(reply, P.Error) and "nested" in reply.msg
            kinds: dict[str, int] = {}
            for i in range(600):
                frames = [bytes(x) for x in P.encode(
                    P.PutBlocks(fid, [0], [rng.randrange(BS)], version, [rng.randbytes(rng.randrange(1, 2000))]),
                    shared_secret, i)]
                k = rng.randrange(len(frames))
                if rng.random() < 0.5:
                    k = len(frames) - 1  # the payload more often than not
                buf = bytearray(frames[k] or b"\0")
                for pos, bit in {(rng.randrange(len(buf)), rng.randrange(8)) for _ in range(rng.randrange(1, 4))}:
                    buf[pos] ^= 1 << bit  # distinct flips: the frame really changes
                frames[k] = bytes(buf)
                reply = raw.ask(frames, shared_secret)
                assert isinstance(reply, P.Error), (i, k, reply)
                kinds[reply.kind] = kinds.get(reply.kind, 0) + 1
            assert set(kinds) <= {"AuthError", "ProtocolError"} and kinds.get("AuthError", 0) > 300, kinds
            assert isinstance(raw.ask(P.encode(P.Stats(), shared_secret), shared_secret), (P.StatsReply, P.FsStatus,
                                                                                           P.Error))
        finally:
            raw.close()
    assert _read(fs, "/fuzzed") == original
    assert len(fs.status().servers) == 1  # the metadata server answers, the data server too (reachable)
    assert fs.status().servers[0]["reachable"]


def test_oversized_unauthenticated_frames_are_not_buffered(dep, fs):
    """A 200 MiB frame used to be buffered whole before the MAC check (+500 MB); now zmq drops the sender."""
    pids = {"meta": dep.procs["metadata server"].pid,
            "data": next(s["pid"] for s in fs.status().servers)}
    big = b"\0" * (200 << 20)
    addrs = {"meta": dep.address, "data": fs.status().servers[0]["addr"]}
    for name, addr in addrs.items():
        proc = psutil.Process(pids[name])
        before = proc.memory_info().rss
        raw = Raw(addr)
        try:
            raw.s.send_multipart([b"", W.MAGIC, big, b"x" * W.SEAL_SIZE])
            time.sleep(1.5)
            grown = proc.memory_info().rss - before
        finally:
            raw.close()
        assert grown < 50 << 20, f"{name} server grew by {grown >> 20} MiB"
    with fs.open("/still", "wb") as f:
        f.write(b"serving")
    assert _read(fs, "/still") == b"serving"


@pytest.mark.timeout(60)
def test_bad_bulk_requests_get_one_clear_error_each_and_change_nothing(dep, fs, shared_secret):
    fs.makedirs("/bad")
    fs.write_files([("/bad/kept", b"kept")])
    fs.mkdir("/bad/folder")
    kept = fs.stat("/bad/kept").fid
    before = sorted(fs.scandir("/bad"))
    raw = Raw(dep.address)
    bs = fs.stat("/bad/kept").block_size

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
        (P.encode(P.Publish([kept], [bs * 3]), shared_secret, 8), "ValueError",
         f"/bad/kept has no blocks allocated for {bs * 3} bytes"),
    ]
    try:
        for frames, kind, words in cases:
            reply = raw.ask(frames, shared_secret)
            assert isinstance(reply, P.Error) and reply.kind == kind and words in reply.msg, (kind, reply)
            assert raw.rid == json.loads(bytes(frames[1]))["id"]     # answers that request: no client waits it out
    finally:
        raw.close()
    assert sorted(fs.scandir("/bad")) == before                      # no file made by a refused request
    assert fs.stat("/bad/kept").fid == kept and _read(fs, "/bad/kept") == b"kept"


@pytest.mark.timeout(60)
def test_bad_bulk_reads_get_one_clear_error_each_and_change_nothing(dep, fs, shared_secret):
    fs.makedirs("/badread")
    fs.write_files([("/badread/kept", b"kept")])
    addr, fid, version = _target(fs, "/badread/kept")
    meta, data = Raw(dep.address), Raw(addr)

    def raw_header(header):
        return W.pack_raw(json.dumps(dict(header, v=1, id=9, sizes=[])).encode(), shared_secret, [])

    n = 1025
    cases = [
        (meta, raw_header({"type": "open_files", "paths": "/badread/kept"}), "ProtocolError", "'paths'"),
        (meta, raw_header({"type": "open_files", "paths": ["/badread/kept"] * n}), "ProtocolError",
         "more than 1024 files"),
        (meta, raw_header({"type": "open_files", "paths": ["/badread/kept", 7]}), "ProtocolError",
         "must be list[str]"),
        (meta, P.encode(P.OpenFiles(["/badread/kept", "/badread"]), shared_secret, 3), "IsADirectoryError",
         "is a directory: /badread"),
        (meta, P.encode(P.OpenFiles(["/badread/kept", "/badread/none"]), shared_secret, 4), "FileNotFoundError",
         "no such file: /badread/none"),
        (data, raw_header({"type": "get_files", "fids": [fid, fid], "blocks": [0], "versions": [version] * 2,
                           "lengths": [4, 4]}), "ProtocolError",
         "fields fids and blocks and versions and lengths must have one entry per file each"),
        (data, raw_header({"type": "get_files", "fids": [fid] * n, "blocks": [0] * n, "versions": [version] * n,
                           "lengths": [4] * n}), "ProtocolError", "more than 1024 files"),
        (data, raw_header({"type": "get_files", "fids": [fid], "blocks": [-1], "versions": [version],
                           "lengths": [4]}), "ProtocolError", "must be list[int] of non-negative values"),
        (data, W.pack_raw(json.dumps({"v": 1, "id": 9, "sizes": [1], "type": "get_files", "fids": [fid],
                                      "blocks": [0], "versions": [version], "lengths": [4]}).encode(),
                          shared_secret, [b"x"]), "ProtocolError", "get_files: unexpected data frames"),
        (data, raw_header({"type": "opened", "fids": [fid], "versions": [version], "lengths": [4],
                           "block_sizes": [BS], "broken": [0], "layout": [], "epochs": {}, "servers": {}}),
         "ProtocolError", "data server does not handle 'opened'"),
    ]
    try:
        for raw, frames, kind, words in cases:
            reply = raw.ask(frames, shared_secret)
            assert isinstance(reply, P.Error) and reply.kind == kind and words in reply.msg, (kind, words, reply)
        # one file of the request read under an old layout version: the whole request is refused as stale
        assert isinstance(data.ask(P.encode(P.Fence(fid, 0, version + 1), shared_secret, 10), shared_secret), P.Ok)
        reply = data.ask(P.encode(P.GetFiles([10**9, fid], [0, 0], [0, version], [4, 4]), shared_secret, 11),
                         shared_secret)
        assert isinstance(reply, P.Error) and reply.kind == "stale", reply
        assert isinstance(data.ask(P.encode(P.Fence(fid, 0, 0), shared_secret, 12), shared_secret), P.Ok)
        reply = data.ask(P.encode(P.GetFiles([10**9, fid], [0, 0], [0, version], [4, 2]), shared_secret, 13),
                         shared_secret)
        assert isinstance(reply, P.BlockData) and reply.found == [0, 1] and [bytes(p) for p in reply.parts] == \
            [b"", b"ke"]
    finally:
        meta.close()
        data.close()
    assert sorted(fs.scandir("/badread")) == [("kept", False, 4)]
    assert fs.read_files(["/badread/kept"]) == [b"kept"] and _read(fs, "/badread/kept") == b"kept"
