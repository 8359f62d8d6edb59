"""The data server: holds blocks (in memory, optionally mirrored to ``--dir``) and answers put/get
requests over a zmq ROUTER socket; run as ``python -m malleable.adhocfs._data``.

Every request is authenticated and validated; a bad one gets an :class:`Error` reply and changes
nothing. Per-file fences (set by the metadata server during a redistribution) refuse writes or reads
made with an old layout version, so a client can never use a stale location.
"""

from __future__ import annotations

import argparse
import collections
import errno
import gc
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import zmq

from malleable._secret import load_token
from malleable._wire import shared
from malleable.adhocfs._buffers import TRIM, give_back, keep_freed_buffers, reserve
from malleable.adhocfs._dirstore import DirStore
from malleable.adhocfs._protocol import (
    BlockData,
    Blocks,
    Copy,
    Data,
    DropBlocks,
    DropFile,
    Fence,
    Get,
    GetBlocks,
    GetFiles,
    Inventory,
    InventoryReply,
    ListBlocks,
    Message,
    Ok,
    Put,
    PutBlocks,
    Register,
    Registered,
    Shutdown,
    Stats,
    StatsReply,
)
from malleable.adhocfs._rpc import Peer, StaleLayout
from malleable.adhocfs._serve import announce, bind_socket, serve_one, setup_logging
from malleable.adhocfs._store import BlockStore, MemoryStore
from malleable.errors import ProtocolError, ServerUnavailable

__all__ = ["DataServer", "main"]

log = logging.getLogger(__name__)

IO_THREADS = 2  # zmq I/O threads: each client's connection is received on one of them, so that the bytes of two
# clients are taken off the network (and any fresh pages beyond the reserve faulted in) on two cores at once
GC_THRESHOLD = 50_000  # allocations between collections of the youngest generation (Python's default: 700)
RESERVE = 512 << 20  # memory a data server takes ahead for the blocks it will keep (--reserve), at most its capacity
STEP = 1.0  # seconds per AIO time step
WINDOW = 60  # samples kept


