"""Subcommands of the controller part (registered by malleable.cli)."""

from __future__ import annotations

import argparse

from ._ctl_cli import register as register_controller
from ._sim_cli import add_simulate_parser

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    """Add this part's subcommands to the malleable command."""
    add_simulate_parser(sub)
    register_controller(sub)
