"""The controller's job command lines come from the runtime's backend of the MPI beside the daemon: each pool kind
(local slots, namespace hosts, Slurm) in MPICH's, Intel MPI's and Open MPI's own options, the variables a malleable
job needs under that MPI, and a rigid job's slots placed per host (checked live with this venv's MPICH)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from malleable._secret import Credential
from malleable.controller.daemon._hostpool import HostPool
from malleable.controller.daemon._launch import SHEPHERD, job_argv, job_env
from malleable.controller.daemon._records import JobRec

EXE = "/opt/mpi/bin/mpiexec"
NETNS = "/opt/x/netns-launch"
CMD = ["prog", "--x"]


def job(hosts: list[str], malleable: bool) -> JobRec:
    return JobRec(7, "j", list(CMD), len(hosts), 1, len(hosts), malleable, 60.0, "", "", "/", {}, 0.0,
                  hosts=list(hosts))


@pytest.fixture
def as_mpi(monkeypatch):
    def use(name: str) -> None:
        monkeypatch.setenv("MALLEABLE_MPI", name)         # the backend, without running a launcher
        monkeypatch.setenv("MALLEABLE_MPIEXEC", EXE)
        for k in ("MALLEABLE_LAUNCHER_EXEC", "MALLEABLE_LAUNCHER_LOCALHOST", "MALLEABLE_LAUNCHER_IFACE",
                  "MALLEABLE_LAUNCHER_SUBNET"):
            monkeypatch.delenv(k, raising=False)
    return use


NETNS_POOL = HostPool("netns", ("node1", "node2"), NETNS, "10.0.0.1")
LOCAL_POOL = HostPool.local(2)
SLURM_POOL = HostPool("slurm", ("n1", "n2"), None, "h")


@pytest.mark.parametrize(("mpi", "pool", "want"), [
    ("mpich", NETNS_POOL, [EXE, "-launcher", "rsh", "-launcher-exec", NETNS, "-localhost", "head",
                           "-hosts", "node1,node1,node2,node2", "-n", "4", *CMD]),
    ("mpich", LOCAL_POOL, [EXE, "-launcher", "fork", "-hosts", "local1,local1,local2,local2", "-n", "4", *CMD]),
    ("mpich", SLURM_POOL, [EXE, "-launcher", "slurm", "-hosts", "n1,n1,n2,n2", "-n", "4", *CMD]),
    ("impi", NETNS_POOL, [EXE, "-bootstrap", "ssh", "-bootstrap-exec", NETNS, "-iface", "mbr0",
                          "-hosts", "node1,node2", "-ppn", "1", "-n", "4", *CMD]),
    ("impi", LOCAL_POOL, [EXE, "-bootstrap", "fork", "-n", "4", *CMD]),
    ("impi", SLURM_POOL, [EXE, "-bootstrap", "slurm", "-hosts", "n1,n2", "-ppn", "1", "-n", "4", *CMD]),
])
def test_rigid_job_in_each_dialect(as_mpi, mpi, pool, want):
    as_mpi(mpi)
    hosts = list(pool.nodes)
    assert job_argv(job(hosts, False), pool, 2) == want


def test_open_mpi_reaches_the_hosts_with_its_ssh_agent(as_mpi):
    as_mpi("openmpi")
    argv = job_argv(job(["node1", "node2"], False), NETNS_POOL, 2)
    assert argv[:2] == [EXE, "--oversubscribe"] and argv[-3:] == ["4", *CMD]
    i = argv.index("plm_ssh_agent")
    assert argv[i - 1:i + 2] == ["--mca", "plm_ssh_agent", NETNS]
    assert argv[argv.index("--host") + 1] == "node1,node1,node2,node2"        # two slots on each host
    assert "-launcher" not in argv and "-hosts" not in argv
    local = job_argv(job(["local1", "local2"], False), LOCAL_POOL, 1)       # slots of this machine: no host names
    assert "--host" not in local and "plm_ssh_agent" not in local and local[-3:] == ["2", *CMD]
    slurm = job_argv(job(["n1", "n2"], False), SLURM_POOL, 1)               # PRRTE finds the allocation itself
    assert slurm[slurm.index("--host") + 1] == "n1,n2" and "plm_ssh_agent" not in slurm


def test_open_mpi_4_is_given_every_host_a_malleable_job_may_grow_onto(as_mpi):
    as_mpi("openmpi4")
    pool = HostPool("netns", ("node1", "node2", "node3"), NETNS, "10.0.0.1")
    argv = job_argv(job(["node2"], True), pool, 2)                  # the anchor on node2, then the rest of the pool
    assert argv[argv.index("--host") + 1] == "node2,node1,node3" and argv[-4:] == ["-n", "1", *CMD]
    i = argv.index("plm_rsh_agent")
    assert argv[i - 1:i + 2] == ["--mca", "plm_rsh_agent", NETNS] and "--prtemca" not in argv
    assert "orte_allowed_exit_without_sync" in argv and "--with-ft" not in argv
    rigid = job_argv(job(["node1", "node2"], False), pool, 2)        # a rigid job: its own slots only
    assert rigid[rigid.index("--host") + 1] == "node1,node1,node2,node2" and rigid[-3:] == ["4", *CMD]


@pytest.mark.parametrize(("mpi", "first"), [("mpich", [EXE, "-launcher", "rsh"]),
                                            ("impi", [EXE, "-bootstrap", "ssh"])])
def test_malleable_job_starts_one_anchor_on_its_first_host(as_mpi, mpi, first):
    as_mpi(mpi)
    argv = job_argv(job(["node2", "node1"], True), NETNS_POOL, 2)
    assert argv[:3] == first and argv[-4:] == ["-n", "1", *CMD]
    assert argv[argv.index("-hosts") + 1] == "node2"


@pytest.mark.parametrize(("mpi", "want"), [("mpich", {"MPIR_CVAR_CH4_NETMOD": "ofi"}),
                                           ("impi", {"I_MPI_FABRICS": "ofi", "FI_PROVIDER": "tcp"}),
                                           ("openmpi", {})])
def test_malleable_job_gets_its_mpi_variables_and_the_users_win(as_mpi, mpi, want):
    as_mpi(mpi)
    key = Credential("job:7", b"ab" * 32)
    env = job_env(job(["node1", "node2"], True), NETNS_POOL, 1, "tcp://h:1", key, "c.7")
    assert {k: env[k] for k in want} == want
    assert env["MALLEABLE_LAUNCHER_EXEC"] == NETNS and env["MALLEABLE_HOSTS"] == "node1,node2"
    mine = job(["node1"], True)
    mine.env = {k: "mine" for k in want}
    env = job_env(mine, NETNS_POOL, 1, "tcp://h:1", key, "c.7")
    assert all(env[k] == "mine" for k in want)


def test_rigid_slots_land_per_host_under_mpich(monkeypatch, tmp_path):
    """The rigid command line of a local pool, run under the daemon's shepherd (which ignores SIGPIPE: hydra writes
    to proxies whose ranks already ended): hydra puts two ranks on each host slot (one proxy each)."""
    monkeypatch.delenv("MALLEABLE_MPI", raising=False)
    monkeypatch.setenv("MALLEABLE_MPIEXEC", str(Path(sys.executable).parent / "mpiexec"))
    j = job(["local1", "local2"], False)
    j.cmd = ["sh", "-c", 'echo "$PMI_RANK $MPI_LOCALNRANKS $MPI_LOCALRANKID"']
    rc = tmp_path / "job.rc"
    argv = ["sh", "-c", SHEPHERD, "shepherd", str(rc), "", *job_argv(j, LOCAL_POOL, 2)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    assert sorted(out.stdout.split("\n")[:-1]) == ["0 2 0", "1 2 1", "2 2 0", "3 2 1"]
    assert rc.read_text() == "0\n"                     # the exit code the daemon reads


def test_the_daemon_says_which_mpi_its_jobs_run_under(monkeypatch, tmp_path):
    from malleable.controller.daemon._store import Store
    from tests.controller._daemon_util import daemon_thread, isolate

    isolate(monkeypatch, tmp_path)
    monkeypatch.delenv("MALLEABLE_MPI", raising=False)
    monkeypatch.delenv("MALLEABLE_MPIEXEC", raising=False)
    with daemon_thread(tmp_path / "ctl.sqlite", HostPool.local(1)) as (_, c):
        assert c.status()["mpi"] == "mpich"                 # this venv's wheel
    store = Store(str(tmp_path / "ctl.sqlite"))
    try:
        start = [e for e in store.events(None, 50) if e["kind"] == "start"]
    finally:
        store.close()
    assert start and f"MPI mpich ({Path(sys.executable).parent / 'mpiexec'})" in start[-1]["text"]


def test_spawns_on_local_slots_stay_here_under_launchers_that_do_not_know_the_names(monkeypatch):
    from malleable.runtime._mpi import REACH_ENV, backend_named

    monkeypatch.delenv(REACH_ENV, raising=False)
    env = job_env(job(["local1", "local2"], True), LOCAL_POOL, 1, "tcp://h:1", Credential("job:7", b"ab" * 32), "c.7")
    assert env[REACH_ENV] == "fork"                                 # what the controller gives a local pool's job
    assert REACH_ENV not in job_env(job(["node1"], True), NETNS_POOL, 1, "tcp://h:1", Credential("job:7", b"ab" * 32),
                                    "c.7")
    names = ("mpich", "impi", "openmpi")
    assert [backend_named(n).spawn_host("node2") for n in names] == ["node2"] * 3
    assert [backend_named(n).can_reach() for n in names] == [True, True, False]
    monkeypatch.setenv(REACH_ENV, "fork")
    assert [backend_named(n).spawn_host("local2") for n in names] == ["local2", None, None]   # hydra forks any name
    assert [backend_named(n).can_reach() for n in names] == [True, True, True]
