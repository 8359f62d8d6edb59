"""Answers to running jobs' size requests (evolving jobs: the application's ``request_adapt``).

A policy that honours requests calls :func:`answer_requests` on its snapshot; ``malleable-fill`` does, first
in each pass. The rule, oldest request first:

- a request for fewer nodes is granted at once (the job keeps its first nodes, as every shrink does);
- a request for more nodes is granted when enough nodes are free and no job is queued (a queued job comes
  first: the nodes would otherwise be taken from under it); else it stays outstanding (deferred) and is looked
  at again in every later pass;
- a range ``[min, max]`` asks for as many nodes as the job may have within it: the most the free nodes allow,
  at least ``min``;
- a request the job's size already answers is left alone (a granted request stands, so the application's
  size is known); requests that can never be met (outside the job's bounds, or the size it has) are declined
  by the controller before any policy sees them.
"""

from __future__ import annotations

from ._model import Decision, ResizeJob, RunningJob, SizeRequest, Snapshot

__all__ = ["answer_requests", "target_size"]


def target_size(req: SizeRequest, v: RunningJob, free: int) -> int:
    """The size that answers ``req`` for running job ``v`` with ``free`` nodes to spare (0: none now)."""
    job = v.job
    if req.procs:
        return req.procs if req.procs <= v.size + free else 0
    hi = min(req.max_procs or job.max_procs, job.max_procs, v.size + free)
    lo = max(req.min_procs, job.min_procs, 1)
    return hi if hi >= lo else 0


def answer_requests(snapshot: Snapshot) -> list[Decision]:
    """Grant, decline or leave each outstanding request of ``snapshot`` (see the module docstring)."""
    if not snapshot.requests:
        return []
    views = {r.id: r for r in snapshot.running}
    free = list(snapshot.free)
    queued = len(snapshot.queue) > 0
    out: list[Decision] = []
    for jid, req in sorted(snapshot.requests.items(), key=lambda kv: (kv[1].at, kv[0])):
        v = views.get(jid)
        if v is None:
            continue
        if req.procs == v.size:
            continue                                    # granted earlier: it stands
        k = target_size(req, v, 0 if queued else len(free))
        if not k or k == v.size:
            continue                                    # deferred: not enough free nodes now
        if k < v.size:
            out.append(ResizeJob(jid, tuple(v.nodes[:k])))
            free.extend(v.nodes[k:])
        else:
            out.append(ResizeJob(jid, (*v.nodes, *free[:k - v.size])))
            del free[:k - v.size]
    return out