class DataServer:
    """One data server. Mutated only by its own loop (:meth:`serve`), one request at a time.

    Args:
        store: the block store.
        token: the shared secret.
        sid: the stable server id given by the metadata server.
        max_rate: MB/s cap emulating a node's bandwidth (0: none).
        capacity: most bytes the store may hold (0: no limit); a write beyond it fails with ENOSPC.
    """

    def __init__(
        self, store: BlockStore, token: bytes, sid: int, max_rate: float = 0.0, capacity: int = 0
    ) -> None:
        self.store, self.token, self.sid, self.capacity = store, token, sid, capacity
        self.max_rate = max_rate  # MB/s cap emulating a node's bandwidth (0: none)
        self._free_at = 0.0
        self.fences: dict[int, tuple[int, int]] = {}
        self.counts = collections.Counter[str]()
        self.samples: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self._step_bytes = 0
        self._step_reqs = 0
        self._step_start = time.monotonic()
        self.req_rate = 0.0
        self.running = True
        self.reserved = 0  # bytes of memory taken ahead (set by the shell once it reserved them)
        self._high = 0  # the most bytes held since memory was last given back

    # ------------------------------------------------------------ pure-ish request handling
    def handle(self, msg: Message) -> Message:
        """Apply one validated request and return the reply (raises for an error reply)."""
        fn = _HANDLERS.get(type(msg))
        if fn is None:
            raise ProtocolError(f"data server does not handle {msg.TYPE!r}")
        return fn(self, msg)

    def _put(self, msg: Put) -> Message:
        self._check_fence(msg.fid, msg.version, write=True)
        if msg.offset + len(msg.data) > 1 << 30:
            raise ValueError("block write beyond 1 GiB")
        self._check_space([((msg.fid, msg.block), msg.offset, len(msg.data))])
        self.store.write((msg.fid, msg.block), msg.offset, msg.data)
        self._count("writes", len(msg.data))
        return Ok()

    def _put_blocks(self, msg: PutBlocks) -> Message:
        self._check_fence(msg.fid, msg.version, write=True)
        if any(off + len(part) > 1 << 30 for off, part in zip(msg.offsets, msg.parts, strict=True)):
            raise ValueError("block write beyond 1 GiB")  # checked for all before writing any
        parts = zip(msg.blocks, msg.offsets, msg.parts, strict=True)
        self._check_space([((msg.fid, b), off, len(part)) for b, off, part in parts])
        for b, off, part in zip(msg.blocks, msg.offsets, msg.parts, strict=True):
            self.store.write((msg.fid, b), off, part)
            self._count("writes", len(part))
        return Ok()

    def _get(self, msg: Get) -> Message:
        self._check_fence(msg.fid, msg.version, write=False)
        view = self.store.read((msg.fid, msg.block), msg.offset, msg.length)
        self._count("reads", 0 if view is None else len(view))
        return Data(view is not None, b"" if view is None else view)

    def _get_blocks(self, msg: GetBlocks) -> Message:
        self._check_fence(msg.fid, msg.version, write=False)
        found, parts = [], []
        for b in msg.blocks:
            view = self.store.read((msg.fid, b), 0, msg.length)
            self._count("reads", 0 if view is None else len(view))
            found.append(0 if view is None else 1)
            parts.append(b"" if view is None else view)
        return BlockData(found, parts)

    def _get_files(self, msg: GetFiles) -> Message:
        for fid, version in set(zip(msg.fids, msg.versions, strict=True)):
            self._check_fence(fid, version, write=False)   # checked for all before reading any
        found, parts = [], []
        for fid, b, length in zip(msg.fids, msg.blocks, msg.lengths, strict=True):
            view = self.store.read((fid, b), 0, length)
            self._count("reads", 0 if view is None else len(view))
            found.append(0 if view is None else 1)
            parts.append(b"" if view is None else view)
        return BlockData(found, parts)

    def _copy(self, msg: Copy) -> Message:
        self._check_space([((msg.fid, msg.block), 0, len(msg.data))], whole=True)
        self.store[(msg.fid, msg.block)] = bytearray(msg.data)
        self.counts["copies"] += 1
        return Ok()

    def _drop_blocks(self, msg: DropBlocks) -> Message:
        self._drop(msg)
        return Ok()

    def _drop_file(self, msg: DropFile) -> Message:
        self.store.drop_file(msg.fid)
        self.fences.pop(msg.fid, None)
        return Ok()

    def _fence(self, msg: Fence) -> Message:
        self.fences[msg.fid] = (msg.wmin, msg.rmin)
        return Ok()

    def _list_blocks(self, msg: ListBlocks) -> Message:
        return Blocks(self.store.blocks_of(msg.fid))

    def _inventory(self, msg: Inventory) -> Message:
        return InventoryReply({str(f): self.store.blocks_of(f) for f in self.store.files()})

    def _stats(self, msg: Stats) -> Message:
        return self.stats()

    def _shutdown(self, msg: Shutdown) -> Message:
        if msg.wipe:
            n = len(self.store)
            for fid in self.store.files():
                self.store.drop_file(fid)
            log.info("dropped all %d blocks before leaving", n)
        self.running = False
        return Ok()

    def _check_space(self, writes: list[tuple[tuple[int, int], int, int]], whole: bool = False) -> None:
        """Refuse (ENOSPC) writes that would take the store beyond its capacity; nothing is written then."""
        if not self.capacity:
            return
        grow, seen = 0, {}
        for key, off, n in writes:
            cur = seen.get(key)
            if cur is None:
                block = self.store.get(key)
                cur = 0 if block is None else len(block)
            new = off + n if whole else max(cur, off + n)
            grow += new - cur
            seen[key] = new
        if self.store.nbytes + grow > self.capacity:
            raise OSError(
                errno.ENOSPC,
                f"no space left on data server {self.sid}: {self.store.nbytes} of {self.capacity} bytes used, "
                f"{grow} more asked",
            )

    def _check_fence(self, fid: int, version: int, write: bool) -> None:
        fence = self.fences.get(fid)
        if fence is not None and version < fence[0 if write else 1]:
            raise StaleLayout(f"file {fid}: layout version {version} is stale (server {self.sid})")

    def _drop(self, msg: DropBlocks) -> None:
        for b in msg.blocks:
            self.store.pop((msg.fid, b), None)
        if msg.from_block is not None:
            for b in self.store.blocks_of(msg.fid):
                if b >= msg.from_block:
                    del self.store[(msg.fid, b)]
        if msg.cut_block is not None:
            self.store.cut((msg.fid, msg.cut_block), msg.cut_len)

    def _count(self, kind: str, nbytes: int) -> None:
        if self.max_rate > 0 and nbytes:  # hold the server as long as the emulated link would be busy
            now = time.monotonic()
            self._free_at = max(self._free_at, now) + nbytes / (self.max_rate * 1e6)
            if self._free_at > now:
                time.sleep(self._free_at - now)
        self.counts[kind] += 1
        self.counts[kind[:-1] + "_bytes"] += nbytes
        self._step_bytes += nbytes
        self._step_reqs += 1

    def tick(self, now: float) -> None:
        """Close the AIO time step if it is over (a step with no request records no sample)."""
        dt = now - self._step_start
        if dt < STEP:
            return
        if self._step_reqs:
            self.samples.append(self._step_bytes / dt / 1e6)
        self.req_rate = self._step_reqs / dt
        self._step_bytes = self._step_reqs = 0
        self._step_start = now

    def stats(self) -> StatsReply:
        """Current counters."""
        c = self.counts
        return StatsReply(
            self.sid,
            len(self.store),
            self.store.nbytes,
            c["reads"],
            c["writes"],
            c["read_bytes"],
            c["write_bytes"],
            self.samples[-1] if self.samples else 0.0,
            self.req_rate,
            list(self.samples),
            self.capacity,
        )

    # ------------------------------------------------------------ the shell
    def serve(self, sock: zmq.Socket[Any]) -> None:
        """Answer requests on ``sock`` (a bound ROUTER) until a :class:`Shutdown` arrives.

        Blocks are kept as received and never changed in place, so the payload tag of each is kept with it and a
        block read back is sent without hashing it again."""
        shared(self.token).keep_tags = True
        while self.running:
            if sock.poll(200, zmq.POLLIN):
                for _ in range(64):  # a burst before ticking the clock
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        break
                    self._serve_one(sock, frames)
                    if not self.running:
                        break
            self.tick(time.monotonic())
            self._give_back()

    def _give_back(self) -> None:
        """Once blocks removed have freed much more memory than the reserve keeps, return the rest to the system
        (the reserve stays in memory): a heap's top alone goes back by itself, and blocks still kept may hold it up."""
        held = self.store.nbytes
        self._high = max(self._high, held)
        if self.reserved and self._high - held > TRIM:
            self.reserved = give_back(self.reserved) or self.reserved
            self._high = held

    def _serve_one(self, sock: zmq.Socket[Any], frames: list[Any]) -> None:
        serve_one(sock, frames, self.token, self.handle, (ProtocolError, StaleLayout, ValueError, KeyError, OSError),
                  (StaleLayout,), f"data server {self.sid}", logging.WARNING)


