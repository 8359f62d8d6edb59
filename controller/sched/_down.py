"""Down nodes in availability profiles: a node that is neither free nor held (failed, or, live, being checked
after its last job) comes back at its expected time, so schedules built from running jobs' ends must count it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from heapq import merge

from ._model import Decision, Job, RunningJob, Snapshot

__all__ = ["down_ends", "with_down", "counting_down"]

_DOWN = Job(-1, 0.0, 1, 0.0)


def down_ends(snapshot: Snapshot) -> list[tuple[float, int]]:
    """``(expected return, 1)`` of every down node, sorted (``inf`` when unknown)."""
    return [(back, 1) for _, back in snapshot.down]


def with_down(snapshot: Snapshot) -> Snapshot:
    """The snapshot with every down node shown as a one-node job (id -1) ending at its expected return, so a
    profile built from the running jobs reaches the whole machine again (policies that act on running jobs
    skip ids below 0)."""
    if not snapshot.down:
        return snapshot
    now = snapshot.now
    ghosts = [RunningJob(_DOWN, (x,), 1, now, now, 0.0, back, 0) for x, back in snapshot.down]
    run = tuple(merge(snapshot.running, ghosts, key=lambda r: r.end_estimate))
    return replace(snapshot, running=run)


def counting_down(policy: Callable[[Snapshot, float], list[Decision]]) -> Callable[[Snapshot, float], list[Decision]]:
    """``policy`` run on :func:`with_down` snapshots (a profile-based policy that knows nothing of down nodes)."""

    def decide(snapshot: Snapshot, now: float) -> list[Decision]:
        return policy(with_down(snapshot) if snapshot.down else snapshot, now)

    decide.__name__ = getattr(policy, "__name__", "policy")
    decide.__doc__ = policy.__doc__
    return decide
