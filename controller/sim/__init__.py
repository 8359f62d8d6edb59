"""The discrete-event simulator: workloads (synthetic, SWF), the engine, metrics, plots and sweeps.

It drives the policies of :mod:`malleable.controller.sched` through the same decision path as the live
controller. Names are loaded on first use (the ``simulate`` command's parser needs none of them).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    "SimResult": "._result", "SizeHistory": "._result", "Simulator": "._engine", "simulate": "._engine",
    "bounded_slowdown": "._metrics", "summary": "._metrics", "utilization_curve": "._metrics",
    "write_jobs_csv": "._metrics", "write_batsim_csv": "._metrics", "read_swf": "._swf", "write_swf": "._swf",
    "Workload": "._workload", "synthetic": "._workload", "plot_result": "._plot", "load_sweep": "._sweep",
    "run_sweep": "._sweep", "IOResult": "._ioengine", "IOSimulator": "._ioengine", "simulate_io": "._ioengine",
    "StorageModel": "._iofs", "StorageReport": "._iofs",
}
__all__ = [
    "IOResult", "IOSimulator", "SimResult", "Simulator", "SizeHistory", "StorageModel", "StorageReport", "Workload",
    "bounded_slowdown", "load_sweep", "plot_result", "read_swf", "run_sweep", "simulate", "simulate_io", "summary",
    "synthetic", "utilization_curve",
    "write_batsim_csv", "write_jobs_csv", "write_swf",
]

if TYPE_CHECKING:
    from ._engine import Simulator, simulate
    from ._ioengine import IOResult, IOSimulator, simulate_io
    from ._iofs import StorageModel, StorageReport
    from ._metrics import bounded_slowdown, summary, utilization_curve, write_batsim_csv, write_jobs_csv
    from ._plot import plot_result
    from ._result import SimResult, SizeHistory
    from ._sweep import load_sweep, run_sweep
    from ._swf import read_swf, write_swf
    from ._workload import Workload, synthetic


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(mod, __name__), name)
