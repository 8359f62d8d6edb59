"""Sections 3-4 of ``controller.py``, on the namespace test cluster: decision to new size, and a mixed workload
run live then replayed in the simulator with the same policy."""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

from _daemon_proc import TOKEN, _daemon, _stop, scratch

from malleable.launch._testbed import launcher as testbed_launcher  # the test cluster's ssh stand-in

HEAT = str(Path(__file__).resolve().parent.parent / "tests" / "controller" / "progs" / "heat_prog.py")


def _netns_ok() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if not all(os.path.exists(f"/run/netns/node{i}") for i in range(1, 5)):
        return "namespace hosts node1..node4 are not up (malleable testbed up 4)"
    return None


def _wait(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise TimeoutError(what)


def _final(c, ids, timeout):
    from malleable.controller.daemon import _protocol as P
    fin = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
    return _wait(lambda: (rows := {r["id"]: r for r in c.rows(P.History(0))}) and
                 all(rows.get(i, {}).get("state") in fin for i in ids) and rows, timeout, "jobs to end")


def bench_resize(cycles: int = 4) -> dict:
    from malleable.controller.daemon._client import Client

    tmp = scratch()
    state = os.path.join(tmp, "s.sqlite")
    _daemon(state, "--hosts", "node[1-4]", "--launcher-exec", str(testbed_launcher()),
            policy="malleable-fill")
    env = dict(os.environ, PROG_ITERS="100000", PROG_SLEEP="0.02", MALLEABLE_ADAPT_TIMEOUT="40")
    try:
        with Client(state=state, token=TOKEN.encode()) as c:
            m = c.submit([sys.executable, HEAT], 1, 1, 4, True, out=os.path.join(tmp, "m.out"), env=env)
            _wait(lambda: len(c.info(m).steps) >= 2, 60, "first expansion")
            for _ in range(cycles):
                r = c.submit(["sleep", "1"], 2, out=os.devnull, env=env)
                _final(c, [r], 60)
                n = len(c.info(m).steps)
                _wait(lambda n=n: c.info(m).steps[-1]["size"] == 4 and len(c.info(m).steps) >= n, 60,
                      "grow back")
            info = c.info(m)
    finally:
        _stop(state)
    out: dict = {"expand": [], "shrink": []}
    frees = [e["t"] for e in info.events if e["kind"] == "host-free"]
    for s in info.steps[1:]:
        row = {"size": s["size"], "decision_to_ack_s": s["t"] - s["decided"], "runtime_s": s["seconds"]}
        if s["kind"] == "shrink":
            after = [t for t in frees if t >= s["t"]]
            row["decision_to_hosts_checked_s"] = (max(after[:2]) - s["decided"]) if len(after) >= 2 else None
        out[s["kind"]].append(row)
    summary = {}
    for k, rows in out.items():
        if rows:
            summary[k] = {"n": len(rows),
                          "decision_to_ack_median_s": statistics.median(r["decision_to_ack_s"] for r in rows),
                          "runtime_median_s": statistics.median(r["runtime_s"] for r in rows)}
            checked = [r["decision_to_hosts_checked_s"] for r in rows if r.get("decision_to_hosts_checked_s")]
            if checked:
                summary[k]["decision_to_hosts_checked_median_s"] = statistics.median(checked)
    return {"steps": out, "summary": summary}


# the mixed workload: (submit offset s, kind, nodes or (min, max), seconds at its preferred size)
MIXED = [(0.0, "malleable", (1, 4), 12.0), (1.0, "rigid", 2, 4.0), (2.0, "malleable", (1, 2), 6.0),
         (4.0, "rigid", 3, 3.0), (6.0, "rigid", 1, 3.0), (8.0, "malleable", (1, 3), 6.0)]
ITER_WORK = 0.1   # seconds of work per iteration at one process (the malleable jobs' unit)


def bench_mixed(reconfig_s: float) -> dict:
    import numpy as np

    from malleable.controller import Simulator, Workload
    from malleable.controller.daemon._client import Client
    from malleable.controller.sched._fill import malleable_fill
    from malleable.controller.sched._speedup import amdahl

    tmp = scratch()
    state = os.path.join(tmp, "s.sqlite")
    _daemon(state, "--hosts", "node[1-4]", "--launcher-exec", str(testbed_launcher()),
            policy="malleable-fill")
    ids = []
    try:
        with Client(state=state, token=TOKEN.encode()) as c:
            t0 = time.time()
            for off, kind, size, secs in MIXED:
                time.sleep(max(0.0, t0 + off - time.time()))
                if kind == "rigid":
                    ids.append(c.submit(["sleep", str(secs)], size, out=os.devnull, time_limit=300))
                else:
                    env = dict(os.environ, PROG_ITERS=str(int(secs / ITER_WORK)), PROG_SLEEP="0",
                               PROG_WORK=str(ITER_WORK), MALLEABLE_ADAPT_TIMEOUT="40")
                    ids.append(c.submit([sys.executable, HEAT], size[0], size[0], size[1], True, time_limit=300,
                                        out=os.path.join(tmp, f"m{len(ids)}.out"), env=env))
            rows = _final(c, ids, 240)
    finally:
        _stop(state)
    live = [rows[i] for i in ids]
    sub0 = min(r["submit"] for r in live)
    live_wait = [r["start"] - r["submit"] for r in live]
    live_makespan = max(r["end"] for r in live) - sub0
    n = len(MIXED)
    kinds = np.array([2 if k == "malleable" else 0 for _, k, _, _ in MIXED])
    procs = np.array([s[0] if k == "malleable" else s for _, k, s, _ in MIXED])
    lo = procs.copy()
    hi = np.array([s[1] if k == "malleable" else s for _, k, s, _ in MIXED])
    subs = np.array([r["submit"] - sub0 for r in live])
    run = np.array([secs for *_, secs in MIXED])
    w = Workload(np.arange(1, n + 1), subs, run, np.full(n, 300.0), procs, 4, kinds, lo, hi, np.zeros(n))
    res = Simulator(w, malleable_fill, name="malleable-fill", speedup=amdahl,
                    reconfig_cost=lambda job, a, b: reconfig_s, node_ids=["node1", "node2", "node3", "node4"]).run()
    sim_wait = list(res.start - subs)
    return {"jobs": [{"kind": k, "size": s, "seconds": secs, "live_wait": lw, "sim_wait": float(sw),
                      "live_state": r["state"]} for (_, k, s, secs), lw, sw, r in zip(MIXED, live_wait, sim_wait, live,
                                                                                       strict=True)],
            "live_makespan_s": live_makespan, "sim_makespan_s": float(np.max(res.end) - 0.0),
            "live_mean_wait_s": statistics.mean(live_wait), "sim_mean_wait_s": statistics.mean(sim_wait),
            "sim_reconfig_cost_s": reconfig_s, "sim_resizes": int(res.resizes.sum())}
