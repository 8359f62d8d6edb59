"""Build mpiexec (MPICH hydra) command lines, with the optional launcher used for remote hosts."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from malleable.errors import ConfigError

__all__ = ["find_mpiexec", "launcher_args", "mpiexec_argv", "read_hostfile"]


def find_mpiexec() -> str:
    """The mpiexec beside this Python (the MPICH wheel's), else the one on PATH.

    Raises:
        ConfigError: no mpiexec can be found.
    """
    exe = os.environ.get("MALLEABLE_MPIEXEC")
    if exe:
        return exe
    here = shutil.which("mpiexec", path=os.path.dirname(sys.executable))
    found = here or shutil.which("mpiexec")
    if not found:
        raise ConfigError("mpiexec not found: install the MPICH wheel (pip install mpich) or set MALLEABLE_MPIEXEC")
    return found


def launcher_args(launcher_exec: str | None = None) -> list[str]:
    """Hydra options that start remote proxies with ``launcher_exec`` (an ssh stand-in).

    ``launcher_exec`` defaults to ``MALLEABLE_LAUNCHER_EXEC``; with neither, hydra's own default
    (ssh) is used. With the namespace test cluster's ``netns-launch`` the rsh launcher is chosen
    (no connection throttling) and ``-localhost head`` so proxies reach mpiexec over the bridge.
    """
    exe = launcher_exec or os.environ.get("MALLEABLE_LAUNCHER_EXEC")
    if not exe:
        return []
    args = ["-launcher", "rsh", "-launcher-exec", exe]
    localhost = os.environ.get("MALLEABLE_LAUNCHER_LOCALHOST", "head" if Path(exe).name == "netns-launch" else "")
    if localhost:
        args += ["-localhost", localhost]
    return args


def mpiexec_argv(
    n: int,
    cmd: Sequence[str],
    hosts: Sequence[str] | None = None,
    launcher_exec: str | None = None,
    env: dict[str, str] | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """argv of ``mpiexec -n N [launcher] [-hosts ...] [-genv K V ...] cmd``.

    Args:
        n: number of processes.
        cmd: the program and its arguments.
        hosts: hosts to place the processes on (round robin); None for the local host.
        launcher_exec: an ssh stand-in for remote hosts (see :func:`launcher_args`).
        env: variables passed to every process with ``-genv``.
        extra: more mpiexec options (e.g. ``-disable-auto-cleanup``).

    Raises:
        ValueError: ``n`` < 1 or ``cmd`` is empty.
    """
    if n < 1:
        raise ValueError(f"process count must be >= 1, got {n}")
    if not cmd:
        raise ValueError("no command to run")
    argv = [find_mpiexec()]
    if hosts:
        argv += launcher_args(launcher_exec) + ["-hosts", ",".join(hosts)]
    for k, v in (env or {}).items():
        argv += ["-genv", k, v]
    return argv + list(extra) + ["-n", str(n), *cmd]


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
