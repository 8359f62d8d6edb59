"""Staging files and folders between the local file system and a job's adhocfs, as the job's own user.

The daemon may run as root; a job's ``--stage-in``/``--stage-out`` paths are the submitting user's. So staging runs
in a child process (``python -m malleable.controller.daemon._stager``) that drops to the user's uid, gid and groups
(as slurmstepd does) *before* it touches any path: a user stages only what that user may read and write. The child
reads one request (JSON on stdin: the file system's address and secret, the direction, the ``(src, dst)`` pairs and
the identity), copies each pair and prints one JSON line per pair (``src``, ``dst``, ``size``, ``error``).

Every local file is reached without following a link at its last step, and checked by descriptor:

- a stage-in source is opened once, ``O_NOFOLLOW|O_NONBLOCK``, ``fstat``-checked (a regular file, or a folder whose
  entries are opened relative to it the same way); a FIFO, device or socket is refused in one line, and the bytes
  copied are read from that descriptor;
- a stage-out file is written to a new name in its destination folder (``O_CREAT|O_EXCL|O_NOFOLLOW``, checked
  regular), ``fsync``-ed and renamed over the destination only when complete, so a failed copy leaves no partial file
  and nothing already there is written through. A file larger than :data:`SMALL` is first given its size on the
  disk (a full disk fails before any byte is copied) and written straight to the disk while the next bytes are read
  (:mod:`._localcopy`).

Small files (up to :data:`SMALL` bytes) go in batches: a stage-in writes a batch with one bulk request, a stage-out
of a folder reads one with a request per data server (:mod:`malleable.adhocfs._bulk`) and writes each file as
above, a batch's syncs and renames grouped (:class:`~._streams.Commit`); :mod:`._stagepaths` opens and makes the local
files.

A destination folder that does not exist is not made (except the last level of a folder staged out): the copy
fails, and the caller keeps the job's file system so that it can be staged out again. :func:`run` is the daemon's
side: it starts the child, reports each pair as it is done, and kills the child on a deadline or when asked to stop.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import io
import json
import mmap
import os
import pwd
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ._localcopy import copy_into, go_direct, reserve
from ._stagepaths import StageFailure, clear_stale, kind, make_dir_at, new_file, open_folder, open_source
from ._streams import CHUNK, Commit, Parts, Streams, ranges

__all__ = ["Staged", "run"]

SPLIT = 32 << 20
"""A file of at least this many bytes is staged in by every stream at once, in byte ranges (aligned to :data:`CHUNK`);
a stage-out copies every file whole (see :func:`_plan_file_out`)."""
STREAMS = 4
"""Files of a folder copied at once, each stream over a connection of its own (the per-file round trips to the
metadata and data servers overlap)."""
SMALL = 1 << 20
"""A file of at most this many bytes is copied whole with others in bulk requests (a stage-in writes them, a stage-out
of a folder reads them, a batch at a time)."""
WINDOW = 32
"""Blocks a stream's connection leaves unacknowledged while it writes a stage-in (16 MiB of 512 KiB blocks, a
quarter of the client's default): what is in flight is fresh memory to the stager's process, and fresh pages are
costly in a virtual machine (a 512 MiB stage-in over 4 streams faulted 100 MiB in instead of 296, 0.52 s of CPU
instead of 0.63)."""
BATCH_FILES, BATCH_BYTES = 256, 8 << 20
"""Most small files, and bytes, per bulk request."""


@dataclass(frozen=True, slots=True)
class Staged:
    """One ``(src, dst)`` pair: ``size`` bytes copied, or ``error`` says why not."""

    src: str
    dst: str
    size: int
    error: str = ""


# ------------------------------------------------------------------------------------------------ the child
SHRANK = "a source file shrank while it was being copied"
"""Why a stage-in fails when a source file gets shorter during its copy (the copy would not be the file)."""


@contextlib.contextmanager
def _mapped(fd: int, off: int, length: int) -> Iterator[memoryview | None]:
    """Bytes ``off .. off + length`` of ``fd`` as a read-only mapping of the file (sent to the file system without
    a copy: the page cache's pages go straight to the socket), or None where the file cannot be mapped (then it is
    read). Mapped pages past the file's end kill the process with SIGBUS: a file that shrinks during the copy ends
    the stager, which :func:`run` reports (:data:`SHRANK`)."""
    try:
        m = mmap.mmap(fd, length, prot=mmap.PROT_READ, offset=off) if length else None
    except (OSError, ValueError):
        m = None
    view = memoryview(m) if m is not None else None
    try:
        yield view
    finally:
        if view is not None and m is not None:
            view.release()
            with contextlib.suppress(BufferError):  # pieces still held (a failed copy): unmapped once dropped
                m.close()


def _copy_range_in(fd: int, dst: str, off: int, length: int, parts: Parts) -> Callable[[Any], int]:
    """The job copying bytes ``off .. off + length`` of descriptor ``fd`` (``off`` a multiple of :data:`CHUNK`) into
    ``dst`` (made at its full size)."""
    def job(fs: Any) -> int:
        ok = False
        try:
            if fs is None:
                return 0
            n = _copy_in(fs, fd, dst, "r+b", off, length)
            ok = True
            return n
        finally:
            parts.done(ok)
    return job


def _copy_file_in(fd: int, dst: str) -> Callable[[Any], int]:
    """The job copying what descriptor ``fd`` (checked regular) holds to ``dst``; it closes ``fd``."""
    def job(fs: Any) -> int:
        try:
            return 0 if fs is None else _copy_in(fs, fd, dst, "wb", 0, os.fstat(fd).st_size)
        finally:
            os.close(fd)
    return job


def _copy_in(fs: Any, fd: int, dst: str, mode: str, off: int, length: int) -> int:
    """Copy bytes ``off .. off + length`` of ``fd`` to the same place in ``dst`` (opened with ``mode``), from a
    mapping of the file where it can be mapped; fewer bytes than that in the file fails the copy (:data:`SHRANK`)."""
    n = 0
    with _mapped(fd, off, length) as view, fs.open(dst, mode) as out:
        out.seek(off)
        while n < length:
            k = min(CHUNK, length - n)
            if view is not None:
                n += out.write(view[n : n + k], copy=False)   # the file's pages, unchanged until acknowledged
            elif chunk := os.pread(fd, k, off + n):
                n += out.write(chunk)
            else:
                raise StageFailure(f"{SHRANK} ({off + n} of its {off + length} bytes were there)")
    return n


class _Batches:
    """Small files handed to the streams a batch at a time (at most :data:`BATCH_FILES` files or
    :data:`BATCH_BYTES` bytes): ``copy(fs, batch)`` copies one batch over a stream's connection, with one bulk
    request where a file apiece would cost an open, a transfer and a close; a batch may span folders."""

    def __init__(self, streams: Streams, copy: Callable[[Any, list[Any]], int]) -> None:
        self.streams, self.copy = streams, copy
        self.files: list[Any] = []
        self.nbytes = 0

    def add(self, file: Any, size: int) -> None:
        self.files.append(file)
        self.nbytes += size
        if len(self.files) >= BATCH_FILES or self.nbytes >= BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        files, self.files, self.nbytes = self.files, [], 0
        if files:
            self.streams.put(lambda fs: self.copy(fs, files) if fs is not None else 0)


def _read_whole(fd: int) -> bytes:
    """What descriptor ``fd`` (checked regular) holds; ``fd`` is closed."""
    try:
        return b"".join(iter(lambda: os.read(fd, CHUNK), b""))
    finally:
        os.close(fd)


def _refuse_special(mode: int, name: str) -> None:
    """Refuse ``name`` unless it is a regular file (a folder is walked before)."""
    if not stat.S_ISREG(mode):
        raise StageFailure(f"{name} is {kind(mode)}: only regular files and folders are staged")


def _plan_in(fs: Any, fd: int, name: str, dst: str, streams: Streams, own: bool, small: _Batches) -> None:
    """Hand the copy of what descriptor ``fd`` (a regular file or a folder) holds to ``streams``, folders made
    here first; ``fd`` is closed here (a folder's, a small file's) or by its job (a file's), ``own`` when it is
    ours to close."""
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            fs.makedirs(dst, exist_ok=True)
            for entry in sorted(os.listdir(fd)):
                if streams.error is not None:
                    return
                child = open_source(entry, fd, f"{name.rstrip('/')}/{entry}")
                _plan_in(fs, child, f"{name}/{entry}", f"{dst.rstrip('/')}/{entry}", streams, True, small)
            return
        _refuse_special(st.st_mode, name)
    except BaseException:
        if own:
            os.close(fd)
        raise
    if not own:
        fd = os.dup(fd)                                   # the caller closes its own
    if st.st_size <= SMALL:                               # written by the stream with one write_files request
        data = _read_whole(fd)
        small.add((dst, data), len(data))
        return
    if streams.n < 2 or st.st_size < SPLIT:
        streams.put(_copy_file_in(fd, dst))
        return
    try:
        with fs.open(dst, "wb") as out:                   # made at its full size; the streams fill its ranges
            out.truncate(st.st_size)
    except BaseException:
        os.close(fd)
        raise
    parts = Parts(len(ranges(st.st_size, streams.n)), lambda ok: os.close(fd))
    for off, length in ranges(st.st_size, streams.n):
        streams.put(_copy_range_in(fd, dst, off, length, parts))


def stage_in(fs: Any, src: str, dst: str, open_fs: Callable[[], Any], streams: int = 1) -> int:
    """Copy local ``src`` (a file, or a folder and all it holds) to ``dst`` in the file system ``fs``, the files
    over ``streams`` connections of their own made by ``open_fs`` (``fs`` itself stays with the calling thread,
    which walks the folders while the streams copy: a connection belongs to one thread)."""
    fd = open_source(src.rstrip("/") or "/")
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            parent = dst.rstrip("/").rsplit("/", 1)[0]
            if parent:
                fs.makedirs(parent, exist_ok=True)
        pool = Streams(open_fs, streams)
        small = _Batches(pool, lambda f, files: f.write_files(files))
        try:
            _plan_in(fs, fd, src, dst, pool, False, small)
            small.flush()
        finally:
            total = pool.join()
        return total
    finally:
        os.close(fd)


def _write_file(fs: Any, src: str, dfd: int, name: str, shown: str, commit: Commit | None = None) -> int:
    """Copy file ``src`` of the file system to ``name`` in folder ``dfd`` (through :func:`_write_new`), straight to
    the disk where it allows (:func:`~._localcopy.copy_into`)."""
    def fill(fd: int) -> int:
        with fs.open(src, "rb") as f:
            size = f.seek(0, io.SEEK_END)                 # as opened: reading no further asks for no new layout
            f.seek(0)
            if size >= SMALL:
                reserve(fd, size)
                go_direct(fd)
            total = copy_into(fd, f.readinto, 0, size)
        os.ftruncate(fd, total)                           # a last piece written padded for the disk ends here
        return total
    return _write_new(dfd, name, shown, fill, commit)


def _write_all(fd: int, data: Any) -> int:
    """Write all of ``data`` to ``fd``; returns its length."""
    view = memoryview(data).cast("B")
    while view:
        view = view[os.write(fd, view):]
    return len(data)


def _write_new(dfd: int, name: str, shown: str, fill: Callable[[int], int], commit: Commit | None) -> int:
    """Make ``name`` in folder ``dfd`` hold what ``fill(fd)`` writes: a new file under a temporary name, checked
    regular, fsync-ed, then renamed over ``name`` (or, with ``commit``, handed to it complete to be made durable
    and renamed with others); removed when anything fails."""
    tmp, fd = new_file(dfd, name, shown)
    done = False
    try:
        total = fill(fd)
        if commit is None:
            os.fsync(fd)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        else:
            commit.add(dfd, tmp, name, shown)
        done = True
    except OSError as e:
        raise StageFailure(f"{shown}: {e.strerror or e}") from None
    finally:
        os.close(fd)
        if not done:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
    return total


def _copy_small_out(commit: Commit, fs: Any, files: list[tuple[str, int, str, str]]) -> int:
    """Stage out a batch of small files ``(source, folder, name, name shown)``: read with one request per data
    server (:meth:`~malleable.adhocfs._client.FileSystem.read_files`) instead of an open and a read apiece, each
    written to a new local file that ``commit`` makes durable and renames with others."""
    try:
        datas = fs.read_files([src for src, _, _, _ in files])
    except OSError as e:
        raise StageFailure(f"{files[0][3].rsplit('/', 1)[0]}: {e.strerror or e}") from None
    total = 0
    for (_, dfd, name, shown), data in zip(files, datas, strict=True):
        total += _write_new(dfd, name, shown, lambda fd, data=data: _write_all(fd, data), commit)
    return total


def _plan_file_out(src: str, dfd: int, name: str, shown: str, streams: Streams, commit: Commit | None = None) -> None:
    """Hand the copy of file ``src`` to ``name`` in folder ``dfd`` to ``streams``, whole (made durable and renamed by
    ``commit`` when given): one stream reads a large file on while its copy writes to the disk
    (:mod:`._localcopy`), where streams copying its ranges at once each needed their own buffers and read-ahead, all
    fresh memory, and were no faster."""
    streams.put(lambda f: _write_file(f, src, dfd, name, shown, commit) if f is not None else 0)


def _plan_tree_out(fs: Any, src: str, dfd: int, shown: str, streams: Streams, dirs: list[int],
                   small: _Batches, commit: Commit) -> None:
    """Hand the copy of what folder ``src`` holds to folder ``dfd`` to ``streams``: its folders made here (their
    descriptors kept in ``dirs`` until the copies are done), its files copied by the streams (small ones in
    batches, ``small``), made durable and renamed by ``commit``."""
    clear_stale(dfd)
    for entry, is_dir, size in sorted(fs.scandir(src)):
        if streams.error is not None:
            return
        path, where = f"{src.rstrip('/')}/{entry}", f"{shown.rstrip('/')}/{entry}"
        if not is_dir and size <= SMALL:
            small.add((path, dfd, entry, where), size)
        elif not is_dir:
            _plan_file_out(path, dfd, entry, where, streams, commit)
        else:
            sub = make_dir_at(entry, dfd, where)
            dirs.append(sub)
            _plan_tree_out(fs, path, sub, where, streams, dirs, small, commit)


def stage_out(fs: Any, src: str, dst: str, open_fs: Callable[[], Any], streams: int = 1) -> int:
    """Copy ``src`` of the file system ``fs`` (a file, or a folder and all it holds) to local ``dst``, the files
    over ``streams`` connections of their own made by ``open_fs`` (as :func:`stage_in`); a folder's last level is
    made, the folders above it must exist."""
    if fs.stat(src).is_dir:
        dfd = open_folder(dst, make_last=True)
        dirs = [dfd]
        pool = Streams(open_fs, streams)
        commit = Commit()
        try:
            try:
                small = _Batches(pool, functools.partial(_copy_small_out, commit))
                _plan_tree_out(fs, src, dfd, dst, pool, dirs, small, commit)
                small.flush()
            finally:
                try:
                    total = pool.join()
                finally:
                    commit.flush()                        # the files copied whole, even when another one failed
            for d in reversed(dirs):
                os.fsync(d)
            return total
        finally:
            for d in dirs:
                os.close(d)
    head, _, name = dst.rpartition("/")
    if not name:
        raise StageFailure(f"{dst}: a file is staged out to a file name, not a folder")
    dfd = open_folder(head or "/", make_last=False)
    try:
        clear_stale(dfd)
        pool = Streams(open_fs, 1)                        # one file: one stream (see _plan_file_out)
        try:
            _plan_file_out(src, dfd, name, dst, pool)
        finally:
            n = pool.join()
        os.fsync(dfd)
        return n
    finally:
        os.close(dfd)


def drop_privileges(uid: int | None, gid: int | None) -> None:
    """Become ``uid``/``gid`` with that user's groups, for good (only when running as root and asked for another
    user)."""
    if os.geteuid() != 0 or uid is None or uid == 0:
        return
    gid = gid if gid is not None else uid
    try:
        groups = os.getgrouplist(pwd.getpwuid(uid).pw_name, gid)
    except KeyError:
        groups = [gid]
    os.setgroups(groups)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise SystemExit("staging: could not drop privileges")


def _die_with_parent(parent: int) -> None:
    """Be killed when the daemon dies (set after the privileges are dropped, which clears it), so a killed
    controller leaves no copy running that its restart would do again."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)                  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        raise SystemExit("staging: the controller is gone")


