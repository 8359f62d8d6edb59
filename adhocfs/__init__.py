"""malleable.adhocfs: an elastic ad-hoc file system in user space (metadata server, data servers, client).

Public surface: :func:`connect` (client), :func:`start_fs` / :func:`stop_fs` (deployment),
:func:`expand_fs` / :func:`shrink_fs` (elasticity), :func:`decide` with :class:`RuleConfig` (the RIO/AIO
rule) and :class:`Watcher` (the rule applied to a running file system).
Names are loaded on first use, so the command line builds its parsers without loading the servers or the client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE: dict[str, str] = {
    "Scaling": "._rule",
    "AdhocFile": "._client",
    "ScaleDecision": "._rule",
    "Deployment": "._deploy",
    "FileSystem": "._client",
    "MetaClient": "._deploy",
    "RuleConfig": "._rule",
    "Watcher": "._monitor",
    "connect": "._client",
    "decide": "._rule",
    "expand_fs": "._admin",
    "resolve_servers": "._admin",
    "shrink_fs": "._admin",
    "start_data_servers": "._deploy",
    "start_fs": "._deploy",
    "start_meta": "._deploy",
    "stop_fs": "._deploy",
    "wait_change": "._admin",
}
__all__ = sorted(_WHERE)

if TYPE_CHECKING:
    from ._admin import expand_fs, resolve_servers, shrink_fs, wait_change
    from ._client import AdhocFile, FileSystem, connect
    from ._deploy import Deployment, MetaClient, start_data_servers, start_fs, start_meta, stop_fs
    from ._monitor import Watcher
    from ._rule import RuleConfig, ScaleDecision, Scaling, decide


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(mod, __name__), name)


def __dir__() -> list[str]:
    return __all__
