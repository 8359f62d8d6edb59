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

__all__ = ["base_profile", "kernel", "place", "plan2"]

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


def plan2(times0: np.ndarray, cpu0: np.ndarray, bb0: np.ndarray, n: int, order: np.ndarray, procs: np.ndarray,
          bbs: np.ndarray, ests: np.ndarray, subs: np.ndarray, alpha: float, holes: bool, times: np.ndarray,
          cpu: np.ndarray, bb: np.ndarray, slots: np.ndarray) -> float:
    """A plan on two resources (processors, burst buffer) from the profile ``times0/cpu0/bb0`` (``n`` steps),
    built in the scratch arrays ``times/cpu/bb`` (room for ``n`` + one step per job): job ``order[i]`` in turn
    gets the earliest step at whose start ``procs`` processors and ``bbs`` buffer stay free for ``ests`` s (not
    before the previous job's start unless ``holes``), and the profile is reduced. ``slots[i]`` is its start.
    Every job must fit the last step (the whole machine). Returns ``Σ max(0, start - submit)^alpha``."""
    for x in range(n):
        times[x] = times0[x]
        cpu[x] = cpu0[x]
        bb[x] = bb0[x]
    score = 0.0
    k0 = 0
    for i in range(order.shape[0]):
        j = order[i]
        need = procs[j]
        b = bbs[j]
        bmin = b - 1e-9 * max(1.0, b)
        est = ests[j]
        k = 0 if holes else k0
        while True:
            while cpu[k] < need or bb[k] < bmin:
                k += 1
            end = times[k] + est
            m = k + 1
            fits = True
            while m < n and times[m] < end:
                if cpu[m] < need or bb[m] < bmin:
                    fits = False
                    break
                m += 1
            if fits:
                break
            k = m + 1
        start = times[k]
        if est > 0:
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
                    cpu[x] = cpu[x - 1]
                    bb[x] = bb[x - 1]
                times[m] = end
                cpu[m] = cpu[m - 1]
                bb[m] = bb[m - 1]
                n += 1
            for x in range(k, m):
                cpu[x] -= need
                bb[x] -= b
        k0 = k
        slots[i] = start
        w = start - subs[j]
        if w > 0:
            score += w ** alpha
    return score


_PLAIN: dict[str, Callable[..., Any]] = {"base": base_profile, "place": place, "plan2": plan2}
_READY: dict[str, Callable[..., Any]] = {}


def kernel(name: str) -> Callable[..., Any]:
    """The loop ``name`` (``"base"``, ``"place"`` or ``"plan2"``), compiled when Numba is available."""
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
