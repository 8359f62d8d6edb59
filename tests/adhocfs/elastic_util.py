"""Helpers of the elasticity tests: where blocks really are, and a writer process mirrored to a local file."""

from __future__ import annotations

import zmq

from malleable.adhocfs import _protocol as P
from malleable.adhocfs._placement import FileLayout
from malleable.adhocfs._rpc import Peer


def blocks_on_servers(fs, path) -> dict[int, list[int]]:
    """``{sid: blocks of path held}`` asked from every live data server."""
    fid = fs.stat(path).fid
    out = {}
    ctx = zmq.Context()
    try:
        for s in fs.status().servers:
            if s["state"] in ("active", "leaving") and s.get("reachable"):
                p = Peer(ctx, s["addr"], fs.token, f"ds{s['sid']}", 3.0)
                out[s["sid"]] = p.call(P.ListBlocks(fid)).blocks
                p.close()
    finally:
        ctx.term()
    return out


def expected_owners(fs, path) -> dict[int, int]:
    """``{block: sid}`` by the file's current layout, for its existing blocks."""
    st = fs.stat(path)
    info = fs.call(P.GetLayout(st.fid))
    lay = FileLayout.from_pairs(info.layout)
    epochs = {int(k): tuple(v) for k, v in info.epochs.items()}
    return {b: lay.server(epochs, st.fid, b) for b in range(st.nblocks) if lay.allocated(b)}


def layout_of(fs, path):
    return fs.call(P.GetLayout(fs.stat(path).fid))


MIRROR_WRITER = r"""
import os, random, sys, time
from malleable.adhocfs import connect
addr, idx, seconds, local = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
rng = random.Random(idx)
size = 2 << 20
with connect(addr, timeout=5.0) as fs, open(local, "w+b") as mirror:
    f = fs.open(f"/live/w{idx}", "w+b", block_size=64 * 1024)
    data = rng.randbytes(size)
    f.write(data); mirror.write(data); f.flush()
    end = time.monotonic() + seconds
    ops = 0
    while time.monotonic() < end:
        pos = rng.randrange(0, size + (1 << 20))
        if rng.random() < 0.6:
            chunk = rng.randbytes(rng.randrange(1, 200_000))
            f.seek(pos); f.write(chunk); mirror.seek(pos); mirror.write(chunk)
        else:
            n = rng.randrange(1, 300_000)
            f.seek(pos); mirror.seek(pos)
            assert f.read(n) == mirror.read(n), f"mismatch at {pos}"
        ops += 1
        if ops % 20 == 0:
            f.flush()
    f.close()
    mirror.flush()
print(ops)
"""
