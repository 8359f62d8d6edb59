"""Bounds on adaptations (pure): how many processes a host may run, checked before anything is spawned.

A host's limit is ``--max-procs-per-host`` (``MALLEABLE_MAX_PROCS_PER_HOST``) when given, else its slots in the
job's hostfile (``MALLEABLE_HOST_SLOTS``, ``host:slots,...``), else the number of cores. A plan, a
controller's decision or ``malleable run -n N`` that needs more is refused with the host, the count, the limit
and how to raise it with the tool in use named, before MPI is asked to start a single process (hydra would
otherwise fork until memory runs out).
Processes placed by the launcher (no host named) count against the host of the job's rank 0.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from malleable.errors import AdaptError, ConfigError, PlanError
from malleable.runtime._layout import ExpandPlan, Group, GroupLayout, plan_expand, plan_shrink
from malleable.runtime._plan import PlanStep
from malleable.runtime._record import Record

__all__ = ["Slots", "check_expand", "check_plan", "host_resolves", "initial_layout", "parse_slots", "slots_from_env"]


class Slots(Record):
    """Per-host process limits (see the module docstring for the order of precedence)."""

    __slots__ = ("cores", "per_host", "hostfile", "raise_with")
    cores: int
    per_host: int | None
    hostfile: tuple[tuple[str, int], ...]
    # how the user of the tool at hand raises a host's limit to ``n`` (``malleable run``: its option)
    raise_with: str

    def __init__(self, cores: int, per_host: int | None = None, hostfile: tuple[tuple[str, int], ...] = (),
                 raise_with: str = "MALLEABLE_MAX_PROCS_PER_HOST={n}") -> None:
        self._init(cores=cores, per_host=per_host, hostfile=hostfile, raise_with=raise_with)

    def limit(self, host: str) -> int:
        """Processes ``host`` may run."""
        if self.per_host is not None:
            return self.per_host
        return dict(self.hostfile).get(host, self.cores)

    def why(self, host: str) -> str:
        """Where the limit of ``host`` comes from (for error messages)."""
        if self.per_host is not None:
            return self.raise_with.format(n=self.per_host)
        return "hostfile slots" if host in dict(self.hostfile) else "cores"


def parse_slots(text: str) -> tuple[tuple[str, int], ...]:
    """``host:slots,host:slots`` → pairs (the form of ``MALLEABLE_HOST_SLOTS``).

    Raises:
        ConfigError: a malformed entry.
    """
    out = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        host, _, n = item.rpartition(":")
        if not host or not n.isdigit() or int(n) < 1:
            raise ConfigError(f"MALLEABLE_HOST_SLOTS: bad entry {item!r} (want host:slots)")
        out.append((host, int(n)))
    return tuple(out)


def slots_from_env(environ: dict[str, str] | None = None) -> Slots:
    """The limits of this job from its environment (cores of this host as the default).

    Raises:
        ConfigError: a malformed variable.
    """
    env = os.environ if environ is None else environ
    raw = env.get("MALLEABLE_MAX_PROCS_PER_HOST", "")
    if raw and (not raw.isdigit() or int(raw) < 1):
        raise ConfigError(f"MALLEABLE_MAX_PROCS_PER_HOST must be a positive integer, got {raw!r}")
    return Slots(os.cpu_count() or 1, int(raw) if raw else None, parse_slots(env.get("MALLEABLE_HOST_SLOTS", "")))


def _load(layout: GroupLayout) -> dict[str, int]:
    load: dict[str, int] = {}
    for g in layout.groups:
        for h in g.hosts:
            load[h] = load.get(h, 0) + 1
    return load


def check_expand(layout: GroupLayout, plan: ExpandPlan, slots: Slots, local_host: str, remote: str = "",
                 grow: str = "") -> None:
    """Refuse ``plan`` if a host would run more processes than its limit (idle leavers count: they still run).

    ``remote``, if not empty, says why this MPI cannot spawn onto another host than ``local_host``; such an MPI
    does not grow a job whose processes already span several hosts either (its launcher's daemons on the other
    hosts take part in every spawn, and Open MPI's crash there: see docs/runtime.md). ``grow``, if not empty, says
    why this job cannot grow at all.

    Raises:
        AdaptError: the first host over its limit, with the numbers, or a remote host this MPI cannot reach.
    """
    if grow:
        raise AdaptError(f"cannot grow the job: {grow}")
    load = _load(layout)
    if remote and len(load) > 1:
        raise AdaptError(f"cannot grow a job whose processes span {len(load)} hosts ({', '.join(load)}): {remote}")
    for host, n in zip(plan.hosts, plan.counts, strict=True):
        h = host or local_host
        if remote and h != local_host:
            raise AdaptError(f"cannot spawn onto {h}: {remote}")
        load[h] = load.get(h, 0) + n
        if load[h] > slots.limit(h):
            raise AdaptError(
                f"expanding to {layout.world_size + plan.joining} process(es) needs {load[h]} on host {h}, "
                f"which may run {slots.limit(h)} ({slots.why(h)}); to allow it: {slots.raise_with.format(n=load[h])}")


def check_plan(
    steps: Sequence[PlanStep],
    layout: GroupLayout,
    slots: Slots,
    local_host: str,
    choose: Callable[[GroupLayout, int], tuple[str, ...]],
    remote: str = "",
    grow: str = "",
) -> None:
    """Walk a plan from ``layout`` and refuse it if any step needs more processes than the hosts allow.

    Args:
        steps: the plan.
        layout: the job when the plan starts (hosts of every process).
        slots: the limits.
        local_host: the host of rank 0 (where unplaced processes go).
        choose: ``choose(layout, n)`` -> hosts for ``n`` new processes when a step names none.
        remote: why this MPI cannot spawn onto another host than ``local_host`` ('' if it can).
        grow: why this job cannot grow at all ('' if it can).

    Raises:
        PlanError: naming the step, the host and the limit.
    """
    for i, s in enumerate(steps, 1):
        if s.answer or s.pause:
            continue
        size = layout.world_size
        try:
            if s.procs > size:
                plan = plan_expand(layout, s.procs, s.hosts or choose(layout, s.procs - size))
                check_expand(layout, plan, slots, local_host, remote, grow)
                layout = _grown(layout, plan, local_host)
            elif s.procs < size:
                layout = plan_shrink(layout, s.procs).after
        except AdaptError as e:
            raise PlanError(f"MALLEABLE_PLAN step {i} (at_probe {s.at_probe}): {e}") from None


def host_resolves(host: str) -> bool:
    """Whether ``host`` is a name this machine can resolve (a plan naming anything else is refused)."""
    import socket

    try:
        socket.getaddrinfo(host, None)
    except OSError:
        return False
    return True


def initial_layout(base: GroupLayout, initial: int, hosts: Sequence[str], local_host: str) -> GroupLayout:
    """The layout once ``malleable run``'s anchor has spawned up to ``initial`` processes round robin over ``hosts``."""
    n = base.world_size
    if initial <= n:
        return base
    chosen = [hosts[i % len(hosts)] for i in range(n, initial)] if hosts else []
    return _grown(base, plan_expand(base, initial, chosen), local_host)


def _grown(layout: GroupLayout, plan: ExpandPlan, local_host: str) -> GroupLayout:
    new = tuple(Group(plan.first_gid + k, (h or local_host,) * c, c)
                for k, (h, c) in enumerate(zip(plan.hosts, plan.counts, strict=True)))
    return GroupLayout(layout.groups + new)
