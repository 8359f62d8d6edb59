"""The --slurm host pool: hosts from the allocation's node list, hydra's Slurm launcher; and against a real Slurm.

The real-Slurm test starts a private Slurm (Debian's slurmctld/slurmd/munge, 22.05 on Debian 12): munged on a
private socket, slurmctld in the root namespace (the bridge address 10.77.0.1), one slurmd in each namespace host
of the test cluster (node1..node4), all configured in a temporary directory and torn down at the end. Then, inside
``salloc -N 3``, ``tests/controller/progs/slurm_driver.py`` runs ``malleable controller start --slurm``, submits
jobs and stops the controller; the test checks what it saw. Not covered here: a shrink under Slurm (the freed
host is checked by a scan run with srun on that host, and the namespace hosts share one /proc, so the scan would
also see the job's processes on the other hosts; on real nodes each has its own /proc).

Two details of the test bed (not of the controller):

* slurmd is put into a host with ``nsenter --net`` + ``unshare --uts`` rather than ``netns-launch``:
  ``ip netns exec`` mounts a fresh /sys, which hides /sys/fs/cgroup, and slurmd 22.05 refuses to start without a
  cgroup file system even with ``proctrack/linuxproc`` and ``task/none``.
* salloc (and so the controller and mpiexec) runs under ``unshare --uts`` with the host name ``head``: hydra
  hands its proxies its own host name as the control address, and the machine's name (``vm``) resolves to
  127.0.0.1 inside the namespaces. On a real cluster the head node's name resolves.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from malleable.controller.daemon._hostpool import HostPool
from malleable.errors import ConfigError
from malleable.launch import compress_hostlist, expand_hostlist
from tests._procs import running
from tests.controller._daemon_util import TOKEN

DRIVER = Path(__file__).parent / "progs" / "slurm_driver.py"
HEAD = "10.77.0.1"
NODES = [f"node{i}" for i in range(1, 5)]
SLURM_BINS = ("slurmctld", "slurmd", "munged", "srun", "salloc", "sinfo", "scontrol", "scancel")
APT = "apt-get install -y slurmctld slurmd munge slurm-client"


def test_pool_from_the_allocation():
    pool = HostPool.from_slurm({"SLURM_JOB_NODELIST": "node[1-3,7]"})
    assert pool.kind == "slurm" and pool.nodes == ("node1", "node2", "node3", "node7")
    assert pool.reach == "slurm"
    assert HostPool.from_slurm({"SLURM_NODELIST": "a,b"}).nodes == ("a", "b")


def test_outside_an_allocation():
    with pytest.raises(ConfigError, match="SLURM_JOB_NODELIST"):
        HostPool.from_slurm({})


def test_slurm_pool_checks_hosts_with_srun():
    pool = HostPool.from_slurm({"SLURM_JOB_NODELIST": "node[1-2]"})
    argv = pool._remote_argv("node2", ["kill", "-9", "12"])
    assert argv == ["srun", "--overlap", "--quiet", "-N1", "-n1", "-w", "node2", "kill", "-9", "12"]


# -- a private Slurm on the namespace hosts ----------------------------------------------------------------------
def _slurm_unavailable() -> str | None:
    missing = [x for x in SLURM_BINS if shutil.which(x) is None]
    if missing:
        return f"no Slurm on this machine ({', '.join(missing)} not found; Debian: {APT})"
    for tool in ("nsenter", "unshare"):
        if shutil.which(tool) is None:
            return f"needs util-linux '{tool}'"
    return None


def _free_port(addr: str) -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def _slurm_pids() -> set[int]:
    """Pids of Slurm and munge daemons (and step daemons) on this machine."""
    out = set()
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            comm = Path(f"/proc/{p}/comm").read_text().strip()
            stat = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        if stat[stat.rfind(")") + 2:].startswith("Z"):
            continue  # a zombie is not running (this machine's init may not reap re-parented children)
        if comm.startswith(("slurm", "munged")):
            out.add(int(p))
    return out


class Slurm:
    def __init__(self, d: Path, env: dict[str, str]):
        self.dir, self.env = d, env

    def run(self, *argv: str, timeout: float = 20) -> subprocess.CompletedProcess:
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def logs(self) -> str:
        parts = []
        for f in sorted(self.dir.glob("*.log")) + sorted(self.dir.glob("*.out")):
            parts.append(f"--- {f.name}\n" + f.read_text(errors="replace")[-1500:])
        return "\n".join(parts)


def _conf(d: Path, ctld_port: int, slurmd_port: int) -> str:
    return f"""\
