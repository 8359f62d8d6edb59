"""The file operations of an adhocfs mount: FUSE callbacks (mfusepy over libfuse 3) served by the public client.

Every open file of the mount is one :class:`~._client.AdhocFile` per file id, shared by all descriptors that
have it open on this host, so a process reads what another wrote through the same mount. Its sizes and written
ranges are published when a descriptor is closed (FUSE ``flush``), which gives the file system's close-to-open
consistency to every program. Clients are not thread-safe, so each connection has a lock: metadata requests go
through one connection, open files through a small pool of others (files on different connections proceed at
the same time while one waits for its servers).

What POSIX asks that adhocfs does not keep (hard links, symbolic links, modes, owners, times set by programs,
locks across hosts) is answered as the table in ``docs/adhocfs.md`` says: a clear errno or an accepted no-op,
never a hang; a server that does not answer becomes EIO after the client's timeout.
"""

from __future__ import annotations

import collections
import ctypes
import errno
import functools
import io
import itertools
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import mfusepy
import zmq

from malleable.adhocfs._client import AdhocFile, FileSystem

__all__ = ["MAX_WRITE", "MountOps", "serve"]

log = logging.getLogger(__name__)

MAX_WRITE = 1 << 20
"""Largest FUSE read and write request (libfuse 3 and the kernel allow up to 1 MiB with ``max_pages``)."""
READ_AHEAD_KB = 4096  # kernel read-ahead of the mount: several blocks in flight for sequential readers
FILE_MODE, DIR_MODE = stat.S_IFREG | 0o644, stat.S_IFDIR | 0o755
RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2
FUSE_CAP_ASYNC_READ, FUSE_CAP_AUTO_INVAL_DATA = 1 << 0, 1 << 12
FUSE_BUF_IS_FD, FUSE_BUF_FD_SEEK = 1 << 1, 1 << 2

F = TypeVar("F", bound=Callable[..., Any])


def _errno(exc: BaseException) -> int:
    """The errno a program sees for ``exc``: its own, EINVAL for bad arguments, EIO for the rest."""
    if isinstance(exc, OSError) and isinstance(exc.errno, int) and exc.errno > 0:
        return exc.errno
    if isinstance(exc, io.UnsupportedOperation):
        return errno.EBADF
    if isinstance(exc, ValueError):
        return errno.EINVAL
    return errno.EIO


def answered(func: F) -> F:
    """Turn every failure of an operation into ``OSError(errno)`` (what mfusepy returns to the kernel):
    a missing file quietly, a server that failed or did not answer with a logged EIO."""

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (OSError, ValueError, zmq.ZMQError) as e:
            code = _errno(e)
            if code == errno.EIO:
                log.warning("%s%s: %s", func.__name__, args[1:2], e)
            raise mfusepy.FuseOSError(code) from None
        except Exception:
            log.exception("%s%s failed", func.__name__, args[1:2])
            raise mfusepy.FuseOSError(errno.EIO) from None

    return run  # type: ignore[return-value]


@dataclass
class _Conn:
    """One client connection and the lock that keeps it to one thread at a time."""

    fs: FileSystem
    lock: threading.Lock


@dataclass
class _Node:
    """A file open on this mount: the one client file its descriptors share."""

    fid: int
    conn: _Conn
    file: AdhocFile
    writable: bool
    opens: int
    size: int  # the file's size as this mount knows it (it grows with writes before they are published)
    mtime: float  # when it was opened or last changed through this mount


