"""Public value types of the runtime: adaptation status, probe result, adaptation window, decisions."""

from __future__ import annotations

import enum
from collections import namedtuple

from malleable.runtime._record import Record

# The two tuples' fields, typed for checkers and built by collections at run time: typing.NamedTuple would load
# typing in every joiner, whose import of the runtime lies on every expansion's path.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NamedTuple

    class _ProbeFields(NamedTuple):
        pending: bool
        status: Status
        info: dict[str, Any]

    class _WindowFields(NamedTuple):
        intercomm: Any
        new_world: Any
        staying: int
        leaving: int
        joining: int
else:
    _ProbeFields = namedtuple("ProbeResult", ("pending", "status", "info"))
    _WindowFields = namedtuple("AdaptWindow", ("intercomm", "new_world", "staying", "leaving", "joining"))

__all__ = ["AdaptWindow", "Resize", "Pause", "ProbeResult", "Resume", "Status"]


class Status(enum.Enum):
    """Role of a process with respect to an adaptation (the four IMPI states)."""

    NEW = "new"          # started by the launcher (or by the initial spawn of ``malleable run``)
    JOINING = "joining"  # spawned by an expansion; must call adapt_begin() at once
    STAYING = "staying"  # in the world before and after the pending adaptation
    LEAVING = "leaving"  # leaves the world at the pending shrink; must return from the application


class ProbeResult(_ProbeFields):
    """What :func:`probe_adapt` returns: ``(pending, status, info)``; ``pending`` is the same on every rank."""

    __slots__ = ()


class AdaptWindow(_WindowFields):
    """What :func:`adapt_begin` returns: ``(intercomm, new_world, staying, leaving, joining)``.

    ``intercomm`` joins the old processes (local group of old ranks) with the joining or leaving
    ones; ``new_world`` is the future world (``MPI.COMM_NULL`` on leaving ranks); the three counts
    say how many processes stay, leave and join.
    """

    __slots__ = ()


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
