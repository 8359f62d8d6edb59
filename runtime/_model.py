"""Performance model of a running job (pure): Amdahl's law fitted to the iteration times measured at each size.

``T(p) = T1 * (s + (1 - s) / p)`` is linear in ``1/p``: a least-squares line ``T = a + b/p`` gives ``T1 = a + b``
and the serial fraction ``s = a / (a + b)`` (clamped to [0, 1]). The speedup it predicts at ``p`` processes,
``1 / (s + (1 - s) / p)``, is what the controller's snapshot carries for a live job instead of a declared one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Amdahl", "fit_amdahl"]


@dataclass(frozen=True, slots=True)
class Amdahl:
    """A fitted model: one-process iteration time ``t1`` and serial fraction ``serial``."""

    t1: float
    serial: float
    sizes: tuple[int, ...]

    def speedup(self, procs: int) -> float:
        """Predicted speedup at ``procs`` processes over one."""
        return 1.0 / (self.serial + (1.0 - self.serial) / procs)

    def as_dict(self) -> dict[str, float | list[int]]:
        """JSON form."""
        return {"t1": self.t1, "serial_fraction": self.serial, "sizes": list(self.sizes)}


def fit_amdahl(points: Iterable[tuple[int, float]]) -> Amdahl | None:
    """Fit the model to ``(procs, seconds per iteration)`` measurements (weighted by how often a size occurs).

    Returns None with fewer than two distinct sizes or non-positive times (nothing to fit).
    """
    pts = [(int(p), float(t)) for p, t in points if p >= 1 and t > 0]
    sizes = sorted({p for p, _ in pts})
    if len(sizes) < 2:
        return None
    xs = [1.0 / p for p, _ in pts]
    ys = [t for _, t in pts]
    n = len(pts)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    a = my - b * mx
    t1 = a + b
    if t1 <= 0:
        return Amdahl(max(ys), 1.0, tuple(sizes))  # slower with more processes: all serial
    return Amdahl(t1, min(1.0, max(0.0, a / t1)), tuple(sizes))
