"""Outputs that show malleability: size history, utilisation from the segments, resizes in the summary and the
CSVs, the Batsim-style jobs file (loaded with evalys), the Gantt with node rows; user policies and the declared
speedup from the command line."""

from __future__ import annotations

import csv
import json
import sys
import textwrap
import warnings

import numpy as np
import pytest

from malleable.cli import main
from malleable.controller import ResizeJob, StartJob, Wake, Workload, simulate, summary, synthetic, write_swf
from malleable.controller.sim import plot_result, utilization_curve, write_batsim_csv
from malleable.errors import ConfigError

from .test_engine import malleable_one, resize_at


def test_history_of_a_grown_job_by_hand():
    """Job 7 starts on 4 nodes at 0 and is grown to 8 at 50 (ends at 87.5): two segments, with their nodes."""
    r = simulate(malleable_one(), resize_at(50.0, 8, []), nodes=True)
    segs = r.segments(0)
    assert [(t, p) for t, p, _ in segs] == [(0.0, 4), (50.0, 8)]
    assert segs[0][2] == (0, 1, 2, 3) and segs[1][2] == (0, 1, 2, 3, 4, 5, 6, 7)
    t, busy = utilization_curve(r)
    assert list(t) == [0.0, 50.0, 87.5] and list(busy) == [4, 8, 0]
    assert summary(r)["resizes"] == 1 and summary(r)["resized_jobs"] == 1
    plain = simulate(malleable_one(), resize_at(50.0, 8, []))          # without node ids: sizes only
    assert [(t, p) for t, p, _ in plain.segments(0)] == [(0.0, 4), (50.0, 8)] and plain.segments(0)[0][2] is None


def test_interrupted_job_has_a_gap_then_restarts():
    w = Workload.from_jobs([(1, 0, 10, 10, 2), (2, 0, 4, 4, 2)], 3)
    r = simulate(w, "baseline", failures=[(2.0, 0, 3.0)], nodes=True)
    segs = r.segments(0)
    assert [p for _, p, _ in segs] == [2, 0, 2] and segs[1][0] == 2.0 and r.restarts[0] == 1
    t, busy = utilization_curve(r)
    assert busy.max() <= 3 and busy[-1] == 0
    area = float(np.sum(busy[:-1] * np.diff(t)))
    assert area == pytest.approx(float(r.area.sum()))


def test_utilisation_never_exceeds_the_machine_and_integrates_to_the_area():
    """A malleable run (the old curve drew each job at its start size and went above the machine)."""
    w = synthetic(600, machine=32, load=0.95, seed=4).with_malleable(1.0, seed=4)
    r = simulate(w, "fpsma-pwma")
    assert r.resizes.sum() > 100
    t, busy = utilization_curve(r)
    assert busy.max() <= 32 and busy.min() >= 0 and busy[-1] == 0
    assert float(np.sum(busy[:-1] * np.diff(t))) == pytest.approx(float(r.area.sum()), rel=1e-9)
    naive = np.cumsum(np.r_[r.size, -r.size][np.lexsort((np.r_[r.size, -r.size], np.r_[r.start, r.end]))])
    assert naive.max() > 32                 # what the start-size curve drew on this run
    s = summary(r)
    assert s["resizes"] == int(r.resizes.sum()) == r.decisions["ResizeJob"]
    assert s["resized_jobs"] == int(np.count_nonzero(r.resizes))


def test_batsim_csv_loads_in_evalys_with_one_row_per_segment(tmp_path):
    evalys_jobset = pytest.importorskip("evalys.jobset")
    w = synthetic(300, machine=16, load=0.9, seed=2).with_malleable(0.5, seed=2)
    r = simulate(w, "fpsma-pwma", nodes=True)
    out = tmp_path / "jobs.csv"
    write_batsim_csv(r, out)
    rows = list(csv.DictReader(out.open()))
    assert {int(x["job_id"]) for x in rows} == set(w.ids.tolist())
    held = sum(float(x["execution_time"]) * _count(x["allocated_resources"]) for x in rows)
    assert held == pytest.approx(float(r.area.sum()), rel=1e-6)
    resized = [x for x in rows if int(x["resizes"]) > 0]
    assert resized and max(int(x["segment"]) for x in resized) >= 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # evalys' own pandas deprecations
        js = evalys_jobset.JobSet.from_csv(str(out))
    assert len(js.df) == len(rows) and js.MaxProcs <= 16
    with pytest.raises(ConfigError, match="nodes=True"):
        write_batsim_csv(simulate(w, "easy"), tmp_path / "x.csv")


