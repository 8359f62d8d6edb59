"""MPICH (the ``mpich`` wheel, hydra's mpiexec): the OFI netmod, hydra's rsh launcher with an ssh stand-in."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from malleable.runtime._mpi import Backend, LaunchSpec

__all__ = ["MPICH"]


def _hydra_argv(mpiexec: str, spec: LaunchSpec) -> list[str]:
    argv = [mpiexec]
    if spec.reach != "ssh":
        argv += ["-launcher", spec.reach]      # fork: hydra starts every proxy here, whatever the host's name
    if spec.hosts:
        exe = spec.launcher_exec or os.environ.get("MALLEABLE_LAUNCHER_EXEC")
        if exe and spec.reach == "ssh":
            argv += ["-launcher", "rsh", "-launcher-exec", exe]
            local = os.environ.get("MALLEABLE_LAUNCHER_LOCALHOST", "head" if Path(exe).name == "netns-launch" else "")
            if local:
                # inside a namespace host the launching host's own name resolves to the host's loopback
                argv += ["-localhost", local]
        argv += ["-hosts", ",".join(spec.hosts)]
    for k, v in spec.env.items():
        argv += ["-genv", k, v]
    if spec.keep_going:
        argv.append("-disable-auto-cleanup")
    return argv + list(spec.extra) + ["-n", str(spec.n), *spec.cmd]


class MPICH(Backend):
    """MPICH 4.2+/5 from the wheel.

    A joiner that *exits* is survived with ``-disable-auto-cleanup``; one killed by a signal makes hydra end
    the whole job even then (checked with MPICH 5.0.2).
    """

    name = "mpich"
    banner = "MPICH"
    proxies = ("hydra_pmi_proxy",)
    forks_any_name = True

    def matches(self, text: str) -> bool:
        """MPICH's library version or hydra's ``--version`` banner."""
        return "MPICH" in text or "HYDRA" in text

    def job_env(self, hosts: Sequence[str] = ()) -> dict[str, str]:
        """The OFI netmod: with UCX a one-process job cannot reach a process spawned on another host."""
        return {"MPIR_CVAR_CH4_NETMOD": "ofi"}

    def launch_argv(self, mpiexec: str, spec: LaunchSpec) -> list[str]:
        """``mpiexec [-launcher rsh -launcher-exec X -localhost head | -launcher fork|slurm] -hosts .. -genv K V ..
        -n N cmd``."""
        return _hydra_argv(mpiexec, spec)

    def release(self, comm: object) -> None:
        """``MPI_Comm_free`` is enough: MPICH finalizes each spawn group on its own once its communicators are freed."""
        comm.Free()  # type: ignore[attr-defined]
