"""Event-driven simulator of seed 001's machine model (ICS 2020, §4 and §6.2): packs run one after another
on each I/O node; within a pack every application starts at once on its own compute nodes, and the I/O node
serves one I/O phase at a time, to completion (exclusive, non-preemptive), in the chosen priority order.

The paper's simulator is time-stepped with an unstated step (§6.2.1); this one jumps from event to event, so
it is exact for the model. Pure code: no clock, no I/O.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from malleable.errors import ConfigError

from ._iomap import PRIORITIES, Pack, Priority, Request, lpt

__all__ = ["IoSpan", "PackRun", "Schedule", "simulate", "simulate_pack"]


@dataclass(frozen=True, slots=True)
class IoSpan:
    """One I/O phase as served: application ``app``'s iteration ``iteration`` held the I/O node from ``start``
    to ``end`` (it asked at ``request``)."""

    app: int
    iteration: int
    request: float
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class PackRun:
    """One pack simulated from ``start``: when each member ended and its stretch, and the node-time split of
    Fig. 14 over the pack's duration on the ``p`` compute nodes of its I/O node.

    Attributes:
        completion: end time per application id.
        stretch: ``(C_i - release) / T_i(b)`` per application id (see :func:`simulate_pack`).
        exec_time, delay_time, idle_time: node-seconds computing or transferring, waiting for the I/O node,
            and idle (nodes no member holds, or members that ended before the pack), summing to
            ``p (end - start)``.
        ideal: ``T^Pack``, the pack's length with unbounded global I/O bandwidth (per-application bandwidth
            still ``b``).
        io: the served I/O phases in grant order (empty unless recorded).
    """

    start: float
    end: float
    completion: dict[int, float]
    stretch: dict[int, float]
    exec_time: float
    delay_time: float
    idle_time: float
    ideal: float
    io: tuple[IoSpan, ...] = ()

    def max_stretch(self) -> float:
        """The pack's worst stretch (footnote 4 averages it over packs)."""
        return max(self.stretch.values(), default=1.0)


def _priority(policy: str | Priority) -> Priority:
    if isinstance(policy, Priority):
        return policy
    try:
        return PRIORITIES[policy]
    except KeyError:
        raise ConfigError(f"unknown I/O priority order {policy!r}; known: {', '.join(PRIORITIES)}") from None


def simulate_pack(pack: Pack, policy: str | Priority = "fifo", b: float = 1.0, p: int | None = None,
                  start: float = 0.0, release: str = "pack", record: bool = False) -> PackRun:
    """Simulate one pack from ``start`` until its last member ends.

    Every member starts its first compute phase at ``start``; a finished compute phase asks for the I/O
    node; when the I/O node is free it serves the pending request with the smallest priority key for
    ``volume / b`` seconds. Events at the same instant are all applied before the I/O node picks, so requests
    made at the moment a transfer ends compete for the next grant.

    ``release`` is the time stretches count from: ``"pack"`` (default) the pack's start, as the paper's
    stretch is "a local metric of each individual pack" (§6.2.4) under an offline workload; ``"zero"``
    time 0 (every application submitted at time 0, waiting for earlier packs counts).

    ``p`` (compute nodes of the I/O node; default the pack's own width) only scales idle time.

    Raises:
        ConfigError: unknown policy or ``release``, ``b <= 0``, or a pack wider than ``p``.
    """
    prio = _priority(policy)
    if not (b > 0 and math.isfinite(b)):
        raise ConfigError(f"I/O bandwidth b must be finite and > 0, got {b}")
    if release not in ("pack", "zero"):
        raise ConfigError(f"release must be 'pack' or 'zero', got {release!r}")
    width = pack.nodes()
    p = width if p is None else p
    if width > p:
        raise ConfigError(f"pack of {width} compute nodes does not fit P = {p}")
    rel = start if release == "pack" else 0.0
    apps = {a.id: a for a in pack.apps}
    if len(apps) != len(pack.apps):
        raise ConfigError("application ids within a pack must be unique")
    seq = 0
    events: list[tuple[float, int, int]] = []  # (time, seq, app id): compute phase ends
    for a in pack.apps:
        events.append((start + a.compute, seq, a.id))
        seq += 1
    heapq.heapify(events)
    done = dict.fromkeys(apps, 0)  # iterations whose I/O has been served
    pending: list[tuple[float, float, int, Request]] = []  # (key, request time, app id, request)
    busy: tuple[float, Request, float] | None = None  # (end, request, grant time)
    completion: dict[int, float] = {}
    spans: list[IoSpan] = []
    while events or pending or busy is not None:
        t = min(events[0][0] if events else math.inf, busy[0] if busy is not None else math.inf)
        if busy is not None and busy[0] <= t:
            _, req, _ = busy
            busy = None
            a = req.app
            done[a.id] += 1
            if done[a.id] == a.iterations:
                completion[a.id] = t
            else:
                heapq.heappush(events, (t + a.compute, seq, a.id))
                seq += 1
        while events and events[0][0] <= t:
            _, _, i = heapq.heappop(events)
            req = Request(apps[i], done[i], t, rel)
            key = prio.key(req, t, b)
            if prio.dynamic:
                pending.append((key, t, i, req))
            else:
                heapq.heappush(pending, (key, t, i, req))
        if busy is None and pending:
            if prio.dynamic:
                k = min(range(len(pending)), key=lambda k: (prio.key(pending[k][3], t, b), pending[k][1],
                                                             pending[k][2]))
                req = pending.pop(k)[3]
            else:
                req = heapq.heappop(pending)[3]
            busy = (t + req.app.io_time(b), req, t)
            if record:
                spans.append(IoSpan(req.app.id, req.iteration, req.time, t, busy[0]))
    end = max(completion.values(), default=start)
    length = {i: a.length(b) for i, a in apps.items()}
    stretch = {i: (completion[i] - rel) / length[i] for i in apps}
    exec_time = sum(a.nodes * length[a.id] for a in pack.apps)
    held = sum(a.nodes * (completion[a.id] - start) for a in pack.apps)
    return PackRun(start, end, completion, stretch, exec_time, held - exec_time, p * (end - start) - held,
                   pack.length(b), tuple(spans))


