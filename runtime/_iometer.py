"""Measured I/O intensity: the wall time a process spends in I/O, over its run time, reported to the controller.

The I/O-intensity-aware policy balances the running jobs' I/O intensity (I/O time over total time) against the
workload's; a job may declare one at submission (``submit --io-intensity``), and one that measures it replaces
the declaration. The application wraps its I/O in :func:`io_phase` (or adds time measured elsewhere with
:func:`report_io`); the meter adds the seconds and bytes up, and on world rank 0 of a job under the controller
the runtime link sends them as the ``"io"`` phase of its progress reports (``{"io_seconds", "seconds",
"bytes", "intensity"}``), at most once per :data:`REPORT_EVERY` seconds (at an I/O call or a probe) and once more
when the link closes at the end of the run. Without a controller link (plain ``mpiexec``, ``malleable run``)
nothing is sent; :func:`io_stats` still gives the totals.

The clock of ``seconds`` starts when this module is first loaded: at the latest when ``init_adapt`` opens the
controller link, earlier if the program touches :func:`io_phase` or :func:`report_io` before.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["IO_PHASE", "REPORT_EVERY", "IOMeter", "IOStats", "io_phase", "io_stats", "meter", "report_io"]

IO_PHASE = "io"
"""The progress phase the I/O reports go under (the controller reads it)."""
REPORT_EVERY = 1.0
"""Seconds between two reports of the same process, at least (the last one at the end is always sent)."""


@dataclass(frozen=True, slots=True)
class IOStats:
    """What a process measured: ``io_seconds`` of I/O in ``seconds`` of run time, ``bytes`` moved."""

    io_seconds: float
    seconds: float
    bytes: int

    @property
    def intensity(self) -> float:
        """``io_seconds / seconds`` in [0, 1] (0 before any time passed)."""
        return min(1.0, self.io_seconds / self.seconds) if self.seconds > 0 else 0.0

    def data(self) -> dict[str, float | int]:
        """The report's body (the controller recomputes the intensity from the first two)."""
        return {"io_seconds": round(self.io_seconds, 6), "seconds": round(self.seconds, 6), "bytes": self.bytes,
                "intensity": round(self.intensity, 6)}


class IOMeter:
    """I/O time and bytes added up since ``start``; tells when a report is due.

    Args:
        clock: the time source (seconds; monotonic).
        every: least seconds between two reports (:meth:`due`).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, every: float = REPORT_EVERY) -> None:
        self.clock, self.every = clock, every
        self.start = clock()
        self.io_seconds = 0.0
        self.bytes = 0
        self.calls = 0
        self.sent_at = -math.inf
        self.sent_calls = 0

    def add(self, seconds: float, nbytes: int = 0) -> None:
        """Count ``seconds`` of I/O that moved ``nbytes`` bytes.

        Raises:
            ValueError: a negative or non-finite time, or a negative byte count.
        """
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) \
                or seconds < 0:
            raise ValueError(f"I/O time must be a finite number of seconds >= 0, got {seconds!r}")
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"I/O bytes must be an int >= 0, got {nbytes!r}")
        self.io_seconds += float(seconds)
        self.bytes += nbytes
        self.calls += 1

    def stats(self) -> IOStats:
        """The totals now."""
        return IOStats(self.io_seconds, max(0.0, self.clock() - self.start), self.bytes)

    def due(self, force: bool = False) -> IOStats | None:
        """The report to send now (marked sent), or None: nothing measured since the last one, or the last one
        went out less than ``every`` seconds ago (unless ``force``, for the one at the end)."""
        now = self.clock()
        if self.calls == self.sent_calls or (not force and now - self.sent_at < self.every):
            return None
        self.sent_at, self.sent_calls = now, self.calls
        return self.stats()


_METER = IOMeter()


def meter() -> IOMeter:
    """This process's meter (the one :func:`io_phase` and :func:`report_io` add to)."""
    return _METER


def report_io(io_seconds: float, nbytes: int = 0) -> None:
    """Add ``io_seconds`` of I/O (measured by the caller) that moved ``nbytes`` bytes; sent to the controller when
    a report is due. Call it on world rank 0: other ranks' figures are kept but not sent.

    Raises:
        ValueError: a negative or non-finite time, or a negative byte count.
    """
    _METER.add(io_seconds, nbytes)
    _send_due()


@contextmanager
def io_phase(nbytes: int = 0) -> Iterator[None]:
    """Count the wall time of the ``with`` block as I/O (``nbytes``: what it moves), also when it raises::

        with mr.io_phase(nbytes=grid.nbytes):
            save(grid)
    """
    t0 = time.monotonic()
    try:
        yield
    finally:
        report_io(time.monotonic() - t0, nbytes)


def io_stats() -> IOStats:
    """This process's totals so far (what the next report would say)."""
    return _METER.stats()


def _send_due() -> None:
    """Send a due report through the runtime's decision source, if the runtime is initialised (it sends only
    from world rank 0, and only a controller link passes it on). Never loads MPI itself."""
    world = sys.modules.get("malleable.runtime._world")
    if world is None or not world.is_initialized():
        return
    stats = _METER.due()
    if stats is not None:
        world.report_progress(IO_PHASE, stats.data())
