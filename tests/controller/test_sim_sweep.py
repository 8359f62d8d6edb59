"""Sweeps: the same numbers run serially, on local processes and on a local Dask cluster; a resumed sweep runs only
the missing runs; bad sweep files fail with one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from malleable.cli import main
from malleable.controller import Workload, write_swf
from malleable.controller.sim._sweep import METRICS, load_sweep, read_table, run_one, run_sweep

SPEC = """
traces = ["synthetic:400:32:0.9", "small.swf"]
policies = ["fcfs", "easy", "conservative"]
seeds = [1, 2]
[grid]
malleable = [0.5]
"""


DASK_RUN = """
import sys
from distributed import LocalCluster
from malleable.controller.sim._sweep import load_sweep, run_sweep
if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        run_sweep(load_sweep(sys.argv[1]), sys.argv[2], dask=c.scheduler_address)
"""


@pytest.fixture
def spec(tmp_path):
    rows = [(i, 10 * i, 50 + 13 * (i % 7), 90 + 20 * (i % 5), 1 + i % 8) for i in range(1, 120)]
    write_swf(Workload.from_jobs(rows, 8), tmp_path / "small.swf")
    p = tmp_path / "sweep.toml"
    p.write_text(SPEC)
    return p


def numbers(rows):
    """Each run's metrics, without the wall time (the one column that differs between identical runs)."""
    return {r["key"]: tuple(r[k] for k in METRICS if k != "sim_seconds") for r in rows}


def test_serial_processes_and_dask_give_the_same_table(spec, tmp_path):
    runs = load_sweep(spec)
    assert len(runs) == 2 * 3 * 2 and len({r["key"] for r in runs}) == 12
    serial = run_sweep(runs, tmp_path / "serial.csv", workers=1)
    procs = run_sweep(runs, tmp_path / "procs.json", workers=2)
    # the Dask cluster lives in a child interpreter, so that its helper processes end with it
    subprocess.run([sys.executable, "-c", DASK_RUN, str(spec), str(tmp_path / "dask.csv")], check=True,
                   timeout=300, capture_output=True)
    dask = read_table(tmp_path / "dask.csv")
    assert len(serial) == len(procs) == len(dask) == 12
    assert numbers(serial) == numbers(procs) == numbers(dask)
    assert numbers(read_table(tmp_path / "serial.csv")) == numbers(serial)      # the CSV reads back the same
    assert numbers(read_table(tmp_path / "procs.json")) == numbers(serial)
    one = next(r for r in runs if r["policy"] == "easy" and r["trace"].endswith("small.swf"))
    assert numbers([run_one(one)])[one["key"]] == numbers(serial)[one["key"]]
    assert all(r["jobs"] in (400, 119) and r["machine"] in (32, 8) for r in serial)


def test_resumed_sweep_runs_only_the_missing_runs(spec, tmp_path):
    runs = load_sweep(spec)
    out = tmp_path / "t.csv"
    run_sweep(runs[:5], out, workers=1)
    ran: list[str] = []

    def runner(r):
        ran.append(r["key"])
        return run_one(r)
    rows = run_sweep(runs, out, workers=1, runner=runner)
    assert sorted(ran) == sorted(r["key"] for r in runs[5:])
    assert len(rows) == 12 and len(read_table(out)) == 12
    ran.clear()
    run_sweep(runs, out, workers=1, runner=runner)
    assert ran == []


def test_cli_sweep_and_bad_files(spec, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--sweep", str(spec), "--workers", "1", "--table", "out.json"]) == 0
    assert "12 runs (12 in out.json)" in capsys.readouterr().out
    assert len(json.loads((tmp_path / "out.json").read_text())) == 12
    bad = tmp_path / "bad.toml"
    for text, msg in [("traces = [", "not a valid sweep file"),
                      ('traces = ["x.swf"]\npolicies = ["easy"]', "trace not found"),
                      ('traces = ["synthetic:1:2"]\npolicies = ["easy"]', "bad synthetic trace"),
                      ('traces = ["synthetic:10:2:0.5"]\npolicies = ["nope"]', "unknown policy"),
                      ('traces = ["synthetic:10:2:0.5"]\npolicies = []', "non-empty list"),
                      ('traces = ["synthetic:10:2:0.5"]\npolicies = ["easy"]\nfoo = 1', "unknown sweep keys"),
                      ('traces = ["synthetic:10:2:0.5"]\npolicies = ["easy"]\n[grid]\nbar = [1]', "grid keys")]:
        bad.write_text(text)
        assert main(["simulate", "--sweep", str(bad)]) == 1
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err, (text, err)
    assert main(["simulate", "--sweep", str(spec), "--table", "t.txt"]) == 1
    assert "must end in .csv or .json" in capsys.readouterr().err
    assert not (tmp_path / "t.txt").exists()
