"""Host pools of the controller: where jobs run, how mpiexec reaches the hosts, and how to find a job's processes.

Kinds:

* ``local``: ``--local N``: N host slots ``local1..localN`` on this machine; hydra's ``fork`` launcher starts
  every proxy here whatever the host name, so spawns onto a named slot work.
* ``netns``: hosts that are network namespaces of the test cluster (``malleable testbed``), reached with
  ``netns-launch``; jobs reach the daemon on the bridge.
* ``ssh``: real hosts (``--hosts`` / ``--hostfile``), reached with ssh or ``--launcher-exec``.
* ``slurm``: the hosts of the current Slurm allocation (``SLURM_JOB_NODELIST``); the launcher starts its proxies
  with ``srun``.

The launcher's own options for each way (MPICH's ``-launcher``, Intel MPI's ``-bootstrap``, Open MPI's
``--mca plm_ssh_agent``) come from the runtime's backend of the MPI beside the daemon (:attr:`HostPool.reach`).

Every process of a job carries ``MALLEABLE_JOB_TAG=<controller id>.<job id>`` in its environment (hydra hands
mpiexec's environment to every rank and spawned process), which is how the controller finds what is left of a
job on a host: on ``local`` and ``netns`` pools by reading ``/proc`` here (a namespace host is told apart by the
process's network namespace), on ``ssh``/``slurm`` pools by running a small scan on the host (with ssh, or on a
Slurm pool as a one-task ``srun --overlap`` step of the allocation).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from malleable.errors import ConfigError
from malleable.launch import expand_hostlist, read_hostfile, remote_argv
from malleable.runtime._mpi import proxy_names

from ._events import JobExited

__all__ = [
    "START_GRACE", "TAG_VAR", "HeldExits", "HostPool", "ProcInfo", "Prober", "application", "netns_of", "proc_info",
    "ranks_up", "scan_tagged", "soft_stop",
]

log = logging.getLogger(__name__)

TAG_VAR = "MALLEABLE_JOB_TAG"
_TAG = TAG_VAR.encode() + b"="
START_GRACE = 10.0    # seconds a soft stop waits for a starting job's ranks to appear where it can see them
_RANK_PARENTS = proxy_names()   # every MPI's (a job's ranks are children of these), whichever MPI the daemon uses

# runs on a remote host: print "pid ppid name" of processes carrying the tag given as argv[1]
_REMOTE_SCAN = (
    "import os,sys\n"
    "t=('" + TAG_VAR + "='+sys.argv[1]).encode()+b'\\0'\n"
    "for p in os.listdir('/proc'):\n"
    " if p.isdigit():\n"
    "  try:\n"
    "   e=open('/proc/'+p+'/environ','rb').read()+b'\\0'\n"
    "   if b'\\0'+t in b'\\0'+e: print(p)\n"
    "  except OSError: pass\n"
)


MAX_LOCAL = 4096
"""Most host slots ``--local`` makes on one machine."""


@dataclass(frozen=True, slots=True)
class ProcInfo:
    """A process of a job: pid, parent pid, program name, network namespace inode (0 if unknown)."""

    pid: int
    ppid: int
    name: str
    netns: int


def netns_of(pid: int) -> int:
    """The network-namespace inode of a process on this machine (0 if it is gone)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return 0


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def scan_tagged(prefix: str = "") -> dict[str, list[ProcInfo]]:
    """Processes on this machine carrying a job tag (starting with ``prefix``), grouped by tag."""
    out: dict[str, list[ProcInfo]] = {}
    me = os.getpid()
    want = _TAG + prefix.encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            env = _read(f"/proc/{name}/environ")
            i = env.find(want)
            if i < 0 or (i > 0 and env[i - 1] != 0):
                continue
            end = env.find(b"\0", i)
            tag = env[i + len(_TAG): end if end >= 0 else len(env)].decode(errors="replace")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        info = proc_info(int(name))
        if info is not None:
            out.setdefault(tag, []).append(info)
    return out


def proc_info(pid: int) -> ProcInfo | None:
    """A live (not zombie) process on this machine, or None."""
    try:
        stat = _read(f"/proc/{pid}/stat").decode(errors="replace")
        rp = stat.rfind(")")
        comm = stat[stat.find("(") + 1:rp]
        fields = stat[rp + 2:].split()
        if fields[0] == "Z":
            return None
        return ProcInfo(pid, int(fields[1]), comm, netns_of(pid))
    except (OSError, IndexError, ValueError):
        return None


