"""An index of the queue by size and estimate, so EASY's backfilling scan costs the same on a queue of 100 or of
30,000 jobs.

The ledger builds it when a policy first asks (a long queue) and then keeps it in step with every change of the
queue. Jobs carry a sequence number in queue order; per job size, it keeps the jobs' sequence numbers (queue order)
and ``(estimate, sequence)`` pairs (estimate order). A policy reads it through the snapshot's queue
(:class:`LedgerQueue`, only while the snapshot is current).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator, Sequence
from heapq import heapify
from itertools import islice

from ._model import Job, QueueView

__all__ = ["LedgerQueue", "QueueIndex"]


class QueueIndex:
    """Queued jobs by size: ``order[p]`` (sequence numbers in queue order) and ``by_est[p]`` (``(estimate, seq)``
    sorted), ``sizes`` (the sizes present, sorted), ``job[seq]`` and ``seq_of[job id]``."""

    __slots__ = ("by_est", "job", "next", "order", "seq_of", "seqs", "sizes")

    def __init__(self, queue: Sequence[Job]) -> None:
        self.order: dict[int, list[int]] = {}
        self.by_est: dict[int, list[tuple[float, int]]] = {}
        self.sizes: list[int] = []
        self.job: dict[int, Job] = {}
        self.seq_of: dict[int, int] = {}
        self.seqs: list[int] = []                 # the sequence numbers in queue order (parallel to the queue)
        self.next = 0
        for j in queue:
            self.append(j)

    def append(self, job: Job) -> None:
        """``job`` joined the tail of the queue."""
        s = self.next
        self.next = s + 1
        p = job.procs
        self.job[s] = job
        self.seq_of[job.id] = s
        self.seqs.append(s)
        o = self.order.get(p)
        if o is None:
            self.order[p] = [s]
            self.by_est[p] = [(job.estimate, s)]
            insort(self.sizes, p)
        else:
            o.append(s)
            insort(self.by_est[p], (job.estimate, s))

    def remove(self, job: Job) -> int:
        """``job`` left the queue (started, cancelled); returns the position it had in the queue."""
        s = self.seq_of.pop(job.id)
        del self.job[s]
        i = bisect_left(self.seqs, s)
        del self.seqs[i]
        p = job.procs
        o = self.order[p]
        if len(o) == 1:
            del self.order[p], self.by_est[p]
            del self.sizes[bisect_left(self.sizes, p)]
            return i
        del o[bisect_left(o, s)]
        e = self.by_est[p]
        del e[bisect_left(e, (job.estimate, s))]
        return i

    def short_jobs(self, after: int, size: int, est: float) -> list[tuple[int, int, Iterator[int]]]:
        """For each job size up to ``size``: ``(first seq, size, the following seqs)`` of its jobs behind
        ``after`` with an estimate of at most ``est``, in queue order (lazily), as a heap."""
        heads: list[tuple[int, int, Iterator[int]]] = []
        jobs = self.job
        nxt = self.next
        for p in self.sizes[:bisect_right(self.sizes, size)]:
            e = self.by_est[p]
            k = bisect_right(e, (est, nxt))
            if not k:
                continue
            o = self.order[p]
            if k * k <= 8 * len(o):          # few short jobs of this size: sort them
                it: Iterator[int] = iter(sorted(s for _, s in e[:k] if s > after))
            else:                            # mostly short: walk the queue order, skipping the long ones
                it = (s for s in islice(o, bisect_right(o, after), None) if jobs[s].estimate <= est)
            first = next(it, None)
            if first is not None:
                heads.append((first, p, it))
        heapify(heads)
        return heads

    def first(self, after: int, size: int) -> int:
        """The first sequence number ``> after`` of a job of at most ``size`` nodes (-1: none)."""
        best = -1
        order = self.order
        for p in self.sizes[:bisect_right(self.sizes, size)]:
            o = order[p]
            if o[-1] > after:
                s = o[bisect_right(o, after)]
                if best < 0 or s < best:
                    best = s
        return best


class LedgerQueue(QueueView):
    """The snapshot's queue: a view of the ledger's list that also hands out the ledger's :class:`QueueIndex`
    while the snapshot is current (None once frozen)."""

    __slots__ = ("_ix",)

    def __init__(self, items: Sequence[Job], index) -> None:  # noqa: ANN001 - a callable returning the index
        super().__init__(items)
        self._ix = index

    def index(self) -> QueueIndex | None:  # type: ignore[override]  # not Sequence.index: the queue's own
        """The queue's index (built on first use), or None when this view no longer follows the ledger."""
        return None if self._ix is None else self._ix()

    def freeze(self) -> None:
        """Detach from the engine's list (and from its index)."""
        super().freeze()
        self._ix = None
