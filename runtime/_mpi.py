"""The MPI implementation under the runtime: one small backend module per implementation, one registry.

What differs between MPICH, Open MPI and Intel MPI (launcher flags, the environment a job needs, spawn
info keys, how communicators spanning spawn groups are released, what a dying joiner does to the job) lives
in ``_mpi_mpich``, ``_mpi_openmpi`` and ``_mpi_impi``. Inside a job the backend is chosen from
``MPI.Get_library_version()``; a launcher (``malleable run``, tests, benchmarks) chooses it from the
``mpiexec --version`` banner, without initialising MPI. ``MALLEABLE_MPI`` (``mpich``, ``openmpi``,
``impi``) overrides both.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

from malleable.errors import ConfigError
from malleable.runtime._record import Record

TYPE_CHECKING = False   # typing stays unloaded: a joiner imports this on every expansion's path
if TYPE_CHECKING:
    from typing import Any

__all__ = ["REACH", "REACH_ENV", "Backend", "LaunchSpec", "all_here", "backend_named", "current", "detect",
           "for_mpiexec", "names", "proxy_names"]


REACH = ("ssh", "fork", "slurm")
"""How a launcher reaches the hosts of a :class:`LaunchSpec`: ``ssh`` (ssh, or the stand-in ``launcher_exec``, else
``MALLEABLE_LAUNCHER_EXEC``), ``fork`` (every host name is a slot of this machine: everything starts here), ``slurm``
(the current Slurm allocation's own launcher, ``srun``)."""


REACH_ENV = "MALLEABLE_LAUNCHER_REACH"
"""Set to ``fork`` in a job whose host names are all slots of this machine (a controller's ``--local`` pool): its
spawns then go to this machine under a launcher that does not know the names (see :meth:`Backend.spawn_host`)."""


def all_here() -> bool:
    """Whether this job's hosts are all slots of this machine (``MALLEABLE_LAUNCHER_REACH=fork``)."""
    return os.environ.get(REACH_ENV) == "fork"


class LaunchSpec(Record):
    """What to start: ``n`` copies of ``cmd`` on ``hosts`` (round robin; empty: this host), with ``env``;
    ``keep_going``: a spawned process that dies must not end the job; ``extra``: more launcher options;
    ``reach``: how the launcher reaches ``hosts`` (:data:`REACH`); ``pool``: hosts the job may spawn onto later
    (a launcher that reaches only the hosts it started with is given them too)."""

    __slots__ = ("n", "cmd", "hosts", "env", "launcher_exec", "keep_going", "extra", "reach", "pool")
    n: int
    cmd: tuple[str, ...]
    hosts: tuple[str, ...]
    env: dict[str, str]
    launcher_exec: str | None
    keep_going: bool
    extra: tuple[str, ...]
    reach: str
    pool: tuple[str, ...]

    def __init__(self, n: int, cmd: tuple[str, ...], hosts: tuple[str, ...] = (), env: dict[str, str] | None = None,
                 launcher_exec: str | None = None, keep_going: bool = False, extra: tuple[str, ...] = (),
                 reach: str = "ssh", pool: tuple[str, ...] = ()) -> None:
        if reach not in REACH:
            raise ConfigError(f"unknown way to reach hosts {reach!r}; known: {', '.join(REACH)}")
        self._init(n=n, cmd=cmd, hosts=hosts, env=dict(env or {}), launcher_exec=launcher_exec,
                   keep_going=keep_going, extra=extra, reach=reach, pool=pool)


class Backend:
    """Behaviour of one MPI implementation; subclasses override what differs. Stateless.

    Attributes:
        name: registry name (``mpich``, ``openmpi``, ``impi``).
        banner: text identifying the implementation in ``MPI.Get_library_version()`` and ``mpiexec --version``.
        survives_joiner_signal: whether a joiner killed by a signal leaves the rest of the job running.
        finalize_after_failed_spawn: whether ``MPI_Finalize`` returns after an expansion abandoned dead or stopped
            joiners (else the process ends without it).
        finalize_in_job: whether a process connected to other spawn groups may call ``MPI_Finalize`` (else every
            process of a malleable job ends without it, after meeting the others, and the launcher accepts that).
        finalize_on_give_up: whether a joiner whose expansion failed calls ``MPI_Finalize`` before exiting (the
            launchers take a process that exits without it for a failed one), or must exit without it.
        spawn_across_hosts: whether ``MPI_Comm_spawn`` can place processes on another host than the spawning one.
        reap_stuck_spawn: whether a job that ends with a spawn still inside MPI kills the joiners of that spawn
            left stuck in ``MPI_Init`` on rank 0's host (the launcher would otherwise wait for them forever).
        concurrent_spawn: whether other threads' MPI calls go on while one thread is inside ``MPI_Comm_spawn``
            (else a spawn that hangs delays the failure past the timeout by its own length, and an expansion
            cannot overlap computation).
        proxies: names of the launcher's processes that start a job's ranks on a host (a controller tells the job's
            own processes from its launch chain by them).
        forks_any_name: whether the launcher, reaching hosts with ``fork``, starts a spawn on a slot of any name
            on this machine (else such spawns get no host: see :meth:`spawn_host`).
    """

    name = ""
    banner = ""
    survives_joiner_signal = False
    finalize_after_failed_spawn = True
    finalize_in_job = True
    finalize_on_give_up = True
    reap_stuck_spawn = False
    concurrent_spawn = True
    spawn_across_hosts = True
    proxies: tuple[str, ...] = ()
    forks_any_name = False

    def matches(self, text: str) -> bool:
        """Whether a library-version or launcher banner names this implementation."""
        return self.banner in text

    def job_env(self, hosts: Sequence[str] = ()) -> dict[str, str]:
        """Variables every process of a malleable job needs (a user's own setting of them wins)."""
        return {}

    def launch_argv(self, mpiexec: str, spec: LaunchSpec) -> list[str]:
        """argv of the launcher for ``spec``."""
        raise NotImplementedError

    def spawn_host(self, host: str | None) -> str | None:
        """Where a spawn group aimed at ``host`` is asked to go: nowhere in particular when every host is a slot
        of this machine whose name the launcher does not know (:func:`all_here`), else ``host``."""
        return None if all_here() and not self.forks_any_name else host

    def reach_limit(self) -> str:
        """Why this MPI's jobs do not spawn onto another host, nor grow while they span several (the refusal's
        reason where it applies: see :meth:`can_reach`)."""
        return f"{self.name} cannot spawn processes onto another host here, nor grow a job that spans several (see " \
            "docs/runtime.md)"

    def growth_limit(self) -> str:
        """Why a job whose rank 0 is this process cannot grow at all here ('' if it can)."""
        return ""

    def can_reach(self) -> bool:
        """Whether spawns may go to other hosts than the spawning one (or the job's hosts are all here)."""
        return self.spawn_across_hosts or all_here()

    def spawn_info(self, host: str | None) -> dict[str, str]:
        """MPI info keys placing one spawn group on ``host`` (None: wherever the launcher wants)."""
        return {"host": host} if host else {}

    def release(self, comm: Any) -> None:
        """Release a communicator that spans several spawn groups, so each group can finalize alone."""
        comm.Disconnect()


def _registry() -> dict[str, Backend]:
    from malleable.runtime._mpi_impi import IntelMPI
    from malleable.runtime._mpi_mpich import MPICH
    from malleable.runtime._mpi_openmpi import OpenMPI
    from malleable.runtime._mpi_openmpi4 import OpenMPI4

    return {b.name: b for b in (MPICH(), OpenMPI4(), OpenMPI(), IntelMPI())}


@functools.cache
def _backends() -> dict[str, Backend]:
    return _registry()


def names() -> list[str]:
    """Registered backend names."""
    return list(_backends())


def proxy_names() -> frozenset[str]:
    """Process names of every registered launcher's rank-starting processes."""
    return frozenset(p for b in _backends().values() for p in b.proxies)


def backend_named(name: str) -> Backend:
    """The backend called ``name``.

    Raises:
        ConfigError: no such backend.
    """
    try:
        return _backends()[name]
    except KeyError:
        raise ConfigError(f"unknown MPI implementation {name!r}; known: {', '.join(names())}") from None


def detect(text: str) -> Backend:
    """The backend whose banner appears in ``text`` (Intel MPI is tested before MPICH, whose ABI it shares).

    Raises:
        ConfigError: no backend recognises the text.
    """
    forced = os.environ.get("MALLEABLE_MPI")
    if forced:
        return backend_named(forced)
    for b in _backends().values():
        if b.name != "mpich" and b.matches(text):
            return b
    if _backends()["mpich"].matches(text):
        return _backends()["mpich"]
    raise ConfigError(f"unsupported MPI implementation: {text.strip().splitlines()[0] if text.strip() else '?'!r}")


def current() -> Backend:
    """The backend of the MPI library loaded in this process (imports ``mpi4py.MPI``)."""
    from mpi4py import MPI

    return _by_library(MPI.Get_library_version())


@functools.cache
def _by_library(version: str) -> Backend:
    return detect(version)


def for_mpiexec(mpiexec: str) -> Backend:
    """The backend of a launcher, from its ``--version`` banner (cached per path; MPI is not initialised).

    Raises:
        ConfigError: the launcher cannot run or is not recognised.
    """
    forced = os.environ.get("MALLEABLE_MPI")
    if forced:
        return backend_named(forced)
    return detect(_banner(mpiexec))


@functools.cache
def _banner(mpiexec: str) -> str:
    import subprocess  # launchers only: a job's processes never run it

    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ConfigError(f"cannot run {mpiexec} --version: {e}") from None
    return out.stdout + out.stderr
