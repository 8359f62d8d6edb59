"""Helpers shared by the malleable policies: predictions from a running job's view, and node bookkeeping.

Everything here is pure. A policy keeps a :class:`Pool` of the node ids it may still hand out during one pass
(the snapshot's free nodes plus the nodes its own shrinks release) and turns counts into node ids with it, so
its decisions name exactly the nodes the engine will have free when it applies them in order.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._model import Job, JobKind, NodeId, ResizeJob, RunningJob, StartJob
from ._speedup import ReconfigCost, SpeedupModel

__all__ = ["Pool", "adapting", "first_fit_end", "is_malleable", "predicted_remaining", "remaining", "shadow",
           "valid_size", "work_left"]


def remaining(r: RunningJob, now: float) -> float:
    """Estimated seconds left at ``now`` at the current size (reconfiguration time still due included)."""
    return max(0.0, r.end_estimate - now)


def work_left(r: RunningJob, now: float, speedup: SpeedupModel) -> float:
    """Fraction of the job's estimated work still to do at ``now`` (1 at start, 0 at the estimated end)."""
    full = r.job.estimate * speedup(r.job, r.size)
    if full <= 0:
        return 0.0
    return min(1.0, max(0.0, r.end_estimate - max(now, r.since)) / full)


def predicted_remaining(r: RunningJob, n: int, now: float, speedup: SpeedupModel,
                        cost: ReconfigCost | None = None) -> float:
    """Estimated seconds left if the job were resized to ``n`` nodes at ``now``: the work left at the new size,
    plus the reconfiguration cost (and any earlier reconfiguration still being paid)."""
    pending = max(0.0, r.since - now)
    rest = max(0.0, r.end_estimate - max(now, r.since))
    if n != r.size:
        rest *= speedup(r.job, n) / speedup(r.job, r.size)
        if cost is not None:
            pending = float(cost(r.job, r.size, n))
    return pending + rest


def adapting(r: RunningJob, now: float) -> bool:
    """Whether the job is still paying a reconfiguration (its current segment starts in the future)."""
    return r.since > now


def is_malleable(job: Job) -> bool:
    """Whether the scheduler may resize the job while it runs."""
    return job.kind is JobKind.MALLEABLE


class Pool:
    """The node ids a policy may still give out in one pass (mutable, local to one policy call): the snapshot's
    free nodes not taken yet, then the nodes its shrinks gave back, in that order (the ledger's order)."""

    __slots__ = ("_at", "_back", "_free")

    def __init__(self, free: Sequence[NodeId]) -> None:
        self._free = free
        self._at = 0
        self._back: list[NodeId] = []

    def __len__(self) -> int:
        return len(self._free) - self._at + len(self._back)

    def take(self, k: int) -> Sequence[NodeId]:
        """Remove and return the first ``k`` nodes (a slice of the snapshot's free nodes when they suffice)."""
        f, a = self._free, self._at
        left = len(f) - a
        if k <= left:
            self._at = a + k
            return f[a:a + k]
        got = tuple(f[a:]) + tuple(self._back[:k - left])
        del self._back[:k - left]
        self._at = len(f)
        return got

    def start(self, job: Job, k: int) -> StartJob:
        """A StartJob of ``job`` on ``k`` nodes taken from the pool."""
        return StartJob(job.id, self.take(k))

    def grow(self, r: RunningJob, k: int) -> ResizeJob:
        """A ResizeJob giving ``r`` ``k`` more nodes from the pool."""
        return ResizeJob(r.id, (*r.nodes, *self.take(k)))

    def shrink(self, r: RunningJob, k: int) -> ResizeJob:
        """A ResizeJob taking ``k`` nodes from ``r`` (its last ones), which go back to the pool."""
        keep = r.size - k
        self._back.extend(r.nodes[keep:])
        return ResizeJob(r.id, r.nodes[:keep])


def shadow(ends: list[tuple[float, int]], avail: int, need: int) -> tuple[float, int]:
    """EASY's reservation for a blocked head of ``need`` nodes: ``(shadow time, extra nodes)``.

    ``ends`` are ``(estimated end, size)`` of running (and just started) jobs, ``avail`` the nodes free now.
    Returns ``(inf, 0)`` when ``need`` nodes never become free (some are down, or it exceeds the machine).
    """
    return first_fit_end(sorted(ends), avail, need)


def first_fit_end(ends: Sequence[tuple[float, int]], avail: int, need: int) -> tuple[float, int]:
    """:func:`shadow` over ``ends`` already sorted by time (EASY's hot path avoids the sort)."""
    k, n = 0, len(ends)
    while k < n:
        t, size = ends[k]
        avail += size
        k += 1
        if avail >= need:
            while k < n and ends[k][0] == t:
                avail += ends[k][1]
                k += 1
            return t, avail - need
    return float("inf"), 0


def valid_size(v: int, constraint: str | None) -> bool:
    """Whether ``v`` nodes meet ``constraint``: None or ``""`` (any count >= 1), ``pof2``, ``even``, ``odd`` or
    ``ncube`` (a cube)."""
    if v < 1:
        return False
    if not constraint:
        return True
    if constraint == "pof2":
        return v & (v - 1) == 0
    if constraint == "even":
        return v % 2 == 0
    if constraint == "odd":
        return v % 2 == 1
    c = round(v ** (1.0 / 3.0))
    return any((c + d) ** 3 == v for d in (-1, 0, 1))
