"""The experiments' reports (quick set-ups) and ``malleable simulate --experiment``."""

from __future__ import annotations

import json

import pytest

from malleable.controller.experiments import EXPERIMENTS, run_experiment, w2
from malleable.controller.sim._cli import add_simulate_parser
from malleable.errors import ConfigError


def test_experiment_registry():
    assert set(EXPERIMENTS) == {"001", "002", "000-mebf", "000-sfsj", "000-io", "003-w1", "003-w2",
                                "004"}


def test_w1_report_and_files(tmp_path):
    rep = run_experiment("003-w1", tmp_path, quick=True)
    rows = {(r.scenario, r.metric): r.ours for r in rep.rows}
    assert rows[("fcfs", "makespan")] == "2000 s" and rows[("fcfs", "wait of jobs 2, 3")] == "600, 700 s"
    body = json.loads((tmp_path / "003-w1.json").read_text())
    assert body["assumptions"] and len(body["rows"]) == len(rep.rows)
    assert (tmp_path / "003-w1.png").stat().st_size > 1000
    assert "published" in rep.table()


def test_w2_mix():
    w = w2(0.5)
    assert len(w) == 10 and int(w.procs[1]) == 16 and sorted(w.procs.tolist()) == [1, 1, 2, 2, 2, 4, 4, 8, 8, 16]
    assert int((w.kind == 2).sum()) == 5


def test_cli_experiment(tmp_path, capsys):
    import argparse
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers()
    add_simulate_parser(sub)
    args = ap.parse_args(["simulate", "--experiment", "003-w2", "--out", str(tmp_path), "--quick"])
    assert args.func(args) == 0
    assert "FPSMA+PWMA" in capsys.readouterr().out
    bad = ap.parse_args(["simulate", "--experiment", "nope"])
    with pytest.raises(ConfigError, match="known"):
        bad.func(bad)
