"""The malleable policies under their registered names (merged into ``POLICIES`` by :mod:`._policies`).

Each entry is a frozen, callable policy object with its parameters at the documents' defaults; build other
settings with the classes themselves (``MEBF(MEBFConfig(gamma=1.5))``) and register them under a new name.
"""

from __future__ import annotations

from ._ebs import EBS, EBSConfig
from ._mebf000 import MEBF0, MEBF0Config
from ._mebf002 import EXPANDS, MEBF, MEBFConfig
from ._model import Policy
from ._sfsj import baseline, sfsj

__all__ = ["MALLEABLE_POLICIES"]


def _table() -> dict[str, Policy]:
    t: dict[str, Policy] = {}
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
    return t


MALLEABLE_POLICIES: dict[str, Policy] = _table()
"""Malleable policies by name: ``mebf-<handoff|spare|intensive>[-expand+|-shrink+]`` (seed 002), ``mebf0``
(seed 000), ``<fpsma|egs>-<pwma|prma>`` and ``fpsma-mtct-<pwma|prma>`` (seed 003; MTCT thresholds 0.5 / 2.0,
our choice: the thesis gives none), ``baseline`` and ``sfsj`` (seed 000 §3.1, with node failures)."""
