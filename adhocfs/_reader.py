"""Block requests of an open adhocfs file: collecting pipelined replies, sequential read-ahead, and careful reads
that ask each copy of a block in turn and report a block no live server holds as EIO (never zeros).

While it waits for replies, a file asks the metadata server for its layout every ``PROBE`` seconds of silence:
a new layout version, or a server gone from the layout or at a new address, means a redistribution happened
(a departed server never answers), and the requests are re-sent under the new layout at once instead of
after the client's timeout. A server that stays silent while the layout is unchanged is reported after the
timeout, as before.

Mixed into :class:`~._client.AdhocFile` (which owns the layout, the connections and the state used here).
"""

from __future__ import annotations

import errno
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import zmq

from malleable.adhocfs._placement import block_range, in_ranges
from malleable.adhocfs._protocol import BlockData, Data, Error, FileInfo, Get, GetBlocks, GetLayout, Message
from malleable.adhocfs._rpc import Peer, raise_remote
from malleable.errors import FsError, ServerUnavailable

__all__ = ["DOWN_FOR", "GET_BYTES", "PROBE", "BlockReader", "Moved"]

GET_BYTES = 4 << 20  # bytes asked per read-ahead request (smaller replies arrive and are checked sooner)
# A stream's first request asks one block, each further one twice as many, up to GET_BYTES: the reader starts on
# the first block while the larger replies are still on their way, instead of waiting for the first GET_BYTES to
# arrive and be checked.
DOWN_FOR = 30.0  # seconds a server that did not answer is skipped by reads when another copy exists
PROBE = 0.5  # seconds of silence from the data servers after which a file checks whether its layout changed


@dataclass
class _Pending:
    """A block request sent and not yet answered."""

    key: tuple[int, int]  # (sid, request id)
    block: int
    offset: int
    length: int
    data: bytes | memoryview | None  # for puts
    dest: int = 0  # for gets: offset in the caller's buffer
    peer: Peer | None = None  # where the request went
    blocks: tuple[int, ...] = ()  # for read-ahead requests: the blocks asked
    parts: tuple[tuple[int, int, Any], ...] = ()  # for batched puts: (block, offset, data)
    seq: int = 0  # for puts: the order in which the file sent them
    version: int = 0  # for puts: the layout version they were sent with


class Moved(Exception):  # noqa: N818 - a signal between the file's own methods, never raised to users
    """The file's layout changed while its requests were in flight (the metadata server says so): the
    requests not answered yet may be aimed at a server that has left, and must be settled on the new layout."""


class _Fallback(Exception):
    """Read-ahead gave up (stale layout or a silent server): read the range the careful way."""


