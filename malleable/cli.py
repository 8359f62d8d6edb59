"""The single ``malleable`` command: each part registers its subcommands from an explicit table."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from malleable import __version__
from malleable._log import configure
from malleable.errors import MalleableError

__all__ = ["build_parser", "main"]

log = logging.getLogger(__name__)

# Modules that register subcommands, in the order they appear in --help. Each defines
# ``register(subparsers)``, adding parsers whose ``func(args) -> int`` runs the command.
SUBCOMMAND_MODULES = (
    "malleable.runtime._cli",      # run
    "malleable.apps._cli",         # demo
    "malleable.controller._cli",   # simulate, controller, submit, queue, cancel, nodes, info, history
    "malleable.adhocfs._cli",      # fs ...
    "malleable.launch._cli",       # testbed ...
)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (used by ``main`` and by tests)."""
    parser = argparse.ArgumentParser(
        prog="malleable",
        description="Malleable MPI jobs: run and resize them, schedule them, and give them an elastic file system.",
        epilog="Run 'malleable COMMAND --help' for the options of one command.",
    )
    parser.add_argument("--version", action="version", version=f"malleable {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    p = sub.add_parser("completion", help="print the shell completion script (bash, zsh or tcsh)",
                       description="Print a static completion script for the malleable command (no hook runs at "
                                   "completion time).",
                       epilog="install for bash: malleable completion bash > "
                              "~/.local/share/bash-completion/completions/malleable (zsh: malleable completion zsh > "
                              "~/.zfunc/_malleable with ~/.zfunc in fpath)")
    p.add_argument("shell", choices=("bash", "zsh", "tcsh"))
    p.set_defaults(func=_completion)
    return parser


def _completion(args: argparse.Namespace) -> int:
    import shtab  # only here: building the parser must stay cheap

    print(shtab.complete(build_parser(), args.shell), end="")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``malleable`` script; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    configure(args.verbose)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except MalleableError as e:
        print(f"malleable {args.command}: error: {e}", file=sys.stderr)  # the CLI's own user-facing output
        return 1
    except KeyboardInterrupt:
        print(f"malleable {args.command}: interrupted", file=sys.stderr)
        return 130
