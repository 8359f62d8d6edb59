"""A multi-host test cluster on one Linux machine: hosts ``node1``..``nodeN`` that are network namespaces.

Each host is a network namespace with one veth (``eth0``, address ``10.77.0.(10+I)``) plugged into the bridge
``mbr0`` of the root namespace (``10.77.0.1``, host name ``head``); the hosts have no default route, so nothing
they send leaves ``10.77.0.0/24``. Their names go into ``/etc/hosts`` on lines tagged ``# netns-cluster``. A
command started on a host (:func:`exec_argv`, the ``netns-launch`` ssh stand-in beside this module) also gets a
UTS namespace of its own whose host name is the host's, so ``gethostname()`` and ``MPI_Get_processor_name()``
tell the hosts apart.

Every object :func:`up` creates is recorded, one ``KIND NAME`` line each (``br mbr0``, ``ns node1``,
``dir /run/netns``), in ``/run/netns-cluster/created``, and :func:`down` removes exactly those. The names,
addresses, tag, record and lock are those of the shell test cluster the project grew up with, so either tool can
bring the hosts up or take them down while the other's users run on them. Needs root, iproute2 (``ip netns``)
and util-linux (``unshare``); ``ip`` is called as an operator would, since every step is one iproute2 command.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from malleable.errors import ConfigError, MalleableError

__all__ = ["BRIDGE", "HEAD", "HEAD_IP", "MAX_HOSTS", "HostState", "TestbedError", "down", "exec_argv",
           "host_ip", "hostfile", "hosts", "launcher", "status", "unavailable", "up"]

BRIDGE = "mbr0"
SUBNET = "10.77.0"
HEAD, HEAD_IP = "head", f"{SUBNET}.1"
BRIDGE_MAC = "02:6d:62:72:00:01"
"""The bridge's own (locally administered) address, set so that it never changes: a bridge left to choose takes
the lowest address of its ports, so a host added later may change it, and the hosts that cached the old one for
the head lose the head for up to half a minute (their neighbour entries still point at the old address)."""
TAG = "# netns-cluster"                       # ends every /etc/hosts line that up adds
STATE = Path("/run/netns-cluster")            # the record and the lock (both tools use them)
RECORD = STATE / "created"
NETNS_DIR = Path("/run/netns")                # where `ip netns add` puts the namespaces (a mount it makes)
ETC_HOSTS = Path("/etc/hosts")
MAX_HOSTS = 200
KILL_WAIT = 2.0                               # seconds processes left on a host get after SIGTERM


class TestbedError(MalleableError):
    """The test cluster cannot be made, used or removed here; the message says why."""

    __test__ = False   # not a pytest test class despite its name


@dataclass(frozen=True)
class HostState:
    """One line of :func:`status`."""

    name: str
    address: str
    state: str


def host_ip(i: int) -> str:
    """Address of host ``node{i}``."""
    return f"{SUBNET}.{10 + i}"


def launcher() -> Path:
    """The ssh stand-in that runs a command on a host (hydra's ``-launcher-exec``, Open MPI's ``plm_ssh_agent``)."""
    return Path(__file__).with_name("netns-launch")


def unavailable() -> str | None:
    """Why the cluster cannot be made or used here, or None."""
    why = _cannot_manage()
    if why is None and not os.access(launcher(), os.X_OK):
        why = f"{launcher()} is not executable (reinstall malleable)"
    return why


def _cannot_manage() -> str | None:
    if os.uname().sysname != "Linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "the test cluster needs root (network namespaces, a bridge, /etc/hosts)"
    missing = [t for t in ("ip", "unshare") if not shutil.which(t)]
    if missing:
        return f"needs {' and '.join(missing)} (Debian: apt-get install iproute2 util-linux)"
    if subprocess.run(["ip", "netns", "list"], capture_output=True).returncode:
        return "'ip netns' is not available here"
    return None


def hosts() -> list[str]:
    """The hosts recorded as up, in order (no root needed)."""
    return sorted((name for kind, name in _read_record() if kind == "ns"), key=_host_number)


def up(n: int) -> list[HostState]:
    """Make hosts ``node1``..``node{n}`` (those already made by either tool are kept) and return :func:`status`.

    Raises:
        TestbedError: not root, no ``ip netns``, ``n`` out of range, or a namespace, link or bridge of one of
            these names exists that the cluster's record does not list (it is left alone).
    """
    if not 1 <= n <= MAX_HOSTS:
        raise ConfigError(f"the test cluster has 1 to {MAX_HOSTS} hosts, not {n}")
    with _locked():
        if not NETNS_DIR.exists() and not _ours("dir", str(NETNS_DIR)):
            _record("dir", str(NETNS_DIR))       # `ip netns add` makes it (a mount): down removes it again
        if not _ours("br", BRIDGE):
            if _link_exists(BRIDGE):
                raise TestbedError(f"a link {BRIDGE} exists that the test cluster did not make: remove it or "
                                   f"use another machine")
            _ip("link", "add", BRIDGE, "type", "bridge")
            _record("br", BRIDGE)
            _ip("addr", "add", f"{HEAD_IP}/24", "dev", BRIDGE)
        if _bridge_mac() != BRIDGE_MAC:   # new, or made by an older version that let the bridge choose
            _ip("link", "set", BRIDGE, "address", BRIDGE_MAC)
            for name in hosts():            # forget the old address now, not after up to half a minute
                _ip("-n", name, "neigh", "flush", "to", HEAD_IP, check=False)
        _ip("link", "set", BRIDGE, "up")
        _hosts_line(HEAD_IP, HEAD)
        for i in range(1, n + 1):
            name = f"node{i}"
            if not _ours("ns", name):
                _make_host(name, host_ip(i))
            _hosts_line(host_ip(i), name)
    return status()


def down() -> None:
    """Stop what still runs on the hosts, then remove what :func:`up` recorded (by either tool)."""
    with _locked():
        for name in hosts():
            _stop_processes(name)
            _ip("link", "del", f"nc-{name}", check=False)   # now, not whenever the kernel reaps the namespace
            _ip("netns", "del", name, check=False)
        if _ours("br", BRIDGE):
            _ip("link", "del", BRIDGE, check=False)
        if _ours("dir", str(NETNS_DIR)) and NETNS_DIR.is_dir() and not any(NETNS_DIR.iterdir()):
            while subprocess.run(["umount", str(NETNS_DIR)], capture_output=True).returncode == 0:
                pass
            with contextlib.suppress(OSError):
                NETNS_DIR.rmdir()
        text = ETC_HOSTS.read_text()
        kept = [line for line in text.splitlines(keepends=True) if not line.rstrip("\n").endswith(f" {TAG}")]
        if len(kept) != len(text.splitlines()):
            with open(ETC_HOSTS, "r+") as f:   # in place: /etc/hosts may be a bind mount
                f.write("".join(kept))
                f.truncate()
        shutil.rmtree(STATE, ignore_errors=True)


def status() -> list[HostState]:
    """The head and every recorded host with its address and whether its namespace is there (no root needed)."""
    names = hosts()
    if not names:
        return []
    bridge = Path(f"/sys/class/net/{BRIDGE}/operstate")
    state = bridge.read_text().strip() if bridge.exists() else "missing"
    rows = [HostState(HEAD, HEAD_IP, f"bridge {BRIDGE}: {state}")]
    for name in names:
        there = (NETNS_DIR / name).exists()
        rows.append(HostState(name, host_ip(_host_number(name)), "namespace ok" if there else "namespace MISSING"))
    return rows


def hostfile(slots: int = 1, ompi: bool = False) -> str:
    """A hostfile of the recorded hosts: ``nodeI:SLOTS`` lines (MPICH), or ``nodeI slots=SLOTS`` (Open MPI)."""
    return "".join(f"{h} slots={slots}\n" if ompi else f"{h}:{slots}\n" for h in hosts())


def exec_argv(host: str, cmd: Sequence[str]) -> list[str]:
    """argv running ``cmd`` on ``host`` with the host name set to ``host`` (environment and directory kept).

    Raises:
        TestbedError: no such host.
    """
    if os.geteuid() != 0:
        raise TestbedError("running a command on a test-cluster host needs root (ip netns exec)")
    if not (NETNS_DIR / host).exists():
        raise TestbedError(f"no such host: {host} (malleable testbed status lists them)")
    return ["ip", "netns", "exec", host, "unshare", "--uts", "--", "sh", "-c",
            'echo "$0" > /proc/sys/kernel/hostname && exec "$@"', host, *cmd]


# ----------------------------------------------------------------------------------------------------------- shell

def _host_number(name: str) -> int:
    return int(name[4:]) if name.startswith("node") and name[4:].isdigit() else 0


def _read_record() -> list[tuple[str, str]]:
    try:
        lines = RECORD.read_text().splitlines()
    except OSError:
        return []
    return [(kind, name) for kind, _, name in (line.partition(" ") for line in lines) if name]


def _ours(kind: str, name: str) -> bool:
    return (kind, name) in _read_record()


def _record(kind: str, name: str) -> None:
    with open(RECORD, "a") as f:
        f.write(f"{kind} {name}\n")


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """Root checked, one ``up``/``down`` at a time (the lock file the shell tool takes too), stale records dropped."""
    why = _cannot_manage()
    if why:
        raise TestbedError(why)
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept = [(k, n) for k, n in _read_record()
                if (k == "br" and _link_exists(n)) or (k == "ns" and (NETNS_DIR / n).exists()) or k not in ("br", "ns")]
        if RECORD.exists():
            RECORD.write_text("".join(f"{k} {n}\n" for k, n in kept))
        yield


def _ip(*args: str, check: bool = True) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode:
        raise TestbedError(f"ip {' '.join(args)}: {done.stderr.strip() or f'exit code {done.returncode}'}")


def _bridge_mac() -> str:
    try:
        return Path(f"/sys/class/net/{BRIDGE}/address").read_text().strip()
    except OSError:
        return ""


def _link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0


def _make_host(name: str, address: str) -> None:
    if (NETNS_DIR / name).exists():
        raise TestbedError(f"a namespace {name} exists that the test cluster did not make: remove it "
                           f"(ip netns del {name}) or use another machine")
    if _link_exists(f"nc-{name}"):
        raise TestbedError(f"a link nc-{name} exists that the test cluster did not make")
    _ip("netns", "add", name)
    _record("ns", name)
    _ip("link", "add", f"nc-{name}", "type", "veth", "peer", "name", "eth0", "netns", name)  # peer goes with the ns
    _ip("link", "set", f"nc-{name}", "master", BRIDGE, "up")
    _ip("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
    _ip("-n", name, "link", "set", "eth0", "up")
    _ip("-n", name, "link", "set", "lo", "up")


def _hosts_line(address: str, name: str) -> None:
    line = f"{address} {name} {TAG}"
    text = ETC_HOSTS.read_text()
    if line not in text.splitlines():
        with open(ETC_HOSTS, "a") as f:
            f.write(("" if not text or text.endswith("\n") else "\n") + line + "\n")


def _pids_on(name: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _stop_processes(name: str) -> None:
    """SIGTERM what runs on the host, wait until it is gone (at most ``KILL_WAIT``), then SIGKILL the rest."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = _pids_on(name)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + KILL_WAIT
        while pids and _pids_on(name) and time.monotonic() < deadline:
            time.sleep(0.05)