def ranks_up(procs: Sequence[ProcInfo]) -> bool:
    """Whether some of ``procs`` (all of one job) is a rank: a child of a launcher proxy. Before that, every process
    of the job is its launch chain still starting (mpiexec without its proxy yet looks like the program)."""
    names = {p.pid: p.name for p in procs}
    return any(names.get(p.ppid, "") in _RANK_PARENTS for p in procs)


def soft_stop(procs: dict[int, ProcInfo], shepherd: int, sent: set[tuple[int, str]],
              visible: bool) -> tuple[list[int], bool]:
    """One tick of a job's soft stop: the pids of its processes (``procs`` by pid; ``shepherd`` its shell) that get
    a SIGTERM now, and whether its process group does. Each (pid, name) gets one (an exec'd process is new), and
    ``sent`` records them. A job still starting (no rank yet) whose ranks can be seen (``visible``: a local or
    namespace pool, within the grace) gets nothing until they appear, as hydra signalled while it starts its
    proxies can wait for ever for a proxy the signal ended; without any of the program, the group gets it (mpiexec
    passes it on, if it is up)."""
    if visible and not ranks_up(list(procs.values())):
        return [], False
    seen = {(q.pid, q.name) for q in procs.values()} | {(shepherd, "")}
    app = application(list(procs.values()), shepherd)
    targets = [t for t in app if (t, procs[t].name) not in sent]
    group = not app and bool(seen - sent)
    if group:
        sent.update(seen)
    sent.update((t, procs[t].name) for t in targets)
    return targets, group


def application(procs: Sequence[ProcInfo], spare: int) -> list[int]:
    """The job's own processes among ``procs`` (all of one job): not the launch chain, which is ``spare`` (the
    shepherd), every launcher proxy (``hydra_pmi_proxy``; Open MPI's ``prted`` and ``prterun``, which starts the
    ranks of its own host) and every ancestor of one (mpiexec, the launcher's wrappers). A SIGTERM
    goes to these, so mpiexec stays to forward what they print while they clean up and to report their exit."""
    by_pid = {p.pid: p for p in procs}
    chain = {spare}
    for p in procs:
        if p.name in _RANK_PARENTS:
            q: ProcInfo | None = p
            while q is not None and q.pid not in chain:
                chain.add(q.pid)
                q = by_pid.get(q.ppid)
    return sorted(p.pid for p in procs if p.pid not in chain)


