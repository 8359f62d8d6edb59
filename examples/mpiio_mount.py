"""MPI-IO on an adhocfs mount: every rank writes its part of one shared file with collective and independent
writes (ROMIO's UFS driver sees a plain POSIX path), then another program can check it.

    mpiexec -n 4 python examples/mpiio_mount.py write /mnt/adhoc/mpiio.bin
    python examples/mpiio_mount.py check /mnt/adhoc/mpiio.bin 4

The file holds, for each rank r of n: a collective part (``PART`` float64 values r*PART .. r*PART+PART-1, at
r*PART*8) written with ``Write_at_all``, then an independent tail (``TAIL`` bytes of value r+1 after the n
parts) written with ``Write_at``. ``check`` reads the file with plain NumPy and says whether it is exact.
"""

from __future__ import annotations

import sys

import numpy as np

PART = 300_001  # float64 values per rank: parts cross the file system's 512 KiB blocks at odd offsets
TAIL = 70_001  # bytes per rank after the parts


def expected(nranks: int) -> np.ndarray:
    """The bytes the file must hold after ``write`` with ``nranks`` ranks."""
    parts = np.arange(nranks * PART, dtype=np.float64).view(np.uint8)
    tails = np.repeat(np.arange(1, nranks + 1, dtype=np.uint8), TAIL)
    return np.concatenate([parts, tails])


def write(path: str) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    fh = MPI.File.Open(comm, path, MPI.MODE_CREATE | MPI.MODE_WRONLY)
    fh.Set_size(0)  # a file left by an earlier run is cut (collective)
    part = np.arange(rank * PART, (rank + 1) * PART, dtype=np.float64)
    fh.Write_at_all(rank * PART * 8, part)  # collective: ROMIO's aggregators write contiguous ranges
    tail = np.full(TAIL, rank + 1, dtype=np.uint8)
    fh.Write_at(size * PART * 8 + rank * TAIL, tail)  # independent
    fh.Sync()
    fh.Close()  # collective: sizes and written ranges are published before it returns
    hosts = comm.gather(MPI.Get_processor_name())
    if rank == 0:
        n = len(set(hosts))
        print(f"{size} ranks on {n} host{'s' if n > 1 else ''} wrote {size * (PART * 8 + TAIL)} bytes to {path}")


def check(path: str, nranks: int) -> bool:
    """Whether ``path`` holds exactly what ``write`` with ``nranks`` ranks writes."""
    with open(path, "rb") as f:
        got = np.frombuffer(f.read(), dtype=np.uint8)
    want = expected(nranks)
    ok = got.size == want.size and bool(np.array_equal(got, want))
    print(f"{path}: {got.size} bytes, {'exact' if ok else f'WRONG (expected {want.size} bytes)'}")
    return ok


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "write":
        write(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "check":
        sys.exit(0 if check(sys.argv[2], int(sys.argv[3])) else 1)
    else:
        sys.exit("usage: mpiio_mount.py write PATH | check PATH NRANKS")
