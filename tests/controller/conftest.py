"""The controller tests that run under each MPI implementation run its subset only (tests/runtime/_impls.py)."""

from tests.runtime._impls import deselect_extras


def pytest_collection_modifyitems(config, items):
    deselect_extras(config, items)
