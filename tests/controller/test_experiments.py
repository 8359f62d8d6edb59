"""Experiments as evidence: the interval over seeds (against a known distribution), the verdict rules, runs that
are deterministic for a seed, the driver (resumable, never over the committed results) and
``malleable simulate --experiment``; the committed results are computed from their runs table."""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from malleable.cli import main
from malleable.controller.experiments import (
    EXPERIMENTS,
    RUNS_TABLE,
    Above,
    Below,
    Near,
    Run,
    Verdict,
    estimate,
    judge,
    run_experiments,
    w2,
)
from malleable.controller.experiments._results import analyse
from malleable.controller.experiments._runner import run_task
from malleable.controller.experiments._stats import t_quantile

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "benchmarks" / "results" / "experiments"


# -- intervals ------------------------------------------------------------------------------------------------

def test_the_interval_is_students_t_over_the_seeds():
    e = estimate(range(1, 11))                    # mean 5.5, s = sqrt(55/6)
    half = 2.2621571628 * math.sqrt(55 / 6) / math.sqrt(10)
    assert e.mean == pytest.approx(5.5) and e.n == 10
    assert (e.lo, e.hi) == pytest.approx((5.5 - half, 5.5 + half), rel=1e-9)
    assert t_quantile(0.95, 1) == pytest.approx(12.7062047, rel=1e-6)
    one = estimate([3.0])
    assert (one.mean, one.lo, one.hi, one.n) == (3.0, 3.0, 3.0, 1)
    assert estimate([2.0, 2.0, 2.0]).half == 0.0
    assert estimate([float("nan"), 1.0, 3.0]).n == 2 and estimate([]).n == 0


def test_the_interval_covers_the_mean_of_a_known_distribution_95_percent_of_the_time():
    rng = np.random.default_rng(7)
    samples = rng.normal(3.0, 2.0, (4000, 10))
    hits = [(e := estimate(x)).lo <= 3.0 <= e.hi for x in samples]
    assert 0.94 <= float(np.mean(hits)) <= 0.96
    # skewed: exponential of mean 1 with 10 seeds still covers close to nominal
    hits = [(e := estimate(x)).lo <= 1.0 <= e.hi for x in rng.exponential(1.0, (4000, 10))]
    assert 0.88 <= float(np.mean(hits)) <= 0.95



def test_a_statistic_that_cannot_be_negative_has_its_interval_cut_at_0():
    xs = [0.0, 0.0, 0.0, 0.0, 9.7]                   # an absolute difference over five seeds
    free, cut = estimate(xs), estimate(xs, floor=0.0)
    assert free.lo < 0.0 and cut.lo == 0.0 and (cut.mean, cut.hi) == (free.mean, free.hi)
    assert cut.text() == f"1.9 [0.0, {free.hi:.1f}]" and free.text() == f"1.9 ± {free.half:.1f}"
    assert estimate(range(1, 11), floor=0.0) == estimate(range(1, 11))      # far from the floor: unchanged
    # cutting keeps the coverage: |N(0.3, 1)| has mean E|X|, covered at least as often as without the cut
    rng = np.random.default_rng(11)
    true = float(np.mean(np.abs(rng.normal(0.3, 1.0, 2_000_000))))
    samples = np.abs(rng.normal(0.3, 1.0, (4000, 5)))
    free_hits = [(e := estimate(x)).lo <= true <= e.hi for x in samples]
    cut_hits = [(e := estimate(x, floor=0.0)).lo <= true <= e.hi for x in samples]
    assert free_hits == cut_hits

# -- verdicts -------------------------------------------------------------------------------------------------

def E(*xs):
    return estimate(xs)


def test_a_value_is_reproduced_when_the_interval_meets_its_rounding():
    rule = Near(-40.0, 0.5)
    v, why = judge(rule, E(-41, -42, -40.2), [])
    assert v is Verdict.REPRODUCED and "meets -40 ± 0.5" in why
    v, why = judge(rule, E(-46, -47, -45.5), [])
    assert v is Verdict.NOT_REPRODUCED and "below -40 ± 0.5" in why
    assert judge(rule, E(-39.6), [])[0] is Verdict.REPRODUCED                 # one run: the point itself
    assert judge(rule, E(-39.4), [])[0] is Verdict.NOT_REPRODUCED
    assert judge(None, E(1, 2), [])[0] is Verdict.NONE
    assert judge(rule, E(), [])[0] is Verdict.NOT_REPRODUCED


