"""What a simulation returns: per-job times and sizes, and each resized or interrupted job's size history."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ._workload import Workload

__all__ = ["SimResult", "SizeHistory"]


@dataclass(slots=True)
class SizeHistory:
    """Allocation segments: from ``time[k]`` on, the job of workload row ``row[k]`` holds ``size[k]`` nodes
    (``nodes[k]``, when recorded) until its next segment or its end; size 0 is a gap (interrupted, re-queued).

    Jobs that kept their start size hold one segment, ``(start, size)``, which is kept here only when node ids are
    recorded (``Simulator(..., nodes=True)``); resized and interrupted jobs have all their segments here, in time
    order.
    """

    row: np.ndarray
    time: np.ndarray
    size: np.ndarray
    nodes: list[Sequence[Hashable]] | None = None

    def rows(self) -> np.ndarray:
        """The rows that have segments here."""
        return np.unique(self.row)

    def of(self, i: int) -> list[int]:
        """Indices (into the arrays) of row ``i``'s segments, in time order."""
        return np.flatnonzero(self.row == i).tolist()


@dataclass(slots=True)
class SimResult:
    """Outcome of one simulation.

    Attributes:
        workload: the replayed workload (rows align with the arrays below).
        policy: the policy's name.
        start, end: per-job first start and end times (s).
        size: per-job size at start.
        area: per-job node-seconds actually held (size x time, summed over resizes).
        resizes: per-job number of resizes.
        sim_seconds: wall-clock seconds spent in the event loop.
        passes: number of scheduling passes (policy calls).
        decisions: number of decisions applied, by type name.
        restarts: per-job number of interruptions (failures, Interrupt decisions), or None if none could occur.
        lost: per-job node-seconds thrown away by interruptions (included in ``area``), or None likewise.
        history: the size history of resized and interrupted jobs (of every job with node ids recorded).
        node_ids: the machine's node ids (node indices in plots and Batsim files are positions in it).
    """

    workload: Workload
    policy: str
    start: np.ndarray
    end: np.ndarray
    size: np.ndarray
    area: np.ndarray
    resizes: np.ndarray
    sim_seconds: float
    passes: int
    decisions: dict[str, int] = field(default_factory=dict)
    restarts: np.ndarray | None = None
    lost: np.ndarray | None = None
    history: SizeHistory | None = None
    node_ids: tuple[Hashable, ...] | None = None

    @property
    def wait(self) -> np.ndarray:
        """Per-job wait (start - submit)."""
        return self.start - self.workload.submit

    def segments(self, i: int) -> list[tuple[float, int, Sequence[Hashable] | None]]:
        """Row ``i``'s allocation segments ``(from, size, nodes or None)``, in time order; the last lasts until
        ``end[i]``."""
        h = self.history
        ks = h.of(i) if h is not None else []
        if not ks:
            return [(float(self.start[i]), int(self.size[i]), None)]
        assert h is not None
        return [(float(h.time[k]), int(h.size[k]), None if h.nodes is None else h.nodes[k]) for k in ks]

    def size_changes(self) -> tuple[np.ndarray, np.ndarray]:
        """Every change of the number of busy nodes: ``(times, deltas)`` (unsorted), from the segments."""
        h = self.history
        has = np.zeros(len(self.start), dtype=bool)
        if h is not None and len(h.row):
            has[h.row] = True
        plain = ~has & ~np.isnan(self.start)
        t = [self.start[plain], self.end[plain]]
        d = [self.size[plain], -self.size[plain]]
        if h is not None and len(h.row):
            order = np.lexsort((np.arange(len(h.row)), h.row))       # by row, then recording (time) order
            row, time, size = h.row[order], h.time[order], h.size[order]
            last = np.r_[row[1:] != row[:-1], True]
            until = np.where(last, self.end[row], np.r_[time[1:], 0.0])
            t += [time, until]
            d += [size, -size]
        return np.concatenate(t), np.concatenate(d).astype(np.int64)
