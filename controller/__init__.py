"""malleable.controller: scheduling policies, the discrete-event simulator and the live controller.

The package has four rooms, each importable alone:

- :mod:`~malleable.controller.sched`: the policy contract (jobs, snapshots, decisions, speedup models), every
  policy, the registry and the one decision path; it imports nothing from the other rooms.
- :mod:`~malleable.controller.sim`: the discrete-event engine, workloads, SWF traces, metrics and plots.
- :mod:`~malleable.controller.experiments`: the source documents' experiments, published vs ours.
- :mod:`~malleable.controller.daemon`: the live core, daemon, store, host pools, launching, protocol, client, CLI.

Names are loaded on first use (``from malleable.controller import simulate`` loads the simulator, not the
daemon), so importing the package costs nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_SCHED = (
    "EBS", "EBSConfig", "FAILED_PRIORITY", "MEBF", "MEBF0", "MEBF0Config", "MEBFConfig", "POLICIES", "SPEEDUPS",
    "Decision", "Interrupt", "Job", "JobKind", "MtctModel", "NodeId", "Policy", "Profile", "QueueView",
    "ReconfigCost", "Remember", "Reserve", "ResizeJob", "RunningJob", "Snapshot", "SpeedupModel", "StartJob", "Wake",
    "amdahl", "baseline", "conservative", "easy", "easy_shadow", "fcfs", "fixed_reconfig_cost", "get_policy",
    "linear", "linear_reconfig_cost", "malleable_fill", "mtct_amdahl", "no_reconfig_cost", "per_job_reconfig_cost",
    "pick_victim", "rho_power", "sfsj",
)
_SIM = (
    "SimResult", "Simulator", "Workload", "bounded_slowdown", "plot_result", "read_swf", "simulate", "summary",
    "synthetic", "utilization_curve", "write_jobs_csv", "write_swf",
)
_DAEMON = ("Client", "ControllerUnavailable")

__all__ = sorted(_SCHED + _SIM + _DAEMON)

_WHERE: dict[str, str] = {
    **{n: ".sched" for n in _SCHED}, **{n: ".sim" for n in _SIM}, **{n: ".daemon" for n in _DAEMON},
}

if TYPE_CHECKING:
    from .daemon import Client, ControllerUnavailable  # noqa: F401
    from .sched import *  # noqa: F403
    from .sim import *  # noqa: F403


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(mod, __name__), name)


def __dir__() -> list[str]:
    return __all__
