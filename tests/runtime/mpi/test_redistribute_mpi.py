"""pytest-mpi suite: block redistribution over a real communicator equals the NumPy reference.

Run as ``mpiexec -n 5 python -m pytest --with-mpi tests/runtime/mpi`` (the serial suite does this
in tests/runtime/test_mpi_suites.py); without ``--with-mpi`` these tests are skipped.
"""

from __future__ import annotations

import numpy as np
import pytest

from malleable.runtime import block_range, redistribute


def _cases(seed, count, max_parts):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        ndim = int(rng.integers(1, 4))
        axis = int(rng.integers(0, ndim))
        shape = [int(rng.integers(0, 9)) for _ in range(ndim)]
        shape[axis] = int(rng.integers(0, 60))
        dtype = [np.float64, np.int32, np.complex128, np.uint8][int(rng.integers(0, 4))]
        old, new = int(rng.integers(1, max_parts + 1)), int(rng.integers(1, max_parts + 1))
        yield tuple(shape), axis, np.dtype(dtype), old, new


@pytest.mark.mpi(min_size=2)
def test_redistribute_random_cases_match_numpy():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    checked = 0
    for shape, axis, dtype, old, new in _cases(1234, 250, comm.size):
        ref = (np.arange(int(np.prod(shape)), dtype=np.int64) % 251).astype(dtype).reshape(shape)
        local = None
        if comm.rank < old:
            lo, hi = block_range(shape[axis], old, comm.rank)
            local = np.take(ref, range(lo, hi), axis=axis)
        out = redistribute(local, shape, dtype, old, new, comm, axis=axis)
        if comm.rank < new:
            lo, hi = block_range(shape[axis], new, comm.rank)
            expect = np.take(ref, range(lo, hi), axis=axis)
        else:
            expect = np.take(ref, range(0), axis=axis)
        assert out.dtype == dtype and out.shape == expect.shape and np.array_equal(out, expect), (shape, axis, old, new)
        checked += 1
    assert comm.allreduce(checked) == 250 * comm.size


@pytest.mark.mpi(min_size=2)
def test_specific_uneven_changes():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    for old, new in [(3, 5), (5, 2), (2, 5), (1, 4), (4, 1)]:
        old, new = min(old, comm.size), min(new, comm.size)
        ref = np.arange(17 * 6, dtype=np.float64).reshape(17, 6)
        for axis in (0, 1):
            n = ref.shape[axis]
            local = None
            if comm.rank < old:
                lo, hi = block_range(n, old, comm.rank)
                local = np.take(ref, range(lo, hi), axis=axis)
            out = redistribute(local, ref.shape, ref.dtype, old, new, comm, axis=axis)
            parts = comm.gather(out)
            if comm.rank == 0:
                assert np.array_equal(np.concatenate(parts[:new], axis=axis), ref)


@pytest.mark.mpi(min_size=2)
def test_wrong_local_shape_is_refused():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    with pytest.raises(ValueError, match="expected"):
        redistribute(np.zeros((99, 2)), (10, 2), np.float64, comm.size, 1, comm)