def test_a_direction_needs_the_whole_interval_on_its_side():
    assert judge(Below(0.0), E(-5, -6, -4), [])[0] is Verdict.REPRODUCED
    v, why = judge(Below(0.0), E(-5, 1, -3), [])
    assert v is Verdict.NOT_REPRODUCED and "no significant difference" in why
    v, why = judge(Below(0.0), E(5, 6, 4), [])
    assert v is Verdict.NOT_REPRODUCED and "opposite direction" in why
    assert judge(Above(1.0), E(1.5, 1.6, 1.55), [])[0] is Verdict.REPRODUCED
    assert judge(Above(1.0), E(1.5, 1.6), [])[0] is Verdict.NOT_REPRODUCED          # two seeds: t = 12.7
    assert judge(Above(1.0), E(0.5, 0.6, 0.55), [])[0] is Verdict.NOT_REPRODUCED


def test_a_control_with_the_same_effect_makes_it_confounded():
    ours, rigid = E(-41, -42, -40.2), E(-40.1, -41, -39.8)
    v, why = judge(Near(-40.0, 0.5), ours, [("rigid at min", rigid), ("rigid at max", E(10, 11, 12))])
    assert v is Verdict.CONFOUNDED and why.startswith("rigid at min gives it too") and "rigid at max" not in why
    assert judge(Near(-40.0, 0.5), ours, [("rigid at max", E(10, 11, 12))])[0] is Verdict.REPRODUCED
    # a control cannot rescue a number we do not reproduce
    assert judge(Near(-40.0, 0.5), E(-60, -61, -62), [("rigid at min", rigid)])[0] is Verdict.NOT_REPRODUCED
    assert judge(Below(0.0), E(-5, -6, -5.5), [("alpha = 0", E(-4, -5, -4.5))])[0] is Verdict.CONFOUNDED


def test_a_control_with_a_larger_effect_confounds_an_effect_but_not_a_value():
    ours, rigid = E(-46, -47, -48), E(-56, -57, -58)                 # the control gains more than the paper's -47%
    v, why = judge(Near(-47.0, 0.5, beyond=True), ours, [("rigid at min", rigid)])
    assert v is Verdict.CONFOUNDED and "rigid at min gives more" in why and "beyond -47" in why
    assert judge(Near(-47.0, 0.5), ours, [("rigid at min", rigid)])[0] is Verdict.REPRODUCED      # a plain value
    # a control changing the other way, or less, does not confound
    assert judge(Near(-47.0, 0.5, beyond=True), ours, [("max", E(50, 60, 55)), ("less", E(-10, -11, -12))])[0] \
        is Verdict.REPRODUCED


# -- runs -----------------------------------------------------------------------------------------------------

def test_every_experiment_plans_seeded_runs_and_claims():
    assert list(EXPERIMENTS) == ["001", "002", "000-mebf", "000-sfsj", "000-io", "003-w1", "003-w2", "004"]
    for name, exp in EXPERIMENTS.items():
        runs = exp.plan(3, True)
        assert runs and all(r.exp == name and r.quick for r in runs), name
        assert len({r.key for r in runs}) == len(runs), name                     # one key per run
        assert exp.claims(True) and exp.assumptions and exp.random, name
        if name not in ("003-w1", "000-sfsj"):          # fixed workloads (the trace of 000-sfsj is optional)
            assert {r.seed for r in runs} >= {0, 1, 2}, name


def test_a_run_is_deterministic_for_its_seed_and_differs_between_seeds():
    p = {"n": 1000, "arrival": "intensive", "klass": "MS", "fraction": 1.0, "load": 0.85, "scale": 100.0}
    a = run_task(Run("002", "1K intensive MS", "handoff", 3, True, p).task())
    b = run_task(Run("002", "1K intensive MS", "handoff", 3, True, p).task())
    c = run_task(Run("002", "1K intensive MS", "handoff", 4, True, p).task())
    assert a["metrics"] == b["metrics"] and a["metrics"]["resizes"] > 0
    assert c["metrics"]["mean_tat"] != a["metrics"]["mean_tat"]
    assert a["cpu_seconds"] > 0 and json.loads(json.dumps(a)) == a              # plain JSON, as the table stores it


