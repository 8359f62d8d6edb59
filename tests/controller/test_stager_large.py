"""The stager on large files, through its real child process and real adhocfs servers: a file of several ranges
(copied by every stream at once, written straight to the disk, its last piece padded and cut back) and a file
copied whole come back byte for byte in both directions; a stage-out into a full or a read-only file system fails in
one line, leaves no partial or temporary file there and keeps the data, which a stage-out elsewhere then copies
whole; a source file cut short during its stage-in fails it; and the local copy loop gets the same bytes from a reader
that returns pieces of any length."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest

from malleable.controller.daemon._localcopy import ALIGN, copy_into, go_direct
from malleable.controller.daemon._stager import SHRANK, SPLIT, WINDOW, run
from malleable.controller.daemon._streams import CHUNK
from tests.controller._stager_util import SECRET, stager_fs

dep = stager_fs  # this module's tests take it as `dep`

M = 1 << 20


@pytest.fixture
def small_fs(tmp_path):
    """A 16 MiB tmpfs (a disk that fills up), unmounted after the test."""
    if os.geteuid() != 0:
        pytest.fail("the full-disk test mounts a tmpfs as root (as .ci/run does)")
    where = tmp_path / "small"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "stager-small", str(where)], check=True, timeout=30)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True, timeout=30)


@pytest.mark.timeout(180)
def test_a_file_of_several_ranges_and_one_copied_whole_round_trip_byte_for_byte(dep, tmp_path):
    big = os.urandom(2 * SPLIT + 4097)          # three ranges over the streams, the last one not sector-aligned
    whole = os.urandom(5 * M + 3)               # copied by one stream
    (tmp_path / "big.bin").write_bytes(big)
    (tmp_path / "whole.bin").write_bytes(whole)
    got = run(dep.address, SECRET, "in", [(str(tmp_path / "big.bin"), "/d/big.bin"),
                                          (str(tmp_path / "whole.bin"), "/d/whole.bin")])
    assert [(s.size, s.error) for s in got] == [(len(big), ""), (len(whole), "")]
    (tmp_path / "back").mkdir()
    got = run(dep.address, SECRET, "out", [("/d/big.bin", str(tmp_path / "back" / "big.bin")),
                                           ("/d/whole.bin", str(tmp_path / "back" / "whole.bin"))])
    assert [(s.size, s.error) for s in got] == [(len(big), ""), (len(whole), "")]
    assert (tmp_path / "back" / "big.bin").read_bytes() == big
    assert (tmp_path / "back" / "whole.bin").read_bytes() == whole
    assert sorted(os.listdir(tmp_path / "back")) == ["big.bin", "whole.bin"]      # no temporary file left


@pytest.mark.timeout(180)
def test_a_stage_out_to_a_full_or_read_only_disk_fails_in_one_line_and_keeps_the_data(dep, tmp_path, small_fs):
    big = os.urandom(SPLIT + 3 * M + 5)         # more than the 16 MiB disk holds
    (tmp_path / "big.bin").write_bytes(big)
    assert run(dep.address, SECRET, "in", [(str(tmp_path / "big.bin"), "/big.bin")])[0].error == ""
    got = run(dep.address, SECRET, "out", [("/big.bin", str(small_fs / "big.bin"))])
    assert got[0].size == 0 and "No space left on device" in got[0].error and "\n" not in got[0].error, got
    assert os.listdir(small_fs) == []                                            # nothing partial, no temporary
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True, timeout=30)
    got = run(dep.address, SECRET, "out", [("/big.bin", str(small_fs / "big.bin"))])
    assert got[0].size == 0 and "Read-only file system" in got[0].error, got
    got = run(dep.address, SECRET, "out", [("/big.bin", str(tmp_path / "again.bin"))])   # the data is still there
    assert [(s.size, s.error) for s in got] == [(len(big), "")]
    assert (tmp_path / "again.bin").read_bytes() == big


@pytest.mark.timeout(180)
def test_a_source_file_that_shrinks_during_its_stage_in_fails_it_and_is_never_staged_short(dep, tmp_path):
    """The stager sends a large file straight from a mapping of it. The data servers are stopped, so the copy is
    held with at most the streams' windows sent; the source is then cut to nothing and the servers go on: the
    stage-in fails in one line saying why (the child reading past the file's new end, by mapping or by read), and
    no stage-in reports the file staged (before the mapping, a read cut short ended the copy as a success)."""
    from malleable.adhocfs import connect

    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(4 * SPLIT + 4 * M))          # far more than 4 streams' windows of blocks
    assert src.stat().st_size > 8 * WINDOW * 512 * 1024
    servers = [p for name, p in dep.procs.items() if name.startswith("data")]
    got: list = []
    for p in servers:
        p.send_signal(signal.SIGSTOP)
    try:
        copy = threading.Thread(target=lambda: got.extend(run(dep.address, SECRET, "in", [(str(src), "/big.bin")])))
        copy.start()
        with connect(dep.address, token=SECRET, timeout=30) as fs:
            deadline = time.monotonic() + 60
            while not fs.exists("/big.bin"):                   # made at its full size before any byte is sent
                assert time.monotonic() < deadline, "the stager never made its destination"
                time.sleep(0.01)
        os.truncate(src, 0)
    finally:
        for p in servers:
            p.send_signal(signal.SIGCONT)
    copy.join(120)
    assert not copy.is_alive()
    assert len(got) == 1 and got[0].size == 0 and SHRANK in got[0].error and "\n" not in got[0].error, got


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("size", [3 * M + ALIGN + 11, 2 * CHUNK + ALIGN + 11])     # one buffer; two, overlapped
def test_the_local_copy_loop_writes_pieces_of_any_length_at_their_offsets(tmp_path, direct, size):
    data = os.urandom(size)
    sizes = iter([ALIGN, 3 * ALIGN, 1000, M, 5, 2 * M, 7 * ALIGN])              # aligned, then not, then aligned

    def readinto(buf, pos=[0]):  # noqa: B006 - the reader's position
        n = min(len(buf), next(sizes, len(buf)), len(data) - pos[0])
        buf[:n] = data[pos[0]:pos[0] + n]
        pos[0] += n
        return n

    fd = os.open(tmp_path / "out.bin", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        os.pwrite(fd, b"x" * ALIGN, 0)                                             # before the range: kept
        assert (go_direct(fd) if direct else True)
        assert copy_into(fd, readinto, ALIGN, len(data)) == len(data)
        os.ftruncate(fd, ALIGN + len(data))
    finally:
        os.close(fd)
    assert (tmp_path / "out.bin").read_bytes() == b"x" * ALIGN + data
