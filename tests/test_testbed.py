"""``malleable testbed``: the multi-host test cluster made, used and removed for real.

Every scenario runs in a sandbox of its own (``unshare --mount --net``: a private network namespace, a private
``/run``, ``/sys`` and ``/etc/hosts``), so it makes and removes hosts named node1.. with the real commands without
touching the cluster that other tests (or other sessions) may be using on this machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from malleable.launch import _testbed

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare") or _testbed.unavailable() is not None,
    reason=_testbed.unavailable() or "the sandbox needs root and util-linux unshare")

# Runs inside the sandbox: private mounts first, then the scenario; prints one JSON object of what it saw.
PRELUDE = """
import json, os, subprocess, sys, time
def sh(*a, check=True, **kw):
    p = subprocess.run(list(a), capture_output=True, text=True, timeout=120, **kw)
    if check and p.returncode:
        raise SystemExit(f"{a}: exit {p.returncode}: {p.stdout} {p.stderr}")
    return p
sh("mount", "--make-rprivate", "/")
sh("mount", "-t", "tmpfs", "sandbox-run", "/run")
sh("mount", "-t", "sysfs", "sandbox-sys", "/sys")                  # /sys/class/net of this network namespace
with open("/tmp/.testbed-hosts-%d" % os.getpid(), "w") as f:     # without the lines of a cluster up outside
    f.write("".join(l for l in open("/etc/hosts") if not l.rstrip().endswith("# netns-cluster")))
