"""MALLEABLE_PLAN: a scripted sequence of size changes for runs without a controller (pure code)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from malleable.errors import PlanError
from malleable.runtime._record import Record

__all__ = ["ANSWERS", "PlanStep", "parse_plan", "validate_plan"]


class PlanStep(Record):
    """At the job's ``at_probe``-th call of probe_adapt (counted from 1), go to ``procs`` processes; or, for an
    ``answer`` step, answer the job's outstanding ``request_adapt`` (``grant``, ``refuse`` or ``defer``); or, for a
    ``pause`` step, stop the job this many seconds at the probe, then resume."""

    __slots__ = ("at_probe", "procs", "hosts", "answer", "pause")
    at_probe: int
    procs: int
    hosts: tuple[str, ...]
    answer: str
    pause: float

    def __init__(self, at_probe: int, procs: int = 0, hosts: tuple[str, ...] = (), answer: str = "",
                 pause: float = 0.0) -> None:
        self._init(at_probe=at_probe, procs=procs, hosts=hosts, answer=answer, pause=pause)


_KEYS = {"at_probe", "procs", "hosts", "answer", "pause"}
ANSWERS = ("grant", "refuse", "defer")


def parse_plan(text: str | None) -> tuple[PlanStep, ...]:
    """Parse the JSON text of a plan (``None`` or empty: no plan).

    Raises:
        PlanError: not JSON, not a list of objects, unknown keys, bad types, probes not increasing.
    """
    if text is None or not text.strip():
        return ()
    import json

    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise PlanError(f"MALLEABLE_PLAN is not valid JSON: {e}") from None
    if not isinstance(raw, list):
        raise PlanError(f"MALLEABLE_PLAN must be a JSON list of steps, got {type(raw).__name__}")
    steps = []
    for i, item in enumerate(raw, 1):
        steps.append(_step(i, item))
    for i in range(1, len(steps)):
        if steps[i].at_probe <= steps[i - 1].at_probe:
            raise PlanError(
                f"MALLEABLE_PLAN step {i + 1}: at_probe {steps[i].at_probe} must be greater than "
                f"the previous step's {steps[i - 1].at_probe}"
            )
    return tuple(steps)


def _step(i: int, item: Any) -> PlanStep:
    where = f"MALLEABLE_PLAN step {i}"
    if not isinstance(item, dict):
        raise PlanError(f"{where} must be an object like {{\"at_probe\": 3, \"procs\": 4}}, got {item!r}")
    unknown = set(item) - _KEYS
    if unknown:
        raise PlanError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: at_probe, procs, hosts, answer, pause")
    if "pause" in item:
        sec = item["pause"]
        if set(item) != {"at_probe", "pause"} or type(sec) not in (int, float) or not 0 < sec <= 86400:
            raise PlanError(f"{where}: a pause step is {{\"at_probe\": K, \"pause\": SECONDS}} (0 < SECONDS <= 86400), "
                            f"got {item!r}")
        at = item["at_probe"]
        if type(at) is not int or at < 1:
            raise PlanError(f"{where}: 'at_probe' must be an integer >= 1, got {at!r}")
        return PlanStep(at, pause=float(sec))
    if "answer" in item:
        if set(item) != {"at_probe", "answer"} or item["answer"] not in ANSWERS:
            raise PlanError(f"{where}: an answer step is {{\"at_probe\": K, \"answer\": \"grant\" | \"refuse\" | "
                            f"\"defer\"}}, got {item!r}")
        at = item["at_probe"]
        if type(at) is not int or at < 1:
            raise PlanError(f"{where}: 'at_probe' must be an integer >= 1, got {at!r}")
        return PlanStep(at, answer=item["answer"])
    for key in ("at_probe", "procs"):
        if key not in item:
            raise PlanError(f"{where}: missing {key!r}")
        val = item[key]
        if type(val) is not int or val < 1:
            raise PlanError(f"{where}: {key!r} must be an integer >= 1, got {val!r}")
    hosts = item.get("hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) and h.strip() for h in hosts):
        raise PlanError(f"{where}: 'hosts' must be a list of host names, got {hosts!r}")
    return PlanStep(item["at_probe"], item["procs"], tuple(h.strip() for h in hosts))


def validate_plan(
    steps: Sequence[PlanStep],
    initial: int,
    base: int,
    host_ok: Callable[[str], bool] | None = None,
) -> None:
    """Check a parsed plan against the job: sizes reachable, never below the base, known hosts.

    Args:
        steps: the plan.
        initial: the job's size when the plan starts.
        base: processes started by the launcher, which cannot leave.
        host_ok: predicate telling whether a host name is usable (e.g. resolves); None skips it.

    Raises:
        PlanError: a step would go below the base, keep the same size, or names an unknown host.
    """
    size = initial
    for i, s in enumerate(steps, 1):
        if s.answer or s.pause:
            continue
        where = f"MALLEABLE_PLAN step {i} (at_probe {s.at_probe})"
        if s.procs < base:
            raise PlanError(
                f"{where}: {s.procs} process(es) is below the job's base of {base} launcher-started "
                f"process(es), which cannot leave (start with 'malleable run' to make them spawned)"
            )
        if s.procs == size:
            raise PlanError(f"{where}: the job already has {size} process(es) at that point")
        if host_ok is not None:
            for h in s.hosts:
                if not host_ok(h):
                    raise PlanError(f"{where}: unknown host {h!r}")
        size = s.procs
