"""The I/O-intensity-aware scheduler of seed 000 (ADMIRE D3.3 §4.2, Algorithms 2-3) and its baseline FCFSm.

Both are pure policies (:mod:`._model`). The I/O-aware one keeps the I/O intensity of the running jobs, the
*system* ``S``, close to that of the whole workload, ``W`` (running and queued jobs), so that I/O-heavy jobs run
beside compute-heavy ones and the shared file system is not congested:

* ``I(S) = Σ_RJ i_j(n_j)·n_j / Σ_RJ n_j`` (allocated nodes);
* ``I(W) = Σ_{RJ∪QJ} i_j(n_j)·n_j / D`` with queued jobs at their preferred size (``Job.procs``) and ``D`` =
  ``Σ_{RJ∪QJ} n_j`` (``"nodes"``, the default) or the machine's node count (``"cluster"``, as printed).

A pass first runs ``find_and_schedule`` (Algorithm 3): while some pending job fits the free nodes, start the
(job, size) tuple of least weighted priority ``wp = (1-α)·λ + α·norm(δ)`` (Eqs. 4.5-4.11). Then every running
malleable job waiting at a scheduling point (``Snapshot.points``) gets the size of Eqs. 4.12-4.13: an expansion
whenever it brings ``S`` closer to ``W``, a shrink only if it does and some pending job then fits, after which
``find_and_schedule`` runs again. The **[interp.]** choices of ``spec/000_admire_d33.md`` §6 are recorded in the
docstrings and in ``docs/policies.md``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from malleable.errors import ConfigError

from ._model import Decision, Job, JobKind, RunningJob, Snapshot
from ._resize import Pool, valid_size

__all__ = ["DENOMINATORS", "IOAware", "IOAwareConfig", "Load", "best_candidate", "best_configuration",
           "configurations", "fcfsm", "find_and_schedule", "system_intensity", "workload_intensity"]

DENOMINATORS = ("nodes", "cluster")
"""The denominators of ``I(W)``: the nodes of the jobs themselves, or the machine's nodes."""

_EPS = 1e-12
"""Differences of intensities (or priorities) below this are ties."""


@dataclass(frozen=True, slots=True)
class Load:
    """The I/O load of a set of jobs: ``io = Σ i_j(n_j)·n_j`` and ``nodes = Σ n_j``."""

    io: float = 0.0
    nodes: int = 0

    def plus(self, job: Job, n: int) -> Load:
        """The load with ``job`` added at ``n`` nodes."""
        return Load(self.io + job.io_intensity(n) * n, self.nodes + n)

    def minus(self, job: Job, n: int) -> Load:
        """The load with ``job`` (counted at ``n`` nodes) removed."""
        return Load(self.io - job.io_intensity(n) * n, self.nodes - n)

    def intensity(self, denominator: int | None = None) -> float:
        """``io / denominator`` (default: ``nodes``); 0 when the denominator is 0."""
        d = self.nodes if denominator is None else denominator
        return self.io / d if d > 0 else 0.0


def _load(pairs: Iterable[tuple[Job, int]]) -> Load:
    io, nodes = 0.0, 0
    for job, n in pairs:
        io += job.io_intensity(n) * n
        nodes += n
    return Load(io, nodes)


def system_intensity(running: Iterable[RunningJob]) -> float:
    """``I(S)``: the node-weighted mean intensity of the running jobs at their current sizes (0 when none)."""
    return _load((r.job, r.size) for r in running).intensity()


def workload_intensity(running: Iterable[RunningJob], queue: Iterable[Job], denominator: str = "nodes",
                       cluster: int = 0) -> float:
    """``I(W)``: running jobs at their current size and queued jobs at their preferred size (``procs``), over
    their nodes (``"nodes"``) or over ``cluster`` nodes (``"cluster"``); 0 on a zero denominator."""
    load = _load([*((r.job, r.size) for r in running), *((j, j.procs) for j in queue)])
    return load.intensity(None if denominator == "nodes" else cluster)


def configurations(job: Job, limit: int) -> list[int]:
    """The sizes ``Conf_j`` of ``job`` that are at most ``limit``: ``procs`` for a rigid job; else the sizes in
    ``[min_procs, max_procs]`` that meet the job's ``constraint``, ascending."""
    if job.kind is JobKind.RIGID:
        return [job.procs] if 0 < job.procs <= limit else []
    return [n for n in range(max(1, job.min_procs), min(job.max_procs, limit) + 1) if valid_size(n, job.constraint)]


def _least(job: Job) -> int:
    """The smallest size the job can run on (a bound: the constraint is not applied)."""
    return job.procs if job.kind is JobKind.RIGID else max(1, job.min_procs)


def _bb_fits(job: Job, bb_free: float) -> bool:
    return job.bb <= bb_free * (1.0 + 1e-9) + 1e-9


_Table = list[tuple[int, float]]
"""A job's configurations that fit, ascending, each as ``(n, i(n)·n)``."""