sh("mount", "--bind", f.name, "/etc/hosts")
os.unlink(f.name)
sh("ip", "link", "set", "lo", "up")
TB = [sys.executable, "-m", "malleable", "testbed"]
seen = {}
"""


def in_sandbox(scenario: str, timeout: float = 180) -> dict:
    code = PRELUDE + textwrap.dedent(scenario) + "\nprint(json.dumps(seen))\n"
    p = subprocess.run(["unshare", "--mount", "--net", "--", sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout.splitlines()[-1])


def test_up_adds_hosts_that_reach_each_other_by_name_and_down_removes_everything():
    seen = in_sandbox("""
        seen["up2"] = sh(*TB, "up", "2").stdout
        mac = lambda: open("/sys/class/net/mbr0/address").read().strip()
        seen["bridge_mac"] = [mac()]
        seen["up3"] = sh(*TB, "up", "3").stdout                      # adds node3 only
        seen["bridge_mac"].append(mac())                             # a new port does not change it
        seen["bridge_mac_kind"] = open("/sys/class/net/mbr0/addr_assign_type").read().strip()
        seen["record"] = open("/run/netns-cluster/created").read()
        seen["etc_hosts"] = [l for l in open("/etc/hosts").read().splitlines() if "netns-cluster" in l]
        seen["hostname"] = sh(*TB, "exec", "node3", "hostname").stdout.strip()
        seen["hostfile"] = sh(*TB, "hostfile", "--slots", "2").stdout
        # a server on node2, a client on node1 that finds it by name through /etc/hosts
        launch = sh(*TB, "launcher").stdout.strip()
        serve = ('"import socket; s = socket.create_server((\\'\\', 7000)); c, _ = s.accept(); '
                 'c.sendall(socket.gethostname().encode()); c.close()"')
        ask = ('"import socket; c = socket.create_connection((\\'node2\\', 7000), 1); '
               'print(socket.gethostname(), c.getsockname()[0], c.recv(100).decode())"')
        server = subprocess.Popen([launch, "-x", "node2", sys.executable, "-c", serve])
        for _ in range(200):
            got = sh(launch, "node1", sys.executable, "-c", ask, check=False)
            if got.returncode == 0:
                break
            time.sleep(0.05)
        seen["client"] = got.stdout.split()
        server.wait(30)
        # something left running on a host is stopped by down
        left = subprocess.Popen([launch, "node1", "sleep", "600"])
        for _ in range(200):
            if sh("ip", "netns", "pids", "node1").stdout.split():
                break
            time.sleep(0.05)
        seen["pids_before"] = len(sh("ip", "netns", "pids", "node1").stdout.split())
        sh(*TB, "down")
        seen["left_exit"] = left.wait(30)
        seen["links"] = sh("ip", "-o", "link", "show").stdout
        seen["netns"] = sh("ip", "netns", "list").stdout
        seen["state_dir"] = os.path.exists("/run/netns-cluster")
        seen["run_netns"] = os.path.exists("/run/netns")
        seen["etc_hosts_after"] = [l for l in open("/etc/hosts").read().splitlines() if "netns-cluster" in l]
        seen["status_after"] = sh(*TB, "status").stdout
    """)
    assert [line.split()[:2] for line in seen["up3"].splitlines()] == [
        ["head", "10.77.0.1"], ["node1", "10.77.0.11"], ["node2", "10.77.0.12"], ["node3", "10.77.0.13"]]
    assert "namespace ok" in seen["up3"] and "bridge mbr0: up" in seen["up3"]
    assert seen["bridge_mac"] == [_testbed.BRIDGE_MAC] * 2 and seen["bridge_mac_kind"] == "3"   # 3: set, fixed
    assert seen["record"].splitlines() == ["dir /run/netns", "br mbr0", "ns node1", "ns node2", "ns node3"]
    assert seen["etc_hosts"] == ["10.77.0.1 head # netns-cluster", "10.77.0.11 node1 # netns-cluster",
                                 "10.77.0.12 node2 # netns-cluster", "10.77.0.13 node3 # netns-cluster"]
    assert seen["hostname"] == "node3"
    assert seen["hostfile"] == "node1:2\nnode2:2\nnode3:2\n"
    assert seen["client"] == ["node1", "10.77.0.11", "node2"]
    assert seen["pids_before"] >= 1 and seen["left_exit"] != 0           # killed by down, not finished
    assert "mbr0" not in seen["links"] and "nc-node" not in seen["links"]
    assert seen["netns"] == "" and not seen["state_dir"] and not seen["run_netns"]
    assert seen["etc_hosts_after"] == []
    assert seen["status_after"].startswith("no test-cluster hosts")


def test_up_fixes_the_address_of_an_older_bridge_and_its_hosts_forget_the_old_one():
    old = "02:6d:62:72:00:99"
    seen = in_sandbox(f"""
        sh(*TB, "up", "2")
        sh("ip", "link", "set", "mbr0", "address", "{old}")        # as an older version left it: chosen by the bridge
        knock = "import socket; s = socket.socket(); s.settimeout(5); print(s.connect_ex(('10.77.0.1', 9)))"
        for host in ("node1", "node2"):          # both hosts reach the head (refused: no server): they cache {old}
            seen[host] = sh(*TB, "exec", host, sys.executable, "-c", knock).stdout.strip()
        seen["before"] = sh("ip", "-n", "node1", "neigh", "show", "to", "10.77.0.1").stdout
        sh(*TB, "up", "2")
        seen["mac"] = open("/sys/class/net/mbr0/address").read().strip()
        seen["after"] = [sh("ip", "-n", h, "neigh", "show", "to", "10.77.0.1").stdout for h in ("node1", "node2")]
        sh(*TB, "down")
    """)
    assert seen["node1"] == seen["node2"] == "111"           # ECONNREFUSED: the head answered both hosts
    assert f"lladdr {old}" in seen["before"]                 # the scenario did cache the old address
    assert seen["mac"] == _testbed.BRIDGE_MAC
    assert not any(old in entry for entry in seen["after"]), seen["after"]


def test_up_refuses_a_namespace_it_did_not_make_and_leaves_it_alone():
    seen = in_sandbox("""
        sh("ip", "netns", "add", "node2")
        p = sh(*TB, "up", "2", check=False)
        seen["rc"], seen["err"] = p.returncode, p.stderr
        seen["record"] = open("/run/netns-cluster/created").read()
        sh(*TB, "down")
        seen["netns"] = sh("ip", "netns", "list").stdout.split()
    """)
    assert seen["rc"] == 1
    assert seen["err"].strip() == ("malleable testbed: error: a namespace node2 exists that the test cluster did not "
                                   "make: remove it (ip netns del node2) or use another machine")
    assert "ns node1" in seen["record"] and "ns node2" not in seen["record"]
    assert seen["netns"] == ["node2"]                                        # down removed node1, not node2


def test_mpiexec_places_one_rank_on_each_host_through_the_launcher():
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable))
    if not mpiexec or "HYDRA" not in subprocess.run([mpiexec, "--version"], capture_output=True, text=True).stdout:
        pytest.skip("needs MPICH's mpiexec (hydra) beside this Python: pip install 'malleable[mpich]'")
    seen = in_sandbox("""
        sh(*TB, "up", "3")
        launch = sh(*TB, "launcher").stdout.strip()
        mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
        prog = "from mpi4py import MPI; n = MPI.COMM_WORLD.gather(MPI.Get_processor_name()); print(*n or ())"
        p = sh(mpiexec, "-launcher", "rsh", "-launcher-exec", launch, "-localhost", "head",
               "-hosts", "node1,node2,node3", "-n", "3", sys.executable, "-c", prog)
        seen["names"] = p.stdout.split()
        sh(*TB, "down")
    """)
    assert seen["names"] == ["node1", "node2", "node3"]


def test_commands_refuse_bad_input_in_one_line():
    for argv, msg in ((["up", "0"], "the test cluster has 1 to 200 hosts, not 0"),
                      (["exec", "node999", "true"], "no such host: node999 (malleable testbed status lists them)")):
        p = subprocess.run([sys.executable, "-m", "malleable", "testbed", *argv], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 1 and p.stderr == f"malleable testbed: error: {msg}\n"
