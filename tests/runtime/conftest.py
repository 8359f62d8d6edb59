"""Runtime tests run on every MPI implementation (the ``mpi`` fixture)."""

from tests.runtime._impls import mpi  # noqa: F401 - the fixture
