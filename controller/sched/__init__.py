"""The scheduling contract and every policy: pure code shared by the simulator and the live controller.

A policy is a pure function ``decide(snapshot, now) -> list[Decision]`` over the frozen records of
:mod:`._model`; :func:`apply_decisions` is the one path that validates and applies decisions, for both callers.
Nothing here imports the simulator or the daemon.
"""

from ._conservative import Profile, conservative, conservative_reference
from ._ebs import EBS, EBSConfig
from ._fill import malleable_fill
from ._mebf000 import MEBF0, MEBF0Config
from ._mebf002 import MEBF, MEBFConfig
from ._model import (
    FAILED_PRIORITY,
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
from ._registry import ENTRY_POINT_GROUP, POLICIES, get_policy
from ._rigid import easy, easy_shadow, fcfs
from ._sfsj import baseline, pick_victim, sfsj
from ._ledger import Applied, Effect, Ledger
from ._speedup import (
    SPEEDUPS,
    MtctModel,
    ReconfigCost,
    SpeedupModel,
    amdahl,
    declared,
    fixed_reconfig_cost,
    linear,
    linear_reconfig_cost,
    mtct_amdahl,
    no_reconfig_cost,
    parse_speedup,
    per_job_reconfig_cost,
    rho_power,
)

__all__ = [
    "Applied", "EBS", "ENTRY_POINT_GROUP", "Effect", "Ledger", "FAILED_PRIORITY", "MEBF", "MEBF0", "POLICIES", "SPEEDUPS",
    "Decision", "EBSConfig", "Interrupt", "Job", "JobKind", "MEBF0Config", "MEBFConfig", "MtctModel", "NodeId",
    "Policy", "Profile", "QueueView", "ReconfigCost", "Remember", "Reserve", "ResizeJob", "RunningJob", "Snapshot",
    "SpeedupModel", "StartJob", "Wake",
    "amdahl", "baseline", "declared", "conservative", "conservative_reference", "easy", "easy_shadow", "fcfs",
    "fixed_reconfig_cost", "get_policy", "linear", "linear_reconfig_cost", "malleable_fill", "mtct_amdahl",
    "no_reconfig_cost", "parse_speedup", "per_job_reconfig_cost", "pick_victim", "rho_power", "sfsj",
]
