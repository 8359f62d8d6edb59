"""Helpers of the mount tests: a mount that is always taken down, a check that no mount leaks, file comparison."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from malleable.adhocfs._fuse_mount import FSTYPE, MountRecord, fuse_unavailable, mount, mount_point, umount
from tests._procs import running


def need_fuse() -> None:
    """Skip (saying why) where this host cannot mount FUSE file systems."""
    why = fuse_unavailable()
    if why:
        pytest.skip(f"FUSE is unavailable: {why}")


def adhoc_mounts() -> set[str]:
    """Mount points of adhocfs on this host (this mount namespace)."""
    out = set()
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.split()[:1] == [FSTYPE]:
                out.add(left.split()[4])
    return out


def force_unmount(path: str, pid: int | None = None) -> None:
    """Take a mount down whatever state it is in (the daemon is killed if it is still there)."""
    for cmd in (["fusermount3", "-uz", path], ["umount", "-l", path]):
        if mount_point(path) != FSTYPE:
            break
        subprocess.run(cmd, capture_output=True, timeout=30)
    if pid is not None:
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            p.kill()
            p.wait(10)


@contextlib.contextmanager
def mounted(meta: str, path: str | Path, **kwargs) -> Iterator[MountRecord]:
    """Mount ``meta`` on ``path`` for the block; unmount afterwards, forcefully if need be, and fail the test
    if the mount or its daemon outlives it, or libfuse complained about its options."""
    path = str(path)
    os.makedirs(path, exist_ok=True)
    rec = mount(meta, path, **kwargs)
    try:
        yield rec
    finally:
        unmount_checked(path, rec.pid)
    with open(rec.log, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()  # the log is appended to by every mount of this path: this one's part
    mine = lines[max((i for i, ln in enumerate(lines) if f"(pid {rec.pid})" in ln), default=0):]
    complaints = [ln for ln in mine if ln.startswith("Ignoring invalid")]
    assert not complaints, f"libfuse refused the mount's options: {complaints}"


def unmount_checked(path: str, pid: int) -> None:
    """Unmount ``path`` (forcefully if need be); fail the test if the mount or its daemon ``pid`` is left."""
    why = ""
    try:
        umount(path)
    except Exception as e:  # noqa: BLE001 - whatever happened, the mount must go
        why = f"umount failed: {e}"
        force_unmount(path, pid)
    left = mount_point(path) == FSTYPE
    alive = running(pid)
    if left or alive:
        force_unmount(path, pid)
        pytest.fail(f"the mount of {path} outlived its test (mounted: {left}, daemon alive: {alive}) {why}")


@pytest.fixture
def no_leaked_mounts(tmp_path_factory):
    """Fail a test that leaves an adhocfs mount behind in this session's directories (and take it down)."""
    base = str(tmp_path_factory.getbasetemp())
    before = adhoc_mounts()
    yield
    left = {m for m in adhoc_mounts() - before if m.startswith(base)}
    for path in left:
        force_unmount(path)
    if left:
        pytest.fail(f"test leaked adhocfs mounts: {sorted(left)}")


def digest_tree(root: str | Path) -> dict[str, str]:
    """Relative path -> SHA-256 of every file under ``root`` (directories as ``dir``)."""
    root = Path(root)
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[str((Path(dirpath) / d).relative_to(root))] = "dir"
        for name in filenames:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def sh(cmd: str, cwd: str | Path | None = None, timeout: float = 120) -> str:
    """Run a shell command; fail the test with its output if it exits non-zero."""
    done = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode:
        pytest.fail(f"{cmd!r} exited {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return done.stdout
