"""Where adaptation decisions come from: a scripted plan (no controller) — and host choice (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from malleable.runtime._layout import Layout
from malleable.runtime._plan import PlanStep
from malleable.runtime._types import Decision

__all__ = ["PlanSource", "choose_hosts"]


class PlanSource:
    """Decisions from a MALLEABLE_PLAN: every rank evaluates it locally, so probing costs no communication."""

    collective = False

    def __init__(self, steps: Sequence[PlanStep], start: int = 0) -> None:
        self._steps = {s.at_probe: s for s in steps if s.at_probe > start}

    def poll(self, probe: int) -> Decision | None:
        """The decision due at the job's ``probe``-th probe, if any."""
        step = self._steps.get(probe)
        return None if step is None else Decision(step.procs, step.hosts)


def choose_hosts(layout: Layout, job_hosts: Sequence[str], n: int) -> tuple[str, ...]:
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
