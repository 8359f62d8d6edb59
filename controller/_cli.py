"""Subcommands of the controller part (registered by malleable.cli)."""

from __future__ import annotations

import argparse

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    """Add this part's subcommands to the malleable command."""
