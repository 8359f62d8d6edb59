"""Unmodified programs through a FUSE mount of adhocfs, each compared byte for byte with the same work on a local
folder: cp, tar, dd, fio, numpy, h5py, a shell pipeline, renames; what is not supported answers its errno."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import random
import shutil
import time
from pathlib import Path

import pytest
from mount_util import digest_tree, mounted, need_fuse, no_leaked_mounts, sh  # noqa: F401 - fixture

pytestmark = pytest.mark.usefixtures("no_leaked_mounts")


@pytest.fixture(scope="module")
def mnt(dep2, tmp_path_factory):
    """The module's file system mounted on a directory (unmounted at the end, whatever happens)."""
    need_fuse()
    path = tmp_path_factory.mktemp("mnt")
    with mounted(dep2.address, path, timeout=5.0):
        yield path


@pytest.fixture
def pair(mnt, tmp_path, request):
    """A fresh directory in the mount and one on the local disk, for the same work."""
    remote = mnt / request.node.name
    remote.mkdir()
    local = tmp_path / "local"
    local.mkdir()
    return remote, local


def _tree(root: Path, rng: random.Random) -> None:
    """1,000 small files in 20 directories (two levels) and a few large ones, sizes on and off block bounds."""
    for i in range(1000):
        d = root / f"d{i % 10}" / f"e{i % 20 // 10}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.dat").write_bytes(rng.randbytes(rng.choice([0, 1, 100, 4095, 4096, rng.randrange(9000)])))
    for name, size in (("big1", (3 << 20) + 7), ("big2", 512 << 10), ("big3", (9 << 20) - 1)):
        (root / name).write_bytes(rng.randbytes(size))


def test_cp_and_tar_round_trips(pair, tmp_path):
    """Into the mount with cp and out with tar, into it with tar and out with cp: the same bytes every time."""
    remote, local = pair
    _tree(local / "src", random.Random(1))
    want = digest_tree(local / "src")
    assert sum(1 for v in want.values() if v != "dir") == 1003
    sh(f"cp -r {local}/src {remote}/cp && tar -C {remote}/cp -cf {local}/a.tar . && mkdir {local}/untar "
       f"&& tar -C {local}/untar -xf {local}/a.tar")
    assert digest_tree(local / "untar") == want
    sh(f"mkdir {remote}/tar && tar -C {remote}/tar -xf {local}/a.tar && cp -r {remote}/tar {local}/back")
    assert digest_tree(local / "back") == want
    assert sorted(os.listdir(remote / "tar")) == sorted(os.listdir(local / "src"))


def test_dd_at_odd_offsets_truncate_and_stat(pair):
    remote, local = pair
    rng = random.Random(2)
    src = local / "src.bin"
    src.write_bytes(rng.randbytes(5 << 20))
    steps = [(0, 1, 3 << 20), (1, 4097, 1000), (3, 524287, 2), (7, 999_999, 3), (0, (5 << 20) - 5, 17), (3, 7 << 20, 9)]
    for where in (remote, local):
        sh(f"dd if={src} of={where}/f bs=1M status=none")
        for skip, seek, count in steps:  # bytes: from src at skip, into f at seek (past the end: a hole)
            sh(f"dd if={src} of={where}/f bs=64K skip={skip} seek={seek} count={count} iflag=skip_bytes,count_bytes "
               "oflag=seek_bytes conv=notrunc status=none")
        sh(f"dd if={src} of={where}/f bs=4096 seek=333 count=3 oflag=seek_bytes conv=notrunc status=none")
    assert (remote / "f").read_bytes() == (local / "f").read_bytes()
    assert os.stat(remote / "f").st_size == (7 << 20) + 9
    for size in (123_456, 3 << 20, 0, 10_000):
        os.truncate(remote / "f", size)
        os.truncate(local / "f", size)
        assert os.stat(remote / "f").st_size == size
    assert (remote / "f").read_bytes() == (local / "f").read_bytes()
    before = os.stat(remote / "f").st_mtime
    fd = os.open(remote / "f", os.O_RDWR)
    try:
        assert os.pwrite(fd, b"x" * (3 << 20), 5) == 3 << 20  # one write call above max_write: split by the kernel
        os.fsync(fd)
        assert os.fstat(fd).st_size == (3 << 20) + 5
    finally:
        os.close(fd)
    assert os.stat(remote / "f").st_mtime >= before
    assert (remote / "f").read_bytes()[:6] == b"\0" * 5 + b"x"