def main() -> int:
    """The child: one request on stdin, one JSON line per pair on stdout."""
    from malleable.adhocfs._client import connect  # the daemon's own code: loaded before the drop, since the
    from malleable.errors import MalleableError  # user may not read the interpreter's folders

    req = json.loads(sys.stdin.read())
    drop_privileges(req.get("uid"), req.get("gid"))
    _die_with_parent(req["parent"])

    copy = stage_in if req["direction"] == "in" else stage_out
    keep_going = req["direction"] == "out"
    token = req["secret"].encode()
    n_streams = max(1, min(int(req.get("streams") or STREAMS), 16))
    with connect(req["address"], token=token) as fs:
        for src, dst in req["pairs"]:
            try:
                streams = functools.partial(connect, req["address"], token=token, window=WINDOW)
                n, err = copy(fs, src, dst, streams, n_streams), ""
            except (StageFailure, MalleableError, OSError) as e:
                n, err = 0, " ".join(str(e).split())[:400] or type(e).__name__
            print(json.dumps({"src": src, "dst": dst, "size": n, "error": err}), flush=True)
            if err and not keep_going:
                return 1
    return 0


# ------------------------------------------------------------------------------------------------ the daemon
def run(address: str, secret: str, direction: str, pairs: Sequence[tuple[str, str]], *,
        uid: int | None = None, gid: int | None = None, limit: float = 0.0,
        stop: threading.Event | None = None, on_pair: Callable[[Staged], None] | None = None) -> list[Staged]:
    """Stage ``pairs`` (``direction`` "in" or "out") in a child process as ``uid``/``gid``; each pair is given to
    ``on_pair`` when done. The child is killed after ``limit`` seconds (0: none) or once ``stop`` is set; the pairs
    it did not finish are then returned with that error. Stage-in stops at the first failure."""
    env = {k: v for k, v in os.environ.items() if k not in ("MALLEABLE_KEY", "MALLEABLE_KEY_FILE",
                                                               "MALLEABLE_TOKEN")}
    proc = subprocess.Popen([sys.executable, "-m", "malleable.controller.daemon._stager"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd="/")
    why: list[str] = []
    stop = stop or threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + limit if limit > 0 else float("inf")
        while proc.poll() is None:
            if stop.wait(0.1) or time.monotonic() > deadline:
                why.append("cancelled" if stop.is_set() else f"time limit of {limit:g} s reached")
                proc.kill()
                return

    watcher = threading.Thread(target=watch, name="stager-watch", daemon=True)
    watcher.start()
    done: list[Staged] = []
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(json.dumps({"address": address, "secret": secret, "direction": direction,
                                     "pairs": [list(p) for p in pairs], "uid": uid, "gid": gid,
                                     "parent": os.getpid()}).encode())
        proc.stdin.close()
    except OSError:
        pass
    for line in proc.stdout:
        try:
            d = json.loads(line)
            s = Staged(str(d["src"]), str(d["dst"]), int(d["size"]), str(d["error"]))
        except (ValueError, KeyError, TypeError):
            continue
        done.append(s)
        if on_pair is not None:
            on_pair(s)
    err = proc.stderr.read().decode(errors="replace")
    proc.wait()
    watcher.join(1.0)
    if len(done) < len(pairs) and not (direction == "in" and done and done[-1].error):
        reason = why[0] if why else (
            f"failed: {SHRANK}" if proc.returncode == -signal.SIGBUS     # see _mapped
            else "staging ended early: " + " ".join(err.split())[-300:] if err.strip()
            else f"staging ended early (exit {proc.returncode})")
        for src, dst in pairs[len(done):]:
            s = Staged(src, dst, 0, f"stage-{direction} {reason}")
            done.append(s)
            if on_pair is not None:
                on_pair(s)
            if direction == "in":
                break
    return done


if __name__ == "__main__":
    sys.exit(main())
