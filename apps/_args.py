"""Argument converters shared by the sample applications' command lines."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

__all__ = ["at_least"]


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