def _table(job: Job, limit: int) -> _Table:
    return [(n, job.io_intensity(n) * n) for n in configurations(job, limit)]


def _best(pending: Sequence[Job], tables: Sequence[_Table], n_free: int, s: Load, w: float, alpha: float,
          bb_free: float) -> tuple[int, int] | None:
    rows: list[tuple[int, float, int]] = []     # (index, least δ of the job, its size)
    dmin, dmax = math.inf, -math.inf
    sio, snodes = s.io, s.nodes
    for i, (job, table) in enumerate(zip(pending, tables, strict=True)):
        if not table or table[0][0] > n_free or not _bb_fits(job, bb_free):
            continue
        best_d, best_n = math.inf, 0
        for n, io in table:
            if n > n_free:
                break
            d = abs(w - (sio + io) / (snodes + n))
            if d > dmax:
                dmax = d
            if d <= best_d + _EPS:              # ascending sizes: a tie goes to the larger one
                best_d, best_n = min(d, best_d), n
        rows.append((i, best_d, best_n))
        dmin = min(dmin, best_d)
    if not rows:
        return None
    m = len(rows)
    span = dmax - dmin
    pick: tuple[int, int] | None = None
    best_wp = math.inf
    for pos, (i, d, n) in enumerate(rows):
        lam = pos / (m - 1) if m > 1 else 0.0
        norm = (d - dmin) / span if span > _EPS else 0.0
        wp = (1.0 - alpha) * lam + alpha * norm
        if wp < best_wp - _EPS:                 # a tie keeps the lower pos
            best_wp, pick = wp, (i, n)
    return pick


def best_candidate(pending: Sequence[Job], n_free: int, s: Load, w: float, alpha: float,
                   bb_free: float = math.inf) -> tuple[int, int] | None:
    """Eqs. 4.5-4.11: ``(index in pending, size)`` of the tuple of least weighted priority, or None.

    The tuples are the configurations ``<= n_free`` of the pending jobs (in priority order) whose burst buffer
    fits. ``pos`` ranks the jobs that have a tuple (0 = first), ``λ = pos / (m-1)``; ``δ = |w - new|`` with
    ``new = (s.io + i(n)·n) / (s.nodes + n)``, normalised min-max over all tuples; a zero denominator gives 0.
    Ties go to the lower ``pos``, then to the larger size.
    """
    return _best(pending, [_table(j, n_free) for j in pending], n_free, s, w, alpha, bb_free)


def find_and_schedule(pending: Sequence[Job], n_free: int, s: Load, w: float, alpha: float,
                      bb_free: float = math.inf) -> tuple[list[tuple[Job, int]], Load]:
    """Algorithm 3 with the digest's fixes: while pending jobs remain and ``n_free >= min_nodes``, start the best
    candidate, add it to ``S`` and take its nodes; stop when nothing fits. ``W`` does not change on an admission
    (_Table 4.2).

    Returns:
        The ``(job, size)`` starts in order, and the new load of ``S``.
    """
    potential = [j for j in pending if _least(j) <= n_free]
    tables = [_table(j, n_free) for j in potential]
    starts: list[tuple[Job, int]] = []
    while potential:
        pick = _best(potential, tables, n_free, s, w, alpha, bb_free)
        if pick is None:
            break
        i, n = pick
        job = potential.pop(i)
        del tables[i]
        starts.append((job, n))
        s = s.plus(job, n)
        n_free -= n
        bb_free -= job.bb
        keep = [k for k, t in enumerate(tables) if t and t[0][0] <= n_free]      # min_nodes <= |free|
        if len(keep) < len(tables):
            potential = [potential[k] for k in keep]
            tables = [tables[k] for k in keep]
    return starts, s


def best_configuration(job: Job, cur: int, s: Load, w: float, n_free: int, pending: Iterable[Job],
                       bb_free: float = math.inf) -> int | None:
    """Eqs. 4.12-4.13 for a malleable job at a scheduling point on ``cur`` nodes: the size ``!= cur`` (at most
    ``cur + n_free``) whose new ``S`` is closest to ``w``, or None when none is strictly closer than now.

    An expansion is taken whenever it improves ``|W - S|``; a shrink only if it does too and some pending job
    (whose burst buffer fits) can then start on the free plus released nodes. Ties go to the larger size.
    """
    gap0 = abs(w - s.intensity())
    base = s.minus(job, cur)
    need = min((_least(j) for j in pending if _bb_fits(j, bb_free)), default=math.inf)
    best: int | None = None
    best_gap = math.inf
    for n in configurations(job, cur + n_free):
        if n == cur:
            continue
        gap = abs(w - base.plus(job, n).intensity())
        if gap >= gap0 - _EPS or (n < cur and n_free + cur - n < need):
            continue
        if gap <= best_gap + _EPS:              # ascending sizes: a tie goes to the larger one
            best, best_gap = n, min(gap, best_gap)
    return best


