"""The storage policy: whether a job's file system gets a data server more, gives one back, or keeps, and on which
host; pure (no socket, clock or process), so the core runs it on each I/O sample and a simulator can run it on
modelled ones.

The RIO/AIO part is :func:`malleable.adhocfs._rule.decide` (the window mean of the achieved rate AIO against the
requested rate RIO, with a tolerance and a cool-down after each change), bounded by the job's ``--fs-min`` and
``--fs-max``. This module adds what the rule does not know, the hosts:

* **growth** goes to a storage host that runs no data server of this file system yet, in this order: a *free*
  one (no compute job on it, nothing to drain, not down), then one of the job's own hosts (node-local, as the
  first servers are placed), then, only when neither exists, a host taken back from a running malleable job: one
  whose newest host is such a storage host and that stays within its bounds after giving one host
  (``size > min``) and whose loss is no more than the storage gain (below). Taking back is one shrink order of one
  host for that job; the data server goes there once the host is released and checked (the next sample sees it
  free). While a host is being taken back, nothing else is decided for that file system. Jobs that are not
  malleable, or that are at their minimum, are never shrunk, and a host is never taken from the job whose file
  system grows.
* **the price of a host taken back**, in nodes' worth of work per second: the compute job loses
  ``size * (1 - T(size) / T(size - 1))`` (its speedup model: 1 for linear speedup, less for a job that scales
  badly; :attr:`Donor.loss`); the file system's job gains ``nodes * (1 / ((1 - i) + i * AIO / AIO') - 1)`` with
  ``i`` its I/O intensity (the share of its time spent in I/O; 1 when unknown: a job that asks for an I/O rate
  is taken to wait for its I/O) and ``AIO' = min(RIO, AIO * (n + 1) / n)`` the rate one server more would give
  (servers share the load evenly). The host is taken back from the job that loses least, and only when the gain
  is at least that loss: a 1-node writer on one server gains 1 (its I/O twice as fast) and may take a host from a
  linearly scaling job (loss 1); on two servers it gains 0.5 and may not.
* **shrinking** (the rule says the servers are more than the rate needs) removes servers on hosts that another
  compute job holds first, then the newest; never below ``--fs-min`` (the rule's bound), so at least one stays.
* **making room**: when the rule does not ask for growth and a data server beyond ``--fs-min`` runs on a host that
  another compute job was given since (a queued job needed it), that server is removed (one per sample).

One change at a time: each decision is one server added or removed (or one host taken back); the rule's cool-down
and window then apply again, so a change cannot trigger its own reversal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from malleable.adhocfs._rule import RuleConfig, Scaling, decide
from malleable.controller.sched._model import Job

__all__ = ["Donor", "FsDecision", "FsState", "StorageRule", "decide_storage", "host_loss", "storage_gain"]

MB = 1e6
"""The rule works in MB/s (as ``malleable fs watch`` and ``fs status`` show rates); the controller in bytes/s."""


@dataclass(frozen=True, slots=True)
class StorageRule:
    """Parameters of the storage policy.

    Attributes:
        tolerance: the rule's tolerance T as a share of the job's RIO.
        min_tolerance: T is never below this (bytes/s), so a small RIO is not chased for noise.
        k: samples in the window.
        cooldown: seconds after a change during which the file system keeps its servers.
    """

    tolerance: float = 0.2
    min_tolerance: float = 1e6
    k: int = 3
    cooldown: float = 10.0


@dataclass(frozen=True, slots=True)
class FsState:
    """One job's file system as the policy sees it.

    Attributes:
        job_id: the job.
        servers: its active data servers as ``(server id, host)``, oldest first.
        fs_min: fewest data servers allowed.
        fs_max: most data servers allowed.
        rio: the requested I/O rate (bytes/s; 0: the job asked for none, the policy only makes room).
        samples: achieved I/O rates (bytes/s), oldest first; samples without I/O are not recorded.
        since_change: samples recorded since the last change (None: all of them).
        last_change: when the last change was decided (None: never).
        own: the job's compute hosts.
        reclaiming: a host being taken back for this file system ("" none).
        nodes: the job's compute nodes (what its I/O keeps waiting), for the price of a host taken back.
        intensity: the job's I/O intensity in [0, 1] (share of its time in I/O; 1 when unknown).
    """

    job_id: int
    servers: tuple[tuple[int, str], ...]
    fs_min: int
    fs_max: int
    rio: float
    samples: tuple[float, ...] = ()
    since_change: int | None = None
    last_change: float | None = None
    own: tuple[str, ...] = ()
    reclaiming: str = ""
    nodes: int = 1
    intensity: float = 1.0


@dataclass(frozen=True, slots=True)
class Donor:
    """A running malleable job that could give its newest host: ``host``, at ``size`` hosts (bounds ``min_size``);
    ``loss`` is the work it would lose per second, in nodes' worth (:func:`host_loss`; 1 for linear speedup)."""

    job_id: int
    host: str
    size: int
    min_size: int
    loss: float = 1.0


def host_loss(speedup: Callable[[Job, int], float], job: Job, size: int) -> float:
    """What ``job`` at ``size`` nodes loses by giving one, in nodes' worth of work per second, from its run times
    by ``speedup`` (any unit) at ``size`` and ``size - 1`` nodes: ``size * (1 - T(size) / T(size - 1))``; 0 at
    one node (it cannot give one)."""
    if size <= 1:
        return 0.0
    t_less = speedup(job, size - 1)
    return size * (1.0 - speedup(job, size) / t_less) if t_less > 0 else 0.0


