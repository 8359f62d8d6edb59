"""``malleable report``: one self-contained HTML page per results file (an experiment's, or one simulation's from
``simulate --results``), opened in headless Chromium, which must lay it out with its figures and without a script
error; the command's errors; the generated tables of docs/experiments.md match the committed results."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from malleable.cli import main
from malleable.controller.experiments import EXPERIMENTS, run_experiments
from malleable.controller.report import (
    DOCUMENTS,
    document_section,
    read_results,
    summary_table,
    update_generated,
)
from malleable.controller.report._format import cell
from malleable.controller.sim import write_swf
from malleable.controller.sim._record import binned
from malleable.controller.sim._workload import synthetic

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "benchmarks" / "results" / "experiments"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def w1_doc(tmp_path_factory):
    """The quick W1 experiment (one run per strategy: a Gantt chart with resizes on node rows)."""
    d = tmp_path_factory.mktemp("w1")
    return run_experiments(["003-w1"], d, quick=True, workers=1)[0], d


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)")
    return exe


def open_in_chromium(page: Path, tmp_path: Path) -> tuple[str, str]:
    """The DOM after the page's scripts ran, and Chromium's log (console messages included)."""
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    p = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr",
                        "--v=0", "--virtual-time-budget=5000", "--dump-dom", page.resolve().as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout, p.stderr


def test_the_page_holds_the_table_figures_and_provenance(w1_doc):
    doc, d = w1_doc
    page = (d / "003-w1.html").read_text()
    assert page.startswith("<!doctype html>") and page.count("<svg") >= 8     # claims, 5 Gantt, curves, distributions
    assert doc["commit"] in page and "malleable" in page and "Student t, 95 %" in page
    for row in doc["table"]:
        assert f'data-verdict="{row["verdict"]}"' in page
    assert 'class="v v-reproduced"' in page and 'class="v v-not-reproduced"' in page
    # self-contained: nothing is fetched
    assert not re.search(r'(src|href)="(https?:)?//', page) and "@import" not in page
    assert "nodes held over time" in page                                   # node rows: resizes show
    assert "Deviations from the document" in page and "static times" in page


def test_chromium_renders_an_experiment_page_without_script_errors(w1_doc, tmp_path):
    doc, d = w1_doc
    dom, log = open_in_chromium(d / "003-w1.html", tmp_path)
    body = re.search(r"<body[^>]*>", dom).group(0)
    assert 'data-rendered="ok"' in body, body
    shown, drawn = re.search(r'data-figures="(\d+)/(\d+)"', body).groups()
    assert int(shown) >= 8 and drawn == shown                                # every figure laid out
    assert "Uncaught" not in log and "SyntaxError" not in log, log[-2000:]
    assert '<pre id="script-errors"></pre>' in dom


def test_a_simulation_run_has_its_page(tmp_path, capsys):
    trace = tmp_path / "t.swf"
    write_swf(synthetic(150, machine=16, load=0.9, seed=3), trace)
    res = tmp_path / "run.json"
    assert main(["simulate", "--trace", str(trace), "--malleable", "1.0", "--policy", "fpsma-pwma",
                 "--failures", "20000,600", "--results", str(res), "--no-progress"]) == 0
    doc = json.loads(res.read_text())
    assert doc["kind"] == "simulation" and doc["command"].startswith("malleable simulate --trace")
    rec = doc["records"][0]
    assert rec["gantt"]["rows"] == "nodes" and rec["curves"]["utilisation"]["y"]
    assert any(len({s[2] for s in j["segments"]}) > 1 for j in rec["gantt"]["jobs"])          # a resize
    assert len(rec["distributions"]["wait"]["q"]) == 101
    capsys.readouterr()
    assert main(["report", str(res)]) == 0
    page = tmp_path / "run.html"
    assert f"wrote {page}" in capsys.readouterr().out
    dom, log = open_in_chromium(page, tmp_path)
    assert 'data-rendered="ok"' in dom and "Uncaught" not in log


def test_curves_are_exact_time_averages_of_step_functions():
    # 2 busy from t=0, 6 from t=3, 0 from t=5: averages over [0, 2), [2, 4), [4, 6)
    t, y = binned(np.array([0.0, 3.0, 5.0]), np.array([2.0, 6.0, 0.0]), 0.0, 6.0, bins=3)
    assert t == [0.0, 2.0, 4.0] and y == pytest.approx([2.0, 4.0, 3.0])
    assert binned(np.array([]), np.array([]), 0.0, 1.0) == ([], [])


def test_report_errors_are_one_line(tmp_path, capsys):
    summary = tmp_path / "s.json"
    summary.write_text(json.dumps({"policy": "easy", "mean_wait": 1.0}))
    assert main(["report", str(summary)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--results FILE" in err and not (tmp_path / "s.html").exists()
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main(["report", str(bad)]) == 1 and "not a JSON file" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "none.json")]) == 1 and "cannot read" in capsys.readouterr().err
    assert main(["report", str(bad), str(summary), "-o", str(tmp_path / "x.html")]) == 1
    assert "one results file" in capsys.readouterr().err


def test_the_committed_reports_and_the_docs_tables_come_from_the_results():
    docs = [read_results(COMMITTED / f"{name}.json") for name in EXPERIMENTS]
    for d in docs:
        page = (COMMITTED / f"{d['name']}.html").read_text()
        assert d["commit"] in page and d["command"] in html.unescape(page), d["name"]
        for r in d["table"]:
            assert html.escape(cell(r)) in page and f'data-verdict="{r["verdict"]}"' in page, (d["name"], r)
    text = (ROOT / "docs" / "experiments.md").read_text()
    sections = {"summary": summary_table(docs)}
    for key in DOCUMENTS:
        sections[key] = document_section([d for d in docs if d["name"].split("-")[0] == key],
                                         "../benchmarks/results/experiments")
    assert update_generated(text, sections) == text, "docs/experiments.md: run python benchmarks/experiments.py " \
                                                     "--docs-only"


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_the_committed_reports_open_in_chromium(name, tmp_path):
    dom, log = open_in_chromium(COMMITTED / f"{name}.html", tmp_path)
    body = re.search(r"<body[^>]*>", dom).group(0)
    shown, drawn = re.search(r'data-figures="(\d+)/(\d+)"', body).groups()
    assert 'data-rendered="ok"' in body and drawn == shown and int(shown) >= 1, body
    assert "Uncaught" not in log, log[-2000:]