def test_fio_writes_verified(mnt):
    if not shutil.which("fio"):
        pytest.skip("fio is not installed (Debian: apt-get install fio)")
    for rw, bs in (("randwrite", "64k"), ("write", "1M")):
        out = sh(f"fio --name=v --filename={mnt}/fio-{rw}.dat --size=48M --bs={bs} --rw={rw} --verify=crc32c "
                 "--do_verify=1 --verify_fatal=1 --ioengine=psync --verify_state_save=0 --output-format=terse",
                 timeout=240)
        fields = out.strip().splitlines()[-1].split(";")
        assert fields[4] == "0", out  # fio's error field: 0, the written data read back with its checksums
        os.unlink(mnt / f"fio-{rw}.dat")


def test_numpy_h5py_and_pipeline(pair):
    import h5py
    import numpy as np

    remote, local = pair
    arr = np.random.default_rng(3).normal(size=(300, 1000))
    for where in (remote, local):
        np.save(where / "a.npy", arr)
        with h5py.File(where / "x.h5", "w") as h:
            h.create_dataset("g/arr", data=arr, chunks=(50, 1000))
            h["g"].attrs["note"] = "adhocfs"
        with h5py.File(where / "x.h5", "a") as h:
            h["g/arr"][10:20] = 7.0
            h["more"] = np.arange(100_000)
        sh("seq 1 300000 | gzip -1 > big.gz && zcat big.gz | sort -r > sorted.txt && cut -c1-3 sorted.txt | uniq -c "
           "| sha256sum > sum.txt", cwd=where)
    assert (remote / "a.npy").read_bytes() == (local / "a.npy").read_bytes()
    assert np.array_equal(np.load(remote / "a.npy"), arr)
    assert np.array_equal(np.load(remote / "a.npy", mmap_mode="r"), arr)  # a shared read-only mapping
    with h5py.File(remote / "x.h5", "r") as h, h5py.File(local / "x.h5", "r") as g:
        assert np.array_equal(h["g/arr"][...], g["g/arr"][...])
        assert h["g"].attrs["note"] == "adhocfs"
        assert np.array_equal(h["more"][...], np.arange(100_000))
    assert (remote / "sum.txt").read_text() == (local / "sum.txt").read_text()
    assert (remote / "big.gz").read_bytes() == (local / "big.gz").read_bytes()