def storage_gain(fs: FsState, k: int) -> float:
    """What the file system's job gains, in nodes' worth of work per second, from one data server more: its
    I/O share ``intensity`` sped up from the window's mean rate to ``min(RIO, AIO * (n + 1) / n)``."""
    window = fs.samples[-k:] if fs.samples else ()
    n = len(fs.servers)
    if not window or n < 1:
        return 0.0
    aio = sum(window) / len(window)
    better = min(fs.rio, aio * (n + 1) / n) if fs.rio > 0 else aio * (n + 1) / n
    if aio <= 0 or better <= aio:
        return 0.0
    i = min(max(fs.intensity, 0.0), 1.0)
    return fs.nodes * (1.0 / ((1.0 - i) + i * aio / better) - 1.0)


@dataclass(frozen=True, slots=True)
class FsDecision:
    """What to do with one file system.

    Attributes:
        kind: ``add`` (a data server on ``host``), ``remove`` (server ``sid`` on ``host``, partial
            redistribution), ``reclaim`` (shrink job ``donor`` by its newest host ``host`` for a later ``add``) or
            ``keep``.
        reason: the inputs that led to it, for the job's events and ``malleable info``.
    """

    kind: str
    host: str = ""
    sid: int = 0
    donor: int = 0
    reason: str = ""


def _config(fs: FsState, rule: StorageRule, n: int) -> RuleConfig:
    tol = max(rule.tolerance * fs.rio, rule.min_tolerance)
    lo, hi = max(1, min(fs.fs_min, n)), max(fs.fs_max, fs.fs_min, n, 1)
    return RuleConfig(rio=fs.rio / MB, tolerance=tol / MB, k=rule.k, n_min=lo, n_max=hi, cooldown=rule.cooldown)


def decide_storage(fs: FsState, storage: Sequence[str], free: Sequence[str], taken: Mapping[str, int],
                   donors: Sequence[Donor], now: float, rule: StorageRule = StorageRule()) -> list[FsDecision]:
    """The decisions for one file system now (a list of at most one change, or one ``keep`` with its reason).

    Args:
        fs: the file system.
        storage: the hosts that may run data servers, in pool order.
        free: storage hosts with no compute job, nothing to drain, not down.
        taken: storage hosts a compute job holds, by job id.
        donors: running malleable jobs that could give their newest host.
        now: the time of the sample (any origin shared with ``fs.last_change``).
        rule: the parameters.
    """
    n = len(fs.servers)
    if n < 1:
        return [FsDecision("keep", reason="no active data server")]
    serving = {h for _, h in fs.servers}
    if fs.reclaiming:
        if fs.reclaiming in free and fs.reclaiming not in serving and n < fs.fs_max:
            return [FsDecision("add", fs.reclaiming, reason=f"{fs.reclaiming} was taken back for this file system")]
        return [FsDecision("keep", reason=f"waiting for {fs.reclaiming} to be released")]
    if fs.rio > 0:
        d = decide([x / MB for x in fs.samples], n, _config(fs, rule, n), now, fs.last_change, fs.since_change)
    else:
        d = None
    if d is not None and d.action is Scaling.EXPAND:
        return [_grow(fs, storage, free, donors, serving, d.reason, storage_gain(fs, rule.k))]
    if d is not None and d.action is Scaling.SHRINK:
        busy = [(sid, h) for sid, h in fs.servers if taken.get(h, fs.job_id) != fs.job_id]
        rest = [s for s in reversed(fs.servers) if s not in busy]
        sid, host = (busy + rest)[0]
        return [FsDecision("remove", host, sid, reason=d.reason)]
    if n > fs.fs_min:
        for sid, host in reversed(fs.servers):
            other = taken.get(host)
            if other is not None and other != fs.job_id and host not in fs.own:
                return [FsDecision("remove", host, sid, reason=f"job {other} was given {host}: its server beyond "
                                   f"--fs-min {fs.fs_min} leaves")]
    return [FsDecision("keep", reason=d.reason if d is not None else "no requested I/O rate (--io-rate)")]


def _grow(fs: FsState, storage: Sequence[str], free: Sequence[str], donors: Sequence[Donor], serving: set[str],
          why: str, gain: float) -> FsDecision:
    """Where one more data server goes: a free storage host, one of the job's own, or one taken back from the
    job that loses least, if the file system's job gains at least as much."""
    order = {h: i for i, h in enumerate(storage)}
    for pool in (free, fs.own):
        hosts = sorted((h for h in pool if h in order and h not in serving), key=order.__getitem__)
        if hosts:
            return FsDecision("add", hosts[0], reason=why)
    able = sorted((d for d in donors if d.job_id != fs.job_id and d.size > d.min_size and d.host in order
                   and d.host not in serving), key=lambda d: (d.loss, -(d.size - d.min_size), d.job_id))
    if able and able[0].loss <= gain + 1e-9:
        d = able[0]
        return FsDecision("reclaim", d.host, donor=d.job_id,
                          reason=f"no free storage host: job {d.job_id} gives {d.host} ({d.size} -> {d.size - 1} "
                          f"nodes, min {d.min_size}; loses {d.loss:.2f}, gain {gain:.2f} nodes' worth); {why}")
    if able:
        return FsDecision("keep", reason=f"growth wanted, nothing free, and a host taken back from job "
                          f"{able[0].job_id} would lose {able[0].loss:.2f} nodes' worth for a gain of {gain:.2f}; "
                          f"{why}")
    return FsDecision("keep", reason=f"growth wanted but no storage host is free or can be taken back; {why}")
