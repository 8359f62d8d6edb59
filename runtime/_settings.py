"""The runtime's settings from the environment, checked where they enter (one line on a bad value)."""

from __future__ import annotations

import os

from malleable.errors import ConfigError

TYPE_CHECKING = False   # typing stays unloaded: a joiner imports this on every expansion's path
if TYPE_CHECKING:
    from typing import Any

__all__ = ["DEFAULT_TIMEOUT", "env_int", "env_timeout"]

DEFAULT_TIMEOUT = 60.0
"""Seconds an adaptation step may take before it fails (``MALLEABLE_ADAPT_TIMEOUT``)."""


def env_timeout(timeout: float | None) -> float:
    """The adaptation timeout: ``timeout`` if given, else ``MALLEABLE_ADAPT_TIMEOUT``, else the default."""
    if timeout is not None:
        val: Any = timeout
    else:
        val = os.environ.get("MALLEABLE_ADAPT_TIMEOUT", DEFAULT_TIMEOUT)
    try:
        t = float(val)
    except ValueError:
        raise ConfigError(f"MALLEABLE_ADAPT_TIMEOUT must be a number of seconds, got {val!r}") from None
    if t <= 0:
        raise ConfigError(f"adaptation timeout must be > 0 seconds, got {t}")
    return t


def env_int(name: str, default: int) -> int:
    """A positive integer from the environment variable ``name`` (``default`` when unset)."""
    raw = os.environ.get(name)
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"{name} must be a positive integer, got {raw!r}")
    return int(raw)
