"""Shared fixtures: leaked-process detection, an mpiexec runner, and the network-namespace test cluster
(``malleable testbed``, :mod:`malleable.launch._testbed`)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from malleable.launch import _testbed
from tests._procs import cmdline, running

REPO = Path(__file__).resolve().parent.parent

NETNS_HOSTS = int(os.environ.get("MALLEABLE_TEST_HOSTS", "4"))

# Data servers take 16 MiB of memory ahead here, not 512 MiB: the suite starts hundreds of them, and touching
# 512 MiB adds about 0.3 s to each start. tests/adhocfs/test_reserve.py sets its own and checks the reserve.
os.environ.setdefault("MALLEABLE_ADHOCFS_RESERVE", str(16 << 20))


def _descendants() -> list[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


@pytest.fixture(autouse=True)
def no_leaked_processes():
    """Fail a test that leaves child processes behind (after a short grace period), and kill them."""
    before = {p.pid for p in _descendants()}
    yield
    deadline = time.monotonic() + 5.0
    while True:
        # A process may end between listing and checking it: `running` answers False then, never raises.
        left = [p for p in _descendants() if p.pid not in before and running(p.pid)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if left:
        desc = ", ".join(f"{p.pid}:{' '.join(cmdline(p.pid)[:3])}" for p in left)
        for p in left:
            try:
                p.kill()
            except psutil.Error:
                pass
        pytest.fail(f"test leaked processes: {desc}")


def mpiexec_path() -> str:
    return shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec") or "mpiexec"


def run_mpi(n: int, *cmd: str, env: dict | None = None, timeout: float = 120, hosts: list[str] | None = None,
            check: bool = True, cwd: str | None = None, mpi_args: tuple = ()) -> subprocess.CompletedProcess:
    """Run ``cmd`` as ``n`` MPI processes and return the completed process (text output)."""
    from malleable.launch import mpiexec_argv

    full_env = dict(os.environ)
    full_env.update(env or {})
    argv = mpiexec_argv(n, list(cmd), hosts=hosts, extra=mpi_args, launcher_exec=full_env.get("MALLEABLE_LAUNCHER_EXEC"))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"mpiexec exited {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    return proc


def netns_unavailable() -> str | None:
    """Why the namespace cluster can't be used here, or None."""
    why = _testbed.unavailable()
    if why:
        return why
    out = subprocess.run([mpiexec_path(), "--version"], capture_output=True, text=True).stdout
    if "HYDRA" not in out:
        return "needs MPICH's mpiexec (hydra): pip install mpich"
    return None


@dataclass
class Cluster:
    """The namespace hosts node1..nodeN and how to launch onto them."""

    hosts: list[str]
    launcher: str

    def env(self) -> dict[str, str]:
        """Environment that makes malleable's launch helpers use the namespace launcher."""
        return {"MALLEABLE_LAUNCHER_EXEC": self.launcher}

    def pids_on(self, host: str) -> list[int]:
        """PIDs of processes running inside a host's network namespace."""
        out = subprocess.run(["ip", "netns", "pids", host], capture_output=True, text=True).stdout
        return [int(x) for x in out.split()]


USERS_LOCK = "/run/malleable-netns-users.lock"


@pytest.fixture(scope="session")
def netns_cluster():
    """Bring up (or reuse) the namespace hosts; skip with the reason where impossible.

    Several test sessions may share the hosts (each holds a shared lock on ``USERS_LOCK`` while it uses them);
    the last session to leave takes them down, and only if a session of ours brought them up.
    """
    why = netns_unavailable()
    if why:
        pytest.skip(why)
    users = open(USERS_LOCK, "a+")  # noqa: SIM115 - held for the whole session
    fcntl.flock(users, fcntl.LOCK_SH)
    ours = not _testbed.RECORD.exists()
    try:
        _testbed.up(NETNS_HOSTS)
    except _testbed.TestbedError as e:
        users.close()
        pytest.skip(f"malleable testbed up failed: {e}")
    try:
        yield Cluster([f"node{i}" for i in range(1, NETNS_HOSTS + 1)], str(_testbed.launcher()))
    finally:
        try:
            fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)   # nobody else is using the hosts
            last = True
        except OSError:
            last = False
        if ours and last:
            _testbed.down()
        users.close()