def _count(alloc: str) -> int:
    n = 0
    for part in alloc.split():
        a, _, b = part.partition("-")
        n += int(b or a) - int(a) + 1
    return n


def test_cli_outputs_with_resizes(tmp_path, capsys):
    trace = tmp_path / "t.swf"
    write_swf(synthetic(200, machine=16, load=0.9, seed=3), trace)
    out = {k: tmp_path / f"o.{k}" for k in ("json", "csv", "png", "bat")}
    assert main(["simulate", "--trace", str(trace), "--malleable", "1.0", "--policy", "fpsma-pwma", "--speedup",
                 "declared", "--json", str(out["json"]), "--jobs-csv", str(out["csv"]), "--plot", str(out["png"]),
                 "--batsim-csv", str(out["bat"])]) == 0
    text = capsys.readouterr().out
    s = json.loads(out["json"].read_text())
    assert s["resizes"] > 0 and f"resizes      {s['resizes']} ({s['resized_jobs']} jobs resized)" in text
    rows = list(csv.DictReader(out["csv"].open()))
    assert sum(int(x["resizes"]) for x in rows) == s["resizes"]
    assert out["png"].read_bytes()[:4] == b"\x89PNG" and out["bat"].read_text().startswith("job_id,")


def test_gantt_with_node_rows_and_without(tmp_path):
    r = simulate(malleable_one(), resize_at(50.0, 8, []), nodes=True)
    plot_result(r, tmp_path / "a.png")
    plot_result(simulate(malleable_one(), resize_at(50.0, 8, [])), tmp_path / "b.png")
    assert (tmp_path / "a.png").read_bytes()[:4] == (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"


USER_POLICY = """
from malleable.controller import StartJob

def smallest_first(snapshot, now):
    out, free = [], snapshot.free
    for job in sorted(snapshot.queue, key=lambda j: (j.procs, j.submit)):
        if job.procs <= len(free):
            out.append(StartJob(job.id, free[:job.procs]))
            free = free[job.procs:]
    return out
"""


def test_user_policies_from_the_command_line(tmp_path, monkeypatch, capsys):
    """``--policy package.module:function`` and a name published in the entry-point group malleable.policies."""
    pkg = tmp_path / "mypolicies"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "sjf.py").write_text(USER_POLICY)
    dist = tmp_path / "mypolicies-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mypolicies\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent("""\
        [malleable.policies]
        smallest = mypolicies.sjf:smallest_first
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    trace = tmp_path / "t.swf"
    rows = [(1, 0, 100, 100, 8), (2, 1, 50, 60, 8), (3, 2, 10, 10, 2)]
    write_swf(Workload.from_jobs(rows, 10), trace)
    waits = {}
    for name in ("mypolicies.sjf:smallest_first", "smallest", "fcfs"):
        j = tmp_path / f"{name.replace(':', '_')}.json"
        assert main(["simulate", "--trace", str(trace), "--policy", name, "--json", str(j)]) == 0, name
        waits[name] = json.loads(j.read_text())["mean_wait"]
    assert waits["mypolicies.sjf:smallest_first"] == waits["smallest"] == pytest.approx(33.0)
    assert waits["fcfs"] == pytest.approx(float(simulate(Workload.from_jobs(rows, 10), "fcfs").wait.mean()))
    assert waits["fcfs"] > waits["smallest"]
    assert main(["simulate", "--trace", str(trace), "--policy", "mypolicies.sjf:nope"]) == 1
    assert "Traceback" not in capsys.readouterr().err
    sys.modules.pop("mypolicies.sjf", None)
    sys.modules.pop("mypolicies", None)


def test_a_policy_that_keeps_ids_of_resized_jobs_sees_node_runs():
    """Resizes through the lazy node runs: grow with ``nodes + free[:k]``, shrink with ``nodes[:k]``."""
    def policy(s, now):
        if s.queue:
            return [StartJob(s.queue[0].id, s.free[:4]), Wake(20.0), Wake(40.0)]
        if now == 20.0:
            return [ResizeJob(s.running[0].id, s.running[0].nodes + s.free[:4])]
        if now == 40.0:
            return [ResizeJob(s.running[0].id, s.running[0].nodes[:2])]
        return []
    r = simulate(malleable_one(run=100.0, est=400.0), policy, nodes=True)
    assert [(t, p) for t, p, _ in r.segments(0)] == [(0.0, 4), (20.0, 8), (40.0, 2)]
    assert r.segments(0)[2][2] == (0, 1)
