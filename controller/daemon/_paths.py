"""Where a controller keeps its files: the state database, the address file and the jobs' exit-code folder."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["addr_file", "default_state", "jobs_dir", "lock_file"]


def default_state() -> str:
    """``$MALLEABLE_CONTROLLER_STATE``, else ``~/.local/state/malleable/controller.sqlite``."""
    env = os.environ.get("MALLEABLE_CONTROLLER_STATE")
    if env:
        return env
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "malleable", "controller.sqlite")


def addr_file(state: str) -> Path:
    """Where a running daemon publishes its address and pid (beside the state file)."""
    return Path(state + ".addr")


def jobs_dir(state: str) -> Path:
    """Directory of the shepherds' exit-code files."""
    return Path(state + ".d")


def lock_file(state: str) -> Path:
    """The lock a running daemon holds on its state (beside the state file, :mod:`._statefile`)."""
    return Path(state + ".lock")