def _renameat2(src: Path, dst: Path, flags: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.renameat2(-100, os.fsencode(src), -100, os.fsencode(dst), flags)  # AT_FDCWD
    return 0 if rc == 0 else ctypes.get_errno()


def _fallocate(path: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    fd = os.open(path, os.O_RDWR)
    try:
        if libc.fallocate(fd, 0, 0, 1 << 20):
            raise OSError(ctypes.get_errno(), "fallocate")
    finally:
        os.close(fd)


def test_renames(pair):
    remote, local = pair
    for where in (remote, local):
        (where / "old").write_bytes(b"old" * 1000)
        (where / "new").write_bytes(b"new" * 2000)
        os.rename(where / "new", where / "old")  # over an existing file: it is replaced
        sh("mkdir -p a/b e && echo hi > a/b/c && mv a z && mv z e/", cwd=where)
        os.mkdir(where / "empty")
        os.rename(where / "e", where / "empty")  # over an empty directory
    assert digest_tree(remote) == digest_tree(local)
    assert (remote / "old").read_bytes() == b"new" * 2000
    assert (remote / "empty/z/b/c").read_text() == "hi\n"
    (remote / "full").mkdir()
    (remote / "full/x").write_text("x")
    with pytest.raises(OSError) as e:
        os.rename(remote / "empty", remote / "full")
    assert e.value.errno == errno.ENOTEMPTY
    (remote / "p").write_text("p")
    assert _renameat2(remote / "p", remote / "old", 1) == errno.EEXIST  # RENAME_NOREPLACE
    assert _renameat2(remote / "p", remote / "old", 2) == errno.EINVAL  # RENAME_EXCHANGE
    assert (remote / "old").read_bytes() == b"new" * 2000 and (remote / "p").read_text() == "p"
    with pytest.raises(OSError) as e:
        os.rename(remote / "empty", remote / "empty/z/inside")
    assert e.value.errno == errno.EINVAL


def test_open_files_shared_on_one_mount(pair):
    """Two descriptors of one file on a mount see each other's writes at once; an unlinked open file stays
    readable until closed."""
    remote, _ = pair
    w = os.open(remote / "f", os.O_CREAT | os.O_WRONLY)
    r = os.open(remote / "f", os.O_RDONLY)
    try:
        os.pwrite(w, b"abc" * 100_000, 0)
        assert os.pread(r, 9, 299_991) == b"abcabcabc"
        assert os.stat(remote / "f").st_size == 300_000
        os.unlink(remote / "f")
        assert not (remote / "f").exists()
        assert os.pread(r, 3, 0) == b"abc"
    finally:
        os.close(w)
        os.close(r)
    deadline = time.monotonic() + 10  # the last close's release reaches the daemon after close() returned
    while [n for n in os.listdir(remote) if n.startswith(".fuse_hidden")] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.listdir(remote) == []


def test_unsupported_operations_answer_errno(pair):
    remote, _ = pair
    (remote / "f").write_text("f")
    (remote / "d").mkdir()
    (remote / "d/x").write_text("x")
    cases = {
        "link": (lambda: os.link(remote / "f", remote / "g"), errno.EPERM),
        "symlink": (lambda: os.symlink("f", remote / "s"), errno.EPERM),
        "mkfifo": (lambda: os.mkfifo(remote / "p"), errno.EPERM),
        "setxattr": (lambda: os.setxattr(remote / "f", "user.k", b"v"), errno.EOPNOTSUPP),
        "chown": (lambda: os.chown(remote / "f", os.getuid() + 1, -1), errno.EPERM),
        "rmdir non-empty": (lambda: os.rmdir(remote / "d"), errno.ENOTEMPTY),
        "unlink a directory": (lambda: os.unlink(remote / "d"), errno.EISDIR),
        "open a missing file": (lambda: os.open(remote / "nope", os.O_RDONLY), errno.ENOENT),
        "exclusive create": (lambda: os.open(remote / "f", os.O_CREAT | os.O_EXCL | os.O_WRONLY), errno.EEXIST),
        "file in a file": (lambda: os.open(remote / "f/x", os.O_CREAT | os.O_WRONLY), errno.ENOTDIR),
        "fallocate": (lambda: _fallocate(remote / "f"), errno.EOPNOTSUPP),
    }
    for what, (call, code) in cases.items():
        with pytest.raises(OSError) as e:
            call()
        assert e.value.errno == code, what
    os.chmod(remote / "f", 0o600)  # accepted, not kept
    assert os.stat(remote / "f").st_mode & 0o777 == 0o644
    os.utime(remote / "f", (1, 1))  # accepted, not kept: mtime is the last change
    assert os.stat(remote / "f").st_mtime > 1
    fd = os.open(remote / "f", os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)  # locks are the kernel's, on this host only
        fcntl.lockf(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    assert (remote / "f").read_text() == "f"


def test_two_mounts_of_one_file_system(dep2, mnt, tmp_path):
    """What one mount wrote and closed, another (a second host's) reads; a removal is seen at once. The second
    mount lets other users in, showing every file as its owner's."""
    with mounted(dep2.address, tmp_path / "second", allow_other=True, uid=4321, gid=4322) as rec:
        other = Path(rec.dir)
        data = random.Random(4).randbytes((2 << 20) + 3)
        (mnt / "shared.bin").write_bytes(data)
        assert (other / "shared.bin").read_bytes() == data
        st = os.stat(other / "shared.bin")
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (4321, 4322, 0o644)
        assert "allow_other" in next(ln for ln in open("/proc/self/mounts") if f" {rec.dir} " in ln)
        with open(other / "shared.bin", "ab") as f:
            f.write(b"tail")
        assert os.stat(mnt / "shared.bin").st_size == len(data) + 4
        assert (mnt / "shared.bin").read_bytes() == data + b"tail"
        os.unlink(other / "shared.bin")
        assert not (mnt / "shared.bin").exists()


def test_reads_ask_for_attributes_only_past_the_size(dep2, mnt, tmp_path):
    """A program reading in small calls costs no attribute request (a metadata round trip) per call: the kernel
    asks only for a read past the size it knows. Close-to-open holds all the same: a file rewritten in place on
    another mount (same size, other bytes) is read anew at the next open, and one grown there is read to its new
    end, even by a descriptor opened before."""
    old, new = random.Random(5).randbytes(4 << 20), random.Random(6).randbytes(4 << 20)
    (mnt / "attrs.bin").write_bytes(old)
    with mounted(dep2.address, tmp_path / "reader") as rec:
        path = Path(rec.dir) / "attrs.bin"
        with open(path, "rb", buffering=0) as f:
            got = b"".join(iter(lambda: f.read(4096), b""))  # 1,024 read() calls
        assert got == old
        (mnt / "attrs.bin").write_bytes(new)  # rewritten in place on the other mount, and closed
        with open(path, "rb", buffering=0) as f:
            assert f.read(len(new) + 1) == new
            with open(mnt / "attrs.bin", "ab") as g:
                g.write(b"more")
            f.seek(len(new) - 2)
            assert f.read(10) == new[-2:] + b"more"
    served = next(ln for ln in Path(rec.log).read_text().splitlines()[::-1] if "requests served" in ln)
    parts = served.split("requests served: ")[1].rstrip(")").split(", ")
    counts = {k: int(v) for k, v in (part.split() for part in parts)}
    assert counts["read"] >= 2
    assert counts["getattr"] < 40, served  # was one per read() call: over 1,024


def test_a_file_opened_only_to_write_bypasses_the_page_cache(dep2, tmp_path):
    """A descriptor opened write-only sends each write to the mount's daemon as the program made it: 1 MiB
    from a page-aligned buffer at an unaligned offset is one request. Through a read-write descriptor the same
    write goes through the page cache, which cuts it at its last page (two requests); both read back exact."""
    data = random.Random(7).randbytes(1 << 20)
    buf = mmap.mmap(-1, len(data))  # page-aligned, as a program's large buffer is
    buf[:] = data
    with mounted(dep2.address, tmp_path / "w") as rec:
        for name, flags in (("wronly.bin", os.O_WRONLY), ("rdwr.bin", os.O_RDWR)):
            fd = os.open(Path(rec.dir) / name, flags | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                assert os.pwrite(fd, buf, 100) == len(data)
            finally:
                os.close(fd)
            assert (Path(rec.dir) / name).read_bytes() == bytes(100) + data
    served = next(ln for ln in Path(rec.log).read_text().splitlines()[::-1] if "requests served" in ln)
    parts = served.split("requests served: ")[1].rstrip(")").split(", ")
    counts = {k: int(v) for k, v in (part.split() for part in parts)}
    assert counts["write"] == 1 + 2, served
