"""Application-initiated resizes: a rank asks for processes; the decision source grants, refuses or defers.

Any rank may call ``request_adapt``; a request from another rank travels to world rank 0 on the runtime's own
communicator (a nonblocking send, drained by rank 0 at each probe), so it never blocks the caller. Rank 0 hands
the outstanding request to the decision source: the controller gets a ``request`` message and may answer at any
later probe; a plan answers at its ``{"at_probe": k, "answer": "grant" | "refuse" | "defer"}`` steps, where every
rank learns the outstanding request from rank 0. The answer comes through ``probe_adapt``: a grant is an ordinary
pending adaptation (``info["request"] == "granted"``), a refusal a non-pending probe with ``info["request"] ==
"refused"`` and the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from malleable.runtime._types import Resize

__all__ = ["AdaptRequest", "Refusal", "check_request", "drain", "grant", "send"]

_TAG = 4720
DRAIN_EVERY = 0.002  # seconds: rank 0 looks for other ranks' requests at most this often (a probe costs ~1 us)


@dataclass(frozen=True, slots=True)
class AdaptRequest:
    """A wish for a new size: exactly ``procs``, or anything in ``[min_procs, max_procs]`` (0: unbounded)."""

    procs: int = 0
    min_procs: int = 0
    max_procs: int = 0
    rank: int = 0

    def as_dict(self) -> dict[str, int]:
        """JSON form."""
        return {"procs": self.procs, "min": self.min_procs, "max": self.max_procs, "rank": self.rank}


@dataclass(frozen=True, slots=True)
class Refusal:
    """The decision source refused the outstanding request."""

    reason: str


def check_request(procs: int | None, min_procs: int | None, max_procs: int | None, rank: int) -> AdaptRequest:
    """Validate the arguments of ``request_adapt``.

    Raises:
        ValueError: nothing asked, a count below 1, ``min > max``, or ``procs`` outside ``[min, max]``.
        TypeError: a count that is not an int.
    """
    vals = {"procs": procs, "min": min_procs, "max": max_procs}
    for name, v in vals.items():
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise TypeError(f"request_adapt: {name} must be an int, got {type(v).__name__}")
        if v is not None and v < 1:
            raise ValueError(f"request_adapt: {name} must be >= 1, got {v}")
    if procs is None and min_procs is None and max_procs is None:
        raise ValueError("request_adapt: give procs, or min and/or max")
    if min_procs is not None and max_procs is not None and min_procs > max_procs:
        raise ValueError(f"request_adapt: min {min_procs} > max {max_procs}")
    if procs is not None and not ((min_procs or 1) <= procs <= (max_procs or procs)):
        raise ValueError(f"request_adapt: procs {procs} outside [{min_procs}, {max_procs}]")
    return AdaptRequest(procs or 0, min_procs or 0, max_procs or 0, rank)


def grant(req: AdaptRequest) -> Resize:
    """What a plan grants: ``procs``, else the largest size the request accepts (``max``, else ``min``)."""
    return Resize(req.procs or req.max_procs or req.min_procs)


def send(comm: Any, req: AdaptRequest) -> Any:
    """From a rank other than 0: send the request to rank 0 (nonblocking; returns the request handle)."""
    return comm.isend(req.as_dict(), dest=0, tag=_TAG)


def drain(comm: Any, at_least: int = 0) -> list[AdaptRequest]:
    """On rank 0: every request other ranks have sent so far, and at least ``at_least`` of them (waiting for
    those: the count of requests known to be on their way)."""
    from mpi4py import MPI

    out = []
    while len(out) < at_least or comm.iprobe(source=MPI.ANY_SOURCE, tag=_TAG):
        d = comm.recv(source=MPI.ANY_SOURCE, tag=_TAG)
        out.append(AdaptRequest(d["procs"], d["min"], d["max"], d["rank"]))
    return out
