"""malleable.adhocfs: an elastic ad-hoc file system in user space (metadata server, data servers, client).

Public surface: :func:`connect` (client), :func:`start_fs` / :func:`stop_fs` (deployment),
:func:`expand_fs` / :func:`shrink_fs` (elasticity), :func:`decide` with :class:`RuleConfig` (the RIO/AIO
rule) and :class:`Watcher` (the rule applied to a running file system).
"""

from malleable.adhocfs._admin import expand_fs, resolve_servers, shrink_fs, wait_change
from malleable.adhocfs._client import AdhocFile, FileSystem, connect
from malleable.adhocfs._deploy import Deployment, MetaClient, start_data_servers, start_fs, start_meta, stop_fs
from malleable.adhocfs._monitor import Watcher
from malleable.adhocfs._rule import Action, Decision, RuleConfig, decide

__all__ = [
    "Action",
    "AdhocFile",
    "Decision",
    "Deployment",
    "FileSystem",
    "MetaClient",
    "RuleConfig",
    "Watcher",
    "connect",
    "decide",
    "expand_fs",
    "resolve_servers",
    "shrink_fs",
    "start_data_servers",
    "start_fs",
    "start_meta",
    "stop_fs",
    "wait_change",
]
