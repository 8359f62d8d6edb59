"""The parents' side of an expansion, up to the merge: synchronous, or prepared in a thread while the job computes.

``prepare`` spawns the groups, sends them their context, waits for their liveness reports and for every joiner to
be ready, so that only the merge is left; ``Background`` runs it on a duplicate of the world in a thread (MaM's
threaded spawn, Invasive MPI's latency hiding), and the runtime merges at the first probe at which every rank's
thread is done. ``finish`` merges and returns the new world.
"""

from __future__ import annotations

import functools
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from malleable.errors import AdaptError
from malleable.runtime import _spawn
from malleable.runtime._layout import ExpandPlan, GroupLayout, apply_expand, plan_expand
from malleable.runtime._sources import choose_hosts
from malleable.runtime._types import Resize

__all__ = ["Background", "Prepared", "finish", "gather_members", "prepare"]


@dataclass
class Prepared:
    """Spawned, informed and ready groups waiting for the merge."""

    decision: Resize
    kind: str
    plan: ExpandPlan
    inters: list[Any]
    gids: list[int]
    n_old: int
    t0: float
    overlap: bool = False
    seconds: float = 0.0   # time the preparation took


def prepare(rt: Any, world: Any, d: Resize, kind: str, overlap: bool = False) -> Prepared:
    """Spawn and make ready the processes of decision ``d``; collective over ``world`` (the job's world or a dup).

    Raises:
        AdaptError: on every rank of ``world`` when a group could not be started or is not ready in time.
    """
    t0 = time.perf_counter()
    hosts = d.hosts or choose_hosts(rt.layout, rt.job_hosts, d.procs - rt.layout.world_size)
    plan = plan_expand(rt.layout, d.procs, hosts)
    if world.rank == 0 and rt.listener is None:
        raise AdaptError("internal: rank 0 has no liveness listener")
    inters = _spawn.parent_spawn(world, plan, rt.timeout, rt.leftovers)
    gids = [plan.first_gid + i for i in range(len(inters))]
    base_ctx = {
        "kind": kind, "n_old": world.size, "n_groups": len(inters), "gids": gids, "layout": rt.layout.to_json(),
        "probes": rt.probes, "plan": rt.plan_text, "timeout": rt.timeout, "job_hosts": list(rt.job_hosts),
        "liveness": rt.listener.endpoint() if rt.listener else None, "decision": [d.procs, list(d.hosts)],
        "local_source": bool(getattr(rt.source, "local", True)),
        "slots": [rt.slots.cores, rt.slots.per_host, [list(x) for x in rt.slots.hostfile]],
        "stale": rt.leftovers.stale, "overlap": overlap, "job_overlap": rt.overlap,
    }
    _spawn.parent_send_context(world, inters, [dict(base_ctx, index=i) for i in range(len(inters))])
    accept = None
    if world.rank == 0:
        expected = [(g, m) for g, c in zip(gids, plan.counts, strict=True) for m in range(c)]
        accept = functools.partial(rt.listener.accept, expected)
    try:
        _spawn.parent_ready(world, inters, rt.timeout, rt.leftovers, first=accept, go=not overlap)
    except AdaptError:
        if rt.listener is not None:
            rt.listener.forget(gids)
        raise
    return Prepared(d, kind, plan, inters, gids, world.size, t0, overlap, time.perf_counter() - t0)


def gather_members(merged: Any, n_old: int, my_index: int, n_groups: int) -> list[list[str]]:
    """Hosts of each new group's members, in rank order (one allgather over the merged world)."""
    rows = merged.allgather((my_index, socket.gethostname()))[n_old:]
    out: list[list[str]] = [[] for _ in range(n_groups)]
    for index, host in rows:
        out[index].append(host)
    return out


def finish(world: Any, layout: GroupLayout, p: Prepared, probes: int) -> tuple[_spawn.Merged, GroupLayout]:
    """Merge the prepared groups into ``world``; returns the merged communicators and the layout after it.

    The joiners learn the job's probe count here (it moved on while an overlapped expansion was prepared).
    """
    if p.overlap:
        _spawn.parent_go(world, p.inters, True)
    merged = _spawn.parent_merge(world, p.inters)
    for inter in p.inters:
        inter.Disconnect()
    merged.world.bcast(probes, root=0)
    member_hosts = gather_members(merged.world, p.n_old, -1, len(p.inters))
    return merged, apply_expand(layout, p.plan, member_hosts)


@dataclass
class Background:
    """An expansion prepared in a thread on ``world`` (a duplicate of the job's world, owned here)."""

    decision: Resize
    world: Any
    result: Prepared | None = None
    error: AdaptError | None = None
    thread: threading.Thread = field(init=False)

    def start(self, rt: Any) -> Background:
        """Start preparing; returns self."""
        self.thread = threading.Thread(target=self._run, args=(rt,), name="malleable-expand", daemon=True)
        self.thread.start()
        return self

    def _run(self, rt: Any) -> None:
        try:
            self.result = prepare(rt, self.world, self.decision, "expand", overlap=True)
        except AdaptError as e:
            self.error = e

    def done(self) -> bool:
        """Whether this rank's part of the preparation has ended (successfully or not)."""
        return not self.thread.is_alive()

    def abandon(self) -> None:
        """At the job's end with an expansion prepared but never merged: tell the joiners to exit."""
        self.thread.join()
        if self.result is not None:
            _spawn.parent_go(self.world, self.result.inters, False)
            for inter in self.result.inters:
                inter.Free()
