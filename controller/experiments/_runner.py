"""One run of an experiment as a sweep task: what local worker processes and Dask workers execute."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from ._spec import Run

__all__ = ["run_task"]


def _plain(x: Any) -> Any:
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON: {type(x).__name__}")


def run_task(task: dict[str, Any]) -> dict[str, Any]:
    """Simulate the run a task describes; its row: the task, its ``metrics``, its ``record`` (or None), the
    wall-clock ``seconds`` it took and the ``cpu_seconds`` it used (the figure that does not depend on the load of
    a shared machine)."""
    from ._registry import EXPERIMENTS

    run = Run.from_task(task)
    t0, c0 = time.perf_counter(), time.process_time()
    metrics = dict(EXPERIMENTS[run.exp].simulate(run))
    record = metrics.pop("record", None)
    row = dict(task, metrics=metrics, record=record, seconds=time.perf_counter() - t0,
               cpu_seconds=time.process_time() - c0)
    return json.loads(json.dumps(row, default=_plain))      # plain JSON values, as the table stores them
