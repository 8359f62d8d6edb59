"""Seeded node failures (seed 000 §3.1's SFSJ experiment, and ``malleable simulate --failures``)."""

from __future__ import annotations

import numpy as np

__all__ = ["failure_plan"]


def failure_plan(machine: int, t0: float, t1: float, mtbf: float, downtime: float,
                 seed: int) -> list[tuple[float, int, float]]:
    """Poisson node failures: system-wide mean time between failures ``mtbf`` (s), each on a random node."""
    rng = np.random.default_rng(seed)
    out, t = [], t0
    while True:
        t += rng.exponential(mtbf)
        if t >= t1:
            return out
        out.append((float(round(t)), int(rng.integers(machine)), downtime))
