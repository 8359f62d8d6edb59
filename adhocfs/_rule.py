"""The RIO/AIO scaling rule of seed 000 §3.2.1 (Hercules) as a pure function, with hysteresis.

``d_i = AIO_i - RIO`` over the last ``k`` samples; ``avg_d`` is their mean. With tolerance ``T``:
keep when ``|avg_d| <= T``, expand when ``avg_d < -T`` (achieved below requested: more servers),
shrink when ``avg_d > T`` (achieved well above requested: servers to spare). This is the digest's
interpretation (comparing the window mean of AIO with ``[RIO - T, RIO + T]``); read literally the printed
rule would compare a difference with ``RIO ± T``.

How many servers (the document gives no formula): ``ceil(|avg_d| / per_server)`` to add and
``floor(avg_d / per_server)`` (at least 1) to remove, where ``per_server = mean AIO / n``, clipped to
``[n_min, n_max]``. After any change the rule keeps for ``cooldown`` seconds and until ``k`` new samples
have arrived (hysteresis), so one change cannot trigger its own reversal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

__all__ = ["Scaling", "ScaleDecision", "RuleConfig", "decide"]


class Scaling(str, Enum):
    """What the rule asks for."""

    KEEP = "keep"
    EXPAND = "expand"
    SHRINK = "shrink"


@dataclass(frozen=True, slots=True)
class RuleConfig:
    """Parameters of the rule.

    Attributes:
        rio: requested I/O rate (MB/s).
        tolerance: T_io (MB/s).
        k: window length in samples.
        n_min: fewest data servers allowed.
        n_max: most data servers allowed.
        cooldown: seconds after a change during which the rule only keeps.
    """

    rio: float
    tolerance: float
    k: int = 3
    n_min: int = 1
    n_max: int = 4
    cooldown: float = 30.0

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"window k must be >= 1, got {self.k}")
        if self.tolerance < 0 or self.rio < 0:
            raise ValueError("rio and tolerance must be >= 0")
        if not 1 <= self.n_min <= self.n_max:
            raise ValueError(f"need 1 <= n_min <= n_max, got {self.n_min}, {self.n_max}")


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    """The rule's answer with the inputs that led to it (for logging).

    Attributes:
        action: keep, expand or shrink.
        count: servers to add or remove (0 for keep).
        avg_d: window mean of AIO - RIO (None if the window is not full).
        reason: a human-readable explanation.
    """

    action: Scaling
    count: int
    avg_d: float | None
    reason: str


def decide(
    samples: Sequence[float],
    n: int,
    cfg: RuleConfig,
    now: float = 0.0,
    last_change: float | None = None,
    samples_since_change: int | None = None,
) -> ScaleDecision:
    """Apply the rule to the AIO samples (oldest first) of a file system with ``n`` data servers.

    Args:
        samples: achieved I/O rates (MB/s), one per time step with I/O.
        n: current number of data servers.
        cfg: rule parameters.
        now: current time (seconds, any origin shared with ``last_change``).
        last_change: time of the last expand/shrink (None: never).
        samples_since_change: samples recorded since the last change (None: all of them).

    Returns:
        The decision; never proposes a size outside ``[n_min, n_max]``.
    """
    if n < 1:
        raise ValueError(f"server count must be >= 1, got {n}")
    if last_change is not None and now - last_change < cfg.cooldown:
        return ScaleDecision(Scaling.KEEP, 0, None, f"cool-down: {now - last_change:.0f} s of {cfg.cooldown:.0f} s")
    fresh = len(samples) if samples_since_change is None else min(samples_since_change, len(samples))
    if fresh < cfg.k:
        return ScaleDecision(Scaling.KEEP, 0, None, f"window not full: {fresh} of {cfg.k} samples")
    window = list(samples[-cfg.k :])
    avg_aio = sum(window) / cfg.k
    avg_d = avg_aio - cfg.rio
    inputs = (
        f"window {[round(x, 1) for x in window]}, RIO {cfg.rio:g}, T {cfg.tolerance:g}, avg_d {avg_d:+.1f}"
    )
    if abs(avg_d) <= cfg.tolerance:
        return ScaleDecision(Scaling.KEEP, 0, avg_d, f"keep: |avg_d| <= T ({inputs})")
    per_server = avg_aio / n if avg_aio > 0 else 0.0
    if avg_d < -cfg.tolerance:
        room = cfg.n_max - n
        if room <= 0:
            return ScaleDecision(
                Scaling.KEEP, 0, avg_d, f"expand wanted but already at n_max={cfg.n_max} ({inputs})"
            )
        want = math.ceil(-avg_d / per_server) if per_server > 0 else room
        count = max(1, min(room, want))
        return ScaleDecision(Scaling.EXPAND, count, avg_d, f"expand by {count}: avg_d < -T ({inputs})")
    room = n - cfg.n_min
    if room <= 0:
        return ScaleDecision(Scaling.KEEP, 0, avg_d, f"shrink wanted but already at n_min={cfg.n_min} ({inputs})")
    want = math.floor(avg_d / per_server) if per_server > 0 else 1
    count = max(1, min(room, want))
    return ScaleDecision(Scaling.SHRINK, count, avg_d, f"shrink by {count}: avg_d > T ({inputs})")
