"""malleable.launch: mpiexec/srun command lines, hostfiles, Slurm host lists."""

from malleable.launch._mpiexec import find_mpiexec, launcher_args, mpiexec_argv, read_hostfile

__all__ = ["find_mpiexec", "launcher_args", "mpiexec_argv", "read_hostfile"]