def test_w2_mix_is_seeded():
    w = w2(0.5, seed=3)
    assert len(w) == 10 and int(w.procs[1]) == 16 and sorted(w.procs.tolist()) == [1, 1, 2, 2, 2, 4, 4, 8, 8, 16]
    assert int((w.kind == 2).sum()) == 5
    assert w2(0.5, seed=3).procs.tolist() == w.procs.tolist()
    assert any(w2(0.5, seed=s).procs.tolist() != w.procs.tolist() for s in range(4, 8))


def test_run_experiments_writes_results_and_resumes(tmp_path):
    docs = run_experiments(["003-w2"], tmp_path, quick=True, workers=1)
    doc = docs[0]
    assert doc["seeds"] == 2 and doc["kind"] == "experiment" and doc["commit"] and "malleable" in doc["command"]
    body = json.loads((tmp_path / "003-w2.json").read_text())
    assert body["table"] == doc["table"] and (tmp_path / "003-w2.html").read_text().startswith("<!doctype html>")
    rows = (tmp_path / RUNS_TABLE).read_text().splitlines()
    assert len(rows) == len(EXPERIMENTS["003-w2"].plan(2, True))
    row = {r["metric"] + "|" + r["scenario"]: r for r in doc["table"]}
    fcfs = row["makespan|rigid FCFS"]
    assert fcfs["ours"]["n"] == 2 and fcfs["verdict"] in ("reproduced", "not reproduced", "confounded")
    assert row["best makespan over every order|rigid FCFS, all orders"]["ours"]["n"] == 1
    # the same call again runs nothing: every run is in the table
    again = run_experiments(["003-w2"], tmp_path, quick=True, workers=1, report=False)[0]
    assert (tmp_path / RUNS_TABLE).read_text().splitlines() == rows and again["table"] == doc["table"]
    # an interrupted write (a cut last line) is run again, nothing else
    (tmp_path / RUNS_TABLE).write_text("\n".join(rows[:-1]) + "\n" + rows[-1][:40])
    run_experiments(["003-w2"], tmp_path, quick=True, workers=1, report=False)
    assert (tmp_path / RUNS_TABLE).read_text().splitlines()[:-1] == rows[:-1]          # the cut row ran again


DASK_RUN = """
import sys
from distributed import LocalCluster
from malleable.cli import main
if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        sys.exit(main(["simulate", "--experiment", "003-w1", "--quick", "--out", sys.argv[1],
                       "--dask", c.scheduler_address]))
"""


def test_a_dask_cluster_gives_the_same_results_as_local_processes(tmp_path):
    # the Dask cluster lives in a child interpreter, so that its helper processes end with it
    p = subprocess.run([sys.executable, "-c", DASK_RUN, str(tmp_path / "dask")], timeout=300, capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr[-3000:]
    local = run_experiments(["003-w1"], tmp_path / "local", quick=True, workers=1, report=False)[0]
    dask = json.loads((tmp_path / "dask" / "003-w1.json").read_text())
    assert dask["table"] == local["table"] and dask["runs"]["count"] == local["runs"]["count"]
    assert "--dask" in dask["command"]


def test_the_command_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--experiment", "003-w1", "--quick", "--no-progress"]) == 0
    out = capsys.readouterr().out
    made = [p for p in tmp_path.iterdir() if p.name.startswith("experiments-")]
    assert len(made) == 1 and (made[0] / "003-w1.json").exists() and (made[0] / "003-w1.html").exists()
    assert "wait of job 2" in out and "reproduced" in out
    assert main(["simulate", "--experiment", "nope"]) == 1
    assert "unknown experiment 'nope'" in capsys.readouterr().err
    assert main(["simulate", "--experiment", "003-w1", "--out", str(ROOT / "benchmarks" / "results")]) == 1
    assert "committed results" in capsys.readouterr().err
    assert main(["simulate", "--experiment", "003-w1", "--seeds", "0"]) == 1
    assert "--seeds must be >= 1" in capsys.readouterr().err


# -- the committed results ------------------------------------------------------------------------------------

def test_the_committed_results_are_computed_from_their_runs():
    rows = [json.loads(line) for line in gzip.open(COMMITTED / "runs.jsonl.gz", "rt")]
    for name, exp in EXPERIMENTS.items():
        doc = json.loads((COMMITTED / f"{name}.json").read_text())
        assert doc["seeds"] == (1 if name == "003-w1" else 10) and not doc["quick"], name
        again = analyse(exp, rows, doc["seeds"], False)
        assert again["table"] == doc["table"], name
        assert again["verdicts"] == doc["verdicts"], name