@dataclass
class HostPool:
    """The hosts jobs may use and how to reach them.

    Attributes:
        kind: ``local``, ``netns``, ``ssh`` or ``slurm``.
        nodes: host names (node ids of the policies), in allocation order.
        launcher_exec: the ssh stand-in for ``ssh``/``netns`` pools (None: hydra's ssh).
        advertise: the address jobs use to reach the daemon's host.
    """

    kind: str
    nodes: tuple[str, ...]
    launcher_exec: str | None = None
    advertise: str = "127.0.0.1"

    # -- construction ----------------------------------------------------------------------------------------
    @classmethod
    def local(cls, n: int) -> HostPool:
        """``n`` host slots on this machine."""
        if not 1 <= n <= MAX_LOCAL:
            raise ConfigError(f"--local takes 1 to {MAX_LOCAL} host slots, got {n}")
        return cls("local", tuple(f"local{i}" for i in range(1, n + 1)), None, "127.0.0.1")

    @classmethod
    def from_hosts(cls, hosts: Sequence[str], launcher_exec: str | None = None) -> HostPool:
        """Named hosts (a host list, Slurm syntax allowed); namespace hosts are recognised by the launcher."""
        names: list[str] = []
        for item in hosts:
            names.extend(expand_hostlist(item))
        names = list(dict.fromkeys(names))  # repeated names (slots in a hostfile) count once
        if not names:
            raise ConfigError("no hosts given")
        exe = launcher_exec or os.environ.get("MALLEABLE_LAUNCHER_EXEC") or None
        if exe and Path(exe).name == "netns-launch":
            missing = [h for h in names if not os.path.exists(f"/run/netns/{h}")]
            if missing:
                raise ConfigError(f"not namespace hosts of the test cluster: {','.join(missing)} "
                                  "(malleable testbed up N)")
            return cls("netns", tuple(names), exe, _resolve("head"))
        return cls("ssh", tuple(names), exe, socket.getfqdn())

    @classmethod
    def from_hostfile(cls, path: str, launcher_exec: str | None = None) -> HostPool:
        """Hosts of a hostfile (``host`` or ``host:slots`` lines)."""
        return cls.from_hosts(read_hostfile(path), launcher_exec)

    @classmethod
    def from_slurm(cls, env: dict[str, str] | None = None) -> HostPool:
        """The hosts of the current Slurm allocation.

        Raises:
            ConfigError: not inside an allocation (no ``SLURM_JOB_NODELIST``).
        """
        e = os.environ if env is None else env
        nodelist = e.get("SLURM_JOB_NODELIST") or e.get("SLURM_NODELIST")
        if not nodelist:
            raise ConfigError("--slurm needs a Slurm allocation: SLURM_JOB_NODELIST is not set "
                              "(run it inside salloc or sbatch)")
        return cls("slurm", tuple(dict.fromkeys(expand_hostlist(nodelist))), None, socket.getfqdn())

    # -- launching -------------------------------------------------------------------------------------------
    @property
    def reach(self) -> str:
        """How the MPI launcher reaches this pool's hosts (:data:`malleable.runtime._mpi.REACH`): every slot of a
        ``local`` pool is this machine (``fork``), a ``slurm`` pool's hosts through ``srun``, the others with ssh
        or :attr:`launcher_exec`; the MPI's backend turns this into its own launcher options."""
        return {"local": "fork", "slurm": "slurm"}.get(self.kind, "ssh")

    # -- finding a job's processes ---------------------------------------------------------------------------
    def ns_inode(self, host: str) -> int:
        """Network-namespace inode of a namespace host (0 when unknown)."""
        try:
            return os.stat(f"/run/netns/{host}").st_ino
        except OSError:
            return 0

    def leftovers(self, tag: str, host: str, allowed: int = 0, scan: dict[str, list[ProcInfo]] | None = None,
                  cgroup: Sequence[int] = (), ended: bool = False) -> list[int]:
        """Pids of the job tagged ``tag`` still on ``host``.

        On a ``local`` pool every slot is this machine, so hosts cannot be told apart: while the job runs its rank
        processes are counted instead, and up to ``allowed`` of them are not leftovers (the processes the job
        keeps after a shrink); once it ``ended`` every process of it is a leftover.

        Args:
            tag: the job's tag.
            host: the host to check.
            allowed: local pools only: rank processes the job still has legitimately.
            scan: a :func:`scan_tagged` result to reuse (local and netns pools).
            cgroup: the processes of the job's cgroup on this machine (found even without the tag).
            ended: the job's processes are all gone or to go.
        """
        if self.kind in ("local", "netns"):
            procs = (scan if scan is not None else scan_tagged()).get(tag, [])
            if self.kind == "netns":
                ino = self.ns_inode(host)
                if not ino:
                    return []
                return sorted({p.pid for p in procs if p.netns == ino} | {p for p in cgroup if netns_of(p) == ino})
            if ended:
                return sorted({p.pid for p in procs} | set(cgroup))
            names = {p.pid: p.name for p in procs}
            ranks = [p.pid for p in procs if names.get(p.ppid, "") in _RANK_PARENTS]
            return ranks[allowed:] if len(ranks) > allowed else []
        return self._remote_leftovers(tag, host)

    def _remote_leftovers(self, tag: str, host: str) -> list[int]:
        argv = self._remote_argv(host, [sys.executable, "-c", _REMOTE_SCAN, tag])  # same venv path everywhere
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            log.warning("checking %s for job %s timed out", host, tag)
            return [-1]
        if out.returncode:
            log.warning("checking %s for job %s failed: %s", host, tag, out.stderr.strip()[-300:])
            return [-1]
        return [int(x) for x in out.stdout.split() if x.isdigit()]

    def _remote_argv(self, host: str, cmd: list[str]) -> list[str]:
        """argv running ``cmd`` on ``host``: a one-task step of the allocation on a Slurm pool (there may be no
        ssh between the nodes), else ssh or the launcher."""
        if self.kind == "slurm":
            return ["srun", "--overlap", "--quiet", "-N1", "-n1", "-w", host, *cmd]
        return remote_argv(host, cmd, self.launcher_exec)

    # -- is the host there ------------------------------------------------------------------------------------
    def probe(self, hosts: Sequence[str]) -> dict[str, str]:
        """Which hosts answer: ``{host: ""}`` when it does, else ``{host: reason}``.

        ``local`` slots always answer. A namespace host answers while its namespace exists and its network link
        is up on both ends (``ip link set nc-HOST down`` takes it off the network as a failed node would be).
        ``ssh`` and ``slurm`` hosts must run ``true`` within 10 s (through ssh or the launcher, or as a one-task
        step of the allocation); the checks run concurrently.
        """
        if self.kind == "local":
            return dict.fromkeys(hosts, "")
        if self.kind == "netns":
            return {h: _netns_down(h) for h in hosts}
        out: dict[str, str] = {}
        procs = {h: subprocess.Popen(self._remote_argv(h, ["true"]), stdin=subprocess.DEVNULL,  # noqa: S607
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for h in hosts}
        for h, p in procs.items():
            try:
                _, err = p.communicate(timeout=10)
                out[h] = "" if p.returncode == 0 else (f"check failed ({p.returncode}): "
                                                       f"{err.decode(errors='replace').strip()[-200:]}")
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                out[h] = "no answer within 10 s"
        return out

    def kill(self, tag: str, host: str, pids: Sequence[int]) -> None:
        """SIGKILL leftover processes of a job on a host."""
        real = [p for p in pids if p > 0]
        if not real:
            return
        if self.kind in ("local", "netns"):
            for p in real:
                try:
                    os.kill(p, 9)
                except OSError:
                    pass
            return
        subprocess.run(self._remote_argv(host, ["kill", "-9", *map(str, real)]),
                       capture_output=True, timeout=20, stdin=subprocess.DEVNULL, check=False)


class Prober:
    """Checks hosts in a background thread (:meth:`HostPool.probe` may wait 10 s for an ssh host that does not
    answer), one round at a time, so the daemon's loop never waits for it."""

    def __init__(self, pool: HostPool) -> None:
        self.pool = pool
        self._thread: threading.Thread | None = None
        self._result: tuple[float, dict[str, str]] | None = None
        self._lock = threading.Lock()

    def start(self, hosts: Sequence[str], now: float) -> bool:
        """Begin a round over ``hosts`` at ``now`` unless one is under way; whether it began."""
        if self._thread is not None and self._thread.is_alive():
            return False
        names = tuple(hosts)

        def run() -> None:
            try:
                out = self.pool.probe(names)
            except Exception as e:  # noqa: BLE001 - a failed round is logged, the next one retries
                log.warning("checking the hosts failed: %s", e)
                return
            with self._lock:
                self._result = (now, out)

        self._thread = threading.Thread(target=run, name="host-probe", daemon=True)
        self._thread.start()
        return True

    def result(self) -> tuple[float, dict[str, str]] | None:
        """The last finished round, once (None if none finished since): when it began, and ``{host: reason or
        ""}``."""
        with self._lock:
            out, self._result = self._result, None
        return out

    def join(self, timeout: float) -> None:
        """Wait (bounded) for a round under way."""
        if self._thread is not None:
            self._thread.join(timeout)


@dataclass
class HeldExits:
    """Job exits that a failed host may explain, held until a round of host checks begun after them has finished
    (at most ``limit`` seconds): a launcher often notices a lost host before the periodic check does, and the job
    would fail where the controller re-queues a job hit by a host failure. The host failure is then handled
    first, and the exit after it."""

    limit: float = 15.0
    held: list[JobExited] = field(default_factory=list)

    def due(self, checked_from: float | None, now: float) -> list[JobExited]:
        """The exits a round begun at ``checked_from`` covers, or held for ``limit`` seconds; no longer held."""
        def over(e: JobExited) -> bool:
            return (checked_from is not None and checked_from >= e.now) or now - e.now >= self.limit

        out = [e for e in self.held if over(e)]
        self.held = [e for e in self.held if not over(e)]
        return out


def _netns_down(host: str) -> str:
    """Why a namespace host does not answer, or ""."""
    if not os.path.exists(f"/run/netns/{host}"):
        return "its network namespace is gone"
    try:
        state = Path(f"/sys/class/net/nc-{host}/operstate").read_text().strip()
    except OSError:
        return "its network link is gone"
    if state not in ("up", "unknown"):
        return f"its network link is {state}"
    return ""


def _resolve(name: str) -> str:
    try:
        return socket.gethostbyname(name)
    except OSError:
        return name
