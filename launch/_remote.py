"""Run a command on a named host with the ssh-like launcher (``MALLEABLE_LAUNCHER_EXEC``, else ``ssh``),
or directly when the host is this one. Used for adhocfs servers and by the controller.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
from collections.abc import Sequence
from typing import Any

__all__ = ["is_local_host", "remote_argv", "spawn_on"]

_LOCAL = frozenset({"localhost", "127.0.0.1", "::1"})


def is_local_host(host: str) -> bool:
    """Whether ``host`` names this machine (loopback names or this host name)."""
    return host in _LOCAL or host == socket.gethostname()


def remote_argv(host: str, cmd: Sequence[str], launcher_exec: str | None = None) -> list[str]:
    """argv running ``cmd`` on ``host``: ``cmd`` itself for the local host, else ``LAUNCHER host 'cmd'``.

    Like ssh, the launcher gets the command as one shell-quoted string. The launcher is
    ``launcher_exec``, else ``MALLEABLE_LAUNCHER_EXEC``, else ``ssh``.

    Raises:
        ValueError: empty command or host.
    """
    if not cmd:
        raise ValueError("no command to run")
    if not host:
        raise ValueError("no host given")
    if is_local_host(host):
        return list(cmd)
    exe = launcher_exec or os.environ.get("MALLEABLE_LAUNCHER_EXEC") or "ssh"
    return [exe, host, shlex.join(cmd)]


def spawn_on(
    host: str, cmd: Sequence[str], launcher_exec: str | None = None, **popen: Any
) -> subprocess.Popen:
    """Start ``cmd`` on ``host`` (see :func:`remote_argv`) and return the local process handle."""
    return subprocess.Popen(remote_argv(host, cmd, launcher_exec), **popen)
