"""The workload of seed 004's evaluation: the KTH-SP2 log on 96 processors, every job with a burst-buffer request
and the stage-in / compute / checkpoint / stage-out application model.

Where the paper is silent its authors' public artifact (the Burst-Buffer-Scheduling repository) gives the values
used here, each listed in :data:`ASSUMPTIONS`.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from malleable.controller.sched._model import Phase, PhaseKind
from malleable.controller.sim._swf import read_swf
from malleable.controller.sim._workload import Workload
from malleable.errors import TraceError

__all__ = ["ASSUMPTIONS", "BB_LOGNORM", "MACHINE", "PFS_BW", "LINK_BW", "bb_workload", "kth", "parts"]

MACHINE = 96
PFS_BW = 5e9              # the single 5 GB/s link to the file system
LINK_BW = 1.25e9          # 10 Gbit/s per node (compute network and burst-buffer nodes)
KIB, MB = 1024.0, 1e6
BB_LOGNORM = (1.0972516604048774, -150361.59523836235, 2714115.5724594607)
"""``(sigma, loc, scale)`` of the per-processor burst-buffer request in KiB (scipy's ``lognorm`` parameters):
the authors' fit of METACENTRUM-2013-3 memory requests (the paper gives no parameters)."""
PHASE_WORK = 3600.0       # target seconds of computation per compute phase (1 to 10 phases)
RUNTIME_FACTOR = 40.0     # the computation is the run time minus 40 x (per-processor request / link bandwidth)
CHECKPOINT_SHARE = 1.0    # a checkpoint writes the job's whole burst-buffer request (L209: every transfer)

ASSUMPTIONS = [
    "KTH-SP2-1996-2.1-cln (Parallel Workloads Archive); jobs asking for more than 96 processors left out; "
    "1 processor = 1 node; walltime = the log's requested time, computation from its run time",
    "burst buffer per processor: log-normal with the authors' fit of METACENTRUM-2013-3 memory requests "
    "(sigma 1.097, loc -150362 KiB, scale 2714116 KiB; mean 4.6 GiB), at least 100 MB; jobs of <= 120 s "
    "walltime ask for 10 MB in all (the authors' artifact); a job's request = per-processor x processors",
    "total burst buffer = 96 x the distribution's mean per-processor request",
    "application model: stage-in of the request, k = clamp(round(computation / 1 h), 1, 10) compute phases, a "
    "checkpoint of the whole request after each but the last (computation suspended, then drained to the file "
    "system during the next phase), stage-out of the request: every transfer has the size of the request (L209)",
    "computation = max(run - 40 x per-processor request / 1.25 GB/s, 5% of run) (the authors' artifact)",
    "file system behind one shared 5 GB/s link, split per participating node; nodes reach it and the burst "
    "buffer at 10 Gbit/s; the fluid model replaces Batsim/SimGrid's network simulation",
    "jobs are not killed at their walltime (I/O contention may make them overrun it); passes at every event",
]


def kth(path: str | os.PathLike[str] | None = None) -> Workload:
    """The KTH-SP2 log (``MALLEABLE_KTH`` or the copy in ``benchmarks/traces``), jobs of at most 96 processors.

    Raises:
        TraceError: the log is not there.
    """
    p = Path(path or os.environ.get("MALLEABLE_KTH") or
             Path(__file__).resolve().parents[2] / "benchmarks" / "traces" / "KTH-SP2-1996-2.1-cln.swf.gz")
    if not p.exists():
        raise TraceError(f"{p}: the KTH-SP2 log is missing (set MALLEABLE_KTH to its path)")
    w = read_swf(p)
    keep = w.procs <= MACHINE
    return _rows(w, keep, MACHINE, f"KTH-SP2 ({int(keep.sum())} jobs)")


def _rows(w: Workload, keep: np.ndarray, machine: int, name: str) -> Workload:
    return Workload(w.ids[keep], w.submit[keep], w.run[keep], w.estimate[keep], w.procs[keep], machine,
                    name=name)


def parts(w: Workload, weeks: float = 3.0, n: int = 16) -> list[Workload]:
    """``n`` non-overlapping parts of ``weeks`` weeks each from the start of the log (times shifted to 0)."""
    span = weeks * 7 * 86400.0
    out = []
    t0 = float(w.submit[0])
    for k in range(n):
        keep = (w.submit >= t0 + k * span) & (w.submit < t0 + (k + 1) * span)
        if not keep.any():
            break
        p = _rows(w, keep, w.machine, f"{w.name} part {k + 1}")
        p.submit = p.submit - p.submit[0]
        out.append(p)
    return out


def per_processor_bb(rng: np.random.Generator, n: int, sigma_scale: float = 1.0) -> np.ndarray:
    """Per-processor requests in bytes (at least 100 MB); ``sigma_scale`` multiplies the log-normal's sigma."""
    s, loc, scale = BB_LOGNORM
    kib = loc + scale * np.exp(s * sigma_scale * rng.standard_normal(n))
    return np.maximum(kib * KIB, 100 * MB)


def mean_per_processor(sigma_scale: float = 1.0) -> float:
    """The distribution's mean per-processor request in bytes (before the 100 MB floor)."""
    s, loc, scale = BB_LOGNORM
    return (loc + scale * math.exp((s * sigma_scale) ** 2 / 2)) * KIB


def bb_workload(w: Workload, seed: int = 0, sigma_scale: float = 1.0, phases: bool = True) -> Workload:
    """``w`` with burst-buffer requests (and, with ``phases``, the application model); see the assumptions."""
    rng = np.random.default_rng(seed)
    per = per_processor_bb(rng, len(w), sigma_scale)
    total = MACHINE * mean_per_processor(sigma_scale)
    per = np.minimum(per, total / np.maximum(w.procs, 1))            # a request never exceeds the machine's
    short = w.estimate <= 120
    bb = np.where(short, 10 * MB, np.minimum(per * w.procs, total))
    out = Workload(w.ids, w.submit, w.run, w.estimate, w.procs, w.machine, name=f"{w.name} + burst buffers",
                   bb=bb, bb_total=total)
    if phases:
        comp = np.where(short, w.run, np.maximum(w.run - RUNTIME_FACTOR * per / LINK_BW, 0.05 * w.run))
        k = np.clip(np.round(comp / PHASE_WORK), 1, 10).astype(int)
        out.phases = [_model(float(c), int(m), float(b)) for c, m, b in zip(comp, k, bb, strict=True)]
    return out


def _model(comp: float, k: int, bb: float) -> tuple[Phase, ...]:
    C, CK = PhaseKind.COMPUTE, PhaseKind.CHECKPOINT
    ph = [Phase(PhaseKind.STAGE_IN, bb)]
    for _ in range(k - 1):
        ph += [Phase(C, comp / k), Phase(CK, CHECKPOINT_SHARE * bb)]
    ph += [Phase(C, comp / k), Phase(PhaseKind.STAGE_OUT, bb)]
    return tuple(ph)
