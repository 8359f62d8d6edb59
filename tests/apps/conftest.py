"""The apps tests run on every MPI implementation (the ``mpi`` fixture)."""

from tests.runtime._impls import deselect_extras, mpi  # noqa: F401 - the fixture


def pytest_collection_modifyitems(config, items):
    deselect_extras(config, items)
