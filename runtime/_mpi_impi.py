"""Intel MPI (the ``impi-rt`` wheel, its hydra): shm + OFI over TCP, hydra's bootstrap options, strict disconnects."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from malleable.runtime._mpi import Backend, LaunchSpec

__all__ = ["IntelMPI"]


class IntelMPI(Backend):
    """Intel MPI 2021.

    With one process and the default fabric selection it runs on shared memory only, and
    ``MPI_Comm_spawn`` then crashes (SIGSEGV, 2021.18): the job needs OFI (``I_MPI_FABRICS=ofi``, see :meth:`job_env`);
    libfabric's ``tcp`` provider is the one that works without a fast network. ``MPI_Finalize`` waits for
    every process still *connected* (a freed but not disconnected communicator counts), so communicators
    spanning spawn groups are disconnected; after an expansion that abandoned dead or stopped joiners the
    process ends without ``MPI_Finalize``, which would wait for them forever. A thread inside
    ``MPI_Comm_spawn`` holds the library's lock: other threads' MPI calls wait for it (2021.18).
    """

    name = "impi"
    banner = "Intel(R) MPI"
    proxies = ("hydra_pmi_proxy",)
    survives_joiner_signal = True
    finalize_after_failed_spawn = False
    finalize_on_give_up = False
    concurrent_spawn = False

    def job_env(self, hosts: Sequence[str] = ()) -> dict[str, str]:
        """OFI over TCP for every pair of processes, also on one host: with shared memory next to it
        (``shm:ofi``) a spawned group's intercommunicator barrier with its parents may never complete (seen
        with 2021.18 on a 6.18 kernel: the joiners pass it, the parents wait forever)."""
        return {"I_MPI_FABRICS": "ofi", "FI_PROVIDER": "tcp"}

    def launch_argv(self, mpiexec: str, spec: LaunchSpec) -> list[str]:
        """Intel's hydra: ``-bootstrap ssh -bootstrap-exec X -iface IF -hosts .. -ppn 1 -genv K V .. -n N cmd``
        (``-bootstrap fork`` or ``slurm`` for those ways of reaching the hosts).

        Its proxies reach mpiexec at the address of ``-iface`` (``MALLEABLE_LAUNCHER_IFACE``; for the namespace
        test cluster's ``netns-launch``, its bridge ``mbr0``): inside a namespace the launching host's name
        resolves to the namespace's own loopback. ``-ppn 1`` places the processes round robin, as MPICH does.
        """
        argv = [mpiexec]
        if spec.reach != "ssh":
            argv += ["-bootstrap", spec.reach]
        if spec.hosts and spec.reach != "fork":  # fork: the names are slots of this machine, unknown to its hydra
            exe = spec.launcher_exec or os.environ.get("MALLEABLE_LAUNCHER_EXEC")
            if exe and spec.reach == "ssh":
                argv += ["-bootstrap", "ssh", "-bootstrap-exec", exe]
                iface = os.environ.get("MALLEABLE_LAUNCHER_IFACE", "mbr0" if Path(exe).name == "netns-launch" else "")
                if iface:
                    argv += ["-iface", iface]
            argv += ["-hosts", ",".join(dict.fromkeys(spec.hosts)), "-ppn", "1"]
        for k, v in spec.env.items():
            argv += ["-genv", k, v]
        if spec.keep_going:
            argv.append("-disable-auto-cleanup")
        return argv + list(spec.extra) + ["-n", str(spec.n), *spec.cmd]
