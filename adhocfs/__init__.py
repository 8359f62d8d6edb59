"""malleable.adhocfs: an elastic ad-hoc file system in user space (metadata server, data servers, client)."""

from malleable.adhocfs._client import AdhocFile, FileSystem, connect
from malleable.adhocfs._deploy import Deployment, MetaClient, start_data_servers, start_fs, stop_fs

__all__ = [
    "AdhocFile",
    "Deployment",
    "FileSystem",
    "MetaClient",
    "connect",
    "start_data_servers",
    "start_fs",
    "stop_fs",
]
