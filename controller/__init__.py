"""malleable.controller: scheduling policies, the discrete-event simulator and the controller daemon."""

from ._conservative import Profile, conservative
from ._ebs import EBS, EBSConfig
from ._engine import FAILED_PRIORITY, SimResult, Simulator, simulate
from ._mebf000 import MEBF0, MEBF0Config
from ._mebf002 import MEBF, MEBFConfig
from ._metrics import bounded_slowdown, summary, utilization_curve, write_jobs_csv
from ._model import (
    Decision,
    Interrupt,
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
from ._sfsj import baseline, pick_victim, sfsj
from ._speedup import (
    SPEEDUPS,
    MtctModel,
    ReconfigCost,
    SpeedupModel,
    amdahl,
    fixed_reconfig_cost,
    linear,
    linear_reconfig_cost,
    mtct_amdahl,
    no_reconfig_cost,
    per_job_reconfig_cost,
    rho_power,
)
from ._swf import read_swf, write_swf
from ._workload import Workload, synthetic

__all__ = [
    "EBS",
    "EBSConfig",
    "FAILED_PRIORITY",
    "Interrupt",
    "MEBF",
    "MEBF0",
    "MEBF0Config",
    "MEBFConfig",
    "MtctModel",
    "SPEEDUPS",
    "fixed_reconfig_cost",
    "linear",
    "mtct_amdahl",
    "per_job_reconfig_cost",
    "rho_power",
    "baseline",
    "pick_victim",
    "sfsj",
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
