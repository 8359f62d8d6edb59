"""Compiled inner loops of the policies (Numba), with the same code as plain Python when Numba is missing.

Each loop is a plain function over NumPy arrays and numbers, written so that ``numba.njit`` compiles it as is;
:func:`kernel` hands out the compiled version (compiled on first use, cached on disk by Numba) or, without Numba or
with ``MALLEABLE_NO_JIT=1``, the function itself. Both give identical results (the tests run both).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["base_profile", "kernel", "place"]

log = logging.getLogger(__name__)


def base_profile(now: float, n_free: int, ends: np.ndarray, sizes: np.ndarray, times: np.ndarray,
                 free: np.ndarray) -> int:
    """Availability profile of running jobs (``ends`` sorted, with their ``sizes``) into ``times``/``free``:
    ``free[k]`` nodes are free from ``times[k]``; equal ends merge, ends not after the current step join it.
    Returns the number of steps."""
    times[0] = now
    free[0] = n_free
    n = 1
    for i in range(ends.shape[0]):
        t = ends[i]
        if t <= times[n - 1]:
            free[n - 1] += sizes[i]
        else:
            times[n] = t
            free[n] = free[n - 1] + sizes[i]
            n += 1
    return n


def place(times: np.ndarray, free: np.ndarray, n: int, needs: np.ndarray, ests: np.ndarray,
          slots: np.ndarray, last_t: np.ndarray, last_e: np.ndarray) -> int:
    """Conservative backfilling's placements, in order: job ``i`` (``needs[i]`` nodes for ``ests[i]`` s) gets the
    earliest step at whose start it fits for its whole duration, and that profile is reduced (a new step is
    inserted at its end; the arrays must have room for one step per job). ``slots[i]`` is its start time.

    The profile only loses nodes during a pass, so a job of the same size as an earlier one and no shorter
    estimate cannot start before that one's slot: ``last_t[p]``/``last_e[p]`` (sizes below their length; estimate
    -1 = none yet) remember it and the search starts there.

    Returns the number of steps, or ``-(i + 1)`` when job ``i`` needs more nodes than the machine has."""
    cap = last_t.shape[0]
    for i in range(needs.shape[0]):
        need = needs[i]
        est = ests[i]
        if free[n - 1] < need:
            return -(i + 1)
        k = 0
        if need <= 0:
            slots[i] = times[0]
            continue
        if est > 0 and need < cap and 0 <= last_e[need] <= est:
            lo = 0
            hi = n
            t0 = last_t[need]
            while lo < hi:
                mid = (lo + hi) // 2
                if times[mid] < t0:
                    lo = mid + 1
                else:
                    hi = mid
            k = lo
        while free[k] < need:
            k += 1
        if est > 0:
            while True:
                end = times[k] + est
                m = k + 1
                fits = True
                while m < n and times[m] < end:
                    if free[m] < need:
                        fits = False
                        break
                    m += 1
                if fits:
                    break
                k = m + 1
                while free[k] < need:
                    k += 1
            end = times[k] + est
            lo = k + 1
            hi = n
            while lo < hi:
                mid = (lo + hi) // 2
                if times[mid] < end:
                    lo = mid + 1
                else:
                    hi = mid
            m = lo
            if m == n or times[m] != end:
                for x in range(n, m, -1):
                    times[x] = times[x - 1]
                    free[x] = free[x - 1]
                times[m] = end
                free[m] = free[m - 1]
                n += 1
            for x in range(k, m):
                free[x] -= need
            if need < cap:
                last_t[need] = times[k]
                last_e[need] = est
        slots[i] = times[k]
    return n


_PLAIN: dict[str, Callable[..., Any]] = {"base": base_profile, "place": place}
_READY: dict[str, Callable[..., Any]] = {}


def kernel(name: str) -> Callable[..., Any]:
    """The loop ``name`` (``"base"`` or ``"place"``), compiled when Numba is available."""
    f = _READY.get(name)
    if f is not None:
        return f
    f = _PLAIN[name]
    if os.environ.get("MALLEABLE_NO_JIT") != "1":
        try:
            import numba
        except ImportError:                                    # pragma: no cover - numba is a dependency
            log.warning("numba is not installed: the policies' inner loops run as plain Python (slow)")
        else:
            f = numba.njit(cache=True, nogil=True)(f)
    _READY[name] = f
    return f
