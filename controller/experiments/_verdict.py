"""Verdicts: does our estimate carry the published claim, and does a control carry it as well?

A published number is read as one of three rules:

* :class:`Near` ``v ± tol``: a value (``tol`` is half a unit of its last printed digit, more for values read off
  a figure or printed with "about"); it holds when our interval meets ``[v - tol, v + tol]``;
* :class:`Below` / :class:`Above` ``x``: a direction or an ordering ("shorter than", "X best", "less than basic",
  written as a difference that must have a sign); it holds when the whole interval is on that side of ``x``, so
  an interval that contains ``x`` (no significant effect) does not carry it.

The verdict (:func:`judge`): **reproduced** when the rule holds for our estimate; **confounded** when it holds
but also for a control, a run without the mechanism the claim credits (rigid jobs, alpha = 0, no scheduling
points, ...), so the number does not show that mechanism's effect; **not reproduced** otherwise. Each verdict
comes with its reason, computed from the numbers.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from ._stats import Estimate

__all__ = ["Above", "Below", "Near", "Rule", "Side", "Verdict", "judge"]


class Verdict(enum.Enum):
    """The outcome for one published number."""

    REPRODUCED = "reproduced"
    NOT_REPRODUCED = "not reproduced"
    CONFOUNDED = "confounded"
    NONE = "no published number"


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def _span(e: Estimate) -> str:
    return _fmt(e.mean) if e.n == 1 else f"[{_fmt(e.lo)}, {_fmt(e.hi)}]"


@dataclass(frozen=True, slots=True)
class Near:
    """The published value ``value``, read with tolerance ``tol``. With ``beyond`` the value is an effect (a change
    against a baseline, 0 = none): a control whose whole interval lies further from 0 than the value gets at least
    that effect, which confounds the claim as much as meeting it."""

    value: float
    tol: float
    beyond: bool = False

    def holds(self, e: Estimate) -> bool:
        return e.n > 0 and e.lo <= self.value + self.tol and e.hi >= self.value - self.tol

    def exceeded(self, e: Estimate) -> bool:
        """Whether ``e`` is an effect larger than the value (only with ``beyond``)."""
        if not self.beyond or self.value == 0 or e.n == 0:
            return False
        return e.hi < self.value - self.tol if self.value < 0 else e.lo > self.value + self.tol

    def why(self, e: Estimate) -> str:
        lo, hi = self.value - self.tol, self.value + self.tol
        if self.holds(e):
            return f"ours {_span(e)} meets {_fmt(self.value)} ± {_fmt(self.tol)}"
        side = "below" if e.hi < lo else "above"
        gap = lo - e.hi if e.hi < lo else e.lo - hi
        return f"ours {_span(e)} is {side} {_fmt(self.value)} ± {_fmt(self.tol)} by {_fmt(gap)}"

    def text(self) -> str:
        return f"{_fmt(self.value)} ± {_fmt(self.tol)}"


@dataclass(frozen=True, slots=True)
class Side:
    """The whole interval must lie below ``x`` (``below``) or above it: a published direction."""

    x: float
    below: bool

    def holds(self, e: Estimate) -> bool:
        return e.n > 0 and (e.hi < self.x if self.below else e.lo > self.x)

    def why(self, e: Estimate) -> str:
        word = "below" if self.below else "above"
        if self.holds(e):
            return f"ours {_span(e)} is {word} {_fmt(self.x)}"
        if (e.lo >= self.x) if self.below else (e.hi <= self.x):
            return f"ours {_span(e)} is not {word} {_fmt(self.x)}: the opposite direction"
        return f"ours {_span(e)} contains {_fmt(self.x)}: no significant difference"

    def text(self) -> str:
        return f"{'<' if self.below else '>'} {_fmt(self.x)}"

    def exceeded(self, e: Estimate) -> bool:  # noqa: ARG002 - a direction has no "more than"
        return False


def Below(x: float) -> Side:  # noqa: N802 - reads as a rule, like Near
    """The direction "less than ``x``"."""
    return Side(x, True)


def Above(x: float) -> Side:  # noqa: N802
    """The direction "more than ``x``"."""
    return Side(x, False)


Rule = Near | Side


def judge(rule: Rule | None, ours: Estimate, controls: list[tuple[str, Estimate]]) -> tuple[Verdict, str]:
    """The verdict for ``ours`` under ``rule`` given the controls' estimates of the same statistic, with the
    reason."""
    if rule is None:
        return Verdict.NONE, ""
    if ours.n == 0 or math.isnan(ours.mean):
        return Verdict.NOT_REPRODUCED, "no run gave this number"
    if not rule.holds(ours):
        return Verdict.NOT_REPRODUCED, rule.why(ours)
    same = [(label, e) for label, e in controls if e.n > 0 and (rule.holds(e) or rule.exceeded(e))]
    if same:
        return Verdict.CONFOUNDED, "; ".join(_confounds(rule, label, e) for label, e in same)
    return Verdict.REPRODUCED, rule.why(ours)


def _confounds(rule: Rule, label: str, e: Estimate) -> str:
    if rule.holds(e):
        return f"{label} gives it too: {rule.why(e).replace('ours ', '', 1)}"
    assert isinstance(rule, Near)
    return f"{label} gives more: {_span(e)} is beyond {_fmt(rule.value)}"
