"""The one registry of scheduling policies: every built-in policy under its name, plus user policies.

A policy is any callable ``decide(snapshot, now) -> list[Decision]`` (:data:`~._model.Policy`). Built-in entries
are frozen, callable policy objects with their parameters at the documents' defaults; build other settings with
the classes themselves (``MEBF(MEBFConfig(gamma=1.5))``). :func:`get_policy` also accepts
``package.module:function`` (a policy importable by name) and the names that installed distributions publish in
the entry-point group ``malleable.policies``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
from importlib.metadata import entry_points
from typing import Any

from malleable.errors import ConfigError, PolicyError

from ._burst import BBEasy, BBEasyConfig
from ._conservative import conservative
from ._down import counting_down
from ._ebs import EBS, EBSConfig
from ._fill import malleable_fill
from ._ioaware import IOAware, IOAwareConfig, fcfsm
from ._mebf000 import MEBF0, MEBF0Config
from ._mebf002 import EXPANDS, MEBF, MEBFConfig
from ._model import Decline, Interrupt, Policy, Remember, Reserve, ResizeJob, Snapshot, StartJob, Wake
from ._plan import Plan, PlanConfig
from ._rigid import easy, fcfs
from ._sfsj import baseline, sfsj

__all__ = ["ENTRY_POINT_GROUP", "POLICIES", "get_policy", "make_policy"]

ENTRY_POINT_GROUP = "malleable.policies"
DECISIONS = (StartJob, ResizeJob, Reserve, Wake, Remember, Interrupt, Decline)


def _table() -> dict[str, Policy]:
    t: dict[str, Policy] = {"fcfs": fcfs, "easy": easy, "conservative": counting_down(conservative)}
    for e in EXPANDS:
        t[f"mebf-{e}"] = MEBF(MEBFConfig(variant="basic", expand=e))
        t[f"mebf-{e}-expand+"] = MEBF(MEBFConfig(variant="expand+", expand=e))
        t[f"mebf-{e}-shrink+"] = MEBF(MEBFConfig(variant="shrink+", expand=e))
    t["mebf0"] = MEBF0(MEBF0Config())
    for strategy in ("fpsma", "egs"):
        for management in ("pwma", "prma"):
            t[f"{strategy}-{management}"] = EBS(EBSConfig(management=management, strategy=strategy))
    t["fpsma-mtct-pwma"] = EBS(EBSConfig(management="pwma", strategy="fpsma", mtct=(0.5, 2.0)))
    t["fpsma-mtct-prma"] = EBS(EBSConfig(management="prma", strategy="fpsma", mtct=(0.5, 2.0)))
    t["baseline"] = baseline
    t["sfsj"] = sfsj
    t["malleable-fill"] = malleable_fill
    t["fcfs-easy"] = BBEasy(BBEasyConfig(bb_reserve=False))
    t["fcfs-bb"] = BBEasy(BBEasyConfig())
    t["sjf-bb"] = BBEasy(BBEasyConfig(sjf=True))
    t["filler"] = BBEasy(BBEasyConfig(reserve=False))
    t["plan-1"] = Plan(PlanConfig(alpha=1.0))
    t["plan-2"] = Plan(PlanConfig(alpha=2.0))
    t["io-aware"] = IOAware(IOAwareConfig())
    for tenths in range(2, 7):
        t[f"io-aware-0.{tenths}"] = IOAware(IOAwareConfig(alpha=tenths / 10))
    t["fcfsm"] = fcfsm
    return t


POLICIES: dict[str, Policy] = _table()
"""Built-in policies by name: ``fcfs``, ``easy``, ``conservative`` (rigid baselines);
``mebf-<handoff|spare|intensive>[-expand+|-shrink+]`` (seed 002), ``mebf0`` (seed 000),
``<fpsma|egs>-<pwma|prma>`` and ``fpsma-mtct-<pwma|prma>`` (seed 003; MTCT thresholds 0.5 / 2.0, our choice: the
thesis gives none), ``baseline`` and ``sfsj`` (seed 000 §3.1, with node failures), ``io-aware`` (alpha 0.4) and
``io-aware-0.2`` ... ``io-aware-0.6`` with its baseline ``fcfsm`` (seed 000 §4.2), ``malleable-fill`` (the live
controller's simplest malleable policy), and the burst-buffer policies of seed 004: ``fcfs-easy`` (the buffer
left out of the head's reservation), ``fcfs-bb``, ``sjf-bb``, ``filler``, ``plan-1`` and ``plan-2``."""


def get_policy(name: str) -> Policy:
    """The policy called ``name``: a registered name, an entry point of ``malleable.policies``, or
    ``package.module:function``.

    Raises:
        PolicyError: no such policy (the message lists the built-in names), or the named object is not callable.
    """
    pol = POLICIES.get(name)
    if pol is not None:
        return pol
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            return _callable(ep.load(), name)
    if ":" in name:
        mod, _, attr = name.partition(":")
        try:
            obj = getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError) as e:
            raise PolicyError(f"cannot load policy {name!r}: {e}") from None
        return _callable(obj, name)
    raise PolicyError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))} "
                      "(or package.module:function)")


def _callable(obj: object, name: str) -> Policy:
    """``obj`` if it behaves as a policy: callable as ``decide(snapshot, now)`` and, on an empty machine of one
    free node with an empty queue, returning a list of decisions (``os:system`` or ``builtins:print`` does not:
    refused here rather than in every pass of a daemon)."""
    if not callable(obj):
        raise PolicyError(f"policy {name!r} is not callable")
    try:
        inspect.signature(obj).bind(None, 0.0)
    except TypeError:
        raise PolicyError(f"{name!r} is not a policy: it cannot be called as decide(snapshot, now)") from None
    except ValueError:
        pass                                   # no signature to read (some builtins): the trial call decides
    try:
        out = obj(Snapshot(0.0, (0,), (0,), (), ()), 0.0)
    except Exception as e:  # noqa: BLE001 - any failure on an empty machine means it is no policy
        raise PolicyError(f"{name!r} is not a policy: on an empty machine it raised {type(e).__name__}: "
                          f"{str(e)[:120]}") from None
    if not isinstance(out, (list, tuple)) or not all(isinstance(d, DECISIONS) for d in out):
        raise PolicyError(f"{name!r} is not a policy: on an empty machine it returned {type(out).__name__}, not "
                          "a list of decisions")
    return obj  # type: ignore[return-value]


def make_policy(name: str, params: dict[str, Any]) -> Policy:
    """The registered policy ``name`` with ``params`` bound (refused if it does not take them).

    Raises:
        PolicyError: unknown policy.
        ConfigError: a parameter the policy does not accept.
    """
    pol = get_policy(name)
    if not params:
        return pol
    cfg = getattr(pol, "cfg", None)
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):  # a policy object built from a config
        names = {f.name for f in dataclasses.fields(cfg)}
        bad = [k for k in params if k not in names]
        if bad:
            raise ConfigError(f"policy {name} has no parameter(s) {', '.join(bad)}; it has {', '.join(sorted(names))}")
        return type(pol)(dataclasses.replace(cfg, **params))  # type: ignore[misc, call-arg]
    sig = inspect.signature(pol)
    bad = [k for k in params if k not in sig.parameters]
    if bad:
        raise ConfigError(f"policy {name} takes no parameter(s) {', '.join(bad)}")
    return functools.partial(pol, **params)
