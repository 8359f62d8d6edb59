"""The mount daemon takes a write request's data from libfuse's buffer vector: memory, a pipe (libfuse spliced the
request into it) or a file at a position; every byte once, in order, and the vector left consumed (libfuse
replaces a pipe it finds with data still in it)."""

from __future__ import annotations

import ctypes
import errno
import os
import threading

import pytest
from mount_util import need_fuse


def _vector(bufs: list[dict[str, int]], idx: int = 0, off: int = 0):
    """A ``struct fuse_bufvec`` holding ``bufs`` (its buffers are an array inside it, as libfuse lays it out)."""
    need_fuse()
    import mfusepy

    from malleable.adhocfs._fuse import _BufVec

    class Vec(ctypes.Structure):
        _fields_ = (("count", ctypes.c_size_t), ("idx", ctypes.c_size_t), ("off", ctypes.c_size_t),
                    ("buf", mfusepy.fuse_buf * len(bufs)))

    assert Vec.buf.offset == _BufVec.buf.offset
    v = Vec(len(bufs), idx, off)
    for i, b in enumerate(bufs):
        v.buf[i] = mfusepy.fuse_buf(**b)
    return v


def test_every_kind_of_buffer(tmp_path):
    from malleable.adhocfs._fuse import FUSE_BUF_FD_SEEK, FUSE_BUF_IS_FD, _take

    mem = ctypes.create_string_buffer(b"HEADmemory-part|", 16)
    piped = os.urandom(300_000)  # more than a pipe takes at once by default: read as it is written
    r, w = os.pipe()
    seekable = tmp_path / "f"
    seekable.write_bytes(b"0123456789file-part|tail")
    fd = os.open(seekable, os.O_RDONLY)
    try:
        writer = threading.Thread(target=os.write, args=(w, piped))
        writer.start()
        v = _vector([
            {"size": 16, "flags": 0, "mem": ctypes.addressof(mem), "fd": -1, "pos": 0},
            {"size": len(piped), "flags": FUSE_BUF_IS_FD, "mem": None, "fd": r, "pos": 0},
            {"size": 10, "flags": FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK, "mem": None, "fd": fd, "pos": 10},
            {"size": 0, "flags": 0, "mem": None, "fd": -1, "pos": 0},  # an empty one, no memory behind it
        ], off=4)
        got = _take(v)
        writer.join(10)
        assert got == b"memory-part|" + piped + b"file-part|"
        assert (v.idx, v.off) == (4, 0)
        os.set_blocking(r, False)
        with pytest.raises(BlockingIOError):
            os.read(r, 1)  # nothing left in the pipe
    finally:
        for x in (r, w, fd):
            os.close(x)


def test_a_pipe_that_ends_early_is_an_error():
    from malleable.adhocfs._fuse import FUSE_BUF_IS_FD, _take

    r, w = os.pipe()
    os.write(w, b"only this")
    os.close(w)
    try:
        v = _vector([{"size": 100, "flags": FUSE_BUF_IS_FD, "mem": None, "fd": r, "pos": 0}])
        with pytest.raises(OSError) as e:
            _take(v)
        assert e.value.errno == errno.EIO
        assert v.idx == 0  # not consumed: libfuse replaces the pipe
    finally:
        os.close(r)
