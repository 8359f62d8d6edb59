"""Logging set-up for the command line: only entry points configure handlers; under MPI lines carry rank/size@host."""

from __future__ import annotations

import logging
import os
import socket

__all__ = ["configure"]


def configure(verbosity: int = 0, mpi_tag: str | None = None) -> None:
    """Install one stderr handler on the root logger.

    Args:
        verbosity: 0 warnings, 1 info, 2 debug; ``MALLEABLE_LOG`` (a level name) overrides it.
        mpi_tag: text such as ``"0/4@node1"`` added to every line by MPI processes.
    """
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    env = os.environ.get("MALLEABLE_LOG")
    if env:
        level = getattr(logging, env.upper(), level)
    tag = f" [{mpi_tag}]" if mpi_tag else ""
    fmt = f"%(asctime)s %(levelname)s %(name)s{tag}: %(message)s"
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(fmt, "%H:%M:%S"))
    root.addHandler(handler)
    root.setLevel(level)


def host_tag(rank: int, size: int) -> str:
    """``rank/size@host`` for log lines of MPI processes."""
    return f"{rank}/{size}@{socket.gethostname()}"
