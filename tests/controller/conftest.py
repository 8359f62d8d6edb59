"""The controller's tests under each MPI implementation's own environment run its subset only
(tests/runtime/_impls.py)."""

from tests.runtime._impls import deselect_extras


def pytest_collection_modifyitems(config, items):
    deselect_extras(config, items, modules=("test_daemon_mpis.py",))
