"""Writing and reading many small files at once. A write: one metadata request creates them all, every block request
is in flight at the same time, and one more metadata request publishes their sizes. A read: one metadata request
opens them all and one request per data server (per 1024 blocks) asks for every block of them.

A file written through :meth:`~._client.FileSystem.open` costs three metadata round trips (open, allocate,
publish on close) and one block acknowledgement, one after the other; for a tree of small files (a stage-in)
those waits are most of the time. :func:`write_files` keeps the same order of effects: a file exists empty
(:class:`~._protocol.CreateFiles`) until all its blocks are acknowledged, and only then gets its size and its
blocks marked written (:class:`~._protocol.Publish`). A file whose blocks a data server refuses under an old
layout (a redistribution started meanwhile) is written again the ordinary way, through ``open``.

:func:`read_files` is the stage-out's counterpart: :class:`~._protocol.OpenFiles` gives every file's size and
layout, :class:`~._protocol.GetFiles` asks each data server for all the blocks it holds of them at once. What the
bulk path cannot tell apart is read again the ordinary way (which asks the other copies, reads holes as zeros and
reports lost blocks): a file with a block absent from the server asked (a hole, or a copy lost), with blocks not
allocated or damaged, or refused under an old layout.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from malleable.adhocfs._bulk_messages import MAX_FILES
from malleable.adhocfs._placement import FileLayout
from malleable.adhocfs._protocol import (
    BlockData,
    Created,
    CreateFiles,
    Error,
    GetFiles,
    Opened,
    OpenFiles,
    Publish,
    PutBlocks,
)
from malleable.adhocfs._rpc import Peer, raise_remote, send_to
from malleable.adhocfs._writer import PUT_BATCH, PUT_BYTES
from malleable.errors import ProtocolError, ServerUnavailable

if TYPE_CHECKING:
    from malleable.adhocfs._client import FileSystem

__all__ = ["read_files", "write_files"]

AGAIN = frozenset({"stale", "busy"})
"""Refusals after which a file is written again through ``open`` (its layout changed under it)."""
GET_BYTES = 8 << 20
"""Most bytes asked of one data server by one :class:`~._protocol.GetFiles` (its reply is one message)."""


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


def read_files(fs: FileSystem, paths: Sequence[str]) -> list[Any]:
    """The bytes of each file of ``paths`` (at most ``MAX_FILES``), in order, as bytes-like objects (a file of one
    block is the received frame itself, not copied). Errors are raised as by ``open`` and ``read``."""
    if not paths:
        return []
    opened = fs.call(OpenFiles(list(paths)), what=f"opening {len(paths)} files")
    assert isinstance(opened, Opened)
    pairs: dict[int, list[list[int]]] = {}
    for row in opened.layout:
        if len(row) != 3 or row[0] >= len(paths):
            raise ProtocolError("opened: a layout row is not [file, start, epoch]")
        pairs.setdefault(row[0], []).append(row[1:])
    epochs = {int(k): tuple(v) for k, v in opened.epochs.items()}
    r, now = max(1, opened.replicas), time.monotonic()
    out: list[Any] = [b""] * len(paths)
    again: set[int] = set()
    asks: dict[int, list[tuple[int, int, int]]] = {}    # sid -> (file, block, bytes) to ask it for
    for i, (fid, size, bs) in enumerate(zip(opened.fids, opened.lengths, opened.block_sizes, strict=True)):
        layout, blocks = FileLayout.from_pairs(pairs.get(i, [])), -(-size // max(1, bs))
        if opened.broken[i] or layout.any_unallocated(0, blocks):
            again.add(i)
            continue
        for b in range(blocks):
            reps = layout.replicas(epochs, fid, b, r)
            sid = next((s for s in reps if fs.down.get(s, 0) <= now), reps[0])
            asks.setdefault(sid, []).append((i, b, min(bs, size - b * bs)))
    waiting: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    peers = {sid: fs.peer(sid, opened.servers.get(str(sid), "")) for sid in asks}
    for sid, todo in asks.items():
        k = 0
        while k < len(todo):
            part, nbytes = [], 0
            while k < len(todo) and len(part) < MAX_FILES and (not part or nbytes + todo[k][2] <= GET_BYTES):
                part.append(todo[k])
                nbytes += todo[k][2]
                k += 1
            msg = GetFiles([opened.fids[i] for i, _, _ in part], [b for _, b, _ in part],
                           [opened.versions[i] for i, _, _ in part], [n for _, _, n in part])
            waiting[(sid, peers[sid].send(msg))] = part
    got: dict[int, dict[int, Any]] = {}
    again |= _gather(peers, waiting, got)
    for i, blocks in got.items():
        if i in again:
            continue
        size, bs = opened.lengths[i], opened.block_sizes[i]
        if len(blocks) == 1 and len(blocks[0]) == size:
            out[i] = blocks[0]
            continue
        buf = bytearray(size)                          # bytes a block holds short of its length: a hole (zeros)
        for b, data in blocks.items():
            buf[b * bs:b * bs + len(data)] = data
        out[i] = buf
    for i in sorted(again):                          # the ordinary way
        with fs.open(paths[i], "rb") as f:
            out[i] = f.read()
    return out


def _gather(peers: dict[int, Peer], waiting: dict[tuple[int, int], list[tuple[int, int, int]]],
            got: dict[int, dict[int, Any]]) -> set[int]:
    """Wait for the answer to every request of ``waiting``, putting each block received in ``got[file][block]``;
    returns the files to read the ordinary way."""
    again: set[int] = set()
    try:
        for sid, p in peers.items():
            while any(k[0] == sid for k in waiting):
                try:
                    reply, rid = p.recv(what="reading files")
                except ServerUnavailable:            # the ordinary way asks the other copies, or reports
                    for key in [k for k in waiting if k[0] == sid]:
                        again.update(i for i, _, _ in waiting.pop(key))
                    break
                part = waiting.pop((sid, rid), None)
                if part is None:
                    continue
                if isinstance(reply, BlockData) and len(reply.parts) == len(part):
                    for (i, b, _), found, data in zip(part, reply.found, reply.parts, strict=True):
                        if found:
                            got.setdefault(i, {})[b] = data
                        else:
                            again.add(i)
                elif isinstance(reply, Error) and reply.kind in AGAIN:
                    again.update(i for i, _, _ in part)
                elif isinstance(reply, Error):
                    raise_remote(reply, f"data server {sid}, reading files")
                else:
                    raise ProtocolError(f"data server {sid} answered {reply.TYPE!r} to a bulk read")
    finally:
        for sid, rid in waiting:                     # after a failure: their answers, when they come, are skipped
            peers[sid].forget(rid)
    return again
