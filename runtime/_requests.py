"""Application-initiated resizes: a rank asks for processes; the decision source grants, refuses or defers.

Any rank may call ``request_adapt``; a request from another rank travels to world rank 0 on the runtime's own
communicator (:class:`Channel`: a nonblocking send, drained by rank 0 at each probe), so it never blocks the
caller. Rank 0 hands the outstanding request to the decision source: the controller gets a ``request`` message and
may answer at any later probe; a plan answers at its ``{"at_probe": k, "answer": "grant" | "refuse" | "defer"}``
steps, where every rank learns the outstanding request from rank 0. The answer comes through ``probe_adapt``: a
grant is an ordinary pending adaptation (``info["request"] == "granted"``), a refusal a non-pending probe with
``info["request"] == "refused"`` and the reason.
"""

from __future__ import annotations

from typing import Any

from malleable.runtime._record import Record
from malleable.runtime._types import Resize

__all__ = ["AdaptRequest", "Channel", "Refusal", "check_request", "grant"]

_TAG = 4720
DRAIN_EVERY = 0.002  # seconds: rank 0 looks for other ranks' requests at most this often (a probe costs ~1 us)


class AdaptRequest(Record):
    """A wish for a new size: exactly ``procs``, or anything in ``[min_procs, max_procs]`` (0: unbounded)."""

    __slots__ = ("procs", "min_procs", "max_procs", "rank")
    procs: int
    min_procs: int
    max_procs: int
    rank: int

    def __init__(self, procs: int = 0, min_procs: int = 0, max_procs: int = 0, rank: int = 0) -> None:
        self._init(procs=procs, min_procs=min_procs, max_procs=max_procs, rank=rank)

    def as_dict(self) -> dict[str, int]:
        """JSON form."""
        return {"procs": self.procs, "min": self.min_procs, "max": self.max_procs, "rank": self.rank}


class Refusal(Record):
    """The decision source refused the outstanding request."""

    __slots__ = ("reason",)
    reason: str

    def __init__(self, reason: str) -> None:
        self._init(reason=reason)


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


class Channel:
    """How requests travel to rank 0: a duplicate of the job's world, renewed with it after every adaptation.

    The runtime makes it at the first probe after an adaptation (every rank makes the same probes), not inside the
    adaptation, which then never waits for the slowest rank to make it; not at a probe where a plan adapts again at
    once (the adaptation would close it unused). A request made before that waits in
    :attr:`queued` and goes at that probe; :attr:`sent` counts the requests a rank other than 0 sent, :attr:`got`
    those rank 0 received.
    """

    def __init__(self, world: Any, queued: list[AdaptRequest] | None = None) -> None:
        self.comm = world.Dup()
        self.sends: list[Any] = []       # requests on their way to rank 0 (other ranks)
        self.sent = 0
        self.got = 0
        for req in queued or []:
            self.send(req)

    def send(self, req: AdaptRequest) -> None:
        """From a rank other than 0: send ``req`` to rank 0 (nonblocking)."""
        self.sends = [r for r in self.sends if not r.Test()]
        self.sends.append(self.comm.isend(req.as_dict(), dest=0, tag=_TAG))
        self.sent += 1

    def drain(self, at_least: int = 0) -> list[AdaptRequest]:
        """On rank 0: every request other ranks have sent so far, and at least ``at_least`` of them (waiting for
        those: the count of requests known to be on their way)."""
        from mpi4py import MPI

        out = []
        while len(out) < at_least or self.comm.iprobe(source=MPI.ANY_SOURCE, tag=_TAG):
            d = self.comm.recv(source=MPI.ANY_SOURCE, tag=_TAG)
            out.append(AdaptRequest(d["procs"], d["min"], d["max"], d["rank"]))
        self.got += len(out)
        return out

    def close(self, release: Any, timeout: float = 5.0) -> None:
        """Complete what is in flight (rank 0 has the sent requests: it answered them; Intel MPI crashes disconnecting
        a communicator with a send pending) and ``release`` the duplicate."""
        from malleable.errors import AdaptTimeout
        from malleable.runtime._waits import wait_request

        for req in self.sends:
            try:
                wait_request(req, timeout, "a size request to rank 0")
            except AdaptTimeout:
                pass
        self.sends = []
        release(self.comm)
