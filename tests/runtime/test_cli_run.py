"""`malleable run`: command line building and refusals (no MPI needed), plus one real local run."""

from __future__ import annotations

import json
import os

import pytest

from malleable.cli import main
from tests._procs import run_all_or_kill
from tests.runtime._helpers import MPI_ENV, PROG


def test_dry_run_builds_one_anchor_with_the_job_in_its_environment(capsys, tmp_path):
    hf = tmp_path / "hosts"
    hf.write_text("# cluster\nnode1:2\nnode2\n")
    assert main(["run", "-n", "4", "--hostfile", str(hf), "--plan", '[{"at_probe": 2, "procs": 2}]',
                 "--timeout", "9", "--launcher-exec", "/x/netns-launch", "--max-procs-per-host", "4", "--dry-run",
                 "--", "python", "app.py"]) == 0
    out = capsys.readouterr().out.split()
    assert out[out.index("-n") + 1] == "1" and out[-2:] == ["python", "app.py"]
    assert out[out.index("-hosts") + 1] == "node1"
    genv = {out[i + 1]: out[i + 2] for i, w in enumerate(out) if w == "-genv"}
    assert genv["MALLEABLE_INITIAL_PROCS"] == "4" and genv["MALLEABLE_HOSTS"] == "node1,node1,node2"
    assert genv["MALLEABLE_ADAPT_TIMEOUT"] == "9.0" and genv["MPIR_CVAR_CH4_NETMOD"] == "ofi"
    assert "-launcher-exec" in out and "-localhost" in out


@pytest.mark.parametrize("args, message", [
    (["run", "-n", "0", "--", "python", "a.py"], "-n must be >= 1"),
    (["run", "-n", "2"], "no command to run"),
    (["run", "-n", "2", "--plan", "[{]", "--", "python", "a.py"], "not valid JSON"),
    (["run", "-n", "2", "--timeout", "-1", "--", "python", "a.py"], "--timeout must be > 0"),
    (["run", "-n", "2", "--hostfile", "/nonexistent/hosts", "--", "python", "a.py"], "cannot read hostfile"),
])
def test_refusals_are_clear(args, message, capsys):
    assert main(args) == 1
    assert message in capsys.readouterr().err


def test_run_starts_anchor_and_spawns_the_rest_locally(mpi):
    plan = [{"at_probe": 2, "procs": 1}]
    env = dict(os.environ, **MPI_ENV, PROG_ITERS="3")
    proc = run_all_or_kill([mpi.python, "-m", "malleable", "run", "-n", "3", "--plan", json.dumps(plan), "--",
                            mpi.python, str(PROG)], timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith('{"probe"')]
    assert [r["size"] for r in rows] == [3, 1, 1] and all(r["ok"] for r in rows)


def test_mpiexec_habits(tmp_path):
    """-np as mpiexec spells it; --rigid starts N processes of a program that never calls init_adapt; without
    it a Python program that never imports malleable is refused with one line before it runs, and any other
    command that never called init_adapt with one line after it ran, never silently as one process."""
    import sys

    run = [sys.executable, "-m", "malleable", "run"]
    hello = [sys.executable, "-m", "mpi4py.bench", "helloworld"]
    p = run_all_or_kill([*run, "-np", "2", "--rigid", "--", *hello], timeout=120)
    assert p.returncode == 0, p.stderr
    assert sorted(x.split(" on ")[0] for x in p.stdout.splitlines()) == [
        "Hello, World! I am process 0 of 2", "Hello, World! I am process 1 of 2"]
    p = run_all_or_kill([*run, "-n", "2", "--", *hello], timeout=120)
    assert p.returncode == 1 and p.stdout == ""                      # refused before it ran
    assert p.stderr == (
        "malleable run: error: -m mpi4py.bench never imports malleable, so it cannot call init_adapt() and would run "
        "as 1 process, not 2: use --rigid to start 2 processes as mpiexec -n does\n")
    p = run_all_or_kill([*run, "-n", "2", "--", "sh", "-c", " ".join(hello)], timeout=120)
    assert p.returncode == 1 and p.stdout.startswith("Hello, World! I am process 0 of 1")  # not Python: it ran
    assert p.stderr.strip().splitlines()[-1] == (
        "malleable run: error: the program never called init_adapt(), so it ran as 1 process, not 2: it is not "
        "malleable; use --rigid to start 2 processes as mpiexec -n does")
    p = run_all_or_kill([*run, "-np", "2", "--rigid", "--plan", "[]", "--", *hello], timeout=60)
    assert p.returncode == 1 and p.stderr.strip() == (
        "malleable run: error: --rigid starts a job that cannot be resized: --plan does not apply")
    out = tmp_path / "u.npy"
    p = run_all_or_kill([*run, "-np", "2", "--", sys.executable, "-m", "malleable.apps.jacobi", "--n", "64",
                         "--iters", "5", "--out", str(out)], timeout=120)
    assert p.returncode == 0 and out.exists(), p.stderr               # a malleable program under -np


def test_a_python_program_is_refused_only_when_nothing_it_imports_imports_malleable(tmp_path, monkeypatch):
    """The scan behind the refusal: local modules, packages and relative imports are followed; computed imports,
    code given with -c and non-Python commands get the benefit of the doubt."""
    from malleable.runtime._progscan import never_imports_malleable as never

    (tmp_path / "plain.py").write_text("import numpy\nfrom mpi4py import MPI\n")
    (tmp_path / "uses_helper.py").write_text("import helper\nhelper.go()\n")
    (tmp_path / "helper.py").write_text("def go():\n    from malleable import runtime as mr\n    mr.init_adapt()\n")
    (tmp_path / "dyn.py").write_text("import importlib\nimportlib.import_module('mall' + 'eable')\n")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "app.py").write_text("from .solver import run\nrun()\n")
    (pkg / "solver.py").write_text("import malleable.runtime as mr\ndef run():\n    mr.init_adapt()\n")
    (pkg / "other.py").write_text("from pkg import util\n")
    (pkg / "util.py").write_text("import os\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert never(["python3", "-u", "plain.py", "arg"]) == "plain.py"
    assert never(["python", "-X", "dev", str(tmp_path / "plain.py")]) == str(tmp_path / "plain.py")
    assert never(["python", "-m", "pkg.other"]) == "-m pkg.other"
    for cmd in (["python", "uses_helper.py"], ["python", "-m", "pkg.app"], ["python", "dyn.py"],
                ["python", "-c", "print(1)"], ["sh", "run.sh"], ["python", "-m", "malleable.apps.jacobi"],
                ["python", "missing.py"], ["python", "-m", "no_such_module"]):
        assert never(cmd) is None, cmd