ClusterName=malltest
SlurmctldHost={socket.gethostname()}({HEAD})
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge.sock
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool-%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={d}/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
SelectType=select/linear
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=2
NodeName=node[1-4] NodeAddr=10.77.0.1[1-4] CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=node[1-4] Default=YES MaxTime=INFINITE State=UP
"""


@pytest.fixture(scope="session")
def slurm(request, tmp_path_factory):
    """A private Slurm: slurmctld on the head, one slurmd per namespace host; all stopped at the end."""
    why = _slurm_unavailable()
    if why:
        pytest.skip(why)
    request.getfixturevalue("netns_cluster")  # brings the hosts up (or skips with its reason)
    if not all(os.path.exists(f"/run/netns/{h}") for h in NODES):
        pytest.skip(f"needs the 4 namespace hosts {','.join(NODES)}")
    before = _slurm_pids()
    d = tmp_path_factory.mktemp("slurm")
    d.chmod(0o755)  # munged checks the permissions of its socket directory
    (d / "state").mkdir()
    for h in NODES:
        (d / f"spool-{h}").mkdir()
    (d / "plugstack.conf").write_text("")
    conf = d / "slurm.conf"
    conf.write_text(_conf(d, _free_port(HEAD), _free_port(HEAD)))
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    env = dict(os.environ, SLURM_CONF=str(conf))
    for k in list(env):
        if k.startswith("SLURM_") and k != "SLURM_CONF":
            del env[k]   # not inside someone else's allocation
    procs: list[subprocess.Popen] = []

    def start(argv: list[str], name: str) -> subprocess.Popen:
        p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=open(d / f"{name}.out", "wb"),
                             stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(p)
        return p

    s = Slurm(d, env)
    try:
        start(["munged", "-F", "-f", f"--socket={d}/munge.sock", f"--key-file={key}",
               f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log", f"--seed-file={d}/munged.seed"],
              "munged")
        _wait(lambda: (d / "munge.sock").exists(), 10, "munged's socket", s)
        start(["slurmctld", "-D", "-i", "-f", str(conf)], "slurmctld")
        for h in NODES:  # execs all the way down: the Popen pid is slurmd's
            start(["nsenter", f"--net=/run/netns/{h}", "unshare", "--uts", "--", "sh", "-c",
                   f'hostname {h} && exec slurmd -D -N {h} -f "{conf}"'], f"slurmd-{h}")

        def idle() -> bool:
            for p in procs:
                if p.poll() is not None:
                    raise AssertionError(f"a Slurm daemon ended ({p.args[0]} rc {p.returncode}):\n{s.logs()}")
            r = s.run("sinfo", "-h", "-N", "-o", "%N %t", timeout=10)
            return r.returncode == 0 and sorted(r.stdout.split()) == sorted([*NODES, *["idle"] * 4])
        _wait(idle, 30, "sinfo to show node1..node4 idle", s)
        yield s
    finally:
        try:
            s.run("scancel", "--full", "--partition=debug", timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for p in reversed(procs):  # slurmds first, then slurmctld, munged last
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(5)
        deadline = time.monotonic() + 10
        while (left := _slurm_pids() - before) and time.monotonic() < deadline:  # step daemons end on their own
            time.sleep(0.2)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        assert not left, f"Slurm processes left after the teardown (killed): {sorted(left)}"


def _wait(cond, limit: float, what: str, s: Slurm | None = None) -> None:
    end = time.monotonic() + limit
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {limit} s waiting for {what}" + (f"\n{s.logs()}" if s else ""))
        time.sleep(0.2)


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_controller_inside_a_real_allocation(slurm, tmp_path, monkeypatch):
    """salloc -N 3 → controller --slurm: pool = allocation, rigid jobs on the allocation's nodes through srun,
    exit codes recorded; a malleable job starts on one node, grows into the other two and ends with the exact
    result; the controller stopped, nothing left."""
    res_file = tmp_path / "res.json"
    env = dict(slurm.env, MALLEABLE_TOKEN=TOKEN, DRIVER_MALLEABLE="1",
               PATH=f"{Path(sys.executable).parent}:{slurm.env.get('PATH', '')}")
    env.pop("MALLEABLE_CONTROLLER", None)
    argv = ["unshare", "--uts", "--", "sh", "-c", 'hostname head && exec "$@"', "sh",
            "salloc", "-N", "3", "-t", "3", "--job-name", "malleable-ctl", sys.executable, str(DRIVER),
            str(res_file)]
    p = subprocess.Popen(argv, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=75)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate(timeout=10)
        raise AssertionError(f"salloc + driver did not end in 75 s:\n{out}\n{slurm.logs()}") from None
    finally:
        _kill_tagged_jobs(tmp_path)
    assert res_file.exists(), f"driver wrote nothing (salloc rc {p.returncode}):\n{out}\n{slurm.logs()}"
    res = json.loads(res_file.read_text())
    log = "\n".join(f"{x['cmd']} rc={x['rc']} {x['err']}" for x in res["log"])
    ctl_log = (tmp_path / "ctl.sqlite.log").read_text(errors="replace")[-4000:]
    why = f"\n{out}\n{log}\n{ctl_log}"
    assert p.returncode == 0, why

    # the pool is the allocation
    alloc = expand_hostlist(res["nodelist"])
    assert len(alloc) == 3 and set(alloc) <= set(NODES)
    assert res["start_rc"] == 0, why
    assert res["status"]["pool"] == "slurm" and res["status"]["nodes"] == alloc, why
    assert [n["name"] for n in res["nodes"]] == alloc and all(n["state"] == "idle" for n in res["nodes"])

    # rigid jobs: started through srun on the allocation's nodes, exit codes recorded
    where, exit3 = res["rigid"]
    hist = {int(k): v for k, v in res["history_rigid"].items()}
    assert hist[where]["state"] == "COMPLETED" and hist[where]["exit_code"] == 0, why
    assert hist[exit3]["state"] == "FAILED" and hist[exit3]["exit_code"] == 3, why
    assert sorted(hist[where]["hosts"]) == sorted(alloc)
    seen = [json.loads(x) for x in (tmp_path / f"where-{where}.out").read_text().splitlines() if x.startswith("{")]
    assert sorted(x["host"] for x in seen) == sorted(alloc), seen           # hostnames printed by the ranks
    assert (tmp_path / f"exit3-{exit3}.out").read_text().split()[0] in alloc
    assert "-launcher slurm" in ctl_log
    final = {r["id"]: r for r in json.loads(res["history"])}
    assert final[where]["exit_code"] == 0 and final[exit3]["exit_code"] == 3

    # the malleable job starts on one node, grows into the allocation (runtime spawns placed by srun), finishes
    m = res["malleable"]
    mh = res["history_malleable"][str(m)]
    assert mh["state"] == "COMPLETED" and mh["exit_code"] == 0, (res["info_malleable"], why)
    heat = [json.loads(x) for x in (tmp_path / f"heat-{m}.out").read_text().splitlines() if x.startswith("{")]
    # any one node: the first may still be finishing the rigid job's step when the policy places it (seen under load)
    assert heat[0]["size"] == 1 and len(heat[0]["hosts"]) == 1 and heat[0]["hosts"][0] in alloc, heat
    assert any(x.get("size") == 3 and sorted(x["hosts"]) == sorted(alloc) for x in heat), heat
    assert heat[-1]["done"] and heat[-1]["ok"] and heat[-1]["sizes"] == [1, 3], heat   # exact result
    assert f"expand    3 nodes  {compress_hostlist(alloc)}" in res["info_malleable"], res["info_malleable"]

    # the controller stopped (it cancelled the malleable job) and nothing of the jobs is left
    assert res["stop_rc"] == 0, why
    _wait(lambda: not running(res["pid"]), 10, "the controller to exit")
    assert not _tagged(tmp_path), "processes of the controller's jobs left"
    r = slurm.run("squeue", "-h", "-o", "%i")
    assert r.stdout.strip() == "", f"Slurm jobs left: {r.stdout}"


def _tagged(tmp_path: Path) -> list[int]:
    """Pids of processes started by this test's controller (their environment names its state directory)."""
    want = str(tmp_path).encode()
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != os.getpid():
            try:
                env = Path(f"/proc/{p}/environ").read_bytes()
                stat = Path(f"/proc/{p}/stat").read_text()
            except OSError:
                continue
            if b"MALLEABLE_JOB_TAG=" in env and want in env and not stat[stat.rfind(")") + 2:].startswith("Z"):
                out.append(int(p))
    return out


def _kill_tagged_jobs(tmp_path: Path) -> None:
    for pid in _tagged(tmp_path):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
