"""Helpers of the job-mount tests: every adhocfs mount under a root in every mount namespace of this machine (the
namespace hosts' included), and a clean-up that takes down whatever a test left."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator

import psutil
import pytest

from malleable.controller.daemon._jobmount import mounts_under


def mounts_anywhere(root: str) -> set[tuple[int, str]]:
    """``(pid, mount point)`` of every adhocfs mount under ``root`` seen by any process of this machine: each mount
    namespace (a host's mount daemon's, a job's login's, this one) is some process's."""
    out = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            out.update((int(name), m) for m in mounts_under(root, f"/proc/{name}/mountinfo"))
    return out


def mount_daemons(root: str) -> list[int]:
    """Pids of the mount daemons (``malleable.adhocfs._fuse_mount``) serving a mount under ``root``."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "malleable.adhocfs._fuse_mount" in cmd and cmd and cmd[-1].startswith(root.rstrip("/") + "/"):
            out.append(p.pid)
    return out


def clean_mounts(root: str) -> set[tuple[int, str]]:
    """Take down every mount under ``root`` (kill its daemon, detach it wherever it is); what was there."""
    left = mounts_anywhere(root)
    for pid in mount_daemons(root):
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    for pid, path in left:
        subprocess.run(["nsenter", f"--mount=/proc/{pid}/ns/mnt", "--", "umount", "-l", "-c", path],
                       capture_output=True, timeout=30, check=False)
    return left


@contextlib.contextmanager
def checked_root(path: str) -> Iterator[str]:
    """A mount root for a test (skips where FUSE is unavailable); fails the test if a mount under it outlives the
    block (and takes it down)."""
    from malleable.adhocfs._fuse_mount import fuse_unavailable

    why = fuse_unavailable()
    if why:
        pytest.skip(f"FUSE is unavailable: {why}")
    yield path
    assert not clean_mounts(path), "a job mount outlived the test"


@pytest.fixture
def root(tmp_path) -> Iterator[str]:
    """The mount root of a test's controller (``--bb-mount-root``), checked as :func:`checked_root` does."""
    with checked_root(str(tmp_path / "mnt")) as path:
        yield path


def fs_phase(c, jid) -> str | None:
    """The phase of job ``jid``'s file system as ``info`` shows it (None: it has none)."""
    return (c.info(jid).job.get("fs") or {}).get("phase")
