"""Running experiments: every run of every named experiment through the sweep machinery (local processes or a Dask
cluster, resumable, a progress bar on a terminal), then each experiment's results file and report page."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from malleable.controller.sim._record import provenance
from malleable.controller.sim._sweep import run_sweep

from ._registry import EXPERIMENTS
from ._results import analyse
from ._runner import run_task

__all__ = ["RUNS_TABLE", "default_seeds", "run_experiments"]

log = logging.getLogger(__name__)

RUNS_TABLE = "runs.jsonl"
"""The runs table in an output folder: one JSON line per finished run (what resuming reads)."""


def default_seeds(quick: bool) -> int:
    """Seeds of a run when none are asked for: 10 for the full set-up, 2 for the quick one."""
    return 2 if quick else 10


def run_experiments(names: Sequence[str], out: str | os.PathLike[str], *, seeds: int | None = None,
                    quick: bool = False, workers: int | None = None, dask: str | None = None,
                    progress: bool = False, command: Sequence[str] | None = None,
                    report: bool = True) -> list[dict[str, Any]]:
    """Run the named experiments with ``seeds`` seeds each and write ``<out>/<name>.json`` (and, with
    ``report``, ``<out>/<name>.html``) per experiment; returns the results documents. ``command`` is recorded in
    them as what produced them (default: this process's ``malleable`` command line).

    Runs already in ``<out>/runs.jsonl`` are not run again, so an interrupted call is resumed by repeating it.

    Raises:
        KeyError: an unknown experiment name.
        ConfigError: ``seeds`` < 1, or a runs table that cannot be read.
        SimulationError: a run failed (the runs finished before it are kept in the table).
    """
    from malleable.errors import ConfigError

    n = default_seeds(quick) if seeds is None else seeds
    if n < 1:
        raise ConfigError(f"--seeds must be >= 1, got {n}")
    exps = [EXPERIMENTS[name] for name in names]
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    tasks = [r.task() for e in exps for r in e.plan(n, quick)]
    tasks.sort(key=lambda t: -float(t["cost"]))          # long runs first: the pool's last minutes stay full
    t0 = time.perf_counter()
    rows = run_sweep(tasks, d / RUNS_TABLE, workers=workers, dask=dask, progress=progress, runner=run_task)
    wall = time.perf_counter() - t0
    prov = provenance(command)
    docs = []
    for e in exps:
        doc = analyse(e, rows, n, quick)
        doc.update(prov)
        doc["wall_seconds"] = round(wall, 1)
        (d / f"{e.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
        if report:
            from malleable.controller.report import write_report
            write_report(doc, d / f"{e.name}.html")
        docs.append(doc)
        log.info("%s: %d runs, %s", e.name, doc["runs"]["count"], doc["verdicts"])
    return docs
