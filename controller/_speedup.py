"""Speedup and reconfiguration-cost models used when a job runs on, or is resized to, another size.

A speedup model is ``time_factor(job, n) -> float``: the job's run time on ``n`` nodes divided by its run time
on ``job.procs`` nodes (the size its trace run time and estimate refer to). A reconfiguration-cost model is
``cost(job, old_n, new_n) -> float``: seconds during which a resized job holds its new nodes but makes no
progress.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

from ._model import Job

__all__ = ["ReconfigCost", "SpeedupModel", "amdahl", "linear_reconfig_cost", "no_reconfig_cost"]

SpeedupModel: TypeAlias = Callable[[Job, int], float]
ReconfigCost: TypeAlias = Callable[[Job, int, int], float]


def amdahl(job: Job, n: int) -> float:
    """Amdahl's law with the job's serial fraction ``s``: ``T(n) / T(p) = (s + (1-s)/n) / (s + (1-s)/p)``.

    ``s = 0`` is linear speedup (half the nodes, twice the time); ``s = 1`` does not speed up at all.
    """
    s = job.serial
    return (s + (1.0 - s) / n) / (s + (1.0 - s) / job.procs)


def no_reconfig_cost(job: Job, old_n: int, new_n: int) -> float:  # noqa: ARG001 - the hook's signature
    """Resizing is free (the default)."""
    return 0.0


def linear_reconfig_cost(alpha: float, beta: float, b: float) -> ReconfigCost:
    """The overhead model of seed 002 (Eqs. 1-2): ``T_dr + T_p = alpha * dN + beta / N + b * dN``.

    ``dN = |new - old|`` and ``N = old + new`` (the processes involved in the reconfiguration).

    Raises:
        ValueError: a negative coefficient.
    """
    if min(alpha, beta, b) < 0:
        raise ValueError(f"reconfiguration cost coefficients must be >= 0 (got {alpha}, {beta}, {b})")

    def cost(job: Job, old_n: int, new_n: int) -> float:  # noqa: ARG001
        dn = abs(new_n - old_n)
        return alpha * dn + beta / (old_n + new_n) + b * dn

    return cost
