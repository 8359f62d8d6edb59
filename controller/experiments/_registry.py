"""The one registry of experiments, by the name ``malleable simulate --experiment`` takes."""

from __future__ import annotations

from ._exp000 import EXP_MEBF, EXP_SFSJ
from ._exp000io import EXP_IO
from ._exp001 import EXP_001
from ._exp002 import EXP_002
from ._exp003 import EXP_W1, EXP_W2
from ._exp004 import EXP_004
from ._spec import Experiment

__all__ = ["EXPERIMENTS"]

EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in (EXP_001, EXP_002, EXP_MEBF, EXP_SFSJ, EXP_IO, EXP_W1,
                                                          EXP_W2, EXP_004)}
"""Experiments by name, in the order ``all`` runs them."""
