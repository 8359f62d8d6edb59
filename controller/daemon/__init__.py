"""The live controller: the core state machine, the daemon loop, its store, host pools, launching, the wire
protocol, the Python client and the command line.

Importing this package loads nothing; each name is imported on first use, so a job's rank 0 can load the
protocol alone (``malleable.controller.daemon._protocol``) and a command-line client only the client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__all__ = ["Client", "ControllerUnavailable", "Core", "CoreConfig", "Daemon", "DaemonConfig", "HostPool", "Store"]

_WHERE = {
    "Client": "._client", "ControllerUnavailable": "._client", "Core": "._core", "CoreConfig": "._core",
    "Daemon": "._daemon", "DaemonConfig": "._daemon", "HostPool": "._hostpool", "Store": "._store",
}

if TYPE_CHECKING:
    from ._client import Client, ControllerUnavailable
    from ._core import Core, CoreConfig
    from ._daemon import Daemon, DaemonConfig
    from ._hostpool import HostPool
    from ._store import Store


def __getattr__(name: str) -> object:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(mod, __name__), name)
