"""Keeping freed block buffers in the process, and reserving memory ahead: glibc malloc settings for processes
that move blocks through zmq.

libzmq allocates one buffer per received frame (a 512 KiB block: one ``malloc``) and frees it when Python drops the
frame. With glibc's defaults such a buffer is mapped and unmapped, or the heap it came from is trimmed as soon as more
than about twice its size is free, so every block received touches fresh pages: on the development machine (a
virtual machine) those page faults cost as much CPU as the TCP receive itself. Raising the mmap threshold and the trim
threshold makes freed buffers go back to malloc's free lists and be reused by the next frames
(:func:`keep_freed_buffers`).

A data server keeps the frames it receives, so a store that grows still needs fresh pages for every block.
:func:`reserve` takes them ahead, at start, out of the write path (as memcached's ``-L`` or a database's buffer
pool): every thread allocates from the main heap, and ``nbytes`` of it are allocated, touched and freed, so that
malloc keeps them at the top of the heap, in memory, for the frames to come.

Notes:
    This changes process-wide malloc settings, once: when the first :class:`~._client.FileSystem` is made (the client
    receives every block it reads into such a buffer) and when a data server starts (blocks it drops, of removed
    or rewritten files, free their buffers for the next blocks it receives). A process that set its own
    (``MALLOC_*_`` environment variables or ``GLIBC_TUNABLES`` with malloc tunables) keeps them, and a C library
    other than glibc is left alone: neither keeps nor reserves. Memory freed by large buffers stays with the
    process (at most :data:`TRIM` bytes at the top of each malloc heap above what is in use, plus the reserve;
    heaps that become entirely free are still returned).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os

__all__ = ["MAX_RESERVE", "MMAP_THRESHOLD", "TRIM", "give_back", "keep_freed_buffers", "reserve"]

log = logging.getLogger(__name__)

MMAP_THRESHOLD = 32 << 20  # glibc's largest: buffers up to 32 MiB come from the heap and are reused
TRIM = 128 << 20  # free bytes at the top of a heap kept before they are returned to the system
MAX_RESERVE = 1 << 30  # the largest reserve (glibc takes its settings as C ints)
PIECE = 256 << 10  # the reserve is touched in pieces smaller than a block's buffer: malloc hands out the memory they
# took in the order it hands it to the next buffers, even once free memory is split between the blocks still kept

_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_applied: bool | None = None
_reserved = False  # whether reserve() took memory ahead


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """glibc, loaded once (finding it runs ``ldconfig``), or None for another C library."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 - glibc only (musl has no such settings)
    except (OSError, AttributeError):
        return None
    libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    libc.malloc.argtypes, libc.malloc.restype = [ctypes.c_size_t], ctypes.c_void_p
    libc.free.argtypes, libc.free.restype = [ctypes.c_void_p], None
    libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    return libc


def keep_freed_buffers() -> bool:
    """Apply the settings (once per process); returns whether they are in effect."""
    global _applied
    if _applied is None:
        _applied = _apply()
    return _applied


def _apply() -> bool:
    env = os.environ
    own = any(k.startswith("MALLOC_") and k.endswith("_") for k in env)
    if own or "glibc.malloc" in env.get("GLIBC_TUNABLES", ""):
        return False  # the process chose its own malloc settings
    libc = _libc()
    if libc is None:
        return False
    ok = bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, TRIM))
    if not ok:
        log.debug("mallopt refused the buffer settings")
    return ok


def reserve(nbytes: int) -> int:
    """Keep about ``nbytes`` (at most :data:`MAX_RESERVE`) of touched memory at the top of the heap for the buffers
    to come; returns the bytes reserved (0: none, when ``nbytes`` is not positive or :func:`keep_freed_buffers` is not
    in effect).

    Call it before any other thread starts (before a zmq context): from then on every thread allocates from the main
    heap (one malloc arena), the one reserved. The reserve is kept when buffers are freed: free memory at the top of
    the heap goes back to the system only beyond ``nbytes`` + :data:`TRIM`, and then down to ``nbytes``.
    """
    libc = _libc() if nbytes > 0 and keep_freed_buffers() else None
    if libc is None:
        return 0
    nbytes = min(nbytes, MAX_RESERVE)
    ok = all(libc.mallopt(opt, val) for opt, val in (
        (_M_ARENA_MAX, 1), (_M_TOP_PAD, nbytes), (_M_TRIM_THRESHOLD, nbytes + TRIM)))
    if not ok:
        log.debug("mallopt refused the reserve settings")
        return 0
    return _touch(libc, _take(libc, nbytes))


def give_back(nbytes: int) -> int:
    """Return the free memory of the heap to the system (as glibc's ``malloc_trim``: whole free pages, wherever they
    are, not only at the heap's top, which blocks still kept may hold up), except ``nbytes`` (at most
    :data:`MAX_RESERVE`), kept as the reserve; returns the bytes reserved. The reserve is taken out of the free
    memory before the rest goes back, so pages still in memory stay there instead of being given back and faulted
    in again (on a virtual machine, seconds for 512 MiB). Only after :func:`reserve` took memory ahead (0
    otherwise)."""
    libc = _libc() if _reserved else None
    if libc is None:
        return 0
    pieces = _take(libc, min(nbytes, MAX_RESERVE))
    libc.malloc_trim(0)
    return _touch(libc, pieces)


def _take(libc: ctypes.CDLL, nbytes: int) -> list[int]:
    """``nbytes`` of heap in pieces (fewer where malloc fails)."""
    pieces = []
    for _ in range(-(-nbytes // PIECE)):
        p = libc.malloc(PIECE)
        if not p:
            break
        pieces.append(p)
    return pieces


def _touch(libc: ctypes.CDLL, pieces: list[int]) -> int:
    """Write every page of ``pieces`` and free them: malloc keeps them for the next buffers; the bytes kept."""
    global _reserved
    for p in pieces:
        ctypes.memset(p, 0, PIECE)
    for p in reversed(pieces):
        libc.free(p)
    _reserved = True
    return len(pieces) * PIECE
