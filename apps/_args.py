"""Argument converters shared by the sample applications' command lines."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["at_least", "refused", "size_arg"]


def at_least(kind: type, minimum: float) -> Callable[[str], Any]:
    """An argparse ``type=`` that parses ``kind`` (int or float) and refuses values below ``minimum``."""

    def conv(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {text}")
        return v

    return conv


def size_arg(text: str) -> int:
    """An argparse ``type=`` for a byte count: ``1000``, ``512K``, ``64M``, ``2G`` (powers of 1024), >= 0."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("B")
    unit = t[-1:] if t[-1:] in units and t[-1:] else ""
    try:
        v = float(t[: len(t) - len(unit)]) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size such as 4096, 512K or 64M: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return int(v)


def refused(app: str, err: Exception) -> int:
    """Report a job the runtime refused before it started (every rank refuses alike): one line, from world rank 0
    only, instead of a traceback per rank; returns the exit code."""
    from mpi4py import MPI

    if MPI.COMM_WORLD.rank == 0:
        sys.stderr.write(f"{app}: error: {err}\n")
    return 1
