"""What an experiment is: the runs it needs, how one run is simulated, and the claims it checks.

An :class:`Experiment` is data plus three functions. ``plan(seeds, quick)`` lists its :class:`Run` records (one
simulation each: a case, a variant such as a policy or a control, a seed); ``simulate(run)`` performs one and
returns its metrics; ``claims(quick)`` lists the :class:`Claim` rows of its table. A claim computes one number per
seed from the finished runs (:class:`Runs`), so the table's estimates, intervals and verdicts are computed from the
runs table and nothing else. Runs are plain records so that they travel to worker processes and Dask workers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ._verdict import Rule

__all__ = ["Claim", "Control", "Deviation", "Experiment", "Run", "Runs", "Stat", "change", "value"]


@dataclass(frozen=True, slots=True)
class Run:
    """One simulation of an experiment.

    Attributes:
        exp: the experiment's name.
        case: the scenario (workload and set-up), as named in the table.
        variant: the policy or control run on it.
        seed: the draw of everything random in the case.
        quick: the quick set-up (a run of it never stands for a full one).
        params: what ``simulate`` needs to rebuild the case and the variant (JSON values).
        detail: also return a run record for the report (Gantt chart, curves, distributions).
        cost: a guess of its duration, to start long runs first.
    """

    exp: str
    case: str
    variant: str
    seed: int
    quick: bool = False
    params: dict[str, Any] = field(default_factory=dict)
    detail: bool = False
    cost: float = 1.0

    @property
    def key(self) -> str:
        """The run's identity in a runs table."""
        return json.dumps([self.exp, self.case, self.variant, self.seed, "quick" if self.quick else "full"],
                          separators=(",", ":"))

    def task(self) -> dict[str, Any]:
        """The run as a sweep task (a dict with its ``key``)."""
        return {"key": self.key, "exp": self.exp, "case": self.case, "variant": self.variant, "seed": self.seed,
                "quick": self.quick, "params": self.params, "detail": self.detail, "cost": self.cost}

    @staticmethod
    def from_task(t: dict[str, Any]) -> Run:
        return Run(t["exp"], t["case"], t["variant"], int(t["seed"]), bool(t["quick"]), dict(t.get("params") or {}),
                   bool(t.get("detail")), float(t.get("cost", 1.0)))


class Runs:
    """The finished runs of one experiment, by ``(case, variant, seed)``."""

    def __init__(self, rows: Iterable[dict[str, Any]]) -> None:
        self.metrics: dict[tuple[str, str, int], dict[str, Any]] = {}
        self.records: dict[tuple[str, str], dict[str, Any]] = {}
        for r in rows:
            self.metrics[(r["case"], r["variant"], int(r["seed"]))] = r["metrics"]
            if r.get("record"):
                self.records[(r["case"], r["variant"])] = r["record"]
        self.seeds = sorted({k[2] for k in self.metrics})

    def __call__(self, case: str, variant: str, seed: int, metric: str) -> float:
        """One metric of one run (KeyError when the run or the metric is missing)."""
        return float(self.metrics[(case, variant, seed)][metric])

    def has(self, case: str, variant: str) -> bool:
        return any((case, variant, s) in self.metrics for s in self.seeds)


Stat = Callable[[Runs, int], float]
"""A per-seed statistic: the number a claim (or a control) gives for one seed."""


def value(case: str, variant: str, metric: str, scale: float = 1.0) -> Stat:
    """``metric`` of ``variant`` on ``case``, times ``scale``."""
    return lambda runs, s: scale * runs(case, variant, s, metric)


def change(case: str, variant: str, base: str, metric: str, base_case: str | None = None) -> Stat:
    """The change of ``metric`` from ``base`` to ``variant`` on the same draw, in percent of ``base``'s."""
    def stat(runs: Runs, s: int) -> float:
        old = runs(base_case or case, base, s, metric)
        return 100.0 * (runs(case, variant, s, metric) - old) / old
    return stat


@dataclass(frozen=True, slots=True)
class Control:
    """The same statistic for a run without the mechanism the claim credits."""

    label: str
    stat: Stat


@dataclass(frozen=True, slots=True)
class Claim:
    """One row of an experiment's table: a published number (or a context row without one) and ours.

    Attributes:
        scenario, metric: what the row is about.
        published: the number as the document prints it.
        rule: how it is read (:mod:`._verdict`), or None for a row without a published number.
        stat: our number for one seed.
        unit: printed after our numbers.
        digits: decimals printed.
        controls: the same statistic without the credited mechanism.
        note: what the reader should know about this row.
        floor: the least value the statistic can take (0 for a time or an absolute difference), where its interval
            is cut; None when it can take any value.
    """

    scenario: str
    metric: str
    published: str
    rule: Rule | None
    stat: Stat
    unit: str = ""
    digits: int = 1
    controls: tuple[Control, ...] = ()
    note: str = ""
    floor: float | None = None


@dataclass(frozen=True, slots=True)
class Deviation:
    """A place where our set-up differs from the document's: what it says, what we do, why."""

    topic: str
    paper: str
    ours: str
    why: str


@dataclass(frozen=True, slots=True)
class Experiment:
    """A source document's experiment (module docstring)."""

    name: str
    title: str
    random: str
    assumptions: tuple[str, ...]
    deviations: tuple[Deviation, ...]
    plan: Callable[[int, bool], list[Run]]
    simulate: Callable[[Run], dict[str, Any]]
    claims: Callable[[bool], list[Claim]]
