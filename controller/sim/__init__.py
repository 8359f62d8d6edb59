"""The discrete-event simulator: workloads (synthetic, SWF), the engine, metrics and plots.

It drives the policies of :mod:`malleable.controller.sched` through the same decision path as the live
controller. Names are loaded on first use (the ``simulate`` command's parser needs none of them).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    "SimResult": "._engine", "Simulator": "._engine", "simulate": "._engine",
    "bounded_slowdown": "._metrics", "summary": "._metrics", "utilization_curve": "._metrics",
    "write_jobs_csv": "._metrics", "read_swf": "._swf", "write_swf": "._swf", "Workload": "._workload",
    "synthetic": "._workload", "plot_result": "._plot",
}
__all__ = sorted(_WHERE)

if TYPE_CHECKING:
    from ._engine import SimResult, Simulator, simulate
    from ._metrics import bounded_slowdown, summary, utilization_curve, write_jobs_csv
    from ._plot import plot_result
    from ._swf import read_swf, write_swf
    from ._workload import Workload, synthetic


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(mod, __name__), name)
