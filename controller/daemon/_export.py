"""What ran under a controller, as a workload the simulator replays (``malleable history --export FILE``).

Each completed job becomes one line of the simulator's JSON-lines format (:mod:`malleable.controller.sim._jobfile`):
its submission time (seconds from the first exported submission), its requested size and bounds, its time limit
as the estimate, its declared speedup, and its run time *at the requested size*, rebuilt from the measured size
history with the declared speedup model (``sum(dt_i / f(size_i))`` with ``f(n) = T(n) / T(procs)``), so a policy
that resizes differently in the replay gets the work right. What was measured is kept under ``measured`` (start,
end, size segments, reconfiguration seconds) to compare a replay with the live run.
"""

from __future__ import annotations

import os
from typing import Any

from malleable.controller.sched._model import Job, JobKind
from malleable.controller.sched._speedup import declared, speedup_params

from ._records import JobRec
from ._store import Store

__all__ = ["export_workload", "job_line"]


def job_line(j: JobRec, steps: list[dict[str, Any]], t0: float) -> dict[str, Any]:
    """The workload line of one ended job (``steps`` from :meth:`Store.steps`, ``t0`` the time origin)."""
    serial, rho = speedup_params(j.speedup or "linear")
    kind = JobKind.MALLEABLE if j.malleable else JobKind.RIGID
    job = Job(j.id, j.submit, j.nodes, j.time_limit, kind, j.min_nodes, j.max_nodes, serial, rho)
    starts = [i for i, s in enumerate(steps) if s["kind"] == "start"]
    seg = steps[starts[-1]:] if starts else []          # the last run (earlier ones were interrupted)
    bounds = [s["t"] for s in seg] + [j.end]
    work = sum((b - a) / declared(job, s["size"]) for s, a, b in zip(seg, bounds, bounds[1:], strict=False))
    start = seg[0]["t"] if seg else j.start
    return {
        "id": j.id, "submit": round(j.submit - t0, 6), "run": round(max(work, 0.0), 6),
        "estimate": j.time_limit, "procs": j.nodes, "kind": kind.value, "min": j.min_nodes, "max": j.max_nodes,
        "speedup": j.speedup or "linear", "name": j.name,
        "measured": {"start": round(start - t0, 6), "end": round(j.end - t0, 6),
                     "segments": [[round(s["t"] - t0, 6), s["size"]] for s in seg],
                     "reconfig": [s["seconds"] for s in seg if s.get("seconds") is not None]},
    }


def export_workload(store: Store, path: str | os.PathLike[str], machine: int) -> int:
    """Write every completed job of ``store`` as a workload of a ``machine``-node system; returns the count."""
    from malleable.controller.sim._jobfile import write_jobs

    jobs = [j for j in reversed(store.finished_jobs()) if str(j.state) == "COMPLETED" and j.start > 0]
    if not jobs:
        return write_jobs(path, [], machine)
    t0 = min(j.submit for j in jobs)
    lines = [job_line(j, store.steps(j.id), t0) for j in jobs]
    return write_jobs(path, lines, machine, origin=t0, controller=store.get_meta("controller_id") or "")
