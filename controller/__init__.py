"""malleable.controller: scheduling policies, the discrete-event simulator and the controller daemon."""

from ._conservative import Profile, conservative
from ._engine import SimResult, Simulator, simulate
from ._metrics import bounded_slowdown, summary, utilization_curve, write_jobs_csv
from ._model import (
    Decision,
    Job,
    JobKind,
    NodeId,
    Policy,
    QueueView,
    Remember,
    Reserve,
    ResizeJob,
    RunningJob,
    Snapshot,
    StartJob,
    Wake,
)
from ._plot import plot_result
from ._policies import POLICIES, easy, easy_shadow, fcfs, get_policy
from ._speedup import ReconfigCost, SpeedupModel, amdahl, linear_reconfig_cost, no_reconfig_cost
from ._swf import read_swf, write_swf
from ._workload import Workload, synthetic

__all__ = [
    "plot_result",
    "write_jobs_csv",
    "utilization_curve",
    "summary",
    "bounded_slowdown",
    "POLICIES",
    "Decision",
    "Job",
    "JobKind",
    "NodeId",
    "Policy",
    "Profile",
    "QueueView",
    "ReconfigCost",
    "Remember",
    "Reserve",
    "ResizeJob",
    "RunningJob",
    "SimResult",
    "Simulator",
    "Snapshot",
    "SpeedupModel",
    "StartJob",
    "Wake",
    "Workload",
    "amdahl",
    "conservative",
    "easy",
    "easy_shadow",
    "fcfs",
    "get_policy",
    "linear_reconfig_cost",
    "no_reconfig_cost",
    "read_swf",
    "simulate",
    "synthetic",
    "write_swf",
]
