"""The parents' side of an expansion: synchronous, or prepared in a thread while the job computes.

``prepare`` spawns the groups and waits until every joiner asks to merge, so that only the merge is left;
``Background`` runs it on a duplicate of the world in a thread (MaM's threaded spawn, Invasive MPI's latency
hiding), and the runtime merges at the first probe at which every rank's thread is done. ``finish`` merges, tells
the joiners the job's state in the same step and returns the new world.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from malleable.errors import AdaptError
from malleable.runtime import _spawn
from malleable.runtime._layout import ExpandPlan, GroupLayout, apply_expand, plan_expand, split_hosts
from malleable.runtime._sources import choose_hosts
from malleable.runtime._types import Resize

__all__ = ["Background", "Prepared", "finish", "prepare"]


@dataclass
class Prepared:
    """Spawned and ready groups waiting for the merge."""

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
    """Spawn the processes of decision ``d`` and wait until they ask to merge; collective over ``world`` (the job's
    world or a dup).

    Raises:
        AdaptError: on every rank of ``world`` when a group could not be started or is not ready in time.
    """
    t0 = time.perf_counter()
    hosts = d.hosts or choose_hosts(rt.layout, rt.job_hosts, d.procs - rt.layout.world_size)
    plan = plan_expand(rt.layout, d.procs, hosts)
    if world.rank == 0 and rt.listener is None:
        raise AdaptError("internal: rank 0 has no liveness listener")
    inters = _spawn.parent_spawn(world, plan, rt.timeout, rt.leftovers, initial=kind == "initial")
    gids = [plan.first_gid + i for i in range(len(inters))]
    _spawn.parent_ready(world, inters, rt.timeout, rt.leftovers, go=not overlap)
    return Prepared(d, kind, plan, inters, gids, world.size, t0, overlap, time.perf_counter() - t0)


def joiner_context(rt: Any, p: Prepared, registered: dict) -> dict:
    """Everything a joiner learns at the merge (rank 0's view of the job, now)."""
    return {
        "kind": p.kind, "gids": p.gids, "counts": list(p.plan.counts), "layout": rt.layout, "probes": rt.probes,
        "plan": rt.plan_text, "steps": rt.plan, "timeout": rt.timeout, "job_hosts": list(rt.job_hosts),
        "liveness": rt.listener.endpoint(), "decision": [p.decision.procs, list(p.decision.hosts)],
        "local_source": bool(getattr(rt.source, "local", True)),
        "slots": [rt.slots.cores, rt.slots.per_host, [list(x) for x in rt.slots.hostfile]],
        "stale": rt.leftovers.stale, "registered": registered,
    }


def finish(world: Any, layout: GroupLayout, p: Prepared, ctx: dict | None) -> tuple[_spawn.Merged, GroupLayout, dict]:
    """Merge the prepared groups into ``world``; returns the merged communicators, the layout after it and rank
    0's ``ctx``.

    One ``allgather`` over the new world completes the expansion: rank 0 gives the joiners ``ctx``
    (:func:`joiner_context`: the job's probe count, which moved on while an overlapped expansion was prepared, its
    plan, layout, the registered arrays to move at the commit, ...) and every joiner tells where it runs.
    """
    if p.overlap:
        _spawn.parent_go(world, p.inters)
    merged = _spawn.parent_merge(world, p.inters)
    rows = merged.world.allgather(ctx)   # joiners give their host, in rank order
    return merged, apply_expand(layout, p.plan, split_hosts(rows[p.n_old:], p.plan.counts)), rows[0]


@dataclass
class Background:
    """An expansion prepared in a thread on ``world`` (a duplicate of the job's world, owned here)."""

    decision: Resize
    world: Any
    result: Prepared | None = None
    error: AdaptError | None = None
    cancel: tuple[Resize, bool] | None = None   # a newer decision, carried out once this one is given up
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

    def abandon(self, timeout: float, leftovers: _spawn.Leftovers) -> None:
        """At the job's end with an expansion prepared but never merged: tell the joiners to exit."""
        self.thread.join()
        if self.result is not None:
            _spawn.abandon(self.world, self.result.inters, timeout, leftovers)