@dataclass(frozen=True, slots=True)
class Schedule:
    """A whole workload simulated: ``nodes[k]`` lists the indices (into ``runs``) of the packs I/O node ``k``
    ran, in order; the makespan is the latest pack end."""

    runs: tuple[PackRun, ...]
    nodes: tuple[tuple[int, ...], ...]

    @property
    def makespan(self) -> float:
        """``C_max`` (Eq. 3), everything released at time 0."""
        return max((r.end for r in self.runs), default=0.0)

    def stretch(self) -> dict[int, float]:
        """Stretch per application id."""
        return {i: s for r in self.runs for i, s in r.stretch.items()}

    def mean_pack_max_stretch(self) -> float:
        """The stretch of §6.2.3 (footnote 4): the mean over packs of each pack's worst stretch."""
        return sum(r.max_stretch() for r in self.runs) / len(self.runs) if self.runs else 1.0

    def robustness(self) -> float:
        """Measured over ideal time (Fig. 13): the makespan over the one with every pack lasting ``T^Pack``
        under the same pack-to-node assignment."""
        ideal = max((sum(self.runs[i].ideal for i in nk) for nk in self.nodes), default=0.0)
        return self.makespan / ideal if ideal > 0 else 1.0

    def time_split(self) -> tuple[float, float, float]:
        """Node-seconds ``(exec, delay, idle)`` summed over the packs (Fig. 14; idle between the last pack of
        an I/O node and the makespan is not counted)."""
        return (sum(r.exec_time for r in self.runs), sum(r.delay_time for r in self.runs),
                sum(r.idle_time for r in self.runs))


def simulate(packs: Sequence[Pack], r: int = 1, policy: str | Priority = "fifo", b: float = 1.0,
             p: int | None = None, nodes: Sequence[Sequence[int]] | None = None, release: str = "pack",
             record: bool = False) -> Schedule:
    """Run ``packs`` on ``r`` I/O nodes: each node runs its packs back to back from time 0, in order. The
    assignment is ``nodes`` (indices into ``packs`` per I/O node) or, by default, :func:`lpt` (§6.2.4).

    Raises:
        ConfigError: as :func:`simulate_pack`, ``r < 1``, or an assignment that does not use every pack
            exactly once on ``r`` nodes.
    """
    assign = lpt(packs, r, b) if nodes is None else tuple(tuple(x) for x in nodes)
    if len(assign) != r or sorted(i for nk in assign for i in nk) != list(range(len(packs))):
        raise ConfigError(f"the assignment must place each of the {len(packs)} packs exactly once on {r} nodes")
    runs: list[PackRun | None] = [None] * len(packs)
    for nk in assign:
        t = 0.0
        for i in nk:
            run = simulate_pack(packs[i], policy, b, p, t, release, record)
            runs[i] = run
            t = run.end
    return Schedule(tuple(x for x in runs if x is not None), assign)