@dataclass(frozen=True, slots=True)
class IOAwareConfig:
    """Parameters of the I/O-intensity-aware scheduler.

    Attributes:
        alpha: the job reordering intensity α in [0, 1]: 0 = FCFS among the jobs that fit, 1 = pure balance
            (0.4: where the document's checkpoint times stop improving).
        w_denominator: ``"nodes"`` (``Σ n_j`` over running and queued jobs, so ``W`` is a mean comparable with
            ``S``) [interp.] or ``"cluster"`` (the machine's nodes, as printed).
    """

    alpha: float = 0.4
    w_denominator: str = "nodes"

    def __post_init__(self) -> None:
        a = self.alpha
        if isinstance(a, bool) or not isinstance(a, int | float) or not 0.0 <= a <= 1.0:
            raise ConfigError(f"io-aware: alpha must be a number in [0, 1], got {a!r}")
        if self.w_denominator not in DENOMINATORS:
            raise ConfigError(f"io-aware: w_denominator must be 'nodes' or 'cluster', got {self.w_denominator!r}")


@dataclass(frozen=True, slots=True)
class IOAware:
    """Seed 000's I/O-intensity-aware scheduler as a pure policy: ``IOAware(IOAwareConfig())(snapshot, now)``.

    One pass: ``find_and_schedule`` over the queue (submissions and completions), then, in the snapshot's running
    order, each malleable job in ``snapshot.points`` gets :func:`best_configuration` (a shrink is followed by
    ``find_and_schedule``). ``W`` is rebuilt from the snapshot at each pass and changes within it only on a
    resize (_Table 4.2). Starts take free nodes in snapshot order, then the nodes shrinks released; a shrink keeps
    a prefix of the job's nodes, a grow appends free nodes.
    """

    cfg: IOAwareConfig = IOAwareConfig()

    def __call__(self, snapshot: Snapshot, now: float) -> list[Decision]:
        points = snapshot.points
        if not snapshot.queue and not points:
            return []
        alpha = self.cfg.alpha
        cluster = None if self.cfg.w_denominator == "nodes" else len(snapshot.nodes)
        pool = Pool(snapshot.free)
        pending = list(snapshot.queue)
        bb = snapshot.bb_free
        s = _load((r.job, r.size) for r in snapshot.running)
        wl = _load([(r.job, r.size) for r in snapshot.running] + [(j, j.procs) for j in pending])
        out: list[Decision] = []

        def schedule(s: Load, bb: float) -> tuple[Load, float]:
            nonlocal pending
            starts, s = find_and_schedule(pending, len(pool), s, wl.intensity(cluster), alpha, bb)
            for job, n in starts:
                out.append(pool.start(job, n))
                bb -= job.bb
            if starts:
                done = {job.id for job, _ in starts}
                pending = [j for j in pending if j.id not in done]
            return s, bb

        if pending:
            s, bb = schedule(s, bb)
        for r in snapshot.running:
            if r.id not in points or r.job.kind is not JobKind.MALLEABLE:
                continue
            n = best_configuration(r.job, r.size, s, wl.intensity(cluster), len(pool), pending, bb)
            if n is None:
                continue
            out.append(pool.grow(r, n - r.size) if n > r.size else pool.shrink(r, r.size - n))
            s = s.minus(r.job, r.size).plus(r.job, n)
            wl = wl.minus(r.job, r.size).plus(r.job, n)
            if n < r.size:
                s, bb = schedule(s, bb)
        return out


def _fcfs_size(job: Job, avail: int) -> int:
    """FCFSm's start size: ``procs`` for a rigid job, else the largest valid size ``<= min(procs, avail)``."""
    if job.kind is JobKind.RIGID:
        return job.procs if job.procs <= avail else 0
    sizes = configurations(job, min(job.procs, avail))
    return sizes[-1] if sizes else 0


def fcfsm(snapshot: Snapshot, now: float) -> list[Decision]:
    """FCFSm, the I/O-aware scheduler's baseline: FCFS without backfilling, then every malleable job at a
    scheduling point grows greedily towards ``max_procs`` while nodes are free (in the snapshot's running order);
    it never shrinks.

    A moldable or malleable job starts on ``min(procs, free)`` nodes if that is at least its minimum [interp.].

    Args:
        snapshot: the machine and queues.
        now: the current time.

    Returns:
        StartJob decisions for the leading queued jobs that fit, then ResizeJob expansions.
    """
    pool = Pool(snapshot.free)
    bb = snapshot.bb_free
    out: list[Decision] = []
    for job in snapshot.queue:
        k = _fcfs_size(job, len(pool))
        if not k or not _bb_fits(job, bb):
            break
        out.append(pool.start(job, k))
        bb -= job.bb
    for r in snapshot.running:
        if not len(pool):
            break
        if r.id not in snapshot.points or r.job.kind is not JobKind.MALLEABLE or r.size >= r.job.max_procs:
            continue
        grow = [n for n in configurations(r.job, r.size + len(pool)) if n > r.size]
        if grow:
            out.append(pool.grow(r, grow[-1] - r.size))
    return out
