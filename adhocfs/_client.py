"""The adhocfs client: :func:`connect` returns a :class:`FileSystem`; :meth:`FileSystem.open` returns an
:class:`AdhocFile`, a seekable binary ``io.RawIOBase`` that ``h5py.File`` accepts.

Block requests of one call go to all servers at once (pipelined), and writes are write-behind: ``write``
returns once its blocks are queued (each server's are sent together in requests of up to 4 MiB), at most about
``window`` blocks stay unacknowledged, and ``flush``,
``close``, ``truncate`` and any read wait for every acknowledgement (errors surface there at the latest).
A file kept open across an expansion or a shrink keeps every byte: writes and reads aimed at a server that
left, or refused under an old layout, are sent again to the blocks' new owners (:mod:`._writer`).

Notes:
    A FileSystem and its files belong to one thread (zmq sockets are not thread-safe); use one
    :func:`connect` per thread or process. Consistency is close-to-open: a reader sees another client's
    writes once that client has flushed or closed.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import time
from collections.abc import Sequence
from typing import Any

import zmq

from malleable._secret import load_token
from malleable.adhocfs._buffers import keep_freed_buffers
from malleable.adhocfs._bulk import read_files, write_files
from malleable.adhocfs._namespace import BLOCKING, MODES, normalize
from malleable.adhocfs._placement import FileLayout, block_range, in_ranges, ranges_of
from malleable.adhocfs._protocol import (
    DeclareRio,
    Entries,
    Extend,
    FileInfo,
    FsStatus,
    GetLayout,
    ListDir,
    Message,
    Mkdir,
    Names,
    Open,
    Remove,
    Rename,
    ScanDir,
    SetSize,
    Stat,
    StatReply,
    Status,
)
from malleable.adhocfs._reader import BlockReader, _Pending
from malleable.adhocfs._rpc import ADDRESS, Busy, Peer
from malleable.adhocfs._writer import PUT_BYTES, BlockWriter, _Batch
from malleable.errors import ConfigError, FsError, ServerUnavailable

__all__ = ["AdhocFile", "FileSystem", "connect"]

log = logging.getLogger(__name__)

MAX_AHEAD = 128  # most blocks a growing file allocates ahead of its writes


def connect(
    addr: str | None = None,
    token: str | bytes | None = None,
    timeout: float = 5.0,
    window: int = 128,
    reserve: int = 16,
    wait: float = 300.0,
    readahead: int = 64,
) -> FileSystem:
    """Connect to the metadata server at ``addr`` (``tcp://host:port``).

    Args:
        addr: metadata server address, as printed last by ``malleable fs start`` (default: ``MALLEABLE_FS``,
            which a job given a file system by the controller has).
        token: shared secret, ``str`` or ``bytes`` (default: ``MALLEABLE_TOKEN`` or the key file).
        timeout: seconds to wait for any server before :class:`ServerUnavailable`.
        window: unacknowledged block writes allowed per open file (sent in requests of up to 4 MiB per
            server; a new one leaves once an acknowledgement comes back).
        reserve: blocks allocated ahead of the end of a growing file by its first metadata request;
            each further one doubles it, up to ``max(reserve, MAX_AHEAD)``.
        wait: seconds a write may wait for a file being redistributed.
        readahead: blocks kept in flight ahead of sequential reads of files opened read-only (asked in
            requests of up to 4 MiB per server, once that many per server, or half of them, have been consumed).

    Raises:
        ConfigError: no address (neither given nor in ``MALLEABLE_FS``), or not ``tcp://HOST:PORT``; an
            empty token.
        TypeError: a token that is neither ``str`` nor ``bytes``.
        AuthError: no shared secret available.
    """
    if addr is None:
        addr = os.environ.get("MALLEABLE_FS") or None
        if addr is None:
            raise ConfigError("adhocfs.connect: no address: pass connect('tcp://HOST:PORT') or set MALLEABLE_FS")
    if not isinstance(addr, str) or not ADDRESS.match(addr):
        raise ConfigError(f"adhocfs.connect: the address must be tcp://HOST:PORT (the last line of "
                          f"'malleable fs start'), got {addr!r}")
    if token is None:
        key = load_token()
    elif isinstance(token, str):
        key = token.encode()
    elif isinstance(token, bytes | bytearray | memoryview):
        key = bytes(token)
    else:
        raise TypeError(f"adhocfs.connect: token must be str or bytes, got {type(token).__name__}")
    if not key:
        raise ConfigError("adhocfs.connect: empty token")
    return FileSystem(addr, key, timeout, window, reserve, wait, readahead)


class FileSystem:
    """A connection to one adhocfs instance. Use as a context manager or call :meth:`close`."""

    def __init__(
        self,
        addr: str,
        token: bytes,
        timeout: float,
        window: int,
        reserve: int,
        wait: float,
        readahead: int = 64,
    ) -> None:
        self.addr, self.token, self.timeout, self.readahead = addr, token, timeout, max(0, readahead)
        self.window, self.reserve, self.wait = max(1, window), max(0, reserve), wait
        keep_freed_buffers()  # received blocks' buffers are reused instead of faulted in again for every block
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.meta = Peer(self.ctx, addr, token, f"metadata server {addr}", timeout)
        self._peers: dict[tuple[int, str], Peer] = {}
        self.down: dict[int, float] = {}  # sid -> until when reads prefer other copies
        self.closed = False

    # ------------------------------------------------------------ plumbing
    def call(self, msg: Message, what: str = "") -> Message:
        """One request to the metadata server (errors raised as local exceptions)."""
        if self.closed:
            raise ValueError("file system connection is closed")
        deadline = time.monotonic() + self.wait
        while True:
            try:
                return self.meta.call(msg, what=what)
            except Busy:  # the file is being redistributed: namespace writes wait like data writes
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def peer(self, sid: int, addr: str) -> Peer:
        """Connection to data server ``sid`` at ``addr``."""
        key = (sid, addr)
        p = self._peers.get(key)
        if p is None:
            if not addr:
                raise ServerUnavailable(f"data server {sid} has no address (not registered)")
            p = self._peers[key] = Peer(
                self.ctx, addr, self.token, f"data server {sid} ({addr})", self.timeout
            )
        return p

    def close(self) -> None:
        """Close every connection."""
        if self.closed:
            return
        self.closed = True
        self.meta.close()
        for p in self._peers.values():
            p.close()
        self.ctx.term()

    def __enter__(self) -> FileSystem:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ namespace
    def open(self, path: str, mode: str = "rb", block_size: int = 0) -> AdhocFile:
        """Open a file; ``mode`` is one of r, r+, w, w+, a, a+, x, x+ with an optional ``b``.

        Args:
            path: file path (absolute; a relative path starts at the root).
            mode: as for built-in ``open`` in binary mode.
            block_size: block size of a file created by this call (0: the file system's default).

        Raises:
            ValueError: a text mode or an unknown mode.
            FileNotFoundError, FileExistsError, IsADirectoryError: as for a local file.
        """
        base = mode.replace("b", "")
        if "t" in mode or base not in MODES or mode.count("b") > 1:
            raise ValueError(f"invalid mode {mode!r}: adhocfs files are binary (r, r+, w, w+, a, a+, x, x+)")
        info = self.call(Open(normalize(path), base, block_size), what=f"opening {path}")
        assert isinstance(info, FileInfo)
        return AdhocFile(self, info, base)

    def write_files(self, files: Sequence[tuple[str, Any]]) -> int:
        """Create or replace many small files at once, each ``(path, bytes)`` (at most 1024; their folders exist):
        two metadata requests in all and every block in flight together (:mod:`._bulk`); returns the bytes."""
        return write_files(self, files)

    def read_files(self, paths: Sequence[str]) -> list[Any]:
        """The bytes of many small files at once (at most 1024 paths), in order: one metadata request and one
        request per data server for all their blocks (:mod:`._bulk`)."""
        return read_files(self, paths)

    def stat(self, path: str) -> StatReply:
        """Metadata of ``path`` (``is_dir``, ``size``, ``block_size``, ``nblocks``, ``status``)."""
        reply = self.call(Stat(normalize(path)))
        assert isinstance(reply, StatReply)
        return reply

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists."""
        try:
            self.stat(path)
        except FileNotFoundError:
            return False
        return True

    def listdir(self, path: str = "/") -> list[str]:
        """Names in directory ``path``."""
        reply = self.call(ListDir(normalize(path)))
        assert isinstance(reply, Names)
        return reply.names

    def scandir(self, path: str = "/") -> list[tuple[str, bool, int]]:
        """``(name, is_dir, size)`` of each entry of directory ``path``, in one request."""
        reply = self.call(ScanDir(normalize(path)))
        assert isinstance(reply, Entries)
        return list(zip(reply.names, map(bool, reply.dirs), reply.lengths, strict=True))

    def mkdir(self, path: str, exist_ok: bool = False) -> None:
        """Create directory ``path`` (its parent must exist)."""
        self.call(Mkdir(normalize(path), exist_ok))

    def makedirs(self, path: str, exist_ok: bool = True) -> None:
        """Create ``path`` and its missing parents."""
        parts = normalize(path).strip("/").split("/")
        for i in range(1, len(parts) + 1):
            self.mkdir("/" + "/".join(parts[:i]), exist_ok=True if i < len(parts) else exist_ok)

    def remove(self, path: str) -> None:
        """Remove a file or an empty directory."""
        self.call(Remove(normalize(path)))

    def rename(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst`` (replacing a file ``dst``)."""
        self.call(Rename(normalize(src), normalize(dst)))

    def status(self) -> FsStatus:
        """File-system status (servers, counters, epochs, change in progress)."""
        reply = self.call(Status())
        assert isinstance(reply, FsStatus)
        return reply

    def declare_rio(self, rate_mbs: float, job: str = "default") -> None:
        """Declare the I/O rate (MB/s) this job requests (RIO); 0 withdraws it."""
        self.call(DeclareRio(job, float(rate_mbs)))

    def __repr__(self) -> str:
        return f"<adhocfs.FileSystem {self.addr}{' closed' if self.closed else ''}>"


class AdhocFile(BlockReader, BlockWriter, io.RawIOBase):
    """A binary file of adhocfs (``io.RawIOBase``): read, readinto, write, seek, tell, truncate, flush, close.

    The object caches the file's layout (interval map, epochs, server addresses, version) and its size;
    a data server's ``stale`` answer, a server that left the layout, or one silent for ``PROBE`` seconds while
    the metadata server has a new layout make it fetch the layout again and re-send what was not
    acknowledged; writes to a file being redistributed wait until the file is ready.
    """

    def __init__(self, fs: FileSystem, info: FileInfo, mode: str) -> None:
        super().__init__()
        self.fs, self.mode = fs, mode
        self.name = info.path
        self._read_ok = mode[0] == "r" or "+" in mode
        self._write_ok = mode[0] != "r" or "+" in mode
        self._append = mode[0] == "a"
        self._set_info(info)
        self._pos = 0
        self._meta_size = info.size
        self._pending: dict[tuple[int, int], _Pending] = {}
        self._unpub: set[int] = set()  # blocks written since the last flush (their ranges are published by it)
        self._batch: dict[tuple[int, ...], _Batch] = {}  # puts not sent yet, per set of servers
        self._sent = 0  # puts sent (their order, to send again in it)
        # read-ahead (read-only files): blocks received ahead of the reader (zmq frames, not copied) and
        # requests in flight for the next ones; requests for blocks [_pf_first, _pf_next) were sent
        self._pf_data: dict[int, Any] = {}
        self._pf_pending: dict[tuple[int, int], _Pending] = {}
        self._pf_next = 0
        self._pf_size = 0  # file size when the blocks in flight were asked
        self._pf_burst = 1  # blocks the next read-ahead request asks of a server (doubling up to GET_BYTES)
        self._last_end = 0
        self._ahead = fs.reserve  # blocks allocated ahead; doubles while the file keeps growing

    # ------------------------------------------------------------ layout
    def _set_info(self, info: FileInfo) -> None:
        if getattr(self, "version", info.version) != info.version and getattr(self, "_pf_next", 0):
            self._pf_reset()  # blocks fetched ahead under another layout version: fetch them again
        self.fid, self.block_size, self.version, self.status = (
            info.fid,
            info.block_size,
            info.version,
            info.status,
        )
        self._hw = info.hw
        self._size = max(getattr(self, "_size", 0), info.size)
        self._layout = FileLayout.from_pairs(info.layout)
        self._epochs = {int(k): tuple(v) for k, v in info.epochs.items()}
        self._addrs = {int(k): v for k, v in info.servers.items()}
        self._written, self._damaged, self._r = info.written, info.damaged, max(1, info.replicas)

    def _refresh(self, wait_ready: bool) -> None:
        """Fetch the layout again; with ``wait_ready`` wait while the file is being redistributed."""
        deadline = time.monotonic() + self.fs.wait
        while True:
            info = self.fs.call(GetLayout(self.fid), what=f"layout of {self.name}")
            assert isinstance(info, FileInfo)
            self._set_info(info)
            if not wait_ready or info.status not in BLOCKING:
                return
            if time.monotonic() > deadline:
                raise FsError(f"{self.name} stayed in redistribution for more than {self.fs.wait:g} s")
            time.sleep(0.05)

    def _replicas(self, block: int) -> tuple[int, ...]:
        return self._layout.replicas(self._epochs, self.fid, block, self._r)

    def _where(self, block: int, skip: frozenset[int] = frozenset()) -> tuple[int, Peer]:
        """The server to read ``block`` from: the first copy not in ``skip``, preferring servers not known down."""
        reps = [s for s in self._replicas(block) if s not in skip] or list(self._replicas(block))
        now = time.monotonic()
        sid = next((s for s in reps if self.fs.down.get(s, 0) <= now), reps[0])
        return sid, self.fs.peer(sid, self._addrs.get(sid, ""))

    def _is_written(self, block: int) -> bool:
        """Whether ``block`` holds data (published by a flush, or written through this object since)."""
        return block in self._unpub or in_ranges(self._written, block)

    def _lost(self, block: int, why: str) -> FsError:
        bs = self.block_size
        first, last = block * bs, min((block + 1) * bs, max(self._size, block * bs + 1)) - 1
        return FsError(errno.EIO, f"{self.name}: bytes {first}-{last} (block {block}) are lost: {why}")

    # ------------------------------------------------------------ io.RawIOBase
    def readable(self) -> bool:
        return self._read_ok

    def writable(self) -> bool:
        return self._write_ok

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        self._check_open()
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check_open()
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._size + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        if pos < 0:
            raise ValueError(f"negative seek position {pos}")
        self._pos = pos
        return pos

    def readinto(self, b: Any) -> int:
        self._check_open()
        if not self._read_ok:
            raise io.UnsupportedOperation(f"{self.name} is not open for reading")
        out = memoryview(b).cast("B")
        if self._pending or self._batch:
            self._drain(0)
        if self._pos + len(out) > self._size and not self._write_ok:
            self._refresh(False)  # another client may have grown the file
        n = max(0, min(len(out), self._size - self._pos))
        if n:
            self._read_cached(self._pos, out[:n])
        self._last_end = self._pos + n
        self._pos += n
        return n

    def readall(self) -> bytes:
        self._check_open()
        if not self._write_ok:
            self._refresh(False)
        buf = bytearray(max(0, self._size - self._pos))
        n = self.readinto(buf)
        return bytes(buf[:n])

    def write(self, b: Any, *, copy: bool = True) -> int:
        """Write the bytes of ``b`` at the position (writes go behind: the file keeps the pieces it sends until
        the servers acknowledge them). ``bytes`` are kept without a copy; any other buffer is copied, unless
        ``copy=False``: the caller then promises that its bytes do not change until the file is flushed or closed
        (a read-only mapping of a file nobody writes, for instance)."""
        self._check_open()
        if not self._write_ok:
            raise io.UnsupportedOperation(f"{self.name} is not open for writing")
        data = memoryview(b).cast("B")
        n = len(data)
        if self._append:
            self._pos = self._size
        if n == 0:
            return 0
        end = self._pos + n
        first, need = self._pos // self.block_size, -(-end // self.block_size)
        if self._layout.any_unallocated(first, need):
            # allocate (with some blocks ahead); the size is published by flush, once the data is acknowledged
            self._extend(self._meta_size, need + self._ahead, first)
            # a file growing by many blocks needs fewer (synchronous) metadata round trips; the cap keeps
            # an expansion's new servers in use soon for the following blocks
            self._ahead = min(2 * self._ahead, max(self.fs.reserve, MAX_AHEAD))
        pos = 0
        # requests in flight: the window's blocks in requests of PUT_BYTES; each acknowledgement lets one more go
        limit = max(2, self.fs.window * self.block_size // PUT_BYTES) * self._r  # one per copy
        # write-behind keeps the pieces until acknowledged: immutable input is sent without a copy
        frozen = not copy or isinstance(b, bytes)
        for block, off, ln in block_range(self._pos, n, self.block_size):
            self._queue_put(block, off, data[pos : pos + ln] if frozen else bytes(data[pos : pos + ln]))
            self._unpub.add(block)
            pos += ln
            if len(self._pending) >= limit:
                self._drain(limit - 1)
        self._pos = end
        self._size = max(self._size, end)
        return n

    def truncate(self, size: int | None = None) -> int:
        self._check_open()
        if not self._write_ok:
            raise io.UnsupportedOperation(f"{self.name} is not open for writing")
        size = self._pos if size is None else size
        if size < 0:
            raise ValueError(f"negative size {size}")
        self.flush()
        info = self._with_wait(lambda: self.fs.call(SetSize(self.fid, size), what=f"truncating {self.name}"))
        if isinstance(info, FileInfo):
            self._set_info(info)  # the written ranges are cut too
        self._size = self._meta_size = size
        return size

    def flush(self) -> None:
        if self.closed:
            return
        self._drain(0)
        if self._write_ok and (self._size > self._meta_size or self._unpub):
            self._extend(self._size, 0, written=ranges_of(self._unpub))
            self._unpub.clear()

    def close(self) -> None:
        if self.closed:
            return
        try:
            if not self.fs.closed:
                self.flush()
        finally:
            self._pf_reset()
            super().close()

    def fileno(self) -> int:
        raise io.UnsupportedOperation("adhocfs files have no file descriptor")

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed file")

    def __repr__(self) -> str:
        return f"<AdhocFile {self.name!r} mode={self.mode!r} size={self._size}>"

    # ------------------------------------------------------------ metadata calls
    def _with_wait(self, fn: Any) -> Message:
        deadline = time.monotonic() + self.fs.wait
        while True:
            try:
                return fn()
            except Busy:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _extend(self, size: int, blocks: int, first: int = 0, written: list[list[int]] | None = None) -> None:
        info = self._with_wait(
            lambda: self.fs.call(Extend(self.fid, size, blocks, first, written or []), what=f"writing {self.name}")
        )
        assert isinstance(info, FileInfo)
        before = self.version
        self._set_info(info)
        self._meta_size = info.size
        if info.version != before and (self._pending or self._batch):
            self._drain(0)  # a new layout: settle the writes sent under the old one before sending newer ones