class MountOps(mfusepy.Operations):
    """FUSE operations of one mount.

    Args:
        connect: makes a new client connection (called once for metadata and ``pool`` times for files).
        pool: connections shared by open files.
        uid, gid: owner shown for every file (the mounting user unless told).
        ready: called once the kernel has finished setting the mount up.
    """

    use_ns = True

    def __init__(self, connect: Callable[[], FileSystem], pool: int = 4, uid: int | None = None,
                 gid: int | None = None, ready: Callable[[], None] | None = None) -> None:
        self._meta = _Conn(connect(), threading.Lock())
        self._pool = [_Conn(connect(), threading.Lock()) for _ in range(max(1, pool))]
        self._next = itertools.cycle(self._pool)
        self._nodes: dict[int, _Node] = {}
        self._paths: dict[str, int] = {}  # path -> file id of the files open for writing here
        self._table = threading.Lock()  # taken before a connection's lock, never after
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        self._ready = ready
        self.is_ready = threading.Event()
        self._closing, self._closed = threading.Lock(), False
        self._started = time.time()
        self.served: collections.Counter[str] = collections.Counter()  # requests by kind, logged at the unmount

    # ------------------------------------------------------------ plumbing
    def close(self) -> None:
        """Close every open file (publishing what was written) and every connection (once)."""
        with self._closing:
            if self._closed:
                return
            self._closed = True
            self._close()

    def _close(self) -> None:
        for node in list(self._nodes.values()):
            with node.conn.lock:
                try:
                    node.file.close()
                except Exception as e:  # noqa: BLE001 - closing down: report and go on
                    log.warning("closing %s at unmount: %s", node.file.name, e)
        self._nodes.clear()
        for conn in (self._meta, *self._pool):
            conn.fs.close()

    def open_files(self) -> int:
        """How many files are open on this mount."""
        return len(self._nodes)

    def _stat(self, path: str) -> Any:
        with self._meta.lock:
            return self._meta.fs.stat(path)

    def _node(self, fh: int) -> _Node:
        node = self._nodes.get(fh)
        if node is None:
            raise OSError(errno.EBADF, f"file handle {fh} is not open")
        return node

    def _attrs(self, is_dir: bool, fid: int, size: int, mtime: float, blksize: int) -> dict[str, Any]:
        ns = int((mtime or self._started) * 1e9)  # the root has no time of its own: the mount's
        return {
            "st_mode": DIR_MODE if is_dir else FILE_MODE,
            "st_nlink": 1,  # also for directories: tools must not count on subdirectory links
            "st_uid": self.uid,
            "st_gid": self.gid,
            "st_size": size,
            "st_blocks": -(-size // 512),
            "st_blksize": blksize or MAX_WRITE,
            "st_atime": ns,
            "st_mtime": ns,
            "st_ctime": ns,
        }

    # ------------------------------------------------------------ set-up
    def init_with_config(self, conn_info: Any, config: Any) -> None:
        if conn_info is not None:
            conn_info.max_write = MAX_WRITE
            conn_info.max_readahead = READ_AHEAD_KB << 10
            # the kernel's read-ahead requests go out together (several in flight, taken by different threads,
            # a little out of order): the client's read-ahead keeps serving them from blocks fetched ahead
            conn_info.want |= FUSE_CAP_ASYNC_READ
            # libfuse 3 asks the kernel to check a file's attributes before every read() and drop its cached pages
            # when they changed; attributes are never cached here, so that was a getattr (a metadata request)
            # per read() call, even one served from the page cache. Without it the kernel asks only for a read
            # past the size it knows, and the pages are dropped at every open: close-to-open all the same
            conn_info.want &= ~FUSE_CAP_AUTO_INVAL_DATA
        if config is not None:
            # close-to-open across hosts: attributes are never cached, so a stat, or a read past the size the
            # kernel knows, asks again (a reader sees another host's published size when it reads up to it); names
            # are kept a second (a file removed on another host may still be found for that long, its open
            # then fails with ENOENT); missing names are not kept (another host's new file is seen at once)
            config.entry_timeout = 1.0
            config.negative_timeout = 0.0
            config.attr_timeout = 0.0
            # inode numbers are libfuse's node ids (the same in stat and readdir; file ids would need a stat
            # per directory entry)
            config.use_ino = 0
            config.readdir_ino = 1
            config.kernel_cache = 0  # the page cache of a file is dropped when it is opened
            config.auto_cache = 0
        self.is_ready.set()
        if self._ready is not None:
            self._ready()

    def destroy(self, path: str) -> None:
        self.close()

    # ------------------------------------------------------------ attributes
    @answered
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        self.served["getattr"] += 1
        node = self._nodes.get(fh if fh is not None else self._paths.get(path, -1))
        if node is not None and node.writable:  # a file being written here: this mount knows best
            return self._attrs(False, node.fid, node.size, node.mtime, node.file.block_size)
        st = self._stat(path)
        size = st.size
        node = self._nodes.get(st.fid)
        if node is not None:
            size = node.size if node.writable else max(size, node.size)
        return self._attrs(st.is_dir, st.fid, size, st.mtime, st.block_size)

    @answered
    def statfs(self, path: str) -> dict[str, int]:
        with self._meta.lock:
            servers = [s for s in self._meta.fs.status().servers if s.get("state") not in ("gone", "lost")]
        frsize = 4096
        used = sum(int(s.get("bytes", 0)) for s in servers)
        # a server without a capacity limit is shown with 1 TiB free (its real limit is its host's memory)
        total = sum(int(s.get("capacity") or (1 << 40)) for s in servers) or (1 << 40)
        free = max(0, total - used) // frsize
        return {"f_bsize": MAX_WRITE, "f_frsize": frsize, "f_blocks": total // frsize, "f_bfree": free,
                "f_bavail": free, "f_files": 1 << 32, "f_ffree": 1 << 31, "f_favail": 1 << 31,
                "f_namemax": 255}

    @answered
    def chmod(self, path: str, mode: int) -> int:
        return 0  # modes are not stored: files show 0644, directories 0755

    @answered
    def chown(self, path: str, uid: int, gid: int) -> int:
        if uid not in (-1, self.uid) or gid not in (-1, self.gid):
            raise OSError(errno.EPERM, "adhocfs keeps no owners: every file belongs to the mounting user")
        return 0

    @answered
    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        return 0  # times are not stored: mtime is the time of the file's last change

    # ------------------------------------------------------------ namespace
    @answered
    def readdir(self, path: str, fh: int) -> Iterator[str]:
        with self._meta.lock:
            names = self._meta.fs.listdir(path)
        return iter([".", "..", *names])

    @answered
    def mkdir(self, path: str, mode: int) -> int:
        with self._meta.lock:
            self._meta.fs.mkdir(path)
        return 0

    @answered
    def rmdir(self, path: str) -> int:
        with self._meta.lock:
            self._meta.fs.remove(path)
        return 0

    @answered
    def unlink(self, path: str) -> int:
        with self._meta.lock:
            self._meta.fs.remove(path)
        self._paths.pop(path, None)
        return 0

    @answered
    def rename(self, old: str, new: str, flags: int = 0) -> int:
        if flags & ~RENAME_NOREPLACE:
            raise OSError(errno.EINVAL, "adhocfs renames do not exchange entries or leave whiteouts")
        with self._meta.lock:
            fs = self._meta.fs
            if flags & RENAME_NOREPLACE and fs.exists(new):
                raise OSError(errno.EEXIST, f"{new} exists")
            try:
                fs.rename(old, new)
            except IsADirectoryError:  # onto a directory: POSIX replaces an empty one (here in two steps)
                if not fs.stat(old).is_dir:
                    raise
                if fs.listdir(new):
                    raise OSError(errno.ENOTEMPTY, f"{new} is not empty") from None
                fs.remove(new)
                fs.rename(old, new)
        with self._table:
            prefix = old.rstrip("/") + "/"
            for path in [p for p in self._paths if p == old or p.startswith(prefix)]:
                self._paths[new + path[len(old):]] = self._paths.pop(path)
        return 0

    @answered
    def link(self, target: str, source: str) -> int:
        raise OSError(errno.EPERM, "adhocfs has no hard links")

    @answered
    def symlink(self, target: str, source: str) -> int:
        raise OSError(errno.EPERM, "adhocfs has no symbolic links")

    @answered
    def mknod(self, path: str, mode: int, dev: int) -> int:
        raise OSError(errno.EPERM, "adhocfs holds regular files and directories only")

    # ------------------------------------------------------------ open files
    def _open(self, path: str, mode: str, trunc: bool) -> int:
        conn = next(self._next)
        writable = mode != "rb"
        with self._table:
            with conn.lock:
                f = conn.fs.open(path, mode)
                size = f.seek(0, io.SEEK_END)
            node = self._nodes.get(f.fid)
            if node is None:
                node = self._nodes[f.fid] = _Node(f.fid, conn, f, writable, 0, size, time.time())
            elif writable and not node.writable:  # a writer joins readers: they share its read-write file
                with node.conn.lock:
                    node.file.close()
                node.conn, node.file, node.writable, node.size = conn, f, True, max(node.size, size)
            else:
                with conn.lock:
                    f.close()
            node.opens += 1
            if writable:
                self._paths[path] = node.fid
        if trunc:
            self._truncate(node, 0)
        return node.fid

    @answered
    def open(self, path: str, flags: int) -> int:
        writable = flags & os.O_ACCMODE != os.O_RDONLY
        return self._open(path, "r+b" if writable else "rb", bool(flags & os.O_TRUNC) and writable)

    @answered
    def create(self, path: str, mode: int, flags: int = 0) -> int:
        try:
            return self._open(path, "x+b", False)
        except FileExistsError:
            if flags & os.O_EXCL:
                raise
        return self._open(path, "r+b", bool(flags & os.O_TRUNC))

    def read_into(self, fh: int, buf: Any, offset: int) -> int:
        """Read the file at ``offset`` into ``buf`` (the kernel's buffer); the number of bytes read."""
        self.served["read"] += 1
        node = self._node(fh)
        with node.conn.lock:
            f = node.file
            f.seek(offset)
            return f.readinto(buf)

    @answered
    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        buf = bytearray(size)
        return bytes(buf[: self.read_into(fh, buf, offset)])

    @answered
    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        self.served["write"] += 1
        node = self._node(fh)
        with node.conn.lock:
            f = node.file
            f.seek(offset)
            n = f.write(data)
            node.size, node.mtime = max(node.size, offset + n), time.time()
        return n

    @answered
    def write_buf(self, path: str | None, bufv: Any, offset: int, fh: int) -> int:
        """A write request as libfuse received it (``bufv``, a ``fuse_bufvec``). Implementing this lets libfuse
        splice write requests into a pipe where a pipe may hold a whole request (2 MiB: ``CAP_SYS_RESOURCE`` or
        ``fs.pipe-max-size``): the data is then read once, straight into the bytes the write-behind keeps, instead
        of being copied into libfuse's buffer by the kernel and out of it again (elsewhere libfuse still does that
        first copy, and this the second, as ``write`` would)."""
        return self.write(path or "", _take(bufv.contents), offset, fh)

    def _truncate(self, node: _Node, length: int) -> None:
        with node.conn.lock:
            node.file.truncate(length)
            node.size, node.mtime = length, time.time()

    @answered
    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        if fh is not None and fh in self._nodes and self._nodes[fh].writable:
            self._truncate(self._nodes[fh], length)
            return 0
        fid = self._open(path, "r+b", False)  # also makes a read-only node of this file writable
        try:
            self._truncate(self._nodes[fid], length)
        finally:
            self.release(path, fid)
        return 0

    @answered
    def flush(self, path: str, fh: int) -> int:
        node = self._node(fh)
        if node.writable:
            with node.conn.lock:
                node.file.flush()
        return 0

    @answered
    def fsync(self, path: str, datasync: int, fh: int) -> int:
        return self.flush(path, fh)

    def release(self, path: str, fh: int) -> int:
        with self._table:
            node = self._nodes.get(fh)
            if node is None:
                return 0
            node.opens -= 1
            if node.opens > 0:
                return 0
            del self._nodes[fh]
            for p in [p for p, fid in self._paths.items() if fid == fh] if node.writable else ():
                del self._paths[p]
            with node.conn.lock:
                try:
                    node.file.close()
                except Exception as e:  # noqa: BLE001 - the program has closed already; flush reported errors
                    log.warning("closing %s: %s", node.file.name, e)
        return 0


class _Fuse(mfusepy.FUSE):
    """mfusepy's FUSE with reads straight into the kernel's buffer, writes taken from libfuse's buffer vector
    (spliced) and rename flags passed on."""

    def read(self, path: bytes | None, buf: Any, size: int, offset: int, fip: Any) -> int:
        out = (ctypes.c_char * size).from_address(ctypes.addressof(buf.contents))
        try:
            return self.operations.read_into(fip.contents.fh, memoryview(out).cast("B"), offset)
        except Exception as e:  # noqa: BLE001 - every failure is an errno for the kernel
            code = _errno(e)
            if code == errno.EIO:
                log.warning("read: %s", e)
            return -code

    def write_buf(self, path: bytes | None, bufv: Any, offset: int, fip: Any) -> int:
        return self.operations.write_buf(None, bufv, offset, fip.contents.fh)  # the path is not needed (nor set)

    def open(self, path: bytes, fip: Any) -> int:
        done = super().open(path, fip)
        _write_around(fip.contents)
        return done

    def create(self, path: bytes, mode: int, fip: Any) -> int:
        done = super().create(path, mode, fip)
        _write_around(fip.contents)
        return done

    def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
        return self.operations.rename(old.decode(self.encoding, self.errors),
                                      new.decode(self.encoding, self.errors), flags)


def _write_around(fi: Any) -> None:
    """A file opened only to be written bypasses the page cache (``direct_io``): its writes go to the mount's
    daemon as the program makes them, without the kernel first copying them into fresh page-cache pages that no
    one reads (without a write-back cache every write is sent at once anyway). Such a descriptor cannot be mapped
    for reading, so nothing that mmap needs is lost; readers keep the page cache and its read-ahead."""
    if fi.flags & os.O_ACCMODE == os.O_WRONLY:
        fi.direct_io = 1


class _BufVec(ctypes.Structure):
    """libfuse's ``struct fuse_bufvec``: its buffers are an array inside it (mfusepy declares a pointer)."""

    _fields_ = (("count", ctypes.c_size_t), ("idx", ctypes.c_size_t), ("off", ctypes.c_size_t),
                ("buf", mfusepy.fuse_buf * 1))


def _take(bufv: Any) -> bytes:
    """The bytes of a libfuse buffer vector from its current position, which is moved to its end (libfuse then
    knows its pipe was emptied: a pipe left with data in it is replaced by a new one)."""
    v = _BufVec.from_address(ctypes.addressof(bufv))
    bufs = (mfusepy.fuse_buf * v.count).from_address(ctypes.addressof(v) + _BufVec.buf.offset)
    parts = []
    for i in range(v.idx, v.count):
        b = bufs[i]
        skip = v.off if i == v.idx else 0
        n = b.size - skip
        if n <= 0:
            continue
        if not b.flags & FUSE_BUF_IS_FD:
            parts.append(ctypes.string_at(b.mem + skip, n))
        elif b.flags & FUSE_BUF_FD_SEEK:
            parts.append(os.pread(b.fd, n, b.pos + skip))
        else:
            got = [os.read(b.fd, n)]
            while (have := sum(map(len, got))) < n:
                more = os.read(b.fd, n - have)
                if not more:
                    raise OSError(errno.EIO, f"a write request's data ended after {have} of {n} bytes")
                got.append(more)
            parts.append(got[0] if len(got) == 1 else b"".join(got))
    v.idx, v.off = v.count, 0
    return parts[0] if len(parts) == 1 else b"".join(parts)  # b"" for none


def serve(ops: MountOps, mountpoint: str, fsname: str, allow_other: bool = False) -> None:
    """Mount ``ops`` at ``mountpoint`` and serve requests (several threads) until it is unmounted."""
    # max_idle_threads given: libfuse 3.14 complains about its own "unset" value otherwise
    opts: dict[str, Any] = {"foreground": True, "fsname": fsname, "subtype": "adhocfs", "max_threads": 16,
                            "max_idle_threads": 16}
    if allow_other:
        opts.update(allow_other=True, default_permissions=True)
    started = time.monotonic()
    threading.Thread(target=_watch, args=(ops, mountpoint), name="unmount-watch", daemon=True).start()
    try:
        _Fuse(ops, mountpoint, **opts)
    finally:
        log.info("%s unmounted after %.1f s (requests served: %s)", mountpoint, time.monotonic() - started,
                 ", ".join(f"{k} {v}" for k, v in sorted(ops.served.items())) or "none")
        ops.close()


def _watch(ops: MountOps, mountpoint: str, every: float = 0.2) -> None:
    """End the daemon once its mount is gone and no file is open on it, should libfuse's loop not return by
    itself (its worker threads are cancelled at the end, which a thread inside Python may not survive)."""
    ops.is_ready.wait()
    dev = os.stat(mountpoint).st_dev
    mine = f"{os.major(dev)}:{os.minor(dev)}"
    gone_since = None
    while True:
        time.sleep(every)
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            present = any(line.split()[2] == mine for line in f)
        if present or ops.open_files():
            gone_since = None
            continue
        gone_since = gone_since or time.monotonic()
        if time.monotonic() - gone_since > 3 * every:
            log.warning("%s is unmounted but libfuse's loop did not return: closing down", mountpoint)
            closer = threading.Thread(target=ops.close, daemon=True)
            closer.start()
            closer.join(10.0)
            logging.shutdown()
            os._exit(0)
