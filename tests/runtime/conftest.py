"""Runtime tests run on every MPI implementation (the ``mpi`` fixture)."""

from tests.runtime._impls import deselect_extras, mpi  # noqa: F401 - the fixture


def pytest_ignore_collect(collection_path, config):
    """The pytest-mpi suite in ``mpi/`` runs under mpiexec (``--with-mpi``, from test_mpi_suites.py); a plain run
    does not collect it, rather than listing its tests as skipped."""
    if collection_path.name == "mpi" and collection_path.parent.name == "runtime" and \
            not config.getoption("--with-mpi", default=False):
        return True
    return None


def pytest_collection_modifyitems(config, items):
    deselect_extras(config, items)
