"""``malleable report``: results files to HTML pages (building the parser loads nothing of the package)."""

from __future__ import annotations

import argparse
from pathlib import Path

from malleable.errors import ConfigError

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``report`` to the malleable command."""
    p = sub.add_parser("report", help="write a results file's report: one self-contained HTML page",
                       description="Write one self-contained HTML page per results file: an experiment's "
                                   "<name>.json (from simulate --experiment) or a run's file from simulate "
                                   "--results. The page has the table with intervals and verdicts, Gantt charts, "
                                   "curves over time, distributions, and the command and commit behind them.")
    p.add_argument("results", nargs="+", metavar="RESULTS.json", help="results file(s)")
    p.add_argument("-o", "--out", metavar="FILE",
                   help="the page (one results file only; default: the results file with .html)")
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    """Run ``malleable report``; returns the exit code."""
    if args.out and len(args.results) > 1:
        raise ConfigError("-o/--out names one page: give one results file with it")
    from malleable.controller.report import read_results, write_report

    docs = [(Path(r), read_results(r)) for r in args.results]       # every input checked before any output
    for path, doc in docs:
        out = Path(args.out) if args.out else path.with_suffix(".html")
        write_report(doc, out)
        print(f"wrote {out}")                                        # the CLI's own output
    return 0
