"""Waiting on MPI requests with a deadline: poll with a backoff instead of blocking forever."""

from __future__ import annotations

import time
from collections.abc import Callable

from malleable.errors import AdaptTimeout

TYPE_CHECKING = False   # typing stays unloaded: a joiner imports this on every expansion's path
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Backoff", "wait_request"]


class Backoff:
    """Sleep intervals growing from ``start`` to ``cap`` seconds, so long waits use almost no CPU."""

    def __init__(self, start: float = 1e-5, cap: float = 0.02) -> None:
        self._delay = start
        self._cap = cap

    def sleep(self) -> None:
        """Sleep the current interval and double it (up to the cap)."""
        time.sleep(self._delay)
        self._delay = min(self._delay * 2, self._cap)


def wait_request(req: Any, timeout: float | None, what: str, cap: float = 0.02,
                 poke: Callable[[], Any] | None = None) -> Any:
    """Wait for an mpi4py request (``Test`` polling), returning what its ``test()`` gives.

    Args:
        req: an ``MPI.Request`` (buffer) or a request from lowercase ``isend``/``irecv``.
        timeout: seconds; None waits without limit (still without spinning).
        what: text for the error message.
        cap: longest sleep between polls.
        poke: called at every poll (e.g. to move this process's other traffic on).

    Raises:
        AdaptTimeout: the request did not complete in time (it is left pending).
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    backoff = Backoff(cap=cap)
    while True:
        done, value = _test(req)
        if done:
            return value
        if deadline is not None and time.monotonic() > deadline:
            raise AdaptTimeout(f"{what}: no answer within {timeout:g} s")
        if poke is not None:
            poke()
        backoff.sleep()


def _test(req: Any) -> tuple[bool, Any]:
    result = req.test()
    if isinstance(result, tuple):
        return bool(result[0]), result[1]
    return bool(result), None
