"""Builders of hand-made snapshots and small malleable workloads for the policy tests."""

from __future__ import annotations

import numpy as np

from malleable.controller import Job, JobKind, RunningJob, Snapshot, Workload


def mjob(id, procs, est, lo=None, hi=None, submit=0.0, kind=JobKind.MALLEABLE, rho=0.0, serial=0.0, priority=0):
    """A job record; malleable by default with min ``lo`` and max ``hi``."""
    if kind is JobKind.RIGID:
        lo = hi = procs
    return Job(id, submit, procs, est, kind, procs if lo is None else lo, procs if hi is None else hi, serial,
               rho, priority)


def running(job, nodes, start=0.0, end=None, since=None, resizes=0, mtct=None):
    """A running view of ``job`` on ``nodes`` (a tuple of ids or a count starting at 100*id)."""
    if isinstance(nodes, int):
        nodes = tuple(range(100 * job.id, 100 * job.id + nodes))
    end = start + job.estimate if end is None else end
    return RunningJob(job, tuple(nodes), len(nodes), start, start if since is None else since, 0.0, end, resizes,
                      mtct)


def snap(now, free, run=(), queue=(), machine=None):
    """A snapshot with ``free`` free nodes (ids 0..free-1) or an explicit tuple."""
    free = tuple(range(free)) if isinstance(free, int) else tuple(free)
    run = tuple(sorted(run, key=lambda r: r.end_estimate))
    nodes = set(free) | {x for r in run for x in r.nodes}
    return Snapshot(now, tuple(sorted(nodes)) if machine is None else tuple(range(machine)), free, run,
                    tuple(queue))


def workload(rows, machine, name="test"):
    """A workload from ``(id, submit, run, est, procs, kind, min, max, serial, rho)`` rows (kind 0/1/2)."""
    cols = list(zip(*rows))
    w = Workload(np.array(cols[0], dtype=np.int64), np.array(cols[1], dtype=np.float64),
                 np.array(cols[2], dtype=np.float64), np.array(cols[3], dtype=np.float64),
                 np.array(cols[4], dtype=np.int32), machine, np.array(cols[5], dtype=np.int8),
                 np.array(cols[6], dtype=np.int32), np.array(cols[7], dtype=np.int32),
                 np.array(cols[8], dtype=np.float64), name=name, rho=np.array(cols[9], dtype=np.float64))
    return w
