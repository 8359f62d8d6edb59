"""Keeping freed block buffers in the process: glibc malloc settings for processes that move blocks through zmq.

libzmq allocates one buffer per received frame (a 512 KiB block: one ``malloc``) and frees it when Python drops the
frame. With glibc's defaults such a buffer is mapped and unmapped, or the heap it came from is trimmed as soon as more
than about twice its size is free, so every block received touches fresh pages: on the development machine (a
virtual machine) those page faults cost as much CPU as the TCP receive itself. Raising the mmap threshold and the trim
threshold makes freed buffers go back to malloc's free lists and be reused by the next frames.

Notes:
    This changes process-wide malloc settings, once: when the first :class:`~._client.FileSystem` is made (the client
    receives every block it reads into such a buffer) and when a data server starts (blocks it drops, of removed
    or rewritten files, free their buffers for the next blocks it receives). A process that set its own
    (``MALLOC_*_`` environment variables or ``GLIBC_TUNABLES`` with malloc tunables) keeps them, and a C library
    other than glibc is left alone. Memory freed by large buffers stays with the process (at most :data:`TRIM`
    bytes at the top of each malloc heap above what is in use; heaps that become entirely free are still returned).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

__all__ = ["MMAP_THRESHOLD", "TRIM", "keep_freed_buffers"]

log = logging.getLogger(__name__)

MMAP_THRESHOLD = 32 << 20  # glibc's largest: buffers up to 32 MiB come from the heap and are reused
TRIM = 128 << 20  # free bytes at the top of a heap kept before they are returned to the system

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_applied: bool | None = None


def keep_freed_buffers() -> bool:
    """Apply the settings (once per process); returns whether they are in effect."""
    global _applied
    if _applied is None:
        _applied = _apply()
    return _applied


def _apply() -> bool:
    env = os.environ
    if any(k.startswith("MALLOC_") and k.endswith("_") for k in env) or "glibc.malloc" in env.get("GLIBC_TUNABLES", ""):
        return False  # the process chose its own malloc settings
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 - glibc only (musl has no such settings)
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM))
    if not ok:
        log.debug("mallopt refused the buffer settings")
    return ok
