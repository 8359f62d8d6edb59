"""The burst buffer's holds: how much each job holds, of which kind, and their sums (what :class:`~._ledger.Ledger`
counts as used). A job holds its buffer for its run (``RUN``), while its file system is staged out and stopped
after it (``AFTER``), and before its start while its stage-in runs early (``EARLY``)."""

from __future__ import annotations

import enum

__all__ = ["Holds", "Kind"]


class Kind(enum.IntEnum):
    """The kinds of hold."""

    RUN = 0
    AFTER = 1
    EARLY = 2


class Holds:
    """Bytes held by ``(job, kind)``; ``used`` is their sum, ``early`` the sum of the early ones."""

    __slots__ = ("_by", "early", "used")

    def __init__(self) -> None:
        self._by: dict[tuple[int, Kind], float] = {}
        self.used = 0.0
        self.early = 0.0

    def hold(self, job_id: int, amount: float, kind: Kind) -> None:
        """Add ``amount`` to what ``job_id`` holds of ``kind``."""
        if not amount:
            return
        key = (job_id, kind)
        self._by[key] = self._by.get(key, 0.0) + amount
        self.used += amount
        if kind is Kind.EARLY:
            self.early += amount

    def release(self, job_id: int, kind: Kind) -> float:
        """Free what ``job_id`` holds of ``kind``; returns the amount (0: nothing)."""
        amount = self._by.pop((job_id, kind), 0.0)
        if amount:
            self.used = max(0.0, self.used - amount)
            if kind is Kind.EARLY:
                self.early = max(0.0, self.early - amount)
        return amount

    def of(self, job_id: int, kind: Kind) -> float:
        """What ``job_id`` holds of ``kind``."""
        return self._by.get((job_id, kind), 0.0)
