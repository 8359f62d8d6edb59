"""What the live core reads in a job's progress reports (``JobRec.progress``: the runtime's last report per phase):
its progress, MTCT, measured Amdahl fraction and I/O intensity. Pure functions of the reports, no state."""

from __future__ import annotations

import math
from typing import Any

from malleable.errors import Refusal

__all__ = ["IO_PHASE", "check_io", "fraction", "intensity_of", "mtct_of", "serial_of"]

IO_PHASE = "io"
"""The progress phase of the I/O a job measured (``malleable.runtime.io_phase``): its I/O intensity."""


def mtct_of(progress: dict[str, Any]) -> float | None:
    """The MTCT of the job's last reported elastic phase (other phases do not scale with the size)."""
    vals = [v.get("mtct") for v in progress.values() if isinstance(v, dict) and v.get("kind", "elastic") == "elastic"]
    vals = [float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return vals[-1] if vals else None


def serial_of(progress: dict[str, Any]) -> float | None:
    """The Amdahl serial fraction the runtime fitted to the job's measured iteration times (its last elastic
    phase that reports one), or None."""
    vals = [v.get("serial_fraction") for v in progress.values() if isinstance(v, dict)]
    vals = [float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0]
    return vals[-1] if vals else None


def check_io(data: dict[str, Any]) -> None:
    """Refuse an I/O report whose ``io_seconds`` and ``seconds`` are not finite numbers >= 0 (``bytes``, if
    there, an integer >= 0)."""
    for key in ("io_seconds", "seconds", "bytes"):
        v = data.get(key)
        if key == "bytes" and v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0 or \
                (key == "bytes" and not isinstance(v, int)):
            raise Refusal(f"progress {IO_PHASE!r}: {key} must be a {'count' if key == 'bytes' else 'number'} >= 0, "
                          f"got {str(v)[:32]!r}")


def intensity_of(progress: dict[str, Any]) -> float | None:
    """The I/O intensity the job measured (``io_seconds / seconds`` of its ``"io"`` report, at most 1), or None
    before a report with time in it."""
    d = progress.get(IO_PHASE)
    if not isinstance(d, dict):
        return None
    io, total = d.get("io_seconds"), d.get("seconds")
    if isinstance(io, bool) or isinstance(total, bool) or not isinstance(io, int | float) or \
            not isinstance(total, int | float) or not total > 0:
        return None
    return min(1.0, max(0.0, io / total))


def fraction(data: dict[str, Any]) -> float | None:
    """The job's progress (fraction of its work done) in a report: ``fraction``, or ``(first + iterations) /
    total`` of an elastic phase."""
    f = data.get("fraction")
    if f is None and data.get("total"):
        f = (data.get("first", 0) + data.get("iterations", 0)) / data["total"]
    if isinstance(f, (int, float)) and not isinstance(f, bool) and 0.0 <= f <= 1.0:
        return float(f)
    return None
