"""Estimates over seeds: the mean of a per-seed statistic and its 95 % confidence interval.

The interval is Student's t interval, ``mean ± t(0.975, n-1) · s / √n`` with ``s`` the sample standard deviation
of the ``n`` per-seed values: each seed is one independent draw of everything the experiment leaves to chance
(workload, malleable subset, scalabilities, burst-buffer requests, arrivals, failures). A comparison between two
policies is computed per seed first (both ran on the same draw), so its interval is that of the paired
differences. With one value (an experiment with nothing random) the interval is the value itself.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["LEVEL", "METHOD", "Estimate", "estimate", "relative_change", "t_quantile"]

LEVEL = 0.95
METHOD = "Student t, 95 %, over seeds"


@functools.lru_cache(maxsize=64)
def t_quantile(level: float, df: int) -> float:
    """The two-sided ``level`` quantile of Student's t with ``df`` degrees of freedom (scipy)."""
    from scipy.stats import t

    return float(t.ppf(0.5 + level / 2.0, df))


@dataclass(frozen=True, slots=True)
class Estimate:
    """A per-seed statistic over ``n`` seeds: its mean and confidence interval ``[lo, hi]``."""

    mean: float
    lo: float
    hi: float
    n: int
    values: tuple[float, ...] = ()

    @property
    def half(self) -> float:
        """Half the width of the interval (0 for one value)."""
        return (self.hi - self.lo) / 2.0

    def text(self, digits: int = 1) -> str:
        """``mean ± half`` (``mean [lo, hi]`` when cut at a floor, ``mean`` alone for one value)."""
        from malleable.controller.report._format import estimate_text

        return estimate_text(self.mean, self.lo, self.hi, self.n, digits)

    def as_dict(self) -> dict[str, object]:
        return {"mean": self.mean, "lo": self.lo, "hi": self.hi, "n": self.n, "values": list(self.values)}

    @staticmethod
    def from_dict(d: dict) -> Estimate:
        return Estimate(float(d["mean"]), float(d["lo"]), float(d["hi"]), int(d["n"]),
                        tuple(float(x) for x in d.get("values", ())))


def estimate(values: Iterable[float], level: float = LEVEL, floor: float | None = None) -> Estimate:
    """The mean of ``values`` with its Student t interval at ``level`` (NaN values are left out).

    ``floor`` is the least value the statistic can take (0 for a time or an absolute difference): the interval is
    cut there, since a confidence interval intersected with the statistic's possible values keeps its coverage."""
    xs = tuple(float(x) for x in values if not math.isnan(float(x)))
    n = len(xs)
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    mean = math.fsum(xs) / n
    if n == 1:
        return Estimate(mean, mean, mean, 1, xs)
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_quantile(level, n - 1) * sd / math.sqrt(n)
    lo = mean - half if floor is None else max(floor, mean - half)
    return Estimate(mean, lo, mean + half, n, xs)


def relative_change(new: float, old: float) -> float:
    """``100 (new - old) / old`` in percent (negative: a reduction); NaN when ``old`` is 0."""
    return 100.0 * (new - old) / old if old else math.nan
