"""The source documents' experiments rebuilt in the simulator, each printing a published-vs-ours table.

``malleable simulate --experiment NAME [--out DIR] [--quick]`` runs one (or ``all``); each writes
``<out>/<name>.json`` and ``<out>/<name>.png``. Every set-up choice the documents leave open is listed in the
report's assumptions (and in docs/policies.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ._common import Report
from ._exp000 import exp_000_mebf, exp_000_sfsj, failure_plan
from ._exp000io import exp_000_io
from ._exp001 import exp_001
from ._exp002 import exp_002
from ._exp003 import exp_003_w1, exp_003_w2, w2
from ._exp004 import exp_004

__all__ = ["EXPERIMENTS", "Report", "failure_plan", "run_experiment", "w2"]

EXPERIMENTS: dict[str, Callable[[Path, bool], Report]] = {
    "001": exp_001,
    "002": exp_002,
    "000-mebf": exp_000_mebf,
    "000-sfsj": exp_000_sfsj,
    "000-io": exp_000_io,
    "003-w1": exp_003_w1,
    "003-w2": exp_003_w2,
    "004": exp_004,
}
"""Experiments by name (``malleable simulate --experiment NAME``)."""


def run_experiment(name: str, out: str | os.PathLike[str], quick: bool = False) -> Report:
    """Run one experiment, write its JSON (and plots) into ``out`` and return the report.

    Raises:
        KeyError: unknown experiment name.
    """
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    rep = EXPERIMENTS[name](d, quick)
    rep.write(d)
    return rep
