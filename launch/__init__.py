"""malleable.launch: mpiexec/srun command lines, hostfiles, Slurm host lists, running commands on hosts."""

from malleable.launch._hostlist import compress_hostlist, expand_hostlist
from malleable.launch._mpiexec import find_mpiexec, mpiexec_argv, read_hostfile
from malleable.launch._remote import is_local_host, remote_argv, spawn_on

__all__ = ["compress_hostlist", "expand_hostlist", "find_mpiexec", "is_local_host", "mpiexec_argv",
           "read_hostfile", "remote_argv", "spawn_on"]
