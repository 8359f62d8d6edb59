"""Metrics by hand, and ``malleable simulate`` end to end (JSON keys, CSV, plot, errors)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from malleable.cli import main
from malleable.controller import Workload, bounded_slowdown, simulate, summary, utilization_curve, write_swf

ROWS = [(1, 0, 10, 10, 6), (2, 1, 5, 5, 6), (3, 2, 2, 2, 2)]   # FCFS: starts 0, 10, 10


def test_summary_by_hand():
    r = simulate(Workload.from_jobs(ROWS, 10), "fcfs")
    s = summary(r, tau=10)
    # waits 0, 9, 8; bsld max(1,(0+10)/10)=1, (9+5)/10=1.4, (8+2)/10=1.0
    assert s["mean_wait"] == pytest.approx(17 / 3) and s["max_wait"] == 9
    assert s["mean_bsld"] == pytest.approx((1 + 1.4 + 1.0) / 3)
    assert s["makespan"] == 15                                         # last end 15 - first submit 0
    assert s["utilization"] == pytest.approx((10 * 6 + 5 * 6 + 2 * 2) / (10 * 15))
    assert list(bounded_slowdown(r, tau=1)) == pytest.approx([1.0, 14 / 5, 10 / 2])
    t, busy = utilization_curve(r)
    assert list(t) == [0, 10, 12, 15] and list(busy) == [6, 8, 6, 0]


def test_cli_simulate_outputs(tmp_path, capsys):
    trace = tmp_path / "t.swf"
    write_swf(Workload.from_jobs(ROWS, 10), trace)
    out_json, out_csv, out_png = tmp_path / "s.json", tmp_path / "j.csv", tmp_path / "p.png"
    rc = main(["simulate", "--trace", str(trace), "--policy", "easy", "--tau", "1", "--json", str(out_json),
               "--jobs-csv", str(out_csv), "--plot", str(out_png)])
    assert rc == 0
    s = json.loads(out_json.read_text())
    assert set(s) == {"policy", "jobs", "skipped", "mean_wait", "max_wait", "mean_bsld", "tau", "makespan",
                      "utilization", "resizes", "resized_jobs", "sim_seconds"}
    assert s["resizes"] == 0 and s["resized_jobs"] == 0
    assert s["policy"] == "easy" and s["jobs"] == 3 and s["tau"] == 1 and s["mean_wait"] == pytest.approx(9 / 3)
    rows = list(csv.DictReader(out_csv.open()))
    assert [r["start"] for r in rows] == ["0", "10", "2"]
    assert out_png.read_bytes()[:4] == b"\x89PNG"
    assert "mean bsld" in capsys.readouterr().out


def test_cli_synthetic_and_errors(tmp_path, capsys):
    assert main(["simulate", "--synthetic", "300", "--procs", "32", "--policy", "conservative",
                 "--json", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text())["jobs"] == 300
    bad = tmp_path / "bad.swf"
    bad.write_text("; MaxProcs: 4\n1 0 0 x 1 -1 -1 1 5 -1 1 1 1 -1 -1 1 -1 -1\n")
    assert main(["simulate", "--trace", str(bad), "--strict"]) == 1
    assert "bad.swf:2: malformed" in capsys.readouterr().err
    assert main(["simulate", "--trace", str(bad), "--tau", "0"]) == 1


def test_malleable_fraction_runs_rigid_policies():
    """Malleable jobs under the rigid policies start at their requested size and are never resized."""
    w = Workload.from_jobs([(i, i, 20, 30, 1 + i % 4) for i in range(1, 40)], 8).with_malleable(0.5, seed=1)
    r = simulate(w, "easy")
    assert np.array_equal(r.size, w.procs) and r.resizes.sum() == 0
