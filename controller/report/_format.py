"""How numbers read in reports, tables and the command's output: one formatter for every estimate."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["cell", "estimate_text"]


def estimate_text(mean: float, lo: float, hi: float, n: int, digits: int = 1) -> str:
    """``mean ± half`` with ``digits`` decimals, or ``mean [lo, hi]`` for an interval cut at a floor; the mean
    alone for one value; ``n/a`` for none."""
    if n == 0 or math.isnan(mean):
        return "n/a"
    if n == 1:
        return f"{mean:.{digits}f}"
    if not math.isclose(mean - lo, hi - mean, rel_tol=1e-9, abs_tol=1e-12):
        return f"{mean:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"
    return f"{mean:.{digits}f} ± {(hi - lo) / 2.0:.{digits}f}"


def cell(row: dict[str, Any], est: dict[str, Any] | None = None) -> str:
    """A results row's estimate (ours, or ``est``: one of its controls) as text with the row's unit."""
    e = est or row["ours"]
    txt = estimate_text(float(e["mean"]), float(e["lo"]), float(e["hi"]), int(e["n"]), int(row.get("digits", 1)))
    return txt if txt == "n/a" else txt + (row.get("unit") or "")