class BlockReader:
    """Reading blocks for :class:`~._client.AdhocFile` (see the module docstring)."""

    fs: Any
    fid: int
    name: str
    version: int
    block_size: int
    _size: int
    _layout: Any
    _addrs: dict[int, str]
    _damaged: list[list[int]]
    _write_ok: bool
    _last_end: int
    _pf_data: dict[int, Any]
    _pf_pending: dict[tuple[int, int], Any]
    _pf_next: int
    _pf_size: int
    _pf_burst: int

    def _where(self, block: int, skip: frozenset[int] = frozenset()) -> tuple[int, Peer]:  # AdhocFile
        raise NotImplementedError

    def _replicas(self, block: int) -> tuple[int, ...]:  # AdhocFile
        raise NotImplementedError

    def _is_written(self, block: int) -> bool:  # AdhocFile
        raise NotImplementedError

    def _lost(self, block: int, why: str) -> FsError:  # AdhocFile
        raise NotImplementedError

    def _refresh(self, wait_ready: bool) -> None:  # AdhocFile
        raise NotImplementedError

    def _read_cached(self, pos: int, out: memoryview) -> None:
        """Serve sequential reads of read-only files from blocks fetched ahead: ``readahead`` block
        requests stay in flight (to all servers at once) while the reader consumes earlier blocks, and
        each received block is copied once, from its zmq frame straight into the caller's buffer."""
        n = len(out)
        ahead = self.fs.readahead
        if self._write_ok or not ahead:
            self._read_range(pos, out)
            return
        bs = self.block_size
        if abs(pos - self._last_end) > ahead * bs or self._pf_size != self._size:
            # far from the last read (readers that are sequential overall, such as the kernel's concurrent
            # read-ahead of a mount, arrive a little out of order: they keep it), or the file grew (a block
            # fetched short may have more bytes now)
            self._pf_reset()
        first, last = pos // bs, (pos + n - 1) // bs
        end = min(-(-self._size // bs), last + 1 + ahead)
        if (
            last - first >= ahead
            or self._layout.any_unallocated(first, end)
            or any(in_ranges(self._damaged, b) for b in range(first, last + 1))
        ):
            self._pf_reset()  # large reads pipeline by themselves; holes need the layout refreshed
            self._read_range(pos, out)
            return
        try:
            if not self._pf_next or self._pf_next < first:
                self._pf_reset()
                self._pf_next = first
            # in batches of up to GET_BYTES per server: fewer, larger requests and replies
            step = max(1, min(ahead // 2, max(1, len(self._addrs)) * (GET_BYTES // bs)))
            if self._pf_next <= last or end - self._pf_next >= step:
                self._pf_send(end)
            data = self._pf_data
            missing = [b for b in range(first, last + 1) if b not in data]
            if missing:  # behind the blocks fetched ahead (read out of order, or again): ask for those not in flight
                flight = {b for rec in self._pf_pending.values() for b in rec.blocks}
                self._pf_request([b for b in missing if b not in flight])
            dest = 0
            for b, off, ln in block_range(pos, n, bs):
                while b not in data:
                    self._pf_collect()
                chunk = data[b][off : off + ln]
                got = len(chunk)
                if got:
                    out[dest : dest + got] = chunk
                if got < ln:
                    out[dest + got : dest + ln] = bytes(ln - got)
                dest += ln
            for b in range(first, (pos + n) // bs):  # blocks read to their end are not needed again
                data.pop(b, None)
        except _Fallback:
            self._pf_reset()
            self._read_range(pos, out)
        except BaseException:
            self._pf_reset()
            raise

    def _pf_send(self, end: int) -> None:
        """Request blocks ``[_pf_next, end)``."""
        self._pf_request(range(self._pf_next, end))
        self._pf_next = max(self._pf_next, end)
        self._pf_size = self._size

    def _pf_request(self, blocks_wanted: Iterable[int]) -> None:
        """Request ``blocks_wanted`` (the whole block each), in requests of up to ``GET_BYTES`` per server."""
        by_server: dict[int, tuple[Peer, list[int]]] = {}
        for b in blocks_wanted:
            sid, p = self._where(b)
            blocks = by_server.setdefault(sid, (p, []))[1]
            blocks.append(b)
            if len(blocks) >= self._pf_burst:
                self._pf_ask(sid, p, blocks)
                del by_server[sid]
        for sid, (p, blocks) in by_server.items():
            self._pf_ask(sid, p, blocks)

    def _pf_ask(self, sid: int, p: Peer, blocks: list[int]) -> None:
        self._pf_burst = min(2 * self._pf_burst, max(1, GET_BYTES // self.block_size))  # the ramp: see GET_BYTES
        rid = p.send(GetBlocks(self.fid, blocks, self.block_size, self.version))
        self._pf_pending[(sid, rid)] = _Pending((sid, rid), blocks[0], 0, self.block_size, None, 0, p, tuple(blocks))

    def _pf_collect(self) -> None:
        """Wait for at least one read-ahead reply."""
        if not self._pf_pending:
            raise _Fallback
        try:
            got = self._collect(self._pf_pending, f"reading {self.name}")
        except ServerUnavailable:
            raise _Fallback from None  # the careful path refreshes the layout and retries or reports
        except Moved:
            self._refresh(False)  # the careful path then asks the blocks' new owners at once
            raise _Fallback from None
        for rec, reply in got:
            if isinstance(reply, BlockData) and len(reply.parts) == len(rec.blocks):
                for b, found, part in zip(rec.blocks, reply.found, reply.parts, strict=True):
                    if not found and self._is_written(b):
                        raise _Fallback  # the careful path asks the other copies or reports the loss
                    self._pf_data[b] = part  # absent and never written: a hole
            elif isinstance(reply, Error) and reply.kind == "stale":
                raise _Fallback
            elif isinstance(reply, Error):
                raise_remote(reply, f"data server {rec.key[0]}, reading {self.name}")
            else:
                raise FsError(f"unexpected reply {reply.TYPE!r} reading {self.name}")

    def _pf_reset(self) -> None:
        """Forget read-ahead: received blocks and requests in flight (their late replies are dropped)."""
        for rec in self._pf_pending.values():
            if rec.peer is not None:
                rec.peer.forget(rec.key[1])
        self._pf_pending.clear()
        self._pf_data.clear()
        self._pf_next = 0
        self._pf_burst = 1

    def _collect(
        self, pending: dict[tuple[int, int], _Pending], what: str
    ) -> Iterable[tuple[_Pending, Message]]:
        """Wait for at least one reply among ``pending`` (removing answered entries) and yield them.

        Replies to requests of other files on the same connections are kept for them (``Peer.stash``).

        Raises:
            Moved: nothing arrived for ``PROBE`` seconds and the file's layout has changed (entries stay).
            ServerUnavailable: nothing arrived within the client's timeout and the layout is unchanged; the
                connections are reset, so the entries left can no longer be answered.
        """
        peers: dict[int, tuple[int, Peer]] = {}
        for rec in pending.values():
            p = rec.peer
            if p is not None and id(p) not in peers:
                peers[id(p)] = (rec.key[0], p)
        out = []
        for sid, p in peers.values():
            if p.stash:
                for rid in [r for r in p.stash if (sid, r) in pending]:
                    out.append((pending.pop((sid, rid)), p.stash.pop(rid)))
        if out:
            return out
        for sid, p in peers.values():  # replies already queued: no need to poll
            self._take(sid, p, pending, out)
        if out:
            return out
        by_sock = {}
        poller = zmq.Poller()
        for sid, p in peers.values():
            if p.pending:
                poller.register(p.sock, zmq.POLLIN)
                by_sock[p.sock] = (sid, p)
        ready: dict[Any, int] = {}
        deadline = time.monotonic() + self.fs.timeout
        probing = True
        while by_sock:
            left = deadline - time.monotonic()
            if probing and left > PROBE:
                ready = dict(poller.poll(int(PROBE * 1000)))
                if ready:
                    break
                moved = self._moved()
                if moved:
                    raise Moved(what)
                probing = moved is not None  # the metadata server is silent too: wait for the data servers
                continue
            ready = dict(poller.poll(max(0, int(left * 1000))))
            break
        if not ready:
            sid = min(s for s, _ in peers.values()) if peers else min(k[0] for k in pending)
            p = next((q for s, q in peers.values() if s == sid), None)
            name = p.name if p else f"data server {sid}"
            until = time.monotonic() + DOWN_FOR
            for s, p in peers.values():
                if p.pending:
                    self.fs.down[s] = until  # silent: reads use the other copies for a while
                p.reset()
            raise ServerUnavailable(f"{name} did not answer within {self.fs.timeout:g} s ({what})")
        for sock in ready:
            sid, p = by_sock[sock]
            self._take(sid, p, pending, out)
        return out

    def _moved(self) -> bool | None:
        """Whether the file's layout (version or server addresses) differs from the one this object holds,
        asked of the metadata server; None when the metadata server does not answer either."""
        try:
            info = self.fs.call(GetLayout(self.fid), what=f"layout of {self.name}")
        except ServerUnavailable:
            return None
        except FileNotFoundError:
            return False  # removed meanwhile: nothing to re-place; the data servers' answers decide
        assert isinstance(info, FileInfo)
        return info.version != self.version or {int(k): v for k, v in info.servers.items()} != self._addrs

    @staticmethod
    def _take(sid: int, p: Peer, pending: dict[tuple[int, int], _Pending], out: list[Any]) -> None:
        """Move the replies queued on ``p`` into ``out`` (those for ``pending``) or ``p.stash`` (others)."""
        if not p.pending:
            return
        while (got := p.try_recv()) is not None:
            msg, rid = got
            rec = pending.pop((sid, rid), None)
            if rec is not None:
                out.append((rec, msg))
            else:
                p.stash[rid] = msg  # another file's request on this connection

    def _read_range(self, pos: int, out: memoryview) -> None:
        """Fill ``out`` with the file bytes at ``pos``: holes (never written) read as zeros; a written block is
        asked of its copies in turn, and one that no live server holds raises EIO naming the byte range (never
        zeros). Re-fetches the layout and retries when a server answers ``stale`` or not at all."""
        pieces = block_range(pos, len(out), self.block_size)
        if pieces and self._layout.any_unallocated(pieces[0][0], pieces[-1][0] + 1):
            self._refresh(False)  # another client may have allocated (and written) these blocks
        todo: list[tuple[int, int, int, int, frozenset[int]]] = []
        for (b, off, ln), dest in zip(pieces, _offsets(pieces), strict=True):
            if in_ranges(self._damaged, b):
                raise self._lost(b, "no copy survived a lost data server ('malleable fs check' lists damaged files)")
            if self._layout.allocated(b):
                todo.append((b, off, ln, dest, frozenset()))
            else:  # never written: a hole
                out[dest : dest + ln] = bytes(ln)
        for _attempt in range(5):
            pending: dict[tuple[int, int], _Pending] = {}
            failed: list[tuple[int, int, int, int, frozenset[int]]] = []
            skips: dict[tuple[int, int], frozenset[int]] = {}
            queue = list(todo)
            version = self.version
            try:
                while queue or pending:
                    while queue and len(pending) < 4 * self.fs.window:
                        b, off, ln, dest, skip = queue.pop(0)
                        sid, p = self._where(b, skip)
                        rid = p.send(Get(self.fid, b, off, ln, self.version))
                        pending[(sid, rid)] = _Pending((sid, rid), b, off, ln, None, dest, p)
                        skips[(sid, rid)] = skip
                    for rec, reply in self._collect(pending, f"reading {self.name}"):
                        skip = skips.pop(rec.key)
                        if isinstance(reply, Data):
                            got = len(reply.data)
                            if not reply.found and self._is_written(rec.block):
                                skip = skip | {rec.key[0]}
                                if set(self._replicas(rec.block)) <= skip:
                                    raise self._lost(rec.block, f"no live data server holds it (asked {sorted(skip)})")
                                queue.append((rec.block, rec.offset, rec.length, rec.dest, skip))
                                continue
                            if got:
                                out[rec.dest : rec.dest + got] = reply.data
                            out[rec.dest + got : rec.dest + rec.length] = bytes(rec.length - got)
                        elif isinstance(reply, Error) and reply.kind == "stale":
                            failed.append((rec.block, rec.offset, rec.length, rec.dest, skip))
                        elif isinstance(reply, Error):
                            raise_remote(reply, f"data server {rec.key[0]}, reading {self.name}")
                        else:
                            raise FsError(f"unexpected reply {reply.TYPE!r} reading {self.name}")
            except (ServerUnavailable, Moved) as e:
                addrs = dict(self._addrs)
                self._refresh(False)
                now = time.monotonic()
                other_copies = all(
                    any(self.fs.down.get(s, 0) <= now for s in self._replicas(b)) for b, *_ in todo
                )
                if isinstance(e, ServerUnavailable) and self.version == version and self._addrs == addrs \
                        and not other_copies:
                    raise
                continue  # a server left, came back elsewhere, or another copy can answer: retry everything
            finally:
                for rec in pending.values():  # abandoned after an error: late replies are dropped
                    if rec.peer is not None:
                        rec.peer.forget(rec.key[1])
            if not failed:
                return
            todo = failed
            self._refresh(False)
        raise FsError(errno.EIO, f"{self.name}: layout kept changing while reading")


def _offsets(pieces: list[tuple[int, int, int]]) -> list[int]:
    out, acc = [], 0
    for _, _, ln in pieces:
        out.append(acc)
        acc += ln
    return out
