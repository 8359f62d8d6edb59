"""Public value types of the runtime: adaptation status, probe result, adaptation window, decisions."""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

from malleable.runtime._record import Record

__all__ = ["AdaptWindow", "Resize", "Pause", "ProbeResult", "Resume", "Status"]


class Status(enum.Enum):
    """Role of a process with respect to an adaptation (the four IMPI states)."""

    NEW = "new"          # started by the launcher (or by the initial spawn of ``malleable run``)
    JOINING = "joining"  # spawned by an expansion; must call adapt_begin() at once
    STAYING = "staying"  # in the world before and after the pending adaptation
    LEAVING = "leaving"  # leaves the world at the pending shrink; must return from the application


class ProbeResult(NamedTuple):
    """What :func:`probe_adapt` returns; ``pending`` is the same on every rank."""

    pending: bool
    status: Status
    info: dict[str, Any]


class AdaptWindow(NamedTuple):
    """What :func:`adapt_begin` returns.

    ``intercomm`` joins the old processes (local group of old ranks) with the joining or leaving
    ones; ``new_world`` is the future world (``MPI.COMM_NULL`` on leaving ranks); the three counts
    say how many processes stay, leave and join.
    """

    intercomm: Any
    new_world: Any
    staying: int
    leaving: int
    joining: int


class Resize(Record):
    """A request to change the job's size: target process count and hosts for new processes."""

    __slots__ = ("procs", "hosts")
    procs: int
    hosts: tuple[str, ...]

    def __init__(self, procs: int, hosts: tuple[str, ...] = ()) -> None:
        self._init(procs=procs, hosts=hosts)

    def as_info(self, probe: int, kind: str) -> dict[str, Any]:
        """The ``info`` dict given to the application by probe_adapt."""
        return {"procs": self.procs, "hosts": list(self.hosts), "probe": probe, "kind": kind}


class Pause(Record):
    """Stop the job at this probe for ``seconds`` (None: until the decision source says :class:`Resume`).

    The job keeps its processes and hosts; its ranks wait without using the CPU (EPOP's pause).
    """

    __slots__ = ("seconds",)
    seconds: float | None

    def __init__(self, seconds: float | None = None) -> None:
        self._init(seconds=seconds)


class Resume(Record):
    """End of a pause (from a controller)."""

    __slots__ = ()
