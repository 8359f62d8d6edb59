"""Writing many small files at once: one metadata request creates them all, every block request is in flight at
the same time, and one more metadata request publishes their sizes.

A file written through :meth:`~._client.FileSystem.open` costs three metadata round trips (open, allocate,
publish on close) and one block acknowledgement, one after the other; for a tree of small files (a stage-in)
those waits are most of the time. :func:`write_files` keeps the same order of effects: a file exists empty
(:class:`~._protocol.CreateFiles`) until all its blocks are acknowledged, and only then gets its size and its
blocks marked written (:class:`~._protocol.Publish`). A file whose blocks a data server refuses under an old
layout (a redistribution started meanwhile) is written again the ordinary way, through ``open``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from malleable.adhocfs._placement import FileLayout
from malleable.adhocfs._protocol import Created, CreateFiles, Error, Publish, PutBlocks
from malleable.adhocfs._rpc import Peer, raise_remote, send_to
from malleable.adhocfs._writer import PUT_BATCH, PUT_BYTES

if TYPE_CHECKING:
    from malleable.adhocfs._client import FileSystem

__all__ = ["write_files"]

AGAIN = frozenset({"stale", "busy"})
"""Refusals after which a file is written again through ``open`` (its layout changed under it)."""


def write_files(fs: FileSystem, files: Sequence[tuple[str, Any]]) -> int:
    """Create or replace each ``(path, bytes)`` of ``files`` (at most ``MAX_FILES``; their folders exist) with
    those bytes; returns the bytes written. Errors are raised as by ``open`` and ``write``; a file whose copy
    failed is left empty or as it was published."""
    if not files:
        return 0
    created = fs.call(CreateFiles([p for p, _ in files], [len(d) for _, d in files]),
                      what=f"creating {len(files)} files")
    assert isinstance(created, Created)
    bs, r = created.block_size, max(1, created.replicas)
    epochs = {created.epoch: tuple(created.sids)}
    peers = {sid: fs.peer(sid, created.servers.get(str(sid), "")) for sid in created.sids}
    waiting: dict[tuple[int, int], int] = {}         # (sid, request id) -> index of the file
    for i, ((_, data), fid, version) in enumerate(zip(files, created.fids, created.versions, strict=True)):
        view = memoryview(data).cast("B")
        blocks = -(-len(view) // bs)
        layout = FileLayout.empty().allocate(0, blocks, created.epoch)
        groups: dict[tuple[int, ...], list[int]] = {}
        for b in range(blocks):
            groups.setdefault(tuple(sorted(layout.replicas(epochs, fid, b, r))), []).append(b)
        for key, bl in groups.items():
            step = max(1, min(PUT_BATCH, PUT_BYTES // bs))
            for k in range(0, len(bl), step):
                part = bl[k:k + step]
                msg = PutBlocks(fid, part, [0] * len(part), version, [view[b * bs:(b + 1) * bs] for b in part])
                rid = send_to([peers[s] for s in key], msg, fs.token)
                waiting.update(((s, rid), i) for s in key)
    again = _collect(fs, peers, waiting)
    done = [i for i in range(len(files)) if i not in again]
    if done:
        fs.call(Publish([created.fids[i] for i in done], [len(files[i][1]) for i in done]),
                what=f"publishing {len(done)} files")
    for i in sorted(again):                          # refused under an old layout: the ordinary way
        path, data = files[i]
        with fs.open(path, "wb") as f:
            f.write(data)
    return sum(len(d) for _, d in files)


def _collect(fs: FileSystem, peers: dict[int, Peer], waiting: dict[tuple[int, int], int]) -> set[int]:
    """Wait for every acknowledgement of ``waiting``; returns the files refused as stale or busy."""
    again: set[int] = set()
    try:
        for sid, p in peers.items():
            while any(k[0] == sid for k in waiting):
                reply, rid = p.recv(what="writing files")
                i = waiting.pop((sid, rid), None)
                if i is not None and isinstance(reply, Error):
                    if reply.kind not in AGAIN:
                        raise_remote(reply, f"data server {sid}, writing files")
                    again.add(i)
    finally:
        for sid, rid in waiting:                     # after a failure: their answers, when they come, are skipped
            peers[sid].forget(rid)
    return again
