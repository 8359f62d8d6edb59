"""malleable.runtime: Invasive-MPI-style adaptation verbs over MPI spawn and intercommunicators.

Typical use::

    from malleable import runtime as mr
    status = mr.init_adapt()
    if status is mr.Status.JOINING:
        win = mr.adapt_begin(); ...receive data...; mr.adapt_commit()
    while work_left:
        pending, status, info = mr.probe_adapt()
        if pending:
            win = mr.adapt_begin(); ...redistribute...; mr.adapt_commit()
            if status is mr.Status.LEAVING:
                return
        compute(mr.world())
        with mr.io_phase():          # measured I/O intensity, reported to the controller
            save(...)
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False   # typing stays unloaded: a joiner imports this package on every expansion's path
if TYPE_CHECKING:
    from typing import Any

# Every name loads on first use, so that importing the package (e.g. by the ``malleable`` command
# for ``submit`` or ``fs``) neither imports mpi4py.MPI, which initialises MPI, nor numpy.
_LAZY = {
    **dict.fromkeys(
        ("AdaptReport", "adapt_begin", "adapt_commit", "base_size", "init_adapt", "is_initialized",
         "layout", "probe_adapt", "probe_count", "report_progress", "set_source", "world"),
        "malleable.runtime._world"),
    **dict.fromkeys(("data", "register", "request_adapt"), "malleable.runtime._appcalls"),
    **dict.fromkeys(
        ("Adaptation", "AdaptRecord", "Branch", "Context", "Elastic", "Init", "PhaseStats", "Program", "Rigid",
         "RunResult", "run_program"),
        "malleable.runtime.epop"),
    **dict.fromkeys(("block_counts", "block_range", "plan_blocks", "redistribute", "span_comm"),
                    "malleable.runtime._redistribute"),
    "indices": "malleable.runtime._registered",
    **dict.fromkeys(("IOStats", "io_phase", "io_stats", "report_io"), "malleable.runtime._iometer"),
    **dict.fromkeys(("Group", "GroupLayout"), "malleable.runtime._layout"),
    **dict.fromkeys(("PlanStep", "parse_plan", "validate_plan"), "malleable.runtime._plan"),
    **dict.fromkeys(("AdaptWindow", "Resize", "ProbeResult", "Status"), "malleable.runtime._types"),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'malleable.runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "AdaptReport",
    "AdaptWindow",
    "Resize",
    "Group",
    "GroupLayout",
    "IOStats",
    "PlanStep",
    "ProbeResult",
    "Status",
    "adapt_begin",
    "adapt_commit",
    "base_size",
    "block_counts",
    "block_range",
    "data",
    "indices",
    "init_adapt",
    "io_phase",
    "io_stats",
    "is_initialized",
    "layout",
    "parse_plan",
    "plan_blocks",
    "probe_adapt",
    "probe_count",
    "redistribute",
    "register",
    "report_io",
    "report_progress",
    "request_adapt",
    "set_source",
    "span_comm",
    "validate_plan",
    "world",
    # EPOP phase driver (malleable.runtime.epop)
    "AdaptRecord",
    "Adaptation",
    "Branch",
    "Context",
    "Elastic",
    "Init",
    "PhaseStats",
    "Program",
    "Rigid",
    "RunResult",
    "run_program",
]
