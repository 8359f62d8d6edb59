"""Mounts on two namespace hosts, as a cluster has them: one mount daemon per host (in the host's network
namespace, so its traffic crosses the test network), and the job's processes on each host see their host's
mount at the same path. MPI-IO from 4 ranks on 2 hosts, read back by another program on another mount."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from mount_util import need_fuse, no_leaked_mounts, unmount_checked  # noqa: F401 - fixture

from tests.conftest import REPO, run_mpi

pytestmark = [pytest.mark.netns, pytest.mark.usefixtures("no_leaked_mounts")]


def _mount_on(host: str, meta: str, path: Path) -> int:
    """Mount on ``host`` (the daemon in its network namespace, the mount visible on the head); its pid."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["nsenter", f"--net=/run/netns/{host}", sys.executable, "-m", "malleable", "fs", "mount",
                           "--meta", meta, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return int(re.search(r"daemon pid (\d+)", done.stdout).group(1))


def _launcher(tmp_path: Path, testbed_launch: str, mounts: Path, job: Path) -> str:
    """An ssh stand-in that logs in to a namespace host with that host's mount bound at the job's path (each
    login has a mount namespace of its own, so the binding is that host's processes' only)."""
    script = tmp_path / "launch-with-mount"
    script.write_text(f"""#!/usr/bin/env bash
set -eu
host=$1; shift
exec {testbed_launch} "$host" "mount --bind {mounts}/$host {job} && $*"
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_two_hosts_share_files_and_mpiio(netns_cluster, tmp_path, monkeypatch):
    from malleable.adhocfs import connect, start_fs

    need_fuse()
    sys.path.insert(0, str(REPO / "examples"))
    from mpiio_mount import expected

    for k, v in netns_cluster.env().items():
        monkeypatch.setenv(k, v)
    hosts = netns_cluster.hosts
    compute = hosts[:2]
    mounts, job = tmp_path / "mounts", tmp_path / "job"
    job.mkdir()
    with start_fs(hosts[2], [hosts[2], hosts[3]], state=str(tmp_path / "st")) as dep:
        pids = {}
        try:
            for h in compute:
                pids[h] = _mount_on(h, dep.address, mounts / h)
                assert pids[h] in netns_cluster.pids_on(h)
            a, b = (mounts / h for h in compute)
            (a / "from-a.txt").write_text("written on " + compute[0])
            (b / "dir").mkdir()
            (b / "dir" / "from-b.bin").write_bytes(os.urandom(1 << 20) + b"end")
            assert (b / "from-a.txt").read_text() == "written on " + compute[0]
            assert (a / "dir" / "from-b.bin").read_bytes()[-3:] == b"end"
            assert sorted(os.listdir(a)) == sorted(os.listdir(b)) == ["dir", "from-a.txt"]

            launcher = _launcher(tmp_path, netns_cluster.launcher, mounts, job)
            monkeypatch.setenv("MALLEABLE_LAUNCHER_LOCALHOST", "head")  # as for netns-launch itself
            out = run_mpi(4, sys.executable, str(REPO / "examples" / "mpiio_mount.py"), "write",
                          str(job / "mpiio.bin"), hosts=compute, env={"MALLEABLE_LAUNCHER_EXEC": launcher},
                          timeout=240).stdout
            assert "4 ranks on 2 hosts wrote" in out, out
            check = subprocess.run(["nsenter", f"--net=/run/netns/{compute[1]}", sys.executable,
                                    str(REPO / "examples" / "mpiio_mount.py"), "check", str(b / "mpiio.bin"), "4"],
                                   capture_output=True, text=True, timeout=120)
            assert check.returncode == 0 and "exact" in check.stdout, check.stdout + check.stderr
            with connect(dep.address) as fs, fs.open("/mpiio.bin", "rb") as f:
                assert f.read() == expected(4).tobytes()
        finally:
            for h, pid in pids.items():
                unmount_checked(str(mounts / h), pid)
