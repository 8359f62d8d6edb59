"""Write-behind of an open adhocfs file: block writes batched per set of servers (the copies of their blocks; one
request encoded once for all of them), pipelined, and kept until every copy has acknowledged them, so that none is
lost when the file's layout changes under it.

A write is sent under the layout version the file holds. When that layout changes (a server answers
``stale``, a server left the layout and stays silent, or a metadata call returns a new version), the file
*settles* before it sends anything newer: it collects the answers of the servers still in the layout, sets
aside every write refused or aimed at a departed server, waits until the file is ready (no redistribution
running), and sends those writes again, in the order it first sent them, to the blocks' owners under the new
layout. Acknowledged writes are not sent again: a data server applies a file's writes in order and refuses
old versions once fenced, so what it acknowledged before the fence is in the blocks the redistribution
moved. A server still in the layout that stays silent for the client's timeout is dead, not leaving: the
write fails with ``ServerUnavailable``.

Mixed into :class:`~._client.AdhocFile` (which owns the layout, the connections and the state used here).
"""

from __future__ import annotations

import errno
from collections.abc import Iterable
from typing import Any

from malleable.adhocfs._protocol import Error, Message, PutBlocks
from malleable.adhocfs._reader import Moved, _Pending
from malleable.adhocfs._rpc import Peer, raise_remote, send_to
from malleable.errors import FsError, ServerUnavailable

__all__ = ["PUT_BATCH", "PUT_BYTES", "BlockWriter"]

PUT_BYTES = 4 << 20  # bytes written behind per request to one server (a batch is sent once it holds this much)
PUT_BATCH = 64  # most blocks per request
STUCK = 5  # resend rounds in a row under one layout version before a write is reported as refused for good


class _Batch:
    """Pieces queued for one set of servers (the copies of their blocks), sent together as one request encoded once."""

    __slots__ = ("nbytes", "parts", "peers", "version")

    def __init__(self, peers: tuple[Peer, ...], version: int) -> None:
        self.peers, self.version = peers, version
        self.parts: list[tuple[int, int, Any]] = []  # (block, offset in the block, data)
        self.nbytes = 0


