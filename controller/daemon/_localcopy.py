"""Writing what the stager reads from a job's file system into a local file: straight to the disk, while the next
bytes are read.

A staged-out file must be on the disk before the job's file system may go, so each of its bytes is written to the
disk anyway. Through the page cache it is copied twice and needs fresh pages of memory (which, in a virtual machine
that hands free memory back to its host, fault on the host too: about 1.5-4 ms per MiB here), and then waits for
``fsync``; with ``O_DIRECT`` from page-aligned buffers it goes from the buffer to the disk, at the disk's own speed
(what ``dd oflag=direct`` gets). The stager's thread reads the next pieces while a thread of the copy writes the
earlier ones; the buffers are kept for the files that follow (reused memory costs nothing).
A file system that refuses ``O_DIRECT``, or a piece that cannot be aligned, is written through the page cache.
"""

from __future__ import annotations

import collections
import ctypes
import errno
import fcntl
import itertools
import mmap
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from ._streams import CHUNK

__all__ = ["ALIGN", "BUFFERS", "copy_into", "go_direct", "reserve"]

ALIGN = 4096
"""Offsets, lengths and buffer addresses of direct writes are multiples of this (the largest common disk sector)."""
BUFFERS = 4
"""Buffers of :data:`CHUNK` bytes per copy: pieces read ahead while the earlier ones wait for the disk."""

_LIBC = ctypes.CDLL(None, use_errno=True)
_spare: list[list[memoryview]] = []
_spare_lock = threading.Lock()


def go_direct(fd: int) -> bool:
    """Make ``fd`` write straight to the disk (``O_DIRECT``); False where the file system refuses."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_DIRECT)
    except OSError:
        return False
    return True


def reserve(fd: int, size: int) -> None:
    """Give the new file ``fd`` its ``size`` bytes of disk at once (``fallocate(2)``): direct writes then neither grow
    it nor wait for each other's allocations, and a disk too small fails here, before any byte is copied. Where the
    file system has no such call, the writes allocate as they go."""
    if size and _LIBC.fallocate(fd, 0, ctypes.c_int64(0), ctypes.c_int64(size)) != 0:
        err = ctypes.get_errno()
        if err in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise OSError(err, os.strerror(err))


def copy_into(fd: int, readinto: Callable[[memoryview], int], off: int, length: int) -> int:
    """Copy up to ``length`` bytes that ``readinto(buffer)`` gives (a file's, read on) to ``fd`` at ``off``; returns
    the bytes copied. More than one buffer's worth is written by a thread of the copy while the calling thread reads
    on. On an ``O_DIRECT`` descriptor the last piece is padded to :data:`ALIGN` when it ends the range (the owner
    cuts the file to its size), and a piece the disk refuses that way turns the descriptor to the page cache."""
    with _spare_lock:
        bufs = _spare.pop() if _spare else [memoryview(mmap.mmap(-1, CHUNK)) for _ in range(BUFFERS)]
    try:
        return _copy(fd, readinto, off, length, bufs)
    finally:
        with _spare_lock:
            _spare.append(bufs)


def _copy(fd: int, readinto: Callable[[memoryview], int], off: int, length: int, bufs: list[memoryview]) -> int:
    n = 0
    if length <= CHUNK:                                    # one piece (unless read short): nothing to overlap
        while n < length and (got := readinto(bufs[0][:length - n])):
            _write(fd, bufs[0], got, off + n, n + got == length)
            n += got
        return n
    writes: collections.deque[Future[None]] = collections.deque()
    with ThreadPoolExecutor(1, thread_name_prefix="stager-write") as writer:
        try:
            for i in itertools.count():
                if len(writes) == len(bufs):
                    writes.popleft().result()              # the buffer read into next is written
                buf = bufs[i % len(bufs)]
                got = readinto(buf[:min(CHUNK, length - n)]) if n < length else 0
                if not got:
                    break
                writes.append(writer.submit(_write, fd, buf, got, off + n, n + got == length))
                n += got
            while writes:
                writes.popleft().result()
        finally:
            for w in writes:
                w.cancel()
    return n


def _write(fd: int, buf: memoryview, got: int, at: int, last: bool) -> None:
    """Write ``buf[:got]`` at ``at`` (padded to :data:`ALIGN` when ``last`` and direct)."""
    direct = bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)
    try:
        _pwrite_all(fd, buf[:-(-got // ALIGN) * ALIGN if direct and last else got], at)
    except OSError as e:
        if not direct or e.errno != errno.EINVAL:
            raise
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_DIRECT)   # the page cache from now on
        _pwrite_all(fd, buf[:got], at)


def _pwrite_all(fd: int, view: memoryview, at: int) -> None:
    while view:
        w = os.pwrite(fd, view, at)
        view, at = view[w:], at + w
