"""What ``malleable controller start`` asks of a daemon: its settings as one record (the command line builds it
without loading the daemon itself)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._core import CoreConfig
from ._hostpool import HostPool

__all__ = ["DaemonConfig"]


@dataclass
class DaemonConfig:
    """What ``malleable controller start`` was asked for.

    Attributes:
        state: the SQLite state file.
        pool: the hosts.
        policy: a registered policy name.
        params: keyword parameters for the policy (only those its signature accepts).
        bind: address to listen on (default: the pool's advertised address for namespace pools, else 127.0.0.1).
        port: TCP port (0: a free one; default: the port of the previous run of this state, else 0).
        tick: seconds between periodic scheduling passes.
        core: settings of the core.
        host_check: seconds between checks that every host answers (0: never).
        mount_root: where jobs' file systems are mounted, ``<root>/<job id>`` on each of their hosts ("": not
            mounted).
    """

    state: str
    pool: HostPool
    policy: str = "easy"
    params: dict[str, Any] = field(default_factory=dict)
    bind: str | None = None
    port: int | None = None
    tick: float = 1.0
    core: CoreConfig = field(default_factory=CoreConfig)
    host_check: float = 5.0
    mount_root: str = ""
