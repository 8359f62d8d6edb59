"""EPOP driver under mpiexec: phase order on base, joining and leaving ranks, and MTCT of sleep-timed phases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.runtime._helpers import MPI_ENV

PROG = Path(__file__).parent / "progs" / "epop_prog.py"


def test_synthetic_program_expand_then_shrink(mpi):
    # work runs 4 iterations twice (probes 1-8): 2 -> 3 before iteration 2 of the first visit,
    # 3 -> 2 before iteration 1 of the second; the joiner crosses the branch, then leaves.
    plan = [{"at_probe": 3, "procs": 3}, {"at_probe": 6, "procs": 2}]
    proc = mpi.run(2, mpi.python, str(PROG), env=dict(MPI_ENV, MALLEABLE_PLAN=json.dumps(plan)), timeout=150)
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert len(lines) == 3
    base = [x for x in lines if not x["left"]]
    (joiner,) = [x for x in lines if x["left"]]
    assert sorted(x["rank"] for x in base) == [0, 1] and all(x["size"] == 2 for x in base)

    works = [(e[1], e[2]) for e in base[0]["events"] if e[0] == "work"]
    assert works == [(0, 2), (1, 2), (2, 3), (3, 3), (0, 3), (1, 2), (2, 2), (3, 2)]
    assert [e[0] for e in base[0]["events"] if e[0] in ("again", "final")] == ["again", "again", "final"]
    assert ["staying", "expand", 2, 3] in base[0]["events"]
    assert ["staying", "shrink", 3, 2] in base[0]["events"]

    ev = joiner["events"]
    assert ev[0] == ["init", "JOINING"] and ev[1] == ["joining", "expand", 2, 3] and ev[2] == ["setup", 3]
    assert [(e[1], e[2]) for e in ev if e[0] == "work"] == [(2, 3), (3, 3), (0, 3)]
    assert ["again", 1] in ev and ev[-1] == ["leaving", "shrink", 3, 2]

    result = next(x["result"] for x in base if x["rank"] == 0)
    segs = [(s["visit"], s["procs"], s["first_iter"], s["iterations"]) for s in result["stats"]
            if s["phase"] == "work"]
    assert segs == [(1, 2, 0, 2), (1, 3, 2, 2), (2, 3, 0, 1), (2, 2, 1, 3)]
    for s in result["stats"]:
        if s["phase"] == "work":
            # 20 ms of 60 ms per iteration inside ctx.mpi(): 1/3, give or take sleep overshoot
            assert s["mtct"] == pytest.approx(1 / 3, abs=0.08), s
            assert 0.058 < s["iter_seconds"] < 0.3, s
        if s["phase"] == "final":
            assert s["mtct"] == pytest.approx(0.5, abs=0.08), s
    kinds = [(a["kind"], a["old_size"], a["new_size"], a["probe"]) for a in result["adaptations"]]
    assert kinds == [("expand", 2, 3, 3), ("shrink", 3, 2, 6)]
