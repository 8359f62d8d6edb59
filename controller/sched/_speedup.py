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

__all__ = [
    "MtctModel",
    "ReconfigCost",
    "SPEEDUPS",
    "SpeedupModel",
    "amdahl",
    "declared",
    "fixed_reconfig_cost",
    "linear",
    "linear_reconfig_cost",
    "mtct_amdahl",
    "no_reconfig_cost",
    "parse_speedup",
    "per_job_reconfig_cost",
    "rho_power",
]

SpeedupModel: TypeAlias = Callable[[Job, int], float]
ReconfigCost: TypeAlias = Callable[[Job, int, int], float]
MtctModel: TypeAlias = Callable[[Job, int], "float | None"]


def linear(job: Job, n: int) -> float:
    """Perfect speedup: ``T(n) / T(p) = p / n`` (the job's ``serial`` and ``rho`` are ignored)."""
    return job.procs / n


def amdahl(job: Job, n: int) -> float:
    """Amdahl's law with the job's serial fraction ``s``: ``T(n) / T(p) = (s + (1-s)/n) / (s + (1-s)/p)``.

    ``s = 0`` is linear speedup (half the nodes, twice the time); ``s = 1`` does not speed up at all.
    """
    s = job.serial
    return (s + (1.0 - s) / n) / (s + (1.0 - s) / job.procs)


def rho_power(job: Job, n: int) -> float:
    """Seed 002's scalability parameter as a power law: ``T(n) / T(p) = (p / n) ** (1 - rho)``.

    Seed 002 gives no formula, only the curves of its Fig. 3a: execution time falling with the node count, the
    fall flattening as rho grows, rho = 0 linear. This is the simplest family with that shape: rho = 0 is
    linear, rho = 1 no speedup at all, and in between the speedup ``(n/p) ** (1 - rho)`` is sub-linear at every
    size (with rho = 0.25, doubling the nodes cuts the time by 41 % instead of 50 %). Unlike Amdahl's law it
    never saturates, which matches the paper's use of rho as a per-job "scalability degree" (L49, L151).
    """
    return (job.procs / n) ** (1.0 - job.rho)


def declared(job: Job, n: int) -> float:
    """The model each job declared: :func:`rho_power` when it gave a scalability ``rho`` > 0, else
    :func:`amdahl` with its serial fraction (``serial`` 0 is linear). The live controller's default, where
    every job says what it is (``malleable submit --speedup``)."""
    return rho_power(job, n) if job.rho > 0 else amdahl(job, n)


SPEEDUPS: dict[str, SpeedupModel] = {"linear": linear, "amdahl": amdahl, "rho": rho_power, "declared": declared}
"""Speedup models by name (``malleable simulate --speedup``)."""


def parse_speedup(text: str) -> tuple[float, float]:
    """A job's speedup declaration ``linear``, ``amdahl:F`` or ``rho:R`` as ``(serial, rho)`` for :func:`declared`.

    Raises:
        ValueError: not one of those forms, or F / R outside [0, 1).
    """
    name, _, arg = text.partition(":")
    if name == "linear" and not arg:
        return 0.0, 0.0
    if name in ("amdahl", "rho") and arg:
        try:
            x = float(arg)
        except ValueError:
            x = -1.0
        if 0.0 <= x < 1.0:
            return (x, 0.0) if name == "amdahl" else (0.0, x)
        raise ValueError(f"speedup {text!r}: {name}'s parameter must be a number in [0, 1)")
    raise ValueError(f"speedup {text!r}: expected linear, amdahl:F or rho:R")


def mtct_amdahl(job: Job, n: int) -> float:
    """The MPI-time-to-compute-time ratio (seed 003's MTCT) of an Amdahl job on ``n`` nodes.

    The serial fraction is read as time spent in MPI (communication and waiting) that does not shrink with
    more nodes, and the rest as compute that does: ``MTCT(n) = s / ((1 - s) / n) = s * n / (1 - s)``. It grows
    with the size, so the MTCT-aware FPSMA stops growing a job once its ratio passes the lower threshold.
    A job with ``s = 1`` reports ``inf``.
    """
    s = job.serial
    return s * n / (1.0 - s) if s < 1.0 else float("inf")


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


def fixed_reconfig_cost(alpha: float) -> ReconfigCost:
    """Seed 000 (Eq. 4.2): every resize costs the same deallocation/allocation time ``alpha`` seconds.

    Raises:
        ValueError: a negative ``alpha``.
    """
    if alpha < 0:
        raise ValueError(f"reconfiguration cost must be >= 0 (got {alpha})")

    def cost(job: Job, old_n: int, new_n: int) -> float:  # noqa: ARG001
        return alpha if new_n != old_n else 0.0

    return cost


def job_coefficients(job_id: int, seed: int, lo: float, hi: float) -> tuple[float, float]:
    """Seed 002's per-job ``(alpha, beta)``, each uniform in ``[lo, hi]``, drawn from ``(seed, job_id)``.

    The same job gets the same coefficients in every run and in the policy's prediction (the model is exact,
    as in the paper's main experiments).
    """
    x = (job_id * 0x9E3779B97F4A7C15 + seed * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    a = ((x >> 11) & 0xFFFFF) / 0xFFFFF
    b = ((x >> 33) & 0xFFFFF) / 0xFFFFF
    return lo + (hi - lo) * a, lo + (hi - lo) * b


def per_job_reconfig_cost(scale: float = 100.0, b: float = 0.005, lo: float = 0.005, hi: float = 0.05,
                          seed: int = 0) -> ReconfigCost:
    """Seed 002's overhead with per-job coefficients: ``scale * (alpha*dN + beta/N + b*dN)`` seconds.

    ``alpha`` and ``beta`` are uniform in ``[lo, hi]`` per job (L166), ``N = old + new``, ``dN = |new - old|``.
    The paper converts the cost into bytes with a scale factor it does not give ([gap]); here ``scale`` turns
    it into seconds: ``scale = 100`` is our "full" overhead (ROF: about 5-50 s for a change of 10 nodes) and
    ``50`` the half one (ROH). ``b`` (per-node process creation, not given either) defaults to 0.005.

    Raises:
        ValueError: a negative coefficient or scale.
    """
    if min(scale, b, lo, hi) < 0 or hi < lo:
        raise ValueError(f"bad reconfiguration cost parameters: scale={scale} b={b} range=[{lo}, {hi}]")

    def cost(job: Job, old_n: int, new_n: int) -> float:
        if new_n == old_n:
            return 0.0
        alpha, beta = job_coefficients(job.id, seed, lo, hi)
        dn = abs(new_n - old_n)
        return scale * (alpha * dn + beta / (old_n + new_n) + b * dn)

    return cost
