"""Copying many files, or the byte ranges of one large file, over several connections to a file system at once.

:class:`Streams` runs ``n`` threads, each with a connection of its own (a connection and its files belong to one
thread), so that the round trips of many small files, and the servers' work on the ranges of a large one, overlap.
The stager (:mod:`._stager`) walks the sources, opens and checks every local file itself, and hands each copy to
the streams as a job. :class:`Commit` makes the local files a stage-out wrote whole durable together before their
renames.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["CHUNK", "COMMIT_FILES", "Commit", "Parts", "Streams", "ranges"]

CHUNK = 4 << 20
"""Bytes read or written at once; ranges of a split file are multiples of it."""
COMMIT_FILES = 256
"""Files written whole that a :class:`Commit` makes durable and renames together."""


class Streams:
    """``n`` threads, each with a connection of its own to the file system, copying the files handed to them, so
    that the round trips of many files (and the servers' work) overlap. A job is ``fn(fs) -> bytes copied``, called
    with the thread's connection, or with None once a copy failed (it then only releases what it holds: a
    descriptor). :meth:`join` returns the bytes copied, or raises the first failure."""

    def __init__(self, open_fs: Callable[[], Any], n: int) -> None:
        self.n = n
        self._q: queue.Queue[Callable[[Any], int] | None] = queue.Queue(maxsize=2 * n)
        self._lock = threading.Lock()
        self.total = 0
        self.error: BaseException | None = None
        self._threads = [threading.Thread(target=self._work, args=(open_fs,), name=f"stager-{i}", daemon=True)
                         for i in range(n)]
        for t in self._threads:
            t.start()

    def _work(self, open_fs: Callable[[], Any]) -> None:
        fs = None
        try:
            fs = open_fs()
        except BaseException as e:  # noqa: BLE001 - reported by join
            self._fail(e)
        while (job := self._q.get()) is not None:
            try:
                n = job(None if self.error is not None else fs)
                with self._lock:
                    self.total += n
            except BaseException as e:  # noqa: BLE001 - reported by join
                self._fail(e)
        if fs is not None:
            fs.close()

    def _fail(self, e: BaseException) -> None:
        with self._lock:
            if self.error is None:
                self.error = e

    def put(self, job: Callable[[Any], int]) -> None:
        """Hand ``job`` to a thread (waits while every thread has two waiting)."""
        self._q.put(job)

    def join(self) -> int:
        for _ in self._threads:
            self._q.put(None)
        for t in self._threads:
            t.join()
        if self.error is not None:
            raise self.error
        return self.total


class Parts:
    """A file copied in byte ranges by several streams: ``finish(ok)`` runs once, after the last range, ``ok`` when
    every range was copied."""

    def __init__(self, n: int, finish: Callable[[bool], None]) -> None:
        self._left, self._ok, self._finish = n, True, finish
        self._lock = threading.Lock()

    def done(self, ok: bool) -> None:
        with self._lock:
            self._left -= 1
            self._ok &= ok
            last = self._left == 0
        if last:
            self._finish(self._ok)


def ranges(size: int, n: int) -> list[tuple[int, int]]:
    """``size`` bytes cut into at most ``n`` ranges ``(offset, length)``, each but the last a multiple of CHUNK
    (so that no two streams write one block)."""
    step = -(-size // n)
    step = -(-step // CHUNK) * CHUNK
    return [(off, min(step, size - off)) for off in range(0, size, step)]


class Commit:
    """Local files written complete under temporary names, made durable together and then renamed over their
    names: one ``syncfs`` per file system for up to :data:`COMMIT_FILES` files, where an ``fsync`` apiece made
    every small file wait for a journal commit of its own. A file is renamed only once its bytes are on disk, as
    with ``fsync``; one whose sync or rename fails is removed, and the first failure is raised."""

    def __init__(self) -> None:
        self._files: list[tuple[int, str, str, str]] = []
        self._lock = threading.Lock()

    def add(self, dfd: int, tmp: str, name: str, shown: str) -> None:
        """File ``tmp`` of folder ``dfd`` (kept open until :meth:`flush`) is complete: rename it over ``name``
        (``shown`` in messages) once durable."""
        with self._lock:
            self._files.append((dfd, tmp, name, shown))
            full = len(self._files) >= COMMIT_FILES
        if full:
            self.flush()

    def flush(self) -> None:
        """Make the files added so far durable and rename them."""
        with self._lock:
            files, self._files = self._files, []
        done = 0
        try:
            for dfd in {os.fstat(d).st_dev: d for d, _, _, _ in files}.values():
                _syncfs(dfd)
            for dfd, tmp, name, _ in files:
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
                done += 1
        except OSError as e:
            for dfd, tmp, _, _ in files[done:]:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
            raise OSError(e.errno, f"{files[done][3]}: {e.strerror or e}") from None


_LIBC = ctypes.CDLL(None, use_errno=True)


def _syncfs(fd: int) -> None:
    """Write out everything of the file system holding ``fd`` (``syncfs(2)``)."""
    if _LIBC.syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
