"""Subcommands of the controller part (registered by malleable.cli)."""

from __future__ import annotations

import argparse

from ._sim_cli import add_simulate_parser

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    """Add this part's subcommands to the malleable command."""
    add_simulate_parser(sub)