_HANDLERS: dict[type, Callable[[DataServer, Any], Message]] = {
    Put: DataServer._put,
    PutBlocks: DataServer._put_blocks,
    Get: DataServer._get,
    GetBlocks: DataServer._get_blocks,
    GetFiles: DataServer._get_files,
    Copy: DataServer._copy,
    DropBlocks: DataServer._drop_blocks,
    DropFile: DataServer._drop_file,
    Fence: DataServer._fence,
    ListBlocks: DataServer._list_blocks,
    Inventory: DataServer._inventory,
    Stats: DataServer._stats,
    Shutdown: DataServer._shutdown,
}
"""One handler per request type of the data server."""



def register(
    ctx: zmq.Context[Any], meta: str, token: bytes, sid: int, addr: str, host: str, timeout: float = 30.0
) -> list[list[int]]:
    """Tell the metadata server that data server ``sid`` listens on ``addr``; returns fences to apply."""
    peer = Peer(ctx, meta, token, f"metadata server {meta}", timeout=2.0)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                reply = peer.call(Register(sid, addr, host, os.getpid()), what=f"registering server {sid}")
            except ServerUnavailable:  # the metadata server may still be starting
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
            else:
                assert isinstance(reply, Registered)
                return reply.fences
    finally:
        peer.close()


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m malleable.adhocfs._data --meta ADDR --sid N --host H [--dir D]``."""
    p = argparse.ArgumentParser(prog="malleable.adhocfs._data", description="adhocfs data server")
    p.add_argument("--meta", required=True, help="metadata server address tcp://host:port")
    p.add_argument("--sid", type=int, required=True, help="stable server id reserved by the metadata server")
    p.add_argument("--host", default="127.0.0.1", help="host name clients use to reach this server")
    p.add_argument("--port", type=int, default=0, help="port (0: a random free port)")
    p.add_argument("--dir", default=None, help="backing directory: blocks survive a restart")
    p.add_argument("--log", default=None, help="log file (default stderr)")
    p.add_argument("--capacity", type=int, default=0, help="most bytes this server holds (0: no limit)")
    p.add_argument(
        "--reserve",
        type=int,
        default=os.environ.get("MALLEABLE_ADHOCFS_RESERVE", str(RESERVE)),
        help="bytes of memory taken ahead, at start, for the blocks to come (at most the capacity, 0: none; "
        f"default $MALLEABLE_ADHOCFS_RESERVE, else {RESERVE >> 20} MiB)",
    )
    p.add_argument(
        "--max-rate",
        type=float,
        default=float(os.environ.get("MALLEABLE_ADHOCFS_MAX_RATE", 0) or 0),
        help="cap this server's bandwidth in MB/s to emulate a node's link or device "
        "(default $MALLEABLE_ADHOCFS_MAX_RATE, else none)",
    )
    args = p.parse_args(argv)
    setup_logging(args.log, f"data{args.sid}")
    token = load_token()
    keep_freed_buffers()  # blocks dropped free their buffers for the next ones received (no new page faults)
    # before the zmq context's threads: the pages of the blocks to come are faulted in now, not while receiving them
    reserved = reserve(min(args.reserve, args.capacity or args.reserve))
    store: BlockStore = DirStore(args.dir) if args.dir else MemoryStore()
    ctx = zmq.Context(io_threads=IO_THREADS)
    sock, addr = bind_socket(ctx, zmq.ROUTER, args.host, args.port, token)
    server = DataServer(store, token, args.sid, args.max_rate, args.capacity)
    server.reserved = reserved
    try:
        for fid, wmin, rmin in register(ctx, args.meta, token, args.sid, addr, args.host):
            server.fences[fid] = (wmin, rmin)
        announce(addr)
        log.info("data server %d serving on %s (%d blocks, %d MiB reserved)", args.sid, addr, len(store),
                 reserved >> 20)
        # every request makes a few dozen short-lived containers and nothing here forms cycles that matter: collect
        # rarely, and never scan what start-up made
        gc.freeze()
        gc.set_threshold(GC_THRESHOLD)
        server.serve(sock)
    finally:
        sock.close(linger=0)
        ctx.term()
        store.close()
    log.info("data server %d stopped", args.sid)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
