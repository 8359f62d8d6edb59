"""The scheduling contract and every policy: pure code shared by the simulator and the live controller.

A policy is a pure function ``decide(snapshot, now) -> list[Decision]`` over the frozen records of
:mod:`._model`; :func:`apply_decisions` is the one path that validates and applies decisions, for both callers.
Nothing here imports the simulator or the daemon. Names are loaded on first use, so a module that needs only
the contract (the live protocol validating a speedup declaration) loads no policy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE: dict[str, str] = {
    "Applied": "._ledger",
    "BBEasy": "._burst",
    "BBEasyConfig": "._burst",
    "Plan": "._plan",
    "PlanConfig": "._plan",
    "PlanStats": "._plan",
    "Profile2": "._burst",
    "Decision": "._model",
    "EBS": "._ebs",
    "EBSConfig": "._ebs",
    "ENTRY_POINT_GROUP": "._registry",
    "Effect": "._ledger",
    "FAILED_PRIORITY": "._model",
    "IOAware": "._ioaware",
    "IOAwareConfig": "._ioaware",
    "Interrupt": "._model",
    "Job": "._model",
    "JobKind": "._model",
    "Ledger": "._ledger",
    "MEBF": "._mebf002",
    "MEBF0": "._mebf000",
    "MEBF0Config": "._mebf000",
    "MEBFConfig": "._mebf002",
    "MtctModel": "._speedup",
    "NodeId": "._model",
    "POLICIES": "._registry",
    "Phase": "._model",
    "PhaseKind": "._model",
    "Policy": "._model",
    "Profile": "._conservative",
    "QueueView": "._model",
    "ReconfigCost": "._speedup",
    "Remember": "._model",
    "Reserve": "._model",
    "ResizeJob": "._model",
    "RunningJob": "._model",
    "SPEEDUPS": "._speedup",
    "Snapshot": "._model",
    "SizeRequest": "._model",
    "Decline": "._model",
    "SpeedupModel": "._speedup",
    "StartJob": "._model",
    "StorageView": "._model",
    "Wake": "._model",
    "amdahl": "._speedup",
    "baseline": "._sfsj",
    "conservative": "._conservative",
    "conservative_reference": "._conservative",
    "declared": "._speedup",
    "easy": "._rigid",
    "easy_shadow": "._rigid",
    "fcfs": "._rigid",
    "fcfsm": "._ioaware",
    "fixed_reconfig_cost": "._speedup",
    "get_policy": "._registry",
    "linear": "._speedup",
    "linear_reconfig_cost": "._speedup",
    "malleable_fill": "._fill",
    "mtct_amdahl": "._speedup",
    "no_reconfig_cost": "._speedup",
    "parse_speedup": "._speedup",
    "per_job_reconfig_cost": "._speedup",
    "pick_victim": "._sfsj",
    "rho_power": "._speedup",
    "sfsj": "._sfsj",
}
__all__ = sorted(_WHERE)

if TYPE_CHECKING:
    from ._burst import BBEasy, BBEasyConfig, Profile2
    from ._conservative import Profile, conservative, conservative_reference
    from ._ebs import EBS, EBSConfig
    from ._fill import malleable_fill
    from ._ioaware import IOAware, IOAwareConfig, fcfsm
    from ._ledger import Applied, Effect, Ledger
    from ._mebf000 import MEBF0, MEBF0Config
    from ._mebf002 import MEBF, MEBFConfig
    from ._model import (
        FAILED_PRIORITY,
        Decision,
        Decline,
        Interrupt,
        Job,
        JobKind,
        NodeId,
        Phase,
        PhaseKind,
        Policy,
        QueueView,
        Remember,
        Reserve,
        ResizeJob,
        RunningJob,
        SizeRequest,
        Snapshot,
        StartJob,
        StorageView,
        Wake,
    )
    from ._plan import Plan, PlanConfig, PlanStats
    from ._registry import ENTRY_POINT_GROUP, POLICIES, get_policy
    from ._rigid import easy, easy_shadow, fcfs
    from ._sfsj import baseline, pick_victim, sfsj
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


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(mod, __name__), name)


def __dir__() -> list[str]:
    return __all__
