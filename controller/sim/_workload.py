"""Workloads as columns (one NumPy array per field) and a seeded synthetic generator.

A :class:`Workload` holds a million jobs in a few tens of MB; the simulator creates a :class:`Job` record only
when a job is submitted, so memory follows the number of jobs in the system, not the trace length.

Synthetic model (:func:`synthetic`; simpler than Lublin-Feitelson, documented here and in docs/simulator.md):

* sizes: with probability 0.25 a serial job (1 node), otherwise ``2**U`` with ``U`` uniform in
  ``[0, log2(machine)]`` rounded to an integer with probability 0.75 (the power-of-two bias of real logs) and
  kept fractional (then rounded up) otherwise; capped at the machine size;
* run times: log-uniform between 10 s and 36 h (``exp(U(ln 10, ln 129600))``);
* estimates: ``run * (1 + X)`` with X exponential of mean 1.5, rounded up to a whole minute (users over-estimate);
* arrivals: a Poisson process whose rate gives the requested offered load
  ``rho = sum(run * procs) / (machine * span)``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace

import numpy as np

from malleable.controller.sched._model import Job, JobKind, Phase
from malleable.errors import ConfigError

__all__ = ["Workload", "synthetic"]

log = logging.getLogger(__name__)

_KINDS = (JobKind.RIGID, JobKind.MOLDABLE, JobKind.MALLEABLE)


@dataclass(slots=True)
class Workload:
    """Jobs of one trace as columns, sorted by submit time (stable, so equal submits keep trace order).

    Attributes:
        ids, submit, run, estimate, procs: one entry per job (run <= estimate is guaranteed by the readers).
        machine: number of nodes (processors) of the machine.
        kind: per-job index into (rigid, moldable, malleable), or None when every job is rigid.
        min_procs, max_procs, serial: per-job bounds and Amdahl serial fraction, or None (rigid: = procs, 0).
        skipped: jobs left out, by reason.
        malformed: lines that could not be parsed (skipped unless strict).
        name: where the workload came from.
        rho: per-job scalability parameter of seed 002 (``rho_power`` speedup model), or None (all 0).
        bb: per-job burst-buffer request (bytes, held for the whole run), or None (no job asks for one).
        bb_total: the machine's burst-buffer capacity (bytes); 0 for none.
        phases: per-job application model (tuples of :class:`~malleable.controller.sched.Phase`), or None;
            only the I/O-aware simulator runs it.
        intensity: per-job I/O intensity per size (``Job.intensity``), or None.
        fs: per-job own file system ``(servers at start, fs_min, fs_max, io_rate bytes/s)``, or None per job
            without one (None: no job has one); only the I/O-aware simulator runs it (:mod:`._iofs`).
    """

    ids: np.ndarray
    submit: np.ndarray
    run: np.ndarray
    estimate: np.ndarray
    procs: np.ndarray
    machine: int
    kind: np.ndarray | None = None
    min_procs: np.ndarray | None = None
    max_procs: np.ndarray | None = None
    serial: np.ndarray | None = None
    skipped: dict[str, int] = field(default_factory=dict)
    malformed: int = 0
    name: str = ""
    rho: np.ndarray | None = None
    bb: np.ndarray | None = None
    bb_total: float = 0.0
    phases: list[tuple[Phase, ...]] | None = None
    intensity: list[tuple[tuple[int, float], ...]] | None = None
    fs: list[tuple[int, int, int, float] | None] | None = None

    @property
    def has_io(self) -> bool:
        """Whether any job carries burst-buffer, phase or intensity data."""
        return self.bb is not None or self.phases is not None or self.intensity is not None

    def _io(self, jobs: list[Job], lo: int) -> list[Job]:
        bb, ph, ex = self.bb, self.phases, self.intensity
        return [replace(j, bb=0.0 if bb is None else float(bb[lo + k]), phases=() if ph is None else ph[lo + k],
                        intensity=() if ex is None else ex[lo + k]) for k, j in enumerate(jobs)]

    def _io_cut(self, rows: np.ndarray | slice) -> dict:
        def pick(v: list | None) -> list | None:
            if v is None:
                return None
            return v[rows] if isinstance(rows, slice) else [v[int(i)] for i in rows]
        return {"bb": None if self.bb is None else self.bb[rows].copy(), "bb_total": self.bb_total,
                "phases": pick(self.phases), "intensity": pick(self.intensity), "fs": pick(self.fs)}

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def n_skipped(self) -> int:
        """Jobs skipped for any reason, malformed lines included."""
        return sum(self.skipped.values()) + self.malformed

    def job(self, i: int) -> Job:
        """The :class:`Job` record of the i-th job (what a policy may see)."""
        if self.has_io:
            return self.jobs(i, i + 1)[0]
        p = int(self.procs[i])
        if self.kind is None:
            return Job(int(self.ids[i]), float(self.submit[i]), p, float(self.estimate[i]), JobKind.RIGID, p, p, 0.0)
        return Job(int(self.ids[i]), float(self.submit[i]), p, float(self.estimate[i]), _KINDS[int(self.kind[i])],
                   int(self.min_procs[i]), int(self.max_procs[i]), float(self.serial[i]),
                   0.0 if self.rho is None else float(self.rho[i]))

    def jobs(self, lo: int, hi: int) -> list[Job]:
        """The :class:`Job` records of rows ``lo..hi-1`` (built column by column: faster than :meth:`job`)."""
        ids, sub = self.ids[lo:hi].tolist(), self.submit[lo:hi].tolist()
        procs, est = self.procs[lo:hi].tolist(), self.estimate[lo:hi].tolist()
        if self.kind is None:
            rigid = JobKind.RIGID
            out = [Job(i, s, p, e, rigid, p, p, 0.0) for i, s, p, e in zip(ids, sub, procs, est, strict=True)]
            return self._io(out, lo) if self.has_io else out
        assert self.min_procs is not None and self.max_procs is not None and self.serial is not None
        kinds = [_KINDS[k] for k in self.kind[lo:hi].tolist()]
        cols = (ids, sub, procs, est, kinds, self.min_procs[lo:hi].tolist(), self.max_procs[lo:hi].tolist(),
                self.serial[lo:hi].tolist(), [0.0] * (hi - lo) if self.rho is None else self.rho[lo:hi].tolist())
        out = [Job(*c) for c in zip(*cols, strict=True)]
        return self._io(out, lo) if self.has_io else out

    def head(self, n: int) -> Workload:
        """The first ``n`` jobs (by submit order)."""
        def cut(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[:n].copy()
        return Workload(self.ids[:n].copy(), self.submit[:n].copy(), self.run[:n].copy(), self.estimate[:n].copy(),
                        self.procs[:n].copy(), self.machine, cut(self.kind), cut(self.min_procs),
                        cut(self.max_procs), cut(self.serial), dict(self.skipped), self.malformed, self.name,
                        cut(self.rho), **self._io_cut(slice(0, n)))

    def with_malleable(self, fraction: float, *, seed: int = 0, min_factor: float = 0.5, max_factor: float = 2.0,
                       serial: tuple[float, float] = (0.0, 0.1),
                       rho: tuple[float, float] | None = None) -> Workload:
        """A copy where a random ``fraction`` of the jobs is malleable (the rest rigid).

        Malleable jobs get ``min = max(1, floor(procs * min_factor))``, ``max = min(machine, ceil(procs *
        max_factor))`` and an Amdahl serial fraction uniform in ``serial`` (seed 002 §4.2 uses 0.5x and 5x).
        With ``rho = (lo, hi)`` every job (rigid ones too: the model is their real scalability) also gets a
        seed-002 scalability parameter uniform in ``[lo, hi]`` (drawn after the other columns, so the same seed
        gives the same kinds and sizes with or without it).

        Raises:
            ConfigError: a fraction outside [0, 1] or factors that do not bracket 1.
        """
        if not 0.0 <= fraction <= 1.0 or min_factor > 1.0 or max_factor < 1.0:
            raise ConfigError(f"bad malleable conversion: fraction={fraction} min={min_factor} max={max_factor}")
        rng = np.random.default_rng(seed)
        n = len(self)
        mall = rng.random(n) < fraction
        kind = np.where(mall, 2, 0).astype(np.int8)
        lo = np.maximum(1, np.floor(self.procs * min_factor)).astype(np.int32)
        hi = np.minimum(self.machine, np.ceil(self.procs * max_factor)).astype(np.int32)
        mn = np.where(mall, lo, self.procs).astype(np.int32)
        mx = np.where(mall, hi, self.procs).astype(np.int32)
        ser = np.where(mall, rng.uniform(serial[0], serial[1], n), 0.0)
        rh = self.rho.copy() if self.rho is not None else None
        if rho is not None:
            rh = rng.uniform(rho[0], rho[1], n)
        return Workload(self.ids.copy(), self.submit.copy(), self.run.copy(), self.estimate.copy(),
                        self.procs.copy(), self.machine, kind, mn, mx, ser, dict(self.skipped), self.malformed,
                        f"{self.name}+malleable{fraction:g}", rh, **self._io_cut(slice(None)))

    def offered_load(self) -> float:
        """``sum(run * procs) / (machine * (last submit - first submit))`` (inf for a zero span)."""
        if len(self) < 2:
            return 0.0
        span = float(self.submit[-1] - self.submit[0])
        work = float(np.dot(self.run, self.procs.astype(np.float64)))
        return work / (self.machine * span) if span > 0 else math.inf

    @staticmethod
    def from_jobs(rows: list[tuple[int, float, float, float, int]], machine: int, name: str = "") -> Workload:
        """Build a rigid workload from ``(id, submit, run, estimate, procs)`` rows (tests, examples).

        Estimates below the run time are raised to it, as the SWF reader does.

        Raises:
            ConfigError: a row with a negative time, a size outside [1, machine], or an empty machine.
        """
        if machine < 1:
            raise ConfigError(f"machine size must be >= 1, got {machine}")
        for r in rows:
            if r[1] < 0 or r[2] < 0 or not 1 <= r[4] <= machine:
                raise ConfigError(f"bad job row {r!r} for a machine of {machine}")
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        sub = np.array([r[1] for r in rows], dtype=np.float64)
        run = np.array([r[2] for r in rows], dtype=np.float64)
        est = np.maximum(np.array([r[3] for r in rows], dtype=np.float64), run)
        procs = np.array([r[4] for r in rows], dtype=np.int32)
        return _sorted(Workload(ids, sub, run, est, procs, machine, name=name))


def _sorted(w: Workload) -> Workload:
    if len(w) and np.all(w.submit[1:] >= w.submit[:-1]):
        return w
    o = np.argsort(w.submit, kind="stable")
    def take(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a[o]
    return Workload(w.ids[o], w.submit[o], w.run[o], w.estimate[o], w.procs[o], w.machine, take(w.kind),
                    take(w.min_procs), take(w.max_procs), take(w.serial), w.skipped, w.malformed, w.name,
                    take(w.rho), **w._io_cut(o))


def synthetic(n: int, machine: int = 256, load: float = 0.7, seed: int = 0) -> Workload:
    """A seeded synthetic rigid workload (model in the module docstring).

    Args:
        n: number of jobs.
        machine: number of nodes.
        load: offered load ``sum(run * procs) / (machine * span)``; above 1 the queue grows without bound.
        seed: random seed (same seed, same workload).

    Returns:
        The workload, sorted by submit time, named ``synthetic-n{n}-m{machine}-l{load}-s{seed}``.

    Raises:
        ConfigError: n < 1, machine < 1 or load <= 0.
    """
    if n < 1 or machine < 1 or not load > 0:
        raise ConfigError(f"synthetic workload needs n >= 1, machine >= 1, load > 0 (got {n}, {machine}, {load})")
    rng = np.random.default_rng(seed)
    top = math.log2(machine)
    u = rng.uniform(0.0, top, n)
    u = np.where(rng.random(n) < 0.75, np.round(u), u)
    procs = np.minimum(machine, np.ceil(np.exp2(u))).astype(np.int32)
    procs = np.where(rng.random(n) < 0.25, 1, procs).astype(np.int32)
    run = np.round(np.exp(rng.uniform(math.log(10.0), math.log(129600.0), n)))
    est = np.ceil(run * (1.0 + rng.exponential(1.5, n)) / 60.0) * 60.0
    mean_area = float(np.dot(run, procs.astype(np.float64))) / n
    rate = load * machine / mean_area                       # arrivals per second for the offered load
    gaps = rng.exponential(1.0 / rate, n)
    gaps[0] = 0.0
    submit = np.round(np.cumsum(gaps))
    ids = np.arange(1, n + 1, dtype=np.int64)
    log.debug("synthetic workload: %d jobs, machine %d, load %.2f, seed %d", n, machine, load, seed)
    return Workload(ids, submit, run, est, procs, machine, name=f"synthetic-n{n}-m{machine}-l{load:g}-s{seed}")
