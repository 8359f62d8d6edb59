"""Where adaptation decisions come from: a scripted plan (no controller) or a controller link; host choice."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol

from malleable.runtime._layout import GroupLayout
from malleable.runtime._plan import PlanStep
from malleable.runtime._types import Pause, Resize

__all__ = ["DecisionSource", "NullSource", "PlanSource", "choose_hosts", "make_source"]


class DecisionSource(Protocol):
    """What the runtime asks for decisions and tells about adaptations.

    If ``local`` is true every rank calls :meth:`poll` and must get the same answer (a plan);
    otherwise only world rank 0 calls it and the runtime broadcasts the answer (a controller).
    The notification methods are called on world rank 0 only.
    """

    local: bool

    def poll(self, probe: int) -> Resize | None:
        """The decision due at the job's ``probe``-th probe, or None; must not block."""

    def started(self, layout: GroupLayout) -> None:
        """The job is up (after init_adapt on rank 0)."""

    def committed(self, report: Any, layout: GroupLayout) -> None:
        """An adaptation finished (``report`` is an AdaptReport); ``layout`` is the new one."""

    def refused(self, decision: Resize, reason: str) -> None:
        """A decision could not be carried out (below base, spawn failure, ...); the job goes on."""

    def progress(self, phase: str, data: dict) -> None:
        """Per-phase performance data (MTCT, iteration time) from the EPOP driver."""

    def request(self, req: Any) -> None:
        """The application asks for a new size (an ``AdaptRequest``); the answer comes from a later ``poll``."""


class NullSource:
    """No decisions, ever (ranks other than 0 under a controller)."""

    local = False

    def poll(self, probe: int) -> Resize | None:
        """Never a decision."""
        return None

    def started(self, layout: GroupLayout) -> None:
        """Nothing to tell."""

    def committed(self, report: Any, layout: GroupLayout) -> None:
        """Nothing to tell."""

    def refused(self, decision: Resize, reason: str) -> None:
        """Nothing to tell."""

    def progress(self, phase: str, data: dict) -> None:
        """Nothing to tell."""

    def request(self, req: Any) -> None:
        """Nobody to ask (a plan answers at its answer steps, see the runtime)."""


class PlanSource(NullSource):
    """Decisions from a MALLEABLE_PLAN: every rank evaluates it locally, so probing costs no communication."""

    local = True

    def __init__(self, steps: Sequence[PlanStep], start: int = 0) -> None:
        self._steps = {s.at_probe: s for s in steps if s.at_probe > start}

    def poll(self, probe: int) -> Resize | PlanStep | Pause | None:
        """The decision due at the job's ``probe``-th probe, if any; an answer step is returned as it is (the
        runtime answers the outstanding request with it)."""
        step = self._steps.get(probe)
        if step is None:
            return None
        if step.pause:
            return Pause(step.pause)
        return step if step.answer else Resize(step.procs, step.hosts)


def choose_hosts(layout: GroupLayout, job_hosts: Sequence[str], n: int) -> tuple[str, ...]:
    """Hosts for ``n`` new processes when the decision names none: the least used of the job's hosts.

    Returns an empty tuple (let the launcher place them) when the job has no host list.
    """
    if not job_hosts or n < 1:
        return ()
    load = {h: 0 for h in job_hosts}
    for g in layout.groups:
        for h in g.hosts:
            if h in load:
                load[h] += 1
    out = []
    for _ in range(n):
        h = min(job_hosts, key=lambda x: (load[x], job_hosts.index(x)))
        load[h] += 1
        out.append(h)
    return tuple(out)


def make_source(steps: tuple[PlanStep, ...], rank: int, start: int = 0) -> Any:
    """A controller link when ``MALLEABLE_CONTROLLER`` is set (on rank 0), else the plan."""
    if os.environ.get("MALLEABLE_CONTROLLER"):
        if rank != 0:
            return NullSource()
        from malleable.runtime._link import ControllerSource  # the controller part's client

        return ControllerSource.from_env()
    return PlanSource(steps, start=start)
