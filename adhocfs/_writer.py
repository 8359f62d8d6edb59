"""Write-behind of an open adhocfs file: block writes batched per server, pipelined, and kept until every copy
has acknowledged them, so that none is lost when the file's layout changes under it.

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
from malleable.adhocfs._rpc import Peer, raise_remote
from malleable.errors import FsError, ServerUnavailable

__all__ = ["PUT_BATCH", "BlockWriter"]

PUT_BATCH = 4  # blocks written behind per request to one server
STUCK = 5  # resend rounds in a row under one layout version before a write is reported as refused for good


class BlockWriter:
    """Writing blocks for :class:`~._client.AdhocFile` (see the module docstring)."""

    fs: Any
    fid: int
    name: str
    version: int
    _addrs: dict[int, str]
    _pending: dict[tuple[int, int], _Pending]
    _batch: dict[int, tuple[Peer, int, list[tuple[int, int, Any]]]]  # per server: connection, version, parts
    _sent: int  # puts sent so far (their order)

    def _replicas(self, block: int) -> tuple[int, ...]:  # AdhocFile
        raise NotImplementedError

    def _refresh(self, wait_ready: bool) -> None:  # AdhocFile
        raise NotImplementedError

    def _collect(self, pending: dict[tuple[int, int], _Pending], what: str) -> Iterable[tuple[_Pending, Message]]:
        raise NotImplementedError  # BlockReader

    def _queue_put(self, block: int, off: int, data: bytes | memoryview) -> None:
        """Write behind: queue a piece for every server keeping a copy of its block, sending a server's batch
        once it is full (a write is acknowledged when every copy is)."""
        for sid in self._replicas(block):
            p = self.fs.peer(sid, self._addrs.get(sid, ""))
            batch = self._batch.get(sid)
            if batch is None or batch[0] is not p or batch[1] != self.version:
                if batch is not None:
                    self._send_batch(sid)
                batch = self._batch[sid] = (p, self.version, [])
            batch[2].append((block, off, data))
            if len(batch[2]) >= PUT_BATCH:
                self._send_batch(sid)

    def _send_batch(self, sid: int) -> None:
        p, version, parts = self._batch.pop(sid)
        blocks, offsets, datas = [b for b, _, _ in parts], [o for _, o, _ in parts], [d for _, _, d in parts]
        rid = p.send(PutBlocks(self.fid, blocks, offsets, version, datas))
        self._sent += 1
        self._pending[(sid, rid)] = _Pending(
            (sid, rid), blocks[0], offsets[0], sum(len(d) for d in datas), None, 0, p, (), tuple(parts),
            seq=self._sent, version=version,
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
            for sid in list(self._batch):
                self._send_batch(sid)
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