class BlockWriter:
    """Writing blocks for :class:`~._client.AdhocFile` (see the module docstring)."""

    fs: Any
    fid: int
    name: str
    version: int
    _addrs: dict[int, str]
    _pending: dict[tuple[int, int], _Pending]
    _batch: dict[tuple[int, ...], _Batch]  # per set of servers (sorted ids): the pieces not sent yet
    _sent: int  # puts sent so far (their order)

    def _replicas(self, block: int) -> tuple[int, ...]:  # AdhocFile
        raise NotImplementedError

    def _refresh(self, wait_ready: bool) -> None:  # AdhocFile
        raise NotImplementedError

    def _collect(self, pending: dict[tuple[int, int], _Pending], what: str) -> Iterable[tuple[_Pending, Message]]:
        raise NotImplementedError  # BlockReader

    def _queue_put(self, block: int, off: int, data: bytes | memoryview) -> None:
        """Write behind: queue a piece for the servers keeping the copies of its block, sending their batch once it
        holds ``PUT_BYTES`` (a write is acknowledged when every copy is). Blocks with the same copies share a
        batch: its request is encoded and MACed once and sent to each of them."""
        reps = self._replicas(block)
        key = reps if len(reps) == 1 else tuple(sorted(reps))
        peers = tuple(self.fs.peer(sid, self._addrs.get(sid, "")) for sid in key)
        batch = self._batch.get(key)
        if batch is None or batch.peers != peers or batch.version != self.version:
            if batch is not None:
                self._send_batch(key)
            batch = self._batch[key] = _Batch(peers, self.version)
        batch.parts.append((block, off, data))
        batch.nbytes += len(data)
        if batch.nbytes >= PUT_BYTES or len(batch.parts) >= PUT_BATCH:
            self._send_batch(key)

    def _send_batch(self, key: tuple[int, ...]) -> None:
        batch = self._batch.pop(key)
        parts = batch.parts
        blocks, offsets, datas = [b for b, _, _ in parts], [o for _, o, _ in parts], [d for _, _, d in parts]
        rid = send_to(batch.peers, PutBlocks(self.fid, blocks, offsets, batch.version, datas), self.fs.token)
        self._sent += 1
        for sid, p in zip(key, batch.peers, strict=True):
            self._pending[(sid, rid)] = _Pending(
                (sid, rid), blocks[0], offsets[0], batch.nbytes, None, 0, p, (), tuple(parts),
                seq=self._sent, version=batch.version,
            )

    def _drain(self, keep: int) -> None:
        """Send the queued writes, then collect acknowledgements until ``keep`` requests remain; after a layout
        change, settle every write in flight first and send the unacknowledged ones again (module docstring).

        Raises:
            ServerUnavailable: a server of the file's layout did not answer within the timeout (it is dead, not
                leaving); the writes of its blocks are dropped, the others are sent again first.
        """
        failure: ServerUnavailable | None = None
        stuck, last = 0, -1
        while True:
            for key in list(self._batch):
                self._send_batch(key)
            redo, silent, error = self._settle(0 if failure else keep)
            if redo is None:
                if failure is not None:
                    raise failure
                return
            self._refresh(True)  # the new layout, once the file's redistribution (if any) is over
            if error is not None:  # a silent server still in the layout, at the same address, is dead
                dead = {s for s, addr in silent.items() if self._addrs.get(s) == addr}
                kept = [(rec, [pt for pt in rec.parts if dead.isdisjoint(self._replicas(pt[0]))]) for rec in redo]
                if any(len(parts) < len(rec.parts) for rec, parts in kept):
                    failure = failure or error
            else:
                kept = [(rec, list(rec.parts)) for rec in redo]
            stuck, last = (stuck + 1 if self.version == last else 0), self.version
            if stuck >= STUCK:
                raise FsError(errno.EIO, f"{self.name}: writes refused as stale {STUCK} times under layout "
                                         f"version {self.version}")
            for _, parts in sorted(kept, key=lambda k: k[0].seq):  # the order they were first sent in
                for block, off, data in parts:
                    self._queue_put(block, off, data)

    def _settle(
        self, keep: int
    ) -> tuple[list[_Pending] | None, dict[int, str], ServerUnavailable | None]:
        """Collect acknowledgements until ``keep`` requests remain, or all of them once the layout changed.

        Returns:
            ``(redo, silent, error)``: ``redo`` is None when nothing needs sending again, else the writes to send
            again (refused, aimed at a server that left the layout, or never answered); ``error`` is the timeout
            that ended the wait, if any, and ``silent`` the servers (id: address) that did not answer it.
        """
        what = f"writing {self.name}"
        pending = self._pending
        redo: list[_Pending] = []
        changed = any(rec.version != self.version for rec in pending.values())  # a metadata call saw a new one
        fresh = False
        while pending and (changed or len(pending) > keep):
            if changed and not fresh:  # servers that left the layout will not answer: stop waiting for them
                self._refresh(False)
                fresh = True
                departed = {k: rec for k, rec in pending.items() if rec.peer is None
                            or self._addrs.get(k[0]) != rec.peer.addr}
                for k, rec in departed.items():
                    del pending[k]
                    redo.append(rec)
                for p in {id(rec.peer): rec.peer for rec in departed.values() if rec.peer is not None}.values():
                    p.reset()  # drop what is still queued for it
                continue
            try:
                got = self._collect(pending, what)
            except Moved:
                changed, fresh = True, False
                continue
            except ServerUnavailable as e:  # the connections were reset: no entry can be answered any more
                silent = {k[0]: rec.peer.addr for k, rec in pending.items() if rec.peer is not None}
                redo.extend(pending.values())
                pending.clear()
                return redo, silent, e
            for rec, reply in got:
                if isinstance(reply, Error):
                    if reply.kind == "stale":  # fenced by a redistribution: send again under the new layout
                        redo.append(rec)
                        changed = True
                        fresh = fresh and rec.version != self.version  # a layout newer than its was fetched
                        continue
                    raise_remote(reply, f"data server {rec.key[0]}, {what}")
        return (redo if changed else None), {}, None
