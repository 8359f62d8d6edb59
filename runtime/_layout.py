"""Adaptation bookkeeping (pure): which process groups form the job, who leaves, which hosts get free.

A job is a sequence of process *groups* in rank order. The base group holds the processes the
launcher started; each expansion adds one group per target host (one MPI spawn each). The world's
ranks are the groups' *active* members in group order, so a shrink, which cuts the highest ranks,
always releases the most recently spawned groups first. A shrink may cut a group in two: its
leaving members leave the world at once but, sharing an MPI_COMM_WORLD with the members that stay,
their processes can only exit when the whole group leaves. Until then they wait idle, and their
host is not free.
"""

from __future__ import annotations

from collections.abc import Sequence

from malleable.errors import AdaptError
from malleable.runtime._record import Record

__all__ = ["ExpandPlan", "Group", "GroupLayout", "ShrinkPlan", "plan_expand", "plan_shrink", "split_hosts", "spread"]


class Group(Record):
    """One spawn (or the launcher's processes): ``hosts[i]`` is where member i runs."""

    __slots__ = ("gid", "hosts", "active", "base")
    gid: int
    hosts: tuple[str, ...]
    active: int
    base: bool

    def __init__(self, gid: int, hosts: tuple[str, ...], active: int, base: bool = False) -> None:
        self._init(gid=gid, hosts=hosts, active=active, base=base)

    @property
    def size(self) -> int:
        """Processes the group started with (all alive while ``active`` > 0)."""
        return len(self.hosts)


class GroupLayout(Record):
    """The job's groups in rank order. Invariant: every group has ``active`` >= 1 (0 means gone)."""

    __slots__ = ("groups",)
    groups: tuple[Group, ...]

    def __init__(self, groups: tuple[Group, ...]) -> None:
        self._init(groups=groups)

    @property
    def world_size(self) -> int:
        """Processes in the current world."""
        return sum(g.active for g in self.groups)

    @property
    def base_size(self) -> int:
        """Launcher-started processes (they never leave)."""
        return sum(g.size for g in self.groups if g.base)

    @property
    def next_gid(self) -> int:
        """Id for the next spawned group."""
        return max((g.gid for g in self.groups), default=-1) + 1

    def hosts_in_use(self) -> set[str]:
        """Hosts with at least one live process of the job (idle leavers included)."""
        return {h for g in self.groups for h in g.hosts}

    def idle(self) -> int:
        """Processes that have left the world but wait for their group to leave."""
        return sum(g.size - g.active for g in self.groups)

    def group_of_rank(self, rank: int) -> tuple[Group, int]:
        """The group of world rank ``rank`` and the member index inside it."""
        for g in self.groups:
            if rank < g.active:
                return g, rank
            rank -= g.active
        raise IndexError(f"rank {rank} is not in a world of {self.world_size}")

    def to_json(self) -> list[dict]:
        """JSON form (sent to joiners)."""
        return [{"gid": g.gid, "hosts": list(g.hosts), "active": g.active, "base": g.base} for g in self.groups]

    @classmethod
    def from_json(cls, data: Sequence[dict]) -> GroupLayout:
        """Inverse of :meth:`to_json`."""
        return cls(tuple(Group(d["gid"], tuple(d["hosts"]), d["active"], d["base"]) for d in data))


class ExpandPlan(Record):
    """Spawn ``counts[i]`` processes on ``hosts[i]`` (None: let the launcher place them), one group each."""

    __slots__ = ("hosts", "counts", "first_gid")
    hosts: tuple[str | None, ...]
    counts: tuple[int, ...]
    first_gid: int

    def __init__(self, hosts: tuple[str | None, ...], counts: tuple[int, ...], first_gid: int) -> None:
        self._init(hosts=hosts, counts=counts, first_gid=first_gid)

    @property
    def joining(self) -> int:
        """New processes in all."""
        return sum(self.counts)


class ShrinkPlan(Record):
    """Ranks >= ``target`` leave; ``gone`` groups exit now, ``split`` ones keep idle members."""

    __slots__ = ("target", "leaving", "gone", "split", "freed_hosts", "after")
    target: int
    leaving: int
    gone: tuple[int, ...]
    split: tuple[int, ...]
    freed_hosts: tuple[str, ...]
    after: GroupLayout

    def __init__(self, target: int, leaving: int, gone: tuple[int, ...], split: tuple[int, ...],
                 freed_hosts: tuple[str, ...], after: GroupLayout) -> None:
        self._init(target=target, leaving=leaving, gone=gone, split=split, freed_hosts=freed_hosts, after=after)


def spread(n: int, hosts: Sequence[str]) -> list[tuple[str | None, int]]:
    """Place ``n`` new processes round robin over ``hosts`` (first-seen order), as (host, count) groups."""
    if n < 1:
        raise ValueError(f"cannot spread {n} processes")
    if not hosts:
        return [(None, n)]
    counts: dict[str, int] = {}
    for i in range(n):
        h = hosts[i % len(hosts)]
        counts[h] = counts.get(h, 0) + 1
    return list(counts.items())


def plan_expand(layout: GroupLayout, target: int, hosts: Sequence[str] = ()) -> ExpandPlan:
    """Groups to spawn to grow ``layout`` to ``target`` processes.

    Raises:
        AdaptError: ``target`` is not larger than the current world.
    """
    n = layout.world_size
    if target <= n:
        raise AdaptError(f"expand to {target} process(es) from {n}: not an expansion")
    groups = spread(target - n, hosts)
    return ExpandPlan(tuple(h for h, _ in groups), tuple(c for _, c in groups), layout.next_gid)


def apply_expand(layout: GroupLayout, plan: ExpandPlan, member_hosts: Sequence[Sequence[str]]) -> GroupLayout:
    """The layout after ``plan`` succeeded; ``member_hosts[i]`` are the real hosts of group i's members."""
    new = tuple(Group(plan.first_gid + i, tuple(hs), len(hs)) for i, hs in enumerate(member_hosts))
    return GroupLayout(layout.groups + new)


def split_hosts(hosts: Sequence[str], counts: Sequence[int]) -> list[list[str]]:
    """The hosts of each new group's members, from every joiner's host in rank order and the groups' sizes."""
    out, at = [], 0
    for c in counts:
        out.append([str(h) for h in hosts[at:at + c]])
        at += c
    return out


def plan_shrink(layout: GroupLayout, target: int) -> ShrinkPlan:
    """Who leaves when ``layout`` shrinks to ``target`` processes, and which hosts get free.

    Raises:
        AdaptError: ``target`` < 1, not a shrink, or below the base (launcher-started processes).
    """
    n = layout.world_size
    if target >= n:
        raise AdaptError(f"shrink to {target} process(es) from {n}: not a shrink")
    if target < max(1, layout.base_size):
        raise AdaptError(
            f"cannot shrink to {target} process(es): the job's {layout.base_size} launcher-started "
            f"process(es) cannot leave (start it with 'malleable run' so that they are spawned)"
        )
    kept: list[Group] = []
    gone: list[int] = []
    split: list[int] = []
    room = target
    for g in layout.groups:
        if room >= g.active:
            kept.append(g)
            room -= g.active
        elif room > 0:
            kept.append(g.replace(active=room))
            split.append(g.gid)
            room = 0
        else:
            gone.append(g.gid)
    after = GroupLayout(tuple(kept))
    still = after.hosts_in_use()
    freed = sorted({h for g in layout.groups if g.gid in gone for h in g.hosts} - still)
    return ShrinkPlan(target, n - target, tuple(gone), tuple(split), tuple(freed), after)
