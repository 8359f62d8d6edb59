"""Subcommands of the controller part (registered by malleable.cli); building the parsers imports no policy,
engine or daemon code, only the commands themselves load what they use."""

from __future__ import annotations

import argparse

from .daemon._cli import register as register_controller
from .sim._cli import add_simulate_parser

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    """Add this part's subcommands to the malleable command."""
    add_simulate_parser(sub)
    register_controller(sub)
